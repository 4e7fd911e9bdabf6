
# The ready roles and the health view (issue 35, sections 2 and 4):
#   - changestream_reader can read the history and verify it, and nothing
#     more; changestream_operator can do that, restore, take snapshots,
#     open generations and check the replica, and nothing more
#     (archive_directory stays superuser-only); a role with neither gets
#     42501 on each;
#   - stat_archiver: an error of a session that later archived is not
#     current and the archive is healthy; the last archived commit time
#     is that of the newest Commit message the archive holds (read back
#     with wal_records()); retention_effective follows the settings, and
#     ALTER SYSTEM warns where retention is set without snapshot_interval.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;

my $node = cs_new_node('roles_health');
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION changestream;
CREATE TABLE t (id int PRIMARY KEY, v text);
INSERT INTO t SELECT g, 'r' || g FROM generate_series(1, 10) g;
CREATE ROLE reader_u LOGIN IN ROLE changestream_reader;
CREATE ROLE operator_u LOGIN IN ROLE changestream_operator;
CREATE ROLE plain_u LOGIN;
CREATE ROLE monitor_u LOGIN IN ROLE pg_monitor;
CREATE SCHEMA r_op AUTHORIZATION operator_u;
CREATE SCHEMA r_dir AUTHORIZATION operator_u;
});

############################################################################
# An error before the publication exists, then a healthy archive

$node->append_conf('postgresql.conf',
	"changestream.directory = '" . cs_archive_dir($node) . "'");
$node->restart;
cs_poll_or_diag($node, 'postgres',
	"SELECT last_error IS NOT NULL FROM changestream.status()",
	't', 60, 'the archiver reports that the publication is missing');
is( $node->safe_psql('postgres',
		"SELECT error_current, healthy FROM changestream.stat_archiver"),
	't|f',
	'before the publication exists: the error is current, not healthy');

$node->safe_psql('postgres', 'CREATE PUBLICATION changestream FOR TABLE t');
cs_wait_state($node, 'streaming', timeout => 120);
$node->safe_psql('postgres', "UPDATE t SET v = v || 'x' WHERE id <= 3");
cs_wait_archived($node);
my ($gen) = cs_single_generation($node, 'start');

is( $node->safe_psql('postgres', q{
SELECT last_error IS NOT NULL, error_current, healthy, state, lag_seconds,
       last_archived_commit_at = (
         -- the newest Commit message archived: its commit timestamp, bytes
         -- 19 to 26 (microseconds since 2000-01-01 UTC)
         SELECT max(timestamptz '2000-01-01 00:00:00+00' + make_interval(secs =>
                  ('x' || encode(substring(data FROM 19 FOR 8), 'hex'))::bit(64)::bigint / 1e6))
           FROM changestream.wal_records(changestream.stat_archiver.generation)
          WHERE get_byte(data, 0) = 67)
  FROM changestream.stat_archiver}),
	't|f|t|streaming|0|t',
	'streaming: the old error is history, healthy, no time lag, the last archived commit is the newest Commit in the archive'
);

# retention_effective follows the settings (NULL: retention off)
# (the settings' stderr: ALTER SYSTEM warns where retention deletes nothing)
sub retention_effective
{
	my ($settings, $expected) = @_;
	my ($rc, $out, $err) =
	  $node->psql('postgres', "$settings SELECT pg_reload_conf();");
	cs_poll_or_diag($node, 'postgres',
		"SELECT coalesce(retention_effective::text, 'null') FROM changestream.stat_archiver",
		$expected, 30, "retention_effective after: $settings");
	return $err;
}
# retention 0 (the default): NULL
retention_effective('', 'null');
like(
	retention_effective("ALTER SYSTEM SET changestream.retention = '7d';", 'false'),
	qr/WARNING:  changestream.retention deletes nothing while changestream.snapshot_interval is 0/,
	'ALTER SYSTEM SET retention without snapshot_interval: a WARNING');
is(retention_effective("ALTER SYSTEM SET changestream.snapshot_interval = '1d';", 'true'),
	'', 'ALTER SYSTEM SET snapshot_interval: no warning');
# a parallel worker restores the leader's settings one at a time: none warns
{
	my $force = $node->pg_version >= 16 ? 'debug_parallel_query' : 'force_parallel_mode';
	my ($rc, $out, $err) = $node->psql('postgres',
		"SET $force = on; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; "
		  . "SET min_parallel_table_scan_size = 0; "
		  . "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT count(*) FROM pg_class;");
	like($out, qr/Workers Launched: [1-9]/, 'a parallel query ran with retention and snapshot_interval in force')
	  or diag($out, $err);
	unlike($err, qr/WARNING/, 'its parallel workers give no retention WARNING');
}
like(
	retention_effective("ALTER SYSTEM SET changestream.snapshot_interval = 0;", 'false'),
	qr/WARNING:  changestream.retention deletes nothing/,
	'ALTER SYSTEM SET snapshot_interval = 0 under a retention: a WARNING');
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET changestream.retention; ALTER SYSTEM RESET changestream.snapshot_interval; SELECT pg_reload_conf();");

