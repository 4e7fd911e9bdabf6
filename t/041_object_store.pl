
# The object store of the replica tests, and the fault proxy in front of it
# (issue 31, section 8).  No PostgreSQL here: this checks the test
# harness itself, so that a replica test that fails points at the
# extension, not at the store.
#
# The store (scripts/object-store.sh, reached through cs_object_store):
# - awscli puts, gets and lists a file, the content read back equal to the
#   file; a file above awscli's multipart threshold goes up in parts and
#   comes back equal;
# - it checks signatures: a wrong secret is 403 SignatureDoesNotMatch, for
#   awscli's signer and for curl's;
# - it honours If-None-Match: * (412 on an existing key, the key
#   unchanged; 200 on a new one).
# The proxy (t/S3FaultProxy.pm): requests pass through it unchanged (a
# signed GET through it reads the object), and each fault is seen by the
# client as injected, once per count, after which requests pass again.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;
use S3FaultProxy;
use Digest::MD5 qw(md5_hex);
use JSON::PP;

my $s3 = cs_object_store();
my $bucket = cs_s3_bucket($s3, 'store');
my $tmp = PostgreSQL::Test::Utils::tempdir();

sub write_file
{
	my ($path, $data) = @_;
	open(my $fh, '>:raw', $path) or die "open $path: $!";
	print $fh $data;
	close($fh) or die "close $path: $!";
	return;
}

sub read_file
{
	my ($path) = @_;
	open(my $fh, '<:raw', $path) or return undef;
	local $/;
	my $data = <$fh>;
	close($fh);
	return $data // '';
}

# bytes that no two offsets of a short period share, not all text
sub content
{
	my ($len, $seed) = @_;
	my $block = join('', map { pack('N', ($_ * 2654435761 + $seed) % 4294967296) } 0 .. 16383);
	my $data = $block x (int($len / length($block)) + 1);
	return substr($data, 0, $len);
}

# An object as awscli reads it (undef when it cannot).
sub aws_get
{
	my ($key, %o) = @_;
	my $out = "$tmp/get.out";
	unlink $out;
	my ($rc) = cs_aws($s3, \%o, 's3', 'cp', "s3://$bucket/$key", $out);
	return $rc == 0 ? read_file($out) : undef;
}

######################################################################
# The store

my $small = content(300_000, 1);
write_file("$tmp/small", $small);
my ($rc, $out, $err) = cs_aws($s3, 's3', 'cp', "$tmp/small", "s3://$bucket/dir/small");
is($rc, 0, 'awscli puts a file') or diag($err);
ok(aws_get('dir/small') eq $small, 'awscli gets it back equal to the file');

# above awscli's multipart threshold (8 MB): two parts
my $big = content(9 * 1024 * 1024 + 123, 2);
write_file("$tmp/big", $big);
($rc, $out, $err) = cs_aws($s3, 's3', 'cp', "$tmp/big", "s3://$bucket/dir/big");
is($rc, 0, 'awscli puts a file in parts') or diag($err);
ok(aws_get('dir/big') eq $big, 'the multipart object reads back equal to the file');

