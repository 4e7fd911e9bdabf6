
# (c) Idle database: the archived database (postgres) stays idle while
# pgbench runs in another database (busy).  The archiver's slot must keep
# advancing (durable keepalive positions), or WAL would pile up; and after a
# restart the idle period must not look like a gap (still one generation).
# Each busy round is 1,000 pgbench transactions (-t 500 per client; it was
# -T 3, 3 s of two unthrottled clients, several thousand transactions, and
# CPU the rest of the suite waited for): a few hundred kB of WAL, well over
# the 100 kB round 1 must write, none of it in the archived database.
use ChangestreamTest;

my $node = cs_setup('idle',
	sql => q{
CREATE TABLE idle_t (id int PRIMARY KEY, v text);
CREATE PUBLICATION changestream FOR TABLE idle_t;
CREATE DATABASE busy;
});
cs_pgbench($node, 'busy', '-i', '-s', '1', '-q');
cs_start_archiving($node);
my ($gen0) = cs_single_generation($node, 'at start');

my $slot_q = "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'changestream'";
my $prev = $node->safe_psql('postgres', $slot_q);
my $restart0 = $node->safe_psql('postgres',
	"SELECT restart_lsn FROM pg_replication_slots WHERE slot_name = 'changestream'");
note("slot confirmed_flush_lsn at start: $prev, restart_lsn $restart0");

sub busy_round
{
	my ($label) = @_;
	cs_pgbench($node, 'busy', '-c', '2', '-j', '2', '-t', '500', '-n');
	my $after = $node->safe_psql('busy', 'SELECT pg_current_wal_lsn()');
	# within 20 status intervals (500ms) of the end of the traffic
	cs_poll_or_diag($node, 'postgres',
		"SELECT confirmed_flush_lsn >= '$after' FROM pg_replication_slots WHERE slot_name = 'changestream'",
		't', 10,
		"$label: slot confirmed_flush_lsn passes $after, the position after the busy traffic, within 10s"
	  )
	  or diag("slot: "
		  . $node->safe_psql('postgres', $slot_q)
		  . "\nwalsender (application_name|sent|write|flush): "
		  . $node->safe_psql('postgres',
			"SELECT application_name, sent_lsn, write_lsn, flush_lsn FROM pg_stat_replication"));
	# and in any case eventually (so that the rest of the test can go on)
	cs_poll($node, 'postgres',
		"SELECT confirmed_flush_lsn >= '$after' FROM pg_replication_slots WHERE slot_name = 'changestream'",
		't', 60);
	my $st = cs_status($node);
	ok(cs_lsn_ge($st->{flushed_lsn}, $after),
		"$label: status().flushed_lsn $st->{flushed_lsn} >= $after");
	ok(cs_lsn_ge($st->{confirmed_flush_lsn}, $after),
		"$label: status().confirmed_flush_lsn $st->{confirmed_flush_lsn} >= $after");
	return $after;
}

my $a1 = busy_round('round 1');
ok(cs_lsn_to_int($a1) > cs_lsn_to_int($prev) + 100_000,
	'round 1: the busy database wrote WAL (more than 100kB)');
# A checkpoint logs the running transactions: a point the slot's
# restart_lsn can move to once the confirmed position passes it.
$node->safe_psql('busy', 'CHECKPOINT');
my $a2 = busy_round('round 2');
ok(cs_lsn_to_int($a2) > cs_lsn_to_int($a1), 'round 2: WAL advanced again');

# Nothing of the busy database is archived: not one transaction.
my $counts = $node->safe_psql('postgres',
	"SELECT count(*) FILTER (WHERE get_byte(data, 0) IN (66, 67, 73, 85, 68, 84)) FROM changestream.wal_records('$gen0')"
);
is($counts, '0', 'no transaction of the busy database is archived');

# The slot no longer holds the WAL of the busy rounds back: its
# restart_lsn moved past its initial value.
cs_poll_or_diag($node, 'postgres',
	"SELECT restart_lsn > '$restart0' FROM pg_replication_slots WHERE slot_name = 'changestream'",
	't', 30, "slot restart_lsn advances past $restart0");

# Clean restart after the idle period: the archive recorded the keepalive
# position durably, so the slot is not "ahead of the archive".
$node->restart;
cs_wait_state($node, 'streaming', name => 'streaming after restart');
my ($gen1) = cs_single_generation($node, 'after restart following an idle period');
is($gen1, $gen0, 'restart after an idle period keeps the generation');
my $a3 = busy_round('round 3 (after restart)');

# And after a crash of the whole server in the idle state.
cs_crash($node, also_archiver => 1);
cs_start_after_crash($node);
cs_wait_state($node, 'streaming', name => 'streaming after crash');
my ($gen2) = cs_single_generation($node, 'after a crash following an idle period');
is($gen2, $gen0, 'crash after an idle period keeps the generation');
busy_round('round 4 (after crash)');

# A change in the idle database is still archived after all this.
$node->safe_psql('postgres', "INSERT INTO idle_t VALUES (1, 'finally')");
my $target = cs_wait_archived($node, name => 'idle table change');
my $ins = $node->safe_psql('postgres',
	"SELECT count(*) FROM changestream.wal_records('$gen0') WHERE get_byte(data, 0) = 73"
);
is($ins, '1', 'the one INSERT into the idle database is archived');

$node->stop;
done_testing();
