
# Issue 8 section 5 and issue 7 section 1 (contract item 8): reading
# damaged files releases every file descriptor and buffer, also on error.
# One session (one backend) reads copies of a real generation with
#   L1: a bit flipped in a frame of a sealed (gzip) middle segment, and
#   L2: a bit flipped in a middle frame of the newest raw segment,
# measuring its own /proc/self/fd count and anonymous RSS (RssAnon):
#   - 50 failing wal_records() calls: the fd count is the same at the end;
#   - 3,000 calls reading a damaged file (wal_records, wal_segments and
#     generation_stats over L1 and L2): fd count the same, RSS growth
#     below 20 MB, and the session can still run statements.
use strict;
use warnings;

use File::Basename;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;
use ArchiveDamage;

my $node = ad_new_archive('leaks');
my $gen  = ad_newest_generation($node);
$node->stop;

my ($l1, $l2) = ('0000000000a00001', '0000000000a00002');
ad_copy_generation($node, $gen, $l1);
my @s = ad_segments($node, $l1);
die "segment 1 is not sealed" unless $s[1]{gz};
ad_flip_in_frame($s[1]{path}, 1);
ad_copy_generation($node, $gen, $l2);
my $raw = ad_newest_raw($node, $l2);
my $nf  = scalar @{ ad_parse_segment(ad_load($raw))->{frames} };
ad_flip_in_frame($raw, int($nf / 2));

$node->start;
cs_wait_state($node, 'streaming', name => 'streaming with the damaged copies beside');

my $sess = ad_session($node);
my $pid  = ad_session_query($sess, 'SELECT pg_backend_pid();')->{out};
like($pid, qr/^\d+$/, "session backend pid $pid");
ad_session_query($sess, "SET statement_timeout = '20s';");

my @calls = (
	"SELECT count(*) FROM changestream.wal_records('$l1');",
	"SELECT count(*) FROM changestream.wal_segments('$l2');",
	"SELECT count(*) FROM changestream.generation_stats('$l2');",
	"SELECT count(*) FROM changestream.wal_records('$l2');",
	"SELECT count(*) FROM changestream.wal_segments('$l1');");
# warm up every code path and cache once
ad_session_query($sess, $_) for @calls, $ArchiveDamage::FDS_RSS_SQL;

sub measure
{
	my $r = ad_session_query($sess, $ArchiveDamage::FDS_RSS_SQL);
	my ($fds, $rss) = ad_backend_fds_rss($r->{out});
	die "could not measure: $r->{out} $r->{err}" unless defined $rss;
	return ($fds, $rss);
}

# ---- issue 7 section 1: 50 failing calls
{
	my ($fd0, $rss0) = measure();
	my $r = ad_session_query($sess, join("\n", ($calls[0]) x 50), 300);
	my $xx = () = $r->{err} =~ /ERROR:\s+XX001/g;
	is($xx, 50, '50 calls of wal_records() over a damaged sealed segment fail with XX001')
	  or diag(substr($r->{err}, 0, 2000));
	my ($fd1, $rss1) = measure();
	note("50 failing calls: fds $fd0 -> $fd1, RssAnon $rss0 kB -> $rss1 kB");
	is($fd1, $fd0, "50 failing calls: the backend's open files stay at $fd0");
	cmp_ok($rss1 - $rss0, '<', 10 * 1024, '50 failing calls: RSS grows less than 10 MB');
}

# ---- issue 8 section 5: 3,000 damaged files read in one session
{
	my ($fd0, $rss0) = measure();
	my ($errors, $n) = (0, 0);
	for my $batch (1 .. 30)
	{
		my $sql = join("\n", map { $calls[ ($n + $_) % @calls ] } 0 .. 99);
		$n += 100;
		my $r = ad_session_query($sess, $sql, 600);
		$errors += () = $r->{err} =~ /ERROR:/g;
		if ($r->{timed_out})
		{
			fail("batch $batch timed out");
			last;
		}
	}
	my ($fd1, $rss1) = measure();
	note("$n calls ($errors errors): fds $fd0 -> $fd1, RssAnon $rss0 kB -> $rss1 kB");
	cmp_ok($errors, '>=', 1200, "$n calls: the calls reading a damaged segment fail ($errors errors)");
	is($fd1, $fd0, "$n calls: the backend's open files stay at $fd0");
	cmp_ok($rss1 - $rss0, '<', 20 * 1024, "$n calls: RSS grows less than 20 MB (" . ($rss1 - $rss0) . ' kB)');
	my $r = ad_session_query($sess, 'SELECT 42;');
	is($r->{out}, '42', 'the session still runs statements');
	is(ad_session_query($sess, 'SELECT pg_backend_pid();')->{out}, $pid, 'in the same backend');
}
ad_session_close($sess);

$node->stop;
done_testing();
