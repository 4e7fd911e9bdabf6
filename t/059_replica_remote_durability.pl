
# Remote durability and the tail sync of the replica (issue 31 sections 1,
# 3 and 6; docs/replica.md, docs/DESIGN.md section 15), against a real
# object store through the fault proxy.
#
# - changestream.replica_durability = remote, changestream.synchronous on,
#   synchronous_standby_names naming the archiver: commits one after
#   another return, and when each returns status().replica_flushed_lsn
#   (the bucket's durable position) is already past it; the active
#   segment's bytes are in the bucket as tail objects
#   (tail/generations/<gen>/wal/<index>.wal.<start>-<end>), whose
#   concatenation, downloaded with awscli, equals the local segment's
#   bytes (seal area aside).
# - The bucket blocked (the proxy refuses connections): a commit waits in
#   SyncRep and does not return although the local archive holds it;
#   status().replica_lag_seconds grows above 0; the slot is not confirmed
#   past the bucket's position.  The bucket back: the commit returns, the
#   bucket's position is past it.
# - Under pgbench, the slot's confirmed_flush_lsn read before
#   replica_flushed_lsn is never past it.
# - Segments sealed by size go up compressed and their tail objects are
#   removed from the bucket.
# - The uploader stopped (SIGTERM) and started again by the server: a
#   commit meanwhile returns once in the bucket, no tail object is put
#   twice, and the new uploader goes on after the tail objects the listing
#   shows instead of from the segment's start.
# - replica_durability = local with replica_sync_interval = 1s: a commit's
#   bytes reach the bucket as a tail object without the segment being
#   sealed (segment_timeout is off), and replica_lag_seconds returns to 0.
# - The archive equals the table (changes() against the rows).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);
use ChangestreamTest;
use S3FaultProxy;

my $s3 = cs_object_store();
my $bucket = cs_s3_bucket($s3, 'remote');
my $proxy = S3FaultProxy->new(upstream => $s3->{endpoint});
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $prefix = 'rd';
my $db = 'postgres';

my $node = cs_setup('remote', pgbench => 1, publish_pgbench => 1,
	conf => qq{
changestream.segment_size = '64kB'
changestream.segment_timeout = 0
changestream.synchronous = on
changestream.replica_durability = remote
} . cs_replica_conf($s3, bucket => $bucket, prefix => $prefix, dir => $tmp,
		endpoint => $proxy->url),
	sql => q{
CREATE TABLE t (id int PRIMARY KEY, v text NOT NULL);
ALTER PUBLICATION changestream ADD TABLE t;
});
cs_start_archiving($node);
my $archive = cs_archive_dir($node);
$node->safe_psql($db,
	"ALTER SYSTEM SET synchronous_standby_names = 'changestream'; SELECT pg_reload_conf()");
cs_poll_or_diag($node, $db,
	"SELECT sync_state FROM pg_stat_replication WHERE application_name = 'changestream'",
	'sync', 60, 'the archiver is the synchronous standby');

# Insert row $id; returns the WAL insert position taken in its transaction.
sub insert_row
{
	my ($id, $v) = @_;
	my $lsn = $node->safe_psql($db,
		"INSERT INTO t VALUES ($id, '$v') RETURNING pg_current_wal_insert_lsn()",
		timeout => 120);
	return $lsn;
}

# Tail objects in the bucket: [key, generation, index, start, end, size].
sub tail_objects
{
	my ($rc, $out, $err) = cs_aws($s3, 's3api', 'list-objects-v2',
		'--bucket', $bucket, '--prefix', "$prefix/tail/", '--query',
		'Contents[].[Key,Size]', '--output', 'text');
	die "list-objects-v2 failed: $err" if $rc != 0;
	my @t;
	for my $line (split /\n/, $out)
	{
		my ($key, $size) = split /\s+/, $line;
		next unless defined $size
		  && $key =~ m{^\Q$prefix\E/tail/generations/([0-9a-f]{16})/wal/([0-9a-f]{16})\.wal\.([0-9a-f]{16})-([0-9a-f]{16})$};
		push @t, [ $key, $1, $2, hex($3), hex($4), $size ];
	}
	return @t;
}

######################################################################
# Commits return only once in the bucket

my $bad = '';
for my $i (1 .. 20)
{
	my $lsn = insert_row($i, 'one by one');
	my $remote = $node->safe_psql($db,
		"SELECT replica_flushed_lsn >= '$lsn'::pg_lsn FROM changestream.status()");
	$bad .= " $i" if $remote ne 't';
}
is($bad, '', 'when each commit returns, the bucket\'s durable position is past it');

