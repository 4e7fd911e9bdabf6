
# Snapshot hand-off: the opening snapshot of a generation lines up exactly
# with the stream.  A 300,000-row table is loaded before the archiver
# starts; archiving is then switched on (changestream.directory + reload)
# while a concurrent workload inserts rows with unique ids, deletes some
# and updates some.  The worker creates its slot with SNAPSHOT 'use' and
# copies the table in that snapshot while the workload goes on.  When the
# workload has ended and the archive has caught up:
#   ids in the snapshot + ids of archived INSERTs with commit LSN >= the
#   snapshot LSN - ids of archived DELETEs = the table's final ids, exactly,
# and, stronger, replaying every archived change (commit LSN >= snapshot
# LSN) onto the snapshot's rows never inserts a row that is already there
# (doubled) nor updates/deletes one that is not (lost), and ends with
# exactly the table's final rows, values included.
#
# Two smaller published tables, copied after the big one, are changed by
# DDL while the big one is being copied: zt is truncated and refilled
# (TRUNCATE is not MVCC-safe, but it is in the stream), zz is rewritten by
# ALTER TABLE ... TYPE (not MVCC-safe either, and nothing of it is in the
# stream): each must still equal its snapshot plus its archived changes.
#
# Size: 300,000 rows (1,000,000 before issue 32: reading and replaying the
# snapshot in perl cost about a minute of CPU, in proportion to the rows).
# The copy of the big table (status() reports it every 100 ms, the test
# looks every 50 ms) still lasts long enough to be seen and to have the DDL
# start during it, and the workload (14 s, rate 300/s) commits hundreds of
# transactions before, during and after it: the hand-off is proved on the
# same mix, on fewer untouched rows.  The workload's deletes and updates
# pick among the table's $ROWS ids.
use IPC::Run;
use Time::HiRes qw(time usleep);
use ChangestreamTest;
use SnapshotTest;

my $ROWS = 300_000;
my $T    = 14;    # seconds of workload

my $node = cs_setup('handoff', conf => qq(
changestream.flush_interval = '100ms'
max_wal_size = '1GB'
checkpoint_timeout = '15min'
));

my $t0 = time();
$node->safe_psql(
	'postgres', qq{
CREATE TABLE big (id bigint PRIMARY KEY, v text NOT NULL, n int NOT NULL);
INSERT INTO big SELECT g, md5(g::text), g % 1000 FROM generate_series(1, $ROWS) g;
CREATE SEQUENCE big_ids START 2000001;
CREATE TABLE zt (id int PRIMARY KEY, v text);
INSERT INTO zt SELECT g, 'before' FROM generate_series(1, 1000) g;
CREATE TABLE zz (id int PRIMARY KEY, n int);
INSERT INTO zz SELECT g, g FROM generate_series(1, 1000) g;
CREATE PUBLICATION changestream FOR TABLE big, zt, zz;
VACUUM ANALYZE big;
});
note(sprintf("loaded %d rows in %.1fs", $ROWS, time() - $t0));
cs_wait_state($node, 'disabled', name => 'archiving is off before the directory is set');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_replication_slots'),
	'0', 'no slot yet');

# The workload: multi-statement transactions (two inserts, a delete of an
# original row, an update), single inserts, deletes of rows the workload
# itself inserted, and slow transactions.
my $txn = snap_write_script('handoff_txn.sql', qq{
\\set d random(1, $ROWS)
\\set u random(1, $ROWS)
BEGIN;
INSERT INTO big (id, v, n) VALUES (nextval('big_ids'), 'w' || :client_id, 1);
INSERT INTO big (id, v, n) VALUES (nextval('big_ids'), 'x' || :client_id, 2);
DELETE FROM big WHERE id = :d;
UPDATE big SET n = n + 1, v = 'u' || :client_id WHERE id = :u;
END;
});
my $single = snap_write_script('handoff_single.sql', q{
INSERT INTO big (id, v, n) VALUES (nextval('big_ids'), 's', 3);
});
my $del = snap_write_script('handoff_del.sql', q{
DELETE FROM big WHERE id = (SELECT max(id) FROM big) - 1;
});

