
# Issue 8 sections 2 and 6 (contract items 1-3, 13): the readers never
# return wrong rows from a damaged generation.  Each input is a renamed copy
# of a real generation (several sealed segments and a newest raw one of
# several frames) with one damage:
#   - one bit flipped in a frame in the middle of the newest raw segment;
#   - a middle segment missing;
#   - a middle segment replaced by a symbolic link loop;
#   - a copy of segment 0 saved under another index;
#   - a first frame length of 0xFFFFFFF0 in the newest raw segment;
#   - a BEGIN message too short (entry and frame CRC made consistent, so
#     that the pgoutput parser is reached).
# wal_records() and wal_segments() must raise XX001 naming the file (and
# the offset where it is known), and scripts/cs_decode.py must exit 1
# naming the file, without a traceback.  An undamaged copy is the control:
# everything accepts it.
#
# Then the classes on which scripts/cs_decode.py and wal_records() once
# disagreed (t/018_fuzz.pl), each built on purpose, with the verdict of
# docs/FORMAT.md: wal_records(), changes() and verify() must all report the
# damage (XX001 naming the file and offset; verify() as a row), and
# cs_decode.py must exit 1 -- or, for what is sound, all must accept it:
#   - a position record out of order (written before the last frame:
#     frames swapped), section 11.6 rule 7;
#   - a position record repeated (a frame duplicated), section 9.3;
#   - a position entry holding data, section 8.1;
#   - a COMMIT whose end LSN is 0, section 11.6 rule 7;
#   - an Update message cut short inside a .wal.gz, and one with bytes
#     after its last field, section 11.5;
#   - the preamble of the newest raw segment lost (a change with no
#     Relation message before it in its segment), section 9.2;
#   - bytes appended after the gzip member of a .wal.gz, section 5.2;
#   - sound: an entry of an unknown kind, section 8.1, and a position
#     record that advances the position of record, section 9.3.
use strict;
use warnings;

use File::Basename;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;
use ArchiveDamage;

my $node = ad_new_archive('readers');
my $gen  = ad_newest_generation($node);
$node->stop;

my $n = 0;
sub copy_of { return ad_copy_generation($node, $gen, sprintf('%016x', 0xd00000 + ++$n)); }

# Each case: name => sub { damage the copy at $dir; return (file regex, offset or undef) }
my @cases = (
	[ 'bit flip mid newest raw segment' => sub {
		my ($name) = @_;
		my $seg = ad_newest_raw($node, $name);
		my $nf  = scalar @{ ad_parse_segment(ad_load($seg))->{frames} };
		die "newest raw segment has only $nf frames" if $nf < 3;
		my ($off) = ad_flip_in_frame($seg, int($nf / 2));
		return (quotemeta(basename($seg)), $off);
	} ],
	[ 'middle segment missing' => sub {
		my ($name) = @_;
		my @s   = ad_segments($node, $name);
		my $mid = $s[1];
		unlink $mid->{path} or die "unlink: $!";
		my $next = (grep { $_->{index} == $mid->{index} + 1 } @s)[0];
		return ('(?:' . sprintf('%016x', $mid->{index}) . '|'
			  . quotemeta(basename($next->{path})) . ')', undef);
	} ],
	[ 'middle segment replaced by a symlink loop' => sub {
		my ($name) = @_;
		my @s   = ad_segments($node, $name);
		my $mid = $s[1];
		unlink $mid->{path} or die "unlink: $!";
		symlink(basename($mid->{path}), $mid->{path}) or die "symlink: $!";
		return (quotemeta(basename($mid->{path})), undef);
	} ],
	[ 'copy of segment 0 under another index' => sub {
		my ($name) = @_;
		my @s   = ad_segments($node, $name);
		my $idx = $s[-1]{index} + 1;
		my $dst = dirname($s[0]{path}) . sprintf('/%016x.wal', $idx);
		$dst .= '.gz' if $s[0]{gz};
		system('cp', $s[0]{path}, $dst) == 0 or die "cp failed";
		return (quotemeta(basename($dst)), undef);
	} ],
	[ 'first frame length 0xFFFFFFF0 in the newest raw segment' => sub {
		my ($name) = @_;
		my $seg = ad_newest_raw($node, $name);
		my $nf  = scalar @{ ad_parse_segment(ad_load($seg))->{frames} };
		die "newest raw segment has only $nf frames" if $nf < 2;
		my $off = ad_set_frame_length($seg, 0, 0xFFFFFFF0);
		return (quotemeta(basename($seg)), $off);
	} ],
	[ 'BEGIN message too short' => sub {
		my ($name) = @_;
		my $seg = ad_newest_raw($node, $name);
		my $buf = ad_load($seg);
		my $segp = ad_parse_segment($buf);
		for my $f (@{ $segp->{frames} })
		{
			my $version = $segp->{header}{version};
			my @e = ArchiveDamage::ad_entries($f->{body}, $version);
			my $pos = 0;
			for my $e (@e)
			{
				if ($e->{kind} eq 'w' && substr($e->{data}, 0, 1) eq 'B')
				{
					$e->{data} = substr($e->{data}, 0, 5);    # 'B' + 4 of 20 bytes
					my $frame = ad_frame(ad_body($version, @e));
					substr($buf, $f->{offset}, 12 + $f->{length}) = $frame;
					ad_store($seg, $buf);
					return (quotemeta(basename($seg)), undef);
				}
			}
		}
		die "no BEGIN in the newest raw segment";
	} ],
);

