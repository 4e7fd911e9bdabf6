
# Readers of the replica's bucket read the active segment's tail objects
# (issue 31; docs/FORMAT.md section 16; docs/DESIGN.md section 16).
#
# - A source server archives pgbench traffic with a replica in a real
#   object store; its segments are large and never time out, so all of
#   the traffic stays in the active segment, which reaches the bucket only
#   as tail objects (changestream.replica_sync_interval = 1s).  The test
#   records pg_current_wal_lsn() P and a digest of every pgbench table (md5
#   of the rows' text in order) at P: the oracle.  It waits until the
#   bucket's durable position (status().replica_flushed_lsn) has passed P.
# - awscli lists the bucket: tail objects, and no compressed segment.
# - A fresh server (the extension, the replica settings and the key file
#   only) reads the bucket: changes() up to P equals the source's changes()
#   from its local archive, row for row; restore() to P gives tables equal
#   to the digests.
# - Through a fault proxy answering the first GET of a tail object 404 (as
#   when the uploader removes it between the listing and the GET, once
#   its segment is up compressed): changes() fails with 58P01 naming the
#   tail object, and a hint to run the statement again.
# - A tail object overlapping another with other bytes, put with awscli:
#   changes() on the fresh server fails with XX001 naming a tail object.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;
use S3FaultProxy;

my $s3 = cs_object_store();
my $bucket = cs_s3_bucket($s3, 'tail');
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $prefix = 'dr/archive';
my $db = 'postgres';
my @tables = qw(pgbench_accounts pgbench_branches pgbench_tellers pgbench_history);

my $replica_conf = cs_replica_conf($s3, bucket => $bucket, prefix => $prefix,
	dir => $tmp);

my $src = cs_setup('source', pgbench => 1, publish_pgbench => 1,
	conf => qq{
changestream.segment_size = '16MB'
changestream.segment_timeout = '1h'
changestream.replica_sync_interval = '1s'
$replica_conf});
cs_start_archiving($src);

cs_pgbench($src, $db, '-T', '3', '-c', '2', '-n');
my %digest = map { $_ => cs_table_digest($src, $db, 'public', $_) } @tables;
my $p = $src->safe_psql($db, 'SELECT pg_current_wal_lsn()');
# more traffic after P, in the same active segment
cs_pgbench($src, $db, '-t', '50', '-c', '1', '-n');

cs_poll_or_diag($src, $db,
	"SELECT replica_flushed_lsn >= '$p'::pg_lsn FROM changestream.status()",
	't', 120, 'the bucket holds the archive past P');

my $gen = $src->safe_psql($db, 'SELECT generation FROM changestream.generations() ORDER BY 1 DESC LIMIT 1');
my ($lrc, $listing) = cs_aws($s3, 's3api', 'list-objects-v2', '--bucket', $bucket,
	'--prefix', $prefix, '--query', 'Contents[].[Key]', '--output', 'text');
my @tails = sort grep { m{^\Q$prefix\E/tail/generations/$gen/wal/} } split /\s+/, $listing;
my @gz = grep { m{^\Q$prefix\E/generations/$gen/wal/.*\.wal\.gz$} } split /\s+/, $listing;
ok(@tails >= 1, scalar(@tails) . ' tail objects of the generation in the bucket');
is(scalar(@gz), 0, 'no compressed segment of the generation in the bucket: the history is in tail objects only');

my $changes_sql = "SELECT commit_lsn, xid, ordinal, action, schema_name, table_name, old_row, new_row, unchanged_columns FROM changestream.changes('$gen', end_lsn => '$p') ORDER BY commit_lsn, ordinal";
my $oracle_changes = $src->safe_psql($db, $changes_sql);
my $oracle_count = () = $oracle_changes =~ /\n/g;
ok($oracle_count > 500, "the source's changes() up to P has $oracle_count rows");

######################################################################
# A fresh server with nothing but the replica settings

my $fresh = cs_new_node('fresh', conf => $replica_conf);
$fresh->start;
$fresh->safe_psql($db, 'CREATE EXTENSION changestream');

is($fresh->safe_psql($db, $changes_sql), $oracle_changes,
	'changes() from the bucket (tail objects) equals the source\'s changes() row for row');

$fresh->safe_psql($db, 'CREATE SCHEMA r');
my $res = $fresh->safe_psql($db,
	"SELECT tables FROM changestream.restore('r', '$gen', target_lsn => '$p', archive_directory => 'replica')");
is($res, scalar(@tables), 'restore() from the bucket restored the tables');
my @differ = grep { cs_table_digest($fresh, $db, 'r', $_) ne $digest{$_} } @tables;
is(join(' ', @differ), '', "every restored table equals the source at P ($p)");

######################################################################
# A tail object gone between the listing and its GET

my $proxy = S3FaultProxy->new(upstream => $s3->{endpoint});
$fresh->append_conf('postgresql.conf', cs_replica_conf($s3, bucket => $bucket,
	prefix => $prefix, dir => $tmp, endpoint => $proxy->url));
$fresh->restart;
$proxy->inject('not_found', count => 1, method => 'GET',
	path => qr{/tail/generations/});
my ($rc, $out, $err) = $fresh->psql($db, "\\set VERBOSITY verbose\n$changes_sql");
like($err, qr/ERROR:\s+58P01: object "s3:\/\/\Q$bucket\/$prefix\E\/tail\/generations\/$gen\/wal\/[0-9a-f]{16}\.wal\.[0-9a-f]{16}-[0-9a-f]{16}" of the replica is gone/,
	'a tail object gone after the listing: 58P01 naming it');
like($err, qr/HINT:.*run the statement again/, 'with a hint to run the statement again');
is(scalar(my @f = $proxy->injected), 1, 'the proxy answered one GET 404');
is($fresh->safe_psql($db, $changes_sql), $oracle_changes,
	'run again, changes() from the bucket equals the source\'s changes()');

######################################################################
# An overlapping tail object with other bytes: damage naming a tail object

my $first = $tails[0];
($rc, $out, $err) = cs_aws($s3, 's3', 'cp', "s3://$bucket/$first", "$tmp/first.tail");
is($rc, 0, 'the first tail object downloaded with awscli');
my $size = -s "$tmp/first.tail";
ok($size >= 4, "the first tail object holds $size bytes");
my $short = int($size / 2);
{
	open(my $in, '<:raw', "$tmp/first.tail") or die "open: $!";
	read($in, my $bytes, $short) == $short or die "read: $!";
	close($in);
	my $at = int($short / 2);
	substr($bytes, $at, 1) = chr(ord(substr($bytes, $at, 1)) ^ 0xff);
	open(my $o, '>:raw', "$tmp/bad.tail") or die "open: $!";
	print $o $bytes;
	close($o);
}
(my $bad = $first) =~ s{\.wal\.([0-9a-f]{16})-[0-9a-f]{16}$}{sprintf('.wal.%s-%016x', $1, hex($1) + $short)}e;
isnt($bad, $first, "an overlapping tail object's key: $bad");
($rc, $out, $err) = cs_aws($s3, 's3', 'cp', "$tmp/bad.tail", "s3://$bucket/$bad");
is($rc, 0, 'the overlapping tail object with one byte changed put with awscli');
($rc, $out, $err) = $fresh->psql($db, "\\set VERBOSITY verbose\n$changes_sql");
like($err, qr/ERROR:\s+XX001:.*\Q$prefix\E\/tail\/generations\/$gen\/wal\//,
	'changes() from the bucket fails with XX001 naming a tail object');

$fresh->stop;
$proxy->stop;
$src->stop;
done_testing();
