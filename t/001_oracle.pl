
# (a) Oracle: a pgbench workload plus hand-written transactions (TRUNCATE,
# DELETE, key-changing UPDATE, REPLICA IDENTITY FULL, unchanged TOAST,
# rolled-back subtransactions, date/time/float values) is archived; the
# archive's BEGIN/INSERT/UPDATE/DELETE/TRUNCATE/COMMIT messages equal those
# of a second pgoutput slot on the same publication, transaction for
# transaction.  With a small segment_size the generation has several WAL
# segments, the sealed ones gzip-compressed and valid gzip files.
#
# The background pgbench runs 7 s at up to 1,000 transactions a second
# (before issue 32: 12 s unthrottled, about 32,000 transactions when the file
# ran alone, all archived and compared in perl, 4,000 under four test files
# at once).  It still outlasts the hand-written transactions (about 4 s);
# 7 s make up to 7,000 transactions (about 2,300 under four files at
# once, at the rate they got then), several times the 500 compared and the
# 3 segments (about 340 transactions each) required.
use File::Basename;
use ChangestreamTest;

my $node = cs_setup('main', conf => qq(
changestream.segment_size = '128kB'
changestream.message_prefixes = 'cs'
changestream.flush_interval = '100ms'
),
	pgbench => 2,
	sql => q{
CREATE TABLE cs_types (
	id int PRIMARY KEY,
	ts timestamptz, d date, iv interval, f8 float8, f4 float4,
	n numeric, t text, arr int[], j jsonb, tm time);
CREATE TABLE cs_full (a int, b text);
ALTER TABLE cs_full REPLICA IDENTITY FULL;
CREATE TABLE cs_toast (id int PRIMARY KEY, small int, big text);
ALTER TABLE cs_toast ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE not_published (id int);
CREATE PUBLICATION changestream FOR TABLE
	pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history,
	cs_types, cs_full, cs_toast;
},
	oracle => 1);

# Archiving is off: the worker runs but has nothing to do.
cs_wait_state($node, 'disabled', name => 'state is disabled without a directory');

