
# Snapshot edge values: the opening snapshot of tables holding NULLs, empty
# strings, tabs/newlines/backslashes, the text "\N", NaN and infinities,
# -infinity timestamps, bytea with zero bytes, arrays, jsonb/json, a domain,
# an enum, a dropped column, a generated column, a TOASTed value, quoted
# identifiers, a partitioned table (leaves, then published via the root), a
# column list with a row filter, and a table without replica identity.
#
# The snapshot's COPY data is loaded into scratch copies of the tables
# (same definitions, schema "scratch" in the same database, the generated
# column recomputed), and every row is compared with the source: a full
# outer join on the key, every column IS NOT DISTINCT FROM its source and
# has the same text form.  The file is also loaded verbatim with
# "zcat file | psql" into a second database whose session settings are the
# server's unusual defaults, and compared by per-table digests.
use ChangestreamTest;
use SnapshotTest;

my $node = cs_setup('edge');

# DDL for a schema pair: __S__ is "public" or "scratch", __W__ the schema
# with the quoted name.
my $ddl = q{
CREATE TABLE __S__.edge (
	id int PRIMARY KEY,
	t text, vc varchar(10), ch char(5),
	n numeric, n2 numeric(12,4), f8 float8, f4 float4,
	ts timestamptz, tsn timestamp, d date, iv interval, tm time, tmz timetz,
	b bytea, arr int[], tarr text[], arr2 float8[][],
	j jsonb, js json,
	dom posint, m mood, marr mood[],
	u uuid, bo bool, ip inet, rng int4range, bits bit varying(16),
	dropped_later text,
	g text GENERATED ALWAYS AS (id::text || ':' || coalesce(t, '<null>')) STORED,
	big text);
ALTER TABLE __S__.edge DROP COLUMN dropped_later;
CREATE TABLE __S__.parted (id int, region text, v text, PRIMARY KEY (id, region))
	PARTITION BY LIST (region);
CREATE TABLE __S__.parted_east PARTITION OF __S__.parted FOR VALUES IN ('east');
CREATE TABLE __S__.parted_west PARTITION OF __S__.parted FOR VALUES IN ('west')
	PARTITION BY RANGE (id);
CREATE TABLE __S__.parted_west_lo PARTITION OF __S__.parted_west FOR VALUES FROM (MINVALUE) TO (100);
CREATE TABLE __S__.parted_west_hi PARTITION OF __S__.parted_west FOR VALUES FROM (100) TO (MAXVALUE);
CREATE TABLE __S__.parted_other PARTITION OF __S__.parted DEFAULT;
CREATE TABLE __S__.filtered (id int PRIMARY KEY, a text, secret text, keep bool);
CREATE TABLE __S__.noident (x int, y text);
CREATE TABLE __W__."Weird ""Table""" ("Id" int PRIMARY KEY, "Col 1" text, "UPPER" int);
};

sub ddl_for
{
	my ($s, $w) = @_;
	(my $x = $ddl) =~ s/__S__/$s/g;
	$x =~ s/__W__/$w/g;
	return $x;
}

my $types = q{
CREATE TYPE __S__.mood AS ENUM ('sad', 'ok', 'happy', 'with space', 'quo"te');
CREATE DOMAIN __S__.posint AS int CHECK (VALUE > 0);
};

sub types_for
{
	my ($s) = @_;
	(my $x = $types) =~ s/__S__/$s/g;
	return $x;
}

$node->safe_psql('postgres',
	'CREATE SCHEMA "My Schema";'
	  . types_for('public') . ddl_for('public', '"My Schema"'));

# The rows.  Values are written as SQL literals (E'' where escapes matter).
my $rows_sql = <<'SQL';
INSERT INTO edge (id) VALUES (1);                                -- all NULL
INSERT INTO edge (id, t, vc, ch, b, arr, tarr, j, js, bits, big)
	VALUES (2, '', '', '', '\x', '{}', '{}', '""', '""', B'', '');   -- empty