my @tails = tail_objects();
ok(@tails >= 1, scalar(@tails) . ' tail objects are in the bucket');
my @bad_size = grep { $_->[5] != $_->[4] - $_->[3] } @tails;
is(scalar(@bad_size), 0, 'each tail object holds as many bytes as its name says');

# the newest segment's tail, downloaded with awscli, equals the local bytes
{
	my ($gen, $index) = @{ (sort { $b->[2] cmp $a->[2] } @tails)[0] }[ 1, 2 ];
	my @parts = sort { $a->[3] <=> $b->[3] } grep { $_->[1] eq $gen && $_->[2] eq $index } @tails;
	my $bytes = '';
	my $end = 0;
	for my $p (@parts)
	{
		my $file = "$tmp/part";
		my ($rc, $out, $err) = cs_aws($s3, 's3', 'cp', '--only-show-errors',
			"s3://$bucket/$p->[0]", $file);
		die "aws s3 cp failed: $err" if $rc != 0;
		my $data = PostgreSQL::Test::Utils::slurp_file($file);
		next if $p->[3] > $end;
		$bytes .= substr($data, $end - $p->[3]) if $p->[4] > $end;
		$end = $p->[4] if $p->[4] > $end;
	}
	my $local = PostgreSQL::Test::Utils::slurp_file(
		"$archive/generations/$gen/wal/$index.wal");
	my $prefix_local = substr($local, 0, $end);
	# the seal area (bytes 64 to 127) is zeros in a tail object
	substr($prefix_local, 64, 64) = "\0" x 64 if $end >= 128;
	ok($end > 128, "the tail objects of segment $index cover $end bytes from its start");
	ok($bytes eq $prefix_local,
		'their concatenation equals the local segment\'s bytes');
}

######################################################################
# The bucket blocked: a commit waits

$proxy->down;
my ($out, $err) = ('', '');
my $commit = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr($db), '-c',
		"INSERT INTO t VALUES (1000, 'waits') RETURNING pg_current_wal_insert_lsn()" ],
	'>', \$out, '2>', \$err);
cs_poll_or_diag($node, $db,
	"SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query LIKE 'INSERT INTO t VALUES (1000%'",
	'1', 60, 'the commit waits in SyncRep while the bucket is blocked');
my $local_has = cs_poll_or_diag($node, $db,
	q{SELECT count(*) FROM changestream.changes() WHERE action = 'insert' AND new_row->>'id' = '1000'},
	'1', 60, 'the local archive holds it');
cs_poll_or_diag($node, $db,
	q{SELECT replica_lag_seconds > 0 FROM changestream.status()},
	't', 60, 'replica_lag_seconds is above 0 while the bucket lacks it');
