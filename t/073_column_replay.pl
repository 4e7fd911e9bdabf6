# restore() replays column changes from the schema history by attnum
# (restore_columns.c): adversarial DDL sequences.  After each step the
# test records pg_current_wal_lsn() and, per table of the source, its
# columns (name and type, by name) and a digest of its rows (text forms
# in the source's column order); every recorded point is then restored
# into a scratch schema (in a transaction rolled back) with skip_inexact,
# and each table must be equal to the source there or refused (the
# WARNING names it and it is absent), never different.  A dry run to the
# same point must count the tables and changes the real run restores,
# and restores with a tables filter and with the point as a target_time
# must give those tables as the full restore does.
#
# Inputs: a column dropped and added again under its name in one ALTER
# and across statements (same and another type); a three-way rotation of
# names and a rename to a name dropped before; ALTER and changes in one
# transaction, before and after it; an ALTER rolled back, and one in a
# subtransaction rolled back; a partition whose columns are in another
# order than its parent's; an inheritance child with a column of its
# own; a generated column dropped, and one made ordinary (DROP
# EXPRESSION) in a table with rows (refused up to the next snapshot) and
# in an empty one; REPLICA IDENTITY FULL with an UPDATE after a column came
# back; ADD COLUMN NOT NULL DEFAULT on an empty table; exact retypes
# with a DROP and ADD in one ALTER; a table created
# after the snapshot and altered; a take_snapshot() in between; a typed
# table whose type loses and gains an attribute (ALTER TYPE ... CASCADE);
# a column dropped by DROP DOMAIN ... CASCADE; a typed table with rows
# whose type's attribute is retyped (float8 to numeric: refused) and
# renamed; a typed partitioned table (DROP and ADD ATTRIBUTE in one
# ALTER TYPE, RENAME ATTRIBUTE); DROP TYPE ... CASCADE dropping a typed
# table and another table's column; DROP DOMAIN ... CASCADE dropping
# columns of two tables and of a partitioned table, in a transaction with
# changes before and after; DROP FUNCTION ... CASCADE dropping a
# generated column; DROP COLLATION ... CASCADE; a schema renamed (no
# record) before an ALTER TABLE that changes columns; an ALTER run under
# REPEATABLE READ after another session altered the table's columns,
# renamed it, or created it (a typed table among them: ALTER TYPE ...
# RENAME ATTRIBUTE CASCADE; a DROP DOMAIN ... CASCADE).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;

my $db = 'postgres';
my $S = $ChangestreamTest::ORACLE_SETTINGS;

