
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
			my @e = ArchiveDamage::ad_entries($f->{body});
			my $pos = 0;
			for my $e (@e)
			{
				if ($e->{kind} eq 'w' && substr($e->{data}, 0, 1) eq 'B')
				{
					$e->{data} = substr($e->{data}, 0, 5);    # 'B' + 4 of 20 bytes
					my $frame = ad_frame(ad_body(@e));
					substr($buf, $f->{offset}, 12 + $f->{length}) = $frame;
					ad_store($seg, $buf);
					return (quotemeta(basename($seg)), undef);
				}
			}
		}
		die "no BEGIN in the newest raw segment";
	} ],
);

my @damaged;
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

$node->stop;
done_testing();