cs_sleep(1);
eval { $commit->pump_nb };
ok($commit->pumpable && $out eq '', 'the commit has not returned');
is($node->safe_psql($db,
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"),
	'1', 'it still waits a second later');
my $row = $node->safe_psql($db, q{
SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'changestream';
SELECT replica_flushed_lsn, flushed_lsn FROM changestream.status();});
my ($confirmed, $rest) = split /\n/, $row;
my ($remote, $flushed) = split /\|/, $rest;
ok(cs_lsn_to_int($confirmed) <= cs_lsn_to_int($remote),
	"the slot ($confirmed) is not confirmed past the bucket ($remote)");
ok(cs_lsn_to_int($remote) < cs_lsn_to_int($flushed),
	"the bucket ($remote) is behind the local archive ($flushed)");
$proxy->up;
ok(eval { $commit->finish; 1 }, 'the commit returns once the bucket is back')
  or diag("psql: $err");
(my $commit_lsn = $out) =~ s/\s+$//;
is( $node->safe_psql($db,
		"SELECT replica_flushed_lsn >= '$commit_lsn'::pg_lsn FROM changestream.status()"),
	't', 'the bucket\'s durable position is past it');

######################################################################
# Under pgbench: the slot never passes the bucket

my $bench = cs_pgbench_bg($node, $db, '-T', '8', '-c', '4', '-n');
my ($samples, $past) = (0, 0);
while ($bench->{run}->pumpable)
{
	my $r = $node->safe_psql($db, q{
SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'changestream';
SELECT replica_flushed_lsn FROM changestream.status();});
	my ($c, $rl) = split /\n/, $r;
	$samples++;
	$past++ if cs_lsn_to_int($c) > cs_lsn_to_int($rl);
	usleep(100_000);
	$bench->{run}->pump_nb;
}
my ($bench_ok, $bench_out, $bench_err) = cs_pgbench_finish($bench);
ok($bench_ok, 'pgbench with remote durability ran') or diag($bench_err);
my ($tps) = $bench_out =~ /tps = ([0-9.]+)/;
note("pgbench with replica_durability = remote: $tps tps");
is($past, 0, "in $samples samples the slot was never confirmed past the bucket");

# segments sealed by size: up compressed, their tail objects removed
my $sealed = $node->safe_psql($db, 'SELECT segment_index FROM changestream.status()');
ok($sealed >= 1, "pgbench filled $sealed segments");
my $deadline = time() + 120;
my $stale;
while (1)
{
	my ($rc, $o, $e) = cs_aws($s3, 's3api', 'list-objects-v2',
		'--bucket', $bucket, '--prefix', "$prefix/generations/", '--query',
		'Contents[].[Key]', '--output', 'text');
	my %gz = map { $_ => 1 } grep { /\.wal\.gz$/ } split /\n/, $o;
	$stale = join(' ', map { $_->[0] } grep {
		$gz{"$prefix/generations/$_->[1]/wal/$_->[2].wal.gz"}
	} tail_objects());
	last if ($stale eq '' && keys %gz >= $sealed) || time() > $deadline;
	usleep(500_000);
}
is($stale, '', 'no tail object is left for a segment up compressed');

######################################################################
# The uploader restarts: it goes on after the tail objects in the bucket

# tail object keys PUT through the proxy (not faulted): key => times
sub tail_puts
{
	my %n;
	for my $r ($proxy->requests)
	{
		next unless $r->{method} eq 'PUT' && $r->{fault} eq '-';
		next unless $r->{target} =~ m{^/\Q$bucket\E/(\Q$prefix\E/tail/[^?]+)$};
		$n{$1}++;
	}
	return \%n;
}
my $active = sprintf('%016x', $node->safe_psql($db,
	'SELECT segment_index FROM changestream.status()'));
my $covered = 0;
for my $t (sort { $a->[3] <=> $b->[3] } grep { $_->[2] eq $active } tail_objects())
{
	$covered = $t->[4] if $t->[3] <= $covered && $t->[4] > $covered;
}
my $puts_before = tail_puts();
my $old_uploader = $node->safe_psql($db, 'SELECT replica_pid FROM changestream.status()');
kill 'TERM', $old_uploader;
my $lsn_r = insert_row(3000, 'across an uploader restart');
my $new_uploader = $node->safe_psql($db, 'SELECT replica_pid FROM changestream.status()');
isnt($new_uploader, $old_uploader, 'a new uploader runs');
is( $node->safe_psql($db,
		"SELECT replica_flushed_lsn >= '$lsn_r'::pg_lsn FROM changestream.status()"),
	't', 'a commit across the restart returned once in the bucket');
my $puts_after = tail_puts();
is(join(' ', grep { $puts_after->{$_} > 1 } sort keys %$puts_after), '',
	'no tail object was put twice');
my @from_zero = grep {
	!$puts_before->{$_} && m{/wal/\Q$active\E\.wal\.0{16}-}
} keys %$puts_after;
ok($covered > 0 && !@from_zero,
	"the new uploader went on after the $covered bytes of segment $active in the bucket");

######################################################################
# Local durability with a 1 s sync interval

$node->safe_psql($db, q{
ALTER SYSTEM SET changestream.replica_durability = local;
ALTER SYSTEM SET changestream.replica_sync_interval = '1s';
SELECT pg_reload_conf();});
cs_poll_or_diag($node, $db, 'SHOW changestream.replica_durability', 'local', 30,
	'the reload is taken');
my $seg_before = $node->safe_psql($db, 'SELECT segment_index FROM changestream.status()');
my $lsn = insert_row(2000, 'synced by the interval');
cs_poll_or_diag($node, $db,
	"SELECT replica_flushed_lsn >= '$lsn'::pg_lsn FROM changestream.status()",
	't', 60, 'the commit reaches the bucket as a tail object');
is($node->safe_psql($db, 'SELECT segment_index FROM changestream.status()'),
	$seg_before, 'without its segment being sealed');
cs_poll_or_diag($node, $db,
	q{SELECT replica_lag_seconds = 0 FROM changestream.status()},
	't', 60, 'replica_lag_seconds is 0 once the bucket holds everything');

is( $node->safe_psql($db, q{
SELECT string_agg(new_row->>'id', ',' ORDER BY (new_row->>'id')::int)
FROM changestream.changes() WHERE action = 'insert' AND table_name = 't'}),
	$node->safe_psql($db, "SELECT string_agg(id::text, ',' ORDER BY id) FROM t"),
	'the archive holds exactly the table\'s rows');

$node->safe_psql($db,
	"ALTER SYSTEM RESET synchronous_standby_names; SELECT pg_reload_conf()");
$proxy->stop;
$node->stop;
done_testing();
