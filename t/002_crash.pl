
# (b) Crash: kill -9 the postmaster in the middle of a pgbench load, start
# again, several times (in some rounds the archiver is SIGKILLed in the
# same instant, so that it cannot finish the frame it is writing).  Then
# the archive equals the oracle: nothing missing, nothing archived twice,
# and it is still one generation.
use ChangestreamTest;

my $node = cs_setup('crash', conf => qq(
changestream.segment_size = '256kB'
changestream.flush_interval = '50ms'
),
	pgbench => 1,
	sql => q{
CREATE TABLE cs_bulk (id int, pad text);
CREATE PUBLICATION changestream FOR TABLE
	pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history, cs_bulk;
},
	oracle => 1,
	archive => 1);
my ($gen0) = cs_single_generation($node, 'at start');

# A mix of short pgbench transactions and bigger multi-row ones, so that a
# kill often lands in the middle of a transaction's messages.
my $script = $node->basedir . '/bulk.sql';
PostgreSQL::Test::Utils::append_to_file($script,
	"INSERT INTO cs_bulk SELECT g, repeat('x', 40) FROM generate_series(1, 50) g;\n"
);

my @plan = (
	{ sleep => 1.5, also_archiver => 0 },
	{ sleep => 2.0, also_archiver => 1 },
	{ sleep => 1.0, also_archiver => 0 },
	{ sleep => 1.5, also_archiver => 1 },
);
my $round = 0;
my $prev_flushed = '0/0';
for my $r (@plan)
{
	$round++;
	my $bench = cs_pgbench_bg($node, 'postgres', '-c', '4', '-j', '2', '-T',
		'60', '-n', '-b', 'tpcb-like@4', '-f', "$script\@1");
	cs_sleep($r->{sleep});
	my $st = cs_status($node);
	ok($st->{state} eq 'streaming' && $st->{transactions} > 0,
		"round $round: archiving under load before the crash")
	  or diag("status: " . join(', ', map { "$_=$st->{$_}" } sort keys %$st));
	cs_crash($node, also_archiver => $r->{also_archiver});
	my ($bench_ok) = cs_pgbench_finish($bench);
	ok(!$bench_ok, "round $round: pgbench was interrupted by the crash");
	cs_start_after_crash($node);
	cs_wait_state($node, 'streaming', name => "round $round: streaming after restart");
	my ($gen) = cs_single_generation($node, "round $round");
	is($gen, $gen0, "round $round: still the first generation");
}

# No crash at the end: a last short load, then compare.
cs_pgbench($node, 'postgres', '-c', '2', '-t', '200', '-n', '-b',
	'tpcb-like@4', '-f', "$script\@1");
my $target = cs_wait_archived($node, name => 'after the crashes');
my ($gen, $start_lsn) = cs_single_generation($node, 'after the crashes');
is($gen, $gen0, 'the generation survived every crash');

cs_compare_with_oracle(
	$node,
	gen       => $gen,
	start_lsn => $start_lsn,
	target    => $target,
	name      => 'oracle after crashes',
	min_txns  => 1000);

# Torn tails were cut, sealed segments compressed, no leftovers.
cs_poll_or_diag($node, 'postgres',
	"SELECT count(*) FILTER (WHERE NOT compressed) FROM changestream.wal_segments('$gen')",
	'1', 60, 'every sealed segment is compressed, only the newest is raw');
cs_gzip_test($node, $gen, 'after crashes');
my @tmp = grep { /tmp/ } cs_archive_files($node, $gen);
is(scalar(@tmp), 0, 'no temporary files left in the wal directory')
  or diag("@tmp");

$node->stop;
done_testing();
