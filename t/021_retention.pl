# Retention (issue 12): a bounded archive that keeps every point of its
# window restorable.
#
# 1. pgbench (its TPC-B updates, without the history insert, so that the
#    tables keep their size) for ~6 s without retention (enough for a
#    growth rate; its points and the oldest of the next phase give well
#    over the 10 refused points asserted), then ~36 s with
#    retention = 10s and snapshot_interval = 3s.  Every second the test records, with the
#    pgbench tables locked against writers (SHARE mode waits for running
#    transactions and holds off new ones), pg_current_wal_lsn(),
#    clock_timestamp(), a per-table digest of the source and the archive's
#    size on disk, and the size of every file ever seen (what the archive
#    would hold without retention).  The sizes give the figures with and
#    without retention.
#    Then a second session pins the generation (changes() from its
#    restorable start in an open transaction: retention rule 5; a call
#    such as snapshots() pins only while it runs), and every recorded point at or after
#    the generation's restorable_from_lsn must restore to its digest, every
#    point in the window (time >= pin time - 10 s) must be among them, and
#    older points are refused with an error naming the restorable range.
#    The archive size must level off instead of growing: once the window
#    is full, no segment on disk is older than the window plus a snapshot
#    interval, a retention run's interval and 10 s of slack (26 s).
# 2. A changes() cursor held open across retention runs: its transaction's
#    pin keeps the segment it reads (checked on disk), its rows are exactly
#    the marks inserted since its start LSN, and after it commits retention
#    removes that segment.  pgbench runs 20 s from the cursor's start
#    point, through nearly all of its 20 s wait (later segments and
#    snapshots; scheduled snapshots need no writes), so that it has ended
#    when the cursor commits instead of running on for 10 s.
# 3. Old generations (after new_generation()) stay while their last write
#    is inside the window and are removed, whole, once it is out.
# 4. kill -9 of the compressor (which runs retention), the archiver and
#    the server at several moments while retention runs under pgbench (4, 5
#    and 6 s after a start: different points of the 2.5 s run and 3 s
#    snapshot cycles): verify() finds nothing and the newest points still
#    restore.
# 5. The states a crash inside a run can leave, made exactly from a copy of
#    the generation taken before the run: the horizon durable and no file,
#    or only the oldest half, deleted; an old generation renamed to .tmp
#    and partly deleted.  verify() and cs_decode.py find them sound, the
#    restorable start is the horizon's, the newest point restores, and the
#    next run (or session start) removes the rest.  pgbench runs 15 s
#    after the copy: the newest snapshot out of the window is then one
#    taken about when or after the copy was, so the run removes most files
#    of the copy (dozens; at least 2 segments and a snapshot are asserted).
# 6. Damage in a retained generation is still found by verify() and
#    cs_decode.py: the first segment kept missing, the horizon's snapshot
#    missing, a horizon whose first segment starts after its snapshot, a
#    horizon file that does not parse.
use strict;
use warnings;

use File::Find;
use FindBin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ChangestreamTest;

my $retention = 10;
my $snapshot_interval = 3;
# the oldest a segment on disk may be once the window is full: the window,
# a snapshot interval, a run's interval (a quarter of the window) and slack
my $max_age = int($retention + $snapshot_interval + $retention / 4 + 10);
my $node = cs_new_node('retention', conf => qq{
changestream.segment_size = '64kB'
changestream.snapshot_interval = '${snapshot_interval}s'
});
$node->start;
my $db = 'postgres';
my $S = $ChangestreamTest::ORACLE_SETTINGS;
my $dir = cs_archive_dir($node);

$node->safe_psql($db, 'CREATE EXTENSION changestream');
cs_pgbench($node, $db, '-i', '-s', '1', '-q');
# 10,000 accounts keep each second's digest and each restore cheap on a
# loaded machine; pgbench's updates of the others find no row
$node->safe_psql($db, 'DELETE FROM pgbench_accounts WHERE aid > 10000; VACUUM pgbench_accounts');
$node->safe_psql($db, q{
CREATE TABLE marks (id int PRIMARY KEY, at timestamptz DEFAULT clock_timestamp());
CREATE PUBLICATION changestream FOR TABLE pgbench_accounts, pgbench_branches,
	pgbench_tellers, pgbench_history, marks;
});
my @tables = qw(pgbench_accounts pgbench_branches pgbench_tellers pgbench_history marks);

