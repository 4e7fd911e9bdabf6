
# Reading the bucket when it misbehaves (issue 31, sections 4 and 5;
# docs/DESIGN.md section 16), with the readers' prefetch of the next
# segment objects in play.
#
# - A source server archives pgbench traffic to a real object store with a
#   replica; a fresh reader server (no local archive) reads the bucket
#   through the fault proxy (t/S3FaultProxy.pm).
# - changes() from the bucket equals the source's changes() from its local
#   archive, row for row (the oracle), so prefetching the next segments
#   changes nothing of what is read.
# - A GET of a segment object whose body stalls (stall_after_headers): a
#   pg_cancel_backend() ends the statement with the cancel error (57014),
#   and so does statement_timeout; neither waits for the client's stall
#   timeout (30 s, then retries), which would end it with another error.
#   How long each took is printed, not asserted.
# - An object removed between the statement's listing and its GET (the
#   statement lists the bucket, then waits on an advisory lock the test
#   holds while awscli deletes the object): 58P01 naming the key, not
#   XX001 (damage).
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ChangestreamTest;
use S3FaultProxy;

my $s3 = cs_object_store();
my $bucket = cs_s3_bucket($s3, 'rfault');
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $prefix = 'arch';
my $db = 'postgres';

sub replica_conf
{
	my ($endpoint) = @_;
	return cs_replica_conf($s3, bucket => $bucket, prefix => $prefix,
		dir => $tmp, endpoint => $endpoint);
}

my $src = cs_setup('source', pgbench => 1, publish_pgbench => 1,
	conf => qq{
changestream.segment_size = '64kB'
changestream.segment_timeout = '1s'
} . replica_conf($s3->{endpoint}));
cs_start_archiving($src);
cs_pgbench($src, $db, '-T', '3', '-c', '2', '-n');
my $last = $src->safe_psql($db, 'SELECT pg_current_wal_lsn()');
# a little more traffic, so that the last point's segment is sealed
cs_pgbench($src, $db, '-t', '50', '-c', '1', '-n');
cs_wait_bucket_covers($src, $db, $s3, $bucket, $prefix, $last,
	'the bucket holds the archive past the recorded point, in sealed segments');
my $gen = $src->safe_psql($db, 'SELECT generation FROM changestream.generations() ORDER BY 1 DESC LIMIT 1');
my $changes_sql = "SELECT commit_lsn, xid, ordinal, action, schema_name, table_name, old_row, new_row FROM changestream.changes('$gen', end_lsn => '$last') ORDER BY commit_lsn, ordinal";
my $oracle = $src->safe_psql($db, $changes_sql);
my $oracle_rows = scalar(split /\n/, $oracle);

my $objects = cs_bucket_objects($s3, $bucket, $prefix);
my @segs = sort grep { m{^generations/$gen/wal/[0-9a-f]{16}\.wal\.gz$} } keys %$objects;
ok(@segs >= 6, scalar(@segs) . " segment objects in the bucket, $oracle_rows rows of changes() up to the point");

my $proxy = S3FaultProxy->new(upstream => $s3->{endpoint});
my $reader = cs_new_node('reader', conf => replica_conf($proxy->url));
$reader->start;
$reader->safe_psql($db, 'CREATE EXTENSION changestream');

is($reader->safe_psql($db, $changes_sql), $oracle,
	'changes() from the bucket (through the proxy, segments prefetched) equals the source\'s changes() row for row');
my %gets;
$gets{$_}++ for map { $_->{method} eq 'GET' && $_->{target} =~ m{/wal/([0-9a-f]{16}\.wal\.gz)} ? $1 : () } $proxy->requests;
is(join(' ', grep { $gets{$_} > 1 } sort keys %gets), '',
	'each segment object was downloaded once (no prefetch was lost and fetched again)');
note('segment GETs for one changes(): ' . scalar(keys %gets) . ' objects');

