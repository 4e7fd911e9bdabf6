# verify(source => 'replica') does not download again what an earlier call
# found sound (issue 31, section 5; docs/DESIGN.md section 16).
#
# A source server archives pgbench traffic with a replica in a real object
# store, then goes quiet.  The oracles: the bucket's listing through awscli
# (the immutable objects: identity files, *.wal.gz, *.snapshot.gz, and
# their ETags) and status().replica_get_requests, which counts every GET
# the server sends (the uploader is idle: every GET of a verify() call is
# that call's; no tail objects, replica_sync_interval = 0, since a
# reader of the bucket downloads the active segment's tail objects at each
# call).  A call reads the small files (identity, horizon,
# timelines, schema history) each time, S GETs, and the bodies it
# downloads; so the difference between two calls' GETs is the difference
# in bodies downloaded.
# - The first call finds no problem; the second finds none either and
#   sends exactly B fewer GETs, B the number of immutable objects awscli
#   lists: it downloaded no body.
# - A damaged record file (a byte flipped) is ignored with a NOTICE: that
#   call downloads every body again (B more GETs than the second), still
#   finds no problem, and writes the record anew (the next call downloads
#   no body).
# - A server with only the replica settings keeps its record in its data
#   directory: its second call sends one GET fewer for each segment and
#   snapshot awscli lists.
# - One segment object in the middle is damaged through awscli (its ETag
#   changes): each following call sends exactly one more GET than the
#   second (the damaged object only) and reports it as a differing and a
#   damaged file, as a call with full => true does, which downloads every
#   body again (B more).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;

my $s3 = cs_object_store();
my $bucket = cs_s3_bucket($s3, 'verify');
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $prefix = 'rec';
my $db = 'postgres';

my $replica_conf = cs_replica_conf($s3, bucket => $bucket, prefix => $prefix,
	dir => $tmp);
my $src = cs_setup('source', pgbench => 1, publish_pgbench => 1,
	conf => qq{
changestream.segment_size = '64kB'
changestream.segment_timeout = '1s'
changestream.replica_sync_interval = 0
$replica_conf});
cs_start_archiving($src);
my $archive = cs_archive_dir($src);

cs_pgbench($src, $db, '-T', '2', '-c', '2', '-n');
$src->safe_psql($db, 'SELECT changestream.take_snapshot()');
cs_pgbench($src, $db, '-T', '2', '-c', '2', '-n');
my $last = $src->safe_psql($db, 'SELECT pg_current_wal_lsn()');

# quiet: everything up to the last write sealed and in the bucket, and
# nothing left to upload.  replica_flushed_lsn counts the active segment's
# tail objects too, so the last commit must also lie before the newest
# (active) segment: sealed, compressed and up as an immutable object.
cs_poll_or_diag($src, $db,
	"SELECT replica_flushed_lsn >= '$last'::pg_lsn AND replica_state = 'idle' AND replica_backlog_files = 0
	    AND raw_sealed_segments = 0
	    AND (SELECT start_lsn FROM changestream.wal_segments((SELECT max(generation) FROM changestream.generations())) ORDER BY segment_index DESC LIMIT 1)
	        > (SELECT max(commit_lsn) FROM changestream.changes())
	   FROM changestream.status()",
	't', 120, 'the bucket holds the archive past the last write, every commit in a sealed segment');

# the immutable objects of the bucket (awscli), with their ETags
sub immutable_objects
{
	my ($rc, $out, $err) = cs_aws($s3, 's3api', 'list-objects-v2',
		'--bucket', $bucket, '--prefix', "$prefix/generations/", '--query',
		'Contents[].[Key,ETag]', '--output', 'text');
	die "list-objects-v2 failed: $err" if $rc != 0;
	my %o;
	for my $line (split /\n/, $out)
	{
		my ($key, $etag) = split /\s+/, $line;
		$o{$key} = $etag
		  if $key =~ m{/generations/[0-9a-f]{16}/(generation|wal/[0-9a-f]+\.wal\.gz|snapshots/[0-9A-F]+\.snapshot\.gz)$};
	}
	return \%o;
}
# and the bucket lists every compressed segment of the local archive (the
# uploader's backlog count is taken at its passes)
my $compressed = $src->safe_psql($db, 'SELECT count(*) FROM changestream.wal_segments((SELECT max(generation) FROM changestream.generations())) WHERE compressed');
my $before;
foreach my $try (1 .. 60)
{
	$before = immutable_objects();
	last if scalar(grep { /\.wal\.gz$/ } keys %$before) == $compressed;
	sleep(1);
}
is(scalar(grep { /\.wal\.gz$/ } keys %$before), $compressed,
	'the bucket lists every compressed segment of the local archive');
my $nb = scalar(keys %$before);
my @segs = sort grep { /\.wal\.gz$/ } keys %$before;
ok(@segs >= 4, scalar(@segs) . " segment objects, $nb immutable objects in the bucket");

my $verify_sql = "SELECT file_name || ': ' || problem FROM changestream.verify(source => 'replica') ORDER BY 1";

# one verify() call (on the source unless a node is given): (its rows,
# its NOTICEs, the GETs it sent)
sub verify_call
{
	my ($sql, $node) = @_;
	$node //= $src;
	my $gets0 = $node->safe_psql($db, 'SELECT replica_get_requests FROM changestream.status()');
	my ($rc, $out, $err) = $node->psql($db, $sql);
	die "verify failed: $err" if $rc != 0;
	my $gets1 = $node->safe_psql($db, 'SELECT replica_get_requests FROM changestream.status()');
	return ($out, $err, $gets1 - $gets0);
}