############################################################################
# Each role does exactly its jobs

my %reader_jobs = (
	generations      => 'SELECT count(*) FROM changestream.generations()',
	generation_stats => "SELECT count(*) FROM changestream.generation_stats('$gen')",
	wal_segments     => "SELECT count(*) FROM changestream.wal_segments('$gen')",
	snapshots        => "SELECT count(*) FROM changestream.snapshots('$gen')",
	changes          => "SELECT count(*) FROM changestream.changes('$gen')",
	wal_records      => "SELECT count(*) FROM changestream.wal_records('$gen')",
	verify           => "SELECT count(*) FROM changestream.verify('$gen')",
	status           => 'SELECT count(*) FROM changestream.status()',
	stat_archiver    => 'SELECT count(*) FROM changestream.stat_archiver',
	restore_progress => 'SELECT count(*) FROM changestream.restore_progress',
	tables           => "SELECT count(*) FROM changestream.tables('$gen')",);
# what docs/monitoring.md and docs/roles.md promise pg_monitor
my @monitor_jobs = qw(generations status stat_archiver restore_progress verify);
my %operator_jobs = (
	replica_check => 'SELECT count(*) FROM changestream.replica_check()',
	restore =>
	  "SELECT tables FROM changestream.restore('r_op', generation => '$gen')",
	take_snapshot  => 'SELECT changestream.take_snapshot() IS NOT NULL',
	new_generation => 'SELECT changestream.new_generation() IS NOT NULL',);
# run in this order: new_generation last (it opens another generation)
my @operator_order = qw(replica_check restore take_snapshot new_generation);

# SQLSTATE of a statement run as a role ('' when it succeeds)
sub run_as
{
	my ($role, $sql) = @_;
	my ($rc, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\nSET ROLE $role;\n$sql;");
	return '' if $rc == 0;
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : "failed: $err";
}

foreach my $job (sort keys %reader_jobs)
{
	is(run_as('plain_u', $reader_jobs{$job}), '42501', "no role: $job refused");
	is(run_as('reader_u', $reader_jobs{$job}), '', "reader: $job");
}
foreach my $job (@monitor_jobs)
{
	is(run_as('monitor_u', $reader_jobs{$job}), '', "pg_monitor: $job");
}
foreach my $job (@operator_order)
{
	is(run_as('plain_u', $operator_jobs{$job}), '42501', "no role: $job refused");
	is(run_as('reader_u', $operator_jobs{$job}), '42501', "reader: $job refused");
}
is( run_as('operator_u',
		"SELECT * FROM changestream.restore('r_dir', generation => '$gen', archive_directory => '"
		  . cs_archive_dir($node) . "')"),
	'42501',
	'operator: restore() from archive_directory refused (superusers only)');
foreach my $job (sort keys %reader_jobs)
{
	is(run_as('operator_u', $reader_jobs{$job}), '', "operator: $job");
}
foreach my $job (@operator_order)
{
	is(run_as('operator_u', $operator_jobs{$job}), '', "operator: $job");
}
is( $node->safe_psql('postgres',
		'SELECT count(*) FROM ((TABLE r_op.t EXCEPT TABLE t) UNION ALL (TABLE t EXCEPT TABLE r_op.t)) d'),
	'0',
	'the operator restored the table as archived');
is($node->safe_psql('postgres', 'SELECT count(*) FROM r_op.t'),
	'10', 'the restored table has every row');
# neither role can do what only superusers can
is( run_as('operator_u',
		"SELECT changestream.sigv4_authorization('GET', '/', '', ARRAY[]::text[], '', '20130524T000000Z', 'us-east-1', 'k', 's')"),
	'42501',
	'operator: sigv4_authorization refused');
is(run_as('operator_u', 'SELECT count(*) FROM changestream.ddl_history'),
	'42501', 'operator: ddl_history refused');

# the roles outlive the extension (they are the cluster's)
$node->safe_psql('postgres', 'DROP SCHEMA r_op CASCADE; DROP EXTENSION changestream');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_roles WHERE rolname IN ('changestream_reader', 'changestream_operator')"),
	'2',
	'DROP EXTENSION leaves the roles');
$node->safe_psql('postgres', 'CREATE EXTENSION changestream');
is(run_as('reader_u', $reader_jobs{status}), '',
	'CREATE EXTENSION again: the existing reader role is granted again');

$node->stop;
done_testing();
