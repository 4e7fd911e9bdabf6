
# The compressor worker (issue 9, items 1 and 2).
#
# (a) Under a steady load that seals a segment every fraction of a second
#     (segment_size 64kB, 8 s of pgbench without pause), sealed segments are
#     compressed beside the stream: the number of raw sealed segments,
#     sampled every 200 ms, stays bounded, and status() shows the
#     compressor.
# (b) A raw twin left beside a .wal.gz (a crash between the rename of the
#     .gz and the removal of the raw segment) is removed.
# (c) Compression that keeps failing (a directory where the compressor's
#     .wal.gz.tmp must go: "could not remove file ...: Is a directory")
#     never ends the streaming session: through a load and one more failed
#     attempt once the stream has caught up, no "streaming again", no new
#     generation, the same archiver process in state streaming; the error
#     is in status() and logged once, never with zlib's "<fd:N>:" prefix;
#     and the archive still matches the oracle.  With the obstacle gone,
#     the backlog is compressed and every .gz passes gzip -t.
use strict;
use warnings;

use File::Copy;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use ChangestreamTest;

my $node = cs_setup('compressor',
	conf => "changestream.segment_size = '64kB'\n",
	pgbench => 1,
	publish_pgbench => 1,
	oracle => 1,
	archive => 1);
my $dir = cs_archive_dir($node);
my ($gen, $start_lsn) = cs_single_generation($node, 'first start');
my $wal_dir = "$dir/generations/$gen/wal";
my $archiver_pid = cs_worker_pid($node);

# Raw segments in wal/ other than the newest: the sealed raw ones.
sub raw_sealed
{
	opendir(my $dh, $wal_dir) or die "opendir $wal_dir: $!";
	my @raw = sort grep { /^[0-9a-f]{16}\.wal$/ } readdir($dh);
	closedir($dh);
	return @raw ? scalar(@raw) - 1 : 0;
}

############################################################################
# (a) steady load

my $st = cs_status($node);
ok($st->{compressor_pid} ne '', "status() shows the compressor's pid");
my $off = cs_log_offset($node);
my $bench = cs_pgbench_bg($node, 'postgres', '-c', '4', '-j', '2', '-T', '8', '-n');
my @samples;
my $t_end = time() + 7.5;
while (time() < $t_end)
{
	push @samples, raw_sealed();
	usleep(200_000);
}
my ($bench_ok, $bench_out, $bench_err) = cs_pgbench_finish($bench);
ok($bench_ok, 'pgbench ran') or diag($bench_err);
my ($tps) = $bench_out =~ /tps = ([\d.]+)/;
my $target = cs_wait_archived($node, name => 'after the steady load');
my $segments = scalar(cs_wal_segments($node, $gen));
my $max = (sort { $b <=> $a } @samples)[0];
note("steady load: $tps tps, $segments segments, raw sealed segments sampled: @samples");
cmp_ok($segments, '>=', 10, "the load sealed many segments ($segments)");
cmp_ok($max, '<=', 3, "raw sealed segments stay bounded under the load (at most $max)");
cs_poll_or_diag($node, 'postgres',
	"SELECT raw_sealed_segments = 0 AND compressed_segments >= $segments - 1 FROM changestream.status()",
	't', 30, 'status(): no raw sealed segment left, every sealed one compressed');
my $log = cs_log_since($node, $off);
unlike($log, qr/streaming again|started generation/,
	'no session ended during the load');
is(cs_worker_pid($node), $archiver_pid, 'the same archiver process');

############################################################################
# (b) a raw twin beside a .gz is removed

my @segs = cs_wal_segments($node, $gen);
my ($sealed) = grep { $_->{compressed} eq 't' } @segs;
(my $twin = "$wal_dir/$sealed->{file}") =~ s/\.gz$//;
system("gzip -dc '$wal_dir/$sealed->{file}' > '$twin'") == 0
  or die "gunzip $sealed->{file}";
