# Upgrade in place from formats 1 and 2 (docs/FORMAT.md section 1,
# "Upgrade in place"): changestream before format 2 wrote format 1
# segments, before format 3 format 2 ones, and a server upgraded to today's
# changestream (format 3) resumes that generation.
#
# The archiver's own segments, written under pgbench, are rewritten as
# format 1 with the same entries (t/to_format1.py, which reads them with
# the independent scripts/cs_decode.py): the older ones compressed again,
# the newest raw and with a torn frame at its end, as a crash leaves it.
# The server then starts with today's code, and the same is done again
# with the segments it wrote since, rewritten as format 2.  Each time:
# 1. the generation is resumed (no new generation), the torn tail is cut,
#    and the log says the stream continues in a new segment of format 3;
# 2. the older segments are kept as they are (never appended to) and the
#    new ones are format 3, indexes and LSNs continuous;
# Then, over the generation of formats 1, 2 and 3:
# 3. what the archive holds, across both boundaries, equals a second
#    slot's changes (the oracle), transaction for transaction;
# 4. verify() and cs_decode.py find the mixed generation sound, changes()
#    reads across the boundaries, and the old raw segments are compressed.
use strict;
use warnings;

use FindBin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;

my $node = cs_setup('upgrade',
	conf => "changestream.segment_size = '64kB'\nchangestream.message_prefixes = 'fx'\n",
	pgbench => 1,
	sql => 'CREATE PUBLICATION changestream FOR ALL TABLES',
	oracle => 1,
	archive => 1);
my $db = 'postgres';
my $archive = cs_archive_dir($node);
my ($gen, $start_lsn) = cs_single_generation($node, 'at start');

cs_pgbench($node, $db, '-t', '300', '-c', '2');
my $before = cs_wait_archived($node, name => 'before the upgrade');
$node->stop;

# rewrite segment $seg of $wal as format $version, raw or gzip as it was
sub to_format
{
	my ($wal, $seg, $version) = @_;
	my ($out, $err) = ('', '');
	my $tmp = "$wal/convert.tmp";
	IPC::Run::run([ 'python3', "$FindBin::Bin/to_format1.py", '--version', $version, "$wal/$seg", $tmp ], '>', \$out, '2>', \$err)
	  or die "to_format1.py --version $version $seg: $err";
	my $raw = $seg =~ s/\.gz$//r;
	unlink "$wal/$seg" or die "unlink $seg: $!";
	rename($tmp, "$wal/$raw") or die "rename: $!";
	if ($seg =~ /\.gz$/)
	{
		system('gzip', '-6', '-n', "$wal/$raw") == 0 or die "gzip $raw failed";
	}
	return;
}

sub format_version
{
	my ($path) = @_;
	my $bytes;
	if ($path =~ /\.gz$/)
	{
		IPC::Run::run([ 'gzip', '-dc', $path ], '>', \$bytes) or die "gzip -dc $path";
	}
	else
	{
		open(my $fh, '<:raw', $path) or die "$path: $!";
		local $/;
		$bytes = <$fh>;
		close $fh;
	}
	return unpack('N', substr($bytes, 8, 4));
}

my $wal = "$archive/generations/$gen/wal";

# the segment files of the generation with index above $above, in order
sub segment_files
{
	my ($above) = @_;
	opendir(my $dh, $wal) or die "$wal: $!";
	my @segs = sort grep { /^[0-9a-f]{16}\.wal(\.gz)?$/ && hex(substr($_, 0, 16)) > $above }
	  readdir $dh;
	closedir $dh;
	return @segs;
}

# the path of segment file $seg now: the compressor may have gzipped it
sub current_path
{
	my ($seg) = @_;
	return -e "$wal/$seg" ? "$wal/$seg" : "$wal/" . ($seg =~ s/\.wal$/.wal.gz/r);
}