my $node = cs_setup('colreplay', conf => "changestream.recapture_delay = -1\n", sql => q{
CREATE TYPE ctyp AS (id int, b int, c text);
CREATE DOMAIN dpos AS int CHECK (VALUE > 0);
CREATE DOMAIN ddef AS int;
CREATE TABLE c_domdef (id int PRIMARY KEY, b int);
CREATE TABLE c_readd (id int PRIMARY KEY, b int, c text);
CREATE TABLE c_rot (id int PRIMARY KEY, x text, y text, z text);
CREATE TABLE c_tx (id int PRIMARY KEY, b int, c int);
CREATE TABLE c_sub (id int PRIMARY KEY, b int);
CREATE TABLE c_part (id int, b int, c text) PARTITION BY RANGE (id);
CREATE TABLE c_part1 (c text, b int, id int);
ALTER TABLE c_part ATTACH PARTITION c_part1 FOR VALUES FROM (1) TO (11);
CREATE TABLE c_part2 PARTITION OF c_part FOR VALUES FROM (11) TO (21);
ALTER TABLE c_part1 REPLICA IDENTITY FULL;
ALTER TABLE c_part2 REPLICA IDENTITY FULL;
CREATE TABLE c_inh (id int PRIMARY KEY, b int);
CREATE TABLE c_inh_child (own int, PRIMARY KEY (id)) INHERITS (c_inh);
CREATE TABLE c_gen (id int PRIMARY KEY, v int, g int GENERATED ALWAYS AS (v * 2) STORED);
CREATE TABLE c_gen2 (id int PRIMARY KEY, v int, g int GENERATED ALWAYS AS (v * 3) STORED);
CREATE TABLE c_mix (id int PRIMARY KEY, a int, b text, c varchar(5));
CREATE TABLE c_gen3 (id int PRIMARY KEY, v int, g int GENERATED ALWAYS AS (v * 4) STORED);
CREATE TABLE c_full (id int, b int, c text);
ALTER TABLE c_full REPLICA IDENTITY FULL;
CREATE TABLE c_empty (id int PRIMARY KEY);
CREATE TABLE c_typed OF ctyp (PRIMARY KEY (id));
CREATE TABLE c_dom (id int PRIMARY KEY, d dpos, e int);
CREATE TABLE c_rr (id int PRIMARY KEY, b int, c int);
CREATE TABLE c_rr2 (id int PRIMARY KEY, b int);
CREATE TABLE c_rr3 (id int PRIMARY KEY, b int);
CREATE SCHEMA s1;
CREATE TABLE s1.c_sch (id int PRIMARY KEY, b int, c text);
CREATE TYPE ctyp2 AS (id int, f float8, r text);
CREATE TABLE c_typed2 OF ctyp2 (PRIMARY KEY (id));
CREATE TYPE ctyp3 AS (id int, b int, c text);
CREATE TABLE c_tpart OF ctyp3 PARTITION BY RANGE (id);
CREATE TABLE c_tpart1 PARTITION OF c_tpart FOR VALUES FROM (1) TO (100);
ALTER TABLE c_tpart1 REPLICA IDENTITY FULL;
CREATE TYPE ctyp4 AS (p int, q int);
CREATE TABLE c_typed4 OF ctyp4 (PRIMARY KEY (p));
CREATE TABLE c_tcol (id int PRIMARY KEY, v ctyp4, w int);
CREATE DOMAIN dd2 AS int;
CREATE TABLE c_d1 (id int PRIMARY KEY, x dd2, y int);
CREATE TABLE c_d2 (id int PRIMARY KEY, x dd2);
CREATE TABLE c_dpart (id int, x dd2, y int) PARTITION BY RANGE (id);
CREATE TABLE c_dpart1 PARTITION OF c_dpart FOR VALUES FROM (1) TO (100);
ALTER TABLE c_dpart1 REPLICA IDENTITY FULL;
CREATE FUNCTION f2(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 2';
CREATE TABLE c_fgen (id int PRIMARY KEY, v int, g int GENERATED ALWAYS AS (f2(v)) STORED);
CREATE COLLATION ccoll (provider = libc, locale = 'C');
CREATE TABLE c_coll (id int PRIMARY KEY, t text COLLATE ccoll, u text);
CREATE TYPE ctyp5 AS (id int, b int, c text);
CREATE PUBLICATION changestream FOR TABLES IN SCHEMA public, s1;
});
cs_start_archiving($node);

my @steps;

# Each table of the source: "name type" of its columns (by name), and md5
# of its rows' text forms in the source's column order.
sub table_sql
{
	my ($schema, $table, $cols) = @_;
	# c_dom's domain is dropped and created again: restore() reads types
	# as this database has them now, so its column's type is left out
	my $type = $table =~ /^c_(dom|d1|d2|dpart1|tcol|coll|fgen|rrd)$/ ? "''" : 'format_type(a.atttypid, a.atttypmod)';
	return qq{SELECT '$table', (SELECT string_agg(a.attname || ' ' || $type, ',' ORDER BY a.attname)
		  FROM pg_attribute a WHERE a.attrelid = to_regclass('$schema.$table') AND a.attnum > 0 AND NOT a.attisdropped)
		|| ' ' || (SELECT md5(coalesce(string_agg(r, '|' ORDER BY r), ''))
		FROM (SELECT ROW($cols)::text AS r FROM ONLY $schema.$table) x)};
}

sub record_step
{
	my ($name) = @_;
	my $cols = $node->safe_psql($db, q{
		SELECT c.relname, string_agg(quote_ident(a.attname), ',' ORDER BY a.attnum)
		FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
		WHERE c.relnamespace IN (SELECT oid FROM pg_namespace WHERE nspname IN ('public', 's1', 's2'))
		  AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
		GROUP BY c.relname ORDER BY c.relname});
	my %cols = map { split /\|/, $_, 2 } split /\n/, $cols;
	my @tables = sort keys %cols;
	my %schema = map { split /\|/, $_, 2 } split /\n/, $node->safe_psql($db, q{
		SELECT relname, relnamespace::regnamespace FROM pg_class
		WHERE relnamespace IN (SELECT oid FROM pg_namespace WHERE nspname IN ('public', 's1', 's2'))
		  AND relkind = 'r'});
	my $out = $node->safe_psql($db, "$S SELECT pg_current_wal_lsn() || ' ' || clock_timestamp();\n"
		  . join(";\n", map { table_sql($schema{$_}, $_, $cols{$_}) } @tables));
	my @lines = split /\n/, $out;
	my ($lsn, $time) = split / /, shift(@lines), 2;
	my %digest = map { split /\|/, $_, 2 } @lines;
	push @steps, { name => $name, lsn => $lsn, time => $time, tables => \@tables, cols => \%cols,
		digest => \%digest };
	note("step $name at $lsn");
	return;
}

sub step
{
	my ($name, $sql) = @_;
	$node->safe_psql($db, $sql);
	record_step($name);
	return;
}

step('rows', q{
INSERT INTO c_readd SELECT i, i, 'c' || i FROM generate_series(1, 5) i;
INSERT INTO c_rot SELECT i, 'x' || i, 'y' || i, 'z' || i FROM generate_series(1, 5) i;
INSERT INTO c_tx SELECT i, i, i FROM generate_series(1, 5) i;
INSERT INTO c_sub SELECT i, i FROM generate_series(1, 5) i;
INSERT INTO c_part SELECT i, i, 'c' || i FROM generate_series(1, 20) i;
INSERT INTO c_inh SELECT i, i FROM generate_series(1, 3) i;
INSERT INTO c_inh_child SELECT i, i, -i FROM generate_series(4, 6) i;
INSERT INTO c_gen (id, v) SELECT i, i FROM generate_series(1, 5) i;
INSERT INTO c_gen2 (id, v) SELECT i, i FROM generate_series(1, 5) i;
INSERT INTO c_full SELECT i, i, 'c' || i FROM generate_series(1, 5) i;
INSERT INTO c_typed SELECT i, i, 'c' || i FROM generate_series(1, 5) i;
INSERT INTO c_dom SELECT i, i, i FROM generate_series(1, 5) i;
INSERT INTO c_rr SELECT i, i, i FROM generate_series(1, 5) i;
INSERT INTO c_mix SELECT i, i, 'b' || i, 'c' || i FROM generate_series(1, 5) i;
INSERT INTO s1.c_sch SELECT i, i, 'c' || i FROM generate_series(1, 5) i;
INSERT INTO c_rr2 SELECT i, i FROM generate_series(1, 5) i;
INSERT INTO c_rr3 SELECT i, i FROM generate_series(1, 5) i;
INSERT INTO c_domdef SELECT i, i FROM generate_series(1, 5) i;
INSERT INTO c_typed2 SELECT i, i * 0.1::float8 + 0.2::float8, 'r' || i FROM generate_series(1, 5) i;
INSERT INTO c_tpart SELECT i, i, 'c' || i FROM generate_series(1, 5) i;
INSERT INTO c_typed4 SELECT i, i FROM generate_series(1, 5) i;
INSERT INTO c_tcol SELECT i, format('(%s,%s)', i, i)::ctyp4, i FROM generate_series(1, 5) i;
INSERT INTO c_d1 SELECT i, i, i FROM generate_series(1, 5) i;
INSERT INTO c_d2 SELECT i, i FROM generate_series(1, 5) i;
INSERT INTO c_dpart SELECT i, i, i FROM generate_series(1, 5) i;
INSERT INTO c_fgen (id, v) SELECT i, i FROM generate_series(1, 5) i;
INSERT INTO c_coll SELECT i, 't' || i, 'u' || i FROM generate_series(1, 5) i;
});
step('DROP and ADD of one name in one ALTER, rotation of three names', q{
ALTER TABLE c_readd DROP COLUMN b, ADD COLUMN b int;
BEGIN;
ALTER TABLE c_rot RENAME COLUMN x TO t;
ALTER TABLE c_rot RENAME COLUMN y TO x;
ALTER TABLE c_rot RENAME COLUMN z TO y;
ALTER TABLE c_rot RENAME COLUMN t TO z;
COMMIT;
});
step('DROP and ADD across statements with another type, rename to a dropped name', q{
ALTER TABLE c_readd DROP COLUMN c;
ALTER TABLE c_readd ADD COLUMN c int;
ALTER TABLE c_rot DROP COLUMN x;
ALTER TABLE c_rot RENAME COLUMN y TO x;
});
step('ALTER and changes in one transaction', q{
BEGIN;
INSERT INTO c_tx VALUES (6, 6, 6);
ALTER TABLE c_tx DROP COLUMN b;
INSERT INTO c_tx VALUES (7, 7);
ALTER TABLE c_tx ADD COLUMN b int;
UPDATE c_tx SET b = 100 WHERE id IN (1, 7);
ALTER TABLE c_tx RENAME COLUMN c TO b2;
ALTER TABLE c_tx RENAME COLUMN b TO c;
ALTER TABLE c_tx RENAME COLUMN b2 TO b;
COMMIT;
});
step('ALTER rolled back, ALTER in a subtransaction rolled back', q{
BEGIN;
ALTER TABLE c_readd DROP COLUMN c;
ROLLBACK;
BEGIN;
SAVEPOINT s;
ALTER TABLE c_sub DROP COLUMN b;
ALTER TABLE c_sub ADD COLUMN b int;
ROLLBACK TO s;
SAVEPOINT s2;
ALTER TABLE c_sub RENAME COLUMN b TO bb;
ALTER TABLE c_sub ADD COLUMN b int;
RELEASE s2;
UPDATE c_sub SET b = 9 WHERE id = 2;
COMMIT;
});
step('partitioned table and inheritance parent: DROP and ADD, RENAME', q{
ALTER TABLE c_part DROP COLUMN b, ADD COLUMN b int;
ALTER TABLE c_part RENAME COLUMN c TO cc;
ALTER TABLE c_inh DROP COLUMN b;
ALTER TABLE c_inh ADD COLUMN b int;
});
step('changes of the partitions and the child', q{
UPDATE c_part SET b = id * 10 WHERE id IN (2, 12);
DELETE FROM c_part WHERE id IN (3, 13);
UPDATE c_inh_child SET own = 0 WHERE id = 4;
});
step('generated column dropped and added as ordinary, one made ordinary', q{
ALTER TABLE c_gen2 DROP COLUMN g;
ALTER TABLE c_gen2 ADD COLUMN g int;
ALTER TABLE c_gen ALTER COLUMN g DROP EXPRESSION;
ALTER TABLE c_gen3 ALTER COLUMN g DROP EXPRESSION;
});
step('changes after the generated columns', q{
UPDATE c_gen SET v = v + 100 WHERE id = 1;
UPDATE c_gen2 SET v = v + 100 WHERE id = 1;
INSERT INTO c_gen3 VALUES (1, 1, 5);
});
step('REPLICA IDENTITY FULL: DROP and ADD, NOT NULL DEFAULT on an empty table', q{
ALTER TABLE c_full DROP COLUMN b, ADD COLUMN b int;
ALTER TABLE c_empty ADD COLUMN n int NOT NULL DEFAULT 5;
ALTER TABLE c_mix ALTER COLUMN a TYPE bigint, DROP COLUMN b, ADD COLUMN b text, ALTER COLUMN c TYPE text;
ALTER TABLE c_domdef ADD COLUMN d ddef;
});
step('changes under REPLICA IDENTITY FULL', q{
UPDATE c_full SET c = 'u' WHERE id = 1;
DELETE FROM c_full WHERE id = 2;
INSERT INTO c_empty VALUES (1);
});
step('a table created, changed and altered', q{
CREATE TABLE c_late (id int PRIMARY KEY, b int, c text);
INSERT INTO c_late SELECT i, i, 'c' || i FROM generate_series(1, 3) i;
ALTER TABLE c_late DROP COLUMN b, ADD COLUMN b int;
ALTER TABLE c_late RENAME COLUMN c TO b0;
CREATE TABLE c_late2 (id int PRIMARY KEY, b int);
ALTER TABLE c_late2 DROP COLUMN b;
ALTER TABLE c_late2 ADD COLUMN b text;
INSERT INTO c_late2 VALUES (1, 'one');
});
step('a snapshot, then DROP and ADD', q{
SELECT changestream.take_snapshot();
ALTER TABLE c_late DROP COLUMN b0, ADD COLUMN b0 text;
ALTER TABLE c_readd DROP COLUMN b;
ALTER TABLE c_readd RENAME COLUMN c TO b;
});
# ALTER SCHEMA ... RENAME records nothing: the ALTER TABLE's record is the
# first to name the table anew, and changes its columns too
step('schema renamed, then DROP and ADD', q{
ALTER SCHEMA s1 RENAME TO s2;
ALTER TABLE s2.c_sch DROP COLUMN b, ADD COLUMN b int;
});
step('a change after the schema renamed', q{UPDATE s2.c_sch SET c = c || '!' WHERE id = 1});
step('typed table: ALTER TYPE DROP and ADD ATTRIBUTE CASCADE', q{
ALTER TYPE ctyp DROP ATTRIBUTE b CASCADE;
ALTER TYPE ctyp ADD ATTRIBUTE b int CASCADE;
});
step('typed table: a change after', q{UPDATE c_typed SET c = c || '!' WHERE id = 1});
step('DROP DOMAIN CASCADE drops a column', q{DROP DOMAIN dpos CASCADE});
step('typed tables: ALTER ATTRIBUTE TYPE, RENAME ATTRIBUTE, DROP and ADD ATTRIBUTE CASCADE', q{
ALTER TYPE ctyp2 ALTER ATTRIBUTE f TYPE numeric CASCADE;
ALTER TYPE ctyp2 RENAME ATTRIBUTE r TO r2 CASCADE;
ALTER TYPE ctyp3 DROP ATTRIBUTE b CASCADE, ADD ATTRIBUTE b int CASCADE;
ALTER TYPE ctyp3 RENAME ATTRIBUTE c TO cc CASCADE;
});
step('changes after the typed tables, DROP TYPE CASCADE: a typed table dropped, a column dropped', q{
UPDATE c_tpart SET b = 7 WHERE id = 2; UPDATE c_typed2 SET r2 = r2 || '!' WHERE id = 1;
DROP TYPE ctyp4 CASCADE});
step('DROP DOMAIN CASCADE in a transaction with changes before and after', q{
BEGIN;
UPDATE c_d1 SET y = -y WHERE id = 1;
INSERT INTO c_dpart VALUES (6, 6, 6);
DROP DOMAIN dd2 CASCADE;
UPDATE c_d1 SET y = y * 10 WHERE id = 2;
INSERT INTO c_d2 VALUES (9);
INSERT INTO c_dpart VALUES (7, 7);
ALTER TABLE c_d1 ADD COLUMN x int;
UPDATE c_d1 SET x = 1 WHERE id = 3;
COMMIT;
});
step('DROP FUNCTION CASCADE drops a generated column, DROP COLLATION CASCADE a column', q{
DROP FUNCTION f2(int) CASCADE;
DROP COLLATION ccoll CASCADE;
});
step('the column dropped by DROP DOMAIN added again, changes after DROP FUNCTION and DROP COLLATION', q{
UPDATE c_fgen SET v = -v WHERE id = 1; UPDATE c_coll SET u = 'x' WHERE id = 1;
CREATE DOMAIN dd2 AS int; CREATE TYPE ctyp4 AS (p int, q int);
CREATE FUNCTION f2(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 2';
CREATE COLLATION ccoll (provider = libc, locale = 'C');
CREATE DOMAIN dpos AS int CHECK (VALUE > 0); ALTER TABLE c_dom ADD COLUMN d int});

# REPEATABLE READ: the ALTER's definition is read by a transaction whose
# snapshot predates the other session's column changes
my $rr = $node->background_psql($db);
$rr->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1');
$node->safe_psql($db, q{
ALTER TABLE c_rr DROP COLUMN b;
ALTER TABLE c_rr2 ADD COLUMN n int;
INSERT INTO c_rr2 VALUES (6, 6, 60);
ALTER TABLE c_rr3 RENAME TO c_rr3n;
CREATE TABLE c_rr4 (id int PRIMARY KEY, a text, b text);
INSERT INTO c_rr4 SELECT i, 'a' || i, 'b' || i FROM generate_series(1, 5) i;
CREATE TABLE c_rrt OF ctyp5 (PRIMARY KEY (id));
INSERT INTO c_rrt SELECT i, i, 'c' || i FROM generate_series(1, 5) i;
CREATE TABLE c_rrd (id int PRIMARY KEY, x dd2, y int);
INSERT INTO c_rrd SELECT i, i, i FROM generate_series(1, 5) i;
});
$rr->query_safe('SET client_min_messages = warning; ALTER TABLE c_rr ADD CONSTRAINT c_rr_id CHECK (id > 0); ALTER TABLE c_rr2 ADD CONSTRAINT c_rr2_id CHECK (id > 0); '
	. 'ALTER TABLE c_rr3n ADD CONSTRAINT c_rr3_id CHECK (id > 0); '
	. 'ALTER TABLE c_rr4 RENAME COLUMN a TO t; ALTER TABLE c_rr4 RENAME COLUMN b TO a; '
	. 'ALTER TABLE c_rr4 RENAME COLUMN t TO b; '
	. 'ALTER TYPE ctyp5 RENAME ATTRIBUTE c TO cc CASCADE; '
	. 'DROP DOMAIN dd2 CASCADE; COMMIT');
$rr->quit;
note($node->safe_psql($db, q{SELECT string_agg(table_name || ' ' || command_tag || ' ' || coalesce(object_type, '') || ' ' || rows_changed, '; ' ORDER BY id) FROM changestream.ddl_history WHERE table_name LIKE 'c_rr%' OR table_name LIKE 'c_t%'}));
record_step('ALTER under REPEATABLE READ after another session\'s column changes');
step('changes after the REPEATABLE READ ALTER', q{UPDATE c_rr SET c = -c WHERE id = 1; UPDATE c_rr2 SET b = -b WHERE id = 1;
	UPDATE c_rr3n SET b = -b WHERE id = 1;
	UPDATE c_rr4 SET a = a || '!' WHERE id = 1;
	UPDATE c_rrt SET b = 1 WHERE id = 1; UPDATE c_rrd SET y = -y WHERE id = 1;
	ALTER DOMAIN ddef SET DEFAULT 7; CREATE DOMAIN dd2 AS int});
cs_wait_archived($node, name => 'workload');

# ---------- restore() at every point ----------

my %count = (equal => 0, refused => 0, wrong => 0);
my %wrong_at;    # table => first step it differs at
for my $i (0 .. $#steps)
{
	my $step = $steps[$i];
	my $sql = "$S BEGIN; SELECT tables, changes, restored_tables FROM changestream.restore('r', target_lsn => '$step->{lsn}', skip_inexact => true);\n"
	  . join(";\n", map { table_sql('r', $_, $step->{cols}{$_}) } @{ $step->{tables} })
	  . ";\nSELECT 'extra', string_agg(relname, ',' ORDER BY relname) FROM pg_class
		 WHERE relnamespace = to_regnamespace('r') AND relkind = 'r';\nROLLBACK;";
	my ($o, $e) = ('', '');
	$node->psql($db, $sql, stdout => \$o, stderr => \$e, on_error_stop => 0,
		extra_params => [ '-v', 'ON_ERROR_ROLLBACK=on' ]);
	my @lines = split /\n/, $o;
	my $restored = shift @lines // '';
	my %got = map { split /\|/, $_, 2 } @lines;
	my %refused = map { $_ => 1 } ($e =~ /WARNING:\s+table "public\.(\w+)" cannot be restored exactly/g);
	ok($restored =~ /^\d+\|\d+\|/, "step '$step->{name}': restore with skip_inexact succeeds") or diag($e);
	my @wrong;
	for my $t (@{ $step->{tables} })
	{
		if ($refused{$t} && !defined $got{$t})
		{
			$count{refused}++;
		}
		elsif (!$refused{$t} && ($got{$t} // 'missing') eq $step->{digest}{$t})
		{
			$count{equal}++;
		}
		else
		{
			$count{wrong}++;
			push @wrong, $t;
			$wrong_at{$t} //= $step->{name};
			diag("$t at '$step->{name}': restored " . ($got{$t} // 'missing') . "\n  source   $step->{digest}{$t}");
		}
	}
	$step->{c_gen_refused} = $refused{c_gen};
	note("step '$step->{name}': refused: " . join(' ', sort keys %refused));
	is("@wrong", '', "step '$step->{name}': no table differs from the source")
	  or diag($e);
	my %source = map { $_ => 1 } @{ $step->{tables} };
	my @extra = grep { !$source{$_} } split /,/, ($got{extra} // '');
	is("@extra", '', "step '$step->{name}': no table the source does not have");

	# the dry run counts what the real run restores, and refuses the same
	my ($od, $ed) = ('', '');
	$node->psql($db, "$S SELECT tables, changes, restored_tables FROM changestream.restore('r', target_lsn => '$step->{lsn}', skip_inexact => true, dry_run => true)",
		stdout => \$od, stderr => \$ed);
	my %drefused = map { $_ => 1 } ($ed =~ /WARNING:\s+table "public\.(\w+)" cannot be restored exactly/g);
	is($od, $restored, "step '$step->{name}': the dry run counts the real run's tables and changes");

	# a tables filter (names at the point), and the point as a time (with
	# the filter too: a restore of every table costs as much as the one
	# above)
	my @some = grep { /^c_(readd|rot|sch|tx|full|part1|late|d1|dpart1|typed2|tcol|fgen)$/ } @{ $step->{tables} };
	my $filter = "tables => '{" . join(',', @some) . "}'";
	for my $args ("target_lsn => '$step->{lsn}', $filter", "target_time => '$step->{time}', $filter")
	{
		my ($of, $ef) = ('', '');
		$node->psql($db, "$S BEGIN; SELECT tables FROM changestream.restore('r', $args, skip_inexact => true);\n"
			  . join(";\n", map { table_sql('r', $_, $step->{cols}{$_}) } @some) . ";\nROLLBACK;",
			stdout => \$of, stderr => \$ef, on_error_stop => 0,
			extra_params => [ '-v', 'ON_ERROR_ROLLBACK=on' ]);
		my @fl = split /\n/, $of;
		shift @fl;
		my %fgot = map { split /\|/, $_, 2 } @fl;
		is(join(' ', map { $fgot{$_} // 'missing' } @some), join(' ', map { $got{$_} // 'missing' } @some),
			"step '$step->{name}': restored with " . ($args =~ /^target_time/ ? 'target_time' : 'a tables filter') . ", those tables are as without")
		  or diag($ef);
	}
	is(join(' ', sort keys %drefused), join(' ', sort keys %refused),
		"step '$step->{name}': the dry run refuses the real run's tables");
}

# the generated column made ordinary: its values were never published,
# so the table is refused from the command to the next snapshot
my ($gen_step) = grep { $steps[$_]{name} =~ /one made ordinary/ } 0 .. $#steps;
my ($snap_step) = grep { $steps[$_]{name} =~ /^a snapshot/ } 0 .. $#steps;
my @gen_refused = grep { $steps[$_]{c_gen_refused} } 0 .. $#steps;
is("@gen_refused", join(' ', $gen_step .. $snap_step - 1),
	'a table whose generated column was made ordinary (DROP EXPRESSION) is refused up to the next snapshot');

my $summary = "tables x points: $count{equal} equal, $count{refused} refused, $count{wrong} wrong";
diag($summary);
diag("first wrong: " . join(', ', map { "$_ at '$wrong_at{$_}'" } sort keys %wrong_at)) if %wrong_at;
is($count{wrong}, 0, 'no table differs silently from the source');
ok($count{equal} > 0, 'tables are restored');

$node->stop;
done_testing();
