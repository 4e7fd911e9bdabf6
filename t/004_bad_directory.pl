
# (d) Bad directory: with the archive directory made read-only, the
# archiver reports a clear error (server log and status()), and the slot
# does not advance however much is written.  Once the directory is
# writable again, archiving resumes by itself with no gap: the oracle still
# matches and it is still one generation.
use ChangestreamTest;

my $node = cs_setup('baddir', conf => qq(
changestream.segment_size = '128kB'
),
	pgbench => 1,
	publish_pgbench => 1,
	oracle => 1,
	archive => 1);
my $dir = cs_archive_dir($node);
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

# Mid-stream: the generation's wal directory turns read-only while the
# archiver streams.  The open segment can still be appended to, but the
# next rotation (new file) and compression (tmp file) must fail with a clear
# error; once fixed, archiving resumes with no gap and no duplicate.
my $wal_dir = "$dir/generations/$gen/wal";
$log_offset = cs_log_offset($node);
chmod(0500, $wal_dir) or die "chmod $wal_dir: $!";
my $bench = cs_pgbench_bg($node, 'postgres', '-c', '2', '-T', '4', '-n');
cs_poll_or_diag($node, 'postgres',
	"SELECT last_error ~* 'permission denied' AND last_error_at > now() - interval '1 min' FROM changestream.status()",
	't', 30, 'a read-only wal directory mid-stream gives a permission error in status()');
my ($bench_ok, $bench_out, $bench_err) = cs_pgbench_finish($bench);
ok($bench_ok, 'pgbench ran while the wal directory was read-only') or diag($bench_err);
$log = cs_log_since($node, $log_offset);
like($log, qr/ERROR:.*permission denied.*\Q$wal_dir\E|ERROR:.*\Q$wal_dir\E.*permission denied/i,
	'the server log names the wal directory and the permission error');
chmod(0700, $wal_dir) or die "chmod $wal_dir: $!";
cs_wait_state($node, 'streaming', name => 'streaming again after the mid-stream failure',
	timeout => 90);
$target = cs_wait_archived($node, name => 'after the mid-stream failure');
($gen, $start_lsn) = cs_single_generation($node, 'after the mid-stream failure');
is($gen, $gen0, 'still the same generation after the mid-stream failure');
cs_compare_with_oracle(
	$node,
	gen       => $gen,
	start_lsn => $start_lsn,
	target    => $target,
	name      => 'oracle across the mid-stream failure',
	min_txns  => 1000);
cs_poll_or_diag($node, 'postgres',
	"SELECT count(*) FILTER (WHERE NOT compressed) FROM changestream.wal_segments('$gen')",
	'1', 60, 'sealed segments get compressed once the directory is writable');
cs_gzip_test($node, $gen, 'after the mid-stream failure');

# A second cluster pointed at the same archive directory is kept out by the
# lock: it reports the lock in status() and writes nothing.
my $intruder = cs_setup('intruder',
	conf => "changestream.directory = '$dir'\n",
	sql => q{
CREATE TABLE x (id int PRIMARY KEY);
CREATE PUBLICATION changestream FOR TABLE x;});
cs_poll_or_diag($intruder, 'postgres',
	"SELECT state = 'error' AND last_error ~* 'lock' FROM changestream.status()",
	't', 30, 'a second cluster on the same directory reports the lock');
is($intruder->safe_psql('postgres', 'SELECT count(*) FROM pg_replication_slots'),
	'0', 'the second cluster did not even create its slot');
like(cs_log_since($intruder, 0), qr/ERROR:.*locked by another archiver/,
	"the second cluster's log says the directory is locked");
cs_pgbench($node, 'postgres', '-c', '1', '-t', '50', '-n');
cs_wait_archived($node, name => 'first cluster while the second is locked out');
my @gens = cs_generations($node);
is(scalar(@gens), 1, 'still one generation in the shared directory');
$intruder->stop;

$node->stop;
done_testing();