# pgbench's TPC-B-like updates without the history insert: the tables keep
# their size, so what the archive keeps is the history retention bounds
# (with the builtin script pgbench_history, and so every snapshot, grows
# with every transaction)
my $script = PostgreSQL::Test::Utils::tempdir() . '/tpcb-updates.sql';
open(my $fh, '>', $script) or die "$script: $!";
print $fh q{\set aid random(1, 10000)
\set bid random(1, 1)
\set tid random(1, 10)
\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
END;
};
close $fh;
my @bench = ('-n', '-f', $script);
cs_start_archiving($node);

# Every archive file ever seen: key (generation and segment index, or
# snapshot name) -> { first => time first seen, size => last size seen }.
# Their sum is what the archive would hold without retention, in the same
# run (a segment counts once, raw or compressed as last seen).
my %seen;

# -> (bytes of every file, bytes of the segments, the same two for every
#     file ever seen, age in s of the oldest segment on disk)
sub archive_bytes
{
	my ($total, $wal) = (0, 0);
	my $now = time();
	my %present;
	find({ wanted => sub {
		return unless -f $_;
		my $size = -s $_;
		$total += $size;
		my $key;
		if (m{/generations/([0-9a-f]{16})/wal/([0-9a-f]{16})\.wal(\.gz)?$})
		{
			$wal += $size;
			$key = "$1/wal/$2";
		}
		elsif (m{/generations/([0-9a-f]{16})/snapshots/([0-9A-F]{16}\.snapshot\.gz)$})
		{
			$key = "$1/snap/$2";
		}
		return unless $key;
		$seen{$key}{first} //= $now;
		$seen{$key}{size} = $size;
		$present{$key} = 1;
	}, no_chdir => 1 }, $dir);
	my ($all, $all_wal, $oldest) = (0, 0, 0);
	for my $k (keys %seen)
	{
		$all += $seen{$k}{size};
		next unless $k =~ m{/wal/};
		$all_wal += $seen{$k}{size};
		$oldest = $now - $seen{$k}{first} if $present{$k} && $now - $seen{$k}{first} > $oldest;
	}
	return ($total, $wal, $all, $all_wal, $oldest);
}

sub digest_sql
{
	my ($schema, $table) = @_;
	return qq{SELECT '$table', md5(coalesce(string_agg(r, '|' ORDER BY r), ''))
		FROM (SELECT t::text AS r FROM $schema.$table t) x};
}

my @points;    # { lsn, time, digest => {t => md5}, mark }
my $mark = 0;

# Record one point with writers held off: LSN, time and digests agree.
sub record_point
{
	$mark++;
	my $out = $node->safe_psql($db, "$S BEGIN;
		LOCK TABLE pgbench_accounts, pgbench_tellers, pgbench_branches, pgbench_history IN SHARE MODE;
		INSERT INTO marks (id) VALUES ($mark);
		COMMIT;
		BEGIN;
		LOCK TABLE pgbench_accounts, pgbench_tellers, pgbench_branches, pgbench_history IN SHARE MODE;
		SELECT pg_current_wal_lsn(), clock_timestamp();"
		  . join(";\n", map { digest_sql('public', $_) } @tables) . "; COMMIT;");
	my @lines = split /\n/, $out;
	my ($lsn, $time) = split /\|/, shift @lines;
	my %digest = map { split /\|/ } @lines;
	push @points, { lsn => $lsn, time => $time, digest => \%digest, mark => $mark };
	return;
}

# Run pgbench for $secs seconds, recording a point and the size each second.
sub run_phase
{
	my ($secs, $label, $sizes) = @_;
	my $h = cs_pgbench_bg($node, $db, @bench, '-T', $secs, '-c', '2');
	my $t0 = time();
	while (time() - $t0 < $secs)
	{
		my $tick = time();
		record_point();
		push @$sizes, [ int(time() - $t0), archive_bytes() ];    # [t, total, wal, all, all_wal, oldest]
		my $left = 1 - (time() - $tick);
		usleep(int($left * 1e6)) if $left > 0;
	}
	my ($ok, $out, $err) = cs_pgbench_finish($h);
	ok($ok, "$label: pgbench ran") or diag($err);
	return;
}