my ($rows1, $notice1, $gets1) = verify_call($verify_sql);
is($rows1, '', 'first call: the bucket equals the local archive and is sound');
like($notice1, qr/read $nb objects of the replica, and took 0 as verified/,
	'first call: nothing was recorded before: every object body read');
ok(-f "$archive/replica.verified", 'the record is written in the archive directory');

my ($rows2, $notice2, $gets2) = verify_call($verify_sql);
is($rows2, $rows1, 'second call: the same verdict');
is($gets1 - $gets2, $nb,
	"second call: $gets2 GETs, $nb fewer than the first: no object body downloaded again");
like($notice2, qr/read 0 objects of the replica, and took $nb as verified/,
	'second call: its NOTICE says so');

# the old call forms still work
is($src->safe_psql($db, "SELECT count(*) FROM changestream.verify(NULL, 'replica')"), '0',
	'verify(generation, source) positionally');
is($src->safe_psql($db, 'SELECT count(*) FROM changestream.verify()'), '0',
	'verify() of the local archive');

######################################################################
# A damaged record: ignored, everything read again, written anew

{
	my $path = "$archive/replica.verified";
	open(my $rf, '+<:raw', $path) or die "open $path: $!";
	my $at = int((-s $path) / 2);
	seek($rf, $at, 0);
	read($rf, my $byte, 1);
	seek($rf, $at, 0);
	print $rf ($byte eq 'x' ? 'y' : 'x');
	close($rf);
}
my ($rows3, $notice3, $gets3) = verify_call($verify_sql);
like($notice3, qr/verify record ".*replica\.verified" is damaged, and is not used/,
	'a damaged record: a NOTICE says it is not used');
is($gets3 - $gets2, $nb, 'a damaged record: every object body is downloaded again');
is($rows3, $rows1, 'a damaged record: the same verdict');
my ($rows4, $notice4, $gets4) = verify_call($verify_sql);
is($gets4, $gets2, 'the record written anew: the next call downloads no body');

######################################################################
# A server with nothing but the replica settings: the record is in its
# data directory; it has no local archive, so no identity file is
# downloaded whole for a comparison: the bodies are the segments and
# snapshots

my $fresh = cs_new_node('fresh', conf => $replica_conf);
$fresh->start;
$fresh->safe_psql($db, 'CREATE EXTENSION changestream');
my $bodies = scalar(grep { /\.(wal|snapshot)\.gz$/ } keys %$before);
my ($frows1, $fnotice1, $fgets1) = verify_call($verify_sql, $fresh);
is($frows1, '', 'a server without a local archive: the bucket is sound');
ok(-f $fresh->data_dir . '/changestream_replica.verified',
	'a server without a local archive: the record is in its data directory');
my ($frows2, $fnotice2, $fgets2) = verify_call($verify_sql, $fresh);
is($frows2, $frows1, 'a server without a local archive, second call: the same verdict');
is($fgets1 - $fgets2, $bodies,
	"a server without a local archive, second call: $bodies fewer GETs, no segment or snapshot downloaded again");
$fresh->stop;

######################################################################
# One segment object damaged through the S3 API: a new ETag

my $victim = $segs[ int(@segs / 2) ];
my ($rc, $out, $err) = cs_aws($s3, 's3', 'cp', "s3://$bucket/$victim", "$tmp/victim.gz");
is($rc, 0, 'the segment object downloaded with awscli');
{
	open(my $vf, '+<:raw', "$tmp/victim.gz") or die "open: $!";
	my $at = int((-s "$tmp/victim.gz") / 2);
	seek($vf, $at, 0);
	read($vf, my $byte, 1);
	seek($vf, $at, 0);
	print $vf chr(ord($byte) ^ 0xff);
	close($vf);
}
($rc, $out, $err) = cs_aws($s3, 's3', 'cp', "$tmp/victim.gz", "s3://$bucket/$victim");
is($rc, 0, 'the damaged object put back with awscli');
my $after = immutable_objects();
is(join(' ', sort keys %$after), join(' ', sort keys %$before),
	'the bucket holds the same immutable objects');
my @changed = grep { $after->{$_} ne $before->{$_} } sort keys %$after;
is("@changed", $victim, 'awscli: only the damaged object has a new ETag');

(my $victim_name = $victim) =~ s{^.*/wal/}{wal/};
my ($rows5, $notice5, $gets5) = verify_call($verify_sql);
is($gets5 - $gets2, 1, 'after the damage: exactly one object body downloaded');
like($rows5, qr/^\Q$victim_name\E: The bucket's object .* differs from the local file/m,
	'after the damage: the object is reported as differing from the local file');
my @victim_rows = grep { /^\Q$victim_name\E: / } split /\n/, $rows5;
ok(@victim_rows >= 2, 'after the damage: the object is reported as damaged too');
my @other_rows = grep { !/^\Q$victim_name\E: / } split /\n/, $rows5;
is(scalar(@other_rows), 0, 'after the damage: no other file is reported');

my ($rows6, $notice6, $gets6) = verify_call($verify_sql);
is($gets6 - $gets2, 1, 'the next call downloads the damaged object again, and only it');
is($rows6, $rows5, 'the next call: the same verdict');

my ($rows7, $notice7, $gets7) = verify_call(
	"SELECT file_name || ': ' || problem FROM changestream.verify(source => 'replica', full => true) ORDER BY 1");
is($gets7 - $gets2, $nb, 'full => true downloads every object body again');
is($rows7, $rows5, 'full => true: the same verdict');
like($notice7, qr/read $nb objects of the replica, and took 0 as verified/,
	'full => true: its NOTICE says so');

is($src->safe_psql($db, 'SELECT count(*) FROM changestream.verify(source => \'local\')'), '0',
	'the local archive itself is sound');

$src->stop;
done_testing();
