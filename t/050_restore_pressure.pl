# restore() under pressure (issue 35, section 3): changestream.tables(),
# names that match nothing, the dry run, the row filter and the recipe
# that puts deleted rows back into the live table.
#
# The source: acc (3000 rows, primary key aid), other (renamed to other2
# later), both in the generation's opening snapshot; after it, updates
# in place, keys moved out of and into aid < 1000, inserts and deletes on
# both sides of it; then point P1 (its LSN, and the source's rows copied
# to an unpublished oracle table o1).  After P1, later_t is created and
# written (it exists in the generation only after P1), other is renamed
# to other2, and the accident: DELETE FROM acc WHERE aid < 1000, then a
# live update the recipe must keep.
#
# tables() must list every name with the source's OID, whether the
# opening snapshot holds it, its columns and the changes made under it
# (counted by the test from the statements' row counts).  A name that
# matches nothing in the generation is 42P01 with close names in DETAIL
# (restore() and changes()); a name created after the target still
# restores (nothing of it).  The dry run reports what the real restore
# then does (same snapshot, snapshot rows, transactions, changes, tables;
# with each row filter too, the snapshot rows that satisfy it; across the
# schema history: a rename, a dropped table) and creates and changes
# nothing.  The row filter restores exactly the oracle's rows
# that satisfy it, at P1 and at the end, on the key and on a non-key
# column that updates move across; SQL other than one expression over the
# table's columns is refused.  The recipe (INSERT ... SELECT ... ON
# CONFLICT DO NOTHING) gives back the oracle's deleted rows and keeps the
# live table's later changes.  restore_progress shows a restore held up in
# its apply (an uncommitted row of another session holds the key an
# archived insert needs) from another session: phase, the snapshot read
# whole (bytes done = the file's size), the target and the last applied
# LSN between the snapshot and it; the row goes when the restore ends.
use strict;
use warnings;

use ChangestreamTest;
use IPC::Run;

my $db = 'postgres';

my $node = cs_setup('pressure', sql => q{
CREATE TABLE acc (aid int PRIMARY KEY, abalance int NOT NULL, filler text);
INSERT INTO acc SELECT i, i * 3, 'f' || i FROM generate_series(1, 3000) i;
CREATE TABLE other (id int PRIMARY KEY, v text);
INSERT INTO other SELECT i, 'o' || i FROM generate_series(1, 20) i;
CREATE SCHEMA x;
CREATE TABLE x.big (id int PRIMARY KEY, grp int, payload text);
ALTER TABLE x.big ALTER payload SET STORAGE EXTERNAL;
INSERT INTO x.big SELECT i, i,
	(SELECT string_agg(md5(i::text || '.' || j::text), '') FROM generate_series(1, 100) j)
  FROM generate_series(1, 20) i;
CREATE TABLE x.fullt (a int, b text);
ALTER TABLE x.fullt REPLICA IDENTITY FULL;
INSERT INTO x.fullt SELECT i, 'b' || i FROM generate_series(1, 50) i;
CREATE TABLE x.ddlt (id int PRIMARY KEY, v int);
INSERT INTO x.ddlt SELECT i, i FROM generate_series(1, 60) i;
CREATE PUBLICATION changestream FOR TABLE acc, other, x.big, x.fullt, x.ddlt;
}, archive => 1);

# the changes made under each name, from the statements' row counts
my %changes = (acc => 0, other => 0, other2 => 0, later_t => 0);

sub run_counted
{
	my ($table, $sql) = @_;
	my $n = $node->safe_psql($db,
		"WITH x AS ($sql RETURNING 1) SELECT count(*) FROM x");
	$changes{$table} += $n;
	return $n;
}