# The newest raw segment of a copy: (path, bytes, parsed, version, position
# of record at its end).
sub newest_raw_parsed
{
	my ($name) = @_;
	my $seg  = ad_newest_raw($node, $name);
	my $buf  = ad_load($seg);
	my $p    = ad_parse_segment($buf);
	my $v    = $p->{header}{version};
	my $pos  = $p->{header}{start_lsn};
	for my $f (@{ $p->{frames} })
	{
		for my $e (ArchiveDamage::ad_entries($f->{body}, $v))
		{
			my $t = substr($e->{data}, 0, 1);
			if ($e->{kind} eq 'k') { $pos = $e->{wal_end} if $e->{wal_end} > $pos; }
			elsif ($e->{kind} eq 'w' && $t eq 'C')
			{
				my $end = unpack('Q>', substr($e->{data}, 10, 8));
				$pos = $end if $end > $pos;
			}
		}
	}
	return ($seg, $buf, $p, $v, $pos);
}

# A frame holding one entry of kind $kind (position walEnd $we, data $data).
sub one_entry_frame
{
	my ($v, $kind, $we, $data) = @_;
	return ad_frame(ad_body($v, { kind => $kind, data_start => 0, wal_end => $we,
		send_time => 850000000000000, data => $data // '' }));
}

# Rewrite the first entry of $seg for which $edit returns true (it changes
# the entry in place); returns the offset of its frame.
sub edit_entry
{
	my ($seg, $edit) = @_;
	my $buf = ad_load($seg);
	my $p   = ad_parse_segment($buf);
	my $v   = $p->{header}{version};
	for my $f (@{ $p->{frames} })
	{
		my @e = ArchiveDamage::ad_entries($f->{body}, $v);
		for my $i (0 .. $#e)
		{
			next unless $edit->($e[$i], \@e, $i);
			substr($buf, $f->{offset}, 12 + $f->{length}) = ad_frame(ad_body($v, @e));
			ad_store($seg, $buf);
			return $f->{offset};
		}
	}
	die "no entry to edit in $seg";
}

# name => sub { damage the copy; return (expected: 'damage' or 'sound',
# file regex, offset or undef) }
my @classes = (
	[ 'position record out of order (before the last frame)' => sub {
		my ($name) = @_;
		my ($seg, $buf, $p, $v, $pos) = newest_raw_parsed($name);
		my $last = $p->{frames}[-1];
		my $k    = one_entry_frame($v, 'k', $pos + 16);
		substr($buf, $last->{offset}, 0) = $k;
		ad_store($seg, $buf);
		# the last frame, now after the position record, goes back
		return ('damage', quotemeta(basename($seg)), $last->{offset} + length($k));
	} ],
	[ 'position record repeated (frame duplicated)' => sub {
		my ($name) = @_;
		my ($seg, $buf, $p, $v, $pos) = newest_raw_parsed($name);
		my $k = one_entry_frame($v, 'k', $pos + 16);
		ad_store($seg, $buf . $k . $k);
		return ('damage', quotemeta(basename($seg)), length($buf) + length($k));
	} ],
	[ 'position entry holding data' => sub {
		my ($name) = @_;
		my ($seg, $buf, $p, $v, $pos) = newest_raw_parsed($name);
		ad_store($seg, $buf . one_entry_frame($v, 'k', $pos + 16, 'B'));
		return ('damage', quotemeta(basename($seg)), length($buf));
	} ],
	[ 'COMMIT end LSN 0' => sub {
		my ($name) = @_;
		my $seg = ad_newest_raw($node, $name);
		my $off = edit_entry($seg, sub {
			my ($e) = @_;
			return 0 unless $e->{kind} eq 'w' && substr($e->{data}, 0, 1) eq 'C';
			substr($e->{data}, 10, 8) = pack('Q>', 0);
			return 1;
		});
		return ('damage', quotemeta(basename($seg)), $off);
	} ],
	[ 'Update message cut short in a .wal.gz' => sub {
		my ($name) = @_;
		my ($gz) = grep { $_->{gz} } ad_segments($node, $name);
		my $off = edit_entry($gz->{path}, sub {
			my ($e) = @_;
			return 0 unless $e->{kind} eq 'w' && substr($e->{data}, 0, 1) eq 'U';
			$e->{data} = substr($e->{data}, 0, length($e->{data}) - 3);
			return 1;
		});
		return ('damage', quotemeta(basename($gz->{path})), $off);
	} ],
	[ 'Update message with bytes after its last field' => sub {
		my ($name) = @_;
		my $seg = ad_newest_raw($node, $name);
		my $off = edit_entry($seg, sub {
			my ($e) = @_;
			return 0 unless $e->{kind} eq 'w' && substr($e->{data}, 0, 1) eq 'U';
			$e->{data} .= "\0\0";
			return 1;
		});
		return ('damage', quotemeta(basename($seg)), $off);
	} ],
	[ 'preamble of the newest raw segment lost' => sub {
		my ($name) = @_;
		my $seg = ad_newest_raw($node, $name);
		my $off = edit_entry($seg, sub {
			my ($e, $all, $i) = @_;
			return 0 unless $e->{kind} eq 's';
			@$all = grep { $_->{kind} ne 's' } @$all;
			return 1;
		});
		return ('damage', quotemeta(basename($seg)), undef);
	} ],
	[ 'bytes after the gzip member of a .wal.gz' => sub {
		my ($name) = @_;
		my ($gz) = grep { $_->{gz} } ad_segments($node, $name);
		my $size = length(ad_load($gz->{path}));
		open(my $fh, '>>:raw', $gz->{path}) or die "open: $!";
		print $fh "\x00garbage after the gzip member";
		close $fh or die "close: $!";
		return ('damage', quotemeta(basename($gz->{path})), $size);
	} ],
	[ 'entry of an unknown kind (sound)' => sub {
		my ($name) = @_;
		my ($seg, $buf, $p, $v, $pos) = newest_raw_parsed($name);
		ad_store($seg, $buf . one_entry_frame($v, 'x', 0, 'future'));
		return ('sound', undef, undef);
	} ],
	[ 'position record that advances the position (sound)' => sub {
		my ($name) = @_;
		my ($seg, $buf, $p, $v, $pos) = newest_raw_parsed($name);
		ad_store($seg, $buf . one_entry_frame($v, 'k', $pos + 16));
		return ('sound', undef, undef);
	} ],
);

my @damaged;
my @class_copies;
for my $c (@classes)
{
	my $dir = copy_of();
	my ($expect, $file_re, $off) = $c->[1]->(basename($dir));
	push @class_copies, [ $c->[0], basename($dir), $expect, $file_re, $off ];
}
my $control = copy_of();
my $control_name = basename($control);
for my $c (@cases)
{
	my $dir = copy_of();
	my ($file_re, $off) = $c->[1]->(basename($dir));
	push @damaged, [ $c->[0], basename($dir), $file_re, $off ];
}
$node->start;
cs_wait_state($node, 'streaming', name => 'streaming with the copies beside');

# control
{
	my $d = ad_decode(ad_gen_dir($node, $control_name));
	is($d->{rc}, 0, 'control: cs_decode.py accepts the undamaged copy') or diag($d->{err});
	my $real = $node->safe_psql('postgres',
		"SELECT count(*) FROM changestream.wal_records('$gen')");
	for my $f ("count(*) FROM changestream.wal_records('$control_name')",
		"count(*) FROM changestream.wal_segments('$control_name')")
	{
		my $r = ad_sql($node, "SELECT $f;");
		ok($r->{ok}, "control: SELECT $f succeeds") or diag($r->{err});
	}
	cmp_ok($node->safe_psql('postgres',
		"SELECT count(*) FROM changestream.wal_records('$control_name')"),
		'>', 1000, 'control: the copy holds the archived messages');
}

for my $c (@damaged)
{
	my ($label, $name, $file_re, $off) = @$c;
	for my $fn ('wal_records', 'wal_segments')
	{
		my $r = ad_sql($node, "SELECT count(*) FROM changestream.$fn('$name');");
		is($r->{sqlstate} // ($r->{ok} ? "no error: $r->{out} rows" : 'none'), 'XX001',
			"$label: $fn() raises XX001");
		like($r->{err}, qr/$file_re/, "$label: $fn() names the file")
		  or diag($r->{err});
		like($r->{err}, qr/offset $off\b/, "$label: $fn() names offset $off")
		  if defined $off;
	}
	my $d = ad_decode(ad_gen_dir($node, $name));
	is($d->{rc}, 1, "$label: cs_decode.py exits 1");
	like($d->{err}, qr/$file_re[^\n]*: offset \d+: /, "$label: cs_decode.py names the file")
	  or diag($d->{err});
	like($d->{err}, qr/: offset $off: /, "$label: cs_decode.py names offset $off")
	  if defined $off;
	unlike($d->{err}, qr/Traceback|internal error/, "$label: cs_decode.py without a traceback");
}

# the classes cs_decode.py and wal_records() disagreed on: every reader
# gives the verdict of docs/FORMAT.md
my $real_rows = $node->safe_psql('postgres',
	"SELECT count(*) FROM changestream.wal_records('$control_name')");
for my $c (@class_copies)
{
	my ($label, $name, $expect, $file_re, $off) = @$c;
	my $d = ad_decode(ad_gen_dir($node, $name));
	unlike($d->{err}, qr/Traceback|internal error/, "$label: cs_decode.py without a traceback");
	my $v = ad_sql($node, "SELECT file_name || ' at ' || byte_offset || ': ' || problem "
		  . "FROM changestream.verify('$name');");
	if ($expect eq 'sound')
	{
		is($d->{rc}, 0, "$label: cs_decode.py accepts it") or diag($d->{err});
		my $r = ad_sql($node, "SELECT count(*) FROM changestream.wal_records('$name');");
		is($r->{ok} ? $r->{out} : $r->{err}, $real_rows,
			"$label: wal_records() returns every message");
		$r = ad_sql($node, "SELECT count(*) FROM changestream.changes('$name');");
		ok($r->{ok}, "$label: changes() reads it") or diag($r->{err});
		is($v->{ok} ? $v->{out} : $v->{err}, '', "$label: verify() finds nothing");
		next;
	}
	is($d->{rc}, 1, "$label: cs_decode.py exits 1");
	like($d->{err}, qr/$file_re[^\n]*: offset \d+: /, "$label: cs_decode.py names the file")
	  or diag($d->{err});
	for my $fn ('wal_records', 'changes')
	{
		my $r = ad_sql($node, "SELECT count(*) FROM changestream.$fn('$name');");
		is($r->{sqlstate} // ($r->{ok} ? "no error: $r->{out} rows" : 'none'), 'XX001',
			"$label: $fn() raises XX001");
		like($r->{err}, qr/$file_re" is damaged at offset \d+/, "$label: $fn() names the file")
		  or diag($r->{err});
		like($r->{err}, qr/offset $off\b/, "$label: $fn() names offset $off")
		  or diag($r->{err})
		  if defined $off;
	}
	like($v->{out}, qr/$file_re at \d+: /, "$label: verify() reports it")
	  or diag($v->{out} . $v->{err});
	like($v->{out}, qr/ at $off: /, "$label: verify() names offset $off")
	  if defined $off;
}

$node->stop;
done_testing();
