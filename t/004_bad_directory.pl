
# (d) Bad directory: with the archive directory made read-only, the
# archiver reports a clear error (server log and status()), and the slot
# does not advance however much is written.  Once the directory is
# writable again, archiving resumes by itself with no gap: the oracle still
# matches and it is still one generation.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;

my $node = cs_new_node('baddir', conf => qq(
changestream.segment_size = '128kB'
));
$node->start;
my $dir = cs_archive_dir($node);

cs_pgbench($node, 'postgres', '-i', '-s', '1', '-q');
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION changestream;
CREATE PUBLICATION changestream FOR TABLE
	pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history;
});
cs_create_oracle_slot($node);
cs_start_archiving($node);
cs_pgbench($node, 'postgres', '-c', '2', '-t', '200', '-n');
cs_wait_archived($node, name => 'before the directory breaks');
my ($gen0) = cs_single_generation($node, 'before the directory breaks');

# Break it while the server is down.
$node->stop;
system('chmod', '-R', 'a-w', $dir) == 0 or die "chmod failed";
SKIP:
{
	# as root the permission bits would not stop anything
	skip 'running as root: a read-only directory is still writable', 1
	  if $> == 0;
	ok(!-w "$dir/generations", 'archive directory is read-only now');
}
my $log_offset = cs_log_offset($node);
$node->start;

my $err_q = "SELECT state = 'error' AND last_error IS NOT NULL AND last_error_at IS NOT NULL FROM changestream.status()";
cs_poll_or_diag($node, 'postgres', $err_q, 't', 60,
	"status() shows state 'error' with the unwritable directory");
my $st = cs_status($node);
like($st->{last_error}, qr/permission denied/i,
	'status().last_error says permission denied');
like($st->{last_error}, qr/\Q$dir\E/,
	'status().last_error names the path');
my $log = cs_log_since($node, $log_offset);
like($log, qr/ERROR:.*permission denied/i, 'the server log has the error');
like($log, qr/\Q$dir\E/, 'the server log names the directory');

my $slot_before = cs_slot_confirmed($node);
cs_pgbench($node, 'postgres', '-c', '2', '-t', '200', '-n');
my $after_load = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
ok(cs_lsn_to_int($after_load) > cs_lsn_to_int($slot_before),
	'the load wrote WAL past the slot position');
# several status intervals (500ms) and retries
cs_sleep(4);
my $slot_after = cs_slot_confirmed($node);
is($slot_after, $slot_before,
	"slot confirmed_flush_lsn stays at $slot_before while the directory is unwritable");
$st = cs_status($node);
is($st->{state}, 'error', 'still in error after the load');
ok(!defined $st->{flushed_lsn} || $st->{flushed_lsn} eq ''
	  || !cs_lsn_ge($st->{flushed_lsn}, $after_load),
	'status().flushed_lsn does not claim the new load');

# No log flood: retries are spaced by a delay and a repeated failure is not
# logged again each time.
$log = cs_log_since($node, $log_offset);
my $errors = () = $log =~ /ERROR:.*permission denied/gi;
cmp_ok($errors, '<=', 4,
	"at most 4 error lines in about 7 seconds of retrying ($errors)");

# Fix it: archiving resumes on its own.
system('chmod', '-R', 'u+w', $dir) == 0 or die "chmod failed";
cs_wait_state($node, 'streaming', name => 'streaming again once the directory is writable',
	timeout => 90);
my $target = cs_wait_archived($node, name => 'after the fix');
cs_poll_or_diag($node, 'postgres',
	"SELECT confirmed_flush_lsn >= '$after_load' FROM pg_replication_slots WHERE slot_name = 'changestream'",
	't', 30, 'the slot advances again');

cs_pgbench($node, 'postgres', '-c', '2', '-t', '100', '-n');
$target = cs_wait_archived($node, name => 'after more load');
my ($gen, $start_lsn) = cs_single_generation($node, 'after the fix');
is($gen, $gen0, 'the same generation continues');
cs_compare_with_oracle(
	$node,
	gen       => $gen,
	start_lsn => $start_lsn,
	target    => $target,
	name      => 'oracle across the outage',
	min_txns  => 500);

$node->stop;
done_testing();
