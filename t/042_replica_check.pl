
# changestream.replica_check() against a real object store (issue 31,
# sections 2, 4, 6 and 7): the S3 client layer end to end.
#
# - With good settings every check passes (settings, credentials, put, get
#   whole and a range, list in pages of one key, a 2-part multipart upload,
#   conditional put, delete, clock skew), and the bucket holds nothing of
#   the check afterwards (listed with awscli, an independent client).
# - A wrong secret fails the put row with SignatureDoesNotMatch and a hint
#   (awscli with the same wrong secret is refused the same way: the
#   oracle); rewriting the file with the right secret, without a reload,
#   passes again (the file is re-read when it changes).
# - A bucket that does not exist (awscli's head-bucket says 404) fails the
#   put row with NoSuchBucket and a hint.
# - A credentials file with group access is refused in the credentials row
#   with a hint, and nothing is sent; a malformed one names its line and
#   never its content (a NUL byte too); a FIFO as the credentials or the
#   CA file is refused at once; "env" reads the postmaster's AWS_* variables.
# - Through the fault proxy: a 503 SlowDown fails the put row naming
#   SlowDown, an ExpiredToken, a reset, a truncated GET, a 200
#   CompleteMultipartUpload with an error body and a changed part ETag each
#   fail the row of their check, classified; a query cancel (pg_cancel_backend) during a stalled request
#   ends the call with the cancel error, and the same session then runs
#   replica_check() to the end (the cancelled transfer left nothing
#   behind).  The time from the cancel to the end of the call is measured
#   and reported, not asserted.
# - A replica_endpoint with a password, rejected at server start, stops
#   the archiver naming the setting, without repeating the value.
# - No secret ever appears in a result row or in the server log.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ChangestreamTest;
use S3FaultProxy;

my $s3 = cs_object_store();
my $bucket = cs_s3_bucket($s3, 'check');
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $db = 'postgres';

my @all_checks = ('settings', 'credentials', 'put', 'get', 'list',
	'multipart', 'conditional put', 'delete', 'clock skew');

my $node = cs_setup('replica_check');

# Set the changestream.replica_* settings given (name without prefix =>
# value), reload, and wait until a new session sees them.
sub set_replica
{
	my (%set) = @_;
	my $sql = '';
	for my $name (sort keys %set)
	{
		$sql .= "ALTER SYSTEM SET changestream.$name = '$set{$name}';\n";
	}
	$node->safe_psql($db, $sql . 'SELECT pg_reload_conf();');
	for my $name (sort keys %set)
	{
		my ($ok) = cs_poll($node, $db,
			"SELECT current_setting('changestream.$name')", $set{$name}, 30);
		die "changestream.$name did not become '$set{$name}'" unless $ok;
	}
	return;
}

# replica_check() as a hash of check name => { ok, detail, hint }, and the
# names in order.
sub replica_check
{
	my $out = $node->safe_psql($db,
		q{SELECT check_name, ok, replace(detail, E'\n', ' '), coalesce(hint, '')
		    FROM changestream.replica_check()});
	my (%rows, @names);
	for my $line (split /\n/, $out)
	{
		my ($name, $ok, $detail, $hint) = split /\|/, $line, 4;
		$rows{$name} = { ok => $ok, detail => $detail, hint => $hint };
		push @names, $name;
	}
	note("replica_check(): $out");
	return (\%rows, \@names);
}