# Slow transactions: open across the slot's creation, they commit after
# its consistent point, so they must be in the stream, not the snapshot.
my $slow = snap_write_script('handoff_slow.sql', q{
BEGIN;
INSERT INTO big (id, v, n) VALUES (nextval('big_ids'), 'slow', 4);
SELECT pg_sleep(0.3);
DELETE FROM big WHERE id = currval('big_ids') - 7;
INSERT INTO big (id, v, n) VALUES (nextval('big_ids'), 'slow', 5);
END;
});

my $off   = cs_log_offset($node);
my $bench = cs_pgbench_bg($node, 'postgres', '-n', '-c', '4', '-j', '4',
	'-T', $T, '-R', '300', "-f", "$txn\@8", '-f', "$single\@4", '-f', "$del\@2", '-f', "$slow\@1");
my $bench_start = time();
cs_sleep(1);    # the workload is running before the slot is created

my $dir = cs_archive_dir($node);
$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.directory = '$dir'; SELECT pg_reload_conf();");

# Watch the opening snapshot while the workload runs.  As soon as the big
# table is being copied, run the DDL on zt and zz (in the background: a
# snapshot that locks its tables makes it wait).
my ($seen_table, $max_rows, %waits, $streaming_at, $ddl) = ('', 0);
my ($ddl_out, $ddl_err, $ddl_started) = ('', '');
my $deadline = time() + 80;
while (time() < $deadline)
{
	my $s = $node->safe_psql('postgres',
		"SELECT state, coalesce(snapshot_table, ''), coalesce(snapshot_rows, 0), "
		  . "coalesce(waiting_for, '') FROM changestream.status()");
	my ($state, $table, $rows, $waiting) = split /\|/, $s;
	if ($table eq 'public.big' && !$ddl)
	{
		$ddl_started = time();
		$ddl = IPC::Run::start(
			[
				'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
				'-c', "BEGIN; TRUNCATE zt; INSERT INTO zt SELECT g, 'after' FROM generate_series(1, 10) g; COMMIT;",
				'-c', 'ALTER TABLE zz ALTER COLUMN n TYPE bigint',
				'-c', 'SELECT extract(epoch FROM clock_timestamp())'
			],
			'>', \$ddl_out, '2>', \$ddl_err);
	}
	if ($table ne '' && $bench->{run}->pumpable)
	{
		$seen_table = $table if $seen_table eq '' || $table eq 'public.big';
		$max_rows = $rows if $table eq 'public.big' && $rows > $max_rows;
	}
	$waits{$waiting}++ if $waiting ne '';
	if ($state eq 'streaming')
	{
		$streaming_at = time();
		last;
	}
	usleep(50_000);
}
ok(defined $streaming_at, 'the archiver streams after its opening snapshot');
my $bench_running = $bench->{run}->pumpable;
note(sprintf("streaming %.1fs after the workload started; waits seen: %s",
		($streaming_at // time()) - $bench_start, join('; ', keys %waits) || 'none'));
is($seen_table, 'public.big',
	'status().snapshot_table showed the table being copied while the workload ran');
cmp_ok($max_rows, '>', 0, "status().snapshot_rows showed progress ($max_rows rows)");
ok($bench_running, 'the workload was still running when the snapshot was done');
is($node->safe_psql('postgres',
		"SELECT coalesce(snapshot_table, '') || '|' || coalesce(waiting_for, '') FROM changestream.status()"),
	'|', 'status() shows no snapshot in progress afterwards');

ok($ddl, 'DDL on zt and zz started while the big table was being copied');
my $ddl_ok = $ddl && eval { $ddl->finish; 1 } && $ddl->result == 0;
ok($ddl_ok, 'TRUNCATE zt and ALTER TABLE zz ... TYPE bigint done') or diag($ddl_err);
my ($ddl_done_at) = $ddl_out =~ /^([0-9.]+)$/m;
note(sprintf("the DDL finished %.2fs after it started, %s the snapshot ended",
		($ddl_done_at // 0) - ($ddl_started // 0),
		($ddl_done_at // 0) < ($streaming_at // 0) ? 'before' : 'after'));

my ($ok, $bout, $berr) = cs_pgbench_finish($bench);
ok($ok, 'workload finished') or diag("$berr\n$bout");
my ($ntx) = $bout =~ /number of transactions actually processed: (\d+)/;
note("workload: " . ($ntx // '?') . " transactions");
cs_wait_archived($node, name => 'after the workload');

############################################################################
# The generation and its snapshot

my ($gen, $start) = cs_single_generation($node, 'hand-off');
my @snaps = snap_list($node, $gen);
is(scalar(@snaps), 1, 'the generation has one snapshot');
is($snaps[0]{lsn}, $start, "the snapshot's LSN is the generation's start_lsn $start");
is($node->safe_psql('postgres',
		"SELECT snapshot_count FROM changestream.generations() WHERE generation = '$gen'"),
	'1', 'generations().snapshot_count = 1');
my $log = cs_log_since($node, $off);
like($log, qr/created replication slot "changestream" at \Q$start\E/,
	'log: the slot was created at the snapshot LSN');
like($log, qr/started generation $gen at \Q$start\E/, 'log: the generation starts there');
my ($logged_rows) = $log =~ /snapshot at \Q$start\E written: 3 tables, (\d+) rows/;
ok(defined $logged_rows, 'log: the snapshot was written');

$t0 = time();
my $snap = snap_check_file($node, $gen, $snaps[0], 'opening snapshot');
note(sprintf("snapshot read in %.1fs", time() - $t0));
my $bt = $snap->{tables}{'public.big'};
is_deeply($bt->{columns}, [qw(id v n)], 'the COPY section lists id, v, n');
is($logged_rows, $snaps[0]{rows}, 'the logged row count is the file\'s');
my @wrows = grep { $_ > 2_000_000 } keys %{ $bt->{state} };
cmp_ok(scalar(@wrows), '>', 0,
	scalar(@wrows) . ' workload rows committed before the snapshot LSN are in the snapshot');
cmp_ok($bt->{nrows}, '<', $ROWS + 3 * 300 * $T, 'snapshot row count is plausible');

############################################################################
# The archive: every transaction of the generation commits at or after
# the snapshot LSN, and snapshot + archive = the final table.

$t0 = time();
my ($txns, $errors) = snap_fetch_txns($node, $gen);
note(sprintf("%d archived transactions decoded in %.1fs", scalar(@$txns), time() - $t0));
is_deeply($errors, [], 'the archived stream decodes as well-formed pgoutput');
my @early = grep { $_->{commit_int} < cs_lsn_to_int($start) } @$txns;
is(scalar(@early), 0, "no archived transaction commits before the snapshot LSN $start")
  or diag("first: $early[0]{commit}");
my %seen;
my @dup = grep { $seen{ $_->{commit_int} }++ } @$txns;
is(scalar(@dup), 0, 'no transaction archived twice');

my $final = snap_table_state($node, 'postgres', 'big', 'id, v, n');
my $relid = snap_relid($node, 'big');
my $res = snap_verify_at(
	snap        => $snap,
	lsn         => $start,
	table       => 'public.big',
	relid       => $relid,
	txns        => $txns,
	final       => $final,
	name        => 'hand-off',
	min_applied => 100);
note("replayed: $res->{inserts} inserts, $res->{updates} updates, $res->{deletes} deletes")
  if $res;
cmp_ok($res->{deletes} // 0, '>', 0, 'archived deletes were replayed');
cmp_ok($res->{updates} // 0, '>', 0, 'archived updates were replayed');

# The tables changed by DDL during the snapshot.
for my $t (['zt', 'id, v', 'truncated and refilled'], ['zz', 'id, n', 'rewritten by ALTER TABLE'])
{
	my ($name, $cols, $what) = @$t;
	snap_verify_at(
		snap  => $snap,
		lsn   => $start,
		table => "public.$name",
		relid => snap_relid($node, $name),
		txns  => $txns,
		final => snap_table_state($node, 'postgres', $name, $cols),
		name  => "$name ($what during the snapshot)");
}

# Archiving goes on.
$node->safe_psql('postgres', "INSERT INTO big VALUES (9999999, 'after', 0)");
cs_wait_archived($node, name => 'one more insert');
my ($txns2) = snap_fetch_txns($node, $gen, from => cs_int_to_lsn($txns->[-1]{commit_int} + 1));
ok((grep { grep { $_->{op} eq 'I' && $_->{new}[0] eq '9999999' } @{ $_->{changes} } } @$txns2),
	'an insert after the hand-off is archived');

$node->stop;
done_testing();
