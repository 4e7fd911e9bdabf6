
# The failure counters of status() and stat_archiver (issue 35, section 2):
#   - a healthy run keeps archiver_failures, snapshot_failures and
#     replica_failures at 0, and failures_since is the server's start;
#   - each walsender the test terminates ends one archiver session in an
#     error: archiver_failures rises by exactly the number terminated, which
#     is also the sum of the archiver's "streaming again ... after N failed
#     attempts" log lines;
#   - a snapshot worker terminated while it waits for a transaction makes
#     take_snapshot() fail and snapshot_failures 1, and a snapshot that
#     succeeds afterwards leaves it 1;
#   - the bucket unreachable (the fault proxy refuses connections) while
#     the archive grows: replica_failures counts each failed upload pass,
#     as many as the uploader's "reaches the bucket again after N failed
#     attempts" log line says once the bucket is back;
#   - a restart starts every counter at 0 again, from a later
#     failures_since.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;
use S3FaultProxy;

my $s3 = cs_object_store();
my $bucket = cs_s3_bucket($s3, 'failures');
my $proxy = S3FaultProxy->new(upstream => $s3->{endpoint});
my $tmp = PostgreSQL::Test::Utils::tempdir();

my $node = cs_setup(
	'failure_counters',
	sql => q{CREATE TABLE t (id int PRIMARY KEY, v text);
			 CREATE PUBLICATION changestream FOR TABLE t;},
	conf => qq{
changestream.segment_size = '64kB'
changestream.segment_timeout = '1s'
} . cs_replica_conf($s3, bucket => $bucket, prefix => 'f', dir => $tmp,
		endpoint => $proxy->url),
	archive => 1);

my $counters = q{SELECT archiver_failures, snapshot_failures, replica_failures,
       failures_since >= pg_postmaster_start_time() AND failures_since <= now()
  FROM changestream.stat_archiver};

$node->safe_psql('postgres',
	"INSERT INTO t SELECT g, 'r' || g FROM generate_series(1, 100) g");
cs_wait_archived($node);
cs_poll_or_diag($node, 'postgres',
	q{SELECT replica_state = 'idle' AND replica_backlog_files = 0 AND replica_flushed_lsn IS NOT NULL FROM changestream.status()},
	't', 120, 'the uploader is idle with no backlog');
is($node->safe_psql('postgres', $counters),
	'0|0|0|t', 'a healthy run: no failures, counted since the server started');

############################################################################
# Archiver sessions that end in an error

# the walsender of the archiver's slot
sub walsender_pid
{
	return $node->safe_psql('postgres', q{
SELECT active_pid FROM pg_replication_slots
 WHERE slot_name = (SELECT slot FROM changestream.status()) AND active});
}

my $terminated = 0;
for my $round (1 .. 3)
{
	my $pid = walsender_pid();
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	$terminated++;
	# the next session streams through another walsender
	cs_poll_or_diag($node, 'postgres', qq{
SELECT count(*) = 1 FROM pg_replication_slots
 WHERE slot_name = (SELECT slot FROM changestream.status())
   AND active AND active_pid <> $pid},
		't', 120, "round $round: the archiver streams through a new walsender");
	$node->safe_psql('postgres', "INSERT INTO t VALUES (1000 + $round, 'after')");
	cs_wait_archived($node, name => "round $round");
	cs_wait_state($node, 'streaming');
}

my $log = slurp_file($node->logfile);
my $logged = 0;
$logged += $1 while $log =~ /streaming again at \S+ after (\d+) failed attempts?/g;
is($logged, $terminated,
	"the log reports $terminated failed sessions, one per terminated walsender");
is($node->safe_psql('postgres',
		'SELECT archiver_failures, snapshot_failures FROM changestream.stat_archiver'),
	"$terminated|0", 'archiver_failures counts each failed session');
is($node->safe_psql('postgres', q{
SELECT count(*) FROM changestream.stat_archiver a, changestream.status() s
 WHERE (a.archiver_failures, a.snapshot_failures, a.failures_since)
       = (s.archiver_failures, s.snapshot_failures, s.failures_since)}),
	'1', 'stat_archiver shows status()\'s counters');

############################################################################
# A snapshot that fails, then one that succeeds

my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN; SELECT pg_current_xact_id();');
my ($stdout, $stderr) = ('', '');
my $snap = $node->background_psql('postgres', on_error_stop => 0);
$snap->query_until(qr/started/,
	"\\echo started\n\\set VERBOSITY verbose\nSELECT changestream.take_snapshot();\n");
cs_poll_or_diag($node, 'postgres',
	"SELECT waiting_for IS NOT NULL FROM changestream.status()",
	't', 60, 'the snapshot worker waits for the open transaction');
my $worker = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'changestream snapshot'");
like($worker, qr/^\d+$/, 'one snapshot worker runs');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($worker)");
cs_poll_or_diag($node, 'postgres',
	"SELECT snapshot_failures FROM changestream.stat_archiver",
	'1', 60, 'the terminated snapshot worker counts as one snapshot failure');
$snap->quit;
$holder->query_safe('COMMIT');
$holder->quit;
like($node->safe_psql('postgres', 'SELECT changestream.take_snapshot()'),
	qr{^[0-9A-F]+/[0-9A-F]+$}, 'take_snapshot() works afterwards');
is($node->safe_psql('postgres',
		'SELECT archiver_failures, snapshot_failures FROM changestream.stat_archiver'),
	"$terminated|1", 'a successful snapshot counts no failure');

############################################################################
# The bucket unreachable

$proxy->down;
my $round = 0;
my $ok = 0;
# the archive grows (sealed segments to upload) until two passes failed
for (1 .. 120)
{
	$round++;
	$node->safe_psql('postgres',
		"INSERT INTO t SELECT 100000 * $round + g, repeat('x', 200) FROM generate_series(1, 200) g");
	$ok = $node->safe_psql('postgres', 'SELECT replica_failures >= 2 FROM changestream.stat_archiver') eq 't';
	last if $ok;
	sleep 1;
}
ok($ok, 'with the bucket unreachable, upload passes fail');
$proxy->up;
$node->wait_for_log(qr/changestream uploader reaches the bucket again after \d+ failed attempts?/);
my ($failed) = slurp_file($node->logfile) =~ /changestream uploader reaches the bucket again after (\d+) failed attempts?/;
is($node->safe_psql('postgres',
		'SELECT archiver_failures, snapshot_failures, replica_failures FROM changestream.stat_archiver'),
	"$terminated|1|$failed",
	"replica_failures counts each failed pass ($failed, as the uploader's log says)");
cs_poll_or_diag($node, 'postgres',
	q{SELECT replica_state = 'idle' AND NOT replica_error_current FROM changestream.stat_archiver},
	't', 120, 'the uploader recovers');

############################################################################
# A restart starts them at 0

my $before = $node->safe_psql('postgres',
	'SELECT failures_since FROM changestream.stat_archiver');
$node->restart;
cs_wait_state($node, 'streaming', timeout => 120);
is($node->safe_psql('postgres', $counters),
	'0|0|0|t', 'after a restart: the counters start at 0, from the new start');
is($node->safe_psql('postgres',
		"SELECT failures_since > '$before' FROM changestream.stat_archiver"),
	't', 'failures_since is later than before the restart');

$node->stop;
$proxy->stop;
done_testing();
