# Format versions 1, 2 and 3 (issue 13 item 3 and its archive-size target,
# issue 11's time bounds).  Format 2 segments (the archiver's own entries
# rewritten as format 2 by t/to_format1.py --version 2, which encodes from
# docs/FORMAT.md alone), and the upgrade in place from them, are in
# t/031_format_upgrade.pl.
#
# 1. A format 1 archive written by changestream before format 2
#    (t/fixtures/format1, made by t/fixtures/make_format1.sh with main at
#    e335a00) reads back today exactly as that code read it: wal_records(),
#    changes(), wal_segments() and verify() give what it gave, and
#    scripts/cs_decode.py accepts it.
# 2. What is written now is format 3: 128-byte headers, every segment with
#    a successor has a seal, BEGIN and COMMIT are 'b' and 'c' entries
#    without data; verify() and cs_decode.py accept it.  Format 3's own
#    rules (docs/FORMAT.md section 8.3) make a frame invalid, with a
#    matching CRC: a 'b' entry with a data length, a 'c' entry whose flags
#    exceed 255, a 'c' entry whose fields run past the fields section.
#    Each is XX001 naming the segment for changes() and verify(), and
#    damage for cs_decode.py.
# 3. Time bounds: changes(start_time, end_time) gives exactly the rows of
#    changes() whose commit time lies in the bounds, and as many as the
#    pgbench transactions run in that window made (4 changes each).  It
#    skips sealed segments outside the bounds (DEBUG lines), and it never
#    opens their bodies: after the body of such a segment is damaged, the
#    bounded call still succeeds with the same rows, while the unbounded
#    call and verify() report XX001 naming that segment.
use strict;
use warnings;

use File::Copy;
use FindBin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;
use ArchiveDamage;

my $node = cs_new_node('fmt',
	conf => "changestream.segment_size = '64kB'\nchangestream.message_prefixes = 'fx'\n");
$node->start;
my $db = 'postgres';
cs_pgbench($node, $db, '-i', '-s', '1', '-q');
$node->safe_psql($db, "CREATE EXTENSION changestream; CREATE PUBLICATION changestream FOR ALL TABLES;");
cs_start_archiving($node);
my $archive = cs_archive_dir($node);
my $utc = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET extra_float_digits = 1;";

sub slurp
{
	my ($path) = @_;
	open(my $fh, '<:raw', $path) or die "$path: $!";
	local $/;
	my $s = <$fh>;
	close $fh;
	return $s;
}

sub decode
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'python3', "$FindBin::Bin/../scripts/cs_decode.py", '--summary', @_ ],
		'>', \$out, '2>', \$err);
	return ($? >> 8, $out, $err);
}


# ---- 1. the format 1 fixture
my $fixdir = "$FindBin::Bin/fixtures/format1";
opendir(my $dh, $fixdir) or die "$fixdir: $!";
my ($fixgen) = grep { /^[0-9a-f]{16}$/ } readdir($dh);
closedir $dh;
system('cp', '-a', "$fixdir/$fixgen", "$archive/generations/$fixgen") == 0 or die "cp failed";
system('chmod', '-R', 'u+rwX,go-rwx', "$archive/generations/$fixgen");
system('chown', '-R', '--reference=' . $archive, "$archive/generations/$fixgen") if $> == 0;
my $seg0 = ad_load("$archive/generations/$fixgen/wal/0000000000000000.wal.gz");
is(unpack('N', substr($seg0, 8, 4)), 1, 'the fixture is format version 1');

my %queries = (
	'wal_records.out' => "SELECT lsn, wal_end, sent_at, md5(data) FROM changestream.wal_records('$fixgen')",
	'changes.out' => "SELECT commit_lsn, commit_time, xid, ordinal, action, schema_name, table_name, md5(old_row::text), md5(new_row::text), unchanged_columns FROM changestream.changes('$fixgen')",
	'wal_segments.out' => "SELECT segment_index, start_lsn, end_lsn, compressed FROM changestream.wal_segments('$fixgen')",
	'verify.out' => "SELECT * FROM changestream.verify('$fixgen')");
