
# A table's full definition (docs/FORMAT.md section 3.2, "definition"),
# captured three ways: the schema history row the ddl_command_end trigger
# writes (changestream.ddl_history.definition, on the source), that row as
# the archive gives it back (changes(), action 'ddl', new_row), and the
# snapshot manifest (take_snapshot(), the file read with gzip).  The
# oracle is this test's own reading of the catalog after each DDL step
# (information_schema.columns, pg_get_serial_sequence(), pg_indexes parsed
# here, pg_constraint), not the extension's query.
#
# The tables: one with serial, identity ALWAYS and BY DEFAULT, a stored
# generated column, NOT NULL, defaults, CHECK (one NOT VALID), UNIQUE,
# PRIMARY KEY, EXCLUDE (gist on a circle), a partial, an expression and an
# INCLUDE index, REPLICA IDENTITY USING INDEX, quoted names with spaces;
# a partitioned table with an index made ON ONLY and attached.  Then:
# DROP INDEX gives a sql_drop row named by the index (table_oid 0, no
# definition), as does an index that DROP COLUMN drops with its column,
# and DROP TABLE gives no row for the table's indexes.

use strict;
use warnings;
use ChangestreamTest;
use JSON::PP;

my $node = cs_setup('defn', sql => q{
CREATE PUBLICATION changestream FOR ALL TABLES WITH (publish_via_partition_root = true);
}, archive => 1);
my $db = 'postgres';

# ---------- the oracle: this test's reading of the catalog ----------

my $NULL = '<null>';

sub nullable { my ($v) = @_; return (!defined $v || $v eq $NULL) ? undef : $v; }

# an identifier as pg_get_indexdef() quotes it
my $IDENT = qr/(?:"(?:[^"]|"")*"|[^\s".]+)/;

sub oracle
{
	my ($table) = @_;			# a regclass text, quoted as needed
	my %def;

	$def{columns} = [ map {
		{
			name => $_->[0],
			type => $_->[1],
			not_null => $_->[2],
			default => nullable($_->[3]),
			generated => nullable($_->[4]),
			generated_kind => $_->[5],
			identity => $_->[6],
			serial_sequence => nullable($_->[7]),
			collation => nullable($_->[8]),
			attnum => $_->[9] + 0,
		}
	} cs_rows($node, $db, qq{
		SELECT c.column_name, format_type(a.atttypid, a.atttypmod),
			CASE WHEN c.is_nullable = 'NO' THEN 't' ELSE 'f' END,
			coalesce(c.column_default, '$NULL'),
			coalesce(c.generation_expression, '$NULL'),
			a.attgenerated,
			CASE c.identity_generation WHEN 'ALWAYS' THEN 'a' WHEN 'BY DEFAULT' THEN 'd' ELSE '' END,
			CASE WHEN c.is_identity = 'YES' THEN '$NULL' ELSE
				coalesce((SELECT s.relname::text FROM pg_class s
						   WHERE s.oid = pg_get_serial_sequence('$table', c.column_name)::regclass),
						 '$NULL') END,
			coalesce(CASE c.collation_schema WHEN 'pg_catalog' THEN quote_ident(c.collation_name)
				ELSE quote_ident(c.collation_schema) || '.' || quote_ident(c.collation_name) END, '$NULL'),
			c.ordinal_position
		  FROM information_schema.columns c
		  JOIN pg_attribute a ON a.attrelid = '$table'::regclass AND a.attnum = c.ordinal_position
		 WHERE (quote_ident(c.table_schema) || '.' || quote_ident(c.table_name))::regclass = '$table'::regclass
		 ORDER BY c.ordinal_position}) ];

	my @cons = cs_rows($node, $db, qq{
		SELECT conname, contype, pg_get_constraintdef(oid) FROM pg_constraint
		 WHERE conrelid = '$table'::regclass AND contype = ANY ('{p,u,c,x}'::char[])});
	$def{constraints} = [ map { { name => $_->[0], type => $_->[1], definition => $_->[2] } }
		  sort { $a->[0] cmp $b->[0] } @cons ];
	my %backs = map { $_->[1] =~ /^[pux]$/ ? ($_->[0] => 1) : () } @cons;

	my @idx;
	for my $r (cs_rows($node, $db, qq{
		SELECT x.indexname, x.indexdef, i.indisvalid
		  FROM pg_indexes x
		  JOIN pg_index i ON i.indexrelid = (quote_ident(x.schemaname) || '.' || quote_ident(x.indexname))::regclass
		 WHERE (quote_ident(x.schemaname) || '.' || quote_ident(x.tablename))::regclass = '$table'::regclass}))
	{
		my ($name, $indexdef, $valid) = @$r;
		next if $valid ne 't' || $backs{$name};
		my ($unique, $using) = $indexdef =~
		  /^CREATE (UNIQUE )?INDEX $IDENT ON (?:ONLY )?$IDENT\.$IDENT USING (.*)$/;
		die "unexpected index definition: $indexdef" unless defined $using;
		push @idx, { name => $name, unique => ($unique ? 't' : 'f'), using => $using };
	}
	$def{indexes} = [ sort { $a->{name} cmp $b->{name} } @idx ];

	my ($ri) = cs_rows($node, $db, qq{
		SELECT c.relreplident,
			coalesce((SELECT ic.relname::text FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
					   WHERE i.indrelid = c.oid AND i.indisreplident), '$NULL')
		  FROM pg_class c WHERE c.oid = '$table'::regclass});
	$def{replica_identity} = $ri->[0];
	$def{replica_identity_index} = nullable($ri->[1]);
	return \%def;
}