($rc, $out, $err) = cs_aws($s3, 's3api', 'list-objects-v2', '--bucket', $bucket);
my $listing = $rc == 0 ? decode_json($out) : { Contents => [] };
my %listed = map { $_->{Key} => $_ } @{ $listing->{Contents} // [] };
is_deeply([ sort keys %listed ], [ 'dir/big', 'dir/small' ], 'the listing has both objects');
is($listed{'dir/small'}{Size}, length($small), "the listing's size of the small object");
is($listed{'dir/small'}{ETag}, '"' . md5_hex($small) . '"',
	"a single-part object's ETag is its MD5");
like($listed{'dir/big'}{ETag}, qr/^"[0-9a-f]{32}-2"$/, "a two-part object's ETag says 2 parts");

# signatures are checked
# (awscli 2.9 fails in its own error message for the gateway's empty
# <Message>: the answer is read from --debug's log of the response)
($rc, $out, $err) = cs_aws($s3, { secret_key => 'wrong' . $s3->{secret_key} },
	'--debug', 's3api', 'list-objects-v2', '--bucket', $bucket);
isnt($rc, 0, 'awscli with a wrong secret fails');
like($err, qr/"GET \/$bucket\S* HTTP\/1\.1" 403 .*<Code>SignatureDoesNotMatch<\/Code>/s,
	'... with 403 SignatureDoesNotMatch');

my $url = "$s3->{endpoint}/$bucket/dir/small";
($rc, $out, $err) = cs_s3_curl($s3, { secret_key => 'wrong' }, '-w', '\n%{http_code}', $url);
like($out, qr{<Code>SignatureDoesNotMatch</Code>.*\n403$}s,
	"curl's signer with a wrong secret: 403 SignatureDoesNotMatch");
($rc, $out, $err) = cs_s3_curl($s3, '-o', "$tmp/curl.out", '-w', '%{http_code}', $url);
is($out, '200', "curl's signer with the right secret: 200");
ok(read_file("$tmp/curl.out") eq $small, '... and the object');

# If-None-Match: *
write_file("$tmp/other", 'other content');
($rc, $out, $err) = cs_s3_curl($s3, '-X', 'PUT', '-H', 'If-None-Match: *',
	'--data-binary', "\@$tmp/other", '-w', '\n%{http_code}', $url);
like($out, qr/\n412$/, 'a PUT with If-None-Match: * on an existing key: 412');
ok(aws_get('dir/small') eq $small, '... and the key is unchanged');
($rc, $out, $err) = cs_s3_curl($s3, '-X', 'PUT', '-H', 'If-None-Match: *',
	'--data-binary', "\@$tmp/other", '-w', '%{http_code}', "$s3->{endpoint}/$bucket/new");
is($out, '200', 'a PUT with If-None-Match: * on a new key: 200');
is(aws_get('new'), 'other content', '... and the key has the content');

######################################################################
# The proxy

my $proxy = S3FaultProxy->new(upstream => $s3->{endpoint});
my $purl = $proxy->url;
my $via = "$purl/$bucket/dir/small";

# curl GET through the proxy: (exit code, HTTP status, body, headers)
sub proxy_get
{
	my (@extra) = @_;
	unlink "$tmp/p.body", "$tmp/p.head";
	my ($rc, $out, $err) = cs_s3_curl($s3, '-o', "$tmp/p.body", '-D', "$tmp/p.head",
		'-w', '%{http_code}', @extra, $via);
	return ($rc, $out, read_file("$tmp/p.body") // '', read_file("$tmp/p.head") // '');
}

my ($code, $body, $head);
($rc, $code, $body) = proxy_get();
ok($rc == 0 && $code eq '200' && $body eq $small,
	'a signed GET through the proxy reads the object') or diag("curl exit $rc, status $code");

# the canned answers
for my $c (
	[ 'slowdown', 503, 'SlowDown' ],
	[ 'error500', 500, 'InternalError' ],
	[ 'throttle429', 429, 'TooManyRequests' ],
	[ 'expired_token', 400, 'ExpiredToken' ])
{
	my ($fault, $status, $s3code) = @$c;
	$proxy->inject($fault, method => 'GET');
	($rc, $code, $body) = proxy_get();
	ok($code eq $status && $body =~ m{<Code>$s3code</Code>},
		"$fault: the client gets $status $s3code") or diag("status $code, body $body");
	($rc, $code, $body) = proxy_get();
	ok($code eq '200' && $body eq $small, "$fault: the next GET passes");
}

# awscli retries SlowDown: two PUTs refused, the third one lands
my $before = () = $proxy->requests;
$proxy->inject('slowdown', count => 2, method => 'PUT');
write_file("$tmp/retried", 'retried content');
($rc, $out, $err) = cs_aws($s3, { endpoint => $purl }, 's3', 'cp', "$tmp/retried",
	"s3://$bucket/retried");
is($rc, 0, 'awscli through the proxy succeeds after two SlowDowns') or diag($err);
my @reqs = $proxy->requests;
my @puts = grep { $_->{method} eq 'PUT' } @reqs[ $before .. $#reqs ];
is_deeply([ map { $_->{fault} } @puts ], [ 'slowdown', 'slowdown', '-' ],
	'the proxy saw three PUTs, the first two refused');
is(aws_get('retried'), 'retried content', 'the retried object is in the store');

# the connection faults
$proxy->inject('reset', method => 'GET');
($rc, $code) = proxy_get();
ok(($rc == 52 || $rc == 56) && $code eq '000',
	'reset: the client gets no answer, the connection reset') or diag("curl exit $rc, status $code");

$proxy->inject('stall_request', method => 'GET');
($rc, $code) = proxy_get('--max-time', '3');
ok($rc == 28 && $code eq '000', 'stall_request: no answer until the client times out')
  or diag("curl exit $rc, status $code");

$proxy->inject('stall_after_headers', method => 'GET');
($rc, $code, $body, $head) = proxy_get('--max-time', '3');
ok($rc == 28 && $code eq '200' && $body eq '',
	'stall_after_headers: 200 and headers, then no body until the client times out')
  or diag("curl exit $rc, status $code, " . length($body) . " bytes");
like($head, qr/Content-Length: ${\ length($small)}\r\n/i, '... the headers announce the whole object');

$proxy->inject('reset_mid_body', method => 'GET');
($rc, $code, $body) = proxy_get();
ok($rc == 56 && $code eq '200' && length($body) < length($small)
	  && $body eq substr($small, 0, length($body)),
	'reset_mid_body: part of the body, then a reset')
  or diag("curl exit $rc, status $code, " . length($body) . " bytes");

$proxy->inject('truncated_get', method => 'GET');
($rc, $code, $body) = proxy_get();
ok($rc == 18 && $code eq '200' && $body eq substr($small, 0, int(length($small) / 2)),
	'truncated_get: half of the body and a clean close (a partial file)')
  or diag("curl exit $rc, status $code, " . length($body) . " bytes");

$proxy->inject('wrong_etag', method => 'GET');
($rc, $code, $body, $head) = proxy_get();
my ($etag) = $head =~ /^ETag:\s*"?([^"\r\n]*)"?\r?$/mi;
ok($code eq '200' && $body eq $small && defined $etag && $etag ne md5_hex($small),
	"wrong_etag: the body, under an ETag that is not its MD5")
  or diag("status $code, ETag " . ($etag // 'none'));
($rc, $code, $body, $head) = proxy_get();
($etag) = $head =~ /^ETag:\s*"?([^"\r\n]*)"?\r?$/mi;
is($etag, md5_hex($small), '... and the next GET has the right one');

# a failed CompleteMultipartUpload answered 200 with an error body: the
# upload stays open and a second complete finishes it
($rc, $out, $err) = cs_aws($s3, 's3api', 'create-multipart-upload', '--bucket', $bucket,
	'--key', 'mp');
my $upload_id = $rc == 0 ? decode_json($out)->{UploadId} : '';
($rc, $out, $err) = cs_aws($s3, 's3api', 'upload-part', '--bucket', $bucket, '--key', 'mp',
	'--part-number', '1', '--upload-id', $upload_id, '--body', "$tmp/small");
my $part_etag = $rc == 0 ? decode_json($out)->{ETag} : '';
is($part_etag, '"' . md5_hex($small) . '"', 'a multipart upload with one part');
write_file("$tmp/complete.xml",
	"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>$part_etag</ETag></Part></CompleteMultipartUpload>");
$proxy->inject('complete_error', method => 'POST', path => qr/uploadId=/);
($rc, $out, $err) = cs_s3_curl($s3, '-X', 'POST', '--data-binary', "\@$tmp/complete.xml",
	'-w', '\n%{http_code}', "$purl/$bucket/mp?uploadId=$upload_id");
like($out, qr{<Error><Code>InternalError</Code>.*\n200$}s,
	'complete_error: CompleteMultipartUpload answered 200 with an <Error> body');
($rc, $out, $err) = cs_aws($s3, 's3api', 'head-object', '--bucket', $bucket, '--key', 'mp');
isnt($rc, 0, '... and the object does not exist');
write_file("$tmp/parts.json", qq({"Parts": [{"PartNumber": 1, "ETag": $part_etag}]}));
($rc, $out, $err) = cs_aws($s3, { endpoint => $purl }, 's3api', 'complete-multipart-upload',
	'--bucket', $bucket, '--key', 'mp', '--upload-id', $upload_id,
	'--multipart-upload', "file://$tmp/parts.json");
is($rc, 0, 'a second complete through the proxy finishes the upload') or diag($err);
ok((aws_get('mp') // '') eq $small, '... and the object is the part');

# refused connections between down() and up()
$proxy->down;
($rc, $code) = proxy_get();
is($rc, 7, 'down: the connection is refused');
$proxy->up;
($rc, $code, $body) = proxy_get();
ok($rc == 0 && $code eq '200' && $body eq $small, 'up: the proxy answers again');

is_deeply([ $proxy->pending ], [], 'every injected fault was used');
my %by_fault;
$by_fault{ $_->{fault} }++ for $proxy->injected;
is_deeply(\%by_fault,
	{
		(map { $_ => 1 } qw(error500 throttle429 expired_token reset stall_request
			  stall_after_headers reset_mid_body truncated_get wrong_etag complete_error)),
		slowdown => 3
	},
	"the proxy's log: each fault applied as many times as injected");
$proxy->stop;

done_testing();
