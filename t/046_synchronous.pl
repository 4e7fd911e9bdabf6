# Synchronous mode (issue 33, section 3): with changestream.synchronous on
# and synchronous_standby_names naming the archiver's application_name
# ("changestream"), a commit returns only once the archive holds it.
#
# - pg_stat_replication shows the archiver as the synchronous standby;
# - commits one after another return, each archived (the oracle: the
#   source table against changes());
# - with the archiver stopped (SIGSTOP) a commit waits in SyncRep and does
#   not return; once the archiver goes on it returns, and the archive's
#   durable position is at or past its commit;
# - a commit in another database, which the archiver does not decode,
#   returns too: keepalive positions are recorded and reported at once;
# - with the setting off again (reload) commits still return, in the
#   group commit window.
use Time::HiRes qw(time usleep);
use IPC::Run;
use ChangestreamTest;

my $node = cs_setup('sync', archive => 1, conf => qq(
changestream.synchronous = on
),
	sql => q{
CREATE TABLE t (id int PRIMARY KEY, v text NOT NULL);
CREATE PUBLICATION changestream FOR TABLE t;
CREATE DATABASE other;
});
$node->safe_psql('postgres',
	"ALTER SYSTEM SET synchronous_standby_names = 'changestream'; SELECT pg_reload_conf()");
cs_poll_or_diag($node, 'postgres',
	"SELECT sync_state FROM pg_stat_replication WHERE application_name = 'changestream'",
	'sync', 30, 'the archiver is the synchronous standby');

for my $i (1 .. 20)
{
	$node->safe_psql('postgres', "INSERT INTO t VALUES ($i, 'one by one')",
		timeout => 60);
}
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM changestream.changes() WHERE action = 'insert' AND table_name = 't'}),
	'20', 'every commit that returned is archived');

# The archiver stopped: a commit waits for it.
my $archiver = cs_worker_pid($node);
kill 'STOP', $archiver;
my ($out, $err) = ('', '');
my $commit = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		"INSERT INTO t VALUES (1000, 'waits') RETURNING pg_current_wal_insert_lsn()" ],
	'>', \$out, '2>', \$err);
my $waiting = cs_poll_or_diag($node, 'postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query LIKE 'INSERT INTO t VALUES (1000%'",
	'1', 30, 'the commit waits in SyncRep while the archiver is stopped');
cs_sleep(1);
ok($commit->pumpable, 'the commit has not returned');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"),
	'1', 'it still waits a second later');
kill 'CONT', $archiver;
ok(eval { $commit->finish; 1 }, 'the commit returns once the archiver goes on')
  or diag("psql: $err");
(my $commit_lsn = $out) =~ s/\s+$//;
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM changestream.changes() WHERE action = 'insert' AND new_row->>'id' = '1000'"),
	'1', 'the waiting commit is archived');
is( $node->safe_psql('postgres',
		"SELECT confirmed_flush_lsn >= '$commit_lsn' FROM pg_replication_slots WHERE slot_name = 'changestream'"),
	't', 'the slot is confirmed past the commit');

# Another database: nothing there is decoded, yet its commits are released.
for my $i (1 .. 10)
{
	$node->safe_psql('other', "CREATE TABLE IF NOT EXISTS o (i int); INSERT INTO o VALUES ($i)",
		timeout => 60);
}
is($node->safe_psql('other', 'SELECT count(*) FROM o'), '10',
	'commits in another database return');

$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.synchronous = off; SELECT pg_reload_conf()");
for my $i (21 .. 30)
{
	$node->safe_psql('postgres', "INSERT INTO t VALUES ($i, 'window')",
		timeout => 60);
}
is( $node->safe_psql('postgres', q{
SELECT string_agg(new_row->>'id', ',' ORDER BY (new_row->>'id')::int)
FROM changestream.changes() WHERE action = 'insert' AND table_name = 't'}),
	$node->safe_psql('postgres', "SELECT string_agg(id::text, ',' ORDER BY id) FROM t"),
	'the archive holds exactly the table\'s rows');

$node->safe_psql('postgres',
	"ALTER SYSTEM RESET synchronous_standby_names; SELECT pg_reload_conf()");
done_testing();
