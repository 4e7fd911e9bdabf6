# changes() and verify() (issue 11, sections 1, 2 and 4).
#
# Every value class of t/010 (NaN, infinities, bytea with zero bytes,
# arrays, json/jsonb, a domain, an enum, a TOASTed value, quoted names, a
# partitioned table published via its root, a column list, dropped and
# generated columns) plus mid-stream ALTER TABLE ADD/DROP/RENAME COLUMN and
# ALTER COLUMN TYPE.  Each step is one transaction; after it, the source
# table is copied (CREATE TABLE AS, unpublished) as the oracle of that
# point.  For every change row of the step,
# jsonb_populate_record(<source row>, new_row) has the text form of the
# source row (every value present is the source's, read under the
# archive's pinned session settings), and new_row's keys are the
# published columns minus unchanged_columns (json values are written in jsonb's canonical
# form: new_row is jsonb, so a json column keeps its value, not its
# insignificant whitespace; and a json value that is JSON null reads back
# as SQL NULL, which new_row writes the same way).  Counts come from the step's own statements.
#
# verify() finds nothing on the sound archive and agrees with
# scripts/cs_decode.py; after a byte of a sealed segment is flipped, both
# name that file, and changes() fails with XX001 naming it.
use strict;
use warnings;

use FindBin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;
use ArchiveDamage;

my $node = cs_new_node('changes', conf => "changestream.segment_size = '64kB'\nchangestream.message_prefixes = 'p'\n");
$node->start;
my $db = 'postgres';

$node->safe_psql($db, q{
CREATE EXTENSION changestream;
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE SCHEMA "Odd Schema";
CREATE TABLE edge (
	id int PRIMARY KEY, t text, n numeric, f8 float8, f4 float4,
	ts timestamptz, iv interval, b bytea, arr int[], tarr text[],
	j jsonb, js json, dom posint, m mood, marr mood[],
	dropped_later text,
	g text GENERATED ALWAYS AS (id::text || ':' || coalesce(t, '<null>')) STORED,
	big text);
ALTER TABLE edge DROP COLUMN dropped_later;
ALTER TABLE edge ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE "Odd Schema"."Weird ""Table""" ("Id" int PRIMARY KEY, "Col 1" text);
CREATE TABLE parted (id int, region text, v text, PRIMARY KEY (id, region))
	PARTITION BY LIST (region);
CREATE TABLE parted_east PARTITION OF parted FOR VALUES IN ('east');
CREATE TABLE parted_west PARTITION OF parted FOR VALUES IN ('west');
CREATE TABLE listed (id int PRIMARY KEY, a text, secret text);
CREATE TABLE alt (id int PRIMARY KEY, a text, b int);
CREATE TABLE fullid (x int, y text);
ALTER TABLE fullid REPLICA IDENTITY FULL;
CREATE PUBLICATION changestream FOR TABLE edge, "Odd Schema"."Weird ""Table""",
	parted, listed (id, a), alt, fullid
	WITH (publish_via_partition_root = true);
});
cs_start_archiving($node);

# published columns of a table, in order, as the archive has them
sub published_cols
{
	my ($table) = @_;
	my $out = $node->safe_psql($db, qq{
		SELECT string_agg(a.attname, ',' ORDER BY a.attnum)
		FROM pg_attribute a
		JOIN pg_publication_tables p ON p.schemaname = (SELECT nspname FROM pg_namespace WHERE oid = (SELECT relnamespace FROM pg_class WHERE oid = '$table'::regclass))
		 AND p.tablename = (SELECT relname FROM pg_class WHERE oid = '$table'::regclass)
		WHERE a.attrelid = '$table'::regclass AND a.attnum > 0 AND NOT a.attisdropped
		  AND a.attgenerated = '' AND a.attname = ANY (p.attnames)});
	return [ split /,/, $out ];
}

my $step = 0;
my $checked = 0;