# Rewrite the segments above index $above as format $version, the newest
# with a torn frame at its end (a crash in the middle of a write), start
# the server and check that it continues in a new format 3 segment.
# Returns the rewritten segments' file names and the newest one's index.
sub downgrade_and_resume
{
	my ($above, $version) = @_;
	my @segs = segment_files($above);
	ok(@segs >= 3, scalar(@segs) . " segments to rewrite as format $version");
	my $newest = $segs[-1];
	like($newest, qr/\.wal$/, 'the newest segment is raw');
	to_format($wal, $_, $version) for @segs;
	{
		open(my $fh, '>>:raw', "$wal/$newest") or die;
		print $fh 'CSFR' . pack('N', 4096) . "\0" x 100;
		close $fh;
	}
	my @v = map { format_version("$wal/$_") } @segs;
	is("@v", join(' ', ($version) x @segs), "every one is now format $version");
	my $size = -s "$wal/$newest";

	my $log_offset = cs_log_offset($node);
	$node->start;
	cs_wait_state($node, 'streaming', name => "after the upgrade from $version");
	my ($gen2) = cs_single_generation($node, "after the upgrade from $version");
	is($gen2, $gen, 'the generation is resumed, not replaced');
	my $log = cs_log_since($node, $log_offset);
	like($log, qr/changestream segment "[^"]*\Q$newest\E" is of format version $version: continuing in a new segment of format version 3/,
		"the log says the stream continues in a new format 3 segment after format $version");
	ok(!-e "$wal/$newest" || -s "$wal/$newest" < $size,
		"the format $version segment was not appended to (its torn tail was cut)");
	return (\@segs, hex(substr($newest, 0, 16)));
}

# format 1 -> 3
my ($v1_segs, $v1_last) = downgrade_and_resume(-1, 1);
cs_pgbench($node, $db, '-t', '300', '-c', '2');
my $mid = cs_wait_archived($node, name => 'after the upgrade from 1');
$node->stop;

# the segments written since, as a format 2 writer would have left them:
# format 2 -> 3
my ($v2_segs, $v2_last) = downgrade_and_resume($v1_last, 2);
cs_pgbench($node, $db, '-t', '300', '-c', '2');
$node->safe_psql($db, "SELECT pg_logical_emit_message(true, 'fx', 'after')");
my $target = cs_wait_archived($node, name => 'after the upgrade from 2');

my @after = cs_wal_segments($node, $gen);
my %by_index = map { ($_->{index} => $_) } @after;
ok(exists $by_index{ $v1_last + 1 }, 'a new segment followed the format 1 ones');
ok(exists $by_index{ $v2_last + 1 }, 'a new segment follows the format 2 ones');
is(format_version("$wal/$by_index{ $v2_last + 1 }{file}"), 3, 'the new segment is format 3');
is(format_version(current_path($v2_segs->[0])), 2, 'the first segment after the format 1 ones is now format 2');
for my $s (@$v1_segs)
{
	is(format_version(current_path($s)), 1, "$s is still format 1");
}
for my $s (@$v2_segs)
{
	is(format_version(current_path($s)), 2, "$s is still format 2");
}
{
	my $p = current_path($v2_segs->[-1]);
	my $bytes;
	IPC::Run::run([ 'sh', '-c', 'case "$1" in *.gz) gzip -dc "$1" ;; *) cat "$1" ;; esac', 'sh', $p ],
		'>', \$bytes) or die "read $p";
	isnt(substr($bytes, 64, 64), "\0" x 64, 'the last format 2 segment got its seal when format 3 took over');
}
my @vs = map { format_version(current_path($_->{file})) } @after;
is(join(',', @vs), join(',', sort { $a <=> $b } @vs), 'format versions never go back: ' . join(',', @vs));

my $n = cs_compare_with_oracle($node, gen => $gen, start_lsn => $start_lsn, target => $target,
	name => 'across both upgrades', min_txns => 850);
note("compared $n transactions");
is($node->safe_psql($db, "SELECT count(*) FROM changestream.verify('$gen')"), '0',
	'verify() finds the mixed generation sound');
{
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'python3', "$FindBin::Bin/../scripts/cs_decode.py", '--summary',
		"$archive/generations/$gen" ], '>', \$out, '2>', \$err);
	ok($ok, 'cs_decode.py finds the mixed generation sound') or diag("$err\n$out");
}
is($node->safe_psql($db, "SELECT count(*) FROM changestream.changes('$gen', start_lsn => '$before')
	WHERE action = 'message'"), '1', 'changes() reads across the boundaries');
is($node->safe_psql($db, "SELECT count(*) FROM changestream.changes('$gen', start_lsn => '$mid')
	WHERE action = 'update' AND table_name = 'pgbench_accounts'"), '600',
	'changes() has the pgbench updates after the first upgrade');
is($node->safe_psql($db, "SELECT count(*) FROM changestream.changes('$gen')
	WHERE action = 'update' AND table_name = 'pgbench_accounts'"), '1800',
	'changes() has every pgbench update, from all three formats');
cs_poll_or_diag($node, $db, "SELECT NOT EXISTS (SELECT 1 FROM changestream.wal_segments('$gen')
	WHERE segment_index IN ($v1_last, $v2_last) AND NOT compressed)", 't', 120,
	'the format 1 and 2 segments are compressed once sealed');

done_testing();
