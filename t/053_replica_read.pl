
# Reading the archive from the replica's bucket, and disaster recovery from
# nothing but the bucket (issue 31, section 5; docs/DESIGN.md section 16;
# docs/replica.md).
#
# - A source server archives pgbench traffic with a replica in a real
#   object store.  After each of three steps of load the test records
#   pg_current_wal_lsn() and a digest of every pgbench table (md5 of the
#   rows' text in order): the oracle.  It waits until the bucket's durable
#   position (status().replica_flushed_lsn) has passed the last point.
# - verify(source => 'replica') on the source compares the bucket with the
#   local archive and decodes it: no row.
# - A fresh server (its own data directory, the extension, the replica
#   settings and the key file only, changestream.directory empty) reads the
#   bucket: generations() lists the source's generations; changes() up to
#   the last point equals the source's changes() from its local archive,
#   row for row; restore() to each recorded point gives tables equal to the
#   digests; verify() and verify(source => 'replica') find no problem;
#   verify(source => 'local') says the local directory is not set.
# - One segment object in the middle of the generation is damaged through
#   the S3 API (awscli: a byte flipped, put back): on the fresh server
#   changes() fails with XX001 naming the object's key, verify(source =>
#   'replica') reports that file; on the source verify(source =>
#   'replica') reports that the object differs from the local file.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ChangestreamTest;

my $s3 = cs_object_store();
my $bucket = cs_s3_bucket($s3, 'read');
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $prefix = 'prod/archive';
my $db = 'postgres';
my @tables = qw(pgbench_accounts pgbench_branches pgbench_tellers pgbench_history);

my $replica_conf = cs_replica_conf($s3, bucket => $bucket, prefix => $prefix,
	dir => $tmp);

my $src = cs_setup('source', pgbench => 1, publish_pgbench => 1,
	conf => qq{
changestream.segment_size = '64kB'
changestream.segment_timeout = '1s'
$replica_conf});
cs_start_archiving($src);

# three steps of load, the oracle recorded after each
my @points;
for my $step (1 .. 3)
{
	cs_pgbench($src, $db, '-T', '3', '-c', '2', '-n');
	$src->safe_psql($db, 'SELECT changestream.take_snapshot()') if $step == 2;
	my %d = map { $_ => cs_table_digest($src, $db, 'public', $_) } @tables;
	my $lsn = $src->safe_psql($db, 'SELECT pg_current_wal_lsn()');
	push @points, { lsn => $lsn, digest => \%d };
}
my $last = $points[-1]{lsn};
# a little more traffic, so that the last point's segment is sealed
cs_pgbench($src, $db, '-T', '2', '-c', '2', '-n');

cs_wait_bucket_covers($src, $db, $s3, $bucket, $prefix, $last,
	'the bucket holds the archive past the last recorded point, in sealed segments');

my $gen = $src->safe_psql($db, 'SELECT generation FROM changestream.generations() ORDER BY 1 DESC LIMIT 1');
my $changes_sql = "SELECT commit_lsn, xid, ordinal, action, schema_name, table_name, old_row, new_row, unchanged_columns FROM changestream.changes('$gen', end_lsn => '$last') ORDER BY commit_lsn, ordinal";
my $oracle_changes = $src->safe_psql($db, $changes_sql);
my $oracle_count = () = $oracle_changes =~ /\n/g;
ok($oracle_count > 1000, "the source's changes() up to the last point has $oracle_count rows");

is($src->safe_psql($db, "SELECT count(*) FROM changestream.verify('$gen', source => 'replica')"),
	'0', "on the source, verify(source => 'replica') finds the bucket equal to the local archive and sound");

######################################################################
# A fresh server with nothing but the replica settings

my $fresh = cs_new_node('fresh', conf => $replica_conf);
$fresh->start;
$fresh->safe_psql($db, 'CREATE EXTENSION changestream');
is($fresh->safe_psql($db, "SELECT current_setting('changestream.directory')"), '',
	'the fresh server has no local archive');

is($fresh->safe_psql($db, 'SELECT string_agg(generation, \',\' ORDER BY generation) FROM changestream.generations()'),
	$src->safe_psql($db, 'SELECT string_agg(generation, \',\' ORDER BY generation) FROM changestream.generations()'),
	'generations() from the bucket lists the source\'s generations');