# JSON's true/false as psql's t/f, so that both sides compare as text
sub plain
{
	my ($v) = @_;
	return [ map { plain($_) } @$v ] if ref $v eq 'ARRAY';
	return { map { ($_ => plain($v->{$_})) } keys %$v } if ref $v eq 'HASH';
	return $v ? 't' : 'f' if JSON::PP::is_bool($v);
	return $v;
}

sub decoded
{
	my ($text) = @_;
	return undef if !defined $text || $text eq '';
	return plain(decode_json($text));
}

my %oid;
sub table_oid
{
	my ($table) = @_;
	return $oid{$table} //= $node->safe_psql($db, "SELECT '$table'::regclass::oid");
}

my $last_id = 0;

# After a DDL step: for each table it changed, the newest schema history
# row on the source, then (once archived) the newest archived 'ddl' row
# of the table as changes() gives it, equal the oracle.
sub check_step
{
	my ($step, @tables) = @_;
	cs_wait_archived($node, name => $step);
	for my $table (@tables)
	{
		my $expected = oracle($table);
		my $oid = table_oid($table);
		my $newest = qq{FROM changestream.ddl_history WHERE table_oid = $oid
			ORDER BY id DESC LIMIT 1};
		cmp_ok($node->safe_psql($db, "SELECT id $newest"), '>', $last_id,
			"$step: $table has a new schema history row");
		is_deeply(decoded($node->safe_psql($db, "SELECT definition $newest")), $expected,
			"$step: $table: ddl_history.definition equals the catalog");
		my ($rc, $archived, $err) = $node->psql($db, qq{
			SELECT new_row->'definition' FROM changestream.changes()
			 WHERE action = 'ddl' AND new_row->>'table_oid' = '$oid'
			 ORDER BY commit_lsn DESC, ordinal DESC LIMIT 1});
		is($err, '', "$step: $table: changes() reads the archive");
		is_deeply(decoded($archived), $expected,
			"$step: $table: the archived record (changes()) carries the same definition");
	}
	$last_id = $node->safe_psql($db, 'SELECT max(id) FROM changestream.ddl_history');
	return;
}

my $T = q{"my schema"."a table"};
my $P = 'public.pt';
my $P1 = 'public.pt1';

# ---------- step 1: the tables ----------

