# S3FaultProxy.pm: an HTTP proxy in front of the test object store
# (scripts/object-store.sh) that injects the faults of issue 31 section 8,
# so that TAP tests can script outages of the bucket.
#
#   use S3FaultProxy;
#   my $proxy = S3FaultProxy->new(upstream => $s3->{endpoint});
#   # point the client at $proxy->url instead of the store, then:
#   $proxy->inject('slowdown', count => 2, method => 'PUT');
#   $proxy->inject('truncated_get', path => qr{/seg/});
#   $proxy->down;  ...  $proxy->up;        # connections refused meanwhile
#   my @seen = $proxy->injected;           # faults applied so far
#   $proxy->stop;                          # also at the end of the test
#
# The proxy is a process forked by new(), listening on a free port of
# 127.0.0.1 (or port => N); each client connection gets its own process
# and its own connection to the store, so keep-alive, pipelined uploads and
# a stalled transfer on one connection do not hold up the others.
# Requests pass through unchanged (the Host header included, so SigV4
# signatures made for the proxy's address stay valid: the store checks
# them against the Host it receives).
#
# Faults, each applied to one request (count => N: the next N matching
# requests; method => 'PUT' and path => regex narrow the match, the path
# being the request target with its query string):
#   slowdown            503 SlowDown (the request is not forwarded)
#   error500            500 InternalError (not forwarded)
#   throttle429         429 TooManyRequests (not forwarded)
#   expired_token       400 ExpiredToken (not forwarded)
#   not_found           404 NoSuchKey (not forwarded): an object deleted
#                       since the client listed it
#   complete_error      200 with an <Error> body, as S3 answers a failed
#                       CompleteMultipartUpload (not forwarded: the upload
#                       stays open, as it does on S3)
#   reset               the connection is reset (RST) once the request's
#                       headers are in, before any answer
#   stall_request       after the request's headers, nothing more is read
#                       and nothing is answered until the client gives up
#   stall_after_headers forwarded; the answer's status line and headers
#                       reach the client, its body never does
#   reset_mid_body      forwarded; half of the answer's body, then a reset
#   truncated_get       forwarded; half of the answer's body, then a clean
#                       close (a short read against Content-Length)
#   wrong_etag          forwarded; the answer's ETag is changed
#   error_in_body       forwarded; a 2xx answer's body (framed by
#                       Content-Length) is replaced by as many bytes
#                       that begin with an S3 <Error> document (SlowDown),
#                       as object data may happen to
#   (down/up)           between down() and up() the port is closed:
#                       connections are refused, and a request on a
#                       connection kept alive from before is not answered
# Rules live in a control file (one "FAULT COUNT METHOD PATH-REGEX" line
# each, "down" alone for the refusal), taken under flock by the connection
# processes, so a test may change them at any time.  Every request is
# logged (method, target, fault or "-") for requests() and injected().
#
# Run alone: perl t/S3FaultProxy.pm http://127.0.0.1:PORT [LISTEN-PORT]
# prints the port and the control directory, then serves until killed.

package S3FaultProxy;

use strict;
use warnings;

use Carp;
use Fcntl qw(:flock SEEK_SET);
use File::Temp ();
use IO::Select;
use IO::Socket::INET;
use POSIX ();
use Socket qw(SOL_SOCKET SO_LINGER IPPROTO_TCP TCP_NODELAY);
use Time::HiRes qw(usleep time);

# canned answers: status, reason, S3 error code, message
my %CANNED = (
	slowdown => [ 503, 'Slow Down', 'SlowDown', 'Please reduce your request rate.' ],
	error500 => [ 500, 'Internal Server Error', 'InternalError',
		'We encountered an internal error. Please try again.' ],
	throttle429 => [ 429, 'Too Many Requests', 'TooManyRequests',
		'Please reduce your request rate.' ],
	expired_token => [ 400, 'Bad Request', 'ExpiredToken',
		'The provided token has expired.' ],
	complete_error => [ 200, 'OK', 'InternalError',
		'We encountered an internal error. Please try again.' ],
	not_found => [ 404, 'Not Found', 'NoSuchKey',
		'The specified key does not exist.' ],);

