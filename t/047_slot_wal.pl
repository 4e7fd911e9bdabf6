# Never endanger the primary (issue 33, section 4): status() shows the
# WAL the archiver's slot keeps, and the maintenance worker warns in the
# log when max_slot_wal_keep_size is unlimited and as the kept WAL passes
# thresholds.
#
# - With max_slot_wal_keep_size unlimited (the server's default): one
#   WARNING saying so; status().slot_wal_limit_bytes is NULL, and
#   slot_wal_status, slot_retained_bytes and slot_safe_wal_size equal what
#   pg_replication_slots gives in the same query (the oracle).
# - With max_slot_wal_keep_size = 64MB (reload) and archiving turned off
#   (the slot stays): 40 MB of WAL written; status().slot_safe_wal_size
#   equals pg_replication_slots.safe_wal_size, and the log warns once the
#   kept WAL passes 32 MB, naming the slot and the limit.
# - More WAL and a checkpoint invalidate the slot: status() says 'lost';
#   archiving on again opens a new generation whose reason names the
#   invalidation (t/009 checks the archive's side at length).
use Time::HiRes qw(time usleep);
use ChangestreamTest;

my $node = cs_setup('slotwal', archive => 1, conf => qq(
wal_keep_size = 0
max_wal_size = '64MB'
min_wal_size = '32MB'
),
	sql => q{
CREATE TABLE t (id int PRIMARY KEY, v text NOT NULL);
CREATE PUBLICATION changestream FOR TABLE t;
CREATE TABLE filler (v text);
});

cs_poll_or_diag($node, 'postgres',
	"SELECT compressor_pid IS NOT NULL FROM changestream.status()",
	't', 30, 'the maintenance worker runs');
my $poll_log = sub {
	my ($re, $name) = @_;
	my $deadline = time() + 40;
	while (time() < $deadline)
	{
		my $text = PostgreSQL::Test::Utils::slurp_file($node->logfile);
		return pass($name) if $text =~ $re;
		usleep(250_000);
	}
	fail($name);
};
$poll_log->(qr/WARNING:  max_slot_wal_keep_size is unlimited: if the changestream archive gets stuck, replication slot "changestream" keeps WAL until pg_wal is full/,
	'an unlimited max_slot_wal_keep_size is warned of');

my $compare = q{
SELECT s.slot_wal_status = r.wal_status,
	s.slot_retained_bytes = pg_current_wal_lsn() - r.restart_lsn,
	s.slot_safe_wal_size IS NOT DISTINCT FROM r.safe_wal_size,
	s.slot_wal_limit_bytes IS NOT DISTINCT FROM
		(SELECT CASE WHEN setting::int < 0 THEN NULL ELSE setting::bigint * 1024 * 1024 END
		 FROM pg_settings WHERE name = 'max_slot_wal_keep_size')
FROM changestream.status() s, pg_replication_slots r WHERE r.slot_name = 'changestream'};
is($node->safe_psql('postgres', $compare), 't|t|t|t',
	'status() equals pg_replication_slots, unlimited');
is($node->safe_psql('postgres', 'SELECT slot_wal_limit_bytes IS NULL FROM changestream.status()'),
	't', 'slot_wal_limit_bytes is NULL when unlimited');

$node->safe_psql('postgres', q{
ALTER SYSTEM SET max_slot_wal_keep_size = '64MB';
ALTER SYSTEM SET changestream.directory = '';
SELECT pg_reload_conf();
});
cs_wait_state($node, 'disabled', name => 'archiving is off; the slot stays');
$node->safe_psql('postgres',
	"INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 40000)");
is($node->safe_psql('postgres', $compare), 't|t|t|t',
	'status() equals pg_replication_slots with a limit, behind');
ok($node->safe_psql('postgres', 'SELECT slot_retained_bytes > 32 * 1024 * 1024 FROM changestream.status()') eq 't',
	'the slot keeps more than 32 MB');
$poll_log->(qr/WARNING:  replication slot "changestream" keeps \d+ MB of WAL for the changestream archive\n.*DETAIL:  The archive is confirmed up to [0-9A-F]+\/[0-9A-F]+; the server keeps WAL from .*\n.*HINT:  .*Past max_slot_wal_keep_size \(64 MB\) the server invalidates the slot/,
	'the kept WAL past half the limit is warned of');

for (1 .. 3)
{
	$node->safe_psql('postgres',
		"INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 40000); CHECKPOINT;");
}
cs_poll_or_diag($node, 'postgres', 'SELECT slot_wal_status FROM changestream.status()',
	'lost', 30, 'the slot is lost past the limit');
my $cs_dir = cs_archive_dir($node);
$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.directory = '$cs_dir'; SELECT pg_reload_conf();");
cs_wait_state($node, 'streaming', name => 'archiving again');
is(scalar(cs_generations($node)), 2, 'a new generation');
like(PostgreSQL::Test::Utils::slurp_file($node->logfile),
	qr/started generation.*\n.*Reason: .*invalidated/,
	'its reason names the invalidation');

done_testing();