ok(-f $twin, "raw twin $sealed->{file} without .gz made");
cs_pgbench($node, 'postgres', '-c', '1', '-t', '300', '-n');    # seal one more
my $deadline = time() + 30;
usleep(200_000) while -e $twin && time() < $deadline;
ok(!-e $twin, 'the compressor removes the raw twin');

############################################################################
# (c) compression keeps failing: streaming goes on

my $idx = $node->safe_psql('postgres', 'SELECT segment_index FROM changestream.status()');
my @blocked;
for my $i ($idx .. $idx + 50)
{
	my $tmp = sprintf("%s/%016x.wal.gz.tmp", $wal_dir, $i);
	mkdir $tmp or die "mkdir $tmp: $!";
	push @blocked, $tmp;
}
$off = cs_log_offset($node);
my $gens_before = scalar(cs_generations($node));
$bench = cs_pgbench_bg($node, 'postgres', '-c', '2', '-T', '5', '-n');
cs_poll_or_diag($node, 'postgres',
	"SELECT last_compress_error ~ 'could not remove file .*wal\\.gz\\.tmp' AND last_compress_error_at IS NOT NULL FROM changestream.status()",
	't', 60, 'status() shows the compression error');
($bench_ok, $bench_out, $bench_err) = cs_pgbench_finish($bench);
ok($bench_ok, 'pgbench ran while compression failed') or diag($bench_err);
$target = cs_wait_archived($node, name => 'while compression fails');
# one more failed attempt of the compressor (after its backoff delay) with
# the stream caught up
my $err_at = $node->safe_psql('postgres', 'SELECT last_compress_error_at FROM changestream.status()');
cs_poll_or_diag($node, 'postgres',
	"SELECT last_compress_error_at > '$err_at' FROM changestream.status()",
	't', 90, 'the compressor fails again, the stream caught up');
$st = cs_status($node);
is($st->{state}, 'streaming', 'the archiver is still streaming');
is(cs_worker_pid($node), $archiver_pid, 'the same archiver process');
cmp_ok($st->{raw_sealed_segments}, '>=', 2,
	"sealed segments wait raw meanwhile ($st->{raw_sealed_segments})");
is($st->{last_error}, '', 'the archiver itself has no error');
$log = cs_log_since($node, $off);
my $sessions = () = $log =~ /streaming again|started generation|resuming generation/g;
is($sessions, 0, 'no new streaming session while compression fails');
is(scalar(cs_generations($node)), $gens_before, 'no new generation');
my $errors = () = $log =~ /ERROR:  could not remove file .*\.wal\.gz\.tmp/g;
cmp_ok($errors, '>=', 1, 'the compression error is logged');
cmp_ok($errors, '<=', 2, "and only once, repeats counted ($errors)");
unlike($log, qr/<fd:\d+>/, "zlib's <fd:N> prefix does not leak into the log");
like($log, qr/HINT:  .*streaming is not affected|DETAIL:  Sealed changestream segment/,
	'the message says the segment stays uncompressed')
  if $errors;
cs_compare_with_oracle(
	$node,
	gen       => $gen,
	start_lsn => $start_lsn,
	target    => $target,
	name      => 'oracle while compression fails',
	min_txns  => 300);

# The obstacle removed and the backoff ended by a reload: the backlog goes.
rmdir $_ or die "rmdir $_: $!" for @blocked;
$off = cs_log_offset($node);
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
cs_poll_or_diag($node, 'postgres',
	"SELECT raw_sealed_segments = 0 FROM changestream.status()",
	't', 60, 'the backlog is compressed once the obstacle is gone');
is(raw_sealed(), 0, 'only the active segment is raw');
like(cs_log_since($node, $off),
	qr/compressing sealed changestream segments again after \d+ failed attempts?/,
	'the recovery is logged with the number of failed attempts');
cs_gzip_test($node, $gen, 'after the failures');

$node->stop;
done_testing();
