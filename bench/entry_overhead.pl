#!/usr/bin/perl
# bench/entry_overhead.pl: where the archive's compressed bytes go.
#
#   perl bench/entry_overhead.pl SEGMENT...     (raw .wal or .wal.gz files)
#
# Parses changestream WAL segments of format 1, 2 or 3 (docs/FORMAT.md: a
# 64- or 128-byte header, frames "CSFR" | u32 body length | u32 CRC |
# entries; format 1 entry = u8 kind | u32 length | u64 dataStart | u64
# walEnd | i64 send time | data; format 2 body = varint H | heads (u8 kind |
# varint data length, per entry) | varint F | fields | data, section 8.2;
# format 3 adds 'b' and 'c', a BEGIN and a COMMIT rebuilt from their
# fields, section 8.3) and prints, as
# "name bytes gzip6_bytes" lines, the gzip -6 size of the same stream
# encoded different ways, to show what the framing costs after compression:
#
#   payload        the pgoutput messages only, concatenated (the baseline)
#   archive        the segments as written (header, frames, entries)
#   kind_len       entries reduced to kind + u32 length + data
#   delta_varint   kind, varint length, and dataStart, walEnd and send time
#                  as zigzag varint deltas from the previous entry, + data
#   split          headers (as in delta_varint) in one gzip stream and the
#                  payloads in another, sizes summed
#   lsn_delta      kind, varint length, dataStart as a zigzag varint delta
#                  (walEnd and send time dropped), + data
#   varint_len     kind, varint length, + data (no positions at all)
# and "entries N", "dataStart_zero N" (entries whose dataStart is 0/0),
# "walEnd_eq_dataStart N", "send_time_distinct N".
use strict;
use warnings;
use File::Temp qw(tempdir);

die "usage: $0 SEGMENT...\n" unless @ARGV;
my $tmp = tempdir(CLEANUP => 1);
my %out;
for my $name (qw(payload archive kind_len delta_varint split_hdr split_data lsn_delta varint_len))
{
	open($out{$name}, '>:raw', "$tmp/$name") or die "$tmp/$name: $!\n";
}

sub varint {
	my ($v) = @_;	# non-negative
	my $s = '';
	while ($v >= 128)
	{
		$s .= chr(($v % 128) | 128);
		$v = int($v / 128);
	}
	return $s . chr($v);
}
sub zigzag { my ($v) = @_; return $v >= 0 ? 2 * $v : -2 * $v - 1; }
sub unzigzag { my ($u) = @_; return ($u % 2) ? -($u + 1) / 2 : $u / 2; }
# getvarint(BUFFER, \POS): reads the buffer through @_ (an alias), never
# copying it: a copy per call made this quadratic in the segment size.
sub getvarint
{
	my $pos = $_[1];
	my ($v, $mul) = (0, 1);
	while (1)
	{
		my $b = ord(substr($_[0], $$pos++, 1));
		$v += ($b & 127) * $mul;
		last unless $b & 128;
		$mul *= 128;
	}
	return $v;
}
sub u64 { my ($s) = @_; my ($hi, $lo) = unpack('NN', $s); return $hi * 4294967296 + $lo; }