sub write_credentials
{
	my ($path, $key, $secret, $mode) = @_;
	open(my $fh, '>', $path) or die "open $path: $!";
	print $fh "# test keys\n[other]\naws_access_key_id = NOTTHISONE\n"
	  . "aws_secret_access_key = not/this/one\n\n"
	  . "[default]\naws_access_key_id = $key\naws_secret_access_key = $secret\n";
	close($fh) or die "close $path: $!";
	chmod($mode // 0600, $path) or die "chmod $path: $!";
	return;
}

# keys under the prefix, as awscli lists them
sub bucket_keys
{
	my ($name, $prefix) = @_;
	my ($rc, $out, $err) = cs_aws($s3, 's3api', 'list-objects-v2',
		'--bucket', $name, '--prefix', $prefix, '--query', 'Contents[].Key',
		'--output', 'text');
	die "list-objects-v2 failed: $err" if $rc != 0;
	$out =~ s/\s+$//;
	return $out eq 'None' ? '' : $out;
}

my $log_start = cs_log_offset($node);
my $creds = "$tmp/credentials";
write_credentials($creds, $s3->{access_key}, $s3->{secret_key});

######################################################################
# Good settings: every check passes, nothing is left behind

set_replica(
	replica_url => "s3://$bucket/db1/archive",
	replica_endpoint => $s3->{endpoint},
	replica_region => $s3->{region},
	replica_credentials => $creds);
my ($rows, $names) = replica_check();
is_deeply($names, \@all_checks, 'replica_check() runs every check, in order');
is(join(',', map { "$_=$rows->{$_}{ok}" } @all_checks),
	join(',', map { "$_=t" } @all_checks), 'every check passes against the store');
like($rows->{settings}{detail}, qr/path-style/,
	'an endpoint with a port gets path-style requests (uri_style auto)');
like($rows->{get}{detail}, qr/a range of 10 \(206\)/, 'the get check reads a range too');
like($rows->{'clock skew'}{detail}, qr/clock is [01] s (ahead of|behind)/,
	'the store runs on this machine: the clock skew is 0 or 1 s (whole seconds)');
like($rows->{list}{detail}, qr/one key per page/,
	'the list check pages one key at a time (the IsTruncated/start-after loop)');
like($rows->{'conditional put'}{detail}, qr/412/,
	'the store refuses If-None-Match: * on an existing key (as t/041 measured with curl)');
is(bucket_keys($bucket, 'db1/'), '',
	'awscli lists nothing left of the check under the prefix');

######################################################################
# A wrong secret: SignatureDoesNotMatch in the put row, like awscli's

my $wrong = 'wrong/secret/key/0000000000000000000000';
write_credentials($creds, $s3->{access_key}, $wrong);
my ($rc, $out, $err) = cs_s3_curl($s3, { secret_key => $wrong },
	"$s3->{endpoint}/$bucket/db1/nothing");
like($out, qr/<Code>SignatureDoesNotMatch<\/Code>/,
	"oracle: curl's signer with the wrong secret gets SignatureDoesNotMatch");
($rows, $names) = replica_check();
is($rows->{credentials}{ok}, 't', 'wrong secret: the credentials file itself reads fine');
is($rows->{put}{ok}, 'f', 'wrong secret: the put check fails');
like($rows->{put}{detail}, qr/403 SignatureDoesNotMatch/, 'wrong secret: the put row names SignatureDoesNotMatch');
like($rows->{put}{hint}, qr/secret key is wrong/, 'wrong secret: the hint names the secret');
ok(!exists $rows->{get}, 'wrong secret: the checks after the failed put do not run');

# the right secret again, same file, no reload: read again
write_credentials($creds, $s3->{access_key}, $s3->{secret_key});
($rows, $names) = replica_check();
is(join(',', map { $rows->{$_}{ok} // 'missing' } @all_checks), join(',', ('t') x @all_checks),
	'the rewritten file is read again without a reload: every check passes');

######################################################################
# A bucket that does not exist

my $missing = "cs-missing-$$";
($rc, $out, $err) = cs_aws($s3, 's3api', 'head-bucket', '--bucket', $missing);
like($err, qr/404|Not Found/, "oracle: awscli's head-bucket says $missing does not exist");
set_replica(replica_url => "s3://$missing/db1");
($rows, $names) = replica_check();
is($rows->{put}{ok}, 'f', 'missing bucket: the put check fails');
like($rows->{put}{detail}, qr/NoSuchBucket/, 'missing bucket: the put row names NoSuchBucket');
like($rows->{put}{hint}, qr/Create the bucket/, 'missing bucket: the hint says to create it or fix the name');
set_replica(replica_url => "s3://$bucket/db1/archive");

######################################################################
# A credentials file with group access is refused before any request

chmod(0640, $creds) or die "chmod: $!";
($rows, $names) = replica_check();
is($rows->{credentials}{ok}, 'f', 'mode 0640: the credentials check fails');
like($rows->{credentials}{detail}, qr/has group or world access.*0640/,
	'mode 0640: the detail names the access and the mode');
like($rows->{credentials}{hint}, qr/0600/, 'mode 0640: the hint says 0600');
ok(!exists $rows->{put}, 'mode 0640: nothing is sent');
chmod(0600, $creds) or die "chmod: $!";

######################################################################
# Untrusted credentials files: the line is named, never its content

sub write_raw
{
	my ($path, $text) = @_;
	open(my $fh, '>', $path) or die "open $path: $!";
	print $fh $text;
	close($fh) or die "close $path: $!";
	chmod(0600, $path) or die "chmod $path: $!";
	return;
}

my $leak = 'LEAKYSECRET/should/never/show/0000000000';
my %bad_files = (
	'a line without "="' => [ "[default]\naws_access_key_id = $s3->{access_key}\naws_secret_access_key $leak\n",
		qr/invalid line 3 in credentials file .*A line must be/ ],
	'a line over 8 kB' => [ "[default]\naws_access_key_id = " . ('x' x 9000) . "\n",
		qr/line 2 of credentials file .* is too long/ ],
	'no such profile' => [ "[other]\naws_access_key_id = a\naws_secret_access_key = $leak\n",
		qr/has no profile "default"/ ],
	'no secret' => [ "[default]\naws_access_key_id = $s3->{access_key}\n",
		qr/profile "default" of credentials file .* lacks aws_secret_access_key/ ],
	'an unterminated section' => [ "[default\naws_secret_access_key = $leak\n",
		qr/invalid line 1 .*section header/ ],
	'a NUL byte' => [ "[default]\naws_access_key_id = $s3->{access_key}\naws_secret_access_key = x\0$leak\n",
		qr/invalid line 3 in credentials file .*NUL byte/ ]);
for my $case (sort keys %bad_files)
{
	my ($text, $want) = @{ $bad_files{$case} };
	write_raw($creds, $text);
	($rows, $names) = replica_check();
	is($rows->{credentials}{ok}, 'f', "credentials file with $case: refused");
	like($rows->{credentials}{detail}, $want, "credentials file with $case: the detail says where and what");
	ok(index($rows->{credentials}{detail} . $rows->{credentials}{hint}, 'LEAKY') < 0,
		"credentials file with $case: no secret in the row");
}
write_credentials($creds, $s3->{access_key}, $s3->{secret_key});

# A FIFO named as the credentials file or the CA file is refused at once
# (opening one for reading would block until a writer comes).
my $fifo = "$tmp/fifo";
system('mkfifo', $fifo) == 0 or die "mkfifo: $?";
chmod(0600, $fifo) or die "chmod $fifo: $!";
set_replica(replica_credentials => $fifo);
($rows, $names) = replica_check();
is($rows->{credentials}{ok}, 'f', 'a FIFO as the credentials file: refused');
like($rows->{credentials}{detail}, qr/credentials file ".*fifo" is not a regular file/,
	'a FIFO as the credentials file: the detail says it is not a regular file');
set_replica(replica_credentials => $creds, replica_ca_file => $fifo);
($rows, $names) = replica_check();
is($rows->{settings}{ok}, 'f', 'a FIFO as the CA file: the settings check fails');
like($rows->{settings}{detail}, qr/replica_ca_file: ".*fifo" is not a regular file/,
	'a FIFO as the CA file: the detail says it is not a regular file');
ok(!exists $rows->{put}, 'a FIFO as the CA file: nothing is sent');
set_replica(replica_ca_file => '');

# env: the server's AWS_* variables (the postmaster's environment)
{
	local $ENV{AWS_ACCESS_KEY_ID} = $s3->{access_key};
	local $ENV{AWS_SECRET_ACCESS_KEY} = $s3->{secret_key};
	$node->restart;
}
set_replica(replica_credentials => 'env');
($rows, $names) = replica_check();
like($rows->{credentials}{detail}, qr/environment/, 'env: the keys come from the environment');
is(join(',', map { $rows->{$_}{ok} // 'missing' } @all_checks), join(',', ('t') x @all_checks),
	"env: every check passes with the postmaster's AWS_* variables");
$node->restart;
($rows, $names) = replica_check();
like($rows->{credentials}{detail}, qr/AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY is not set/,
	'env without the variables: the credentials row says which are missing');
set_replica(replica_credentials => $creds);

######################################################################
# Through the fault proxy

my $proxy = S3FaultProxy->new(upstream => $s3->{endpoint});
set_replica(replica_endpoint => $proxy->url);

$proxy->inject('slowdown', count => 1, method => 'PUT');
($rows, $names) = replica_check();
like($rows->{put}{detail}, qr/503 SlowDown/, '503 SlowDown through the proxy: the put row names it');
is(scalar(grep { $_->{fault} eq 'slowdown' } $proxy->injected), 1, 'the proxy injected one SlowDown');

# More faults, each in the row of the check it hits, classified.
sub with_fault
{
	my ($fault, %match) = @_;
	$proxy->inject($fault, count => 1, %match);
	my ($r) = replica_check();
	$proxy->clear;
	return $r;
}

$rows = with_fault('expired_token', method => 'PUT');
like($rows->{put}{detail}, qr/400 ExpiredToken/, 'ExpiredToken: the put row names it');
like($rows->{put}{hint}, qr/session token expired/, 'ExpiredToken: the hint says to write fresh keys');

# libcurl sends a request again, once, on a fresh connection when a reused
# one dies before any answer: two resets make the HEAD fail.
$rows = with_fault('reset', method => 'HEAD', count => 2);
is($rows->{delete}{ok}, 'f', 'a reset connection: the delete check (its HEAD) fails');
like($rows->{delete}{detail}, qr/no response to the HEAD/, 'a reset connection: no response, named');

# A reset PUT on a reused connection: libcurl sends it again, its body
# rewound (CURLOPT_SEEKFUNCTION), when the reset comes after the body was
# sent; when it comes while the body is being sent, the PUT fails with no
# response.  Which one happens depends on timing, so either is accepted,
# and nothing else.
my $resets = scalar(grep { $_->{fault} eq 'reset' } $proxy->injected);
$rows = with_fault('reset', method => 'PUT', path => qr{\.list$});
is(scalar(grep { $_->{fault} eq 'reset' } $proxy->injected), $resets + 1,
	'the proxy reset the PUT of the second list object');
ok($rows->{list}{ok} eq 't'
	  || $rows->{list}{detail} =~ /^no response to the PUT of key ".*\.list"/,
	'a reset PUT is sent again and succeeds, or fails as no response: '
	  . $rows->{list}{detail});

$rows = with_fault('truncated_get', method => 'GET', path => qr{replica_check/\d+\.\d+\.\d+$});
is($rows->{get}{ok}, 'f', 'a truncated GET: the get check fails');
like($rows->{get}{detail}, qr/response to the GET of key .* broke off after HTTP 200/,
	'a truncated GET: the answer that broke off is named, not taken as the object');

# Object data that looks like an S3 error document is data: a 200 GET
# whose body begins with <Error><Code>SlowDown is read as the object (and
# here differs from what was written), not as a SlowDown.
$rows = with_fault('error_in_body', method => 'GET', path => qr{replica_check/\d+\.\d+\.\d+$});
is(scalar(grep { $_->{fault} eq 'error_in_body' } $proxy->injected), 1,
	'the proxy replaced one GET body by an error document');
is($rows->{get}{ok}, 'f', 'an object body holding <Error>: the get check fails');
like($rows->{get}{detail}, qr/read back as \d+ bytes that differ from the \d+ written/,
	'an object body holding <Error>: compared as data, not taken as an S3 error');
unlike($rows->{get}{detail}, qr/SlowDown/, 'an object body holding <Error>: no SlowDown');

# An error answer larger than the success it replaces: a 10-byte range
# GET answered by a 503 SlowDown (its XML body some 200 bytes) is a
# SlowDown, not an answer too large.
$rows = with_fault('slowdown', method => 'GET', range => 1);
is(scalar(grep { $_->{fault} eq 'slowdown' && $_->{method} eq 'GET' } $proxy->injected), 1,
	'the proxy answered one range GET with a SlowDown');
is($rows->{get}{ok}, 'f', 'a range GET answered by SlowDown: the get check fails');
like($rows->{get}{detail}, qr/Range request.*503 SlowDown|503 SlowDown.*Range request/,
	'a range GET answered by SlowDown: classified by its code, not as too large');

$rows = with_fault('complete_error', method => 'POST', path => qr/uploadId=/);
is($rows->{multipart}{ok}, 'f', 'a 200 CompleteMultipartUpload with an error body: the multipart check fails');
like($rows->{multipart}{detail}, qr/HTTP 200 InternalError/,
	'a 200 CompleteMultipartUpload with an error body: classified by its code');

$rows = with_fault('wrong_etag', method => 'PUT', path => qr/partNumber=1&/);
is($rows->{multipart}{ok}, 'f', "a part's ETag changed on the way: the multipart check fails");
like($rows->{multipart}{detail}, qr/completion of the multipart upload/,
	"a part's ETag changed on the way: the completion is refused");
is(bucket_keys($bucket, 'db1/'), '',
	'after the failed checks nothing of them is left under the prefix');

# A stalled request, cancelled: one session runs replica_check() (stalled,
# then cancelled), then again.
$proxy->inject('stall_request', count => 1, method => 'PUT');
my ($sess_out, $sess_err) = ('', '');
my $query = q{SELECT check_name || ':' || CASE WHEN ok THEN 't' ELSE 'f' END FROM changestream.replica_check()};
my $h = IPC::Run::start(
	[ 'psql', '-X', '-A', '-t', '-d', $node->connstr($db),
	  '-c', $query, '-c', $query ],
	'>', \$sess_out, '2>', \$sess_err);
my $deadline = time() + 60;
usleep(50_000)
  until scalar(grep { $_->{fault} eq 'stall_request' } $proxy->injected) == 1
  || time() > $deadline;
is(scalar(grep { $_->{fault} eq 'stall_request' } $proxy->injected), 1,
	'the proxy stalls the put of replica_check()');
my $pid = $node->safe_psql($db,
	q{SELECT pid FROM pg_stat_activity WHERE query LIKE '%changestream.replica_check()%' AND state = 'active' AND pid <> pg_backend_pid()});
like($pid, qr/^\d+$/, 'the stalled call is active');
my $wait = $node->safe_psql($db, "SELECT wait_event_type || '/' || wait_event FROM pg_stat_activity WHERE pid = $pid");
note("the stalled backend waits on $wait");
my $t0 = time();
$node->safe_psql($db, "SELECT pg_cancel_backend($pid)");
my $ended;
while (time() < $t0 + 60)
{
	# the first call is over once the session moved on (its second call or
	# the end); psql's stderr then holds the cancel
	if ($sess_err =~ /canceling statement/ || !$h->pumpable)
	{
		$ended = time();
		last;
	}
	$h->pump_nb;
	usleep(10_000);
}
ok(defined $ended, 'the cancelled call ends');
note(sprintf('cancel to end of the stalled call: %.3f s', ($ended // time()) - $t0));
diag(sprintf('measured: a query cancel ended a stalled replica_check() in %.3f s',
	($ended // time()) - $t0));
$h->finish;
like($sess_err, qr/canceling statement due to user request/,
	'the stalled call ends with the cancel error, not a timeout row');
my @second = grep { /:/ } split /\n/, $sess_out;
is(join(',', @second), join(',', map { "$_:t" } @all_checks),
	'the same session then runs replica_check() through the proxy to the end, every check passing');

$proxy->stop;

######################################################################
# A replica_endpoint with a password in postgresql.conf, rejected at start:
# the archiver (enabled here by changestream.directory) stops with an error
# naming the setting, and neither that error nor the log repeats the value.

my $userinfo = 'USERINFOSECRET0000';
$node->safe_psql($db, 'ALTER SYSTEM RESET changestream.replica_endpoint');
$node->append_conf('postgresql.conf',
	"changestream.replica_endpoint = 'http://tester:$userinfo\@127.0.0.1:7480'\n"
	  . "changestream.directory = '" . cs_archive_dir($node) . "'");
$node->restart;
cs_poll_or_diag($node, $db,
	"SELECT state = 'error' AND last_error LIKE 'changestream.replica_endpoint was rejected at server start%' FROM changestream.status()",
	't', 30, 'an endpoint with a password rejected at start stops the archiver naming the setting');
my ($last_error) = $node->safe_psql($db, 'SELECT last_error FROM changestream.status()');
ok(index($last_error, $userinfo) < 0, 'the archiver error does not repeat the rejected endpoint');
like(cs_log_since($node, $log_start), qr/The endpoint may not hold a user name or password/,
	'the log says why the endpoint was rejected');

######################################################################
# No secret anywhere

my $log = cs_log_since($node, $log_start);
for my $secret ($s3->{secret_key}, $wrong, $leak, $userinfo)
{
	ok(index($log, $secret) < 0, "the server log never holds a secret ($secret)");
}

$node->stop;
done_testing();