run_counted('acc', 'UPDATE acc SET abalance = abalance + 1 WHERE aid % 7 = 0');
run_counted('acc', 'UPDATE acc SET aid = aid + 10000 WHERE aid BETWEEN 900 AND 909');
run_counted('acc', 'DELETE FROM acc WHERE aid BETWEEN 500 AND 509');
run_counted('acc', q{INSERT INTO acc SELECT i, i, 'n' || i FROM generate_series(3001, 3010) i});
run_counted('acc', 'UPDATE acc SET aid = aid - 2501 WHERE aid BETWEEN 3001 AND 3010');
run_counted('acc', q{INSERT INTO acc VALUES (0, 7, 'zero'), (-5, 8, 'neg'), (5000, 9, 'big')});
run_counted('acc', 'DELETE FROM acc WHERE aid IN (100, 2000)');
run_counted('acc', 'UPDATE acc SET abalance = abalance + 1 WHERE aid BETWEEN 990 AND 1010');
run_counted('other', q{UPDATE other SET v = v || 'u' WHERE id <= 2});
# x.big: updates that leave the TOASTed payload unchanged (not archived)
$node->safe_psql($db, 'UPDATE x.big SET grp = grp + 100 WHERE id <= 5');
# x.fullt (REPLICA IDENTITY FULL): values moved across a filter, deletes
$node->safe_psql($db, 'UPDATE x.fullt SET a = a + 1 WHERE a % 5 = 0; DELETE FROM x.fullt WHERE a % 7 = 0');
# x.ddlt: a column added, then updates across a filter
$node->safe_psql($db, 'ALTER TABLE x.ddlt ADD COLUMN w int');
$node->safe_psql($db, 'UPDATE x.ddlt SET w = id, v = v + 5 WHERE id % 3 = 0');
my $p1 = $node->safe_psql($db, 'SELECT pg_current_wal_lsn()');
my %changes_p1 = %changes;
$node->safe_psql($db, 'CREATE TABLE o1 AS SELECT * FROM acc; CREATE TABLE ob AS SELECT * FROM x.big;
	CREATE TABLE of AS SELECT * FROM x.fullt; CREATE TABLE od AS SELECT * FROM x.ddlt');
my $t1 = $node->safe_psql($db, 'SELECT clock_timestamp()');

# after P1: a new table, a rename, the accident, a live update
$node->safe_psql($db, q{
CREATE TABLE later_t (id int PRIMARY KEY, w text);
ALTER PUBLICATION changestream ADD TABLE later_t;
});
run_counted('later_t', q{INSERT INTO later_t SELECT i, 'w' || i FROM generate_series(1, 3) i});
$node->safe_psql($db, 'ALTER TABLE other RENAME TO other2');
run_counted('other2', q{UPDATE other2 SET v = v || 'r' WHERE id = 3});
my $deleted = run_counted('acc', 'DELETE FROM acc WHERE aid < 1000');
run_counted('acc', 'UPDATE acc SET abalance = -1 WHERE aid = 1500');
cs_wait_archived($node, name => 'history');
my ($gen) = cs_single_generation($node, 'pressure');

# ---------- tables() ----------

my %oid = map { $_ => $node->safe_psql($db, "SELECT '$_'::regclass::oid") }
  qw(acc other2 later_t);
$oid{other} = $oid{other2};
my %in_snapshot = (acc => 't', other => 't', other2 => 'f', later_t => 'f');
my %columns = (acc => '{aid,abalance,filler}', other => '{id,v}',
	other2 => '{id,v}', later_t => '{id,w}');
my @rows = cs_rows($node, $db,
	"SELECT table_name, relid, in_snapshot, changes, columns, first_lsn <= last_lsn
	   FROM changestream.tables('$gen') WHERE schema_name = 'public'
	  ORDER BY table_name",
	qw(name relid in_snapshot changes columns ordered));
is(join(',', map { $_->{name} } @rows), 'acc,later_t,other,other2',
	'tables(): every name the generation holds, the renamed table under both');
for my $r (@rows)
{
	my $t = $r->{name};
	is( "$r->{relid} $r->{in_snapshot} $r->{changes} $r->{columns} $r->{ordered}",
		"$oid{$t} $in_snapshot{$t} $changes{$t} $columns{$t} t",
		"tables(): $t: the source's OID, snapshot presence, change count, columns");
}
is($node->safe_psql($db,
		"SELECT count(*) FROM changestream.tables() WHERE table_name IN ('ddl_history', 'o1')"),
	'0', 'tables(): neither the schema history table nor a table it names but the archive holds no data of (o1) is listed');

# ---------- names that match nothing ----------

sub psql_error
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql($db, "\\set VERBOSITY verbose\n$sql");
	return $ret == 0 ? "(no error) $out" : $err;
}

my $err = psql_error(
	"SELECT * FROM changestream.restore('r1', tables => '{accc}')");
like($err, qr/ERROR:  42P01: table "accc" \(in tables\) matches no table archived in generation $gen/,
	'restore(): an unmatched name is 42P01');
like($err, qr/DETAIL:  Close names the generation holds: "public\.acc"/,
	'restore(): the DETAIL names the close archived name');
