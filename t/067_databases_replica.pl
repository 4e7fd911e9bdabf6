
# The replica of several databases (issue 34, section 2; docs/databases.md,
# docs/DESIGN.md sections 15 and 17) against a real object store.
#
# - changestream.databases names postgres (changestream.database: the
#   directory root) and app (the tree databases/app); both archive pgbench
#   traffic with a replica configured.  Once every finished local file of
#   each tree is in the bucket, under <prefix>/ for the root and
#   <prefix>/databases/app/ for app (each with its own marker object),
#   "aws s3 sync" of each prefix (awscli, the oracle) gives files equal
#   byte for byte to the local ones; the root's journal holds none of
#   app's objects; each status() row shows its own tree's replica columns
#   and the maintenance worker's compressed segments of its own tree.
# - A third database, other, finds another cluster's marker under its
#   prefix: its row shows replica_state error naming it, and the two other
#   trees are uploaded all the same.
# - A fresh server with nothing but the replica settings reads app's
#   archive from the bucket (changestream.read_database = 'app'):
#   generations() lists app's generations (not postgres's), changes() up to
#   a recorded point equals app's changes() on the source, and restore() to
#   that point gives tables equal to app's source tables then (digests).
use strict;
use warnings;

use File::Compare;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ChangestreamTest;

my $s3 = cs_object_store();
my $bucket = cs_s3_bucket($s3, 'dbs');
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $prefix = 'multi/archive';
my @tables = qw(pgbench_accounts pgbench_branches pgbench_tellers pgbench_history);

my $replica_conf = cs_replica_conf($s3, bucket => $bucket, prefix => $prefix,
	dir => $tmp);

my $node = cs_new_node('multi', conf => qq{
changestream.segment_size = '64kB'
changestream.segment_timeout = '1s'
changestream.databases = 'postgres, app, other'
$replica_conf});
$node->start;
my $dir = cs_archive_dir($node);
my %tree = (postgres => $dir, app => "$dir/databases/app");
my %key_prefix = (postgres => $prefix, app => "$prefix/databases/app");

# another cluster's marker under the prefix of the tree of "other"
my $foreign = "$tmp/foreign";
open(my $fh, '>', $foreign) or die "open $foreign: $!";
print $fh "changestream cluster\nsystem_identifier 1\ndatabase other\ntree databases/other\n";
close($fh) or die "close $foreign: $!";
my ($prc, $pout, $perr) = cs_aws($s3, 's3', 'cp', '--only-show-errors', $foreign,
	"s3://$bucket/$prefix/databases/other/changestream.cluster");
die "aws s3 cp failed: $perr" if $prc != 0;

for my $db ('postgres', 'app', 'other')
{
	$node->safe_psql('postgres', qq{CREATE DATABASE "$db"}) if $db ne 'postgres';
	cs_pgbench($node, $db, '-i', '-s', '1', '-q');
	$node->safe_psql($db, 'CREATE EXTENSION changestream; '
		  . 'CREATE PUBLICATION changestream FOR TABLE pgbench_accounts, '
		  . 'pgbench_branches, pgbench_tellers, pgbench_history');
}
$node->append_conf('postgresql.conf', "changestream.directory = '$dir'");
$node->reload;
for my $db ('postgres', 'app', 'other')
{
	cs_poll_or_diag($node, $db,
		"SELECT state FROM changestream.status() WHERE database = '$db'",
		'streaming', 90, "$db: its archiver streams");
}
cs_poll_or_diag($node, 'postgres',
	"SELECT replica_state FROM changestream.status() WHERE database = 'other'",
	'error', 60, "other: its tree's upload is refused");
like($node->safe_psql('postgres',
		"SELECT replica_last_error FROM changestream.status() WHERE database = 'other'"),
	qr{the replica prefix "\Q$prefix\E/databases/other" of bucket "\Q$bucket\E" belongs to another cluster: Its marker object .*system_identifier 1}s,
	'other: its row names the foreign marker under its prefix');

# load in both databases at once; app's oracle recorded after it
my @bg = map { cs_pgbench_bg($node, $_, '-T', '3', '-c', '1', '-n') } ('postgres', 'app');
cs_pgbench_finish($_) for @bg;
$node->safe_psql('app', 'SELECT changestream.take_snapshot()');
my %app_digest = map { $_ => cs_table_digest($node, 'app', 'public', $_) } @tables;
my $point = $node->safe_psql('app', 'SELECT pg_current_wal_lsn()');
# a little more traffic, so that the point's segment is sealed
@bg = map { cs_pgbench_bg($node, $_, '-T', '2', '-c', '1', '-n') } ('postgres', 'app');
cs_pgbench_finish($_) for @bg;
my $end = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
for my $db ('postgres', 'app')
{
	cs_wait_bucket_covers($node, $db, $s3, $bucket,
		$db eq 'postgres' ? $prefix : "$prefix/databases/$db", $point,
		"$db: the bucket holds its archive past the recorded point, in sealed segments");
}

