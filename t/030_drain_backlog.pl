
# Draining a backlog (issue 13).  With the archiver stopped, pgbench writes
# several MB of WAL; the archiver then catches up with it, batching while it
# is far behind (it naps on an empty socket instead of waiting on it) and
# reporting flushes only every status_interval until the backlog is
# drained.  The archive must equal the oracle slot transaction for
# transaction, and the drained backlog must be reported at once: with
# status_interval = 1h only a flush's own report can move the slot's
# confirmed_flush_lsn, so it must pass the backlog's end within seconds of
# status().flushed_lsn doing so.
#
# While it catches up, the compressor waits (compression_deferred): it
# starts a segment only once DEFER_MAX_RAW (4) sealed segments wait raw.
# With 64 kB segments the backlog spans dozens of them: the compressor's
# DEBUG1 message shows that it waited, and once the backlog is drained it
# is woken at once (not by its 10 s rescan), resumes and compresses every
# sealed segment.
use ChangestreamTest;
use Time::HiRes qw(time);

my $node = cs_setup('drain',
	conf => qq(
changestream.segment_size = 64kB
log_min_messages = debug1
),
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

my $log_offset = cs_log_offset($node);
cs_start_archiving($node, reload => 1);
cs_poll_or_diag($node, 'postgres',
	"SELECT flushed_lsn >= '$target' FROM changestream.status()",
	't', 180, "the backlog is archived: flushed_lsn reaches $target");
my $drained_at = time;

# While catching up the group commit window is flush_interval (200 ms);
# once the backlog is drained the commit rate is measured afresh, so the
# window of the now quiet stream is 5 ms at once, not the 20 ms the
# drain's rate (thousands of commits a second) would give.  With
# status_interval = 1h nothing else would refresh it for many seconds.
cs_poll_or_diag($node, 'postgres',
	"SELECT group_commit_ms FROM changestream.status()",
	'5', 5, 'after the drain the group commit window is 5 ms within 5 s');

# the compressor waited while the archiver caught up, then resumed
my $log = cs_log_since($node, $log_offset);
like($log, qr/changestream compressor waits for the archiver to catch up/,
	'the compressor waited while the archiver caught up with the backlog');
cs_poll_or_diag($node, 'postgres',
	"SELECT NOT s.compression_deferred AND NOT EXISTS (
	   SELECT 1 FROM changestream.wal_segments(s.generation) w
	   WHERE w.segment_index < s.segment_index AND NOT w.compressed)
	 FROM changestream.status() s",
	't', 120,
	'after the drain the compressor resumes: every sealed segment is compressed');
# the end of catching up sets the compressor's latch: without that wakeup
# it would look again only at its rescan, up to 10 s later (RESCAN_MS),
# while a woken compressor compresses these few 64 kB segments in ms
my $resumed_after = sprintf('%.2f', time - $drained_at);
cmp_ok($resumed_after, '<', 3,
	"the end of catching up woke the compressor ($resumed_after s after the drain, not the 10 s rescan)");
$log = cs_log_since($node, $log_offset);
like($log, qr/changestream compressor resumes/,
	'the compressor logged that it resumed');

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
