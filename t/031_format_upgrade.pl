# Upgrade in place from format 1 (docs/FORMAT.md section 1, "Upgrade in
# place"): changestream before format 2 wrote format 1 segments, and a
# server upgraded to today's changestream resumes that generation.
#
# The archiver's own segments, written under pgbench, are rewritten as
# format 1 with the same entries (t/to_format1.py, which reads them with
# the independent scripts/cs_decode.py): the older ones compressed again,
# the newest raw and with a torn frame at its end, as a crash leaves it.
# The server then starts with today's code:
# 1. the generation is resumed (no new generation), the torn tail is cut,
#    and the log says the stream continues in a new segment of format 2;
# 2. the format 1 segments are kept as they are (never appended to) and the
#    new ones are format 2, indexes and LSNs continuous;
# 3. what the archive holds, before and after the upgrade, equals a second
#    slot's changes (the oracle), transaction for transaction;
# 4. verify() and cs_decode.py find the mixed generation sound, changes()
#    reads across the boundary, and the old raw segment is compressed.
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

# the segments as a format 1 writer left them
my $wal = "$archive/generations/$gen/wal";
opendir(my $dh, $wal) or die "$wal: $!";
my @segs = sort grep { /^[0-9a-f]{16}\.wal(\.gz)?$/ } readdir $dh;
closedir $dh;
ok(@segs >= 3, scalar(@segs) . ' segments written before the upgrade');
my $newest = $segs[-1];
like($newest, qr/\.wal$/, 'the newest segment is raw');

sub to_format1
{
	my ($seg) = @_;
	my ($out, $err) = ('', '');
	my $tmp = "$wal/convert.tmp";
	IPC::Run::run([ 'python3', "$FindBin::Bin/to_format1.py", "$wal/$seg", $tmp ], '>', \$out, '2>', \$err)
	  or die "to_format1.py $seg: $err";
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

to_format1($_) for @segs;
# a torn frame at the end: a crash in the middle of a write
{
	open(my $fh, '>>:raw', "$wal/$newest") or die;
	print $fh 'CSFR' . pack('N', 4096) . "\0" x 100;
	close $fh;
}
my @v = map { format_version("$wal/$_") } @segs;
is("@v", join(' ', (1) x @segs), 'every segment is now format 1');
my $size1 = -s "$wal/$newest";

my $log_offset = cs_log_offset($node);
$node->start;
cs_wait_state($node, 'streaming', name => 'after the upgrade');
my ($gen2) = cs_single_generation($node, 'after the upgrade');
is($gen2, $gen, 'the generation is resumed, not replaced');
my $log = cs_log_since($node, $log_offset);
like($log, qr/changestream segment "[^"]*\Q$newest\E" is of format version 1: continuing in a new segment of format version 2/,
	'the log says the stream continues in a new format 2 segment');

cs_pgbench($node, $db, '-t', '300', '-c', '2');
$node->safe_psql($db, "SELECT pg_logical_emit_message(true, 'fx', 'after')");
my $target = cs_wait_archived($node, name => 'after the upgrade');

my @after = cs_wal_segments($node, $gen);
my %by_index = map { ($_->{index} => $_) } @after;
my $old_index = hex(substr($newest, 0, 16));
ok(exists $by_index{ $old_index + 1 }, 'a new segment follows the format 1 one');
my $new_path = "$wal/$by_index{ $old_index + 1 }{file}";
is(format_version($new_path), 2, 'the new segment is format 2');
for my $s (@segs)
{
	my $p = -e "$wal/$s" ? "$wal/$s" : "$wal/" . ($s =~ s/\.wal$/.wal.gz/r);
	is(format_version($p), 1, "$s is still format 1");
}
ok(!-e "$wal/$newest" || -s "$wal/$newest" < $size1,
	'the format 1 segment was not appended to (its torn tail was cut)');

my $n = cs_compare_with_oracle($node, gen => $gen, start_lsn => $start_lsn, target => $target,
	name => 'across the upgrade', min_txns => 550);
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
	WHERE action = 'message'"), '1', 'changes() reads across the boundary');
is($node->safe_psql($db, "SELECT count(*) FROM changestream.changes('$gen')
	WHERE action = 'update' AND table_name = 'pgbench_accounts'"), '1200',
	'changes() has every pgbench update, from both formats');
cs_poll_or_diag($node, $db, "SELECT NOT EXISTS (SELECT 1 FROM changestream.wal_segments('$gen')
	WHERE segment_index = $old_index AND NOT compressed)", 't', 120,
	'the format 1 segment is compressed once sealed');

done_testing();
