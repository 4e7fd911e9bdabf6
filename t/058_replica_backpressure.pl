
# Back-pressure of the replica (issue 31 section 4; docs/replica.md,
# docs/DESIGN.md section 15): changestream.replica_max_backlog bounds the
# finished archive files not yet in the bucket.
#
# - A cluster archives pgbench traffic to a real object store through the
#   fault proxy, with a backlog limit of 256 kB and 64 kB segments.
# - The bucket goes away (the proxy refuses connections) while pgbench
#   runs: the uploader backs off, its backlog passes the limit and the
#   archiver stops reading the slot: status().state is
#   waiting_for_replica, and it stays so after pgbench ends, the server
#   keeping the WAL in the slot (its confirmed_flush_lsn stays behind the
#   server's WAL and never passes what the archive holds durably).
# - The backlog stays bounded: its largest value seen is under the limit
#   plus what the archiver writes in the uploader's 2 s between two counts
#   (at most 4 MB here), while the WAL waiting in the slot grows past it.
# - The bucket comes back: the backlog drains (under half the limit), the
#   archiver streams again, and the archive equals the oracle slot
#   transaction for transaction; every finished local file is in the
#   bucket with its size (awscli).
# - The server log has one line when the archiver stops and one when it
#   goes on.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Find;
use Time::HiRes qw(time usleep);
use ChangestreamTest;
use S3FaultProxy;

my $s3 = cs_object_store();
my $bucket = cs_s3_bucket($s3, 'backpressure');
my $proxy = S3FaultProxy->new(upstream => $s3->{endpoint});
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $prefix = 'bp';
my $db = 'postgres';
my $limit_kb = 256;

my $node = cs_setup('backpressure', pgbench => 1, publish_pgbench => 1,
	oracle => 1,
	conf => qq{
changestream.segment_size = '64kB'
changestream.segment_timeout = '1s'
changestream.replica_max_backlog = '${limit_kb}kB'
} . cs_replica_conf($s3, bucket => $bucket, prefix => $prefix, dir => $tmp,
		endpoint => $proxy->url));
cs_start_archiving($node);
my $archive = cs_archive_dir($node);
my ($gen, $start) = cs_single_generation($node, 'at start');

# Finished local files (identity, compressed segments, snapshots): name => size.
sub local_files
{
	my %f;
	find(
		{
			no_chdir => 1,
			wanted => sub {
				return unless -f $_;
				my $rel = substr($_, length($archive) + 1);
				return unless $rel =~ m{^generations/[0-9a-f]{16}/(generation|wal/[0-9a-f]+\.wal\.gz|snapshots/[0-9a-f]+\.snapshot\.gz)$};
				$f{$rel} = -s $_;
			}
		},
		"$archive/generations");
	return \%f;
}

# Objects under the prefix, as awscli lists them: name => size.
sub bucket_objects { return cs_bucket_objects($s3, $bucket, $prefix); }

# The local files missing from the bucket or there with another size.
sub missing_from_bucket
{
	my $local = local_files();
	my $objects = bucket_objects();
	return join(' ', grep {
		!defined $objects->{$_} || $objects->{$_} != $local->{$_}
	} sort keys %$local);
}

# first, the generation is up
cs_pgbench($node, $db, '-T', '2', '-c', '2', '-n');
cs_poll_or_diag($node, $db,
	q{SELECT replica_state = 'idle' AND replica_backlog_files = 0 AND replica_flushed_lsn IS NOT NULL FROM changestream.status()},
	't', 120, 'the uploader is idle with no backlog before the outage');

######################################################################
# Outage: the archiver stops at the limit

my $log_from = cs_log_offset($node);
$proxy->down;
my $wal_before = $node->safe_psql($db, 'SELECT pg_current_wal_lsn()');
my $bench = cs_pgbench_bg($node, $db, '-T', '20', '-c', '2', '-n');
cs_poll_or_diag($node, $db,
	q{SELECT state FROM changestream.status()},
	'waiting_for_replica', 90,
	'past the backlog limit the archiver waits for the replica');
my $max_backlog = 0;
my $bad_confirm = 0;
while ($bench->{run}->pumpable)
{
	my $row = $node->safe_psql($db, q{
SELECT s.replica_backlog_bytes, s.state,
       s.confirmed_flush_lsn <= s.flushed_lsn
  FROM changestream.status() s});
	my ($bytes, $state, $conf_ok) = split /\|/, $row;
	$max_backlog = $bytes if $bytes ne '' && $bytes > $max_backlog;
	$bad_confirm++ if $conf_ok ne 't';
	usleep(200_000);
	$bench->{run}->pump_nb;
}
my ($bench_ok, $bench_out, $bench_err) = cs_pgbench_finish($bench);
ok($bench_ok, 'pgbench ran through the outage') or diag($bench_err);
is( $node->safe_psql($db, 'SELECT state FROM changestream.status()'),
	'waiting_for_replica', 'the archiver still waits once pgbench has ended');
is($bad_confirm, 0,
	'the slot was never confirmed past what the archive holds durably');
my $held = $node->safe_psql($db, qq{
SELECT pg_current_wal_lsn() - confirmed_flush_lsn
  FROM pg_replication_slots WHERE slot_name = 'changestream'});
my $written = $node->safe_psql($db,
	"SELECT pg_current_wal_lsn() - '$wal_before'::pg_lsn");
note("WAL written during the outage: $written bytes; waiting in the slot: $held bytes; largest backlog seen: $max_backlog bytes");
ok($held > 4 * 1024 * 1024,
	"the server keeps the WAL in the slot meanwhile ($held bytes)");
ok($max_backlog > $limit_kb * 1024,
	"the backlog reached the limit ($max_backlog bytes)");
ok($max_backlog < $limit_kb * 1024 + 4 * 1024 * 1024,
	"the backlog stayed bounded: $max_backlog bytes at most, under the limit plus 4 MB");
my $stopped = $node->safe_psql($db, q{
SELECT flushed_lsn FROM changestream.status()});
cs_poll_or_diag($node, $db,
	qq{SELECT confirmed_flush_lsn <= '$stopped'::pg_lsn FROM pg_replication_slots WHERE slot_name = 'changestream'},
	't', 10, 'the slot is confirmed no further than the archive');

######################################################################
# The bucket comes back: drain, stream again, equal to the oracle

$proxy->up;
cs_wait_state($node, 'streaming', timeout => 180,
	name => 'the archiver streams again once the backlog drains');
my $target = cs_wait_archived($node, name => 'after the drain', timeout => 180);
cs_compare_with_oracle($node,
	name => 'through the outage',
	gen => $gen,
	start_lsn => $start,
	target => $target,
	min_txns => 100);
my $missing;
my $deadline = time() + 180;
while (1)
{
	$missing = missing_from_bucket();
	last if $missing eq '' || time() > $deadline;
	usleep(500_000);
}
is($missing, '', 'every finished local file is in the bucket with its size');
my $log = cs_log_since($node, $log_from);
my $stops = () = $log =~ /changestream archiver stops reading the slot/g;
my $goes_on = () = $log =~ /changestream archiver reads the slot again/g;
ok($stops >= 1 && $stops <= $goes_on + 1,
	"the log says when the archiver stops ($stops) and goes on ($goes_on)");
ok($goes_on >= 1, 'the log says the archiver reads the slot again');

$proxy->stop;
$node->stop;
done_testing();