INSERT INTO edge (id, t, vc, tarr, j, js) VALUES
	(3, E'tab\there\nnewline\\backslash\rcr\x01ctl\x7f', E'a\tb\\c',
	 ARRAY[E'x\ty', 'a"b', NULL, 'NULL', '', E'back\\slash', E'new\nline', '{}', ' sp '],
	 '{"k": "v\t\n\\\\ \"q\"", "u": "\u00e9", "n": null, "a": [1, 2.50, "x"]}',
	 E'{"raw":  "keeps\\ttext",  "dup": 1, "dup": 2}');
INSERT INTO edge (id, t, vc) VALUES (4, E'\\N', 'NULL');            -- text \N
INSERT INTO edge (id, t) VALUES (5, '\.'), (6, E'\\.\n\\.'), (7, 'héllo wörld ☃ 😀');
INSERT INTO edge (id, n, n2, f8, f4) VALUES
	(10, 'NaN', 'NaN', 'NaN', 'NaN'),
	(11, 'Infinity', 1.5, 'Infinity', '-Infinity'),
	(12, '-Infinity', -0.0001, '-Infinity', 'Infinity'),
	(13, 0.000000000000000000000000001, 99999999.9999, 1e308, 3.4028235e38),
	(14, -12345678901234567890.123456789, 0, 5e-324, 1.4e-45),
	(15, 1.10, 1.1, '-0', '-0'),
	(16, 0, 0, 0.1, 0.1);
INSERT INTO edge (id, ts, tsn, d, iv, tm, tmz) VALUES
	(20, '-infinity', '-infinity', '-infinity', '-1 days +02:00:00', '00:00', '00:00+00'),
	(21, 'infinity', 'infinity', 'infinity', '1 year -2 mons 3 days -04:05:06.789', '24:00', '23:59:59.999999-12'),
	(22, '2000-01-02 03:04:05.678901+05:30', '4713-01-01 00:00:00 BC', '0001-01-01 BC', '-178000000 years', '12:34:56.789', '01:02:03+14'),
	(23, '294276-12-31 23:59:59.999999+00', '294276-12-31 23:59:59.999999', '5874897-12-31', '178000000 years 11 mons', '23:59:59.999999', '00:00:00-15:59'),
	(24, '2024-02-29 12:00:00 America/New_York', '1999-12-31 23:59:60', '2024-02-29', '-00:00:01', '01:00', '01:00-01'),
	(25, '1970-01-01 00:00:00+00', '1900-01-01', '2000-01-01', '1 mon -1 days', '00:00:00.000001', '00:00:00.000001+00');
INSERT INTO edge (id, b) VALUES
	(30, '\x00'), (31, '\x00ff00'), (32, '\x5c4e'), (33, '\x0a090d5c2e');
INSERT INTO edge (id, b)
	SELECT 34, decode(string_agg(lpad(to_hex(i), 2, '0'), '' ORDER BY i), 'hex')
	FROM generate_series(0, 255) i;
INSERT INTO edge (id, arr, arr2, tarr) VALUES
	(40, '{1,NULL,3}', '{{1.5,NaN},{Infinity,-0}}', '{"with,comma","with}brace","with\"quote"}'),
	(41, '[0:2]={7,8,9}', '{{1e308,5e-324}}', '{NULL}'),
	(42, '{}', '{}', '{""}');
INSERT INTO edge (id, dom, m, marr, u, bo, ip, rng, bits) VALUES
	(50, 1, 'sad', '{sad,happy}', '00000000-0000-0000-0000-000000000000', true, '10.0.0.1/8', '[1,10)', B'1'),
	(51, 2147483647, 'with space', '{"with space","quo\"te",NULL}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', false, '::ffff:1.2.3.4', 'empty', B'1010101010101010'),
	(52, 3, 'quo"te', '{}', NULL, NULL, '2001:db8::/32', '(,5]', B'0');