my %FAULTS = map { $_ => 1 } (keys %CANNED,
	qw(reset stall_request stall_after_headers reset_mid_body truncated_get wrong_etag
	  error_in_body));

# How long a stalled connection is held at most (seconds).
my $STALL_MAX = 600;

############################################################################
# The test's side

# S3FaultProxy->new(upstream => 'http://127.0.0.1:PORT', port => N,
#   dir => DIR) -> proxy, already accepting connections.  dir holds the
# control and log files (default: a temporary directory).
sub new
{
	my ($class, %o) = @_;
	my ($host, $port) = ($o{upstream} // '') =~ m{^http://([^/:]+):(\d+)/?$}
	  or croak "upstream must be http://HOST:PORT, not '"
	  . ($o{upstream} // '') . "'";
	my $dir = $o{dir} // File::Temp::tempdir('s3proxy_XXXX', TMPDIR => 1, CLEANUP => 1);
	my $self = bless {
		upstream_host => $host,
		upstream_port => $port,
		dir => $dir,
		control => "$dir/control",
		log => "$dir/requests",
		state => "$dir/state",
		owner => $$,
	}, $class;
	for my $f ($self->{control}, $self->{log})
	{
		open(my $fh, '>', $f) or croak "create $f: $!";
		close($fh);
	}
	my $listener = $self->_listen($o{port} // 0) or croak "listen: $!";
	$self->{port} = $listener->sockport;
	my $pid = fork();
	croak "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		# no END blocks, no destructors of the test's objects in here
		eval { $self->_serve($listener) };
		POSIX::_exit(0);
	}
	close($listener);
	$self->{pid} = $pid;
	return $self;
}

# The URL to give clients instead of the store's.
sub url
{
	my ($self) = @_;
	return "http://127.0.0.1:$self->{port}";
}

sub port { return $_[0]->{port}; }

# inject(FAULT, count => N, method => 'PUT', path => qr/.../, range => 1):
# the next N (default 1) requests matching method (default any) and path
# (a regex or a string holding one; default any), and with range => 1 only
# those with a Range header, get FAULT.  Rules apply in the order
# they were added; a request takes at most one.
sub inject
{
	my ($self, $fault, %o) = @_;
	croak "unknown fault '$fault'" unless $FAULTS{$fault};
	my $count = $o{count} // 1;
	my $method = uc($o{method} // '*');
	$method .= '+range' if $o{range};
	my $path = defined $o{path} ? "$o{path}" : '.';
	croak "a path regex must not contain white space" if $path =~ /\s/;
	$self->_edit_control(sub { return (@_, "$fault $count $method $path"); });
	return;
}

# Remove every rule that has not been used up (down stays as it is).
sub clear
{
	my ($self) = @_;
	$self->_edit_control(sub { return grep { $_ eq 'down' } @_; });
	return;
}

# down(): close the port (new connections are refused; a connection
# opened before is closed, unanswered, at its next request) and return
# once it is closed.  up(): listen again on the same port, and
# return once it does.
sub down
{
	my ($self) = @_;
	$self->_edit_control(sub { return ((grep { $_ ne 'down' } @_), 'down'); });
	$self->_wait_state('down');
	return;
}

sub up
{
	my ($self) = @_;
	$self->_edit_control(sub { return grep { $_ ne 'down' } @_; });
	$self->_wait_state('up');
	return;
}

# requests() -> list of { method, target, fault } in arrival order
# (fault '-' when none was injected).
sub requests
{
	my ($self) = @_;
	open(my $fh, '<', $self->{log}) or croak "open $self->{log}: $!";
	my @r;
	while (my $line = <$fh>)
	{
		chomp $line;
		my ($method, $target, $fault) = split / /, $line, 3;
		push @r, { method => $method, target => $target, fault => $fault };
	}
	close($fh);
	return @r;
}

# injected() -> the requests that got a fault (as requests() gives them).
sub injected
{
	my ($self) = @_;
	return grep { $_->{fault} ne '-' } $self->requests;
}

# Rules not used up yet, as control-file lines.
sub pending
{
	my ($self) = @_;
	my @lines;
	$self->_edit_control(sub { @lines = @_; return @_; });
	return grep { $_ ne 'down' } @lines;
}

# Stop the proxy and every connection it serves.
sub stop
{
	my ($self) = @_;
	return unless $self->{pid} && $$ == $self->{owner};
	kill 'TERM', $self->{pid};
	waitpid($self->{pid}, 0);
	delete $self->{pid};
	return;
}

sub DESTROY
{
	my ($self) = @_;
	local ($?, $!, $@);
	$self->stop;
	return;
}

# Rewrite the control file under its lock: $edit gets the lines, returns
# the new ones.
sub _edit_control
{
	my ($self, $edit) = @_;
	open(my $fh, '+<', $self->{control}) or croak "open $self->{control}: $!";
	flock($fh, LOCK_EX) or croak "flock: $!";
	my @lines = grep { /\S/ } map { chomp; $_ } <$fh>;
	my @new = $edit->(@lines);
	seek($fh, 0, SEEK_SET);
	truncate($fh, 0);
	print $fh map { "$_\n" } @new;
	close($fh) or croak "write $self->{control}: $!";
	return;
}

sub _wait_state
{
	my ($self, $want) = @_;
	my $deadline = time() + 30;
	while (time() < $deadline)
	{
		if (open(my $fh, '<', $self->{state}))
		{
			my $s = <$fh> // '';
			close($fh);
			chomp $s;
			return if $s eq $want;
		}
		usleep(20_000);
	}
	croak "the proxy did not go $want within 30 s";
}

############################################################################
# The proxy's side

sub _listen
{
	my ($self, $port) = @_;
	return IO::Socket::INET->new(
		LocalAddr => '127.0.0.1',
		LocalPort => $port,
		Listen => 128,
		ReuseAddr => 1,
		Proto => 'tcp');
}

sub _set_state
{
	my ($self, $state) = @_;
	my $tmp = "$self->{state}.tmp";
	open(my $fh, '>', $tmp) or return;
	print $fh "$state\n";
	close($fh);
	rename($tmp, $self->{state});
	return;
}

sub _control_lines
{
	my ($self) = @_;
	open(my $fh, '<', $self->{control}) or return ();
	flock($fh, LOCK_SH);
	my @lines = map { chomp; $_ } <$fh>;
	close($fh);
	return @lines;
}

# The accept loop: one process per connection.  Ends on SIGTERM (killing
# the connection processes) or when the process that made the proxy is
# gone.
sub _serve
{
	my ($self, $listener) = @_;
	my %kids;
	my $parent = getppid();
	local $SIG{TERM} = sub {
		kill 'KILL', keys %kids;
		POSIX::_exit(0);
	};
	local $SIG{PIPE} = 'IGNORE';
	$self->_set_state('up');
	while (1)
	{
		while ((my $k = waitpid(-1, POSIX::WNOHANG())) > 0)
		{
			delete $kids{$k};
		}
		if (getppid() != $parent)
		{
			kill 'KILL', keys %kids;
			POSIX::_exit(0);
		}
		my $down = grep { $_ eq 'down' } $self->_control_lines;
		if ($down && $listener)
		{
			close($listener);
			undef $listener;
			$self->_set_state('down');
		}
		elsif (!$down && !$listener)
		{
			$listener = $self->_listen($self->{port});
			if (!$listener)
			{
				usleep(100_000);
				next;
			}
			$self->_set_state('up');
		}
		if (!$listener)
		{
			usleep(50_000);
			next;
		}
		next unless IO::Select->new($listener)->can_read(0.1);
		my $client = $listener->accept or next;
		my $pid = fork();
		if (!defined $pid)
		{
			close($client);
			next;
		}
		if ($pid == 0)
		{
			close($listener);
			$SIG{TERM} = 'DEFAULT';
			eval { $self->_connection($client) };
			POSIX::_exit(0);
		}
		$kids{$pid} = 1;
		close($client);
	}
}

# A buffered reader over a socket.
sub _reader
{
	my ($sock) = @_;
	return { sock => $sock, buf => '', eof => 0 };
}

# more bytes into the buffer; false at EOF or on an error
sub _fill
{
	my ($r) = @_;
	return 0 if $r->{eof};
	my $n = sysread($r->{sock}, my $chunk, 65536);
	if (!$n)
	{
		$r->{eof} = 1;
		return 0;
	}
	$r->{buf} .= $chunk;
	return 1;
}

# a message head (up to the blank line), or undef at EOF
sub _read_head
{
	my ($r) = @_;
	while ((my $i = index($r->{buf}, "\r\n\r\n")) < 0)
	{
		return undef if length($r->{buf}) > 65536 || !_fill($r);
	}
	my $i = index($r->{buf}, "\r\n\r\n");
	my $head = substr($r->{buf}, 0, $i + 4, '');
	my ($first, @lines) = split /\r\n/, substr($head, 0, $i);
	my %h;
	for (@lines)
	{
		my ($k, $v) = /^([^:]+):\s*(.*?)\s*$/ or next;
		$h{ lc $k } = $v;
	}
	return { first => $first, headers => \%h, raw => $head };
}

# exactly $n bytes (fewer at EOF)
sub _read_n
{
	my ($r, $n) = @_;
	while (length($r->{buf}) < $n)
	{
		last unless _fill($r);
	}
	return substr($r->{buf}, 0, $n, '');
}

# one line with its CRLF
sub _read_line
{
	my ($r) = @_;
	while (index($r->{buf}, "\r\n") < 0)
	{
		return substr($r->{buf}, 0, length($r->{buf}), '') unless _fill($r);
	}
	return substr($r->{buf}, 0, index($r->{buf}, "\r\n") + 2, '');
}

# Copy a message body from reader $r to socket $out (undef: discard), as
# its head frames it: Content-Length, chunked, or (for an answer with
# neither) until EOF.  $limit, if given, stops after that many raw bytes
# and returns 'cut'.  Returns 'ok', 'eof' (ended early) or 'cut'.
sub _copy_body
{
	my ($r, $out, $head, %o) = @_;
	my $h = $head->{headers};
	my $left = $o{limit};
	my $put = sub {
		my ($data) = @_;
		if (defined $left)
		{
			$data = substr($data, 0, $left) if length($data) > $left;
			$left -= length($data);
		}
		_write($out, $data) if defined $out && length($data);
		return !defined $left || $left > 0;
	};
	if (($h->{'transfer-encoding'} // '') =~ /chunked/i)
	{
		while (1)
		{
			my $line = _read_line($r);
			return 'eof' if $line !~ /\r\n$/;
			return 'cut' unless $put->($line);
			my $size = hex(($line =~ /^([0-9a-fA-F]+)/)[0] // 0);
			if ($size == 0)
			{
				# trailers up to the blank line
				while (1)
				{
					my $t = _read_line($r);
					return 'eof' if $t !~ /\r\n$/;
					return 'cut' unless $put->($t);
					return 'ok' if $t eq "\r\n";
				}
			}
			my $data = _read_n($r, $size + 2);
			return 'cut' unless $put->($data);
			return 'eof' if length($data) < $size + 2;
		}
	}
	if (defined $h->{'content-length'})
	{
		my $n = $h->{'content-length'};
		while ($n > 0)
		{
			if ($r->{buf} eq '' && !_fill($r))
			{
				return 'eof';
			}
			my $take = length($r->{buf}) < $n ? length($r->{buf}) : $n;
			my $data = substr($r->{buf}, 0, $take, '');
			$n -= $take;
			return 'cut' unless $put->($data);
		}
		return 'ok';
	}
	return 'ok' unless $o{until_eof};
	while (1)
	{
		if ($r->{buf} eq '' && !_fill($r))
		{
			return 'ok';
		}
		my $data = substr($r->{buf}, 0, length($r->{buf}), '');
		return 'cut' unless $put->($data);
	}
}

sub _write
{
	my ($sock, $data) = @_;
	while (length $data)
	{
		my $n = syswrite($sock, $data);
		die "write: $!" unless defined $n;
		substr($data, 0, $n, '');
	}
	return;
}

# Close with a reset (SO_LINGER 0).
sub _reset
{
	my ($sock) = @_;
	setsockopt($sock, SOL_SOCKET, SO_LINGER, pack('ii', 1, 0));
	close($sock);
	return;
}

# Hold the connection, reading nothing, until the client closes it.
sub _stall
{
	my ($sock) = @_;
	my $deadline = time() + $STALL_MAX;
	my $sel = IO::Select->new($sock);
	while (time() < $deadline)
	{
		# a readable socket here is data we ignore, or the client's EOF:
		# peek at it without consuming it
		next unless $sel->can_read(1);
		my $n = recv($sock, my $peek, 1, Socket::MSG_PEEK());
		last if !defined $n || $peek eq '';
		usleep(200_000);
	}
	close($sock);
	return;
}

# The fault for this request: the first rule that matches, its count
# taken down by one (under the control file's lock).
sub _take_fault
{
	my ($self, $method, $target, $has_range) = @_;
	open(my $fh, '+<', $self->{control}) or return '-';
	flock($fh, LOCK_EX);
	my @lines = grep { /\S/ } map { chomp; $_ } <$fh>;
	my $fault = '-';
	for my $l (@lines)
	{
		my ($f, $count, $m, $path) = split / /, $l, 4;
		next unless defined $path && $count > 0;
		my $want = $m;
		next if $want =~ s/\+range$// && !$has_range;
		next unless $want eq '*' || $want eq $method;
		next unless $target =~ /$path/;
		$fault = $f;
		$count--;
		$l = $count > 0 ? "$f $count $m $path" : '';
		last;
	}
	seek($fh, 0, SEEK_SET);
	truncate($fh, 0);
	print $fh map { "$_\n" } grep { $_ ne '' } @lines;
	close($fh);
	return $fault;
}

sub _log
{
	my ($self, $method, $target, $fault) = @_;
	open(my $fh, '>>', $self->{log}) or return;
	flock($fh, LOCK_EX);
	print $fh "$method $target $fault\n";
	close($fh);
	return;
}

sub _canned
{
	my ($fault, $target, $keep_alive) = @_;
	my ($status, $reason, $code, $message) = @{ $CANNED{$fault} };
	(my $resource = $target) =~ s/\?.*//;
	my $body = qq(<?xml version="1.0" encoding="UTF-8"?>\n)
	  . "<Error><Code>$code</Code><Message>$message</Message>"
	  . "<Resource>$resource</Resource>"
	  . "<RequestId>s3faultproxy-$$</RequestId></Error>";
	return "HTTP/1.1 $status $reason\r\n"
	  . "Content-Type: application/xml\r\n"
	  . "Content-Length: " . length($body) . "\r\n"
	  . "x-amz-request-id: s3faultproxy-$$\r\n"
	  . ($status == 503 ? "Retry-After: 1\r\n" : '')
	  . "Connection: " . ($keep_alive ? 'keep-alive' : 'close') . "\r\n"
	  . "\r\n" . $body;
}

# One client connection: requests one after the other, each forwarded on
# this connection's own connection to the store, or answered by a fault.
sub _connection
{
	my ($self, $client) = @_;
	setsockopt($client, IPPROTO_TCP, TCP_NODELAY, 1);
	my $cr = _reader($client);
	my ($up, $ur);
	while (1)
	{
		my $req = _read_head($cr) or last;
		# down: a request on a connection opened before gets no answer
		last if grep { $_ eq 'down' } $self->_control_lines;
		my ($method, $target) = split / /, $req->{first};
		$method //= '';
		$target //= '';
		my $fault = $self->_take_fault($method, $target,
			defined $req->{headers}{range});
		$self->_log($method, $target, $fault);
		my $expect = ($req->{headers}{expect} // '') =~ /100-continue/i;

		if ($CANNED{$fault})
		{
			# with Expect: 100-continue the body may never come: answer
			# and close; else read the body, answer and go on
			if ($expect)
			{
				_write($client, _canned($fault, $target, 0));
				last;
			}
			last if _copy_body($cr, undef, $req) ne 'ok';
			_write($client, _canned($fault, $target, 1));
			next;
		}
		if ($fault eq 'reset')
		{
			_reset($client);
			return;
		}
		if ($fault eq 'stall_request')
		{
			_stall($client);
			return;
		}

		if (!$up)
		{
			$up = IO::Socket::INET->new(
				PeerAddr => $self->{upstream_host},
				PeerPort => $self->{upstream_port},
				Proto => 'tcp')
			  or last;
			setsockopt($up, IPPROTO_TCP, TCP_NODELAY, 1);
			$ur = _reader($up);
		}
		_write($up, $req->{raw});
		my $body_sent = 0;
		if (!$expect)
		{
			last if _copy_body($cr, $up, $req) ne 'ok';
			$body_sent = 1;
		}
		my $resp;
		while (1)
		{
			$resp = _read_head($ur) or last;
			my ($status) = $resp->{first} =~ /^HTTP\/\S+ (\d+)/;
			last unless defined $status && $status == 100;
			_write($client, $resp->{raw});
			if (!$body_sent)
			{
				last if _copy_body($cr, $up, $req) ne 'ok';
				$body_sent = 1;
			}
		}
		last unless $resp;
		my ($status) = $resp->{first} =~ /^HTTP\/\S+ (\d+)/;
		$status //= 0;
		my $has_body = $method ne 'HEAD' && $status != 204 && $status != 304;
		my $close = ($resp->{headers}{connection} // '') =~ /close/i
		  || ($has_body
			&& !defined $resp->{headers}{'content-length'}
			&& ($resp->{headers}{'transfer-encoding'} // '') !~ /chunked/i);
		# the client sent a body the store did not ask for
		$close ||= $expect && !$body_sent;

		if ($fault eq 'wrong_etag')
		{
			$resp->{raw} =~ s{^(ETag:\s*"?)([0-9a-fA-F])}
				{$1 . ($2 eq '0' ? '1' : '0')}mie;
		}
		_write($client, $resp->{raw});
		if ($fault eq 'stall_after_headers')
		{
			_stall($client);
			return;
		}
		if ($fault eq 'reset_mid_body' || $fault eq 'truncated_get')
		{
			my $len = $resp->{headers}{'content-length'} // 2;
			_copy_body($ur, $client, $resp, until_eof => 1, limit => int($len / 2))
			  if $has_body;
			if ($fault eq 'reset_mid_body')
			{
				_reset($client);
			}
			else
			{
				shutdown($client, 1);
				close($client);
			}
			return;
		}
		if ($fault eq 'error_in_body' && $has_body
			&& defined $resp->{headers}{'content-length'})
		{
			my $len = $resp->{headers}{'content-length'};
			last if _copy_body($ur, undef, $resp) ne 'ok';
			my $doc = '<Error><Code>SlowDown</Code>'
			  . '<Message>Please reduce your request rate.</Message></Error>';
			_write($client, substr($doc . (' ' x $len), 0, $len));
		}
		elsif ($has_body)
		{
			last if _copy_body($ur, $client, $resp, until_eof => 1) ne 'ok';
		}
		last if $close;
	}
	close($up) if $up;
	close($client);
	return;
}

# perl t/S3FaultProxy.pm http://127.0.0.1:PORT [LISTEN-PORT]
sub _main
{
	my ($upstream, $port) = @_;
	die "usage: perl S3FaultProxy.pm http://HOST:PORT [LISTEN-PORT]\n"
	  unless defined $upstream;
	my $dir = File::Temp::tempdir('s3proxy_XXXX', TMPDIR => 1);
	my $proxy = S3FaultProxy->new(upstream => $upstream, port => $port, dir => $dir);
	$| = 1;
	print "listening on ", $proxy->url, "; control file $proxy->{control}, log $proxy->{log}\n";
	local $SIG{TERM} = local $SIG{INT} = sub { $proxy->stop; exit 0; };
	waitpid($proxy->{pid}, 0);
	return;
}

_main(@ARGV) unless caller;

1;
