
# Remote retention (issue 31, sections 2 and 5; docs/DESIGN.md section 15;
# docs/replica.md): changestream.replica_retention deletes from the bucket
# what no point of its window needs, after changestream.replica_retention_grace.
#
# - A source server archives pgbench traffic into a real object store
#   through S3FaultProxy, keeping every local file (changestream.retention
#   = 0), with replica_retention = 1h.  Points P2 and P3 (the WAL position
#   and a digest of each pgbench table) are recorded after a snapshot S2
#   taken between them and the opening snapshot S1.
# - replica_retention = 3s (grace 10 min): the bucket gains the
#   generation's "retention" object naming S2 and, as first segment, the
#   newest one whose start (wal_segments() of the local archive) is at or
#   before S2's LSN; every object below it is still in the bucket (awscli).
# - A DELETE of the second object to go fails in the proxy; grace = 1s:
#   the first object below the horizon goes (oldest first), the failing one
#   and the later ones stay; kill -9 of the server and the uploader, the
#   failure goes on after the restart, then the fault is cleared: every
#   object below the horizon is gone, every object at or above it that was
#   in the bucket is still there, and the local archive still has all.
# - A fresh server with only the replica settings: snapshots() from the
#   bucket begins at S2; restore() to P2 and P3 equals the digests; a GET
#   answered 404 (an object deleted since the listing) is 58P01 with a hint
#   to run the statement again, and the statement run again succeeds.
# - new_generation(): the older generation, written before the window,
#   goes from the bucket whole (identity object first, the rest after the
#   grace) while the local archive keeps it; later uploads of the new
#   generation do not put it again; generations() from the bucket lists
#   the new one only.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ChangestreamTest;
use S3FaultProxy;

my $s3 = cs_object_store();
my $bucket = cs_s3_bucket($s3, 'retention');
my $proxy = S3FaultProxy->new(upstream => $s3->{endpoint});
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $prefix = 'ret/archive';
my $db = 'postgres';
my @tables = qw(pgbench_accounts pgbench_branches pgbench_tellers pgbench_history);

my $replica_conf = cs_replica_conf($s3, bucket => $bucket, prefix => $prefix,
	dir => $tmp, endpoint => $proxy->url);

my $src = cs_setup('source', pgbench => 1, publish_pgbench => 1,
	conf => qq{
changestream.segment_size = '64kB'
changestream.segment_timeout = '1s'
changestream.snapshot_interval = '1h'
changestream.retention = 0
changestream.replica_retention = '1h'
changestream.replica_retention_grace = '10min'
$replica_conf});
cs_start_archiving($src);

sub record_point
{
	my %d = map { $_ => cs_table_digest($src, $db, 'public', $_) } @tables;
	return { lsn => $src->safe_psql($db, 'SELECT pg_current_wal_lsn()'), digest => \%d };
}

cs_pgbench($src, $db, '-T', '2', '-c', '2', '-n');
my $s2 = $src->safe_psql($db, 'SELECT changestream.take_snapshot()');
cs_pgbench($src, $db, '-T', '2', '-c', '2', '-n');
my @points = (record_point());
cs_pgbench($src, $db, '-T', '2', '-c', '2', '-n');
push @points, record_point();
cs_pgbench($src, $db, '-T', '1', '-c', '2', '-n');
cs_wait_bucket_covers($src, $db, $s3, $bucket, $prefix, $points[-1]{lsn},
	'the bucket holds the archive past the last point, in sealed segments');

my $gen = $src->safe_psql($db, 'SELECT max(generation) FROM changestream.generations()');
is($src->safe_psql($db, "SELECT count(*) FROM changestream.snapshots('$gen') WHERE lsn < '$s2'"),
	'1', 'the local archive has the opening snapshot before S2');
# the oracle's first segment: the newest one starting at or before S2
my $first = $src->safe_psql($db,
	"SELECT max(segment_index) FROM changestream.wal_segments('$gen') WHERE start_lsn <= '$s2'");
my $lowest = $src->safe_psql($db, "SELECT min(segment_index) FROM changestream.wal_segments('$gen')");
ok($first - $lowest >= 2, "segments $lowest to " . ($first - 1) . ' lie below S2\'s segment');

my $gdir = "generations/$gen";
my $s2_name = $src->safe_psql($db, "SELECT file_name FROM changestream.snapshots('$gen') WHERE lsn = '$s2'");