for my $f (sort keys %queries)
{
	my $got = $node->safe_psql($db, "$utc COPY ($queries{$f}) TO STDOUT");
	my $want = slurp("$fixdir/$f");
	chomp $want;
	# the fixture was recorded on PostgreSQL 15; 19 prints pg_lsn with
	# the low half padded to 8 digits: compare LSNs in one form
	s{(?<![0-9A-Za-z/])([0-9A-F]{1,8})/([0-9A-F]{1,8})(?![0-9A-Za-z/])}
	 {cs_lsn_file_text("$1/$2")}ge for ($got, $want);
	if ($f eq 'wal_segments.out')
	{
		# the newest segment's end was the live flushed position when the
		# fixture was made; now it is the position of record (FORMAT.md 10)
		s/\t[^\t]+\t([tf])\z/\t-\t$1/ for ($got, $want);
	}
	is($got, $want, "format 1 fixture: $f as the format 1 code returned it");
}
my ($want_records) = (slurp("$fixdir/wal_records.out") =~ tr/\n//);
cmp_ok($want_records, '>', 400, "the fixture holds $want_records messages");
my ($rc, $out, $err) = decode("$archive/generations/$fixgen");
is($rc, 0, 'cs_decode.py accepts the format 1 fixture') or diag($err);

# ---- 2. bursts of pgbench transactions, apart in time
sub burst
{
	my ($n) = @_;
	cs_pgbench($node, $db, '-n', '-c', '1', '-t', $n);
	cs_wait_archived($node, name => "burst of $n");
}
# segments rotate in every pause between bursts (segment_timeout, checked
# while idle too), so none holds two bursts
$node->safe_psql($db, "ALTER SYSTEM SET changestream.segment_timeout = '1s'; SELECT pg_reload_conf();");
burst(600);
sleep 2.5;
my $t1 = $node->safe_psql($db, "SET DateStyle = 'ISO, MDY'; SELECT now()");
my $before = $node->safe_psql($db, "SELECT count(*) FROM pgbench_history");
burst(300);
my $after = $node->safe_psql($db, "SELECT count(*) FROM pgbench_history");
my $t2 = $node->safe_psql($db, "SET DateStyle = 'ISO, MDY'; SELECT now()");
my $digest_sql = "SELECT md5(string_agg(t::text, '|' ORDER BY aid)) FROM %s t";
my $digest_t2 = $node->safe_psql($db, sprintf($digest_sql, 'pgbench_accounts'));
sleep 2.5;
burst(600);
sleep 2.5;
burst(5);
my $gen = $node->safe_psql($db, "SELECT generation FROM changestream.status()");
# list once the maintenance worker has compressed every sealed segment, so
# that no file listed is renamed under the checks below
cs_poll($node, $db, "SELECT raw_sealed_segments = 0 FROM changestream.status()", 't', 120);
# by index, one file each (never a .wal.gz.tmp being written)
my @segs = map { $_->{path} } ad_segments($node, $gen);
cmp_ok(scalar(@segs), '>=', 6, scalar(@segs) . ' segments written');
my ($v3, $sealed) = (0, 0);
my %kinds;
my $bad_bc = 0;
for my $i (0 .. $#segs - 1)
{
	# the maintenance worker may compress a raw segment after the listing:
	# then its .gz twin holds the same bytes
	my $buf = eval { ad_load($segs[$i]) };
	$buf = ad_load("$segs[$i].gz") if !defined $buf && $segs[$i] =~ /\.wal$/;
	my $h = substr($buf, 0, 128);
	$v3++ if unpack('N', substr($h, 8, 4)) == 3 && unpack('N', substr($h, 12, 4)) == 128;
	$sealed++ if substr($h, 64, 64) ne "\0" x 64;
	for my $f (@{ ad_parse_segment($buf)->{frames} })
	{
		my $sec = ad_sections($f->{body}) or die "a frame of $segs[$i] does not parse";
		my $at = 0;    # the entry's data in the data section
		for my $e (@{ $sec->{heads} })
		{
			my $first = substr($sec->{data}, $at, 1);
			$kinds{ $e->[0] }++;
			$bad_bc++ if $e->[0] =~ /^[bc]$/ && $e->[1] != 0;
			# no BEGIN or COMMIT is left as data
			$bad_bc++ if $e->[0] =~ /^[wW]$/ && (($first eq 'B' && $e->[1] == 21)
				|| ($first eq 'C' && $e->[1] == 26));
			$at += $e->[1];
		}
	}
}
is($v3, $#segs, 'every segment is format 3 with a 128-byte header');
is($sealed, $#segs, 'every segment with a successor has a seal');
cmp_ok($kinds{b} // 0, '>=', 1500, 'BEGINs are written as b entries: ' . ($kinds{b} // 0));
is($kinds{c} // 0, $kinds{b} // 0, 'as many COMMITs as c entries');
is($bad_bc, 0, 'every b and c entry has data length 0, and no BEGIN or COMMIT is stored as data');
is($node->safe_psql($db, "SELECT count(*) FROM changestream.verify('$gen')"), '0', 'verify(): the format 3 generation is sound');
($rc, $out, $err) = decode("$archive/generations/$gen");
is($rc, 0, 'cs_decode.py accepts the format 3 generation (its seals included)') or diag($err);

# ---- 2b. format 3's own validity rules, with the frame CRC made to match
# Each edit gets a frame body's sections (ad_sections) and changes them, or
# returns false if the frame holds nothing to change.
my %bc_cases = (
	'a b entry with a data length' => sub {
		my ($sec) = @_;
		my $at = 0;    # where the entry's data would lie in the data section
		for my $e (@{ $sec->{heads} })
		{
			if ($e->[0] eq 'b')
			{
				$e->[1] = 1;
				substr($sec->{data}, $at, 0) = 'B';
				return 1;
			}
			$at += $e->[1];
		}
		return 0;
	},
	'a c entry with flags 256' => sub {
		my ($sec) = @_;
		for my $e (@{ $sec->{heads} })
		{
			next unless $e->[0] eq 'c';
			# after the three fields of 'W', the flags: one byte, 0
			my $pos = 0;
			for (1 .. 3)
			{
				$pos++ while ord(substr($e->[2], $pos, 1)) & 128;
				$pos++;
			}
			die 'flags are not one byte' if ord(substr($e->[2], $pos, 1)) & 128;
			substr($e->[2], $pos, 1) = "\x80\x02";
			return 1;
		}
		return 0;
	},
	'the last c entry\'s fields running past the section' => sub {
		my ($sec) = @_;
		my $last = $sec->{heads}[-1];
		return 0 unless $last->[0] eq 'c';
		chop $last->[2];
		return 1;
	});
my ($bc_seg) = grep { /\.gz$/ } @segs[1 .. $#segs - 1];
my $bc_orig = ad_load($bc_seg);
(my $bc_name = $bc_seg) =~ s{.*/}{};
for my $case (sort keys %bc_cases)
{
	my $buf = $bc_orig;
	my $done;
	for my $f (@{ ad_parse_segment($buf)->{frames} })
	{
		my $sec = ad_sections($f->{body});
		next unless $bc_cases{$case}->($sec);
		substr($buf, $f->{offset}, 12 + $f->{length}) = ad_frame(ad_join_sections($sec));
		$done = $f->{offset};
		last;
	}
	ok(defined $done, "$case: made in $bc_name") or next;
	ad_store($bc_seg, $buf);
	my ($ok2, $so, $se) = (0, '', '');
	$node->psql($db, "SELECT count(*) FROM changestream.changes('$gen')", stdout => \$so, stderr => \$se,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($se, qr/XX001.*\Q$bc_name\E.*offset $done/s, "$case: changes() reports XX001 at the frame");
	like($node->safe_psql($db, "SELECT file_name || ' ' || byte_offset FROM changestream.verify('$gen')"),
		qr/\Q$bc_name\E $done/, "$case: verify() names the segment and the frame");
	($rc, $out, $err) = decode("$archive/generations/$gen");
	ok($rc == 1 && $err =~ /\Q$bc_name\E: offset $done:/, "$case: cs_decode.py reports it") or diag("$rc $err");
	ad_store($bc_seg, $bc_orig);
}
is($node->safe_psql($db, "SELECT count(*) FROM changestream.verify('$gen')"), '0', 'verify(): sound again');

# ---- 3. time bounds
my $cols = "commit_lsn, commit_time, xid, ordinal, action, schema_name, table_name, old_row::text, new_row::text, unchanged_columns";
my $bounded = "SELECT $cols FROM changestream.changes('$gen', start_time => '$t1', end_time => '$t2')";
my $filtered = "SELECT $cols FROM changestream.changes('$gen') WHERE commit_time BETWEEN '$t1' AND '$t2'";
my $rows_bounded = $node->safe_psql($db, "$utc COPY ($bounded) TO STDOUT");
my $rows_filtered = $node->safe_psql($db, "$utc COPY ($filtered) TO STDOUT");
is($rows_bounded, $rows_filtered, 'changes() with time bounds = changes() filtered by commit time');
my $n_bounded = () = $rows_bounded =~ /\n/g;
$n_bounded++ if $rows_bounded ne '';
is($n_bounded, 4 * ($after - $before), "the bounded rows are the window's pgbench changes (" . ($after - $before) . " transactions x 4)");

my ($ok, $stdout, $stderr) = (0, '', '');
$node->psql($db, "SET client_min_messages = debug1; SELECT count(*) FROM changestream.changes('$gen', start_time => '$t1', end_time => '$t2')",
	stdout => \$stdout, stderr => \$stderr);
my @skipped = ($stderr =~ /segment "([^"]+)" skipped: its seal/g);
cmp_ok(scalar(@skipped), '>=', 2, scalar(@skipped) . ' sealed segments skipped by the time bounds');

# restore to t2 does not open the segments after it: damage the first frame
# of the first sealed segment all of whose transactions came after t2
my $t2us = $node->safe_psql($db, "SELECT ((extract(epoch FROM '$t2'::timestamptz) - 946684800) * 1000000)::bigint");
my $after_t2;
for my $listed (@segs[0 .. $#segs - 1])
{
	# compressed since the listing: read (and name) its .gz twin
	my $s = (-e $listed || $listed !~ /\.wal$/) ? $listed : "$listed.gz";
	my $h = substr(ad_load($s), 0, 128);
	$after_t2 = $s if !defined $after_t2 && unpack('q>', substr($h, 88, 8)) > $t2us
	  && unpack('Q>', substr($h, 104, 8)) > 0;
}
ok(defined $after_t2 && $after_t2 =~ /\.gz$/, 'a compressed segment lies wholly after t2');
$node->stop;
copy($after_t2, "$after_t2.keep") or die;
my $araw = ad_load($after_t2);
substr($araw, 128 + 12 + 3, 1) = chr(ord(substr($araw, 128 + 12 + 3, 1)) ^ 0x40);
open(my $afh, '|-', "gzip -c > '$after_t2'") or die;
print $afh $araw;
close($afh);
$node->start;
(my $aname = $after_t2) =~ s{.*/}{};
$node->safe_psql($db, "SELECT * FROM changestream.restore('r1', '$gen', target_time => '$t2', tables => ARRAY['public.pgbench_accounts'])");
is($node->safe_psql($db, sprintf($digest_sql, 'r1.pgbench_accounts')), $digest_t2,
	'restore(target_time => t2) gives the table as it was at t2, without opening the damaged segment after it');
($ok, $stdout, $stderr) = (0, '', '');
$node->psql($db, "SELECT * FROM changestream.restore('r2', '$gen', tables => ARRAY['public.pgbench_accounts'])",
	stdout => \$stdout, stderr => \$stderr);
like($stderr, qr/\Q$aname\E/, 'restore() of everything reads it and reports the damage');
$node->stop;
move("$after_t2.keep", $after_t2) or die;
$node->start;

# damage the body of a skipped segment that lies wholly before t1
my $t1us = $node->safe_psql($db, "SELECT ((extract(epoch FROM '$t1'::timestamptz) - 946684800) * 1000000)::bigint");
my $victim;
for my $s (@segs[0 .. $#segs - 1])
{
	my $h = substr(ad_load($s), 0, 128);
	my $maxt = unpack('q>', substr($h, 96, 8));
	$victim = $s if !defined $victim && $s =~ /\.gz$/ && $maxt < $t1us && unpack('Q>', substr($h, 104, 8)) > 0;
}
ok(defined $victim, 'a compressed segment lies wholly before the window') or BAIL_OUT('no victim');
$node->stop;
my $at = 128 + 12 + int((length(ad_load($victim)) - 140) / 2);
ad_flip_bit($victim, $at, 5);
$node->start;
(my $vname = $victim) =~ s{.*/}{};

is($node->safe_psql($db, "$utc COPY ($bounded) TO STDOUT"), $rows_filtered,
	'with a segment outside the bounds damaged, the bounded changes() still gives the same rows');
($ok, $stdout, $stderr) = (0, '', '');
$node->psql($db, "SELECT count(*) FROM changestream.changes('$gen')", stdout => \$stdout, stderr => \$stderr,
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($stderr, qr/XX001.*\Q$vname\E/s, 'the unbounded changes() reports XX001 naming the damaged segment');
like($node->safe_psql($db, "SELECT file_name FROM changestream.verify('$gen')"), qr/\Q$vname\E/,
	'verify() names the damaged segment');

# a seal that lies (CRC made to match) is damage too, even when skipping
$node->stop;
my $raw = ad_load($victim);
substr($raw, $at, 1) = chr(ord(substr($raw, $at, 1)) ^ 0x20);    # body sound again
substr($raw, 104, 8) = pack('Q>', unpack('Q>', substr($raw, 104, 8)) + 1);    # one transaction more
substr($raw, 124, 4) = pack('N', ad_crc32c(substr($raw, 64, 60)));
ad_store($victim, $raw);
$node->start;
($ok, $stdout, $stderr) = (0, '', '');
$node->psql($db, "SELECT count(*) FROM changestream.changes('$gen')", stdout => \$stdout, stderr => \$stderr);
like($stderr, qr/\Q$vname\E.*seal/s, 'a seal that does not match its segment is reported when the segment is read');
($rc, $out, $err) = decode("$archive/generations/$gen");
like($err, qr/\Q$vname\E: offset 64: the seal says/, 'cs_decode.py reports the same seal');

$node->stop;
done_testing();
