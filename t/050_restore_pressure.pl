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
# then does (same snapshot, transactions, changes, tables) and creates
# and changes nothing.  The row filter restores exactly the oracle's rows
# that satisfy it, at P1 and at the end, on the key and on a non-key
# column that updates move across; SQL other than one expression over the
# table's columns is refused.  The recipe (INSERT ... SELECT ... ON
# CONFLICT DO NOTHING) gives back the oracle's deleted rows and keeps the
# live table's later changes.
use strict;
use warnings;

use ChangestreamTest;

my $db = 'postgres';

my $node = cs_setup('pressure', sql => q{
CREATE TABLE acc (aid int PRIMARY KEY, abalance int NOT NULL, filler text);
INSERT INTO acc SELECT i, i * 3, 'f' || i FROM generate_series(1, 3000) i;
CREATE TABLE other (id int PRIMARY KEY, v text);
INSERT INTO other SELECT i, 'o' || i FROM generate_series(1, 20) i;
CREATE PUBLICATION changestream FOR TABLE acc, other;
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
my $p1 = $node->safe_psql($db, 'SELECT pg_current_wal_lsn()');
$node->safe_psql($db, 'CREATE TABLE o1 AS SELECT * FROM acc');

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
like($err, qr/ERROR:  42P01: tables names "accc", which matches no table archived in generation $gen/,
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
like($err, qr/42P01: relations names "later".*\n.*DETAIL:  Close names the generation holds: "public\.later_t"/,
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

done_testing();
