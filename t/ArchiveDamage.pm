
# ArchiveDamage.pm: tools to damage a changestream archive on purpose, and
# to observe what the readers make of it (issues 7 and 8,
# notes/damage-contract.md).
#
# The format is parsed from docs/FORMAT.md (sections 5-8), not from the C
# code: a segment header of 64 bytes (format 1) or 128 (formats 2 and 3:
# the header size is at offset 12), then frames "CSFR" | u32 body length |
# u32 CRC-32C(length field || body) | body, the body made of entries:
# format 1: kind u8 | u32 n | u64 dataStart | u64 walEnd | i64 sendTime |
# n bytes; formats 2, 3: varint H | heads (kind u8 | varint n, per entry) |
# varint F | fields (per entry) | data (every entry's n bytes) (section 8);
# format 3 adds kinds 'b' and 'c', a BEGIN and a COMMIT stored as fields
# with n = 0 (section 8.3).  Fixed-width integers are big-endian.
#
# - files: ad_gen_dir, ad_segments, ad_newest_raw, ad_load, ad_store;
# - parsing: ad_parse_segment (header and valid frames), ad_entries,
#   ad_body (entries back into a body), ad_sections and ad_join_sections
#   (a format 2 or 3 body's three sections, raw), ad_crc32c, ad_frame
#   (build a valid frame around a body);
# - damage: ad_flip_bit, ad_flip_in_frame, ad_set_frame_length,
#   ad_truncate, ad_append_torn_frame, ad_sha256_tree;
# - observation: ad_sql (SQLSTATE, message and time of one statement, under
#   statement_timeout, optionally as another role), ad_decode (run
#   scripts/cs_decode.py), ad_backend_fds_rss (fd count and anonymous RSS of
#   the backend running the statement, read from /proc/self);
# - setup: ad_new_archive (a node archiving pgbench tables, with several
#   segments, the sealed ones compressed, and a newest raw segment of
#   several frames).

package ArchiveDamage;

use strict;
use warnings;

use Carp;
use Digest::SHA;
use Exporter 'import';
use File::Find ();
use IO::Compress::Gzip qw(gzip $GzipError);
use IO::Uncompress::Gunzip qw(gunzip $GunzipError);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ChangestreamTest;

our @EXPORT = qw(
  ad_gen_dir ad_segments ad_newest_raw ad_load ad_store ad_parse_segment
  ad_entries ad_crc32c ad_frame ad_flip_bit ad_flip_in_frame
  ad_set_frame_length ad_truncate ad_append_torn_frame ad_sha256_tree
  ad_sql ad_decode ad_backend_fds_rss ad_new_archive ad_small_txns
  ad_newest_generation ad_gens_count ad_ensure_frames ad_body
  ad_copy_generation ad_fifo_unblock ad_session ad_session_query
  ad_session_close ad_sections ad_join_sections ad_field_count);

use constant {
	HEADER_SIZE     => 64,
	FRAME_HEADER    => 12,
	ENTRY_HEADER    => 29,
	MAX_FRAME_BODY  => 1024 * 1024 * 1024,
};

############################################################################
# CRC-32C (docs/FORMAT.md section 2): reflected 0x82F63B78, init and final
# XOR 0xFFFFFFFF.

my @CRC_TABLE;
for my $i (0 .. 255)
{
	my $c = $i;
	for (1 .. 8)
	{
		$c = ($c & 1) ? (($c >> 1) ^ 0x82F63B78) : ($c >> 1);
	}
	$CRC_TABLE[$i] = $c;
}

sub ad_crc32c
{
	my $crc = 0xFFFFFFFF;
	for my $s (@_)
	{
		for my $b (unpack('C*', $s))
		{
			$crc = $CRC_TABLE[ ($crc ^ $b) & 0xFF ] ^ ($crc >> 8);
		}
	}
	return $crc ^ 0xFFFFFFFF;
}

die "CRC-32C check value" unless ad_crc32c('123456789') == 0xE3069283;

############################################################################
# Files

sub ad_gen_dir
{
	my ($node, $gen) = @_;
	return cs_archive_dir($node) . "/generations/$gen";
}

