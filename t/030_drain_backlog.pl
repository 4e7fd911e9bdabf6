
# Draining a backlog (issue 13).  With the archiver stopped, pgbench writes
# several MB of WAL; the archiver then catches up with it, batching while it
# is far behind (it naps on an empty socket instead of waiting on it) and
# reporting flushes only every status_interval until the backlog is
# drained.  The archive must equal the oracle slot transaction for
# transaction, and the drained backlog must be reported at once: with
# status_interval = 1h only a flush's own report can move the slot's
# confirmed_flush_lsn, so it must pass the backlog's end within seconds of
# status().flushed_lsn doing so.
use ChangestreamTest;

my $node = cs_setup('drain',
	status_interval => '1h',
	pgbench => 1,
	publish_pgbench => 1,
	oracle => 1);
cs_start_archiving($node);
my ($gen, $start) = cs_single_generation($node, 'at start');

# stop archiving; the slot holds the WAL written meanwhile
$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.directory = ''; SELECT pg_reload_conf();");
cs_wait_state($node, 'disabled', name => 'archiver stopped');
my $from = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
cs_pgbench($node, 'postgres', '-c', '2', '-j', '2', '-t', '4000', '-n');
my $target = cs_fence($node);
my $backlog = cs_lsn_to_int($target) - cs_lsn_to_int($from);
cmp_ok($backlog, '>', 2 * 1024 * 1024,
	"the backlog is more than 2 MB of WAL ($backlog bytes)");

cs_start_archiving($node, reload => 1);
cs_poll_or_diag($node, 'postgres',
	"SELECT flushed_lsn >= '$target' FROM changestream.status()",
	't', 180, "the backlog is archived: flushed_lsn reaches $target");
cs_poll_or_diag($node, 'postgres',
	"SELECT confirmed_flush_lsn >= '$target' FROM pg_replication_slots WHERE slot_name = 'changestream'",
	't', 10,
	'the drained backlog is reported at once: the slot confirms it within 10 s (status_interval is 1h)'
);

cs_compare_with_oracle($node,
	name => 'backlog',
	gen => $gen,
	start_lsn => $start,
	target => $target,
	min_txns => 8000);

$node->stop;
done_testing();
