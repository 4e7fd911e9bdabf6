# Schema history and restore() across DDL (issue 30, first slice).
#
# The extension is created at version 0.1 and updated to 0.2 (ALTER
# EXTENSION ... UPDATE), and its objects must then equal a fresh 0.2
# install's.  CREATE EXTENSION refuses (42501) a schema changestream
# owned by, or open to CREATE by, a role that is not a superuser, and
# every SECURITY DEFINER function runs with search_path = pg_catalog,
# pg_temp.  A workload runs in steps: rows inserted, ALTER COLUMN TYPE
# ... USING (a rewrite that changes every value), ADD COLUMN ... DEFAULT 7
# (existing rows get the default without a rewrite; also on a partitioned
# table, whose partitions are published), a table renamed, rows
# updated, a type change without USING (int -> bigint: replayed, a cast
# that does not depend on the session), a table removed from the publication
# and added back (refused until the next snapshot), a take_snapshot(), ADD
# COLUMN with a volatile default (a rewrite), a table dropped.  After each
# step the test records pg_current_wal_lsn() and, per table, a digest of
# the source (md5 of the rows' text forms in order, under the archive's
# pinned settings).
#
# Then every recorded point is restored (skip_inexact => true, into a
# scratch schema and into a fresh database with target_schema NULL, each
# in a transaction rolled back afterwards): every table of
# the source either equals its digest or is refused with the documented
# WARNING (and is then absent from the target); a table differing silently
# fails the test, and so does a refusal other than the expected ones.
# Without skip_inexact the same points fail with 0A000 naming the table,
# the command, its LSN and the nearest exact targets.  The tables filter
# finds a renamed table by its name at the target and by its old name.
#
# Also: changes() gives the DDL records back as action 'ddl' rows with the
# right command tags in order, without statement text (nothing else sent
# in the command's query string reaches the archive); a role without
# privileges cannot write the history table, while its own DDL is
# recorded by the SECURITY DEFINER
# triggers, as is DDL under session_replication_role = replica; logical
# messages with any prefix (archived: message_prefixes '*') never become
# 'ddl' rows; DROP EXTENSION leaves the publication changestream_ddl
# empty, CREATE EXTENSION refuses one that publishes a table and replaces
# the empty one, and DDL after it is archived (the re-created table's OID
# is trusted); on a second node the
# extension is created after the archiver started, which then sees the
# publication (through SPI) and starts a session that streams it once the
# archive has passed the point where it appeared, without an error.
#
# A third node (publication FOR TABLES IN SCHEMA public WITH
# (publish_via_partition_root)) runs commands that changed rows silently
# in the first slice, each compared with the source tables restored into
# a fresh database: ADD COLUMN DEFAULT with ALTER COLUMN TYPE (or SET
# ACCESS METHOD) in one command, a TimeZone-dependent cast, SET UNLOGGED
# and SET LOGGED, ADD COLUMN DEFAULT in a REPEATABLE READ transaction
# whose snapshot does not see the rows, ALTER TYPE ... RENAME VALUE of an
# enum, ADD COLUMN DEFAULT on a root published via the root; a record of
# a never-published table refuses nothing without skip_inexact; and a
# table named changestream.ddl_history made after DROP EXTENSION, holding
# forged records, is ordinary data: changes() shows inserts, restore()
# neither refuses nor renames the table they name.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;

my $node = cs_new_node('ddl',
	conf => "changestream.segment_size = '64kB'\nchangestream.message_prefixes = '*'\n");
$node->start;
my $db = 'postgres';
my $S = $ChangestreamTest::ORACLE_SETTINGS;

# ---------- the extension: 0.1, then ALTER EXTENSION UPDATE ----------

$node->safe_psql($db, "CREATE EXTENSION changestream VERSION '0.1'");
is($node->safe_psql($db, "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'changestream%'"),
	'0', '0.1 installs no event trigger');
$node->safe_psql($db, 'ALTER EXTENSION changestream UPDATE');
is($node->safe_psql($db, "SELECT extversion FROM pg_extension WHERE extname = 'changestream'"),
	'0.2', 'ALTER EXTENSION changestream UPDATE reaches 0.2');
