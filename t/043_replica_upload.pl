
# The uploader (issue 31, sections 1, 4 and 6; docs/DESIGN.md section 15)
# against a real object store, through the fault proxy.
#
# - A cluster with the replica settings and a key file archives pgbench
#   traffic and a table of 12 MB of random bytes (its opening snapshot is
#   over 8 MiB: a multipart upload).  Once every finished local file
#   (identity, schema history, compressed segments, snapshots) is in the
#   bucket, "aws s3 sync" of the prefix (awscli, the oracle) gives files
#   equal byte for byte to the local ones; status() shows the replica idle
#   with its counters.
# - The proxy's request log shows the order rule: per generation the
#   opening snapshot, then the identity file, then the compressed segments
#   in index order; no key is put twice.
# - An outage (the proxy refuses connections): status() shows backoff with
#   the error; pgbench and two snapshots go on, a retention run (window
#   2 s) deletes no file that is not in the bucket; after the outage the
#   backlog drains, and a later retention run deletes files uploaded since
#   (the check above could fail).
# - A reload while a segment's PUT is stalled in the proxy cancels it; the
#   uploader goes on: idle again, later segments put, every file up.
# - kill -9 of the server while a segment's PUT is stalled in the proxy,
#   restart: the bucket catches up, equal to the local files, and no key
#   was put twice.
# - The journal deleted with the server stopped: after the restart every
#   object already in the bucket is adopted (log lines), none put again.
# - The prefix emptied with awscli, the server restarted: the journal's
#   entries are dropped, every finished local file is up again, byte-equal.
# - A second cluster pointed at the same prefix is refused: replica_state
#   error, one log line naming the other cluster and the prefix, nothing of
#   it in the bucket.
use strict;
use warnings;

use File::Compare;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ChangestreamTest;
use S3FaultProxy;

my $s3 = cs_object_store();
my $bucket = cs_s3_bucket($s3, 'upload');
my $proxy = S3FaultProxy->new(upstream => $s3->{endpoint});
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $prefix = 'db1/archive';
my $db = 'postgres';

sub replica_conf
{
	my ($endpoint) = @_;
	return qq{
changestream.segment_size = '64kB'
changestream.segment_timeout = '1s'
changestream.retention = '2s'
} . cs_replica_conf($s3, bucket => $bucket, prefix => $prefix, dir => $tmp,
		endpoint => $endpoint);
}

my $node = cs_setup('upload', pgbench => 1, publish_pgbench => 1,
	conf => replica_conf($proxy->url),
	sql => q{CREATE TABLE blob (id int PRIMARY KEY, b bytea);
		INSERT INTO blob SELECT i, (SELECT decode(string_agg(md5(random()::text || i || j), ''), 'hex')
		  FROM generate_series(1, 65536) j) FROM generate_series(1, 12) i;
		ALTER PUBLICATION changestream ADD TABLE blob;});
cs_start_archiving($node);
my $archive = cs_archive_dir($node);

# The status columns of the uploader, as a hash.
sub replica_status
{
	my ($n) = @_;
	my @cols = qw(replica_state replica_pid replica_flushed_lsn
	  replica_lag_bytes replica_backlog_files replica_backlog_bytes
	  replica_last_upload_at replica_last_error replica_put_requests
	  replica_get_requests replica_list_requests replica_bytes_sent
	  last_retention_at);
	return $n->query_hash($db, 'SELECT __COLUMNS__ FROM changestream.status()',
		@cols);
}

# Take a snapshot; returns the time after it.
sub snapshot_time
{
	$node->safe_psql($db, 'SELECT changestream.take_snapshot()');
	return $node->safe_psql($db, 'SELECT now()');
}

