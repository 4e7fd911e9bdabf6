#!/usr/bin/perl
# bench/lag.pl: commit-to-durable lag from the sampler's output.
#
#   perl bench/lag.pl SAMPLES T_FROM T_TO
#
# SAMPLES has one line per sample, "epoch|wal_lsn|flushed_lsn": the clock
# (seconds since the epoch, from clock_timestamp()), the server's WAL flush
# position (pg_current_wal_flush_lsn(): every commit up to it is durable in
# pg_wal, i.e. acknowledged) and changestream.status().flushed_lsn (durable
# in the archive and reported to the slot), taken together by one query.
#
# For every sample i taken in [T_FROM, T_TO], the lag is t_j - t_i for the
# first sample j >= i whose flushed_lsn >= wal_lsn_i.  It is an upper bound
# by at most one sampling interval.  Prints "key value" lines: samples,
# resolved, unresolved, interval_ms (median gap between samples), p50_ms,
# p90_ms, p99_ms, max_ms, mean_ms.
use strict;
use warnings;

my ($file, $from, $to) = @ARGV;
die "usage: $0 SAMPLES T_FROM T_TO\n" unless defined $to;

sub lsn {
	my ($s) = @_;
	return undef unless defined $s && $s =~ m{^([0-9A-Fa-f]+)/([0-9A-Fa-f]+)$};
	return hex($1) * 4294967296 + hex($2);
}

my (@t, @w, @f);
open(my $fh, '<', $file) or die "$file: $!\n";
while (my $line = <$fh>)
{
	chomp $line;
	my ($ts, $wal, $fl) = split /\|/, $line;
	next unless defined $fl && $ts =~ /^[0-9.]+$/;
	my $wl = lsn($wal);
	my $fll = lsn($fl);
	next unless defined $wl && defined $fll;
	push @t, $ts;
	push @w, $wl;
	push @f, $fll;
}
close $fh;

my @lags;
my $unresolved = 0;
my $j = 0;
my @gaps;
for my $i (0 .. $#t)
{
	push @gaps, $t[$i] - $t[$i - 1] if $i > 0;
	next if $t[$i] < $from || $t[$i] > $to;
	$j = $i if $j < $i;
	# flushed_lsn only moves forward, so j never needs to go back
	$j++ while $j <= $#t && $f[$j] < $w[$i];
	if ($j > $#t)
	{
		$unresolved++;
		next;
	}
	push @lags, ($t[$j] - $t[$i]) * 1000.0;
}

sub pct {
	my ($p, @s) = @_;
	return 'n/a' unless @s;
	my $k = int($p / 100.0 * scalar(@s) + 0.999999) - 1;	# nearest rank
	$k = 0 if $k < 0;
	$k = $#s if $k > $#s;
	return sprintf('%.1f', $s[$k]);
}

my @s = sort { $a <=> $b } @lags;
my @g = sort { $a <=> $b } @gaps;
my $sum = 0;
$sum += $_ for @s;
printf "samples %d\n", scalar(@s) + $unresolved;
printf "resolved %d\n", scalar(@s);
printf "unresolved %d\n", $unresolved;
printf "interval_ms %s\n", @g ? sprintf('%.1f', $g[int($#g / 2)] * 1000) : 'n/a';
printf "p50_ms %s\n", pct(50, @s);
printf "p90_ms %s\n", pct(90, @s);
printf "p99_ms %s\n", pct(99, @s);
printf "max_ms %s\n", @s ? sprintf('%.1f', $s[-1]) : 'n/a';
printf "mean_ms %s\n", @s ? sprintf('%.1f', $sum / @s) : 'n/a';