is($fresh->safe_psql($db, "SELECT count(*) > 3 FROM changestream.wal_segments('$gen')"), 't',
	'wal_segments() from the bucket lists the segments');
is($fresh->safe_psql($db, "SELECT count(*) >= 2 FROM changestream.snapshots('$gen')"), 't',
	'snapshots() from the bucket lists the snapshots');

is($fresh->safe_psql($db, $changes_sql), $oracle_changes,
	'changes() from the bucket equals the source\'s changes() row for row');

my $i = 0;
for my $p (@points)
{
	$i++;
	$fresh->safe_psql($db, "CREATE SCHEMA r$i");
	my $res = $fresh->safe_psql($db,
		"SELECT tables FROM changestream.restore('r$i', '$gen', target_lsn => '$p->{lsn}')");
	is($res, scalar(@tables), "point $i: restore() from the bucket restored the tables");
	my @differ = grep { cs_table_digest($fresh, $db, "r$i", $_) ne $p->{digest}{$_} } @tables;
	is(join(' ', @differ), '', "point $i: every restored table equals the source at $p->{lsn}");
}

is($fresh->safe_psql($db, 'SELECT count(*) FROM changestream.verify()'), '0',
	'verify() on the fresh server reads the bucket: no problem');
is($fresh->safe_psql($db, "SELECT count(*) FROM changestream.verify(source => 'replica')"), '0',
	"verify(source => 'replica') on the fresh server: no problem");
my ($rc, $out, $err) = $fresh->psql($db, "SELECT * FROM changestream.verify(source => 'local')");
like($err, qr/changestream.directory is not set/,
	"verify(source => 'local') on the fresh server: the local directory is not set");

######################################################################
# One object damaged through the S3 API

my ($lrc, $listing) = cs_aws($s3, 's3api', 'list-objects-v2', '--bucket', $bucket,
	'--prefix', "$prefix/generations/$gen/wal/", '--query', 'Contents[].[Key]',
	'--output', 'text');
my @segs = sort grep { /\.wal\.gz$/ } split /\s+/, $listing;
ok(@segs >= 4, scalar(@segs) . ' segment objects in the bucket');
my $victim = $segs[ int(@segs / 2) ];
($rc, $out, $err) = cs_aws($s3, 's3', 'cp', "s3://$bucket/$victim", "$tmp/victim.gz");
is($rc, 0, 'the segment object downloaded with awscli');
{
	open(my $vf, '+<:raw', "$tmp/victim.gz") or die "open: $!";
	my $size = -s "$tmp/victim.gz";
	my $at = int($size / 2);
	seek($vf, $at, 0);
	read($vf, my $byte, 1);
	seek($vf, $at, 0);
	print $vf chr(ord($byte) ^ 0xff);
	close($vf);
}
($rc, $out, $err) = cs_aws($s3, 's3', 'cp', "$tmp/victim.gz", "s3://$bucket/$victim");
is($rc, 0, 'the damaged object put back with awscli');

($rc, $out, $err) = $fresh->psql($db, "\\set VERBOSITY verbose\n$changes_sql");
like($err, qr/ERROR:\s+XX001:.*\Q$victim\E/,
	'changes() from the bucket fails with XX001 naming the damaged object\'s key');
(my $victim_name = $victim) =~ s{^.*/wal/}{wal/};
my $problems = $fresh->safe_psql($db,
	"SELECT file_name FROM changestream.verify('$gen', source => 'replica')");
like($problems, qr/^\Q$victim_name\E$/m,
	"verify(source => 'replica') on the fresh server reports the damaged object");
$problems = $src->safe_psql($db,
	"SELECT file_name || ': ' || problem FROM changestream.verify('$gen', source => 'replica')");
like($problems, qr/^\Q$victim_name\E: The bucket's object .* differs from the local file/m,
	"verify(source => 'replica') on the source reports that the object differs from the local file");
is($src->safe_psql($db, "SELECT count(*) FROM changestream.verify('$gen', source => 'local')"), '0',
	'the local archive itself is sound');

$fresh->stop;
$src->stop;
done_testing();
