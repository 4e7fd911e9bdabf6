# Generations that hand off without a gap (issue 36, item 3).
#
# new_generation() under a steady pgbench load, with a writing transaction
# held open for about 10 s across the call (the new generation's snapshot
# waits for it).  One session (the writer) updates the oracle table ot,
# one row per transaction, and after each commit records
# pg_current_wal_lsn() and a digest of ot and lt (the table the long
# transaction writes); nothing else writes those two tables, and the test
# drives the writer and the long transaction from one process, so each
# recorded digest is the tables' state at its LSN.  Then every recorded
# point from before the request to past the new generation's start is
# restored (tables ot and lt, by LSN) from the generation whose range holds
# it (start_lsn <= lsn < end_lsn), and its digest compared with the
# source's: none may be refused, none may differ, and the old generation's
# end_lsn must equal the new one's start_lsn, with no gap shown.
#
# Then the same with a kill -9 of the postmaster and the archiver during
# the hand-off (after the new generation's snapshot, while the old one
# catches up to its start), a second new_generation() after the restart,
# and the oracle over every generation.  Last, a gap that cannot be
# avoided (the slot is dropped while archiving is off): generations()
# shows it in gap_start_lsn .. gap_end_lsn (and the times), and restore()
# to a point inside it fails with 22023 naming the gap and both
# generations, from either side.  And the extension's update from 0.1 gives
# generations() and generation_stats() the gap columns.
#
# Also (issue 36, finishing item 3): every recorded point around the first
# hand-off is restored by time (its clock time, just after its commit) from
# both generations: none may be restored wrong, each from at least one; the
# old generation's last segment is compressed once the new one exists;
# and while a hand-off is pending (the archiver's walsender is stopped, so
# it stays pending), status() shows it and take_snapshot() and
# new_generation() are refused with 55000 naming it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ChangestreamTest;

my $node = cs_new_node('handoff', conf => "changestream.segment_size = '64kB'\n");
$node->start;
my $db = 'postgres';
cs_pgbench($node, $db, '-i', '-s', '1', '-q');
$node->safe_psql($db, q{
CREATE EXTENSION changestream;
CREATE TABLE ot (id int PRIMARY KEY, v bigint NOT NULL);
INSERT INTO ot SELECT i, 0 FROM generate_series(1, 50) i;
CREATE TABLE lt (id int PRIMARY KEY, v text);
CREATE TABLE bulk (id int PRIMARY KEY, v text);
CREATE PUBLICATION changestream FOR TABLE pgbench_accounts, pgbench_branches,
	pgbench_tellers, pgbench_history, ot, lt, bulk;
CREATE SCHEMA scratch;
});
cs_start_archiving($node);

my $DIGEST = q{(SELECT md5(string_agg(id || ':' || v, ',' ORDER BY id)) FROM %s.ot)
	|| '/' || (SELECT md5(coalesce(string_agg(id || ':' || v, ',' ORDER BY id), '')) FROM %s.lt)};

my $w;             # the writer session
my @points;        # { lsn, time, digest, phase }
my $k = 0;

sub start_writer { $w = $node->background_psql($db); return; }

# One transaction of the writer, then its point.
sub step
{
	my ($phase) = @_;
	$k++;
	$w->query_safe('UPDATE ot SET v = v + 1 WHERE id = ' . (1 + $k % 50));
	my $out = $w->query_safe("SELECT pg_current_wal_lsn() || '|' || clock_timestamp() || '|' || "
		  . sprintf($DIGEST, 'public', 'public'));
	my ($lsn, $time, $digest) = split /\|/, $out;
	push @points, { lsn => $lsn, time => $time, digest => $digest, phase => $phase };
	return $lsn;
}

