# Failover on PostgreSQL 17 and later (issue 33, section 2): the archiver's
# slot is a failover slot, a standby with sync_replication_slots keeps it
# in step, and the primary's synchronized_standby_slots names the
# standby's physical slot, so the archiver never receives a change that
# standby has not got.  The archive sits on storage both nodes reach (the
# primary's directory, as the standby's settings are the primary's).
#
# Traffic on the primary (each transaction inserts a new id and bumps a
# counter n of an existing row); the standby syncs the slot; more traffic;
# the primary stops hard and the standby is promoted.  Its archiver
# continues the same generation on timeline 2 (the timelines file records
# the switch point), more traffic follows, and a restart resumes the same
# generation.  The oracle is the new primary's table: every id inserted on
# either timeline is archived exactly once, the archived updates number
# sum(n) (none lost, none doubled), restore() at the end equals the table,
# and verify() finds nothing.
use Time::HiRes qw(time usleep);
use ChangestreamTest;

plan skip_all => 'failover slots need PostgreSQL 17 or later'
  if cs_pg_major() < 17;

my $primary = cs_setup('primary', archive => 1, conf => qq(
changestream.flush_interval = '100ms'
wal_keep_size = '256MB'
),
	sql => q{
CREATE TABLE t (id int PRIMARY KEY, v text NOT NULL, n int NOT NULL DEFAULT 0);
INSERT INTO t (id, v) SELECT g, 'row ' || g FROM generate_series(1, 200) g;
CREATE SEQUENCE ids START 1001;
CREATE PUBLICATION changestream FOR TABLE t;
});
my $dir = cs_archive_dir($primary);
is( $primary->safe_psql('postgres',
		"SELECT failover FROM pg_replication_slots WHERE slot_name = 'changestream'"),
	't', 'the archiver\'s slot is a failover slot');

$primary->safe_psql('postgres',
	"SELECT pg_create_physical_replication_slot('sb1')");
$primary->safe_psql('postgres',
	"ALTER SYSTEM SET synchronized_standby_slots = 'sb1'; SELECT pg_reload_conf()");

$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
(my $connstr = $primary->connstr('postgres')) =~ s/'/''/g;
$standby->append_conf('postgresql.conf', qq(
primary_conninfo = '$connstr application_name=standby'
primary_slot_name = 'sb1'
hot_standby_feedback = on
sync_replication_slots = on
));
$standby->start;
cs_wait_state($standby, 'standby', name => 'the standby waits');

# Each transaction: a new id, and one existing row's counter bumped.
sub traffic
{
	my ($node, $count) = @_;
	for my $i (1 .. $count)
	{
		$node->safe_psql('postgres', qq{
BEGIN;
INSERT INTO t (id, v) VALUES (nextval('ids'), 'txn $i');
UPDATE t SET n = n + 1 WHERE id = 1 + ($i * 37) % 200;
COMMIT;
});
	}
}

traffic($primary, 40);
cs_wait_archived($primary, name => 'before the sync');
cs_poll_or_diag($standby, 'postgres',
	"SELECT synced AND NOT temporary FROM pg_replication_slots WHERE slot_name = 'changestream'",
	't', 120, 'the standby holds the synchronized slot');
traffic($primary, 40);
cs_wait_archived($primary, name => 'after the sync');
my $gen = $primary->safe_psql('postgres',
	'SELECT generation FROM changestream.generations()');

$primary->stop('immediate');
$standby->promote;
# What an HA manager does at failover: the new primary's
# synchronized_standby_slots names its own standbys' slots (here none; the
# old primary's 'sb1' came across in the backup and would hold logical
# walsenders back).
$standby->safe_psql('postgres',
	"ALTER SYSTEM RESET synchronized_standby_slots; SELECT pg_reload_conf()");
cs_wait_state($standby, 'streaming', name => 'the promoted server archives');
my $log = cs_log_since($standby, 0);
like($log, qr/continuing generation $gen on timeline 2 after a promotion/,
	'the archiver continues the generation after the promotion');
unlike($log, qr/started generation/, 'no new generation is started');

traffic($standby, 40);
cs_wait_archived($standby, name => 'after the promotion');
$standby->restart;
cs_wait_state($standby, 'streaming', name => 'the restarted server archives');
traffic($standby, 10);
cs_wait_archived($standby, name => 'after the restart');

my @gens = cs_generations($standby);
is(scalar(@gens), 1, 'one generation across the failover and the restart')
  or diag(join("\n", map { join('|', @$_) } @gens));
is($gens[0][0], $gen, 'it is the primary\'s generation');
like(PostgreSQL::Test::Utils::slurp_file("$dir/generations/$gen/timelines"),
	qr/^#[^\n]*\n2 [0-9A-F]+\/[0-9A-F]+\n\z/,
	'the timelines file records timeline 2 and its switch point');
is( $standby->safe_psql('postgres',
		"SELECT gap_start_lsn IS NULL FROM changestream.generations()"),
	't', 'generations() shows no gap');

# The oracle: the new primary's table.
is( $standby->safe_psql('postgres', qq{
SELECT count(*), count(DISTINCT new_row->>'id')
FROM changestream.changes('$gen', relations => ARRAY['public.t'])
WHERE action = 'insert' AND (new_row->>'id')::int > 1000}),
	$standby->safe_psql('postgres',
		"SELECT count(*), count(*) FROM t WHERE id > 1000"),
	'every id inserted on either timeline is archived exactly once');
is( $standby->safe_psql('postgres', qq{
SELECT string_agg(id, ',' ORDER BY id::int) FROM (
	SELECT new_row->>'id' AS id FROM changestream.changes('$gen', relations => ARRAY['public.t'])
	WHERE action = 'insert' AND (new_row->>'id')::int > 1000) a}),
	$standby->safe_psql('postgres',
		"SELECT string_agg(id::text, ',' ORDER BY id) FROM t WHERE id > 1000"),
	'the archived ids are the table\'s');
is( $standby->safe_psql('postgres', qq{
SELECT count(*) FROM changestream.changes('$gen', relations => ARRAY['public.t'])
WHERE action = 'update'}),
	$standby->safe_psql('postgres', 'SELECT sum(n) FROM t'),
	'the archived updates number sum(n): none lost, none doubled');
is($standby->safe_psql('postgres', 'SELECT sum(n) FROM t'), '130',
	'130 transactions bumped a counter');

$standby->safe_psql('postgres', "SELECT * FROM changestream.restore('r')");
is( $standby->safe_psql('postgres',
		'SELECT count(*) FROM (SELECT * FROM t EXCEPT SELECT * FROM r.t) a') . '/'
	  . $standby->safe_psql('postgres',
		'SELECT count(*) FROM (SELECT * FROM r.t EXCEPT SELECT * FROM t) a'),
	'0/0', 'restore() at the end equals the table');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM changestream.verify()'),
	'0', 'verify() finds nothing');

done_testing();
