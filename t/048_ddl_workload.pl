# restore() across a DDL workload: every table at every recorded point
# either equals the source or is refused with the documented 0A000
# WARNING (skip_inexact), never different (issue 30, "Done when").
#
# One cluster, one publication (FOR TABLES IN SCHEMA public).  The
# workload runs in steps; after each step the test records
# pg_current_wal_lsn() and, per table of the source (partitions as leaf
# tables), a digest: md5 of the rows' text forms in order, under the
# archive's pinned settings.  Its inputs:
#
# - composite types changed by ALTER TYPE: ADD ATTRIBUTE, RENAME
#   ATTRIBUTE, DROP ATTRIBUTE of a type used by a column directly, through
#   a composite holding it (nested), an array of it and a domain over it;
#   ALTER TABLE ADD/DROP COLUMN of a table whose row type another table's
#   column uses; ALTER ATTRIBUTE TYPE, which PostgreSQL refuses while a
#   table's column uses the type (checked);
# - ALTER COLUMN TYPE ... USING (a rewrite), ADD COLUMN ... DEFAULT, a
#   table renamed without changes afterwards, RENAME COLUMN f TO ff with
#   ADD COLUMN f, a table dropped and re-created under the same name,
#   load-then-add-primary-key then DELETE, a stored generated column,
#   a partition attached and one detached, inheritance (ADD COLUMN DEFAULT
#   on the parent), TRUNCATE, an enum altered (ADD VALUE, RENAME VALUE),
#   SET and DROP NOT NULL, DROP COLUMN, SET DEFAULT, ADD COLUMN of a
#   partitioned table and of an inheritance parent (no change after), a json value with
#   \u0000, a serial column, and a take_snapshot(); last, a table dropped
#   and created again under its name while the extension is absent (no
#   schema history): refused (0A000 naming both OIDs), never mixed.
#
# Re-capture (changestream.recapture_delay, 1 s here): after a step whose
# commands changed rows without archived changes (a schema history
# record with rows_changed, read from the source's ddl_history), the
# archiver takes a snapshot by itself; the test waits for it before the
# next step, so every later point starts from it and the tables those
# commands changed are exact again from the next point on.
#
# Every point is restored into a scratch schema, each in a transaction
# rolled back afterwards (restore() reads the types as this database has
# them now).  A table counts as equal (its digest is the
# source's), refused (named by the WARNING and absent from the target) or
# wrong (anything else, a restore error included); the test prints
# "tables x points: N equal, M refused, K wrong" and fails on any wrong.
# The tables of the altered types (composite shapes, the enum's RENAME
# VALUE; ADD VALUE changes nothing) must be refused at every point up to
# the last such command (before it, their restored columns would have the
# type as it is now, not as the archived values have it), and equal
# from the next point on (after the re-capture).  A table whose last ALTER TABLE before
# the point had no change after it (ADD and DROP COLUMN of k_rowsrc, DROP
# COLUMN of w_trunc) is refused: its columns at the point are not
# archived.  RENAME COLUMN f TO ff with ADD COLUMN f is refused.  Without
# the schema history's type records, the composite tables' restores fail
# (their old values do not fit the type now) or differ.
#
# Each table's definition is compared too: restore() gives a table it
# created the source's definition as of the target (docs/DESIGN.md
# section 12), from the snapshot manifest and the schema history records:
# columns with types, NOT NULL, defaults, identity and serial columns,
# stored generated columns (which pgoutput does not publish: restore()
# adds them with their expression, and their values are compared),
# PRIMARY KEY, UNIQUE, CHECK and EXCLUDE constraints, indexes and the
# replica identity, read here from the catalog of both databases by the
# test's own query (definition_sql).  A table counts as equal only when
# its rows and its definition are the source's.  w_def exercises the
# definition alone: constraints and indexes added and dropped with no
# change of the table after them, an identity column, REPLICA IDENTITY
# FULL and USING INDEX.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;

my $db = 'postgres';
my $S = $ChangestreamTest::ORACLE_SETTINGS;