# ad_segments($node, $gen) -> list of { index, path, gz } in index order,
# the .wal.gz preferred over a raw twin (FORMAT.md section 11.1).
sub ad_segments
{
	my ($node, $gen) = @_;
	my $dir = ad_gen_dir($node, $gen) . '/wal';
	opendir(my $dh, $dir) or croak "opendir $dir: $!";
	my %by;
	for my $f (readdir $dh)
	{
		next unless $f =~ /^([0-9a-f]{16})\.wal(\.gz)?$/;
		my $idx = hex($1);
		next if $by{$idx} && !$2;
		$by{$idx} = { index => $idx, path => "$dir/$f", gz => $2 ? 1 : 0 };
	}
	closedir $dh;
	return map { $by{$_} } sort { $a <=> $b } keys %by;
}

sub ad_newest_raw
{
	my ($node, $gen) = @_;
	my @s = ad_segments($node, $gen);
	croak "no segment in generation $gen" unless @s;
	croak "newest segment of $gen is not raw: $s[-1]{path}" if $s[-1]{gz};
	return $s[-1]{path};
}

# Uncompressed bytes of a segment (raw or gzip).
sub ad_load
{
	my ($path) = @_;
	open(my $fh, '<:raw', $path) or croak "open $path: $!";
	local $/;
	my $raw = <$fh> // '';
	close $fh;
	return $raw unless $path =~ /\.gz$/;
	my $out;
	gunzip(\$raw => \$out, MultiStream => 1, Transparent => 1)
	  or croak "gunzip $path: $GunzipError";
	return $out;
}

# Write bytes back (gzip-compressed when the name ends in .gz).
sub ad_store
{
	my ($path, $bytes) = @_;
	if ($path =~ /\.gz$/)
	{
		my $z;
		gzip(\$bytes => \$z, Minimal => 1) or croak "gzip: $GzipError";
		$bytes = $z;
	}
	open(my $fh, '>:raw', $path) or croak "open $path: $!";
	print $fh $bytes;
	close $fh or croak "close $path: $!";
	return;
}

############################################################################
# Parsing (FORMAT.md sections 6-8)

# ad_parse_segment($bytes) -> { header => {...}, frames => [ { offset, length,
# body } ... ], end => offset after the last valid frame }
sub ad_parse_segment
{
	my ($buf) = @_;
	my %seg;
	if (length($buf) >= HEADER_SIZE)
	{
		my ($magic, $version, $hsize, $sysid, $gen, $index, $start, $tli) =
		  unpack('a8 N N Q> Q> Q> Q> N', $buf);
		$seg{header} = {
			magic => $magic, version => $version, header_size => $hsize,
			system_identifier => $sysid, generation => $gen,
			index => $index, start_lsn => $start, timeline => $tli };
	}
	my @frames;
	my $off = HEADER_SIZE;
	$off = $seg{header}{header_size}
	  if $seg{header} && $seg{header}{header_size} == 128;
	while ($off + FRAME_HEADER <= length($buf))
	{
		my ($magic, $len, $crc) = unpack('a4 N N', substr($buf, $off, FRAME_HEADER));
		last if $magic ne 'CSFR' || $len == 0 || $len > MAX_FRAME_BODY;
		last if $off + FRAME_HEADER + $len > length($buf);
		my $body = substr($buf, $off + FRAME_HEADER, $len);
		last if ad_crc32c(substr($buf, $off + 4, 4), $body) != $crc;
		push @frames, { offset => $off, length => $len, body => $body };
		$off += FRAME_HEADER + $len;
	}
	$seg{frames} = \@frames;
	$seg{end}    = $off;
	return \%seg;
}

sub _varint
{
	my ($v) = @_;
	my $s = '';
	while ($v >= 128)
	{
		$s .= chr(($v & 127) | 128);
		$v >>= 7;
	}
	return $s . chr($v);
}
sub _svarint { my ($v) = @_; return _varint($v >= 0 ? 2 * $v : -2 * $v - 1); }

# a difference taken modulo 2^32 as an int32 (a 'b' entry's xid)
sub _int32
{
	my ($v) = @_;
	$v &= 0xFFFFFFFF;
	return $v >= 2**31 ? $v - 2**32 : $v;
}