# the bucket's objects of the generation, by kind: { snapshots => {lsn text => key}, segments => {index => key} }
sub bucket_state
{
	my $o = cs_bucket_objects($s3, $bucket, $prefix);
	my (%snap, %seg);
	for my $k (keys %$o)
	{
		$snap{$1} = $k if $k =~ m{^\Q$gdir\E/snapshots/([0-9A-F]+)\.snapshot\.gz$};
		$seg{ hex($1) } = $k if $k =~ m{^\Q$gdir\E/wal/([0-9a-f]{16})\.wal\.gz$};
	}
	return { all => $o, snapshots => \%snap, segments => \%seg };
}

sub lsn_int { return cs_lsn_to_int($_[0]); }

my $before = bucket_state();
my @below_segs = grep { $_ < $first } sort { $a <=> $b } keys %{ $before->{segments} };
my @below_snaps = grep { hex($_) < lsn_int($s2) } keys %{ $before->{snapshots} };
is(scalar(@below_snaps), 1, 'the opening snapshot is in the bucket');
is(scalar(@below_segs), $first - $lowest, 'every segment below S2\'s is in the bucket');

######################################################################
# A short window: the horizon is published, nothing deleted in the grace

$src->append_conf('postgresql.conf', "changestream.replica_retention = '3s'\n");
$src->reload;
cs_poll_or_diag($src, $db,
	"SELECT count(*) FROM changestream.status() WHERE replica_state = 'idle'", '1', 30,
	'the uploader is idle after the reload');
my $horizon_key = "$gdir/retention";
my $deadline = time() + 30;
usleep(200_000) while !exists bucket_state()->{all}{$horizon_key} && time() < $deadline;
my $published = bucket_state();
ok(exists $published->{all}{$horizon_key}, 'the generation\'s retention object is in the bucket');
my ($rc, $out, $err) = cs_aws($s3, 's3', 'cp', "s3://$bucket/$prefix/$horizon_key", '-');
like($out, qr/^first_segment = $first$/m, "the remote horizon's first segment is $first");
# compared as numbers: pg_lsn's text pads the low half from PostgreSQL 19 on
my ($horizon_lsn) = $out =~ /^snapshot_lsn = (\S+)$/m;
is(defined $horizon_lsn ? lsn_int($horizon_lsn) : 'none', lsn_int($s2),
	"the remote horizon's snapshot is S2 ($s2)");
is(join(' ', grep { !exists $published->{segments}{$_} } @below_segs), '',
	'during the grace every segment below the horizon is still in the bucket');
is(join(' ', grep { !exists $published->{snapshots}{$_} } @below_snaps), '',
	'during the grace the opening snapshot is still in the bucket');

######################################################################
# Deletion after the grace, a failure mid-way, kill -9, resumption

my $victim = $before->{segments}{ $below_segs[0] };
$proxy->inject('error500', count => 100000, method => 'DELETE', path => quotemeta($victim));
$src->append_conf('postgresql.conf', "changestream.replica_retention_grace = '1s'\n");
$src->reload;
$deadline = time() + 30;
usleep(200_000) while scalar($proxy->injected) == 0 && time() < $deadline;
ok(scalar($proxy->injected) > 0, 'a DELETE of a segment below the horizon fails in the proxy');
my $mid = bucket_state();
is(scalar(grep { exists $mid->{snapshots}{$_} } @below_snaps), 0,
	'the opening snapshot, first to go, is deleted');
is(join(' ', grep { !exists $mid->{segments}{$_} } @below_segs), '',
	'the failing segment and every later one below the horizon are still there');

my $uploader = $src->safe_psql($db, 'SELECT replica_pid FROM changestream.status()');
cs_crash($src, also_pids => [$uploader]);
my $injected = scalar($proxy->injected);
$src->start;
$deadline = time() + 30;
usleep(200_000) while scalar($proxy->injected) == $injected && time() < $deadline;
ok(scalar($proxy->injected) > $injected, 'after kill -9 and restart the uploader resumes the deletion');
$proxy->clear;
$deadline = time() + 40;
my $after;
while (1)
{
	$after = bucket_state();
	last if !grep { $_ < $first } keys %{ $after->{segments} };
	last if time() > $deadline;
	usleep(300_000);
}
is(join(' ', sort { $a <=> $b } grep { $_ < $first } keys %{ $after->{segments} }), '',
	'every segment below the horizon is deleted');
is(join(' ', grep { hex($_) < lsn_int($s2) } keys %{ $after->{snapshots} }), '',
	'no snapshot below the horizon is left');
my %below_keys = map { $_ => 1 } (map { $before->{segments}{$_} } @below_segs),
  (map { $before->{snapshots}{$_} } @below_snaps);
my @lost = grep { !$below_keys{$_} && !m{^tail/} && !exists $after->{all}{$_} }
  sort keys %{ $before->{all} };