my $round = 0;
for my $db ('postgres', 'app')
{
	# every finished local file up with its size
	my $deadline = time() + 120;
	my ($local, $objects, $missing);
	while (1)
	{
		$local = cs_finished_files($tree{$db});
		$objects = cs_bucket_objects($s3, $bucket, $key_prefix{$db});
		$missing = join(' ', grep {
			!defined $objects->{$_} || $objects->{$_} != $local->{$_}
		} sort keys %$local);
		last if $missing eq '' || time() > $deadline;
		usleep(300_000);
	}
	is($missing, '', "$db: every finished local file of its tree is in the bucket under $key_prefix{$db}/");
	ok(scalar(grep { m{^wal/} || m{/wal/} } keys %$local) >= 3,
		"$db: its tree has compressed segments to compare");
	ok(defined $objects->{'changestream.cluster'}, "$db: its prefix has its marker object");
	my @foreign = grep { m{^databases/} } keys %$objects;
	if ($db eq 'postgres')
	{
		ok(scalar(@foreign) > 0, 'the root prefix holds the databases/ prefix of the other tree');
		my $journal = slurp_file("$dir/replica.journal");
		unlike($journal, qr{ databases/}, "the root tree's journal holds none of app's objects");
	}

	# aws s3 sync of the tree's prefix, compared byte for byte
	my $down = "$tmp/down" . ++$round;
	my ($rc, $out, $err) = cs_aws($s3, 's3', 'sync', '--only-show-errors',
		'--exclude', 'tail/*', '--exclude', 'databases/*',
		"s3://$bucket/$key_prefix{$db}", $down);
	die "aws s3 sync failed: $err" if $rc != 0;
	my @differ = grep { -f "$tree{$db}/$_" && compare("$tree{$db}/$_", "$down/$_") != 0 } sort keys %$local;
	is(join(' ', @differ), '',
		"$db: its " . scalar(keys %$local) . " finished local files equal their objects synced down by awscli");
}

# each row shows its own tree's replica columns
my %row = map {
	my ($d, $flushed, $sent) = split /\|/, $_;
	($d => [ $flushed, $sent ])
} split /\n/, $node->safe_psql('postgres',
	"SELECT database, replica_flushed_lsn, replica_put_requests FROM changestream.status() ORDER BY database");
ok($row{app} && $row{postgres} && $row{app}[1] > 0 && $row{postgres}[1] > 0,
	'status(): each database row counts its own tree\'s PUT requests');
# each row shows the maintenance worker's work in its own tree: the
# segments it compressed there, between two counts of the tree's files
sub gz_count
{
	my ($root) = @_;
	return scalar(grep { m{/wal/[0-9a-f]+\.wal\.gz$} } keys %{ cs_finished_files($root) });
}
for my $db ('postgres', 'app')
{
	my $before = gz_count($tree{$db});
	my $n = $node->safe_psql('postgres',
		"SELECT compressed_segments FROM changestream.status() WHERE database = '$db'");
	my $after = gz_count($tree{$db});
	ok($n >= $before && $n <= $after && $n > 0,
		"$db: its row's compressed_segments ($n) counts its own tree's compressed segments ($before to $after)");
}
my $gen_app = $node->safe_psql('app', 'SELECT generation FROM changestream.generations() ORDER BY 1 DESC LIMIT 1');
my $gen_pg = $node->safe_psql('postgres', 'SELECT generation FROM changestream.generations() ORDER BY 1 DESC LIMIT 1');
isnt($gen_app, $gen_pg, 'the two trees have generations of their own');

is($node->safe_psql('app', "SELECT count(*) FROM changestream.verify('$gen_app', source => 'replica')"),
	'0', "app: verify(source => 'replica') finds its bucket tree equal to the local tree and sound");

my $changes_sql = "SELECT commit_lsn, xid, ordinal, action, schema_name, table_name, old_row, new_row, unchanged_columns FROM changestream.changes('$gen_app', end_lsn => '$point') ORDER BY commit_lsn, ordinal";
my $oracle_changes = $node->safe_psql('app', $changes_sql);
my $oracle_count = () = $oracle_changes =~ /\n/g;
ok($oracle_count > 100, "app's changes() up to the point has $oracle_count rows");

######################################################################
# A fresh server with nothing but the replica settings reads app's tree

my $fresh = cs_new_node('fresh', conf => $replica_conf);
$fresh->start;
$fresh->safe_psql('postgres', 'CREATE EXTENSION changestream');
my $read_app = "SET changestream.read_database = 'app';";
is($fresh->safe_psql('postgres', "$read_app SELECT string_agg(generation, ',' ORDER BY generation) FROM changestream.generations()"),
	$node->safe_psql('app', "SELECT string_agg(generation, ',' ORDER BY generation) FROM changestream.generations()"),
	"generations() from the bucket with read_database = 'app' lists app's generations");
is($fresh->safe_psql('postgres', "SELECT string_agg(generation, ',' ORDER BY generation) FROM changestream.generations()"),
	$node->safe_psql('postgres', "SELECT string_agg(generation, ',' ORDER BY generation) FROM changestream.generations()"),
	"generations() from the bucket without it lists postgres's (the root's)");
is($fresh->safe_psql('postgres', "$read_app $changes_sql"), $oracle_changes,
	"changes() of app from the bucket equals app's changes() on the source row for row");
$fresh->safe_psql('postgres', 'CREATE SCHEMA r1');
is($fresh->safe_psql('postgres',
		"$read_app SELECT tables FROM changestream.restore('r1', '$gen_app', target_lsn => '$point')"),
	scalar(@tables), "restore() of app from the bucket restored the tables");
my @differ = grep { cs_table_digest($fresh, 'postgres', 'r1', $_) ne $app_digest{$_} } @tables;
is(join(' ', @differ), '', "every table restored from app's bucket tree equals app's source table at the point");

$fresh->stop;
$node->stop;
done_testing();