# How many varints an entry of each kind has in the fields section (format
# 3; format 2 has no 'b' or 'c'): LSN, walEnd, time, and for 'b' final
# LSN, time, xid, for 'c' flags, commit LSN, end LSN, time.
my %FIELD_COUNT = (w => 1, W => 3, k => 2, s => 0, b => 4, c => 7);
sub ad_field_count { my ($kind) = @_; return $FIELD_COUNT{$kind} // 0; }

# ad_sections($body) -> { heads => [ [kind, n, fields string] ... ],
# data => string }: a format 3 body's sections, each entry's fields cut
# out by counting varints (ad_field_count); undef when they do not parse.
sub ad_sections
{
	my ($body) = @_;
	my $pos = 0;
	my $h = _get_varint($body, \$pos, length($body));
	return undef if !defined $h || $h > length($body) - $pos;
	my $hend = $pos + $h;
	my $fpos = $hend;
	my $f = _get_varint($body, \$fpos, length($body));
	return undef if !defined $f || $f > length($body) - $fpos;
	my $fend = $fpos + $f;
	my @heads;
	while ($pos < $hend)
	{
		my $kind = substr($body, $pos++, 1);
		my $n = _get_varint($body, \$pos, $hend);
		return undef unless defined $n;
		my $start = $fpos;
		for (1 .. ad_field_count($kind))
		{
			return undef unless defined _get_varint($body, \$fpos, $fend);
		}
		push @heads, [ $kind, $n, substr($body, $start, $fpos - $start) ];
	}
	return { heads => \@heads, data => substr($body, $fend) };
}

# ad_join_sections($sections): the body of ad_sections' result, as it is.
sub ad_join_sections
{
	my ($s) = @_;
	my $heads  = join('', map { $_->[0] . _varint($_->[1]) } @{ $s->{heads} });
	my $fields = join('', map { $_->[2] } @{ $s->{heads} });
	return _varint(length($heads)) . $heads . _varint(length($fields)) .
	  $fields . $s->{data};
}

# read a varint at $$pos of $s (below $end); undef when it runs past $end
sub _get_varint
{
	my ($s, $pos, $end) = @_;
	my ($v, $shift) = (0, 0);
	while ($$pos < $end && $shift < 64)
	{
		my $b = ord(substr($s, $$pos++, 1));
		$v |= ($b & 127) << $shift;
		return $v unless $b & 128;
		$shift += 7;
	}
	return undef;
}
sub _get_svarint
{
	my $u = _get_varint(@_);
	return undef unless defined $u;
	return ($u & 1) ? -(($u >> 1) + 1) : ($u >> 1);
}

# ad_entries($body, $version) -> list of { kind, data_start, wal_end,
# send_time, data } (formats 2, 3: 'W' entries as 'w'; what is not stored,
# 0; format 3: 'b' and 'c' as 'w' with their BEGIN or COMMIT rebuilt)
sub ad_entries
{
	my ($body, $version) = @_;
	$version //= 3;
	my @e;
	my $pos = 0;
	if ($version == 1)
	{
		while ($pos + ENTRY_HEADER <= length($body))
		{
			my ($kind, $n, $ds, $we, $st) =
			  unpack('a1 N Q> Q> q>', substr($body, $pos, ENTRY_HEADER));
			last if $n > length($body) - $pos - ENTRY_HEADER;
			push @e, {
				kind => $kind, data_start => $ds, wal_end => $we,
				send_time => $st, data => substr($body, $pos + ENTRY_HEADER, $n) };
			$pos += ENTRY_HEADER + $n;
		}
		return @e;
	}
	# formats 2, 3: the three sections (heads, fields, data)
	my $h = _get_varint($body, \$pos, length($body));
	return @e if !defined $h || $h > length($body) - $pos;
	my $hend = $pos + $h;
	my $fpos = $hend;
	my $f = _get_varint($body, \$fpos, length($body));
	return @e if !defined $f || $f > length($body) - $fpos;
	my $fend = $fpos + $f;
	my $dpos = $fend;
	my ($plsn, $ptime, $pfinal, $pbtime, $pxid) = (0, 0, 0, 0, 0);
	while ($pos < $hend)
	{
		my $stored = substr($body, $pos++, 1);
		my $n = _get_varint($body, \$pos, $hend);
		last if !defined $n || $n > length($body) - $dpos;
		my ($ds, $we, $st) = (0, 0, 0);
		my $kind = $stored;
		$kind = { b => 'w', c => 'W' }->{$stored} // $stored if $version >= 3;
		if ($kind eq 'w' || $kind eq 'W')
		{
			$ds = $we = $plsn + (_get_svarint($body, \$fpos, $fend) // 0);
			$plsn = $ds;
		}
		$we = $ds + (_get_svarint($body, \$fpos, $fend) // 0) if $kind eq 'W';
		if ($kind eq 'k')
		{
			$we = $plsn + (_get_svarint($body, \$fpos, $fend) // 0);
			$plsn = $we;
		}
		if ($kind eq 'W' || $kind eq 'k')
		{
			$st = $ptime + (_get_svarint($body, \$fpos, $fend) // 0);
			$ptime = $st;
		}
		my $data = substr($body, $dpos, $n);
		if ($kind ne $stored && $stored eq 'b')
		{
			$pfinal = $ds + (_get_svarint($body, \$fpos, $fend) // 0);
			$pbtime += _get_svarint($body, \$fpos, $fend) // 0;
			$pxid = ($pxid + (_get_svarint($body, \$fpos, $fend) // 0)) & 0xFFFFFFFF;
			$data = pack('a1 Q> q> N', 'B', $pfinal, $pbtime, $pxid);
		}
		elsif ($kind ne $stored && $stored eq 'c')
		{
			my $flags = _get_varint($body, \$fpos, $fend) // 0;
			my $cl = $pfinal + (_get_svarint($body, \$fpos, $fend) // 0);
			my $el = $ds + (_get_svarint($body, \$fpos, $fend) // 0);
			my $t = $pbtime + (_get_svarint($body, \$fpos, $fend) // 0);
			$data = pack('a1 C Q> Q> q>', 'C', $flags & 255, $cl, $el, $t);
		}
		push @e, {
			kind => ($kind eq 'W' ? 'w' : $kind), data_start => $ds,
			wal_end => $we, send_time => $st, data => $data };
		$dpos += $n;
	}
	return @e;
}

# ad_body($version, @entries): encode entries back into a body.
sub ad_body
{
	my ($version, @e) = @_;
	if ($version == 1)
	{
		return join('',
			map { pack('a1 N Q> Q> q>', $_->{kind}, length($_->{data}),
					$_->{data_start}, $_->{wal_end}, $_->{send_time}) . $_->{data} } @e);
	}
	my ($plsn, $ptime, $heads, $fields, $data) = (0, 0, '', '', '');
	my ($pfinal, $pbtime, $pxid) = (0, 0, 0);
	for my $x (@e)
	{
		my ($k, $d) = ($x->{kind}, $x->{data});
		$k = 'W' if $k eq 'w' && ($x->{wal_end} != $x->{data_start}
			|| substr($d, 0, 1) eq 'C'
			|| (substr($d, 0, 1) eq 'M' && length($d) > 1 && !(ord(substr($d, 1, 1)) & 1)));
		my $f = '';
		if ($k eq 'w' || $k eq 'W')
		{
			$f .= _svarint($x->{data_start} - $plsn);
			$plsn = $x->{data_start};
		}
		$f .= _svarint($x->{wal_end} - $x->{data_start}) if $k eq 'W';
		if ($k eq 'k')
		{
			$f .= _svarint($x->{wal_end} - $plsn);
			$plsn = $x->{wal_end};
		}
		if ($k eq 'W' || $k eq 'k')
		{
			$f .= _svarint($x->{send_time} - $ptime);
			$ptime = $x->{send_time};
		}
		# format 3 (section 8.3): a 21-byte BEGIN that is 'w' becomes 'b',
		# a 26-byte COMMIT that is 'W' becomes 'c', with no data
		if ($version >= 3 && $k eq 'w' && length($d) == 21 && substr($d, 0, 1) eq 'B')
		{
			my ($final, $t, $xid) = unpack('x Q> q> N', $d);
			$f .= _svarint($final - $x->{data_start}) . _svarint($t - $pbtime)
			  . _svarint(_int32($xid - $pxid));
			($pfinal, $pbtime, $pxid) = ($final, $t, $xid);
			($k, $d) = ('b', '');
		}
		elsif ($version >= 3 && $k eq 'W' && length($d) == 26 && substr($d, 0, 1) eq 'C')
		{
			my ($flags, $cl, $el, $t) = unpack('x C Q> Q> q>', $d);
			$f .= _varint($flags) . _svarint($cl - $pfinal)
			  . _svarint($el - $x->{data_start}) . _svarint($t - $pbtime);
			($k, $d) = ('c', '');
		}
		$heads  .= $k . _varint(length($d));
		$fields .= $f;
		$data   .= $d;
	}
	return _varint(length($heads)) . $heads . _varint(length($fields)) .
	  $fields . $data;
}

# A valid frame (magic, length, CRC) around a body.
sub ad_frame
{
	my ($body) = @_;
	my $len = pack('N', length($body));
	return 'CSFR' . $len . pack('N', ad_crc32c($len, $body)) . $body;
}

############################################################################
# Damage

# Flip bit $bit of the byte at $offset (uncompressed offset for .gz files).
sub ad_flip_bit
{
	my ($path, $offset, $bit) = @_;
	$bit //= 0;
	my $buf = ad_load($path);
	croak "offset $offset past the end of $path" if $offset >= length($buf);
	substr($buf, $offset, 1) = chr(ord(substr($buf, $offset, 1)) ^ (1 << $bit));
	ad_store($path, $buf);
	return;
}

# Flip one bit in the middle of the body of frame $k (negative: from the
# end); returns (frame offset, number of frames).
sub ad_flip_in_frame
{
	my ($path, $k) = @_;
	my $seg = ad_parse_segment(ad_load($path));
	my @f   = @{ $seg->{frames} };
	my $fr  = $f[$k] or croak "no frame $k in $path (" . scalar(@f) . " frames)";
	ad_flip_bit($path, $fr->{offset} + FRAME_HEADER + int($fr->{length} / 2), 3);
	return ($fr->{offset}, scalar @f);
}

# Overwrite frame $k's body length field (the CRC is left as it was).
sub ad_set_frame_length
{
	my ($path, $k, $len) = @_;
	my $buf = ad_load($path);
	my $fr  = ad_parse_segment($buf)->{frames}[$k]
	  or croak "no frame $k in $path";
	substr($buf, $fr->{offset} + 4, 4) = pack('N', $len);
	ad_store($path, $buf);
	return $fr->{offset};
}

sub ad_truncate
{
	my ($path, $size) = @_;
	truncate($path, $size) or croak "truncate $path: $!";
	return;
}

# A crash in the middle of writing a frame that was never acknowledged:
# append the first $keep bytes (default: half) of a valid frame holding a
# copy of the last frame's entries.  Returns (original size, new size).
sub ad_append_torn_frame
{
	my ($path, $keep) = @_;
	my $buf   = ad_load($path);
	my $seg   = ad_parse_segment($buf);
	my $last  = $seg->{frames}[-1] or croak "no frame in $path";
	my $frame = ad_frame($last->{body});
	$keep //= FRAME_HEADER + int(length($last->{body}) / 2);
	my $size = length($buf);
	open(my $fh, '>>:raw', $path) or croak "open $path: $!";
	print $fh substr($frame, 0, $keep);
	close $fh or croak "close $path: $!";
	return ($size, $size + $keep);
}

# ad_sha256_tree($dir) -> { relative path => sha256 hex or 'dir' }
sub ad_sha256_tree
{
	my ($dir) = @_;
	my %h;
	File::Find::find(
		{
			no_chdir => 1,
			wanted   => sub {
				my $rel = substr($File::Find::name, length($dir));
				if (-d $File::Find::name) { $h{$rel} = 'dir'; return; }
				return unless -f $File::Find::name;
				$h{$rel} = Digest::SHA->new(256)->addfile($File::Find::name)->hexdigest;
			}
		},
		$dir);
	return \%h;
}

# ad_copy_generation($node, $gen, $name) -> directory of the copy
# A copy of generation $gen under the name $name (16 hex digits, smaller
# than the real names so that the archiver never takes it for its newest
# generation): the identity file's generation and every segment header's
# generation field (with the header CRC) rewritten, so the copy is as valid
# as the original.  Copy only while the server is stopped.
sub ad_copy_generation
{
	my ($node, $gen, $name) = @_;
	my $src = ad_gen_dir($node, $gen);
	my $dst = ad_gen_dir($node, $name);
	my $rc  = system('cp', '-a', $src, $dst);
	croak "cp -a $src $dst failed" if $rc != 0;
	my $ident = "$dst/generation";
	my $text  = ad_load($ident);
	$text =~ s/^generation = [0-9a-f]{16}$/generation = $name/m;
	ad_store($ident, $text);
	for my $s (ad_segments($node, $name))
	{
		my $buf = ad_load($s->{path});
		substr($buf, 24, 8) = pack('Q>', hex($name));
		substr($buf, 60, 4) = pack('N', ad_crc32c(substr($buf, 0, 60)));
		ad_store($s->{path}, $buf);
	}
	return $dst;
}

# Release a backend blocked in open(2) on a FIFO (as a damaged reader is
# on an unfixed build): open the write end without blocking, then close.
sub ad_fifo_unblock
{
	my ($fifo) = @_;
	require Fcntl;
	for (1 .. 3)
	{
		if (sysopen(my $fh, $fifo, Fcntl::O_WRONLY() | Fcntl::O_NONBLOCK()))
		{
			close $fh;
		}
		usleep(50_000);
	}
	return;
}

############################################################################
# Observation

# ad_sql($node, $sql, %o) -> { ok, out, err, sqlstate, message, secs, timed_out }
#   timeout => statement_timeout in seconds (default 5); the psql process
#     itself is given timeout + 20 s; role => SET ROLE first; db.
# The error text is psql's with VERBOSITY verbose: "ERROR:  XX001: ...",
# so that the SQLSTATE is visible.
sub ad_sql
{
	my ($node, $sql, %o) = @_;
	my $t    = $o{timeout} // 5;
	my $ct   = $o{client_timeout} // ($t + 20);
	my $pre  = "\\set VERBOSITY verbose\nSET statement_timeout = '${t}s';\n";
	$pre .= "SET ROLE $o{role};\n" if $o{role};
	my ($out, $err, $timed_out) = ('', '', 0);
	my $t0 = time();
	my $rc = $node->psql($o{db} // 'postgres', $pre . $sql,
		stdout => \$out, stderr => \$err,
		timeout => $ct, timed_out => \$timed_out, on_error_stop => 0);
	my %r = (out => $out // '', err => $err // '', secs => time() - $t0,
		timed_out => $timed_out ? 1 : 0);
	$r{ok} = ($rc == 0 && $r{err} !~ /ERROR/) ? 1 : 0;
	if ($r{err} =~ /(?:ERROR|FATAL|PANIC):\s+([0-9A-Z]{5}):\s+(.*)/)
	{
		$r{sqlstate} = $1;
		$r{message}  = $2;
	}
	return \%r;
}

# ad_decode($path) -> { rc, out, err }: scripts/cs_decode.py --summary
sub ad_decode
{
	my ($path, @args) = @_;
	my ($out, $err) = ('', '');
	my $script = -f 'scripts/cs_decode.py'
	  ? 'scripts/cs_decode.py'
	  : "$ENV{TESTDIR}/scripts/cs_decode.py";
	IPC::Run::run([ 'python3', $script, '--summary', @args, $path ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(300));
	return { rc => $? >> 8, out => $out, err => $err };
}

# SQL that returns "fds|rss_anon_kB" of the backend running it (superuser:
# pg_ls_dir and pg_read_file outside the data directory).
our $FDS_RSS_SQL =
  "SELECT (SELECT count(*) FROM pg_ls_dir('/proc/self/fd')) || '|' || "
  . "(regexp_match(pg_read_file('/proc/self/status'), 'RssAnon:\\s+(\\d+)'))[1];";

sub ad_backend_fds_rss
{
	my ($out) = @_;
	my @m = $out =~ /^(\d+)\|(\d+)$/mg;
	return @m;
}

# A psql session kept open (one backend for many statements), quiet
# (PostgreSQL::Test::BackgroundPsql notes every query):
#   my $s = ad_session($node); my $r = ad_session_query($s, $sql, $secs);
# $r: { out, err, sqlstate, secs, timed_out }.  Errors do not end the session.
sub ad_session
{
	my ($node, $db) = @_;
	my $s = { in => '', out => '', err => '', n => 0 };
	$s->{timer} = IPC::Run::timeout(60);
	local %ENV = %ENV;
	$ENV{PGHOST} = $node->host;
	$ENV{PGPORT} = $node->port;
	$s->{run} = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $db // 'postgres', '-v', 'VERBOSITY=verbose', '-f', '-' ],
		'<', \$s->{in}, '>', \$s->{out}, '2>', \$s->{err}, $s->{timer});
	ad_session_query($s, '\\set VERBOSITY verbose');
	return $s;
}

sub ad_session_query
{
	my ($s, $sql, $secs) = @_;
	my $banner = 'ad_session_' . ++$s->{n};
	$s->{out} = '';
	$s->{err} = '';
	$s->{timer}->start($secs // 60);
	my $t0 = time();
	$s->{in} .= "$sql\n;\n\\echo $banner\n\\warn $banner\n";
	my $to = 0;
	eval {
		$s->{run}->pump
		  until ($s->{out} =~ /^$banner$/m && $s->{err} =~ /^$banner$/m);
		1;
	} or $to = 1;
	my %r = (secs => time() - $t0, timed_out => $to);
	($r{out} = $s->{out}) =~ s/^$banner\n//m;
	($r{err} = $s->{err}) =~ s/^$banner\n//m;
	$r{sqlstate} = $1 if $r{err} =~ /(?:ERROR|FATAL|PANIC):\s+([0-9A-Z]{5}):/;
	chomp $r{out};
	return \%r;
}

sub ad_session_close
{
	my ($s) = @_;
	$s->{in} .= "\\q\n";
	eval { $s->{run}->finish; 1 } or eval { $s->{run}->kill_kill; 1 };
	return;
}

############################################################################
# Setup

# ad_new_archive($name, %o) -> $node: a started node archiving pgbench
# tables (and cs_small) with an oracle slot; at least o{segments} (default
# 3) segments, the sealed ones compressed, and the newest raw segment
# holding at least o{frames} (default 6) frames of complete transactions.
#   conf => extra postgresql.conf lines; txns => pgbench transactions per client (300)
#   (300 fill more than two 64kB segments; fewer need a smaller o{segments},
#   or the wait for them lasts its whole minute)
sub ad_new_archive
{
	my ($name, %o) = @_;
	my $node = cs_new_node($name, conf => qq(
changestream.segment_size = '64kB'
changestream.flush_interval = '20ms'
changestream.compression_level = 1
) . ($o{conf} // ''));
	$node->start;
	cs_pgbench($node, 'postgres', '-i', '-s', '1', '-q');
	$node->safe_psql('postgres', q{
CREATE EXTENSION changestream;
CREATE TABLE cs_small (id serial PRIMARY KEY, t text);
CREATE PUBLICATION changestream FOR TABLE
	pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history, cs_small;
});
	cs_create_oracle_slot($node);
	cs_start_archiving($node);
	cs_pgbench($node, 'postgres', '-c', '2', '-t', $o{txns} // 300, '-n');
	cs_wait_archived($node, name => "$name pgbench");
	my $gen = ad_newest_generation($node);
	# the newest raw segment gets at least that many frames: where the
	# segments rotate depends on the entry encoding, so small transactions
	# are added until it has them (each one its own frame, the archiver
	# being caught up)
	ad_ensure_frames($node, $gen, $o{frames} // 6);
	my $segments = $o{segments} // 3;
	cs_poll($node, 'postgres',
		"SELECT count(*) FILTER (WHERE NOT compressed) = 1 AND count(*) >= $segments "
		  . "FROM changestream.wal_segments('$gen')", 't', 60);
	return $node;
}

# $n small transactions, each in its own frame (the archiver flushes every
# 20 ms; we wait 100 ms between them).
sub ad_small_txns
{
	my ($node, $n) = @_;
	for my $i (1 .. $n)
	{
		$node->safe_psql('postgres',
			"INSERT INTO cs_small (t) VALUES ('small $i ' || repeat('x', 100))");
		usleep(100_000);
	}
	return;
}

sub ad_newest_generation
{
	my ($node) = @_;
	my @g = cs_generations($node);
	return @g ? $g[-1][0] : undef;
}

# Number of generation directories on disk (not through SQL).
sub ad_gens_count
{
	my ($node) = @_;
	my $dir = cs_archive_dir($node) . '/generations';
	opendir(my $dh, $dir) or return 0;
	my $n = grep { /^[0-9a-f]{16}$/ } readdir $dh;
	closedir $dh;
	return $n;
}

# ad_ensure_frames($node, $gen, $n) -> frames in the newest raw segment:
# adds small transactions (each its own frame, the archiver being caught
# up) until that segment has at least $n frames (at most 5 rounds).
# Where the segments rotate depends on the entry encoding and on timing, so
# a fixed number of transactions may leave fewer in the newest segment.
sub ad_ensure_frames
{
	my ($node, $gen, $n) = @_;
	my $frames = 0;
	for my $round (1 .. 6)
	{
		$frames = scalar @{ ad_parse_segment(ad_load(ad_newest_raw($node, $gen)))->{frames} };
		last if $frames >= $n || $round == 6;
		ad_small_txns($node, $n - $frames);
		cs_wait_archived($node, name => "$n frames, round $round");
	}
	return $frames;
}

1;