# generations() rows: generation, start, end, gap columns
sub generations
{
	return cs_rows($node, $db,
		q{SELECT generation, start_lsn, end_lsn, coalesce(gap_start_lsn::text, ''),
			coalesce(gap_end_lsn::text, ''), coalesce(gap_start_time::text, ''),
			coalesce(gap_end_time::text, ''), coalesce(damage, '')
		  FROM changestream.generations() ORDER BY generation},
		qw(gen start end gap_start gap_end gap_start_time gap_end_time damage));
}

# The generation whose range holds lsn (start <= lsn < end; the newest:
# start <= lsn), or undef.
sub generation_of
{
	my ($lsn, @gens) = @_;
	my $l = cs_lsn_to_int($lsn);
	for my $i (0 .. $#gens)
	{
		my $g = $gens[$i];
		next if $l < cs_lsn_to_int($g->{start});
		return $g->{gen} if $i == $#gens || $l < cs_lsn_to_int($g->{end});
	}
	return undef;
}

# Restore every point of @pts from the generation holding it; returns
# (restored and equal, refused, wrong).
sub oracle
{
	my ($label, @pts) = @_;
	my @gens = generations();
	my ($good, $refused, $wrong) = (0, 0, 0);
	my @bad;
	while (my @batch = splice(@pts, 0, 40))
	{
		my $sql = '';
		for my $i (0 .. $#batch)
		{
			my $p = $batch[$i];
			my $gen = generation_of($p->{lsn}, @gens);
			if (!defined $gen)
			{
				$refused++;
				push @bad, "$p->{lsn}: in no generation";
				next;
			}
			$p->{gen} = $gen;
			$sql .= "BEGIN; SELECT 'restored' FROM changestream.restore('scratch', '$gen', "
			  . "target_lsn => '$p->{lsn}', tables => ARRAY['ot', 'lt']);\n"
			  . "SELECT 'D$i|' || " . sprintf($DIGEST, 'scratch', 'scratch') . "; ROLLBACK;\n";
		}
		my ($out, $err) = ('', '');
		$node->psql($db, $sql, stdout => \$out, stderr => \$err);
		my %got = map { /^D(\d+)\|(.*)$/ ? ($1 => $2) : () } split /\n/, $out;
		for my $i (0 .. $#batch)
		{
			my $p = $batch[$i];
			next unless defined $p->{gen};
			if (!defined $got{$i})
			{
				$refused++;
				push @bad, "$p->{lsn} (generation $p->{gen}): refused";
			}
			elsif ($got{$i} ne $p->{digest})
			{
				$wrong++;
				push @bad, "$p->{lsn} (generation $p->{gen}): digest differs";
			}
			else
			{
				$good++;
			}
		}
		diag("errors: $err") if $err =~ /ERROR/ && @bad < 5;
	}
	is($refused, 0, "$label: no point refused ($good restored)");
	is($wrong, 0, "$label: no point restored wrong")
	  or diag(join("\n", @bad[ 0 .. ($#bad < 20 ? $#bad : 20) ]));
	return ($good, $refused, $wrong);
}

# restore() by time into scratch and the digest of ot and lt there, or
# 'ERROR <SQLSTATE>: <message>' (a subtransaction catches the error)
$node->safe_psql($db, q{
CREATE FUNCTION try_restore(gen text, t timestamptz) RETURNS text
LANGUAGE plpgsql AS $f$
DECLARE
	d text;
BEGIN
	PERFORM changestream.restore('scratch', gen, target_time => t, tables => ARRAY['ot', 'lt']);
	EXECUTE $q$SELECT (SELECT md5(string_agg(id || ':' || v, ',' ORDER BY id)) FROM scratch.ot)
		|| '/' || (SELECT md5(coalesce(string_agg(id || ':' || v, ',' ORDER BY id), '')) FROM scratch.lt)$q$
	  INTO d;
	RETURN d;
EXCEPTION WHEN others THEN
	RETURN 'ERROR ' || SQLSTATE || ': ' || SQLERRM;
END
$f$;
});

# Restore every point of @pts by its time from each generation of @try:
# a restore that succeeds must equal the source; one that fails must fail
# with 22023; every point must be restored by at least one.  Returns
# (points restored, of them by each generation (hash), refused by all,
# wrong).
sub time_oracle
{
	my ($label, $try, @pts) = @_;
	my ($good, $none, $wrong, $other) = (0, 0, 0, 0);
	my %by;
	my @bad;
	while (my @batch = splice(@pts, 0, 20))
	{
		my $sql = '';
		for my $i (0 .. $#batch)
		{
			for my $g (@$try)
			{
				$sql .= "BEGIN; SELECT 'R$i|$g|' || try_restore('$g', '$batch[$i]{time}'); ROLLBACK;\n";
			}
		}
		my $out = $node->safe_psql($db, $sql);
		my %got;
		for (split /\n/, $out)
		{
			$got{$1}{$2} = $3 if /^R(\d+)\|([0-9a-f]+)\|(.*)$/;
		}
		for my $i (0 .. $#batch)
		{
			my $p = $batch[$i];
			my $ok = 0;
			for my $g (@$try)
			{
				my $r = $got{$i}{$g} // 'ERROR none: no answer';
				if ($r =~ /^ERROR (\S+): (.*)/)
				{
					next if $1 eq '22023';
					$other++;
					push @bad, "$p->{time} ($p->{lsn}) from $g: $r";
				}
				elsif ($r ne $p->{digest})
				{
					$wrong++;
					push @bad, "$p->{time} ($p->{lsn}) from $g: digest differs";
				}
				else
				{
					$ok = 1;
					$by{$g}++;
				}
			}
			$ok ? $good++ : $none++;
			push @bad, "$p->{time} ($p->{lsn}): refused by every generation" unless $ok;
		}
	}
	is($wrong, 0, "$label: no point restored wrong by time");
	is($none, 0, "$label: every point restored by time from one generation ($good restored)");
	is($other, 0, "$label: every refusal is 22023");
	diag(join("\n", @bad[ 0 .. ($#bad < 20 ? $#bad : 20) ])) if @bad;
	return ($good, \%by, $none, $wrong);
}

# Start SELECT changestream.new_generation() in the background.
sub new_generation_bg
{
	my $h = { out => '', err => '' };
	$h->{run} = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr($db), '-c',
			'SELECT changestream.new_generation()' ],
		'>', \$h->{out}, '2>', \$h->{err});
	return $h;
}

sub running
{
	my ($h) = @_;
	eval { $h->{run}->pump_nb; };
	return $h->{run}->pumpable;
}

############################################################################
# 1. new_generation() under load, with a writing transaction held 10 s

my $bench = cs_pgbench_bg($node, $db, '-n', '-T', '18', '-c', '2', '-R', '300');
start_writer();
step('warm-up') for 1 .. 20;
$node->safe_psql($db, 'SELECT changestream.take_snapshot()');  # restores read less
step('before') for 1 .. 20;
my ($old_gen) = map { $_->{gen} } (generations())[-1];
my $first_window = scalar(@points);

my $long = $node->background_psql($db);
$long->query_safe("BEGIN; INSERT INTO lt VALUES (1, 'long 1')");
step('before');
my $request_lsn = $node->safe_psql($db, 'SELECT pg_current_wal_lsn()');
my $ng = new_generation_bg();
my $t0 = time();
my $n = 1;
while (time() - $t0 < 10)
{
	step('held');
	usleep(10_000);
	$long->query_safe("INSERT INTO lt VALUES (" . ++$n . ", 'long $n')") if $n < 1 + (time() - $t0) / 2;
}
ok(running($ng), 'new_generation() waits while the writing transaction is open');
$long->query_safe("INSERT INTO lt VALUES (99, 'long end'); COMMIT");
my $commit_lsn = step('after commit');
while (running($ng))
{
	step('hand-off');
	usleep(10_000);
}
step('after') for 1 .. 30;
$ng->{run}->finish;
chomp(my $new_gen = $ng->{out});
like($new_gen, qr/^[0-9a-f]{16}$/, "new_generation() returns the new generation ($new_gen)") or diag($ng->{err});
my ($ok_b, $bout, $berr) = cs_pgbench_finish($bench);
ok($ok_b, 'the pgbench load ran throughout') or diag("$berr\n$bout");
cs_wait_archived($node, name => 'after the hand-off');

my @gens = generations();
is(scalar(@gens), 2, 'two generations');
my ($g_old, $g_new) = @gens[-2, -1];
is($g_old->{gen}, $old_gen, 'the first is the one written before the request');
is($g_new->{gen}, $new_gen, 'the second is the one new_generation() returned');
is($g_old->{end}, $g_new->{start},
	"the old generation ends exactly where the new one starts ($g_new->{start})");
is($g_new->{gap_start} . $g_new->{gap_end}, '', 'generations() shows no gap before the new generation');
my @window = grep { cs_lsn_ge($_->{lsn}, $request_lsn) && !cs_lsn_ge($_->{lsn}, $g_new->{start}) } @points;
my $bytes = cs_lsn_to_int($g_new->{start}) - cs_lsn_to_int($request_lsn);
note(sprintf('request at %s, new generation starts at %s (%d bytes of WAL later), long transaction committed at %s; '
	  . '%d recorded commits of the writer lie between the request and the new start',
	$request_lsn, $g_new->{start}, $bytes, $commit_lsn, scalar(@window)));
cmp_ok(scalar(@window), '>', 100, 'many recorded points lie between the request and the new generation\'s start');

# the old generation's last segment is sealed at the hand-off: the
# maintenance worker compresses it like every other sealed segment
cs_poll_or_diag($node, $db,
	"SELECT bool_and(compressed) FROM changestream.wal_segments('$old_gen')", 't', 60,
	"every segment of the old generation $old_gen ends up compressed");
is($node->safe_psql($db, "SELECT end_lsn FROM changestream.generations() WHERE generation = '$old_gen'"),
	$g_new->{start}, 'its end is read from the compressed last segment, still the new start');
my ($good1) = oracle('hand-off under load', @points[ $first_window .. $#points ]);
is($node->safe_psql($db, 'SELECT count(*) FROM changestream.verify()'), '0', 'verify() finds nothing wrong');

# by time, the 40 points before the new start and the 40 from it on, from
# both generations
my ($k0) = grep { cs_lsn_ge($points[$_]{lsn}, $g_new->{start}) } $first_window .. $#points;
my $from = $k0 - 40 < $first_window ? $first_window : $k0 - 40;
my $to = $k0 + 39 > $#points ? $#points : $k0 + 39;
my ($tgood, $tby) = time_oracle('hand-off by time', [ $old_gen, $new_gen ], @points[ $from .. $to ]);
# generations() gives the new generation's restorable start in time as
# restore() takes it: the old generation's last commit, from which its
# opening snapshot is the state
my $rft = $node->safe_psql($db, "SELECT restorable_from_time FROM changestream.generations() WHERE generation = '$new_gen'");
my $at_rft = $node->safe_psql($db, "BEGIN; SELECT try_restore('$new_gen', '$rft'); ROLLBACK;");
unlike($at_rft, qr/^ERROR/, "restore() from the new generation at its restorable_from_time ($rft) is not refused")
  or diag($at_rft);
note(sprintf('by time: %d points around the new start %s restored, %d from the old generation, %d from the new (the first at or past it: %s, %s)',
	$tgood, $g_new->{start}, $tby->{$old_gen} // 0, $tby->{$new_gen} // 0,
	$points[$k0]{lsn}, $points[$k0]{time}));

############################################################################
# 2. kill -9 during the hand-off, then another new_generation()

my $phase2 = scalar(@points);
$bench = cs_pgbench_bg($node, $db, '-n', '-T', '8', '-c', '2');
step('phase 2') for 1 .. 10;
$long = $node->background_psql($db);
$long->query_safe("BEGIN; INSERT INTO lt VALUES (200, 'held across the crash')");
my $off = cs_log_offset($node);
$ng = new_generation_bg();
$t0 = time();
while (time() - $t0 < 3)
{
	step('phase 2 held');
	usleep(10_000);
}
$long->query_safe('COMMIT');
step('phase 2 committed');
# the snapshot is taken: the session continues the old generation up to
# the new start; crash then
my $seen = 0;
my $deadline = time() + 60;
while (time() < $deadline)
{
	my $log = cs_log_since($node, $off);
	if ($log =~ /continuing generation \S+ from \S+ until the new generation's start/)
	{
		$seen = 1;
		last;
	}
	usleep(5_000);
}
ok($seen, 'the archiver continues the old generation until the new start');
my $switched = cs_log_since($node, $off) =~ /started generation/ ? 1 : 0;
cs_crash($node, also_archiver => 1);
note($switched ? 'the hand-off was complete before the crash'
	: 'the crash came after the new snapshot and before the hand-off');
eval { $ng->{run}->finish; };
cs_pgbench_finish($bench);
cs_start_after_crash($node);
cs_wait_state($node, 'streaming', name => 'streaming after the crash');
my $log_after = cs_log_since($node, $off);
@gens = generations();
is(scalar(grep { $_->{damage} ne '' } @gens), 0, 'no generation is damaged after the crash');
start_writer();
step('after crash') for 1 .. 20;
my $ng2 = $node->safe_psql($db, 'SELECT changestream.new_generation()');
step('after second hand-off') for 1 .. 20;
cs_wait_archived($node, name => 'after the second new_generation()');
@gens = generations();
is($gens[-1]{gen}, $ng2, 'the second new_generation() is the newest generation');
for my $i (1 .. $#gens)
{
	is($gens[ $i - 1 ]{end}, $gens[$i]{start},
		"generation $gens[$i]{gen} starts where $gens[$i - 1]{gen} ends ($gens[$i]{start})");
	is($gens[$i]{gap_start} . $gens[$i]{gap_end}, '', "no gap before generation $gens[$i]{gen}");
}
my ($good2) = oracle('kill -9 during the hand-off', @points[ $phase2 .. $#points ]);
is($node->safe_psql($db, 'SELECT count(*) FROM changestream.verify()'), '0',
	'verify() finds nothing wrong after the crash');

############################################################################
# 2b. A pending hand-off: status() shows it, take_snapshot() and
# new_generation() are refused.  The walsender that will stream the old
# generation up to the new start is stopped (SIGSTOP) while the new
# snapshot waits for a writing transaction, so the hand-off stays pending
# until it is continued.

my $pending_from = scalar(@points);
is($node->safe_psql($db, q{SELECT handoff_pending::text || coalesce(handoff_generation, '-') || coalesce(handoff_lsn::text, '-')
	FROM changestream.status()}), 'false--', 'status(): no hand-off pending while streaming');
my $gen_before = $node->safe_psql($db, 'SELECT generation FROM changestream.status()');
my $n_gens = scalar(generations());
my %old_walsenders = map { $_ => 1 } split /\n/,
  $node->safe_psql($db, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walsender'");
$long = $node->background_psql($db);
$long->query_safe("BEGIN; INSERT INTO lt VALUES (300, 'held across the pending hand-off')");
step('pending');
$ng = new_generation_bg();
cs_poll_or_diag($node, $db, q{SELECT waiting_for IS NOT NULL AND EXISTS (SELECT FROM pg_stat_activity
	WHERE backend_type = 'walsender' AND state = 'active' AND query LIKE 'CREATE_REPLICATION_SLOT%')
	FROM changestream.status()}, 't', 60,
	"the new generation's snapshot waits for the writing transaction");
my @ws = split /\n/, $node->safe_psql($db,
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'walsender' AND query NOT LIKE 'CREATE_REPLICATION_SLOT%'");
@ws = grep { !$old_walsenders{$_} } @ws;
is(scalar(@ws), 1, "one new walsender besides the snapshot's: the archiver's stream (@ws)");
kill 'STOP', $ws[0];
$long->query_safe('COMMIT');
step('pending');
cs_poll_or_diag($node, $db, 'SELECT handoff_pending FROM changestream.status()', 't', 60,
	'status() shows the hand-off pending');
my ($h_gen, $h_lsn, $h_cur) = split /\|/, $node->safe_psql($db,
	"SELECT handoff_generation || '|' || handoff_lsn || '|' || generation FROM changestream.status()");
is($h_cur, $gen_before, 'status(): the old generation is still the one written');
my $log = cs_log_since($node, $off);
like($log, qr/continuing generation \Q$gen_before\E from \S+ until the new generation's start \Q$h_lsn\E/,
	"status()'s handoff_lsn ($h_lsn) is the start the archiver logged");
for my $f ('take_snapshot', 'new_generation')
{
	my ($out, $err) = ('', '');
	$node->psql($db, "SELECT changestream.$f()", stdout => \$out, stderr => \$err,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/ERROR:\s+55000: cannot call changestream\.$f\(\) while the archiver hands off to a new generation.*DETAIL:\s+Generation \Q$h_gen\E has its snapshot at \Q$h_lsn\E .*generation \Q$gen_before\E is still written.*HINT:.*handoff_pending/s,
		"$f() while the hand-off is pending: 55000 naming generation $h_gen and $h_lsn");
}
step('pending') for 1 .. 5;
ok(running($ng), 'the requested new_generation() still waits');
kill 'CONT', $ws[0];
while (running($ng))
{
	step('pending done');
	usleep(10_000);
}
$ng->{run}->finish;
chomp(my $ng3 = $ng->{out});
is($ng3, $h_gen, 'new_generation() returns the generation status() showed pending');
step('after pending') for 1 .. 10;
cs_wait_archived($node, name => 'after the pending hand-off');
is($node->safe_psql($db, q{SELECT handoff_pending::text || coalesce(handoff_generation, '-') || coalesce(handoff_lsn::text, '-')
	FROM changestream.status()}), 'false--', 'status(): no hand-off pending once it is done');
@gens = generations();
is(scalar(@gens), $n_gens + 1, 'the refused calls added no generation');
is($gens[-1]{gen} . ' ' . $gens[-1]{start}, "$h_gen $h_lsn", 'the new generation starts at the handoff_lsn status() showed');
is($gens[-2]{end}, $h_lsn, 'the old one ends there');
oracle('pending hand-off', @points[ $pending_from .. $#points ]);
time_oracle('pending hand-off by time', [ $gens[-2]{gen}, $gens[-1]{gen} ], @points[ $pending_from .. $#points ]);
for my $i (1 .. $#gens)
{
	next unless $gens[$i]{gap_end} eq '';
	cs_poll_or_diag($node, $db,
		"SELECT bool_and(compressed) FROM changestream.wal_segments('$gens[$i - 1]{gen}')", 't', 60,
		"generation $gens[$i - 1]{gen}, handed off to $gens[$i]{gen}, ends up with every segment compressed");
}

############################################################################
# 3. A gap that cannot be avoided: the slot is dropped while archiving is off

my $before_gap = step('before the gap');
cs_wait_archived($node, name => 'before the gap');
$node->safe_psql($db, "ALTER SYSTEM SET changestream.directory = ''; SELECT pg_reload_conf();");
cs_wait_state($node, 'disabled', name => 'archiving off');
cs_poll($node, $db, "SELECT active FROM pg_replication_slots WHERE slot_name = 'changestream'", 'f', 30);
$node->safe_psql($db, "SELECT pg_drop_replication_slot('changestream')");
my @in_gap = map { step('in the gap'); $points[-1] } 1 .. 10;
cs_start_archiving($node, reload => 1);
step('after the gap') for 1 .. 5;
cs_wait_archived($node, name => 'after the gap');
@gens = generations();
my ($g_prev, $g_gap) = @gens[-2, -1];
is($g_gap->{gap_start}, $g_prev->{end}, "the gap starts at the previous generation's end ($g_prev->{end})");
is($g_gap->{gap_end}, $g_gap->{start}, "the gap ends at the new generation's start ($g_gap->{start})");
ok($g_gap->{gap_start_time} ne '' && $g_gap->{gap_end_time} ne '',
	"generations() gives the gap's time range ($g_gap->{gap_start_time} .. $g_gap->{gap_end_time})");
ok(cs_lsn_ge($in_gap[0]{lsn}, $g_gap->{gap_start}) && !cs_lsn_ge($in_gap[-1]{lsn}, $g_gap->{gap_end}),
	'the points recorded while the slot was gone lie in it');
is($node->safe_psql($db, "SELECT gap_start_lsn || ' ' || gap_end_lsn FROM changestream.generation_stats('$g_gap->{gen}')"),
	"$g_gap->{gap_start} $g_gap->{gap_end}", 'generation_stats() shows the same gap');
for my $side ($g_prev->{gen}, $g_gap->{gen})
{
	my ($out, $err) = ('', '');
	$node->psql($db, "BEGIN; SELECT changestream.restore('scratch', '$side', target_lsn => '$in_gap[5]{lsn}', tables => ARRAY['ot']); ROLLBACK;",
		stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/ERROR:\s+22023: the target LSN \Q$in_gap[5]{lsn}\E lies in the gap between generations $g_prev->{gen} and $g_gap->{gen}.*DETAIL:.*from \Q$g_gap->{gap_start}\E .* to before \Q$g_gap->{gap_end}\E/s,
		"restore() from generation $side to a point in the gap: 22023 naming the gap");
}
oracle('around the gap', (grep { $_->{phase} ne 'in the gap' } @points[ -16 .. -1 ]));

# ALTER EXTENSION UPDATE from 0.1 gives generations() and
# generation_stats() the gap columns, and status() the hand-off columns,
# and keeps their privileges, as a fresh 0.2 has them
$node->safe_psql($db, 'CREATE DATABASE up');
$node->safe_psql('up', "CREATE EXTENSION changestream VERSION '0.1'; ALTER EXTENSION changestream UPDATE");
my $shape = q{SELECT string_agg(p.proname || '(' || pg_get_function_arguments(p.oid) || ') '
	  || has_function_privilege('pg_monitor', p.oid, 'EXECUTE') || ' '
	  || has_function_privilege('public', p.oid, 'EXECUTE'), E'\n' ORDER BY p.proname)
	FROM pg_proc p WHERE p.pronamespace = 'changestream'::regnamespace
	  AND p.proname IN ('generations', 'generation_stats', 'status')};
my $updated = $node->safe_psql('up', $shape);
is($updated, $node->safe_psql($db, $shape), 'after ALTER EXTENSION UPDATE from 0.1, generations(), generation_stats() and status() are as in 0.2');
like($updated, qr/OUT handoff_pending boolean, OUT handoff_generation text, OUT handoff_lsn pg_lsn[,)][^\n]* true false$/m,
	"status() has the hand-off columns after the update");
like($updated, qr/OUT gap_end_time timestamp with time zone\) true false/, 'with the gap columns, for pg_monitor only');

note(sprintf('oracle: %d points restored equal to the source across %d generations; hand-off window of the first run: %d points, %d bytes of WAL',
	$good1 + $good2, scalar(@gens), scalar(@window), $bytes));
$node->stop;
done_testing();