# re-capture: a snapshot one second after a command that changed rows
my $node = cs_setup('ddlwork', conf => "changestream.recapture_delay = '1s'\n", sql => q{
CREATE TYPE comp AS (x int, y text);
CREATE TYPE comp_outer AS (a comp, b int);
CREATE DOMAIN comp_dom AS comp;
CREATE TYPE mood AS ENUM ('sad', 'ok');
CREATE TABLE k_control (id int PRIMARY KEY, n int);
CREATE TABLE k_direct (id int PRIMARY KEY, v comp);
CREATE TABLE k_nested (id int PRIMARY KEY, v comp_outer);
CREATE TABLE k_array (id int PRIMARY KEY, v comp[]);
CREATE TABLE k_domain (id int PRIMARY KEY, v comp_dom);
CREATE TABLE k_rowsrc (id int PRIMARY KEY, b text);
CREATE TABLE k_rowuse (id int PRIMARY KEY, v k_rowsrc);
CREATE TABLE w_using (id int PRIMARY KEY, v int);
CREATE TABLE w_default (id int PRIMARY KEY, v int);
CREATE TABLE w_rename (id int PRIMARY KEY, v int);
CREATE TABLE w_cols (id int PRIMARY KEY, f text, g text);
CREATE TABLE w_reuse (id int PRIMARY KEY, v text);
CREATE TABLE w_loadkey (id int, v int);
CREATE TABLE w_gen (id int PRIMARY KEY, v int, g int GENERATED ALWAYS AS (v * 2) STORED);
CREATE TABLE w_part (id int PRIMARY KEY, v int) PARTITION BY RANGE (id);
CREATE TABLE w_part1 PARTITION OF w_part FOR VALUES FROM (1) TO (11);
CREATE TABLE w_part2 (id int PRIMARY KEY, v int);
CREATE TABLE w_parent (id int PRIMARY KEY, v int);
CREATE TABLE w_child (extra int, PRIMARY KEY (id)) INHERITS (w_parent);
CREATE TABLE w_trunc (id int PRIMARY KEY, v int, u int);
CREATE TABLE w_enum (id int PRIMARY KEY, m mood);
CREATE TABLE w_notnull (id int PRIMARY KEY, v int);
CREATE TABLE w_json (id int PRIMARY KEY, j json);
CREATE TABLE w_serial (id serial PRIMARY KEY, v int);
CREATE TABLE w_gone (id int PRIMARY KEY, v text);
CREATE TABLE w_readd (id int PRIMARY KEY, f int, g text);
CREATE TABLE w_readd2 (id int PRIMARY KEY, f int, g text);
CREATE TABLE w_swap (id int PRIMARY KEY, a text, b text);
CREATE TABLE w_def (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	code text NOT NULL UNIQUE, n int CHECK (n > 0), created int DEFAULT 5);
CREATE INDEX w_def_lower ON w_def (lower(code)) WHERE n > 1;
CREATE PUBLICATION changestream FOR TABLES IN SCHEMA public;
});
cs_start_archiving($node);

my @steps;    # { name, lsn, tables, cols => {t => cols}, digest => {t => md5}, def => {t => text} }

sub record_step
{
	my ($name) = @_;
	my $cols = $node->safe_psql($db, q{
		SELECT c.relname, string_agg(quote_ident(a.attname), ',' ORDER BY a.attnum)
		FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
		WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'
		  AND a.attnum > 0 AND NOT a.attisdropped
		GROUP BY c.relname ORDER BY c.relname});
	my %cols = map { split /\|/, $_, 2 } split /\n/, $cols;
	my @tables = sort keys %cols;
	my $out = $node->safe_psql($db, "$S SELECT pg_current_wal_lsn();\n"
		  . join(";\n", map { digest_sql('public', $_, $cols{$_}) } @tables)
		  . ";\n" . definition_sql('public'));
	my @lines = split /\n/, $out;
	my $lsn = shift @lines;
	my %digest = map { split /\|/, $_, 2 } @lines;
	my %def = map { /^def:(\w+)$/ ? ($1 => normalized($digest{$_})) : () } keys %digest;
	push @steps, { name => $name, lsn => $lsn, tables => \@tables, cols => \%cols,
		digest => \%digest, def => \%def };
	note("step $name at $lsn");
	return;
}