$node->safe_psql($db, 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION changestream');
my $objects = q{
	SELECT string_agg(x, E'\n' ORDER BY x) FROM (
	  SELECT pg_describe_object(d.classid, d.objid, 0) AS x
	    FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
	   WHERE e.extname = 'changestream' AND d.deptype = 'e'
	  UNION ALL
	  SELECT 'function ' || p.oid::regprocedure || ' ' || md5(pg_get_functiondef(p.oid))
	    || ' ' || coalesce(p.proacl::text, '')
	    FROM pg_proc p WHERE p.pronamespace = 'changestream'::regnamespace
	  UNION ALL
	  SELECT 'event trigger ' || evtname || ' ' || evtevent || ' ' || evtfoid::regproc
	    || ' ' || evtenabled::text FROM pg_event_trigger
	  UNION ALL
	  SELECT 'publication ' || p.pubname || ' ' || p.pubinsert || p.pubupdate || p.pubdelete
	    || p.pubtruncate || ' ' || coalesce((SELECT string_agg(pt.tablename, ',')
	    FROM pg_publication_tables pt WHERE pt.pubname = p.pubname), '')
	    FROM pg_publication p
	  UNION ALL
	  SELECT 'acl ' || c.relname || ' ' || coalesce(c.relacl::text, '')
	    FROM pg_class c WHERE c.relnamespace = 'changestream'::regnamespace
	  UNION ALL
	  SELECT 'comment ' || p.oid::regprocedure || ' ' || coalesce(obj_description(p.oid, 'pg_proc'), '')
	    FROM pg_proc p WHERE p.pronamespace = 'changestream'::regnamespace
	  UNION ALL
	  SELECT 'comment ' || c.relname || ' ' || coalesce(obj_description(c.oid, 'pg_class'), '')
	    FROM pg_class c WHERE c.relnamespace = 'changestream'::regnamespace
	  UNION ALL
	  SELECT 'schema acl ' || coalesce(n.nspacl::text, '')
	    FROM pg_namespace n WHERE n.nspname = 'changestream') o};
my $updated = $node->safe_psql($db, $objects);
is($updated, $node->safe_psql('fresh', $objects),
	'after the update from 0.1, the objects equal a fresh 0.2 install');
like($updated, qr/publication changestream_ddl truefalsefalsefalse ddl_history/,
	'publication changestream_ddl publishes the inserts of ddl_history');

# ---------- a schema changestream that is not the extension's own ----------
# A role that is not a superuser could create the schema first and plant
# objects there that the SECURITY DEFINER trigger functions would resolve.
$node->safe_psql($db, q{CREATE DATABASE planted; CREATE ROLE planter LOGIN});
$node->safe_psql('planted', q{CREATE SCHEMA changestream AUTHORIZATION planter});
my ($prc, $pout, $perr) = $node->psql('planted', 'CREATE EXTENSION changestream',
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($perr, qr/ERROR:\s+42501:\s+schema "changestream" is owned by a role that is not a superuser.*HINT:\s+Drop or rename that schema/s,
	'CREATE EXTENSION refuses a schema changestream owned by a role that is not a superuser');
$node->safe_psql('planted', q{ALTER SCHEMA changestream OWNER TO CURRENT_USER;
	GRANT CREATE ON SCHEMA changestream TO planter});
($prc, $pout, $perr) = $node->psql('planted', 'CREATE EXTENSION changestream',
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($perr, qr/ERROR:\s+42501:\s+schema "changestream" grants CREATE to roles that are not superusers: planter.*HINT:\s+REVOKE CREATE/s,
	'CREATE EXTENSION refuses a schema changestream where a role that is not a superuser may create objects');
$node->safe_psql('planted', q{REVOKE CREATE ON SCHEMA changestream FROM planter; CREATE EXTENSION changestream});
is($node->safe_psql('planted', q{SELECT count(*) FROM pg_proc p
	WHERE p.pronamespace = 'changestream'::regnamespace AND p.prosecdef
	  AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)}), '0',
	'every SECURITY DEFINER function of the extension runs with search_path = pg_catalog, pg_temp');
$node->safe_psql($db, q{DROP DATABASE planted; DROP ROLE planter});

# ---------- tables, archiving ----------

$node->safe_psql($db, q{
CREATE TABLE ta (id int PRIMARY KEY, v int);
CREATE TABLE tb (id int PRIMARY KEY, v int);
CREATE TABLE tc (id int PRIMARY KEY, v text);
CREATE TABLE td (id int PRIMARY KEY, n int);
CREATE TABLE tg (id int PRIMARY KEY, v int);
CREATE TABLE tp (id int PRIMARY KEY, v int) PARTITION BY RANGE (id);
CREATE TABLE tp1 PARTITION OF tp FOR VALUES FROM (1) TO (11);
CREATE TABLE tp2 PARTITION OF tp FOR VALUES FROM (11) TO (21);
CREATE PUBLICATION changestream FOR TABLE ta, tb, tc, td, tg, tp;
});
cs_start_archiving($node);

my @steps;    # { name, lsn, tables => [names], cols => {t => cols}, digest => {t => md5}, refused => [names] }
my $via_root = 0;    # the oracle's tables: partitions (0) or partitioned roots (1)

sub record_step
{
	my ($name, @refused) = @_;
	my $vr = $via_root ? 'true' : 'false';
	my $cols = $node->safe_psql($db, qq{
		SELECT c.relname, string_agg(quote_ident(a.attname), ',' ORDER BY a.attnum)
		FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
		WHERE c.relnamespace = 'public'::regnamespace
		  AND (c.relkind = 'r' AND NOT (c.relispartition AND $vr)
			   OR (c.relkind = 'p' AND NOT c.relispartition AND $vr))
		  AND a.attnum > 0 AND NOT a.attisdropped
		GROUP BY c.relname ORDER BY c.relname});
	my %cols = map { split /\|/, $_, 2 } split /\n/, $cols;
	my @tables = sort keys %cols;
	my $out = $node->safe_psql($db, "$S SELECT pg_current_wal_lsn();\n"
		  . join(";\n", map { digest_sql('public', $_, $cols{$_}) } @tables));
	my @lines = split /\n/, $out;
	my $lsn = shift @lines;
	my %digest = map { split /\|/ } @lines;
	push @steps, { name => $name, lsn => $lsn, tables => \@tables, cols => \%cols,
		digest => \%digest, refused => [ sort @refused ] };
	note("step $name at $lsn: tables @tables");
	return;
}

sub digest_sql
{
	my ($schema, $table, $cols) = @_;
	return qq{SELECT '$table', md5(coalesce(string_agg(r, '|' ORDER BY r), ''))
		FROM (SELECT ROW($cols)::text AS r FROM $schema.$table) x};
}

$node->safe_psql($db, q{
INSERT INTO ta SELECT i, i FROM generate_series(1, 20) i;
INSERT INTO tb SELECT i, i * 10 FROM generate_series(1, 20) i;
INSERT INTO tc SELECT i, 'c' || i FROM generate_series(1, 20) i;
INSERT INTO td SELECT i, i FROM generate_series(1, 20) i;
INSERT INTO tg SELECT i, i FROM generate_series(1, 20) i;
INSERT INTO tp SELECT i, i FROM generate_series(1, 20) i;
});
record_step('rows inserted');
$node->safe_psql($db, q{ALTER TABLE ta ALTER COLUMN v TYPE text USING 'x' || v});
record_step('ALTER COLUMN TYPE USING', 'ta');
# (on a partitioned table, the partitions' rows get the default)
$node->safe_psql($db, q{ALTER TABLE tb ADD COLUMN w int DEFAULT 7; ALTER TABLE tp ADD COLUMN w int DEFAULT 7});
record_step('ADD COLUMN DEFAULT 7', 'ta', 'tb', 'tp1', 'tp2');
$node->safe_psql($db, q{ALTER TABLE tc RENAME TO tc2});
record_step('RENAME TABLE', 'ta', 'tb', 'tp1', 'tp2');
$node->safe_psql($db, q{
UPDATE ta SET v = v || 'y' WHERE id % 2 = 0;
UPDATE tb SET v = v + 1 WHERE id < 5;
UPDATE tc2 SET v = v || 'z' WHERE id % 3 = 0;
UPDATE td SET n = n * 2 WHERE id > 15;
UPDATE tp SET v = -v WHERE id IN (5, 15);
});
record_step('rows updated', 'ta', 'tb', 'tp1', 'tp2');
# a type change without USING whose cast does not depend on the session
# (int -> bigint) is replayed; any other is refused (see the second part)
$node->safe_psql($db, q{ALTER TABLE td ALTER COLUMN n TYPE bigint});
record_step('ALTER COLUMN TYPE without USING', 'ta', 'tb', 'tp1', 'tp2');
# a table out of the publication and back: the changes between are not archived
$node->safe_psql($db, q{ALTER PUBLICATION changestream DROP TABLE tg;
	UPDATE tg SET v = v + 100 WHERE id <= 3});
record_step('table out of the publication', 'ta', 'tb', 'tg', 'tp1', 'tp2');
$node->safe_psql($db, q{ALTER PUBLICATION changestream ADD TABLE tg;
	UPDATE tg SET v = v + 1 WHERE id = 10});
record_step('table back in the publication', 'ta', 'tb', 'tg', 'tp1', 'tp2');
# the statement text is not kept: a query string can hold anything
$node->safe_psql($db, q{ALTER TABLE tb ALTER COLUMN w SET DEFAULT 8 \; SELECT 'not-for-the-archive-4711'});
$node->safe_psql($db, q{SELECT changestream.take_snapshot()});
$node->safe_psql($db, q{UPDATE td SET n = n + 1 WHERE id = 1});
record_step('after a snapshot');
$node->safe_psql($db, q{ALTER TABLE ta ADD COLUMN r float8 DEFAULT random()});
record_step('ADD COLUMN volatile DEFAULT', 'ta');
$node->safe_psql($db, q{DROP TABLE td});
record_step('DROP TABLE', 'ta');

# a role without privileges: its own DDL is recorded, it cannot write the history
$node->safe_psql($db, q{CREATE ROLE nobody LOGIN; CREATE SCHEMA nob AUTHORIZATION nobody;
	GRANT USAGE ON SCHEMA changestream TO nobody});
$node->safe_psql($db, q{SET ROLE nobody; CREATE TABLE nob.mine (id int); ALTER TABLE nob.mine ADD COLUMN x int});
# recorded under session_replication_role = replica too (enabled ALWAYS)
$node->safe_psql($db, q{SET session_replication_role = replica; ALTER TABLE nob.mine RENAME COLUMN x TO y});
my ($rc, $out, $err) = $node->psql($db, q{SET ROLE nobody;
	INSERT INTO changestream.ddl_history (event, command_tag, table_oid, schema_name, table_name, rows_changed)
	VALUES ('table_rewrite', 'ALTER TABLE', 'ta'::regclass, 'public', 'ta', true)},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:\s+42501:.*permission denied for table ddl_history/s,
	'a role without privileges cannot insert into ddl_history');
($rc, $out, $err) = $node->psql($db, q{SET ROLE nobody; SELECT changestream.ddl_columns_set(NULL)},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:\s+42501:/, 'nor call the trigger helper');
# logical messages with any prefix are messages, never DDL records
$node->safe_psql($db, q{SET ROLE nobody;
	SELECT pg_logical_emit_message(true, p, '{"event": "table_rewrite", "table_name": "tb", "rows_changed": true}')
	FROM unnest(ARRAY['changestream', 'changestream_ddl', 'ddl_history', '']) p});
cs_wait_archived($node, name => 'workload');

# ---------- changes(): the schema history ----------

my $ddl = $node->safe_psql($db, q{
	SELECT string_agg(concat_ws(' ', table_name, new_row->>'event', new_row->>'command_tag',
		new_row->>'rows_changed', new_row->>'columns'), E'\n' ORDER BY commit_lsn, ordinal)
	FROM changestream.changes() WHERE action = 'ddl'});
is($ddl, join("\n",
	'ta table_rewrite ALTER TABLE f',
	'ta ddl_command_end ALTER TABLE t {v}',
	'tb ddl_command_end ALTER TABLE t {w}',
	'tp ddl_command_end ALTER TABLE t {w}',
	'tp1 ddl_command_end ALTER TABLE t {w}',
	'tp2 ddl_command_end ALTER TABLE t {w}',
	'tc2 ddl_command_end ALTER TABLE f',
	'td table_rewrite ALTER TABLE f',
	'td ddl_command_end ALTER TABLE t {n}',
	'tg sql_drop ALTER PUBLICATION t',
	'tg ddl_command_end ALTER PUBLICATION t',
	'tb ddl_command_end ALTER TABLE f',
	'ta table_rewrite ALTER TABLE t',
	'ta ddl_command_end ALTER TABLE t {r}',
	'td sql_drop DROP TABLE f',
	'mine ddl_command_end CREATE TABLE f',
	'mine ddl_command_end ALTER TABLE f',
	'mine ddl_command_end ALTER TABLE f'),
	"changes() gives the DDL records back as action 'ddl', in order, with their command tags");
is($node->safe_psql($db, q{SELECT count(*) FROM changestream.changes()
	WHERE table_name = 'ddl_history' OR (action <> 'ddl' AND schema_name = 'changestream')}),
	'0', 'changes() never shows ddl_history as a table of its own');
is($node->safe_psql($db, q{SELECT count(*), count(DISTINCT new_row->>'prefix') FROM changestream.changes()
	WHERE action = 'message' AND new_row->>'content' LIKE '%rows_changed%'}),
	'4|4', 'the four logical messages are archived, as messages');
is($node->safe_psql($db, q{SELECT string_agg(concat_ws(' ', new_row->>'command_tag',
		new_row->>'object_identity', new_row ? 'statement'), ',' ORDER BY commit_lsn)
	FROM changestream.changes(relations => '{tb}') WHERE action = 'ddl'}),
	'ALTER TABLE public.tb f,ALTER TABLE public.tb f',
	'a ddl row carries the command tag and object identity, no statement, and the relations filter matches the table it affected');
is($node->safe_psql($db, q{SELECT count(*) FROM changestream.changes()
	WHERE coalesce(new_row::text, '') LIKE '%not-for-the-archive-4711%'}), '0',
	'nothing else sent in the query string of a DDL command reaches the archive');

# ---------- restore() at every point ----------

my %count = (equal => 0, refused => 0, wrong => 0);
my $first_refused = '(ta|tb)';    # the first table a restore without skip_inexact refuses

# Restore $step's point in $dbname (into schema r, or with target_schema
# NULL into each table's own schema, public) and compare every table.
sub check_step
{
	my ($step, $dbname, $label) = @_;
	my ($qs, $ts) = $dbname eq $db ? ("'r'", 'r') : ('NULL', 'public');
	my $rc;
	my $sql = "$S BEGIN; SELECT tables FROM changestream.restore($qs, target_lsn => '$step->{lsn}', skip_inexact => true);"
	  . join('', map { "SELECT '$_', to_regclass('$ts.$_') IS NOT NULL;" } @{ $step->{tables} })
	  . "SELECT 'extra', string_agg(relname, ',' ORDER BY relname) FROM pg_class
		 WHERE relnamespace = to_regnamespace('$ts') AND relkind = 'r';";
	my ($o, $e) = ('', '');
	$node->psql($dbname, $sql . 'ROLLBACK;', stdout => \$o, stderr => \$e, on_error_stop => 1);
	ok($e !~ /ERROR/, "$label step '$step->{name}': restore with skip_inexact succeeds") or diag($e);
	my @lines = split /\n/, $o;
	shift @lines;
	my %exists = map { split /\|/ } @lines;
	my @refused = sort($e =~ /WARNING:\s+table "public\.(\w+)" cannot be restored exactly/g);
	is("@refused", "@{ $step->{refused} }", "$label step '$step->{name}': the refused tables are the expected ones");
	# the restored tables, compared with the source (refused ones must be absent)
	my @present = grep { $exists{$_} eq 't' } @{ $step->{tables} };
	my %got;
	if (@present)
	{
		my $dsql = "$S BEGIN; SELECT changestream.restore($qs, target_lsn => '$step->{lsn}', skip_inexact => true);"
		  . join(";\n", map { digest_sql($ts, $_, $step->{cols}{$_}) } @present) . '; ROLLBACK;';
		# each digest on its own: a restored table lacking a column fails
		# its own query only (ON_ERROR_ROLLBACK), and counts as wrong
		my ($d, $de) = ('', '');
		$node->psql($dbname, $dsql, stdout => \$d, stderr => \$de, on_error_stop => 0,
			extra_params => [ '-v', 'ON_ERROR_ROLLBACK=on' ]);
		my @dl = split /\n/, $d;
		shift @dl;
		%got = map { split /\|/ } @dl;
	}
	my %is_refused = map { $_ => 1 } @refused;
	for my $t (@{ $step->{tables} })
	{
		if ($is_refused{$t})
		{
			$count{refused}++;
			ok($exists{$t} eq 'f', "$label step '$step->{name}': refused table $t is not in the target");
		}
		elsif (($got{$t} // 'missing') eq $step->{digest}{$t})
		{
			$count{equal}++;
		}
		else
		{
			$count{wrong}++;
			fail("$label step '$step->{name}': table $t differs from the source without an error");
		}
	}
	my %source = map { $_ => 1 } @{ $step->{tables} };
	my ($extra) = grep { /^extra\|/ } @lines;
	my @extra = grep { !$source{$_} } split /,/, (split /\|/, $extra // 'extra|', 2)[1] // '';
	is("@extra", '', "$label step '$step->{name}': no table the source does not have");

	# without skip_inexact: 0A000 naming the table, the command, its LSN and the exact points
	return unless @{ $step->{refused} };
	($rc, $o, $e) = $node->psql($dbname,
		"BEGIN; SELECT changestream.restore($qs, target_lsn => '$step->{lsn}'); ROLLBACK;",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	# (a type altered after the target refuses its tables before anything
	# is applied, with its own text)
	like($e, qr/ERROR:\s+0A000:\s+table "public\.$first_refused" cannot be restored exactly: ALTER (TABLE|TYPE) public\.\w+ at [0-9A-F]+\/[0-9A-F]+( changed its existing rows without archived changes.*DETAIL:.*snapshot at.*HINT:\s+Restore to a target before [0-9A-F]+\/[0-9A-F]+, or at or after ([0-9A-F]+\/[0-9A-F]+ \(the next snapshot|the next snapshot, not taken yet \(the archiver takes one changestream\.recapture_delay after a command that changed rows; changestream\.take_snapshot\(\) takes one now\))|, after the target, changed a type its columns \{\w+\} use.*HINT:\s+Restore to a target at or after ([0-9A-F]+\/[0-9A-F]+ \(the first snapshot|the next snapshot, not taken yet \(the archiver takes one))/s,
		"$label step '$step->{name}': without skip_inexact, 0A000 with the command, its LSN and the exact points");
	return;
}

for my $step (@steps)
{
	check_step($step, $db, 'into a scratch schema:');
	check_step($step, 'fresh', 'into a fresh database:');
}

# the tables filter finds a renamed table by its name at the target, and
# by its name before the rename (restored under the name at the target)
my ($renamed) = grep { $_->{name} eq 'RENAME TABLE' } @steps;
for my $name ('tc2', 'tc')
{
	my $got = $node->safe_psql($db, "$S BEGIN;
		SELECT tables FROM changestream.restore('r', target_lsn => '$renamed->{lsn}', tables => '{$name}', skip_inexact => true);
		" . digest_sql('r', 'tc2', $renamed->{cols}{tc2}) . '; ROLLBACK;');
	is($got, "1\ntc2|$renamed->{digest}{tc2}",
		"tables => '{$name}' restores the table renamed from tc to tc2, equal to the source");
}

note("tables x points: $count{equal} equal, $count{refused} refused, $count{wrong} wrong");
is($count{wrong}, 0, 'no table differs silently from the source');
ok($count{refused} > 0 && $count{equal} > 0, 'both outcomes occur');

# ---------- the extension dropped and created again while streaming ----------

$node->safe_psql($db, 'DROP EXTENSION changestream');
is($node->safe_psql($db, q{SELECT count(*) FROM pg_publication p WHERE pubname = 'changestream_ddl'
	AND NOT EXISTS (SELECT FROM pg_publication_rel r WHERE r.prpubid = p.oid)}),
	'1', 'DROP EXTENSION leaves the publication changestream_ddl behind, publishing nothing');
# a publication of that name that publishes something is not taken over
$node->safe_psql($db, 'ALTER PUBLICATION changestream_ddl ADD TABLE tb');
($rc, $out, $err) = $node->psql($db, 'CREATE EXTENSION changestream',
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:\s+42710:.*publication "changestream_ddl" already exists and publishes tables/s,
	'CREATE EXTENSION refuses a publication changestream_ddl that publishes tables');
$node->safe_psql($db, 'ALTER PUBLICATION changestream_ddl DROP TABLE tb');
$node->safe_psql($db, 'CREATE EXTENSION changestream');
cs_wait_state($node, 'streaming', name => 'streaming after DROP and CREATE EXTENSION');
# the archiver streams the new publication once its archive has passed it
my $found = 0;
my $tb_records = $node->safe_psql($db, q{SELECT count(*) FROM changestream.changes()
	WHERE action = 'ddl' AND table_name = 'tb'});
for my $try (1 .. 30)
{
	$node->safe_psql($db, "ALTER TABLE tb ALTER COLUMN w SET DEFAULT $try");
	cs_wait_archived($node, name => "DDL after re-creation, try $try");
	$found = $node->safe_psql($db, qq{SELECT count(*) > $tb_records FROM changestream.changes()
		WHERE action = 'ddl' AND table_name = 'tb'}) eq 't';
	last if $found;
	sleep 1;
}
ok($found, 'DDL after CREATE EXTENSION again reaches the archive');
is($node->safe_psql($db, 'SELECT state FROM changestream.status()'), 'streaming', 'still streaming');

$node->stop;

# ---------- CREATE EXTENSION after the archiver started ----------
# The archiver streams without changestream_ddl, sees it appear (through
# SPI, every status_interval), and starts a session that streams it once
# the archive has passed the point where it was seen.
my $late = cs_new_node('late');
$late->start;
$late->safe_psql($db, q{CREATE TABLE tl (id int PRIMARY KEY, v int);
	INSERT INTO tl SELECT i, i FROM generate_series(1, 5) i;
	CREATE PUBLICATION changestream FOR TABLE tl});
# status() read from another database, where the extension is
$late->safe_psql($db, 'CREATE DATABASE mon');
$late->safe_psql('mon', 'CREATE EXTENSION changestream');
cs_start_archiving($late, db => 'mon');
my $offset = cs_log_offset($late);
$late->safe_psql($db, 'CREATE EXTENSION changestream');
$late->safe_psql($db, 'INSERT INTO tl VALUES (6, 6)');
my $restarted = 0;
for (1 .. 60)
{
	$restarted = 1, last
	  if cs_log_since($late, $offset) =~ /publication "changestream_ddl" exists, starting a new archiving session that streams it/;
	$late->safe_psql($db, 'INSERT INTO tl VALUES (100 + (random() * 1000000)::int, 0) ON CONFLICT DO NOTHING');
	sleep 1;
}
ok($restarted, 'the archiver sees the new publication and starts a session that streams it');
cs_wait_state($late, 'streaming', db => 'mon', name => 'streaming with the schema history');
$late->safe_psql($db, 'ALTER TABLE tl ADD COLUMN w int DEFAULT 3');
cs_wait_archived($late, name => 'late: DDL');
is($late->safe_psql($db, q{SELECT string_agg(table_name || ' ' || (new_row->>'rows_changed'), ',')
	FROM changestream.changes() WHERE action = 'ddl'}), 'tl t',
	'a DDL after the late CREATE EXTENSION is archived');
unlike(cs_log_since($late, $offset), qr/ERROR/, 'no error on the way');
$late->stop;

# ---------- second part: commands that changed rows silently before ----------
# A publication FOR TABLES IN SCHEMA public WITH (publish_via_partition_root):
# every table of public is published (SET UNLOGGED is allowed), and a
# partitioned table is archived as its root.  Each step's command changed
# existing rows without archived changes in a way the first slice did not
# see; each must now be refused (or be exact), compared with the source
# tables, restored into a fresh database where the enum has its old labels.
$node = cs_new_node('ddl2', conf => "changestream.segment_size = '64kB'\n");
$node->start;
$via_root = 1;
@steps = ();
$node->safe_psql($db, q{
CREATE EXTENSION changestream;
CREATE TYPE mood AS ENUM ('sad', 'ok');
CREATE TABLE ua (id int PRIMARY KEY, v int);
CREATE TABLE ua2 (id int PRIMARY KEY, v int);
CREATE TABLE ub (id int PRIMARY KEY, v int);
CREATE TABLE uc (id int PRIMARY KEY, t timestamp);
CREATE TABLE ud (id int PRIMARY KEY, v int);
CREATE TABLE ue (id int PRIMARY KEY, m mood);
CREATE TABLE uh (id int PRIMARY KEY, v int);
CREATE TABLE up (id int PRIMARY KEY, v int) PARTITION BY RANGE (id);
CREATE TABLE up1 PARTITION OF up FOR VALUES FROM (1) TO (11);
CREATE TABLE up2 PARTITION OF up FOR VALUES FROM (11) TO (21);
CREATE SCHEMA np;
CREATE TABLE np.tn (id int PRIMARY KEY, v int);
CREATE PUBLICATION changestream FOR TABLES IN SCHEMA public WITH (publish_via_partition_root = true);
});
$node->safe_psql($db, 'CREATE DATABASE fresh2');
$node->safe_psql('fresh2', q{CREATE EXTENSION changestream; CREATE TYPE mood AS ENUM ('sad', 'ok')});
cs_start_archiving($node);
$node->safe_psql($db, q{
INSERT INTO ua SELECT i, i FROM generate_series(1, 10) i;
INSERT INTO ua2 SELECT i, i FROM generate_series(1, 10) i;
INSERT INTO ub SELECT i, i FROM generate_series(1, 10) i;
INSERT INTO uc SELECT i, '2026-01-01 10:00'::timestamp + i * interval '1 hour' FROM generate_series(1, 10) i;
INSERT INTO ue SELECT i, CASE WHEN i % 2 = 0 THEN 'sad' ELSE 'ok' END::mood FROM generate_series(1, 10) i;
INSERT INTO uh SELECT i, i FROM generate_series(1, 10) i;
INSERT INTO up SELECT i, i FROM generate_series(1, 20) i;
INSERT INTO np.tn SELECT i, i FROM generate_series(1, 10) i;
});
record_step('rows inserted', 'ue');
# a table never published: its record refuses nothing (restored tables only)
$node->safe_psql($db, q{ALTER TABLE np.tn ADD COLUMN w int DEFAULT 1});
record_step('unpublished table altered', 'ue');
# ADD COLUMN DEFAULT with a rewrite in the same command (no missing value)
$node->safe_psql($db, q{ALTER TABLE ua ADD COLUMN w int DEFAULT 5, ALTER COLUMN v TYPE bigint});
$node->safe_psql($db, q{ALTER TABLE ua2 ADD COLUMN w int DEFAULT 5, SET ACCESS METHOD heap});
record_step('ADD COLUMN DEFAULT with a rewrite', 'ua', 'ua2', 'ue');
# a cast that depends on the session (TimeZone): no USING
$node->safe_psql($db, q{SET TimeZone = 'Asia/Tokyo'; ALTER TABLE uc ALTER COLUMN t TYPE timestamptz});
record_step('ALTER COLUMN TYPE with a TimeZone-dependent cast', 'ua', 'ua2', 'uc', 'ue');
# changes while unlogged are not decoded
$node->safe_psql($db, q{ALTER TABLE ub SET UNLOGGED; INSERT INTO ub VALUES (100, 100);
	UPDATE ub SET v = -v WHERE id = 1});
record_step('SET UNLOGGED', 'ua', 'ua2', 'ub', 'uc', 'ue');
$node->safe_psql($db, q{ALTER TABLE ub SET LOGGED; UPDATE ub SET v = v + 1 WHERE id = 2});
record_step('SET LOGGED', 'ua', 'ua2', 'ub', 'uc', 'ue');
# the emptiness probe must see rows its REPEATABLE READ snapshot does not
my $rr = $node->background_psql($db);
$rr->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM ud');
$node->safe_psql($db, q{INSERT INTO ud SELECT i, i FROM generate_series(1, 10) i});
$rr->query_safe('ALTER TABLE ud ADD COLUMN w int DEFAULT 9; COMMIT');
$rr->quit;
record_step('ADD COLUMN DEFAULT under REPEATABLE READ', 'ua', 'ua2', 'ub', 'uc', 'ud', 'ue');
# stored enum values read under a new label
$node->safe_psql($db, q{ALTER TYPE mood RENAME VALUE 'sad' TO 'unhappy'});
record_step('ALTER TYPE RENAME VALUE', 'ua', 'ua2', 'ub', 'uc', 'ud', 'ue');
# publish_via_partition_root: the root is what is restored
$node->safe_psql($db, q{ALTER TABLE up ADD COLUMN w int DEFAULT 7});
record_step('ADD COLUMN DEFAULT on a root published via_partition_root',
	'ua', 'ua2', 'ub', 'uc', 'ud', 'ue', 'up');
$node->safe_psql($db, q{SELECT changestream.take_snapshot()});
$node->safe_psql($db, q{UPDATE up SET v = v + 1 WHERE id IN (3, 13); UPDATE ue SET m = 'ok' WHERE id = 2});
record_step('after a snapshot');
cs_wait_archived($node, name => 'second part');

is($node->safe_psql($db, q{SELECT string_agg(DISTINCT table_name, ',' ORDER BY table_name)
	FROM changestream.changes() WHERE action = 'ddl' AND table_name = 'tn'}), 'tn',
	'the unpublished table\'s DDL is in the archive');
my ($unpub) = grep { $_->{name} eq 'unpublished table altered' } @steps;
my ($o2, $e2) = ('', '');
# (ue is left out: the enum RENAME VALUE after the point refuses it)
$node->psql('fresh2', "BEGIN; SELECT tables FROM changestream.restore(NULL, target_lsn => '$unpub->{lsn}', tables => '{"
	. join(',', grep { $_ ne 'ue' } @{ $unpub->{tables} }) . "}'); ROLLBACK;",
	stdout => \$o2, stderr => \$e2);
is($o2, scalar(@{ $unpub->{tables} }) - 1,
	'without skip_inexact, a record of a table never published refuses nothing') or diag($e2);

$first_refused = '(ua|ua2|ue)';
for my $step (@steps)
{
	# the fresh database's enum has the labels the source had at the point
	$node->safe_psql('fresh2', q{ALTER TYPE mood RENAME VALUE 'sad' TO 'unhappy'})
	  if $step->{name} eq 'after a snapshot';
	check_step($step, 'fresh2', 'second part, into a fresh database:');
}

# ---------- a table named changestream.ddl_history that is not the extension's ----------
# After DROP EXTENSION anyone allowed may make one; published and
# archived, its rows are ordinary data, never schema history.
$node->safe_psql($db, q{DROP EXTENSION changestream;
	CREATE SCHEMA IF NOT EXISTS changestream;
	CREATE TABLE changestream.ddl_history (id bigserial PRIMARY KEY, event text NOT NULL,
		command_tag text NOT NULL, object_type text, object_identity text,
		table_oid oid NOT NULL, schema_name text NOT NULL, table_name text NOT NULL,
		publication text, rewrite_reason int, columns text[], rows_changed boolean NOT NULL);
	ALTER PUBLICATION changestream ADD TABLE changestream.ddl_history});
$node->safe_psql($db, q{
	INSERT INTO changestream.ddl_history (event, command_tag, object_identity, table_oid,
		schema_name, table_name, columns, rows_changed)
	VALUES ('ddl_command_end', 'ALTER TABLE', 'public.uh', 'uh'::regclass, 'public', 'uh', '{v}', true),
		('ddl_command_end', 'ALTER TABLE', 'public.uh_forged', 'uh'::regclass, 'public', 'uh_forged', NULL, false);
	UPDATE uh SET v = v * 3 WHERE id < 4});
my $forged_lsn = $node->safe_psql($db, 'SELECT pg_current_wal_lsn()');
my $uh_digest = $node->safe_psql($db, "$S " . digest_sql('public', 'uh', 'id,v'));
# (status() is read in fresh2; the fence that passes the target is a
# message in the archived database)
$node->safe_psql($db, q{SELECT pg_logical_emit_message(true, 'changestream_test', 'fence')});
cs_wait_archived($node, db => 'fresh2', name => 'forged history');
is($node->safe_psql('fresh2', q{SELECT string_agg(action, ',' ORDER BY commit_lsn, ordinal)
	FROM changestream.changes() WHERE schema_name = 'changestream' OR new_row->>'table_name' = 'uh_forged'}),
	'insert,insert', 'changes() gives the forged rows back as inserts into a table, not as DDL');
($o2, $e2) = ('', '');
$node->psql('fresh2', "$S BEGIN; SELECT tables FROM changestream.restore(NULL, target_lsn => '$forged_lsn', tables => '{uh}');"
	. digest_sql('public', 'uh', 'id,v') . '; ROLLBACK;',
	stdout => \$o2, stderr => \$e2);
is($o2, "1\n$uh_digest", 'a forged record neither refuses nor renames the table it names')
  or diag($e2);

note("tables x points (both parts): $count{equal} equal, $count{refused} refused, $count{wrong} wrong");
is($count{wrong}, 0, 'second part: no table differs silently from the source');
$node->stop;

done_testing();