INSERT INTO edge (id, j, js) VALUES
	(60, '[]', '[]'), (61, '{}', ' {} '), (62, 'null', 'null'), (63, '"\\N"', '"\\N"'),
	(64, '1e400', '1e400'), (65, '{"a": {"b": [true, false, null, 0.0, -1.5e-7]}}', '{"a":1,"a":2}');
INSERT INTO edge (id, t, big) VALUES
	(70, 'toasted', repeat('0123456789abcdef', 65536)),
	(71, 'toasted random', (SELECT string_agg(md5(i::text), E'\t' ) FROM generate_series(1, 30000) i));

INSERT INTO parted SELECT i, (ARRAY['east', 'west', 'north'])[1 + i % 3], 'v' || i
	FROM generate_series(1, 300) i;
INSERT INTO parted VALUES (1000, 'west', E'tab\tin partition'), (1001, 'south', NULL);
INSERT INTO filtered SELECT i, 'a' || i, 'secret' || i, i % 3 = 0 FROM generate_series(1, 50) i;
INSERT INTO noident SELECT i, 'y' || i FROM generate_series(1, 5) i;
INSERT INTO "My Schema"."Weird ""Table""" VALUES (1, E'weird\tvalue', 1), (2, NULL, NULL);
CREATE TABLE not_published (id int PRIMARY KEY);
INSERT INTO not_published VALUES (1);
CREATE PUBLICATION changestream FOR TABLE edge, parted, filtered (id, a, keep) WHERE (id % 2 = 0),
	noident, "My Schema"."Weird ""Table""";
SQL
$node->safe_psql('postgres', $rows_sql);

my $log_off = cs_log_offset($node);
cs_start_archiving($node);
my ($gen) = cs_single_generation($node, 'opening snapshot');
my @snaps = snap_list($node, $gen);
is(scalar(@snaps), 1, 'the generation opens with one snapshot');
my $start = $node->safe_psql('postgres',
	"SELECT start_lsn FROM changestream.generations() WHERE generation = '$gen'");
is($snaps[0]{lsn}, $start, 'the snapshot LSN is the generation start_lsn');

my $snap = snap_check_file($node, $gen, $snaps[0], 'opening snapshot', keep_lines => 1);

############################################################################
# What the snapshot holds: the published tables (the leaves of the
# partitioned table, since publish_via_partition_root is off), published
# columns only, filtered rows only, no generated or dropped column.

is_deeply(
	[ sort @{ $snap->{order} } ],
	[
		sort '"My Schema"."Weird ""Table"""', 'public.edge', 'public.filtered',
		'public.noident', 'public.parted_east', 'public.parted_other',
		'public.parted_west_hi', 'public.parted_west_lo'
	],
	'the snapshot holds exactly the published tables (partition leaves)');

my @edge_cols = split /\n/, $node->safe_psql('postgres',
	"SELECT attname FROM pg_attribute WHERE attrelid = 'edge'::regclass "
	  . "AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum");
is_deeply($snap->{tables}{'public.edge'}{columns}, \@edge_cols,
	'edge: COPY columns are the table\'s, without the generated and the dropped column');
is_deeply($snap->{tables}{'public.filtered'}{columns}, [qw(id a keep)],
	'filtered: only the published column list');
is($snap->{tables}{'public.filtered'}{nrows}, 25, 'filtered: only rows passing the row filter');
my @odd = grep { $_ % 2 } keys %{ $snap->{tables}{'public.filtered'}{state} };
is(scalar(@odd), 0, 'filtered: no row the filter excludes');
is_deeply($snap->{tables}{'"My Schema"."Weird ""Table"""'}{columns},
	[ '"Id"', '"Col 1"', '"UPPER"' ], 'quoted identifiers in the COPY column list');