my ($entries, $zero_start, $eq, %times) = (0, 0, 0);
my ($p_start, $p_end, $p_time) = (0, 0, 0);
for my $file (@ARGV)
{
	my $data;
	if ($file =~ /\.gz$/)
	{
		open(my $fh, '-|', 'gzip', '-dc', $file) or die "$file: $!\n";
		binmode $fh;
		local $/;
		$data = <$fh>;
		close $fh;
	}
	else
	{
		open(my $fh, '<:raw', $file) or die "$file: $!\n";
		local $/;
		$data = <$fh>;
		close $fh;
	}
	print { $out{archive} } $data;
	my $version = unpack('N', substr($data, 8, 4));
	my $off = unpack('N', substr($data, 12, 4));
	while ($off + 12 <= length($data))
	{
		my ($magic, $blen) = unpack('NN', substr($data, $off, 8));
		last unless $magic == 0x43534652;
		my $end = $off + 12 + $blen;
		my $e = $off + 12;
		my ($flsn, $ftime) = (0, 0);    # formats 2, 3: per-frame delta bases
		my ($ffinal, $fbtime, $fxid) = (0, 0, 0);    # format 3: 'b' state
		my ($hend, $pos, $dpos) = (0, 0, 0);    # formats 2, 3: the sections
		if ($version >= 2)
		{
			my $h = getvarint($data, \$e);
			$hend = $e + $h;
			$pos = $hend;
			my $f = getvarint($data, \$pos);
			$dpos = $pos + $f;    # fields from $pos, data from $dpos
		}
		while ($version >= 2 ? $e < $hend : $e + 29 <= $end)
		{
			my ($kind, $len, $ds, $we, $st, $payload, $next);
			if ($version >= 2)
			{
				$kind = substr($data, $e, 1);
				$next = $e + 1;
				$len = getvarint($data, \$next);
				($ds, $we, $st) = (0, 0, 0);
				my $stored = $kind;
				$kind = { b => 'w', c => 'W' }->{$kind} // $kind if $version >= 3;
				if ($kind eq 'w' || $kind eq 'W')
				{
					$ds = $we = $flsn + unzigzag(getvarint($data, \$pos));
					$flsn = $ds;
				}
				$we = $ds + unzigzag(getvarint($data, \$pos)) if $kind eq 'W';
				if ($kind eq 'k')
				{
					$we = $flsn + unzigzag(getvarint($data, \$pos));
					$flsn = $we;
				}
				if ($kind eq 'W' || $kind eq 'k')
				{
					$st = $ftime + unzigzag(getvarint($data, \$pos));
					$ftime = $st;
				}
				$kind = 'w' if $kind eq 'W';
				$payload = substr($data, $dpos, $len);
				$dpos += $len;
				if ($kind ne $stored && $stored eq 'b')
				{
					$ffinal = $ds + unzigzag(getvarint($data, \$pos));
					$fbtime += unzigzag(getvarint($data, \$pos));
					$fxid = ($fxid + unzigzag(getvarint($data, \$pos))) & 0xFFFFFFFF;
					$payload = pack('a1 Q> q> N', 'B', $ffinal, $fbtime, $fxid);
					$len = length($payload);
				}
				elsif ($kind ne $stored && $stored eq 'c')
				{
					my $flags = getvarint($data, \$pos);
					my $cl = $ffinal + unzigzag(getvarint($data, \$pos));
					my $el = $ds + unzigzag(getvarint($data, \$pos));
					my $t = $fbtime + unzigzag(getvarint($data, \$pos));
					$payload = pack('a1 C Q> Q> q>', 'C', $flags, $cl, $el, $t);
					$len = length($payload);
				}
			}
			else
			{
				$kind = substr($data, $e, 1);
				$len = unpack('N', substr($data, $e + 1, 4));
				$ds = u64(substr($data, $e + 5, 8));
				$we = u64(substr($data, $e + 13, 8));
				$st = u64(substr($data, $e + 21, 8));
				$payload = substr($data, $e + 29, $len);
				$next = $e + 29 + $len;
			}
			$entries++;
			$zero_start++ if $ds == 0;
			$eq++ if $ds == $we;
			$times{$st} = 1;
			print { $out{payload} } $payload;
			print { $out{kind_len} } $kind . pack('N', $len) . $payload;
			my $hdr = $kind . varint($len) . varint(zigzag($ds - $p_start)) .
				varint(zigzag($we - $p_end)) . varint(zigzag($st - $p_time));
			print { $out{delta_varint} } $hdr . $payload;
			print { $out{split_hdr} } $hdr;
			print { $out{split_data} } $payload;
			print { $out{lsn_delta} } $kind . varint($len) . varint(zigzag($ds - $p_start)) . $payload;
			print { $out{varint_len} } $kind . varint($len) . $payload;
			($p_start, $p_end, $p_time) = ($ds, $we, $st);
			$e = $next;
		}
		$off = $end;
	}
}
close $_ for values %out;

sub gz { my ($f) = @_; my $n = `gzip -6 -c '$f' | wc -c`; chomp $n; return $n + 0; }
for my $name (qw(payload archive kind_len delta_varint))
{
	printf "%s %d %d\n", $name, -s "$tmp/$name", gz("$tmp/$name");
}
printf "split %d %d\n", (-s "$tmp/split_hdr") + (-s "$tmp/split_data"),
	gz("$tmp/split_hdr") + gz("$tmp/split_data");
for my $name (qw(lsn_delta varint_len))
{
	printf "%s %d %d\n", $name, -s "$tmp/$name", gz("$tmp/$name");
}
printf "entries %d\n", $entries;
printf "dataStart_zero %d\n", $zero_start;
printf "walEnd_eq_dataStart %d\n", $eq;
printf "send_time_distinct %d\n", scalar(keys %times);