$err = psql_error(
	"SELECT * FROM changestream.restore('r1', tables => '{acc, public.OTHER2}')");
like($err, qr/42P01: .*"public\.OTHER2".*\n.*DETAIL:  Close names the generation holds: "public\.other2"/,
	'restore(): a name in another case is refused, the archived spelling proposed');
$err = psql_error(
	"SELECT * FROM changestream.restore('r1', tables => '{zzzzzzzzzzzz}')");
like($err, qr/DETAIL:  None of the \d+ table names the generation holds is close to it/,
	'restore(): a name close to nothing says so');
is($node->safe_psql($db, "SELECT count(*) FROM pg_namespace WHERE nspname = 'r1'"),
	'0', 'restore(): nothing created by a refused name');
$err = psql_error(
	"SELECT count(*) FROM changestream.changes('$gen', relations => '{later}')");
like($err, qr/42P01: table "later" \(in relations\).*\n.*DETAIL:  Close names the generation holds: "public\.later_t"/,
	'changes(): an unmatched relation name is 42P01 with close names');
is($node->safe_psql($db,
		"SELECT count(*) FROM changestream.changes('$gen', relations => '{later_t, other}')
		  WHERE action IN ('insert', 'update', 'delete')"),
	$changes{later_t} + $changes{other},
	'changes(): names of the generation (one only before a rename) are accepted');

# a table created after the target, and a name only after it, still restore
my $r = $node->safe_psql($db,
	"SELECT tables FROM changestream.restore('r2', target_lsn => '$p1', tables => '{acc, later_t, other2}')");
is($r, '1', 'restore(): names of tables created or renamed after the target are accepted (acc alone restored)');
is($node->safe_psql($db,
		"SELECT (SELECT count(*) FROM r2.acc) || ' ' || (SELECT count(*) FROM o1) || ' '
		     || (SELECT count(*) FROM (SELECT * FROM r2.acc EXCEPT SELECT * FROM o1) x)
		     || ' ' || (to_regclass('r2.later_t') IS NULL)"),
	$node->safe_psql($db, 'SELECT count(*) FROM o1') . ' '
	  . $node->safe_psql($db, 'SELECT count(*) FROM o1') . ' 0 true',
	'restore(): acc restored at P1 equals the oracle; later_t not created');

# ---------- the dry run ----------

my $cols = 'generation, snapshot_lsn, restored_lsn, restored_commit_time, tables, '
  . 'transactions, changes, snapshot_bytes > 0, wal_bytes, restored_tables';
$node->safe_psql($db, 'CREATE SCHEMA dx; CREATE TABLE dx.acc (LIKE public.acc INCLUDING ALL)');
my $dry = $node->safe_psql($db, qq{
BEGIN;
SELECT $cols, dry_run, snapshot_rows
  FROM changestream.restore('dx', target_lsn => '$p1', tables => '{acc}', dry_run => true);
SELECT pg_current_xact_id_if_assigned() IS NULL;
COMMIT;});
my @dry = split /\n/, $dry;
is($dry[1], 't', 'dry run: no transaction ID assigned (nothing written)');
my $dry_new = $node->safe_psql($db, qq{
BEGIN;
SELECT $cols FROM changestream.restore('d1', target_lsn => '$p1', tables => '{acc, later_t}', dry_run => true);
SELECT pg_current_xact_id_if_assigned() IS NULL;
COMMIT;});
is((split /\n/, $dry_new)[1], 't', 'dry run into a schema to create: nothing written');
is($node->safe_psql($db, "SELECT count(*) FROM dx.acc") . ' '
	  . $node->safe_psql($db, "SELECT count(*) FROM pg_namespace WHERE nspname = 'd1'"),
	'0 0', 'dry run: the existing target stays empty, no schema created');
my $real = $node->safe_psql($db,
	"SELECT $cols, dry_run, snapshot_rows FROM changestream.restore('dx', target_lsn => '$p1', tables => '{acc}')");
my ($dry_row) = $dry[0];
$dry_row =~ s/\|t\|(\d+)$//;
my $dry_snapshot_rows = $1;
like($dry[0], qr/\|t\|\d+$/, 'dry run: dry_run true');
my $real_row = $real;
$real_row =~ s/\|f\|(\d+)$//;
is($dry_row, $real_row,
	'dry run: the same snapshot, restored LSN and time, tables, transactions, changes and sizes as the restore then');
is($1, 3000, 'restore: snapshot_rows is the rows acc had at the snapshot');
is($dry_snapshot_rows, 3000, 'dry run: snapshot_rows is the rows the restore loads');
like($dry_row, qr/\|1\|\d+\|$changes_p1{acc}\|t\|\d+\|\{public\.acc\}$/,
	'dry run: one table, the changes made to acc from the snapshot to P1');
is($dry_new, $dry[0] =~ s/\|t\|\d+$//r . "\nt",
	'dry run: a table created after the target is not counted');

# ---------- the row filter ----------

sub same_rows
{
	my ($restored, $oracle) = @_;
	return $node->safe_psql($db, qq{
SELECT (SELECT count(*) FROM $restored) || ' ' || (SELECT count(*) FROM $oracle) || ' '
	|| (SELECT count(*) FROM (SELECT * FROM $restored EXCEPT SELECT * FROM $oracle) x) || ' '
	|| (SELECT count(*) FROM (SELECT * FROM $oracle EXCEPT SELECT * FROM $restored) y)});
}

sub oracle_count
{
	my ($oracle) = @_;
	my $n = $node->safe_psql($db, "SELECT count(*) FROM $oracle");
	return "$n $n 0 0";
}

# A dry run, then the restore with the same arguments: the dry run's
# tables, snapshot rows, transactions, changes, restored LSN and tables are
# the restore's (or its error is).  Returns the restore's row.
my $dry_cols = 'tables, snapshot_rows, transactions, changes, restored_lsn, restored_tables';
sub dry_then_real
{
	my ($schema, $args, $what) = @_;
	my $q = "SELECT $dry_cols FROM changestream.restore('$schema', $args";
	my $dry = psql_error("$q, dry_run => true)");
	my $real = psql_error("$q)");
	s/\b$schema\./TARGET./g for ($dry, $real);
	is($dry, $real, "dry run $what: what the restore then does ($real)");
	return $real;
}

my $f1 = dry_then_real('f1', "target_lsn => '$p1', tables => '{acc}', row_filter => 'aid < 1000'",
	'with a row filter on the key');
$f1 = (split /\|/, $f1)[1];
is($f1, $node->safe_psql($db, 'SELECT count(*) FROM generate_series(1, 3000) i WHERE i < 1000'),
	'row filter: the snapshot load keeps only the rows that satisfy it');
is(same_rows('f1.acc', '(SELECT * FROM o1 WHERE aid < 1000) o'),
	oracle_count('(SELECT * FROM o1 WHERE aid < 1000) o'),
	'row filter on the key at P1: exactly the oracle rows with aid < 1000 (keys moved in and out)');
dry_then_real('f2', "target_lsn => '$p1', tables => '{acc}', row_filter => 'abalance % 2 = 0'",
	'with a row filter on a non-key column');
is(same_rows('f2.acc', '(SELECT * FROM o1 WHERE abalance % 2 = 0) o'),
	oracle_count('(SELECT * FROM o1 WHERE abalance % 2 = 0) o'),
	'row filter on a column updates move across: exactly the oracle rows');
dry_then_real('f3', "tables => '{acc}', row_filter => \$\$aid BETWEEN 1000 AND 1600 OR filler LIKE 'n%'\$\$",
	'to the end with a row filter on a text column');
# restored to its snapshot alone: the table holds what the dry run counts
my $fs_lsn = $node->safe_psql($db,
	"SELECT snapshot_lsn FROM changestream.restore('fs', target_lsn => '$p1', tables => '{acc}', dry_run => true)");
my $fs = dry_then_real('fs', "target_lsn => '$fs_lsn', tables => '{acc}', row_filter => \$\$abalance % 2 = 0 AND filler LIKE 'f1%'\$\$",
	'to the snapshot with a row filter');
is((split /\|/, $fs)[1] . ' ' . (split /\|/, $fs)[2],
	$node->safe_psql($db, 'SELECT count(*) FROM fs.acc') . ' 0',
	'restored to its snapshot: the table holds the rows the dry run counted, no transaction applied');
is($node->safe_psql($db, 'SELECT count(*) FROM fs.acc'),
	$node->safe_psql($db, q{SELECT count(*) FROM generate_series(1, 3000) i WHERE (i * 3) % 2 = 0 AND ('f' || i) LIKE 'f1%'}),
	'restored to its snapshot with the filter: the rows of the source that satisfy it');
is(same_rows('f3.acc', q{(SELECT * FROM acc WHERE aid BETWEEN 1000 AND 1600 OR filler LIKE 'n%') o}),
	oracle_count(q{(SELECT * FROM acc WHERE aid BETWEEN 1000 AND 1600 OR filler LIKE 'n%') o}),
	'row filter at the end of the archive: exactly the live rows that satisfy it');

for my $bad (
	[ q{aid < 1000; DROP TABLE acc}, qr/22023: row_filter must be one SQL expression/, 'a second statement' ],
	[ q{aid < 1000 FROM acc}, qr/22023: row_filter must be one SQL expression/, 'a FROM clause' ],
	[ q{aid < 1000) FROM acc WHERE (true}, qr/42601: syntax error at or near "\)"(.|\n)*QUERY:  SELECT aid < 1000\) FROM/,
		'a parenthesis closing the expression' ],
	[ q{aid IN (SELECT 1)}, qr/0A000: cannot use subquery/, 'a subquery' ],
	[ q{random() < 0.5}, qr/0A000: row_filter must not call a volatile function/, 'a volatile function' ],
	[ q{nosuch = 1}, qr/42703: column "nosuch" does not exist(.|\n)*CONTEXT:  row_filter on table acc/,
		'a column the table lacks (the error names the filter and the table)' ],
	[ q{aid +}, qr/42601: syntax error/, 'a syntax error' ])
{
	my ($text, $re, $what) = @$bad;
	$text =~ s/'/''/g;
	like(psql_error("SELECT * FROM changestream.restore('fx', tables => '{acc}', row_filter => '$text')"),
		$re, "row filter: $what is refused");
}
like(psql_error("SELECT * FROM changestream.restore('fx', row_filter => 'aid < 1000')"),
	qr/22023: row_filter needs the tables argument/, 'row filter: refused without tables');
is($node->safe_psql($db, "SELECT count(*) FROM pg_namespace WHERE nspname = 'fx'") . ' '
	  . $node->safe_psql($db, "SELECT to_regclass('public.acc') IS NOT NULL"),
	'0 t', 'row filter: the refused calls created nothing and dropped nothing');

# unchanged TOASTed values: rows outside the filter are skipped, rows moved
# out deleted; a row moving in without its payload is refused
dry_then_real('g1', "target_lsn => '$p1', tables => '{x.big}', row_filter => 'id > 10'",
	'over TOASTed values');
is(same_rows('g1.big', '(SELECT * FROM ob WHERE id > 10) o'),
	oracle_count('(SELECT * FROM ob WHERE id > 10) o'),
	'row filter: updates without their TOASTed payload, outside the filter, are skipped');
dry_then_real('g3', "target_lsn => '$p1', tables => '{x.big}', row_filter => 'grp > 3 AND grp < 8'",
	'over rows moved out');
is(same_rows('g3.big', '(SELECT * FROM ob WHERE grp > 3 AND grp < 8) o'),
	oracle_count('(SELECT * FROM ob WHERE grp > 3 AND grp < 8) o'),
	'row filter: rows moved out by updates without their TOASTed payload are removed');
like(psql_error("SELECT * FROM changestream.restore('g2', target_lsn => '$p1', tables => '{x.big}', row_filter => 'grp >= 100')"),
	qr/0A000: row_filter cannot be applied to an update of "g2\.big": the row may enter the filter/,
	'row filter: a row moving in without its unchanged TOASTed value is refused');
dry_then_real('g4', "target_lsn => '$p1', tables => '{x.fullt}', row_filter => 'a % 2 = 0'",
	'under REPLICA IDENTITY FULL');
is(same_rows('g4.fullt', '(SELECT * FROM of WHERE a % 2 = 0) o'),
	oracle_count('(SELECT * FROM of WHERE a % 2 = 0) o'),
	'row filter under REPLICA IDENTITY FULL: exactly the oracle rows');
dry_then_real('g5', "target_lsn => '$p1', tables => '{x.ddlt}', row_filter => 'v < 40'",
	'across an added column');
is(same_rows('g5.ddlt', '(SELECT * FROM od WHERE v < 40) o'),
	oracle_count('(SELECT * FROM od WHERE v < 40) o'),
	'row filter across an added column: exactly the oracle rows');

# ---------- the recipe: undo the accidental DELETE into the live table ----------

$node->safe_psql($db, 'CREATE TABLE live_before AS SELECT * FROM acc');
my $recipe = $node->safe_psql($db, qq{
BEGIN;
SELECT tables FROM changestream.restore('undo', target_time => '$t1',
	tables => '{public.acc}', row_filter => 'aid < 1000');
WITH put_back AS (
	INSERT INTO public.acc SELECT * FROM undo.acc ON CONFLICT DO NOTHING RETURNING 1)
SELECT count(*) FROM put_back;
DROP SCHEMA undo CASCADE;
COMMIT;});
is($recipe, "1\n$deleted", 'recipe: every row the DELETE removed is put back');
is(same_rows('acc',
		'(SELECT * FROM live_before UNION ALL SELECT * FROM o1 WHERE aid < 1000) o'),
	oracle_count('(SELECT * FROM live_before UNION ALL SELECT * FROM o1 WHERE aid < 1000) o'),
	'recipe: the live table holds its later changes and the deleted rows as they were');

# ---------- the dry run across the schema history ----------

# a rename (other to other2) and a table created after P1, to the end
dry_then_real('h1', "tables => '{acc, other2, later_t}'", 'across a rename and a new table');
# a dropped table: counted up to its drop, then not restored
$node->safe_psql($db, q{UPDATE x.fullt SET b = b || 'd' WHERE a < 10; DROP TABLE x.fullt});
cs_wait_archived($node, name => 'drop');
like(dry_then_real('h2', "tables => '{x.fullt, x.ddlt}'", 'across a dropped table'),
	qr/\|\{x\.ddlt\}$/, 'the dropped table is not restored');

# ---------- restore_progress ----------

$node->safe_psql($db, 'CREATE SCHEMA px; CREATE TABLE px.acc (LIKE public.acc INCLUDING ALL)');
my $blocker = $node->background_psql($db);
$blocker->query_safe(q{BEGIN; INSERT INTO px.acc VALUES (0, 0, 'blocker')});
my ($rout, $rerr) = ('', '');
my $restorer = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr($db), '-c',
		"SELECT tables, changes FROM changestream.restore('px', target_lsn => '$p1', tables => '{acc}')" ],
	'>', \$rout, '2>', \$rerr);