cs_start_archiving($node);
my ($gen0) = cs_single_generation($node, 'after start');
like($gen0 // '', qr/^[0-9a-f]{16}$/, 'generation name is 16 lowercase hex digits');
my $st = cs_status($node);
is($st->{slot}, 'changestream', 'status() names the slot');
is($st->{database}, 'postgres', 'status() names the database');
is($st->{generation}, $gen0, 'status() shows the current generation');
is($node->safe_psql('postgres',
	"SELECT plugin || ' ' || database FROM pg_replication_slots WHERE slot_name = 'changestream'"),
	'pgoutput postgres', 'the worker created its pgoutput slot');
is(cs_worker_pid($node), $st->{pid}, "status().pid is the 'changestream archiver' backend");

# Concurrent load: pgbench in the background, hand-written transactions in
# the foreground.
my $bench = cs_pgbench_bg($node, 'postgres', '-c', '4', '-j', '2', '-T', '7',
	'-R', '1000', '-n');

$node->safe_psql(
	'postgres', q{
INSERT INTO cs_types
SELECT g,
	'2021-03-14 01:59:26.535897+00'::timestamptz + g * interval '1 day 1 hour',
	date '1999-12-31' + g,
	make_interval(years => g, months => 2, days => g, hours => 3, secs => 1.5::float8),
	1.0 / (g + 2), (1.0 / (g + 3))::float4,
	1.0 / (g + 7), 'row ' || g || E' \\ \n tab\t ''q''',
	ARRAY[g, -g, NULL], jsonb_build_object('g', g, 'x', 0.1 * g), '23:59:59.999'
FROM generate_series(1, 200) g;
UPDATE cs_types SET f8 = f8 * 3, ts = ts - interval '7 months' WHERE id % 3 = 0;
UPDATE cs_types SET id = id + 10000 WHERE id <= 5;
DELETE FROM cs_types WHERE id % 7 = 0;
INSERT INTO cs_full SELECT g, 'full ' || g FROM generate_series(1, 50) g;
UPDATE cs_full SET b = b || '!' WHERE a % 2 = 0;
DELETE FROM cs_full WHERE a > 40;
INSERT INTO cs_toast SELECT g, g,
	(SELECT string_agg(md5(g::text || i::text), '') FROM generate_series(1, 200) i)
FROM generate_series(1, 20) g;
UPDATE cs_toast SET small = small + 1;
INSERT INTO not_published VALUES (1), (2);
SELECT pg_logical_emit_message(false, 'cs', 'non-transactional');
});
$node->safe_psql(
	'postgres', q{
BEGIN;
INSERT INTO cs_types (id, t) VALUES (100001, 'kept');
SAVEPOINT s1;
INSERT INTO cs_types (id, t) VALUES (100002, 'rolled back');
ROLLBACK TO SAVEPOINT s1;
INSERT INTO cs_types (id, t) VALUES (100003, 'kept too');
SELECT pg_logical_emit_message(true, 'cs', 'in a transaction');
COMMIT;
BEGIN;
INSERT INTO cs_types (id, t) VALUES (100004, 'never');
ROLLBACK;
});
for my $round (1 .. 3)
{
	$node->safe_psql('postgres', 'TRUNCATE pgbench_history');
	$node->safe_psql('postgres',
		"DELETE FROM pgbench_accounts WHERE aid % 97 = $round");
	$node->safe_psql('postgres',
		"BEGIN; TRUNCATE cs_full; INSERT INTO cs_full VALUES ($round, 'after truncate'); COMMIT;");
	$node->safe_psql('postgres',
		"UPDATE pgbench_branches SET bbalance = bbalance + $round");
	cs_sleep(1);
}
my ($bench_ok, $bench_out, $bench_err) = cs_pgbench_finish($bench);
ok($bench_ok, 'background pgbench succeeded') or diag($bench_err);
my ($tps) = $bench_out =~ /number of transactions actually processed: (\d+)/;
note("pgbench processed " . ($tps // '?') . " transactions");

my $target = cs_wait_archived($node, name => 'after the workload');
my ($gen, $start_lsn) = cs_single_generation($node, 'after the workload');
is($gen, $gen0, 'same generation as at start');

my $n = cs_compare_with_oracle(
	$node,
	gen       => $gen,
	start_lsn => $start_lsn,
	target    => $target,
	name      => 'pgbench oracle',
	min_txns  => 500);
note("compared $n transactions");

# wal_records() with bounds returns exactly the transactions whose commit
# LSN is in the range: compare it with the unbounded read, filtered here.
{
	my @all = cs_fetch_archive($node, $gen);
	my ($all_tx) = cs_group_txns(\@all);
	my $lo = cs_lsn_to_int($start_lsn);
	my $hi = cs_lsn_to_int($target);
	my @want = map { join(',', @{ $_->{msgs} }) }
	  grep { $_->{commit_int} >= $lo && $_->{commit_int} <= $hi } @$all_tx;
	my $out = $node->safe_psql('postgres',
		"SELECT encode(data, 'hex') FROM changestream.wal_records('$gen', '$start_lsn', '$target')"
	);
	my ($b_tx) = cs_group_txns([ grep { $_ ne '' } split /\n/, $out ]);
	my @got = map { join(',', @{ $_->{msgs} }) } @$b_tx;
	ok(@got == @want && join(';', @got) eq join(';', @want),
		'wal_records(gen, start, target) returns the transactions of that commit range')
	  or diag("bounded: " . scalar(@got) . " transactions, expected " . scalar(@want));
	my $after = grep { $_->{commit_int} > $hi } @$all_tx;
	cmp_ok($after, '>=', 1,
		'the fence transaction beyond the target is archived too');
}

# Values are rendered with the pinned settings, not the server's unusual
# defaults (SQL, DMY; America/New_York).  Row 2 (id now 10002) was inserted
# and then had its key changed: both messages carry its timestamptz.
my $ts_iso = $node->safe_psql('postgres',
	"SET datestyle = ISO; SET timezone = UTC; SELECT ts::text FROM cs_types WHERE id = 10002");
my $ts_default = $node->safe_psql('postgres',
	"SELECT ts::text FROM cs_types WHERE id = 10002");
isnt($ts_default, $ts_iso, "server defaults render it differently ($ts_default)");
is($node->safe_psql('postgres',
	"SELECT count(*) FROM changestream.wal_records('$gen') WHERE get_byte(data, 0) IN (73, 85) "
	  . "AND position(convert_to('$ts_iso', 'UTF8') in data) > 0"),
	'2', "timestamptz values are archived in ISO format, UTC ($ts_iso)");
is($node->safe_psql('postgres',
	"SELECT count(*) FROM changestream.wal_records('$gen') "
	  . "WHERE position(convert_to('$ts_default', 'UTF8') in data) > 0"),
	'0', 'and never with the server defaults');

# Messages that are not compared with the oracle are archived as well.
my %types = map { split /\|/ } split /\n/, $node->safe_psql('postgres',
	"SELECT chr(get_byte(data, 0)), count(*) FROM changestream.wal_records('$gen') GROUP BY 1");
cmp_ok($types{R} // 0, '>=', 7, 'Relation messages are archived (one per published table at least)');
cmp_ok($types{M} // 0, '>=', 2, 'logical decoding messages are archived');
cmp_ok($types{T} // 0, '>=', 6, 'TRUNCATE messages are archived');

# Segments: several, the sealed ones compressed, files match wal_segments().
cs_poll_or_diag($node, 'postgres',
	"SELECT count(*) FILTER (WHERE NOT compressed) = 1 AND count(*) >= 3 "
	  . "AND bool_and(compressed OR segment_index = (SELECT max(segment_index) FROM changestream.wal_segments('$gen'))) "
	  . "FROM changestream.wal_segments('$gen')",
	't', 60, 'several segments, every sealed one compressed, only the newest raw');

my @segs = cs_wal_segments($node, $gen);
note("segments: " . scalar(@segs));
my @files = grep { !/\.tmp$/ } cs_archive_files($node, $gen);
is_deeply([ sort @files ],
	[ sort map { basename($_->{file}) } @segs ],
	'wal_segments() lists exactly the files of the wal directory');
ok((grep { !/^[0-9a-f]{16}\.wal(\.gz)?$/ } @files) == 0,
	'segment files are named <16 hex digits>.wal[.gz]')
  or diag("files: @files");
my $contiguous = 1;
my $ordered    = 1;
for my $i (1 .. $#segs)
{
	$contiguous = 0 if $segs[$i]{index} != $segs[ $i - 1 ]{index} + 1;
	$ordered = 0
	  unless cs_lsn_ge($segs[$i]{start}, $segs[ $i - 1 ]{end})
	  && cs_lsn_ge($segs[$i]{end}, $segs[$i]{start});
}
ok($contiguous, 'segment indexes are contiguous');
ok($ordered, 'segment LSN ranges are ordered and do not overlap')
  or diag(join("\n", map { "$_->{index} $_->{start}..$_->{end}" } @segs));
ok(cs_lsn_ge($segs[-1]{end}, $target), 'newest segment ends at or after the target');
cs_gzip_test($node, $gen, 'sealed segments');

my $g = $node->safe_psql('postgres',
	"SELECT wal_count, size_bytes, snapshot_count FROM changestream.generation_stats('$gen')");
my ($wal_count, $size) = split /\|/, $g;
is($wal_count, scalar(@segs), 'generation_stats().wal_count = number of segments');
my $seg_bytes = 0;
$seg_bytes += $_->{size} for @segs;
cmp_ok($size, '>=', $seg_bytes, 'generation size_bytes covers its segments');

# A worker that stops cleanly and starts again continues the generation.
$node->restart;
cs_wait_state($node, 'streaming', name => 'streaming after a clean restart');
cs_pgbench($node, 'postgres', '-c', '2', '-t', '100', '-n');
my $target2 = cs_wait_archived($node, name => 'after restart');
my ($gen2, $start2) = cs_single_generation($node, 'after a clean restart');
is($gen2, $gen, 'a clean restart keeps the generation');
cs_compare_with_oracle(
	$node,
	gen       => $gen2,
	start_lsn => $start2,
	target    => $target2,
	name      => 'oracle after a clean restart',
	min_txns  => $n + 200);

$node->stop;
done_testing();