sub digest_sql
{
	my ($schema, $table, $cols) = @_;
	return qq{SELECT '$table', md5(coalesce(string_agg(r, '|' ORDER BY r), ''))
		FROM (SELECT ROW($cols)::text AS r FROM ONLY $schema.$table) x};
}

# Each table's definition, as this test reads it from the catalog (not
# the archiver's query): columns by name with type, NOT NULL, default or
# generated expression and identity; PRIMARY KEY, UNIQUE, CHECK and
# EXCLUDE constraints; every index; the replica identity.  Column order
# is left out (a generated column restore() adds comes last).
sub definition_sql
{
	my ($schema) = @_;
	return qq{SELECT 'def:' || c.relname, concat_ws(' ; ',
		(SELECT string_agg(concat_ws(' ', a.attname, format_type(a.atttypid, a.atttypmod),
				CASE WHEN a.attnotnull THEN 'not null' END,
				CASE WHEN a.attgenerated <> '' THEN 'generated ' || a.attgenerated::text END,
				CASE WHEN d.adbin IS NOT NULL THEN 'expr ' || pg_get_expr(d.adbin, d.adrelid) END,
				CASE WHEN a.attidentity <> '' THEN 'identity ' || a.attidentity::text END), ', '
				ORDER BY a.attname)
		   FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		  WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
		(SELECT string_agg(k.conname || ' ' || pg_get_constraintdef(k.oid), ', ' ORDER BY k.conname)
		   FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype IN ('p', 'u', 'c', 'x')),
		(SELECT string_agg(x.def, ', ' ORDER BY x.def)
		   FROM (SELECT regexp_replace(pg_get_indexdef(i.indexrelid), ' ON (ONLY )?\\S+ ', ' ON ') AS def
				   FROM pg_index i WHERE i.indrelid = c.oid) x),
		'identity ' || c.relreplident::text
		  || coalesce(' ' || (SELECT x.relname FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid
				WHERE i.indrelid = c.oid AND i.indisreplident), ''))
		FROM pg_class c WHERE c.relnamespace = to_regnamespace('$schema') AND c.relkind = 'r'};
}

# Names in expressions (a serial's sequence) are qualified by schema when
# it is not on the search path: the source's public, the restore's r.
sub normalized
{
	my ($text) = @_;
	$text =~ s/\b(?:public|r)\.//g;
	return $text;
}

# Did the step add a schema history record with rows_changed?  (The
# archiver then takes a snapshot by itself: re-capture.)
my $history_id = 0;

sub rows_changed_since_last
{
	my $out = $node->safe_psql($db, qq{
		SELECT coalesce(max(id), 0), coalesce(bool_or(rows_changed) FILTER (WHERE id > $history_id), false)
		FROM changestream.ddl_history});
	my ($max, $changed) = split /\|/, $out;
	$history_id = $max;
	return $changed eq 't';
}

# After a step whose commands changed rows: wait for the re-capture (a
# snapshot after the step's point), so that the next points start from it.
sub step
{
	my ($name, $sql) = @_;
	my $log_offset = -s $node->logfile;
	$node->safe_psql($db, $sql);
	record_step($name);
	return unless rows_changed_since_last();
	$steps[-1]{recaptured} = 1;
	cs_poll_or_diag($node, $db, qq{SELECT count(*) > 0 FROM changestream.snapshots(
			(SELECT max(generation) FROM changestream.generations())) WHERE lsn > '$steps[-1]{lsn}'},
		't', 120, "step '$name': re-captured by a snapshot after it");
	# the archiver has seen the snapshot worker end (a take_snapshot()
	# now finds no snapshot running)
	$node->wait_for_log(qr/tables re-captured by the snapshot at/, $log_offset);
	return;
}

step('rows inserted', q{
INSERT INTO k_control SELECT i, i FROM generate_series(1, 10) i;
INSERT INTO k_direct SELECT i, ROW(i, 'd' || i)::comp FROM generate_series(1, 10) i;
INSERT INTO k_nested SELECT i, ROW(ROW(i, 'n' || i)::comp, -i)::comp_outer FROM generate_series(1, 10) i;
INSERT INTO k_array SELECT i, ARRAY[ROW(i, 'a')::comp, ROW(-i, NULL)::comp] FROM generate_series(1, 10) i;
INSERT INTO k_domain SELECT i, ROW(i, 'm' || i)::comp FROM generate_series(1, 10) i;
INSERT INTO k_rowsrc SELECT i, 'r' || i FROM generate_series(1, 10) i;
INSERT INTO k_rowuse SELECT i, ROW(i, 'u' || i)::k_rowsrc FROM generate_series(1, 10) i;
INSERT INTO w_using SELECT i, i FROM generate_series(1, 10) i;
INSERT INTO w_default SELECT i, i FROM generate_series(1, 10) i;
INSERT INTO w_rename SELECT i, i FROM generate_series(1, 10) i;
INSERT INTO w_cols SELECT i, 'f' || i, 'g' || i FROM generate_series(1, 10) i;
INSERT INTO w_reuse SELECT i, 'old' || i FROM generate_series(1, 10) i;
INSERT INTO w_loadkey SELECT i, i FROM generate_series(1, 10) i;
INSERT INTO w_gen (id, v) SELECT i, i FROM generate_series(1, 10) i;
INSERT INTO w_part SELECT i, i FROM generate_series(1, 10) i;
INSERT INTO w_part2 SELECT i, i FROM generate_series(11, 20) i;
INSERT INTO w_parent SELECT i, i FROM generate_series(1, 10) i;
INSERT INTO w_child SELECT i, i, -i FROM generate_series(11, 20) i;
INSERT INTO w_trunc SELECT i, i, i FROM generate_series(1, 10) i;
INSERT INTO w_enum SELECT i, CASE WHEN i % 2 = 0 THEN 'sad' ELSE 'ok' END::mood FROM generate_series(1, 10) i;
INSERT INTO w_notnull SELECT i, i FROM generate_series(1, 10) i;
INSERT INTO w_json VALUES (1, '{"a": "x\u0000y"}'), (2, '[1, "\u0000"]'), (3, 'null');
INSERT INTO w_serial (v) SELECT i FROM generate_series(1, 10) i;
INSERT INTO w_gone SELECT i, 'first' || i FROM generate_series(1, 10) i;
INSERT INTO w_def (code, n) SELECT 'c' || i, i FROM generate_series(1, 10) i;
INSERT INTO w_readd SELECT i, i, 'g' || i FROM generate_series(1, 10) i;
INSERT INTO w_readd2 SELECT i, i, 'g' || i FROM generate_series(1, 10) i;
INSERT INTO w_swap SELECT i, 'a' || i, 'b' || i FROM generate_series(1, 10) i;
});
step('ALTER TYPE ADD ATTRIBUTE', q{ALTER TYPE comp ADD ATTRIBUTE z int});
step('rows of the composite tables updated', q{
UPDATE k_direct SET v = ROW(100, 'new', 1)::comp WHERE id = 1;
UPDATE k_nested SET v = ROW(ROW(100, 'new', 2)::comp, 0)::comp_outer WHERE id = 1;
UPDATE k_control SET n = -n WHERE id <= 3;
});
step('ALTER TYPE RENAME ATTRIBUTE', q{ALTER TYPE comp RENAME ATTRIBUTE x TO xx});
step('ALTER TYPE DROP ATTRIBUTE', q{ALTER TYPE comp DROP ATTRIBUTE y});
my ($rc, $out, $err) = $node->psql($db, 'ALTER TYPE comp ALTER ATTRIBUTE xx TYPE bigint');
like($err, qr/cannot alter type "comp" because column "\w+\.v" uses it/,
	'ALTER ATTRIBUTE TYPE of a composite type a table column uses is refused by PostgreSQL');
step('ALTER TABLE of a table whose row type a column uses',
	q{ALTER TABLE k_rowsrc ADD COLUMN c int; ALTER TABLE k_rowsrc DROP COLUMN b});
step('ALTER COLUMN TYPE USING and ADD COLUMN DEFAULT', q{
ALTER TABLE w_using ALTER COLUMN v TYPE text USING 'u' || v;
ALTER TABLE w_default ADD COLUMN d int DEFAULT 7;
});
step('RENAME TABLE', q{ALTER TABLE w_rename RENAME TO w_renamed});
step('RENAME COLUMN f TO ff and ADD COLUMN f', q{
ALTER TABLE w_cols RENAME COLUMN f TO ff;
ALTER TABLE w_cols ADD COLUMN f text;
UPDATE w_cols SET f = 'new' WHERE id = 2;
});
# a column dropped and added again under its name and type (its old
# values must not come back), with no change after and with one; column
# names swapped, no change after
step('DROP COLUMN and ADD COLUMN of one name, names swapped', q{
ALTER TABLE w_readd DROP COLUMN f;
ALTER TABLE w_readd ADD COLUMN f int;
ALTER TABLE w_readd2 DROP COLUMN f, ADD COLUMN f int;
UPDATE w_readd2 SET g = g || '!' WHERE id = 1;
ALTER TABLE w_swap RENAME COLUMN a TO tmp;
ALTER TABLE w_swap RENAME COLUMN b TO a;
ALTER TABLE w_swap RENAME COLUMN tmp TO b;
});
step('DROP and CREATE under the same name', q{
DROP TABLE w_reuse;
CREATE TABLE w_reuse (id int PRIMARY KEY, n int);
INSERT INTO w_reuse SELECT i, i * 100 FROM generate_series(1, 5) i;
});
step('load, then ADD PRIMARY KEY, then DELETE', q{
ALTER TABLE w_loadkey ADD PRIMARY KEY (id);
DELETE FROM w_loadkey WHERE id = 3;
UPDATE w_gen SET v = v + 1 WHERE id <= 2;
});
step('partition attached, one detached', q{
ALTER TABLE w_part ATTACH PARTITION w_part2 FOR VALUES FROM (11) TO (21);
ALTER TABLE w_part DETACH PARTITION w_part1;
UPDATE w_part SET v = -v WHERE id = 12;
UPDATE w_part1 SET v = -v WHERE id = 2;
});
step('inheritance: ADD COLUMN DEFAULT on the parent', q{
INSERT INTO w_child VALUES (21, 21, -21);
ALTER TABLE w_parent ADD COLUMN q int DEFAULT 3;
});
step('TRUNCATE', q{TRUNCATE w_trunc; INSERT INTO w_trunc VALUES (1, 1, 1)});
# no change of w_def after these: the definition is the records' alone
step('constraints and indexes added and dropped', q{
ALTER TABLE w_def ADD CONSTRAINT w_def_n_max CHECK (n < 1000) NOT VALID;
CREATE UNIQUE INDEX w_def_code_n ON w_def (code, n);
CREATE INDEX w_def_inc ON w_def (n) INCLUDE (created) WHERE n > 2;
DROP INDEX w_def_lower;
ALTER TABLE w_def ALTER COLUMN created SET NOT NULL, ALTER COLUMN created SET DEFAULT 6;
});
step('replica identity FULL, then USING INDEX', q{
ALTER TABLE w_def REPLICA IDENTITY FULL;
UPDATE w_def SET n = n + 1 WHERE id <= 2;
INSERT INTO w_def (code, n) VALUES ('c11', 11);
ALTER TABLE w_def DROP CONSTRAINT w_def_code_key;
ALTER TABLE w_def ALTER COLUMN n SET NOT NULL;
ALTER TABLE w_def REPLICA IDENTITY USING INDEX w_def_code_n;
});
step('enum ADD VALUE', q{ALTER TYPE mood ADD VALUE 'happy'});
step('enum RENAME VALUE', q{ALTER TYPE mood RENAME VALUE 'sad' TO 'blue'});
step('SET NOT NULL, SET DEFAULT', q{
ALTER TABLE w_notnull ALTER COLUMN v SET NOT NULL;
ALTER TABLE w_notnull ALTER COLUMN v SET DEFAULT 0;
UPDATE w_notnull SET v = v + 1 WHERE id = 1;
INSERT INTO w_serial (v) VALUES (11);
});
# no change after: the partition's and the child's columns at the point
# are not archived
step('ADD COLUMN on a partitioned table and on a parent', q{
ALTER TABLE w_part ADD COLUMN nd int;
ALTER TABLE w_parent ADD COLUMN nd int;
});
step('a snapshot, then changes', q{
SELECT changestream.take_snapshot();
UPDATE k_direct SET v = ROW(200, 3)::comp WHERE id = 2;
UPDATE k_array SET v = ARRAY[ROW(7, 7)::comp] WHERE id = 2;
UPDATE w_using SET v = v || '!' WHERE id = 1;
UPDATE k_rowuse SET v = ROW(5, 5)::k_rowsrc WHERE id = 5;
});
step('DROP NOT NULL, DROP COLUMN', q{
ALTER TABLE w_notnull ALTER COLUMN v DROP NOT NULL;
ALTER TABLE w_trunc DROP COLUMN u;
INSERT INTO w_notnull VALUES (11, NULL);
});
# a table dropped and created again under its name while the extension
# (and so the schema history) is absent: refused, never mixed
step('name reused while the extension was absent', q{
DROP EXTENSION changestream;
DROP TABLE w_gone;
CREATE TABLE w_gone (id int PRIMARY KEY, v text);
INSERT INTO w_gone SELECT i, 'second' || i FROM generate_series(5, 8) i;
CREATE EXTENSION changestream;
UPDATE w_gone SET v = v || '!' WHERE id = 5;
});
cs_wait_archived($node, name => 'workload');

# ---------- restore() at every point ----------

my %count = (equal => 0, refused => 0, wrong => 0);
my %kinds = map { $_ => 1 } qw(k_direct k_nested k_array k_domain k_rowuse w_enum);
my ($first_alter) = grep { $steps[$_]{name} eq 'ALTER TYPE ADD ATTRIBUTE' } 0 .. $#steps;
# the last step that altered the type each such table's columns use: the
# table is refused at that point and every point before it, and equal
# after it (re-captured right after the step)
my %step_index = map { $steps[$_]{name} => $_ } 0 .. $#steps;
my %last_type_change = (
	(map { $_ => $step_index{'ALTER TYPE DROP ATTRIBUTE'} } qw(k_direct k_nested k_array k_domain)),
	k_rowuse => $step_index{'ALTER TABLE of a table whose row type a column uses'},
	w_enum => $step_index{'enum RENAME VALUE'});
# each table whose columns a command with no change of the table after it
# changed (and whose rows it did not change), by the command's step
my %must_equal = (
	w_readd => 'DROP COLUMN and ADD COLUMN of one name, names swapped',
	w_readd2 => 'DROP COLUMN and ADD COLUMN of one name, names swapped',
	w_swap => 'DROP COLUMN and ADD COLUMN of one name, names swapped',
	w_cols => 'RENAME COLUMN f TO ff and ADD COLUMN f',
	w_part2 => 'ADD COLUMN on a partitioned table and on a parent',
	w_child => 'ADD COLUMN on a partitioned table and on a parent',
	w_parent => 'ADD COLUMN on a partitioned table and on a parent',
	w_trunc => 'DROP NOT NULL, DROP COLUMN');
for my $i (0 .. $#steps)
{
	my $step = $steps[$i];
	my $sql = "$S BEGIN; SELECT tables FROM changestream.restore('r', target_lsn => '$step->{lsn}', skip_inexact => true);\n"
	  . join(";\n", map { digest_sql('r', $_, $step->{cols}{$_}) } @{ $step->{tables} })
	  . ";\n" . definition_sql('r')
	  . ";\nSELECT 'extra', string_agg(relname, ',' ORDER BY relname) FROM pg_class
		 WHERE relnamespace = to_regnamespace('r') AND relkind = 'r';\nROLLBACK;";
	my ($o, $e) = ('', '');
	# each digest on its own: a table absent or lacking a column fails its
	# own query only
	$node->psql($db, $sql, stdout => \$o, stderr => \$e, on_error_stop => 0,
		extra_params => [ '-v', 'ON_ERROR_ROLLBACK=on' ]);
	my @lines = split /\n/, $o;
	my $restored = shift @lines // '';
	my %got = map { split /\|/, $_, 2 } @lines;
	my %refused = map { $_ => 1 } ($e =~ /WARNING:\s+table "public\.(\w+)" cannot be restored exactly/g);
	ok($restored =~ /^\d+$/, "step '$step->{name}': restore with skip_inexact succeeds") or diag($e);
	my @wrong;
	for my $t (@{ $step->{tables} })
	{
		my $def = defined $got{"def:$t"} ? normalized($got{"def:$t"}) : 'missing';
		if ($refused{$t} && !defined $got{$t})
		{
			$count{refused}++;
		}
		elsif (!$refused{$t} && ($got{$t} // 'missing') eq $step->{digest}{$t}
			&& $def eq $step->{def}{$t})
		{
			$count{equal}++;
		}
		else
		{
			$count{wrong}++;
			push @wrong, $t;
			diag("$t: rows " . ($got{$t} // 'missing') . " vs $step->{digest}{$t}\n"
				  . "  definition restored: $def\n  definition source:   $step->{def}{$t}")
			  unless $refused{$t};
		}
	}
	note("step '$step->{name}': refused: " . join(' ', sort keys %refused));
	is("@wrong", '', "step '$step->{name}': no table differs from the source")
	  or diag($e);
	# the tables of altered types (composite, enum): refused up to the
	# point of the last command that altered their type (before the
	# command, their restored columns have the type as it is now), equal
	# from the re-capture after it on
	my @kref = sort grep { $refused{$_} } keys %kinds;
	my @kexp = sort grep { $i <= $last_type_change{$_} } keys %kinds;
	if ($step->{name} eq 'name reused while the extension was absent')
	{
		ok($refused{w_gone} && !defined $got{w_gone},
			"step '$step->{name}': the table whose name was reused unseen is refused")
		  or diag($e);
	}
	is("@kref", "@kexp", "step '$step->{name}': the altered types' tables refused are the expected ones");
	# column changes are replayed from the records' definitions (by
	# attnum): these tables are restored, not refused, from their step on
	my @replayed = grep { $i >= $step_index{ $must_equal{$_} } } sort keys %must_equal;
	my @not_equal = grep { $refused{$_} || ($got{$_} // '') ne $step->{digest}{$_} } @replayed;
	is("@not_equal", '', "step '$step->{name}': the tables whose columns a command without a change after changed are restored");
	my %source = map { $_ => 1 } @{ $step->{tables} };
	my @extra = grep { !$source{$_} } split /,/, ($got{extra} // '');
	is("@extra", '', "step '$step->{name}': no table the source does not have");
}

# without skip_inexact: 0A000 naming the table, the command, its LSN and
# the exact points, for a target before the ALTER TYPE and one after it
for my $i (0, $first_alter)
{
	my ($rc2, $o2, $e2) = $node->psql($db,
		"BEGIN; SELECT changestream.restore('r', target_lsn => '$steps[$i]{lsn}', tables => '{k_nested}'); ROLLBACK;",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($e2, qr/ERROR:\s+0A000:\s+table "public\.k_nested" cannot be restored exactly: ALTER TYPE public\.comp at [0-9A-F]+\/[0-9A-F]+.*HINT:\s+Restore to a target (before [0-9A-F]+\/[0-9A-F]+, or )?at or after [0-9A-F]+\/[0-9A-F]+ \(the (next|first) snapshot/s,
		"step '$steps[$i]{name}': without skip_inexact, a nested composite type's table is refused with 0A000, the command, its LSN and the exact points");
}

my $recaptures = grep { $_->{recaptured} } @steps;
my $summary = "tables x points: $count{equal} equal, $count{refused} refused, $count{wrong} wrong ($recaptures re-captures)";
diag($summary);
is($count{wrong}, 0, 'no table differs silently from the source');
ok($count{refused} > 0 && $count{equal} > 0, 'both outcomes occur');

$node->stop;
done_testing();