# Finished local files of the archive (or of $dir): name => size.
sub local_files { return cs_finished_files($_[0] // $archive); }

# Objects under the prefix, as awscli lists them: name => size.
sub bucket_objects { return cs_bucket_objects($s3, $bucket, $prefix); }

# Every key under the prefix with its size and ETag, one a line.
sub bucket_listing
{
	my ($rc, $out, $err) = cs_aws($s3, 's3api', 'list-objects-v2',
		'--bucket', $bucket, '--prefix', "$prefix/", '--query',
		'Contents[].[Key,Size,ETag]', '--output', 'text');
	die "list-objects-v2 failed: $err" if $rc != 0;
	return join("\n", sort split /\n/, $out);
}

# the finished local files the last wait_caught_up() found in the bucket
my $caught_up_files = {};

# Wait until every finished local file is in the bucket with its size;
# one test.  Returns the objects.
sub wait_caught_up
{
	my ($name) = @_;
	my $deadline = time() + 180;
	my ($missing, $objects, $local);
	while (1)
	{
		$local = local_files();
		$objects = bucket_objects();
		$missing = join(' ', grep {
			!defined $objects->{$_} || $objects->{$_} != $local->{$_}
		} sort keys %$local);
		last if $missing eq '' || time() > $deadline;
		usleep(500_000);
	}
	is($missing, '', "$name: every finished local file is in the bucket with its size");
	$caught_up_files = $local;
	return $objects;
}

# aws s3 sync of the prefix, then every finished local file the last
# wait_caught_up() found in the bucket compared byte for byte with its
# download; one test.
my $sync_round = 0;
sub compare_with_bucket
{
	my ($name) = @_;
	my $down = "$tmp/down" . ++$sync_round;
	# not tail/: the active segment's tail objects (t/059) are deleted once
	# the segment is up compressed, and may go between listing and GET
	my ($rc, $out, $err) = cs_aws($s3, 's3', 'sync', '--only-show-errors',
		'--exclude', 'tail/*', "s3://$bucket/$prefix", $down);
	die "aws s3 sync failed: $err" if $rc != 0;
	my $local = $caught_up_files;
	my @differ;
	my $compared = 0;
	for my $rel (sort keys %$local)
	{
		next unless -f "$archive/$rel";	# retention took it since
		$compared++;
		push @differ, $rel if compare("$archive/$rel", "$down/$rel") != 0;
	}
	is(join(' ', @differ), '',
		"$name: the $compared finished local files equal their objects synced down by awscli");
	return $down;
}

# Object PUTs in the proxy's log, from entry $from on: [key, query, fault].
sub puts
{
	my ($from) = @_;
	my @r = $proxy->requests;
	my @p;
	for my $r (@r[ ($from // 0) .. $#r ])
	{
		next unless $r->{method} eq 'PUT';
		my ($path, $query) = split /\?/, $r->{target}, 2;
		next unless $path =~ s{^/\Q$bucket\E/\Q$prefix\E/}{};
		push @p, [ $path, $query // '', $r->{fault} ];
	}
	return @p;
}

# Keys put (whole, not faulted) more than once, besides the files that
# change (the marker's conditional PUT at each start, the horizon, the
# schema history).
sub put_twice
{
	my %n;
	for my $p (puts())
	{
		next if $p->[1] ne '' || $p->[2] ne '-';
		next if $p->[0] =~ m{^changestream\.cluster$|/retention$|/schema_history$};
		$n{ $p->[0] }++;
	}
	return join(' ', grep { $n{$_} > 1 } sort keys %n);
}

######################################################################
# Upload, order, bytes

cs_pgbench($node, $db, '-T', '5', '-c', '2', '-n');
$node->safe_psql($db, 'SELECT changestream.take_snapshot()');
my $objects = wait_caught_up('after pgbench and a snapshot');
compare_with_bucket('after pgbench and a snapshot');

my $st = replica_status($node);
note(explain($st));
like($st->{replica_state}, qr/^(idle|uploading)$/, 'replica_state is idle or uploading');
isnt($st->{replica_flushed_lsn}, '', 'replica_flushed_lsn is set');
ok($st->{replica_put_requests} > 0 && $st->{replica_bytes_sent} > 12_000_000,
	"PUTs ($st->{replica_put_requests}) and bytes sent ($st->{replica_bytes_sent}) are counted");
ok($st->{replica_list_requests} >= 1, 'the bucket was listed');
ok(defined $objects->{'changestream.cluster'}, 'the marker object is in the bucket');
my ($rc, $marker) = cs_aws($s3, 's3', 'cp', "s3://$bucket/$prefix/changestream.cluster", '-');
my $sysid = $node->safe_psql($db, 'SELECT system_identifier FROM pg_control_system()');
like($marker, qr/system_identifier $sysid\ndatabase postgres\nslot /,
	'the marker names the system identifier, the database and the slot');

# the order of the PUTs, per generation
{
	my (%seen, @bad, $i);
	my %pos;
	for my $p (puts())
	{
		$i++;
		next if $p->[2] ne '-' || exists $pos{ $p->[0] };
		$pos{ $p->[0] } = $i;
	}
	my @gens = sort grep { m{^generations/[0-9a-f]{16}/generation$} } keys %$objects;
	ok(@gens >= 1, 'a generation is in the bucket');
	for my $g (@gens)
	{
		(my $gdir = $g) =~ s{/generation$}{};
		my @snaps = sort grep { m{^\Q$gdir\E/snapshots/} } keys %pos;
		my @segs = sort grep { m{^\Q$gdir\E/wal/} } keys %pos;
		push @bad, "$gdir: identity before its opening snapshot"
		  unless @snaps && $pos{ $snaps[0] } < $pos{$g};
		push @bad, "$gdir: a segment before the identity"
		  if grep { $pos{$_} < $pos{$g} } @segs;
		for my $k (1 .. $#segs)
		{
			push @bad, "$segs[$k] before $segs[$k - 1]"
			  if $pos{ $segs[$k] } < $pos{ $segs[ $k - 1 ] };
		}
		ok(@segs >= 3, "$gdir: " . scalar(@segs) . ' segments were put');
	}
	is(join('; ', @bad), '',
		'opening snapshot, then identity, then segments in index order');
	my @parts = grep { $_->[1] =~ /partNumber=/ && $_->[0] =~ m{/snapshots/} } puts();
	ok(@parts >= 2, 'the opening snapshot (over 8 MiB) went up in ' . scalar(@parts) . ' parts');
}
is(put_twice(), '', 'no key was put twice');

######################################################################
# Outage: backoff, retention keeps what is not up, drain

my $before = bucket_objects();
$proxy->down;
cs_pgbench($node, $db, '-T', '3', '-c', '2', '-n');
$node->safe_psql($db, 'SELECT changestream.take_snapshot()');
cs_poll_or_diag($node, $db,
	q{SELECT replica_state = 'backoff' AND replica_last_error IS NOT NULL FROM changestream.status()},
	't', 60, 'during the outage status() shows backoff and the error');
cs_pgbench($node, $db, '-T', '3', '-c', '2', '-n');
my $outage_files = local_files();
my $snap_at = snapshot_time();
cs_poll_or_diag($node, $db,
	"SELECT last_retention_at > '$snap_at'::timestamptz FROM changestream.status()",
	't', 90, 'a retention run after the last snapshot');
my $kept = local_files();
my @pending = grep { !defined $before->{$_} } sort keys %$outage_files;
my $pending_segments = grep { m{/wal/} } @pending;
ok($pending_segments >= 3,
	"$pending_segments segments sealed during the outage wait locally");
is(join(' ', grep { !defined $kept->{$_} } @pending), '',
	'a retention run during the outage deleted none of them');
cs_poll_or_diag($node, $db,
	"SELECT replica_backlog_files >= $pending_segments AND replica_backlog_bytes > 0 FROM changestream.status()",
	't', 90, 'status() counts them in the backlog (at the next try)');
$proxy->up;
wait_caught_up('after the outage');
compare_with_bucket('after the outage');
# the same retention does delete them once they are up
snapshot_time();
usleep(2_500_000);
$snap_at = snapshot_time();
cs_poll_or_diag($node, $db,
	"SELECT last_retention_at > '$snap_at'::timestamptz FROM changestream.status()",
	't', 90, 'a retention run after the drain');
my $after = local_files();
my $deleted = grep { !defined $after->{$_} } @pending;
ok($deleted > 0, "retention deleted $deleted of the outage's files once they were up");

######################################################################
# A reload while a transfer is stalled: it is cancelled, and the uploader
# goes on (each pass has its own resource owner, released after an error)

{
	my $from = scalar($proxy->requests);
	my $log_at = cs_log_offset($node);
	$proxy->inject('stall_request', method => 'PUT', path => '/wal/');
	cs_pgbench($node, $db, '-T', '2', '-c', '2', '-n');
	my $until = time() + 60;
	usleep(200_000) while !$proxy->injected && time() < $until;
	ok(scalar($proxy->injected) >= 1, 'a segment PUT is stalled in the proxy');
	$node->safe_psql($db, 'SELECT pg_reload_conf()');
	$proxy->clear;
	cs_pgbench($node, $db, '-T', '2', '-c', '2', '-n');
	$node->safe_psql($db, 'SELECT changestream.take_snapshot()');
	wait_caught_up('after a reload during a stalled PUT');
	cs_poll_or_diag($node, $db,
		q{SELECT replica_state = 'idle' FROM changestream.status()},
		't', 60, 'after the reload the uploader is idle again');
	my @new = grep { $_->[2] eq '-' && $_->[0] =~ m{/wal/} } puts($from);
	ok(@new >= 2, scalar(@new) . ' segments were put after the reload');
	unlike(cs_log_since($node, $log_at), qr/ResourceOwner/,
		'no resource owner error in the log');
}

######################################################################
# kill -9 in the middle of an upload

my $injected_before = scalar($proxy->injected);
$proxy->inject('stall_request', method => 'PUT', path => '/wal/');
cs_pgbench($node, $db, '-T', '2', '-c', '2', '-n');
my $deadline = time() + 60;
usleep(200_000) while scalar($proxy->injected) <= $injected_before && time() < $deadline;
ok(scalar($proxy->injected) > $injected_before, 'a segment PUT is stalled in the proxy');
my $uploader = $node->safe_psql($db, 'SELECT replica_pid FROM changestream.status()');
cs_crash($node, also_pids => [$uploader]);
$proxy->clear;
$node->start;
wait_caught_up('after kill -9 and restart');
compare_with_bucket('after kill -9 and restart');
is(put_twice(), '', 'no key was put twice across the crash');

######################################################################
# A lost journal: adopted, not put again

$node->stop;
unlink("$archive/replica.journal") or die "unlink journal: $!";
my $in_bucket = bucket_objects();
my $log_from = cs_log_offset($node);
my $req_from = scalar($proxy->requests);
$node->start;
cs_poll_or_diag($node, $db,
	q{SELECT replica_state = 'idle' AND replica_backlog_files = 0 FROM changestream.status()},
	't', 120, 'the uploader is idle again without its journal');
my @again = grep { $_->[1] eq '' && $_->[0] ne 'changestream.cluster' && defined $in_bucket->{ $_->[0] } && $_->[0] !~ m{/(retention|schema_history)$} } puts($req_from);
is(join(' ', map { $_->[0] } @again), '', 'no object already in the bucket was put again');
my $adopted = () = cs_log_since($node, $log_from) =~ /adopted object/g;
ok($adopted >= 3, "$adopted objects were adopted after checking size and checksum");
ok(-f "$archive/replica.journal", 'the journal is written again');
like(slurp_file("$archive/replica.journal"),
	qr{\Achangestream replica journal 1 s3://\Q$bucket/$prefix\E at \Q${\ $proxy->url }\E\n},
	'its first line names the store (the endpoint), the bucket and the prefix');

######################################################################
# The prefix emptied behind the uploader's back (a lifecycle rule, a
# recursive delete): the journal is not trusted, everything goes up again

$node->stop;
($rc, my $rm_out, my $rm_err) = cs_aws($s3, 's3', 'rm', '--recursive', '--only-show-errors',
	"s3://$bucket/$prefix/");
is($rc, 0, 'awscli deleted every object under the prefix') or diag($rm_err);
is(scalar(keys %{ bucket_objects() }), 0, 'the prefix is empty');
$log_from = cs_log_offset($node);
$node->start;
wait_caught_up('after the prefix was emptied and a restart');
compare_with_bucket('after the prefix was emptied and a restart');
ok(defined bucket_objects()->{'changestream.cluster'}, 'the marker is put again');
like(cs_log_since($node, $log_from), qr/objects? of the journal (is|are) not in the bucket/,
	'the journal entries the bucket lacks are logged as dropped');

######################################################################
# A second cluster at the same prefix

my $listing_before = bucket_listing();
# (the nodes are copies of one initdb template, so the system identifiers
# are equal: the slot's name tells the clusters apart)
my $other = cs_setup('other', pgbench => 1, publish_pgbench => 1,
	conf => replica_conf($s3->{endpoint})
	  . "changestream.slot_name = 'other_slot'\n");
my $other_log = cs_log_offset($other);
cs_start_archiving($other);
cs_pgbench($other, $db, '-T', '2', '-c', '1', '-n');
cs_poll_or_diag($other, $db,
	q{SELECT replica_state = 'error' AND replica_last_error LIKE '%belongs to another cluster%' FROM changestream.status()},
	't', 60, 'the second cluster is refused: replica_state error');
ok(scalar(keys %{ local_files(cs_archive_dir($other)) }) > 0,
	'the second cluster archives locally');
# the first cluster keeps archiving (its tail objects, a sealed segment,
# its horizon may change the listing meanwhile): the second cluster's
# generation is in no key, and the marker is the first cluster's still
my $other_gen = $other->safe_psql($db, 'SELECT max(generation) FROM changestream.generations()');
my $listing_after = bucket_listing();
is(join("\n", grep { /\Q$other_gen\E/ } split /\n/, $listing_after), '',
	"no key of the bucket holds the second cluster's generation $other_gen");
is(join("\n", grep { m{/changestream\.cluster\t} } split /\n/, $listing_after),
	join("\n", grep { m{/changestream\.cluster\t} } split /\n/, $listing_before),
	"the marker object is the first cluster's, unchanged (size and ETag)");
is(scalar(grep { !/\Q$other_gen\E/ && !m{/tail/} } split /\n/, $listing_after) >=
	scalar(grep { !m{/tail/} } split /\n/, $listing_before), 1,
	'every finished object listed before is still listed');
my $other_text = cs_log_since($other, $other_log);
my $lines = () = $other_text =~ /belongs to another cluster/g;
is($lines, 1, 'one log line for the refusal');
like($other_text,
	qr/prefix "\Q$prefix\E" of bucket "\Q$bucket\E" belongs to another cluster/,
	'it names the prefix and the bucket');
like($other_text, qr/DETAIL:.*says: changestream cluster\s+system_identifier $sysid\s+database postgres\s+slot changestream\b/s,
	'it names the other cluster');
like($other_text, qr/HINT:  Give each cluster its own prefix/, 'with a hint');
$other->stop;
$node->stop;
$proxy->stop;
done_testing();