# The manifest: OIDs, replica identity, columns with format_type() types.
my %mt = map { ("$_->{schema}.$_->{name}" => $_) } @{ $snap->{manifest}{tables} // [] };
# format_type() as the walsender session runs it: search_path is empty
# there (libpqwalreceiver sets it so), so types outside pg_catalog are
# schema-qualified
my $expect_cols = $node->safe_psql('postgres', q{
SET search_path = '';
SELECT json_agg(json_build_object('name', attname, 'type', format_type(atttypid, atttypmod))
	ORDER BY attnum)
FROM pg_attribute WHERE attrelid = 'public.edge'::regclass AND attnum > 0
	AND NOT attisdropped AND attgenerated = ''});
is_deeply($mt{'public.edge'}{columns}, JSON::PP->new->decode($expect_cols),
	'manifest: edge columns with format_type() types');
is($mt{'public.edge'}{oid}, snap_relid($node, 'edge'), 'manifest: edge OID');
is($mt{'public.edge'}{replica_identity}, 'd', 'manifest: edge replica identity');
is($mt{'public.noident'}{replica_identity}, 'd', 'manifest: noident replica identity (default, no key)');
is_deeply([ map { $_->{name} } @{ $mt{'public.filtered'}{columns} } ], [qw(id a keep)],
	'manifest: filtered lists only the published columns');
ok($mt{'My Schema.Weird "Table"'}, 'manifest: unquoted schema and table names');

# A published table without replica identity is reported.
my $no_ident = $node->safe_psql('postgres',
	'SELECT tables_without_replica_identity FROM changestream.status()');
is($no_ident, 'public.noident',
	'status() lists the published table without replica identity, and only it');
like(cs_log_since($node, $log_off), qr/WARNING:.*published tables without a replica identity: public\.noident/,
	'the log warns about it');

############################################################################
# Load the COPY data into scratch copies and compare every row.

# Loads a snapshot into the scratch schemas of the same database (COPY
# targets renamed), under the pinned session settings.
sub load_scratch
{
	my ($r, $label) = @_;
	my $sql = "$PINNED_SETTINGS\n";
	for my $name (@{ $r->{order} })
	{
		my $t = $r->{tables}{$name};
		my $copy = $t->{copy};
		$copy =~ s/^COPY public\./COPY scratch./
		  or $copy =~ s/^COPY "My Schema"\./COPY "scratch My Schema"./
		  or die "unexpected COPY line $t->{copy}";
		$sql .= "$copy\n" . join('', map { "$_\n" } @{ $t->{lines} }) . "\\.\n";
	}
	my ($ok, $out, $err) = snap_psql_stdin($node, 'postgres', $sql);
	ok($ok && $err eq '', "$label: COPY data loads into the scratch tables")
	  or diag($err);
}

$node->safe_psql('postgres',
	'CREATE SCHEMA scratch; CREATE SCHEMA "scratch My Schema";'
	  . ddl_for('scratch', '"scratch My Schema"'));
load_scratch($snap, 'opening snapshot');

# compare(source, scratch, key columns, where) -> one test per table
sub compare_table
{
	my ($src, $dst, $key, $label, %o) = @_;
	my $only = $o{cols} ? "AND attname = ANY (string_to_array('$o{cols}', ','))" : '';
	my @cols = map { [ split /\|/, $_ ] } split /\n/, $node->safe_psql('postgres', qq{
SELECT quote_ident(attname), format_type(atttypid, NULL) FROM pg_attribute
WHERE attrelid = '$src'::regclass AND attnum > 0 AND NOT attisdropped $only
ORDER BY attnum});
	my @keys = split /,/, $key;
	my $k0   = $keys[0];
	my $join = join(' AND ', map { "src_.$_ = dst_.$_" } @keys);
	# every column: equal (IS NOT DISTINCT FROM) and the same text form; json
	# has no equality operator, its text form says it all
	my $cmp = join("\n    OR ",
		map {
			my ($c, $type) = @$_;
			($type eq 'json' ? '' : "src_.$c IS DISTINCT FROM dst_.$c OR ")
			  . "src_.${c}::text IS DISTINCT FROM dst_.${c}::text"
		} @cols);
	my $where = $o{where} ? "WHERE $o{where}" : '';
	my $from  = "FROM (SELECT * FROM $src $where) src_ FULL JOIN $dst dst_ ON $join
WHERE src_.$k0 IS NULL OR dst_.$k0 IS NULL
    OR $cmp";
	my $bad = $node->safe_psql('postgres', qq{$PINNED_SETTINGS
SELECT coalesce(src_.${k0}::text, 'only in scratch: ' || dst_.${k0}::text) $from ORDER BY 1});
	my $n = $node->safe_psql('postgres', "SELECT count(*) FROM $dst");
	is($bad, '', "$label: $n rows, every column IS NOT DISTINCT FROM the source")
	  or diag("mismatching keys: $bad\n"
		  . $node->safe_psql('postgres', qq{$PINNED_SETTINGS
SELECT 'source:  ' || left(src_::text, 300) || E'\n scratch: ' || left(dst_::text, 300) $from LIMIT 5}));
	cmp_ok($n, '>', 0, "$label: scratch table is not empty");
	return;
}

compare_table('public.edge', 'scratch.edge', 'id', 'edge');
compare_table('public.parted', 'scratch.parted', 'id,region', 'parted (through its leaves)');
compare_table('public.filtered', 'scratch.filtered', 'id', 'filtered (published columns, filtered rows)',
	cols => 'id,a,keep', where => 'id % 2 = 0');
is($node->safe_psql('postgres', 'SELECT count(*) FROM scratch.filtered WHERE secret IS NOT NULL'),
	'0', 'filtered: the unpublished column is not in the snapshot');
compare_table('public.noident', 'scratch.noident', 'x', 'noident');
compare_table('"My Schema"."Weird ""Table"""', '"scratch My Schema"."Weird ""Table"""',
	'"Id"', 'quoted names');
is($node->safe_psql('postgres', 'SELECT g FROM scratch.edge WHERE id = 3'),
	$node->safe_psql('postgres', 'SELECT g FROM public.edge WHERE id = 3'),
	'the generated column is recomputed on load');
is($node->safe_psql('postgres', 'SELECT length(big) FROM scratch.edge WHERE id = 70'),
	'1048576', 'a 1 MB TOASTed value survives');

############################################################################
# zcat file | psql, verbatim, into another database with the same tables,
# in a session with the server's unusual defaults (DateStyle SQL, DMY;
# IntervalStyle sql_standard; TimeZone America/New_York;
# extra_float_digits 0): the file must not depend on the loading session.

$node->safe_psql('postgres', 'CREATE DATABASE scratchdb');
$node->safe_psql('scratchdb', 'CREATE SCHEMA "My Schema";'
	  . types_for('public') . ddl_for('public', '"My Schema"'));
my $path = snap_path($node, $gen, $snaps[0]{file});
my ($ok, $out, $err) = snap_psql_stdin($node, 'scratchdb', $path, gz => 1);
ok($ok && $err eq '', 'zcat snapshot | psql loads into a database with the same tables')
  or diag($err);

# per-table digest of the rows' text forms, computed the same way in both
sub digest
{
	my ($db, $table, $cols, $where) = @_;
	$where = $where ? "WHERE $where" : '';
	return $node->safe_psql($db, qq{$PINNED_SETTINGS
SELECT count(*) || ' ' || coalesce(md5(string_agg(r, E'\\n' ORDER BY r)), '')
FROM (SELECT ($cols)::text AS r FROM $table $where) x});
}
for my $c (
	[ 'public.edge', 'edge.*' ],
	[ 'public.parted', 'parted.*' ],
	[ 'public.filtered', 'filtered.id, filtered.a, filtered.keep', 'id % 2 = 0' ],
	[ 'public.noident', 'noident.*' ],
	[ '"My Schema"."Weird ""Table"""', '"Weird ""Table""".*' ])
{
	my ($t, $cols, $where) = @$c;
	is(digest('scratchdb', $t, $cols), digest('postgres', $t, $cols, $where),
		"zcat | psql: $t has the source's rows");
}
# Which edge rows differ, if any (for the diagnosis of a failure above)
my $src_rows = $node->safe_psql('postgres', "$PINNED_SETTINGS SELECT id || ' ' || edge::text FROM edge ORDER BY id");
my $dst_rows = $node->safe_psql('scratchdb', "$PINNED_SETTINGS SELECT id || ' ' || edge::text FROM edge ORDER BY id");
if ($src_rows ne $dst_rows)
{
	my %s = map { /^(\d+) (.*)$/s ? ($1 => $2) : () } split /\n(?=\d+ )/, $src_rows;
	my %d = map { /^(\d+) (.*)$/s ? ($1 => $2) : () } split /\n(?=\d+ )/, $dst_rows;
	for my $id (sort { $a <=> $b } keys %s)
	{
		my $x = $s{$id};
		my $y = $d{$id} // '(missing)';
		next if $x eq $y;
		diag("edge id $id differs after zcat | psql:\n  source: "
			  . substr($x, 0, 300) . "\n  loaded: " . substr($y, 0, 300));
	}
}

############################################################################
# publish_via_partition_root: a snapshot taken on demand then holds the
# partitioned table under its root's name, rows of every partition.

$node->safe_psql('postgres',
	'ALTER PUBLICATION changestream SET (publish_via_partition_root = true)');
my $lsn2 = $node->safe_psql('postgres', 'SELECT changestream.take_snapshot()');
@snaps = snap_list($node, $gen);
is(scalar(@snaps), 2, 'take_snapshot() adds a second snapshot');
my ($s2) = grep { $_->{lsn} eq $lsn2 } @snaps;
ok($s2, "snapshots() lists the snapshot at $lsn2");
my $snap2 = $s2 ? snap_check_file($node, $gen, $s2, 'via-root snapshot', keep_lines => 1) : {};
ok($snap2->{tables}{'public.parted'}, 'via root: the snapshot holds public.parted');
is(scalar(grep { /parted_/ } @{ $snap2->{order} // [] }), 0,
	'via root: no partition leaf is copied on its own (no row twice)');
is($snap2->{tables}{'public.parted'}{nrows}, 302, 'via root: rows of every partition');
my %mt2 = map { ("$_->{schema}.$_->{name}" => $_) } @{ $snap2->{manifest}{tables} // [] };
is($mt2{'public.parted'}{oid}, snap_relid($node, 'parted'), 'via root: manifest names the root OID');
$node->safe_psql('postgres', 'TRUNCATE scratch.parted');
{
	my $sql = "$PINNED_SETTINGS\n";
	my $t = $snap2->{tables}{'public.parted'} // { copy => '', lines => [] };
	(my $copy = $t->{copy}) =~ s/^COPY public\./COPY scratch./;
	$sql .= "$copy\n" . join('', map { "$_\n" } @{ $t->{lines} }) . "\\.\n";
	my ($ok2, $o2, $e2) = snap_psql_stdin($node, 'postgres', $sql);
	ok($ok2, 'via root: COPY data loads into the scratch partitioned table') or diag($e2);
}
compare_table('public.parted', 'scratch.parted', 'id,region', 'via root: parted');

# Other tables are the same in the second snapshot.
for my $t ('public.edge', 'public.filtered', '"My Schema"."Weird ""Table"""')
{
	is_deeply($snap2->{tables}{$t}{lines}, $snap->{tables}{$t}{lines},
		"second snapshot: $t has the same COPY data");
}

is(join(',', snap_dir_files($node, $gen)),
	join(',', sort map { $_->{file} } @snaps), 'no leftover temporary files in snapshots/');

$node->stop;
done_testing();