# run_stalled($how): changes() in a session of its own while the proxy
# stalls the body of a segment GET, ended by $how ('cancel' or
# 'timeout'); returns (stderr of the session, seconds from the stall seen
# to the end of the statement)
sub run_stalled
{
	my ($how) = @_;
	my $before = grep { $_->{fault} eq 'stall_after_headers' } $proxy->injected;
	$proxy->inject('stall_after_headers', count => 1, method => 'GET',
		path => qr{/wal/[0-9a-f]{16}\.wal\.gz});
	my ($out, $err) = ('', '');
	my @sql = $how eq 'timeout' ? ('-c', "SET statement_timeout = '3s'") : ();
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-v', 'VERBOSITY=verbose', '-d', $reader->connstr($db),
		  @sql, '-c', "SELECT count(*) FROM ($changes_sql) c" ],
		'>', \$out, '2>', \$err);
	my $deadline = time() + 60;
	usleep(20_000)
	  until (grep { $_->{fault} eq 'stall_after_headers' } $proxy->injected) > $before
	  || time() > $deadline;
	my $t0 = time();
	if ($how eq 'cancel')
	{
		my $pid;
		$pid = $reader->safe_psql($db,
			q{SELECT pid FROM pg_stat_activity WHERE query LIKE '%changestream.changes(%' AND state = 'active' AND pid <> pg_backend_pid()})
		  until (defined $pid && $pid =~ /^\d+$/) || time() > $deadline;
		$reader->safe_psql($db, "SELECT pg_cancel_backend($pid)");
	}
	$h->finish;
	return ($err, time() - $t0, (grep { $_->{fault} eq 'stall_after_headers' } $proxy->injected) - $before);
}

my ($err, $secs, $stalls) = run_stalled('cancel');
is($stalls, 1, 'the proxy stalled a segment GET of changes()');
like($err, qr/ERROR:\s+57014: canceling statement due to user request/,
	'pg_cancel_backend() ends changes() stalled in a download with the cancel error');
diag(sprintf('measured: a cancel ended changes() stalled in a download in %.2f s', $secs));

($err, $secs, $stalls) = run_stalled('timeout');
is($stalls, 1, 'the proxy stalled a segment GET of changes() again');
like($err, qr/ERROR:\s+57014: canceling statement due to statement timeout/,
	'statement_timeout ends changes() stalled in a download');
diag(sprintf('measured: statement_timeout (3 s) ended changes() %.2f s after the stall began', $secs));
$proxy->clear;

is($reader->safe_psql($db, "SELECT count(*) FROM ($changes_sql) c"), $oracle_rows,
	'the same server then reads the bucket to the end');

######################################################################
# An object removed between the listing and its GET

my $victim = $segs[ int(@segs / 2) ];
my ($hin, $hout, $herr) = ('', '', '');
my $holder = IPC::Run::start(
	[ 'psql', '-X', '-A', '-t', '-d', $reader->connstr($db) ],
	'<', \$hin, '>', \$hout, '2>', \$herr);
$hin .= "SELECT 'locked' FROM pg_advisory_lock(64064);\n";
$holder->pump until $hout =~ /locked/;

# one statement: the listing (generations()), the lock, then changes()
my ($out, $serr) = ('', '');
my $h = IPC::Run::start(
	[ 'psql', '-X', '-A', '-t', '-v', 'VERBOSITY=verbose', '-d', $reader->connstr($db),
	  '-c', "SELECT (SELECT count(*) FROM changestream.generations()) AS listed, (SELECT 1 FROM pg_advisory_lock(64064)) AS waited, (SELECT count(*) FROM ($changes_sql) c) AS n" ],
	'>', \$out, '2>', \$serr);
cs_poll_or_diag($reader, $db,
	q{SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND query LIKE '%changestream.generations()%'},
	'1', 60, 'the statement has listed the bucket and waits for the lock');
my ($rc) = cs_aws($s3, 's3api', 'delete-object', '--bucket', $bucket, '--key', "$prefix/$victim");
is($rc, 0, "the segment object $victim deleted with awscli meanwhile");
$hin .= "SELECT pg_advisory_unlock(64064);\n\\q\n";
$holder->finish;
$h->finish;
like($serr, qr/ERROR:\s+58P01: object "s3:\/\/\Q$bucket\/$prefix\/$victim\E" of the replica is gone/,
	'changes() fails with 58P01 naming the object that went after the listing');
unlike($serr, qr/XX001/, 'not as damage (XX001)');

$reader->stop;
$proxy->stop;
$src->stop;
done_testing();