$node->safe_psql($db, q{
CREATE SCHEMA "my schema";
CREATE TABLE "my schema"."a table" (
	id serial PRIMARY KEY,
	ia int GENERATED ALWAYS AS IDENTITY,
	ib bigint GENERATED BY DEFAULT AS IDENTITY,
	"the col" text COLLATE "C" NOT NULL DEFAULT 'x y',
	g int GENERATED ALWAYS AS (ia * 2) STORED,
	c circle,
	u int CONSTRAINT "u key" UNIQUE,
	CONSTRAINT "positive u" CHECK (u > 0),
	EXCLUDE USING gist (c WITH &&)
);
CREATE TABLE pt (k int NOT NULL, v text DEFAULT 'none', PRIMARY KEY (k)) PARTITION BY RANGE (k);
CREATE TABLE pt1 PARTITION OF pt FOR VALUES FROM (0) TO (100);
INSERT INTO "my schema"."a table" ("the col", c, u) VALUES ('a', '<(0,0),1>', 5);
INSERT INTO pt VALUES (1, 'one');
});
check_step('create', $T, $P, $P1);

# ---------- step 2: constraints, indexes, replica identity ----------

$node->safe_psql($db, q{
ALTER TABLE "my schema"."a table" ADD CONSTRAINT "not valid" CHECK (ib > 100) NOT VALID;
ALTER TABLE "my schema"."a table" ADD COLUMN "new col" numeric(10,2) DEFAULT 1.5 NOT NULL;
CREATE INDEX "part idx" ON "my schema"."a table" (u) WHERE u > 10;
CREATE INDEX "expr idx" ON "my schema"."a table" (lower("the col"));
CREATE UNIQUE INDEX "inc idx" ON "my schema"."a table" (ia) INCLUDE (ib);
ALTER TABLE "my schema"."a table" REPLICA IDENTITY USING INDEX "inc idx";
CREATE INDEX pt_v ON ONLY pt (v);
CREATE INDEX pt1_v ON pt1 (v);
ALTER INDEX pt_v ATTACH PARTITION pt1_v;
ALTER TABLE pt ALTER COLUMN v SET DEFAULT 'other';
});
check_step('constraints and indexes', $T, $P, $P1);
my $t_def = oracle($T);
is_deeply([ map { $_->{name} } @{ $t_def->{indexes} } ], [ 'expr idx', 'inc idx', 'part idx' ],
	'the oracle sees the three indexes that back no constraint');
is(scalar(@{ oracle($P)->{indexes} }), 1, 'the oracle sees the partitioned index, valid once attached');

# ---------- step 3: ALTER TABLE changing columns ----------

$node->safe_psql($db, q{
ALTER TABLE "my schema"."a table" RENAME COLUMN u TO "u u";
ALTER TABLE "my schema"."a table" ALTER COLUMN "the col" DROP DEFAULT,
	ALTER COLUMN ib DROP IDENTITY;
ALTER TABLE "my schema"."a table" ALTER COLUMN ib SET DEFAULT 7;
ALTER TABLE "my schema"."a table" ALTER COLUMN ia SET GENERATED BY DEFAULT;
});
check_step('columns altered', $T);

# ---------- the snapshot manifest ----------

