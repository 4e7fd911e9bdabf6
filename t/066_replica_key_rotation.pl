
# Key rotation for the uploader (issue 31, sections 2 and 4): the
# credentials file is re-read when it changes, without a reload.
#   - The archive goes up with the first keys.
#   - The file's secret is replaced by one the store does not know (keys
#     rotated at the store before the file was updated): while pgbench
#     runs, the uploader's passes fail with SignatureDoesNotMatch, shown in
#     status() (replica_state 'error', replica_last_error naming it) and in
#     stat_archiver (replica_error_current); the local archive goes on.
#   - The right secret is written back (a new file renamed over the old
#     one, as a rotation tool writes it), with no reload: the uploader
#     reads it at its next pass, the backlog drains, and the bucket (listed
#     by awscli, the oracle) holds every finished file of the local
#     archive with its size.
#   - Neither secret reaches the server log.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;

my $s3 = cs_object_store();
my $bucket = cs_s3_bucket($s3, 'rotate');
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $prefix = 'rot';
my $db = 'postgres';
my $wrong_secret = 'WrongSecretKeyOfARotatedUser0123456789ab';

my $node = cs_setup(
	'key_rotation',
	pgbench => 1,
	publish_pgbench => 1,
	conf => qq{
changestream.segment_size = '64kB'
changestream.segment_timeout = '1s'
} . cs_replica_conf($s3, bucket => $bucket, prefix => $prefix, dir => $tmp));
cs_start_archiving($node);
my $creds = "$tmp/credentials";
my $log_start = cs_log_offset($node);

# The credentials file with secret $secret, written whole and renamed
# over the old one.
sub write_credentials
{
	my ($secret) = @_;
	my $new = "$creds.new";
	open(my $fh, '>', $new) or die "open $new: $!";
	print $fh "[default]\naws_access_key_id = $s3->{access_key}\n"
	  . "aws_secret_access_key = $secret\n";
	close($fh) or die "close $new: $!";
	chmod(0600, $new) or die "chmod $new: $!";
	rename($new, $creds) or die "rename $new: $!";
}

my $idle = q{replica_state = 'idle' AND replica_backlog_files = 0
       AND replica_flushed_lsn IS NOT NULL};
cs_poll_or_diag($node, $db, "SELECT $idle FROM changestream.status()", 't', 120,
	'the first keys: the archive is up and the uploader idle');
my $puts0 = $node->safe_psql($db, 'SELECT replica_put_requests FROM changestream.status()');

############################################################################
# The keys rotated at the store before the file was updated

write_credentials($wrong_secret);
cs_pgbench($node, $db, '-T', '3', '-c', '2', '-n');
cs_poll_or_diag($node, $db,
	q{SELECT replica_state = 'error' AND replica_last_error LIKE '%SignatureDoesNotMatch%'
   FROM changestream.status()},
	't', 120, 'a stale secret: status() shows the error, naming SignatureDoesNotMatch');
is($node->safe_psql($db, 'SELECT replica_error_current FROM changestream.stat_archiver'),
	't', 'stat_archiver: the replica error is current');
my $local_lsn = $node->safe_psql($db, 'SELECT pg_current_wal_lsn()');
cs_wait_archived($node, name => 'the local archive goes on meanwhile');
cs_poll_or_diag($node, $db,
	'SELECT replica_backlog_files > 0 FROM changestream.status()', 't', 60,
	'a backlog builds while the bucket refuses the keys');

############################################################################
# The file updated, without a reload

write_credentials($s3->{secret_key});
cs_poll_or_diag($node, $db,
	"SELECT $idle AND replica_last_upload_at > replica_last_error_at FROM changestream.status()",
	't', 180, 'the right secret written back, no reload: the backlog drains');
cs_poll_or_diag($node, $db,
	"SELECT replica_flushed_lsn >= '$local_lsn'::pg_lsn FROM changestream.status()",
	't', 120, 'the bucket is durable past the load run under the stale keys');
ok($node->safe_psql($db, 'SELECT replica_put_requests FROM changestream.status()') > $puts0,
	'the uploader sent PUTs again');

# every finished file of the local archive is in the bucket, same size
my $local = cs_finished_files(cs_archive_dir($node));
my $remote = cs_bucket_objects($s3, $bucket, $prefix);
my @missing = grep { !defined $remote->{$_} || $remote->{$_} != $local->{$_} }
  sort keys %$local;
ok(scalar(keys %$local) > 3, scalar(keys %$local) . ' finished files in the local archive');
is(join(' ', @missing), '', 'awscli: every finished local file is in the bucket with its size');

my $log = cs_log_since($node, $log_start);
unlike($log, qr/\Q$wrong_secret\E/, 'the stale secret is in no log line');
unlike($log, qr/\Q$s3->{secret_key}\E/, 'the right secret is in no log line');

$node->stop;
done_testing();