cs_poll_or_diag($node, $db,
	q{SELECT count(*) FROM changestream.restore_progress p JOIN pg_stat_activity a USING (pid)
	   WHERE a.wait_event_type = 'Lock' AND p.phase = 'applying changes'},
	'1', 120, 'restore_progress: the held-up restore is seen applying changes from another session');
my ($snapfile) = glob(cs_archive_dir($node) . "/generations/$gen/snapshots/*");
my $snap_lsn = $node->safe_psql($db, "SELECT snapshot_lsn FROM changestream.restore('dx2', target_lsn => '$p1', tables => '{acc}', dry_run => true)");
is($node->safe_psql($db, qq{
SELECT datname || ' ' || usename || ' ' || dry_run || ' ' || generation || ' ' || target_lsn || ' '
	|| snapshot_lsn || ' ' || snapshot_bytes_total || ' ' || (snapshot_bytes_done = snapshot_bytes_total) || ' '
	|| (applied_lsn > snapshot_lsn AND applied_lsn <= target_lsn) || ' ' || (transactions > 0) || ' '
	|| tables || ' ' || (target_time IS NULL)
  FROM changestream.restore_progress}),
	"$db " . $node->safe_psql($db, 'SELECT current_user') . " false $gen $p1 $snap_lsn " . (-s $snapfile)
	  . ' true true true 1 true',
	'restore_progress: database, user, target, snapshot (bytes read = the file size), applied LSN between snapshot and target');
is($node->safe_psql($db, q{SELECT has_table_privilege('changestream_reader', 'changestream.restore_progress', 'SELECT')
	AND has_table_privilege('pg_monitor', 'changestream.restore_progress', 'SELECT')
	AND NOT has_table_privilege('public', 'changestream.restore_progress', 'SELECT')}),
	't', 'restore_progress: readable by changestream_reader and pg_monitor, not PUBLIC');
$blocker->query_safe('ROLLBACK');
$blocker->quit;
$restorer->finish;
is("$rout|$rerr", "1|$changes_p1{acc}\n|", 'the held-up restore completes');
is($node->safe_psql($db, 'SELECT count(*) FROM changestream.restore_progress'), '0',
	'restore_progress: no row once the restore has ended');

done_testing();