my $gen = $node->safe_psql($db, 'SELECT generation FROM changestream.status()');
$node->safe_psql($db, 'SELECT changestream.take_snapshot()');
my @snapfiles = sort glob(cs_archive_dir($node) . "/generations/$gen/snapshots/*.snapshot.gz");
ok(@snapfiles >= 2, 'the opening snapshot and the one taken');
my $text = `gzip -dc '$snapfiles[-1]'`;
my ($manifest) = $text =~ /^-- manifest: (.*)$/m;
my %in_manifest = map { (qq{$_->{schema}.$_->{name}} => $_) } @{ decode_json($manifest // '{}')->{tables} // [] };
for ([ $T, 'my schema.a table' ], [ $P, 'public.pt' ])
{
	my ($table, $key) = @$_;
	is_deeply(plain($in_manifest{$key}{definition}), oracle($table),
		"snapshot manifest: $key: definition equals the catalog");
}
ok(!exists $in_manifest{'public.pt1'}, 'the partition is published through its root');

# ---------- dropped indexes ----------

my $before = $node->safe_psql($db, 'SELECT max(id) FROM changestream.ddl_history');
$node->safe_psql($db, q{
DROP INDEX "my schema"."part idx";
ALTER TABLE "my schema"."a table" DROP COLUMN "new col";
ALTER TABLE "my schema"."a table" ADD COLUMN "gone col" int;
CREATE INDEX "gone idx" ON "my schema"."a table" ("gone col", "the col");
ALTER TABLE "my schema"."a table" DROP COLUMN "gone col";
DROP INDEX pt_v;
CREATE TABLE "my schema".other (a int PRIMARY KEY, b int UNIQUE);
CREATE INDEX other_b ON "my schema".other (b);
DROP TABLE "my schema".other;
});
my $other_oid = $node->safe_psql($db, qq{
	SELECT table_oid FROM changestream.ddl_history WHERE id > $before
	   AND event = 'ddl_command_end' AND table_name = 'other' LIMIT 1});
my $dropped = qq{
	SELECT string_agg(concat_ws(' ', event, command_tag, object_type, table_oid, schema_name,
			table_name, coalesce(definition::text, 'NULL')),
		E'\n' ORDER BY table_name COLLATE "C")
	  FROM changestream.ddl_history WHERE id > $before AND event = 'sql_drop'};
is($node->safe_psql($db, $dropped), join("\n",
	'sql_drop ALTER TABLE index 0 my schema gone idx NULL',
	"sql_drop DROP TABLE table $other_oid my schema other NULL",
	'sql_drop DROP INDEX index 0 my schema part idx NULL',
	'sql_drop DROP INDEX index 0 public pt1_v NULL',
	'sql_drop DROP INDEX index 0 public pt_v NULL'),
	'DROP INDEX (with the partitions\' indexes) and an index dropped with its column are recorded '
	  . 'by index name with table_oid 0 and no definition; DROP TABLE records none of its indexes');

# the table's newest definition and the index drops after it give the
# catalog: the DROP INDEX of pt_v is the last record of pt and of pt1
$last_id = $before;
check_step('after the drops', $T);
for my $table ($P, $P1)
{
	my $oid = table_oid($table);
	my $def = decoded($node->safe_psql($db, qq{
		SELECT definition FROM changestream.ddl_history WHERE table_oid = $oid
		 ORDER BY id DESC LIMIT 1}));
	my %gone = map { $_ => 1 } split /\n/, $node->safe_psql($db, qq{
		SELECT h.table_name FROM changestream.ddl_history h
		 WHERE h.id > (SELECT max(id) FROM changestream.ddl_history WHERE table_oid = $oid)
		   AND h.event = 'sql_drop' AND h.object_type = 'index' AND h.table_oid = 0
		   AND h.schema_name = 'public'});
	$def->{indexes} = [ grep { !$gone{ $_->{name} } } @{ $def->{indexes} } ];
	is_deeply($def, oracle($table),
		"after the drops: $table: the newest definition less the indexes dropped since equals the catalog");
}
cs_wait_archived($node, name => 'the drops');
my ($rc, $out, $err) = $node->psql($db, q{
	SELECT string_agg(concat_ws(' ', new_row->>'event', new_row->>'table_oid', schema_name, table_name),
		E'\n' ORDER BY table_name COLLATE "C")
	  FROM changestream.changes() WHERE action = 'ddl' AND new_row->>'object_type' = 'index'
	   AND new_row->>'event' = 'sql_drop'});
is($err, '', 'changes() reads the index drop records');
is($out, join("\n",
	'sql_drop 0 my schema gone idx', 'sql_drop 0 my schema part idx',
	'sql_drop 0 public pt1_v', 'sql_drop 0 public pt_v'),
	'changes() gives the dropped indexes back by schema and index name');

done_testing();
