
# Group commit window in status(): commit_rate and group_commit_ms.
#
# The archiver measures the rate of archived commits and sizes its group
# commit window by it (stream.c, group_commit_ms()): 5 ms up to 1,200
# commits a second, 20 ms from 3,000 on, linear in between, never more than
# changestream.flush_interval, and flush_interval while it catches up.
# Checked here against independent figures:
# - before archiving starts, and on an idle stream (0 commits/s, 5 ms);
# - under a throttled pgbench, commit_rate against the rate at which the
#   source table's rows were committed (their clock_timestamp()), and the
#   window of a quiet stream;
# - under an unthrottled pgbench, every sampled window against the
#   documented formula applied to the sampled rate;
# - flush_interval below 5 ms caps the window;
# - the archive holds every inserted row (the source table is the oracle).
use ChangestreamTest;

my $node = cs_setup('group_commit',
	sql => q{
CREATE TABLE gc_t (id bigserial PRIMARY KEY,
	at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE PUBLICATION changestream FOR TABLE gc_t;
});

is( $node->safe_psql('postgres',
		"SELECT state, commit_rate IS NULL, group_commit_ms IS NULL FROM changestream.status()"
	),
	'disabled|t|t',
	'archiving off: commit_rate and group_commit_ms are NULL');

cs_start_archiving($node);
cs_poll_or_diag($node, 'postgres',
	"SELECT commit_rate = 0 AND group_commit_ms = 5 FROM changestream.status()",
	't', 30, 'idle stream: 0 commits/s, a 5 ms window');

my $script = $node->basedir . '/insert.sql';
open(my $fh, '>', $script) or die "open $script: $!";
print $fh "INSERT INTO gc_t DEFAULT VALUES;\n";
close $fh;

# Samples of status() every 200 ms while a background pgbench runs:
# [commit_rate, group_commit_ms, sample time (epoch s)].
sub sample_during
{
	my ($secs, @args) = @_;
	my $bench = cs_pgbench_bg($node, 'postgres', '-n', '-f', $script,
		'-T', $secs, @args);
	my @samples;
	my $end = time() + $secs;
	cs_sleep(0.5);
	while (time() < $end - 0.5)
	{
		my $row = $node->safe_psql('postgres',
			"SELECT commit_rate, group_commit_ms, extract(epoch FROM clock_timestamp()) FROM changestream.status()"
		);
		push @samples, [ split /\|/, $row ];
		# every 200 ms from the first sample, at once when the query
		# itself took longer (a loaded machine)
		my $next = $samples[0][2] + 0.2 * @samples;
		my $now = Time::HiRes::time();
		cs_sleep($next - $now) if $next > $now;
	}
	my ($ok, $out, $err) = cs_pgbench_finish($bench);
	ok($ok, "pgbench @args succeeded") or diag($err);
	return @samples;
}

sub median
{
	my @v = sort { $a <=> $b } @_;
	return $v[ int(@v / 2) ];
}

# The documented window for a rate (commits/s) and flush_interval (ms).
sub expected_window
{
	my ($rate, $flush_interval) = @_;
	my $share = ($rate - 1200) / (3000 - 1200);
	$share = 0 if $share < 0;
	$share = 1 if $share > 1;
	my $w = 5 + int($share * 15);
	return $w < $flush_interval ? $w : $flush_interval;
}

# Throttled: about 300 commits a second, a quiet stream.
my @quiet = sample_during(6, '-c', '2', '-j', '2', '-R', '300');
# 25 at the 200 ms pace; a loaded machine answers status() more slowly
ok(@quiet >= 5, 'throttled run: at least 5 samples (' . scalar(@quiet) . ')');
my ($from, $to) = ($quiet[0][2], $quiet[-1][2]);
my $source_rate = $node->safe_psql('postgres',
	"SELECT count(*) / ($to - $from) FROM gc_t WHERE at BETWEEN to_timestamp($from) AND to_timestamp($to)"
);
my $median_rate = median(map { $_->[0] } @quiet);
note("throttled: median commit_rate $median_rate, source table $source_rate commits/s");
ok($source_rate > 100, "throttled run committed more than 100 rows/s ($source_rate)");
ok( $median_rate >= $source_rate / 2 && $median_rate <= $source_rate * 2,
	"median commit_rate $median_rate is within a factor 2 of the source table's $source_rate commits/s"
);
my @not5 = grep { $_->[0] < 1200 && $_->[1] != 5 } @quiet;
is(scalar(@not5), 0, 'below 1,200 commits/s the window is 5 ms')
  or diag(join("\n", map { "rate $_->[0] window $_->[1]" } @not5));

# Every sample follows the formula, or is flush_interval (200 ms) while
# the archiver catches up; most follow the formula.
sub check_formula
{
	my ($label, @samples) = @_;
	my @off = grep
	{
		abs($_->[1] - expected_window($_->[0], 200)) > 1 && $_->[1] != 200
	} @samples;
	my @formula =
	  grep { abs($_->[1] - expected_window($_->[0], 200)) <= 1 } @samples;
	note("$label: "
		  . scalar(@samples)
		  . " samples (rate/window): "
		  . join(' ', map { int($_->[0]) . "/$_->[1]" } @samples));
	is(scalar(@off), 0,
		"$label: every window follows the commit rate (or is flush_interval)")
	  or diag(join("\n", map { "rate $_->[0] window $_->[1]" } @off));
	ok(@formula * 2 >= @samples,
		"$label: most samples follow the formula ("
		  . scalar(@formula) . ' of '
		  . scalar(@samples) . ')');
	return;
}

# Throttled at 2,100 commits a second: between quiet and busy, so the
# window lies between 5 and 20 ms (12 at exactly 2,100).
my @mid = sample_during(6, '-c', '2', '-j', '2', '-R', '2100');
check_formula('2,100 commits/s', @mid);
my $mid_window = median(map { $_->[1] } @mid);
ok($mid_window > 5 && $mid_window < 20,
	"2,100 commits/s: the median window ($mid_window ms) lies between 5 and 20 ms");

# Unthrottled.
check_formula('unthrottled', sample_during(6, '-c', '4', '-j', '2'));

# A flush_interval below 5 ms caps the window.
$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.flush_interval = '3ms'; SELECT pg_reload_conf();");
cs_poll_or_diag($node, 'postgres',
	"SELECT group_commit_ms FROM changestream.status()",
	'3', 30, 'flush_interval 3ms caps the window at 3 ms');
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET changestream.flush_interval; SELECT pg_reload_conf();");
cs_poll_or_diag($node, 'postgres',
	"SELECT group_commit_ms FROM changestream.status()",
	'5', 30, 'back to 5 ms once flush_interval is reset');

# Nothing was lost: the archive holds one INSERT per row of gc_t.
cs_wait_archived($node);
my ($gen) = cs_single_generation($node, 'after the runs');
is( $node->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE get_byte(data, 0) = 73) FROM changestream.wal_records('$gen')"
	),
	$node->safe_psql('postgres', 'SELECT count(*) FROM gc_t'),
	'the archive holds one INSERT per row of the source table');

done_testing();