# Run one transaction on $table, then compare every change row of it with
# the source as it is right after.  $expect = number of change rows.
sub check_step
{
	my ($table, $schema, $relname, $sql, $expect, %opts) = @_;
	$step++;
	my $before = $node->safe_psql($db, 'SELECT pg_current_wal_lsn()');
	$node->safe_psql($db, "BEGIN; $sql; COMMIT;");
	my $after = $node->safe_psql($db, 'SELECT pg_current_wal_lsn()');
	my $copy = "oracle_$step";
	$node->safe_psql($db, "CREATE TABLE $copy AS SELECT * FROM $table");
	cs_wait_archived($node, name => "step $step");
	my $cols = published_cols($table);
	my $collist = join(',', map { qq{"$_"} =~ s/^"(.*)"$/'$1'/r } @$cols);
	my $keycol = $opts{key} // 'id';
	my $where = qq{schema_name = '$schema' AND table_name = '$relname'};
	# the archive's text values are read under its pinned session settings
	my $r = $node->safe_psql($db, $ChangestreamTest::ORACLE_SETTINGS . qq{
		WITH c AS (SELECT * FROM changestream.changes(NULL, '$before', '$after')
		           WHERE action IN ('insert', 'update') AND $where)
		SELECT count(*),
		       count(*) FILTER (WHERE s."$keycol" IS NOT NULL
		           AND jsonb_populate_record(s, c.new_row)::text = s::text),
		       count(*) FILTER (WHERE (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(c.new_row) k)
		           IS NOT DISTINCT FROM (SELECT array_agg(x ORDER BY x) FROM unnest(ARRAY[$collist]::text[]) x
		                                 WHERE x <> ALL (c.unchanged_columns))),
		       string_agg(DISTINCT array_to_string(c.unchanged_columns, ','), ';')
		FROM c LEFT JOIN $copy s ON s."$keycol"::text = c.new_row->>'$keycol'});
	my ($n, $same, $keys, $unchanged) = split /\|/, $r;
	is($n, $expect, "step $step ($opts{name}): $expect change rows");
	is($same, $n, "step $step: every new_row equals the source row");
	is($keys, $n, "step $step: new_row has the published columns but unchanged ones");
	is($unchanged // '', $opts{unchanged} // '', "step $step: unchanged_columns")
	  if exists $opts{unchanged};
	$checked += $n;
	return ($before, $after);
}

my $bigval = $node->safe_psql($db, "SELECT string_agg(md5(i::text), '') FROM generate_series(1, 400) i");
check_step('edge', 'public', 'edge', qq{
	INSERT INTO edge (id, t, n, f8, f4, ts, iv, b, arr, tarr, j, js, dom, m, marr, big) VALUES
	(1, E'tab\\there\\nnewline \\\\N', 'NaN', 'Infinity', '-Infinity', '-infinity', '-1 days +02:03:04.5',
	 '\\x00ff00', '{1,NULL,3}', '{"a b","\\"q\\"",NULL}', '{"k": [1, "x", null]}', '{"a": 1}', 5,
	 'happy', '{sad,ok}', '$bigval'),
	(2, NULL, '1e-20', 'NaN', 'NaN', 'infinity', '0', '', '{}', '{}', '{"n": null}', '"s"', NULL, NULL, NULL, NULL),
	(3, '', '-0.0', '-0', '1.5e30', '2026-01-01 12:00:00.123456+05', '1 year 2 mons', '\\x5c4e', '{{1,2},{3,4}}', '{"\\\\N"}', '[]', '[1, 2]', 1, 'ok', '{}', 'small')},
	3, name => 'value classes');
check_step('edge', 'public', 'edge', q{UPDATE edge SET t = 'changed' WHERE id = 1},
	1, name => 'unchanged TOAST', unchanged => 'big');

# json values that jsonb cannot hold (issue 30): a \u0000 escape and a
# number beyond numeric's range are valid json.  changes() gives them back
# as strings holding the stored text, exactly, with one WARNING for the
# call, and the other rows of the same transaction and call as usual.
{
	my $jb = $node->safe_psql($db, 'SELECT pg_current_wal_lsn()');
	$node->safe_psql($db, q{INSERT INTO edge (id, js, j) VALUES
		(10, '{"z": "a\u0000b", "z": 1}', '{"k": 1}'),
		(11, '[1e1000000]', NULL),
		(12, '{"a":   [2]}', '{"b": "\u00e9"}');
		UPDATE edge SET js = '"\u0000"' WHERE id = 12});
	my $ja = $node->safe_psql($db, 'SELECT pg_current_wal_lsn()');
	cs_wait_archived($node, name => 'json jsonb cannot hold');
	my ($ret, $out, $err) = $node->psql($db, $ChangestreamTest::ORACLE_SETTINGS . qq{
		WITH c AS (SELECT * FROM changestream.changes(NULL, '$jb', '$ja', relations => '{edge}'))
		SELECT count(*),
		       count(*) FILTER (WHERE jsonb_typeof(c.new_row->'js') = 'string'
		                          AND c.new_row->>'js' = s.js::text),
		       count(*) FILTER (WHERE jsonb_typeof(c.new_row->'js') <> 'string'
		                          AND c.new_row->'js' = s.js::jsonb),
		       count(*) FILTER (WHERE c.new_row->'j' IS NOT DISTINCT FROM
		                          coalesce(s.j, 'null'::jsonb))
		FROM c JOIN edge s ON s.id::text = c.new_row->>'id'
		WHERE c.action = 'insert' AND s.id IN (10, 11)
		   OR c.action = 'update' AND s.id = 12});
	is($ret, 0, 'changes() over json values jsonb cannot hold succeeds');
	is($out, '3|3|0|3', 'each is given back as its stored text, the other columns as usual');
	my $warnings = () = $err =~ /WARNING:  a value of column "js" cannot be held by jsonb/g;
	is($warnings, 1, 'one WARNING for the call names the column');
	like($err, qr/HINT:  Read it with \(new_row->>'js'\)::json/, 'the hint quotes the column name as a literal');
	# the warning is per call (its state is the call's): two calls in one
	# statement warn once each
	(undef, undef, $err) = $node->psql($db, qq{SELECT
		(SELECT count(*) FROM changestream.changes(NULL, '$jb', '$ja', relations => '{edge}')),
		(SELECT count(*) FROM changestream.changes(NULL, '$jb', '$ja', relations => '{edge}'))});
	$warnings = () = $err =~ /WARNING:  a value of column "js" cannot be held by jsonb/g;
	is($warnings, 2, 'two calls in one statement: one WARNING each');
	is($node->safe_psql($db, qq{SELECT new_row->'js'
		FROM changestream.changes(NULL, '$jb', '$ja', relations => '{edge}')
		WHERE action = 'insert' AND new_row->>'id' = '12'}),
		'{"a": [2]}', 'a json value jsonb holds stays embedded');
}
check_step('"Odd Schema"."Weird ""Table"""', 'Odd Schema', 'Weird "Table"',
	q{INSERT INTO "Odd Schema"."Weird ""Table""" VALUES (1, 'x'), (2, NULL)},
	2, name => 'quoted names', key => 'Id');
check_step('parted', 'public', 'parted',
	q{INSERT INTO parted VALUES (1, 'east', 'e'), (2, 'west', 'w')},
	2, name => 'partitions via the root');
check_step('parted', 'public', 'parted', q{UPDATE parted SET v = 'w2' WHERE id = 2},
	1, name => 'partition update via the root');
check_step('listed', 'public', 'listed', q{INSERT INTO listed VALUES (1, 'a', 'hidden')},
	1, name => 'column list');
check_step('alt', 'public', 'alt', q{INSERT INTO alt VALUES (1, 'a', 1), (2, 'b', 2)}, 2, name => 'alt rows');
check_step('alt', 'public', 'alt', q{ALTER TABLE alt ADD COLUMN c numeric DEFAULT 7; UPDATE alt SET c = 1.5 WHERE id = 1},
	1, name => 'ADD COLUMN');
check_step('alt', 'public', 'alt', q{ALTER TABLE alt DROP COLUMN b; INSERT INTO alt VALUES (3, 'c', 3)},
	1, name => 'DROP COLUMN');
check_step('alt', 'public', 'alt', q{ALTER TABLE alt RENAME COLUMN a TO a2; UPDATE alt SET a2 = 'r' WHERE id = 2},
	1, name => 'RENAME COLUMN');
check_step('alt', 'public', 'alt', q{ALTER TABLE alt ALTER COLUMN c TYPE float8; UPDATE alt SET c = c + 1},
	3, name => 'ALTER COLUMN TYPE');
check_step('fullid', 'public', 'fullid', q{INSERT INTO fullid VALUES (1, 'a')},
	1, name => 'REPLICA IDENTITY FULL', key => 'x');
check_step('fullid', 'public', 'fullid', q{UPDATE fullid SET y = 'b'},
	1, name => 'REPLICA IDENTITY FULL update', key => 'x');

# old_row: the key, or the whole old row under REPLICA IDENTITY FULL
my ($b, $a) = check_step('alt', 'public', 'alt', q{UPDATE alt SET id = 20 WHERE id = 2; DELETE FROM alt WHERE id = 3},
	1, name => 'key change');
is($node->safe_psql($db, qq{SELECT string_agg(action || ' ' || old_row::text, ';' ORDER BY ordinal)
	FROM changestream.changes(NULL, '$b', '$a', relations => '{alt}')}),
	'update {"id": "2"};delete {"id": "3"}', 'old_row is the old key');
is($node->safe_psql($db, q{SELECT old_row::text FROM changestream.changes(relations => '{public.fullid}')
	WHERE action = 'update'}), '{"x": "1", "y": "a"}', 'old_row is the whole old row under FULL');
my (undef, undef, $nosuch) = $node->psql($db,
	q{SELECT count(*) FROM changestream.changes(relations => '{nosuch}')});
like($nosuch, qr/table "nosuch" \(in relations\) matches no table archived in generation/,
	'relations: a name matching no archived table is refused, not an empty result');

# truncate and messages, ordinal within the transaction
$node->safe_psql($db, q{BEGIN; INSERT INTO alt VALUES (30, 'x', 1); SELECT pg_logical_emit_message(true, 'p', 'in txn');
	TRUNCATE alt, fullid; COMMIT; SELECT pg_logical_emit_message(false, 'p', '\\x0001'::bytea)});
cs_wait_archived($node, name => 'truncate');
is($node->safe_psql($db, q{SELECT string_agg(ordinal || ':' || action || ':' || coalesce(table_name, new_row->>'content'), ',' ORDER BY ordinal)
	FROM changestream.changes() WHERE xid = (SELECT xid FROM changestream.changes() WHERE action = 'truncate' LIMIT 1)}),
	'1:insert:alt,2:message:in txn,3:truncate:alt,4:truncate:fullid', 'ordinal, truncate and message rows');
is($node->safe_psql($db, q{SELECT new_row->>'content' FROM changestream.changes() WHERE action = 'message' AND xid IS NULL
	AND new_row->>'prefix' = 'p'}), '\x0001', 'non-transactional binary message');

# time bounds: the same rows as the LSN bounds they correspond to
my ($t1, $t2) = split /\|/, $node->safe_psql($db, qq{SELECT min(commit_time), max(commit_time) FROM changestream.changes(NULL, '$b', '$a')});
is($node->safe_psql($db, qq{SELECT count(*) FROM changestream.changes(start_time => '$t1', end_time => '$t2')}),
	'2', 'time bounds select the same transaction');

# whole history against an independent count: the oracle copies
ok($checked >= 20, "$checked change rows compared with the source");

# 2. verify() on a sound archive, and cs_decode.py agrees
$node->safe_psql($db, q{SELECT changestream.take_snapshot()});
for my $k (0 .. 5)
{
	$node->safe_psql($db, "INSERT INTO edge (id, t, big) SELECT i, 'fill', repeat(md5(i::text), 30) FROM generate_series(100 + $k * 300, 399 + $k * 300) i");
}
cs_wait_archived($node, name => 'fill');
my $gen = $node->safe_psql($db, 'SELECT generation FROM changestream.status()');
cs_poll_or_diag($node, $db, qq{SELECT count(*) > 1 FROM changestream.wal_segments('$gen') WHERE compressed}, 't', 60,
	'some segments are sealed');
is($node->safe_psql($db, 'SELECT count(*) FROM changestream.verify()'), '0', 'verify(): sound archive, no rows');
my $archive = cs_archive_dir($node);
my $gendir = "$archive/generations/$gen";
sub decode
{
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(['python3', "$FindBin::Bin/../scripts/cs_decode.py", '--summary', @_],
		'>', \$out, '2>', \$err);
	return ($ok ? 0 : ($? >> 8), $out, $err);
}
my ($rc, $out, $err) = decode($gendir);
is($rc, 0, 'cs_decode.py --summary: sound') or diag($err);

# 3. damage: flip a byte inside a sealed segment's first frame body
$node->stop;
my ($victim) = sort glob("$gendir/wal/*.wal.gz");
my $hsize = unpack('N', substr(ad_load($victim), 12, 4));    # 64 (format 1) or 128 (2)
ad_flip_bit($victim, $hsize + 12 + 40);
$node->start;
(my $vname = $victim) =~ s{.*/}{};
my $v = $node->safe_psql($db, 'SELECT file_name, byte_offset FROM changestream.verify()');
my ($vfile, $voff) = split /\|/, $v;
is($vfile, "wal/$vname", 'verify() names the damaged segment');
ok($voff >= $hsize && $voff <= $hsize + 52, "verify() names the frame holding the flipped byte (offset $voff)");
my ($ok, $stdout, $stderr) = ('', '', '');
$node->psql($db, 'SELECT count(*) FROM changestream.changes()', stdout => \$stdout, stderr => \$stderr,
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($stderr, qr/XX001.*\Q$vname\E.*offset $voff/s, 'changes() raises XX001 naming the same file and offset');
($rc, $out, $err) = decode($gendir);
isnt($rc, 0, 'cs_decode.py: damaged');
like("$out\n$err", qr/\Q$vname\E.*offset $voff/, 'cs_decode.py names the same file and offset');

# 4. a snapshot whose manifest announces more rows than it holds
$node->stop;
my ($snap) = sort glob("$gendir/snapshots/*.snapshot.gz");
my $text = ad_load($snap);
$text =~ s/^-- rows: (\d+)$/"-- rows: " . ($1 + 1)/me or die "no rows line";
ad_store($snap, $text);
$node->start;
(my $sname = $snap) =~ s{.*/}{};
like($node->safe_psql($db, "SELECT file_name || '|' || byte_offset || '|' || problem FROM changestream.verify() WHERE file_name LIKE 'snapshots/%'"),
	qr/^snapshots\/\Q$sname\E\|0\|.*announces \d+ rows/, 'verify() names the snapshot whose row count is wrong');
($rc, $out, $err) = decode($gendir);
like("$out\n$err", qr/\Q$sname\E: offset 0: the manifest announces \d+ rows/, 'cs_decode.py names the same snapshot');

$node->stop;
done_testing();