############################################################################
# 1. the window under pgbench, and the size with and without retention

my (@without, @with);
run_phase(6, 'without retention', \@without);
my $first_with = scalar(@points);
$node->safe_psql($db, "ALTER SYSTEM SET changestream.retention = '${retention}s'; SELECT pg_reload_conf()");
run_phase($max_age + 10, 'with retention', \@with);

# pin the generation in a second session at once, so that the window
# stands still while the points are checked
my $gen = $node->safe_psql($db, 'SELECT generation FROM changestream.status()');
my $pin = $node->background_psql($db);
$pin->query_safe("BEGIN; SELECT count(*) FROM changestream.changes('$gen')");
my $pinned_at = $node->safe_psql($db, 'SELECT extract(epoch FROM clock_timestamp())');
cs_wait_archived($node, name => 'after the pgbench phases', timeout => 300);

sub sizes_text
{
	return join(', ', map { sprintf('%ds=%dkB (segments %dkB; without retention %dkB)',
		$_->[0], $_->[1] / 1024, $_->[2] / 1024, $_->[3] / 1024) } @_);
}
note('archive size without retention: ' . sizes_text(@without));
note("archive size with retention = ${retention}s (and what it would be without): " . sizes_text(@with));

# without retention the segments grow; with it, once the window is full
# ($max_age s on), no segment on disk is older than $max_age s, and the
# archive holds well under what it would without retention
my $rate = ($without[-1][2] - $without[0][2]) / (($without[-1][0] - $without[0][0]) || 1);
ok($rate > 0, sprintf('without retention the segments grow (%.0f bytes/s)', $rate));
my @late = grep { $_->[0] >= $max_age } @with;
my @old = grep { $_->[5] > $max_age } @late;
ok(@late >= 3 && !@old, sprintf('with retention no segment on disk is older than %d s (%d samples from %d s on; too old: %s)',
	$max_age, scalar(@late), $max_age, join(' ', map { sprintf('%.0fs', $_->[5]) } @old) || 'none'));
ok($with[-1][1] < 0.75 * $with[-1][3], sprintf('with retention the archive levels off: %dkB at the end, %dkB without retention',
	$with[-1][1] / 1024, $with[-1][3] / 1024));
like($node->safe_psql($db, 'SELECT retention_freed_bytes > 0 AND last_retention_at IS NOT NULL FROM changestream.status()'),
	qr/^t$/, 'status() shows retention runs and freed bytes');
my $log = slurp_file($node->logfile);
like($log, qr/LOG:  retention removed \d+ files \(\d+ bytes\) from the changestream archive/,
	'a retention run that frees something logs one line');
unlike($log, qr/snapshot_interval is not/, 'no warning with snapshot_interval set');