is(join(' ', @lost), '', 'every object at or above the horizon is still in the bucket');
ok(exists $after->{snapshots}{ ($s2_name =~ /^([0-9A-F]+)/)[0] }, 'S2 is in the bucket');
my $archive = cs_archive_dir($src);
is(scalar(grep { -f "$archive/$before->{segments}{$_}" } @below_segs), scalar(@below_segs),
	'the local archive still has every segment the bucket lost');
cs_poll_or_diag($src, $db,
	"SELECT replica_delete_requests > 0 AND replica_state = 'idle' FROM changestream.status()", 't', 30,
	'status() counts the DELETE requests');

is($src->safe_psql($db, "SELECT count(*) FROM changestream.verify('$gen', source => 'replica')"),
	'0', "verify(source => 'replica') on the source: what is left of the bucket is sound and equal to the local files");

######################################################################
# Reading what is left

my $fresh = cs_new_node('fresh', conf => $replica_conf);
$fresh->start;
$fresh->safe_psql($db, 'CREATE EXTENSION changestream');
is($fresh->safe_psql($db, "SELECT min(lsn) FROM changestream.snapshots('$gen')"), $s2,
	'snapshots() from the bucket begins at S2');
my $i = 0;
for my $p (@points)
{
	$i++;
	$fresh->safe_psql($db, "CREATE SCHEMA r$i");
	is($fresh->safe_psql($db,
		"SELECT tables FROM changestream.restore('r$i', '$gen', target_lsn => '$p->{lsn}', archive_directory => 'replica')"),
		scalar(@tables), "point $i: restore() from the bucket restored the tables");
	my @differ = grep { cs_table_digest($fresh, $db, "r$i", $_) ne $p->{digest}{$_} } @tables;
	is(join(' ', @differ), '', "point $i: every restored table equals the source at $p->{lsn}");
}

my $late = $after->{segments}{$first};
$proxy->inject('not_found', method => 'GET', path => quotemeta($late));
my $changes_sql = "SELECT count(*) FROM changestream.changes('$gen', end_lsn => '$points[-1]{lsn}')";
($rc, $out, $err) = $fresh->psql($db, "\\set VERBOSITY verbose\n$changes_sql");
like($err, qr/ERROR:\s+58P01:.*\Q$late\E/, 'an object gone since the listing is 58P01 naming its key');
like($err, qr/HINT:.*retention.*run the statement again/, 'with a hint to run the statement again');
ok($fresh->safe_psql($db, $changes_sql) > 0, 'the statement run again succeeds');

######################################################################
# An older generation goes whole: its identity object first

my $gen2 = $src->safe_psql($db, 'SELECT changestream.new_generation()');
isnt($gen2, $gen, "new_generation() opened generation $gen2");
cs_pgbench($src, $db, '-T', '1', '-c', '2', '-n');
$deadline = time() + 40;
my $now_state;
while (1)
{
	$now_state = cs_bucket_objects($s3, $bucket, $prefix);
	last if !grep { m{^\Q$gdir\E/} } keys %$now_state;
	last if time() > $deadline;
	usleep(300_000);
}
is(join(' ', sort grep { m{^\Q$gdir\E/} } keys %$now_state), '',
	"every object of the older generation $gen is deleted from the bucket");
ok(exists $now_state->{"generations/$gen2/generation"}, "the new generation's identity object is in the bucket");
ok(-f "$archive/$gdir/generation", 'the local archive still has the older generation');
# the uploader goes on (new segments of the new generation) without putting it again
my $segs_then = scalar(grep { m{^generations/\Q$gen2\E/wal/} } keys %$now_state);
cs_pgbench($src, $db, '-T', '2', '-c', '2', '-n');
$deadline = time() + 30;
while (1)
{
	$now_state = cs_bucket_objects($s3, $bucket, $prefix);
	last if scalar(grep { m{^generations/\Q$gen2\E/wal/} } keys %$now_state) > $segs_then;
	last if time() > $deadline;
	usleep(300_000);
}
ok(scalar(grep { m{^generations/\Q$gen2\E/wal/} } keys %$now_state) > $segs_then,
	'later segments of the new generation went up');
is(join(' ', sort grep { m{^\Q$gdir\E/} } keys %$now_state), '',
	'the older generation was not put again');
is($fresh->safe_psql($db, 'SELECT string_agg(generation, \',\') FROM changestream.generations()'),
	$gen2, 'generations() from the bucket lists the new generation only');

$fresh->stop;
$src->stop;
$proxy->stop;
done_testing();