my ($from_lsn, $from_time_ok) = split /\|/, $node->safe_psql($db,
	"SELECT restorable_from_lsn, restorable_from_time <= to_timestamp($pinned_at) - interval '${retention}s'
	   FROM changestream.generations() WHERE generation = '$gen'");
is($from_time_ok, 't', 'the restorable start is at or before the window start');
ok(cs_lsn_ge($from_lsn, $points[0]{lsn}) && !cs_lsn_ge($points[0]{lsn}, $from_lsn),
	"retention moved the restorable start ($from_lsn) past the oldest point");

is($node->safe_psql($db, "SELECT count(*) FROM changestream.verify('$gen')"), '0',
	'verify() finds the generation sound after retention');
{
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(['python3', "$FindBin::Bin/../scripts/cs_decode.py", '--summary',
		"$dir/generations/$gen"], '>', \$out, '2>', \$err);
	ok($ok, 'cs_decode.py agrees: the generation is sound after retention') or diag("$err\n$out");
	ok(-e "$dir/generations/$gen/retention", 'the generation has a retention horizon');
}

my ($restored, $refused, $in_window) = (0, 0, 0);
for my $p (@points)
{
	my $sql = "$S BEGIN; SELECT 1 FROM changestream.restore('scratch', target_lsn => '$p->{lsn}');"
	  . join(";\n", map { digest_sql('scratch', $_) } @tables) . "; ROLLBACK;";
	my ($out, $err) = ('', '');
	$node->psql($db, $sql, stdout => \$out, stderr => \$err, on_error_stop => 1);
	my $p_epoch = $node->safe_psql($db, "SELECT extract(epoch FROM '$p->{time}'::timestamptz)");
	my $inside = $p_epoch >= $pinned_at - $retention;
	$in_window++ if $inside;
	if (cs_lsn_ge($p->{lsn}, $from_lsn))
	{
		my @lines = split /\n/, $out;
		shift @lines;
		my %got = map { split /\|/ } @lines;
		my @bad = grep { ($got{$_} // 'missing') ne $p->{digest}{$_} } @tables;
		ok(!@bad && $err !~ /ERROR/, "point $p->{mark} ($p->{lsn}) restores to its digests")
		  or diag("differing: @bad\n$err");
		$restored++;
	}
	else
	{
		ok(!$inside, "point $p->{mark} ($p->{lsn}), removed, lies before the window");
		like($err, qr/not archived in generation.*\n.*restorable from \Q$from_lsn\E/,
			"point $p->{mark} ($p->{lsn}) is refused naming the restorable range");
		$refused++;
	}
}
note("points: " . scalar(@points) . ", restored $restored, refused $refused, inside the window $in_window");
ok($in_window >= 5, "at least 5 points inside the window ($in_window)");
ok($refused >= 10, "at least 10 points removed by retention ($refused)");
{
	my ($out, $err) = ('', '');
	$node->psql($db, "SELECT count(*) FROM changestream.changes('$gen', start_lsn => '$points[0]{lsn}')",
		stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/ERROR:\s+22023: changestream history before \Q$from_lsn\E of generation $gen was removed by retention/,
		'changes() from a point before the restorable start is refused, not silently shortened');
}
$pin->query_safe('COMMIT');
$pin->quit;

############################################################################
# 2. a changes() cursor held open across retention runs

my $h = cs_pgbench_bg($node, $db, @bench, '-T', $retention + 10, '-c', '2');
record_point();
my $cursor_from = $points[-1];
record_point() for 1 .. 3;
my $last_mark = $mark;
cs_wait_archived($node, name => 'cursor start archived', timeout => 120);
my $seg = $node->safe_psql($db, "SELECT file_name FROM changestream.wal_segments('$gen')
	WHERE start_lsn <= '$cursor_from->{lsn}' ORDER BY segment_index DESC LIMIT 1");
my $cur = $node->background_psql($db);
$cur->query_safe("BEGIN; DECLARE c CURSOR FOR SELECT (new_row->>'id')::int AS id
	FROM changestream.changes('$gen', start_lsn => '$cursor_from->{lsn}', relations => '{marks}')
	WHERE action = 'insert'");
my $first = $cur->query_safe('FETCH 1 FROM c');
my $seg_path = "$dir/generations/$gen/wal/$seg";
my $runs_before = $node->safe_psql($db, 'SELECT last_retention_at FROM changestream.status()');
cs_sleep($retention + 10);    # out of the window, several runs later
cs_poll_or_diag($node, $db, "SELECT last_retention_at > '$runs_before' FROM changestream.status()", 't', 60,
	'retention ran while the cursor was open');
ok(-e $seg_path || -e "$seg_path.gz" || -e ($seg_path =~ s/\.gz$//r),
	"the cursor's segment $seg is kept while its transaction is open");
my $rest = $cur->query_safe('FETCH ALL FROM c');
my @ids = ($first, grep { $_ ne '' } split /\n/, $rest);
is("@ids", join(' ', $cursor_from->{mark} + 1 .. $last_mark),
	'the cursor returns exactly the marks inserted from its start LSN');
$cur->query_safe('COMMIT');
$cur->quit;
cs_pgbench_finish($h);
record_point();
cs_wait_archived($node, name => 'after the cursor', timeout => 120);
cs_poll_or_diag($node, $db,
	"SELECT NOT EXISTS (SELECT 1 FROM changestream.wal_segments('$gen') WHERE file_name = '$seg')",
	't', 120, "once the cursor's transaction ended, retention removes $seg");

############################################################################
# 3. old generations: kept inside the window, removed whole after it

my $old = $gen;
$node->safe_psql($db, 'SELECT changestream.new_generation()');
cs_poll_or_diag($node, $db, "SELECT generation <> '$old' AND state = 'streaming' FROM changestream.status()",
	't', 120, 'a new generation is being written');
$gen = $node->safe_psql($db, 'SELECT generation FROM changestream.status()');
my $old_last = $node->safe_psql($db, "SELECT extract(epoch FROM max(modified_at)) FROM changestream.wal_segments('$old')");
my $kept_checks = 0;
while (time() < $old_last + $retention - 3)
{
	is($node->safe_psql($db, "SELECT count(*) FROM changestream.generations() WHERE generation = '$old'"),
		'1', 'the old generation is kept while its last write is inside the window')
	  if ++$kept_checks % 4 == 1;
	record_point();
	cs_sleep(1);
}
ok($kept_checks > 0, "checked the old generation inside the window ($kept_checks times)");
cs_poll_or_diag($node, $db, "SELECT count(*) FROM changestream.generations() WHERE generation = '$old'",
	'0', 120, 'the old generation is removed once out of the window');
ok(time() >= $old_last + $retention, 'not before its last write left the window');
# readers stop seeing it at the rename to .tmp; the files go in slices after
my $gone = 0;
for my $try (1 .. 120)
{
	$gone = !-e "$dir/generations/$old" && !-e "$dir/generations/$old.tmp";
	last if $gone;
	cs_sleep(0.5);
}
ok($gone, 'its directory is gone');

############################################################################
# 4. kill -9 while retention runs

for my $round (1 .. 3)
{
	my $hb = cs_pgbench_bg($node, $db, @bench, '-T', '20', '-c', '2');
	cs_sleep(3 + $round);
	record_point();
	# the compressor runs retention: kill it too, in the middle of its work
	my $cpid = $node->safe_psql($db, 'SELECT compressor_pid FROM changestream.status()');
	cs_crash($node, also_archiver => 1, also_pids => [$cpid]);
	cs_pgbench_finish($hb);
	cs_start_after_crash($node);
	cs_wait_state($node, 'streaming', name => "crash round $round: streaming again", timeout => 120);
	is($node->safe_psql($db, 'SELECT count(*) FROM changestream.verify()'), '0',
		"crash round $round: verify() finds nothing");
	record_point();
	cs_wait_archived($node, name => "crash round $round", timeout => 120);
	for my $p ($points[-2], $points[-1])
	{
		my $sql = "$S BEGIN; SELECT 1 FROM changestream.restore('scratch', target_lsn => '$p->{lsn}');"
		  . join(";\n", map { digest_sql('scratch', $_) } @tables) . "; ROLLBACK;";
		my ($out, $err) = ('', '');
		$node->psql($db, $sql, stdout => \$out, stderr => \$err, on_error_stop => 1);
		my @lines = split /\n/, $out;
		shift @lines;
		my %got = map { split /\|/ } @lines;
		my @bad = grep { ($got{$_} // 'missing') ne $p->{digest}{$_} } @tables;
		ok(!@bad && $err !~ /ERROR/, "crash round $round: point $p->{mark} restores to its digests")
		  or diag("differing: @bad\n$err");
	}
}
like(slurp_file($node->logfile), qr/retention removed/, 'retention kept running across the crashes');

############################################################################
# 5. the states a crash inside a run leaves, made exactly: the horizon is
#    durable and nothing, or only the oldest half, is deleted; an old
#    generation renamed to .tmp and partly deleted

$gen = $node->safe_psql($db, 'SELECT generation FROM changestream.status()');
my $gdir = "$dir/generations/$gen";
my $backup = PostgreSQL::Test::Utils::tempdir() . '/gen-backup';
$node->safe_psql($db, "ALTER SYSTEM SET changestream.retention = 0");
$node->stop;
system('cp', '-a', $gdir, $backup) == 0 or die "cp -a failed";
$node->start;
$node->safe_psql($db, "ALTER SYSTEM SET changestream.retention = '${retention}s'; SELECT pg_reload_conf()");
my $freed0 = $node->safe_psql($db, 'SELECT retention_freed_bytes FROM changestream.status()');
my $hb = cs_pgbench_bg($node, $db, @bench, '-T', $retention + 5, '-c', '2');
my $t_end = time() + $retention + 5;
while (time() < $t_end) { record_point(); cs_sleep(1); }
cs_pgbench_finish($hb);
my $newest = $points[-1];
cs_wait_archived($node, name => 'before the crash states', timeout => 120);
cs_poll_or_diag($node, $db, "SELECT retention_freed_bytes > $freed0 FROM changestream.status()", 't', 120,
	'retention freed files of the backed-up generation');
# retention off, then a restart, before the restorable start is read: a
# run that starts between the read and the stop would move it on (ALTER
# SYSTEM alone does not reach the running maintenance worker), and the
# crash states below are checked against the start read here
$node->safe_psql($db, "ALTER SYSTEM SET changestream.retention = 0");
$node->restart;
my $from = $node->safe_psql($db, "SELECT restorable_from_lsn FROM changestream.generations() WHERE generation = '$gen'");
$node->stop;

# what retention deleted, oldest first (names sort by index and LSN)
my @deleted;
for my $sub ('wal', 'snapshots')
{
	opendir(my $dh, "$backup/$sub") or die;
	push @deleted, map { "$sub/$_" } sort grep { !-e "$gdir/$sub/$_" && /^[0-9A-Fa-f]{16}\./ } readdir $dh;
	closedir $dh;
}
my @del_wal = grep { m{^wal/} } @deleted;
my @del_snap = grep { m{^snapshots/} } @deleted;
ok(@del_wal >= 2 && @del_snap >= 1, sprintf('retention deleted %d segments and %d snapshots', scalar @del_wal, scalar @del_snap));

sub check_state
{
	my ($label) = @_;
	$node->start;
	is($node->safe_psql($db, "SELECT count(*) FROM changestream.verify()"), '0', "$label: verify() finds nothing");
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(['python3', "$FindBin::Bin/../scripts/cs_decode.py", '--summary', $gdir],
		'>', \$out, '2>', \$err);
	ok($ok, "$label: cs_decode.py finds the generation sound") or diag("$err\n$out");
	is($node->safe_psql($db, "SELECT restorable_from_lsn FROM changestream.generations() WHERE generation = '$gen'"),
		$from, "$label: the restorable start is the horizon's");
	my $sql = "$S BEGIN; SELECT 1 FROM changestream.restore('scratch', target_lsn => '$newest->{lsn}');"
	  . join(";\n", map { digest_sql('scratch', $_) } @tables) . "; ROLLBACK;";
	($out, $err) = ('', '');
	$node->psql($db, $sql, stdout => \$out, stderr => \$err, on_error_stop => 1);
	my @lines = split /\n/, $out;
	shift @lines;
	my %got = map { split /\|/ } @lines;
	my @bad = grep { ($got{$_} // 'missing') ne $newest->{digest}{$_} } @tables;
	ok(!@bad && $err !~ /ERROR/, "$label: the newest point restores to its digests") or diag("@bad\n$err");
	$node->stop;
	return;
}

# horizon durable, nothing deleted yet
system('cp', '-a', "$backup/$_", "$gdir/$_") == 0 or die for @deleted;
check_state('crash right after the horizon');
# the oldest half deleted
my @half = (@del_wal[ int(@del_wal / 2) .. $#del_wal ], @del_snap[ int(@del_snap / 2) .. $#del_snap ]);
unlink "$gdir/$_" for @deleted;
system('cp', '-a', "$backup/$_", "$gdir/$_") == 0 or die for @half;
check_state('crash in the middle of the deletions');
# and an old generation renamed to .tmp, partly deleted
system('cp', '-a', $backup, "$dir/generations/0000000000000001.tmp") == 0 or die;
unlink glob("$dir/generations/0000000000000001.tmp/wal/0000000000000000.wal*");
check_state('crash while deleting an old generation');
ok(!-e "$dir/generations/0000000000000001.tmp", 'session start removed the half-deleted generation');

# retention on again: it removes what lay below the horizon
$node->start;
$node->safe_psql($db, "ALTER SYSTEM SET changestream.retention = '${retention}s'; SELECT pg_reload_conf()");
cs_poll_or_diag($node, $db, "SELECT last_retention_at IS NOT NULL FROM changestream.status()", 't', 120,
	'retention runs again');
my @left;
for my $try (1 .. 60)
{
	@left = grep { -e "$gdir/$_" } @half;
	last unless @left;
	cs_sleep(1);
}
is(scalar(@left), 0, 'the next run removed what a crash left below the horizon') or diag("@left");

# retention without scheduled snapshots: one warning
my $log_at = -s $node->logfile;
$node->safe_psql($db, "ALTER SYSTEM SET changestream.snapshot_interval = 0; SELECT pg_reload_conf()");
my $warned = 0;
for my $try (1 .. 120)
{
	my $new = substr(slurp_file($node->logfile), $log_at);
	$warned = () = $new =~ /WARNING:  changestream\.retention is set but changestream\.snapshot_interval is not/g;
	last if $warned && $try > 20;
	cs_sleep(0.5);
}
is($warned, 1, 'retention without snapshot_interval warns once');

############################################################################
# 6. damage in a retained generation is still found, by verify() and by
#    cs_decode.py alike

$node->safe_psql($db, "ALTER SYSTEM SET changestream.retention = 0; SELECT pg_reload_conf()");
# a few segments after the horizon's first one
cs_pgbench($node, $db, @bench, '-T', '5', '-c', '2');
record_point();
cs_wait_archived($node, name => 'before the damage', timeout => 120);
$node->stop;
is(cs_decode_problems(), '', 'cs_decode.py finds the retained generation sound before the damage');
my $horizon_text = slurp_file("$gdir/retention");
my ($first_seg) = $horizon_text =~ /^first_segment = (\d+)$/m;
my ($h_snap) = $horizon_text =~ m{^snapshot_lsn = ([0-9A-F]+/[0-9A-F]+)$}m;
# the horizon file writes %X/%X; messages print the server's form (19 pads)
my $h_snap_msg = cs_int_to_lsn(cs_lsn_to_int($h_snap));
my $next_seg = sprintf("$gdir/wal/%016x.wal", $first_seg + 1);
ok($first_seg > 0 && (-e $next_seg || -e "$next_seg.gz"),
	"the horizon keeps segments from $first_seg on, and there are more");

# -> '' when cs_decode.py finds $gdir sound, else its output
sub cs_decode_problems
{
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(['python3', "$FindBin::Bin/../scripts/cs_decode.py", '--summary', $gdir],
		'>', \$out, '2>', \$err);
	return $ok ? '' : "$out$err";
}

sub damage_found
{
	my ($label, $re) = @_;
	$node->start;
	my $rows = $node->safe_psql($db, "SELECT file_name || ': ' || problem FROM changestream.verify('$gen')");
	like($rows, $re, "$label: verify() reports it") or diag($rows);
	$node->stop;
	isnt(cs_decode_problems(), '', "$label: cs_decode.py reports it too");
	return;
}

my ($seg_file) = grep { -e "$gdir/wal/$_" } map { sprintf('%016x.wal%s', $first_seg, $_) } ('.gz', '');
rename("$gdir/wal/$seg_file", "$backup/aside") or die "rename: $!";
damage_found('the first segment kept is missing', qr/segments start at $first_seg .*but the first one found is/);
rename("$backup/aside", "$gdir/wal/$seg_file") or die "rename: $!";

my $snap_file = sprintf('%08X%08X.snapshot.gz', map { hex } split m{/}, $h_snap);
rename("$gdir/snapshots/$snap_file", "$backup/aside") or die "rename: $!";
damage_found("the horizon's snapshot is missing", qr/No snapshot is at the generation's retention horizon \Q$h_snap_msg\E/);
rename("$backup/aside", "$gdir/snapshots/$snap_file") or die "rename: $!";

(my $later = $horizon_text) =~ s/^first_segment = \d+$/'first_segment = ' . ($first_seg + 1)/me;
unlink "$gdir/retention";
PostgreSQL::Test::Utils::append_to_file("$gdir/retention", $later);
damage_found('a horizon whose first segment starts after its snapshot',
	qr/retention horizon keeps history from its snapshot \Q$h_snap_msg\E/);

unlink "$gdir/retention";
PostgreSQL::Test::Utils::append_to_file("$gdir/retention", "first_segment = x\n");
damage_found('a damaged horizon file', qr/^retention: .*first_segment/m);

unlink "$gdir/retention";
PostgreSQL::Test::Utils::append_to_file("$gdir/retention", $horizon_text);
is(cs_decode_problems(), '', 'repaired, cs_decode.py finds it sound again');

done_testing();
