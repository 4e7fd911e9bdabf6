# restore(): replica identity keys and sequences across schema changes
# (issue 30).
#
# Keys.  Tables restore() creates get the source's replica identity key
# as their primary key as soon as the archive names one, and follow it:
# the load-then-add-key pattern (CREATE TABLE, bulk INSERT, ALTER TABLE
# ... ADD PRIMARY KEY, then UPDATE and DELETE), the key moved to other
# columns (and a former key column made nullable and given a NULL), REPLICA
# IDENTITY USING INDEX, a take_snapshot() (the manifest names the key; no
# change follows it before the next point), REPLICA IDENTITY FULL, the key
# dropped; for lk, created and loaded before the generation's snapshot,
# and lk2, created after it; and fk, first seen in the stream with
# REPLICA IDENTITY FULL, which later gets a key.  ck's composite primary
# key vanishes with a dropped key column, and a NULL follows in the other
# (the NOT NULL the target's key set must go too); kf switches to
# REPLICA IDENTITY FULL keeping its primary key (the target keeps it:
# FULL says nothing of the key), then drops the key under FULL and
# inserts a duplicate (the schema history record drops the target's).
# At the target, restore() gives a table it created the source's
# definition (docs/DESIGN.md section 12): the expected primary key and
# replica identity are the source's, whatever the identity (under FULL
# or NOTHING too, and under USING INDEX the primary key stays the
# source's, the index the identity).  After each step (each
# ends with a change to every table, so that the archive holds the
# Relation of the new identity) the test records the LSN and, per table,
# the source's digest (md5 of its rows' text forms in order) and its
# replica identity (the kind, DEFAULT and USING INDEX both as a key, and
# the key's columns).  Every point is restored into a scratch schema,
# into a fresh database, and into a database with a FOR ALL TABLES
# publication (where UPDATE and DELETE need the key): each table's digest
# and its primary key columns and replica identity must equal the
# source's at that point.
#
# Sequences.  Tables with serial, bigserial, identity (ALWAYS, BY
# DEFAULT) and a domain-typed serial column get rows before and after
# snapshots, rows deleted (the column's maximum falls below the sequence)
# and nextval() calls rolled back (the sequence ahead of the table).  A
# trigger logs every id a committed insert gave: each restored sequence
# must be at or past the greatest logged up to the point (values handed
# out after the snapshot to rows deleted since included).  A target whose
# row level security hides its row is refused (42501); a superuser sees
# it not empty.  The snapshot manifests must
# record each sequence's value at the snapshot (read from the source just
# before and after the snapshot).  Each point is restored into a
# pre-created schema (the same DDL, fresh sequences): every target
# sequence must then be at or past the source's at the snapshot the
# restore starts from and at or past the restored column's maximum, a
# NOTICE names each one set, and rows inserted with defaults must not
# collide.  A target sequence already past that is not moved back.  Into
# a fresh database, the tables restore() creates get their serial and identity
# columns' sequences from the definition, and a NOTICE names each one set.
#
# Damage: a manifest whose new members are of the wrong type, whose key
# names no column, whose JSON is broken or nested beyond the stack, whose
# header numbers do not parse or overflow, or whose column type is not a
# type name (SQL put there to be run: it must not run) is XX001 naming
# the file and offset; a newer snapshot format is 0A000.
use strict;
use warnings;

use ChangestreamTest;
use JSON::PP;

my $S = $ChangestreamTest::ORACLE_SETTINGS;
my $db = 'postgres';

# the digest and identity helpers, in every database the test reads
my $helpers = q{
CREATE DOMAIN public.posid AS bigint CHECK (VALUE > 0);
CREATE FUNCTION public.cs_digest(sch text, tab text, cols text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
	IF to_regclass(format('%I.%I', sch, tab)) IS NULL THEN RETURN 'absent'; END IF;
	EXECUTE format('SELECT md5(coalesce(string_agg(r, ''|'' ORDER BY r), '''')) FROM (SELECT ROW(%s)::text AS r FROM %I.%I) x',
		cols, sch, tab) INTO r;
	RETURN r;
END $$;
-- source: the replica identity (i as d) and its key's columns;
-- target: the replica identity and the primary key's columns
CREATE FUNCTION public.cs_ident(sch text, tab text, source bool) RETURNS text
LANGUAGE sql AS $$
	SELECT coalesce((
		SELECT CASE c.relreplident WHEN 'i' THEN 'd' ELSE c.relreplident::text END || ':' ||
			coalesce((SELECT string_agg(a.attname, ',' ORDER BY a.attname)
				FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid
					AND a.attnum = ANY (i.indkey)
				WHERE i.indrelid = c.oid AND CASE WHEN source
					THEN (c.relreplident = 'd' AND i.indisprimary)
						OR (c.relreplident = 'i' AND i.indisreplident)
					ELSE i.indisprimary END), '')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = sch AND c.relname = tab), 'absent')
$$;
-- the replica identity as it is (d, i, f, n) and the primary key's columns
CREATE FUNCTION public.cs_pk(sch text, tab text) RETURNS text
LANGUAGE sql AS $$
	SELECT coalesce((
		SELECT c.relreplident::text || ':' ||
			coalesce((SELECT string_agg(a.attname, ',' ORDER BY a.attname)
				FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid
					AND a.attnum = ANY (i.indkey)
				WHERE i.indrelid = c.oid AND i.indisprimary), '')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = sch AND c.relname = tab), 'absent')
$$;
};

my $node = cs_setup('keys', sql => $helpers . q{
CREATE TABLE lk (id int, k int, v text);
INSERT INTO lk SELECT i, i * 10, 'v' || i FROM generate_series(1, 300) i;
CREATE TABLE sq1 (id serial PRIMARY KEY, v text);
CREATE TABLE sq2 (id bigserial PRIMARY KEY, v text);
CREATE TABLE sq3 (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text);
CREATE TABLE sq4 (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, v text);
CREATE SEQUENCE sq5_id_seq;
CREATE TABLE sq5 (id public.posid PRIMARY KEY DEFAULT nextval('sq5_id_seq'), v text);
ALTER SEQUENCE sq5_id_seq OWNED BY sq5.id;
-- every id a committed insert gave (the oracle of values handed out)
CREATE TABLE sq_log (t text, id bigint);
CREATE FUNCTION sq_log_id() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO sq_log VALUES (TG_TABLE_NAME, NEW.id); RETURN NEW; END $$;
CREATE TRIGGER l AFTER INSERT ON sq1 FOR EACH ROW EXECUTE FUNCTION sq_log_id();
CREATE TRIGGER l AFTER INSERT ON sq2 FOR EACH ROW EXECUTE FUNCTION sq_log_id();
CREATE TRIGGER l AFTER INSERT ON sq3 FOR EACH ROW EXECUTE FUNCTION sq_log_id();
CREATE TRIGGER l AFTER INSERT ON sq4 FOR EACH ROW EXECUTE FUNCTION sq_log_id();
CREATE TRIGGER l AFTER INSERT ON sq5 FOR EACH ROW EXECUTE FUNCTION sq_log_id();
CREATE PUBLICATION changestream FOR ALL TABLES;
});
# sq5: a serial column of a domain type (over bigint)
my @sq = qw(sq1 sq2 sq3 sq4 sq5);
my $sq_list = join(',', @sq);
my %cols = (lk => 'id,k,v', lk2 => 'id,k,v', fk => 'id,v', ck => 'a,v', kf => 'id,v',
	map { $_ => 'id,v' } @sq);

# Sequence activity: $n rows inserted with defaults, rows above
# $keep_below deleted, $rolled_back nextval()s rolled back.
sub sequence_activity
{
	my ($n, $keep_below, $rolled_back) = @_;
	for my $t (@sq)
	{
		$node->safe_psql($db, qq{
			INSERT INTO $t (v) SELECT 'r' || i FROM generate_series(1, $n) i;
			DELETE FROM $t WHERE id > (SELECT max(id) FROM $t) - $keep_below;
			BEGIN; INSERT INTO $t (v) SELECT 'x' FROM generate_series(1, $rolled_back); ROLLBACK;});
	}
	return;
}

# the source sequences' last_value (all have been called)
sub source_sequences
{
	return map { $_->[0] => $_->[1] } cs_rows($node, $db, join(' UNION ALL ',
		map { "SELECT '$_', last_value FROM $_\_id_seq" } @sq));
}

sequence_activity(20, 5, 5);
my %seq_at_snapshot;    # snapshot LSN -> { table -> last_value }
my %before_open = source_sequences();
cs_start_archiving($node);
my %after_open = source_sequences();
my ($gen) = cs_rows($node, $db, 'SELECT generation FROM changestream.status()');
$gen = $gen->[0];

my @steps;    # { name, lsn, digest => {t}, ident => {t} }
my @key_tables = qw(lk lk2 fk ck kf);

# The target's expected replica identity and primary key, as cs_ident()
# reads the target: the source's (cs_pk()), USING INDEX read as DEFAULT.
sub want_ident
{
	my ($pk) = @_;
	return $pk =~ s/^i:/d:/r;
}

sub record_step
{
	my ($name, @tables) = @_;
	my $sql = "$S SELECT pg_current_wal_lsn()"
	  . join('', map { ", public.cs_digest('public', '$_', '$cols{$_}'), public.cs_ident('public', '$_', true), (SELECT coalesce(max(id), 0) FROM sq_log WHERE t = '$_'), public.cs_pk('public', '$_')" } @tables);
	my ($row) = cs_rows($node, $db, $sql);
	my ($lsn, @f) = @$row;
	my (%digest, %ident, %maxever, %pk, %want);
	for my $t (@tables)
	{
		$digest{$t} = shift @f;
		$ident{$t} = shift @f;
		$maxever{$t} = shift @f;
		$pk{$t} = shift @f;
		$want{$t} = want_ident($pk{$t});
	}
	push @steps, { name => $name, lsn => $lsn, digest => \%digest, ident => \%ident,
		maxever => \%maxever, pk => \%pk, want => \%want, tables => [@tables] };
	note("step $name at $lsn: " . join(' ', map { "$_=$ident{$_}" } @tables));
	return;
}

# Run $sql with T replaced by each of lk and lk2.
sub both
{
	my ($sql) = @_;
	$node->safe_psql($db, join("\n", map { (my $s = $sql) =~ s/\bT\b/$_/g; $s =~ s/\bT_/$_\_/g; $s } qw(lk lk2)));
	return;
}

sequence_activity(8, 2, 2);
record_step('sequences after the opening snapshot', @sq);
record_step('start', @key_tables);
$node->safe_psql($db, q{
	CREATE TABLE lk2 (id int, k int, v text);
	INSERT INTO lk2 SELECT i, i * 10, 'v' || i FROM generate_series(1, 300) i;
	INSERT INTO lk SELECT i, i * 10, 'v' || i FROM generate_series(301, 320) i;
	CREATE TABLE ck (a int, b int, v text, PRIMARY KEY (a, b));
	INSERT INTO ck SELECT i % 7, i, 'c' || i FROM generate_series(1, 50) i;
	CREATE TABLE kf (id int PRIMARY KEY, v text);
	INSERT INTO kf SELECT i, 'k' || i FROM generate_series(1, 40) i;
	CREATE TABLE fk (id int, v text);
	ALTER TABLE fk REPLICA IDENTITY FULL;
	INSERT INTO fk SELECT i, 'f' || i FROM generate_series(1, 100) i;
	UPDATE fk SET v = v || 'u' WHERE id % 3 = 0;
	DELETE FROM fk WHERE id % 10 = 0;});
record_step('loaded (fk FULL)', @key_tables);
both(q{ALTER TABLE T ADD PRIMARY KEY (id); UPDATE T SET v = v || 'u' WHERE id % 7 = 0;});
$node->safe_psql($db, q{ALTER TABLE fk ADD PRIMARY KEY (id), REPLICA IDENTITY DEFAULT;
	UPDATE fk SET v = v || 'k' WHERE id % 4 = 0; DELETE FROM fk WHERE id % 9 = 0;});
record_step('ADD PRIMARY KEY, UPDATE', @key_tables);
both(q{DELETE FROM T WHERE id % 5 = 0;});
$node->safe_psql($db, q{UPDATE fk SET v = 'again' WHERE id = 1});
# ck's composite key vanishes with its column b: the NOT NULL the key
# gave a on the target goes too (a NULL follows)
$node->safe_psql($db, q{ALTER TABLE ck DROP COLUMN b; ALTER TABLE ck ALTER COLUMN a DROP NOT NULL;
	INSERT INTO ck VALUES (NULL, 'null a');});
record_step('DELETE; ck\'s key column dropped, a NULL', @key_tables);
both(q{ALTER TABLE T DROP CONSTRAINT T_pkey, ADD PRIMARY KEY (k);
	ALTER TABLE T ALTER COLUMN id DROP NOT NULL;
	UPDATE T SET id = -id WHERE id % 11 = 0; DELETE FROM T WHERE k % 13 = 0;
	INSERT INTO T VALUES (NULL, 99990, 'null id');});
$node->safe_psql($db, q{UPDATE fk SET v = 'again2' WHERE id = 1});
record_step('key moved to k, id NULL', @key_tables);
both(q{ALTER TABLE T ALTER COLUMN v SET NOT NULL; CREATE UNIQUE INDEX T_v ON T (v);
	ALTER TABLE T REPLICA IDENTITY USING INDEX T_v;
	UPDATE T SET k = k + 1 WHERE k % 17 = 0; DELETE FROM T WHERE v = 'v3';});
$node->safe_psql($db, q{UPDATE fk SET v = 'again3' WHERE id = 1});
record_step('REPLICA IDENTITY USING INDEX', @key_tables);
my %before_snap = source_sequences();
$node->safe_psql($db, 'SELECT changestream.take_snapshot()');
my %after_snap = source_sequences();
record_step('take_snapshot (key from the manifest)', @key_tables);
both(q{ALTER TABLE T REPLICA IDENTITY FULL;
	UPDATE T SET v = v || 'f' WHERE k % 19 = 0; DELETE FROM T WHERE k % 23 = 0;});
$node->safe_psql($db, q{UPDATE fk SET v = 'again4' WHERE id = 1});
# kf keeps its primary key under FULL: so does the target
$node->safe_psql($db, q{ALTER TABLE kf REPLICA IDENTITY FULL; UPDATE kf SET v = v || 'f' WHERE id % 3 = 0;});
record_step('REPLICA IDENTITY FULL (kf keeps its primary key)', @key_tables);
both(q{ALTER TABLE T REPLICA IDENTITY DEFAULT; ALTER TABLE T DROP CONSTRAINT T_pkey;
	ALTER TABLE T ALTER COLUMN k DROP NOT NULL; DROP INDEX T_v;
	ALTER TABLE T ALTER COLUMN v DROP NOT NULL;
	INSERT INTO T VALUES (777777, NULL, NULL);});
$node->safe_psql($db, q{ALTER TABLE fk DROP CONSTRAINT fk_pkey; INSERT INTO fk VALUES (1, 'dup id')});
# kf drops its primary key under FULL (no new identity in the archive:
# the schema history record drops the target's)
$node->safe_psql($db, q{ALTER TABLE kf DROP CONSTRAINT kf_pkey; INSERT INTO kf VALUES (1, 'dup id')});
record_step('key dropped, NULLs', @key_tables);

# sequences: activity after the snapshot above, another snapshot, more
sequence_activity(10, 3, 3);
record_step('sequences after snapshot 1', @sq);
my %before_snap2 = source_sequences();
$node->safe_psql($db, 'SELECT changestream.take_snapshot()');
my %after_snap2 = source_sequences();
sequence_activity(5, 2, 4);
record_step('sequences after snapshot 2', @sq);
cs_wait_archived($node, name => 'workload archived');

# the manifests record each sequence's value at the snapshot
my $snapdir = cs_archive_dir($node) . "/generations/$gen/snapshots";
my @snapfiles = sort glob("$snapdir/*.snapshot.gz");
is(scalar(@snapfiles), 3, 'three snapshots (the opening one and two taken)');

sub manifest_of
{
	my ($file) = @_;
	my $text = `gzip -dc '$file'`;
	my ($json) = $text =~ /^-- manifest: (.*)$/m;
	return (decode_json($json), $text);
}

my @snap_values = ([ \%before_open, \%after_open ], [ \%before_snap, \%after_snap ],
	[ \%before_snap2, \%after_snap2 ]);
for my $i (0 .. 2)
{
	my ($m) = manifest_of($snapfiles[$i]);
	is($m->{format_version}, 2, "snapshot $i: manifest format 2");
	my %tables = map { $_->{name} => $_ } @{ $m->{tables} };
	for my $t (@sq)
	{
		my $s = $tables{$t}{sequences};
		my ($lo, $hi) = ($snap_values[$i][0]{$t}, $snap_values[$i][1]{$t});
		ok(@$s == 1 && $s->[0]{column} eq 'id' && $s->[0]{sequence} eq "public.$t\_id_seq"
			  && $s->[0]{is_called} && $s->[0]{last_value} >= $lo && $s->[0]{last_value} <= $hi,
			"snapshot $i: $t\'s sequence recorded at its value at the snapshot ($lo)")
		  or diag(encode_json($s));
		is(join(',', @{ $tables{$t}{key} }), 'id', "snapshot $i: $t\'s key is id");
	}
	is(join(',', @{ $tables{lk}{key} }), $i == 1 ? 'v' : '',
		"snapshot $i: lk's key in the manifest (its replica identity index's at snapshot 1, none else)");
}
# the value each point's restore starts from: the newest snapshot before it
my @snap_lsns = map { /([0-9A-F]{16})\.snapshot\.gz$/ ? hex($1) : 0 } @snapfiles;

sub base_values
{
	my ($lsn) = @_;
	my $v = cs_lsn_to_int($lsn);
	my $i = 0;
	$i++ while $i < 2 && $snap_lsns[ $i + 1 ] <= $v;
	return $snap_values[$i][0];
}

$node->safe_psql($db, 'CREATE DATABASE fresh');
$node->safe_psql('fresh', "CREATE EXTENSION changestream; $helpers");
$node->safe_psql($db, 'CREATE DATABASE pubdb');
$node->safe_psql('pubdb', "CREATE EXTENSION changestream; $helpers CREATE PUBLICATION allp FOR ALL TABLES;");

# Restore $step's tables into $dbname ($schema NULL: their own), compare.
sub check_keys
{
	my ($dbname, $schema, $step) = @_;
	my $q = defined $schema ? "'$schema'" : 'NULL';
	my $rs = $schema // 'public';
	my @t = @{ $step->{tables} };
	my $list = join(',', @t);
	my $sql = "$S BEGIN; SELECT tables FROM changestream.restore($q, target_lsn => '$step->{lsn}', tables => '{$list}');"
	  . join('', map { "SELECT '$_', public.cs_digest('$rs', '$_', '$cols{$_}'), public.cs_ident('$rs', '$_', false);" } @t)
	  . ' ROLLBACK;';
	my ($out, $err) = ('', '');
	$node->psql($dbname, $sql, stdout => \$out, stderr => \$err);
	my @lines = split /\n/, $out;
	shift @lines;
	my %got = map { my @f = split /\|/, $_, -1; $f[0] => [ @f[ 1, 2 ] ] } @lines;
	my @bad;
	for my $t (@t)
	{
		my ($d, $i) = @{ $got{$t} // [ 'missing', 'missing' ] };
		push @bad, "$t digest" if $d ne $step->{digest}{$t};
		push @bad, "$t key $i, source $step->{ident}{$t}, want $step->{want}{$t}" if $i ne $step->{want}{$t};
	}
	ok(!@bad && $err !~ /ERROR/, "keys: '$step->{name}' into $dbname.$rs: rows, primary key and identity match")
	  or diag(join("\n", @bad) . "\n$err");
	return;
}

for my $step (grep { $_->{tables}[0] eq 'lk' } @steps)
{
	check_keys($db, 'scratch', $step);
	check_keys('fresh', undef, $step);
	check_keys('pubdb', undef, $step);
}

# sequences: into a pre-created schema with fresh sequences
my $sq_ddl = q{
DROP TABLE IF EXISTS sq1, sq2, sq3, sq4, sq5;
CREATE TABLE sq1 (id serial PRIMARY KEY, v text);
CREATE TABLE sq2 (id bigserial PRIMARY KEY, v text);
CREATE TABLE sq3 (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text);
CREATE TABLE sq4 (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, v text);
CREATE SEQUENCE sq5_id_seq;
CREATE TABLE sq5 (id public.posid PRIMARY KEY DEFAULT nextval('sq5_id_seq'), v text);
ALTER SEQUENCE sq5_id_seq OWNED BY sq5.id;
};
$node->safe_psql($db, 'CREATE DATABASE dr');
$node->safe_psql('dr', "CREATE EXTENSION changestream; $helpers");

sub check_sequences
{
	my ($step, $label, %opts) = @_;
	my $base = base_values($step->{lsn});
	$node->safe_psql('dr', $sq_ddl . ($opts{ahead} ? "SELECT setval('sq1_id_seq', $opts{ahead});" : ''));
	my $sql = "$S BEGIN; SELECT tables FROM changestream.restore(NULL, target_lsn => '$step->{lsn}', tables => '{$sq_list}');"
	  . join('', map { "SELECT '$_', public.cs_digest('public', '$_', 'id,v'), (SELECT last_value FROM $_\_id_seq), (SELECT is_called FROM $_\_id_seq), (SELECT coalesce(max(id), 0) FROM $_);" } @sq)
	  . join('', map { "INSERT INTO $_ (v) SELECT 'new' FROM generate_series(1, 3);" } @sq)
	  . ' ROLLBACK;';
	my ($out, $err) = ('', '');
	$node->psql('dr', $sql, stdout => \$out, stderr => \$err);
	my @lines = split /\n/, $out;
	shift @lines;
	my @bad;
	for my $line (@lines)
	{
		my ($t, $d, $last, $called, $max) = split /\|/, $line;
		push @bad, "$t digest" if $d ne $step->{digest}{$t};
		push @bad, "$t: sequence $last (called $called) below the source's $base->{$t} at the snapshot"
		  if $last < $base->{$t} || $called ne 't';
		push @bad, "$t: sequence $last below the column maximum $max" if $last < $max;
		push @bad, "$t: sequence $last below $step->{maxever}{$t}, the greatest id a committed insert gave (rows deleted since included)"
		  if $last < $step->{maxever}{$t};
		push @bad, "$t: sequence $last moved back from $opts{ahead}" if $t eq 'sq1' && $opts{ahead} && $last != $opts{ahead};
	}
	push @bad, 'rows: ' . scalar(@lines) if @lines != @sq;
	my $notices = () = $err =~ /NOTICE:  sequence public\.sq\d_id_seq of column id of public\.sq\d set to/g;
	my $want = $opts{ahead} ? @sq - 1 : @sq;
	push @bad, "$notices NOTICEs, not $want" if $notices != $want;
	ok(!@bad && $err !~ /ERROR/, "sequences: '$step->{name}' $label: rows match, each sequence past the snapshot's value and the column maximum, inserts with defaults do not collide")
	  or diag(join("\n", @bad) . "\n$err");
	return;
}

for my $step (grep { $_->{tables}[0] eq 'sq1' } @steps)
{
	check_sequences($step, 'into a pre-created schema');
}
check_sequences($steps[-1], 'with sq1\'s target sequence ahead', ahead => 1000000);

# Row level security must not hide a target's rows from restore(): a
# target whose policy hides its one row from its owner (FORCE) is refused
# with 42501 for that role; a superuser (who bypasses it) is told the
# target is not empty, which it is.
{
	$node->safe_psql('dr', $sq_ddl . q{
		CREATE ROLE restorer;
		GRANT USAGE ON SCHEMA changestream TO restorer;
		GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA changestream TO restorer;
		ALTER TABLE sq1 OWNER TO restorer;
		ALTER SEQUENCE sq1_id_seq OWNER TO restorer;
		INSERT INTO sq1 VALUES (DEFAULT, 'hidden');
		ALTER TABLE sq1 ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
		CREATE POLICY none ON sq1 USING (false);});
	my $step = $steps[-1];
	my $call = "SELECT tables FROM changestream.restore(NULL, target_lsn => '$step->{lsn}', tables => '{sq1}')";
	my ($out, $err) = ('', '');
	$node->psql('dr', "SET ROLE restorer; SELECT count(*) FROM sq1; $call",
		stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	is($out, '0', 'row level security: the policy hides the row from its owner');
	like($err, qr/ERROR:  42501: row level security of target table public\.sq1 would hide rows from restore\(\)/,
		'row level security that hides rows of a target: 42501, not an empty table');
	($out, $err) = ('', '');
	$node->psql('dr', $call, stdout => \$out, stderr => \$err);
	like($err, qr/ERROR:  target table "public\.sq1" is not empty/,
		'row level security bypassed (superuser): the target is seen not empty');
	$node->safe_psql('dr', 'DROP TABLE sq1; DROP OWNED BY restorer; DROP ROLE restorer');
}

# into a fresh database: restore() creates the tables, with their serial and identity
# columns' sequences from the definition, and sets them
{
	my $step = $steps[-1];
	my ($out, $err) = ('', '');
	$node->psql('fresh', "$S BEGIN; SELECT tables FROM changestream.restore(NULL, target_lsn => '$step->{lsn}', tables => '{$sq_list}');"
		  . join('', map { "SELECT public.cs_digest('public', '$_', 'id,v');" } @sq) . ' ROLLBACK;',
		stdout => \$out, stderr => \$err);
	my ($n, @d) = split /\n/, $out;
	is_deeply([ $n, @d ], [ scalar(@sq), map { $step->{digest}{$_} } @sq ],
		'sequences: into tables restore() creates, the rows match');
	unlike($err, qr/ERROR/, 'sequences: into tables restore() creates, no error');
	is(join(',', sort $err =~ /NOTICE:  sequence public\.(\w+) of column id of public\.\w+ set to/g),
		join(',', map { "$_\_id_seq" } sort @sq),
		'sequences: tables restore() creates own their serial and identity sequences (the definition): each is set');
}

# damage to the manifest's new members, in a copy of the archive
my $copy = PostgreSQL::Test::Utils::tempdir() . '/archive-copy';
system('cp', '-a', cs_archive_dir($node), $copy) == 0 or die "cp -a failed";
my $victim = (sort glob("$copy/generations/$gen/snapshots/*.snapshot.gz"))[-1];
(my $vname = $victim) =~ s{.*/}{};
my $original = `gzip -dc '$victim'`;
my $moffset = index($original, "\n-- manifest: ") + 1;

sub with_manifest
{
	my ($edit, $state, $re, $name) = @_;
	my $text = $original;
	$edit->($text);
	open(my $fh, '|-', "gzip -c > '$victim'") or die;
	print $fh $text;
	close($fh) or die "gzip failed";
	my ($out, $err) = ('', '');
	$node->psql($db, "BEGIN; SELECT changestream.restore('dmg', archive_directory => '$copy'); ROLLBACK;",
		stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/ERROR:\s+$state:.*$re/s, $name);
	return;
}
my $at = qr/"[^"]*\Q$vname\E" is damaged at offset $moffset/;
with_manifest(sub { $_[0] =~ s/("sequences": \[\{"column" : "id", "sequence" : "[^"]*", "last_value" : )(\d+)/$1"$2"/ },
	'XX001', qr/$at.*Sequence 1 of table/s, 'a sequence value that is a string: XX001 naming file and offset');
with_manifest(sub { $_[0] =~ s/"key": \["id"\]/"key": ["nosuch"]/ },
	'XX001', qr/$at.*Key column 1 of table/s, 'a key column that is not a column: XX001');
with_manifest(sub { $_[0] =~ s/"key": \["id"\]/"key": "id"/ },
	'XX001', qr/$at.*lacks replica_identity, key or sequences/s, 'a key that is not an array: XX001');
with_manifest(sub { $_[0] =~ s/("is_called" : )true/${1}false/ },
	'XX001', qr/$at.*does not agree with is_called/s, 'is_called false with a value: XX001');
with_manifest(sub { $_[0] =~ s/(\n-- manifest: .*)\}\]\}\n/$1\}\]\n/ },
	'XX001', qr/$at.*not JSON/s, 'a manifest line that is not JSON: XX001');
# a manifest nested beyond the parser's stack (class 54 in jsonb_in) is
# damage too, not the server's limit error
with_manifest(sub { $_[0] =~ s/\n-- manifest: [^\n]*/"\n-- manifest: {\"x\": " . ('[' x 3000000) . (']' x 3000000) . '}'/e },
	'XX001', qr/$at.*not JSON that this server can read/s, 'a manifest nested beyond the stack depth: XX001');
# header numbers: strtoi64 with end and range checks, at the line's offset
my $at_any = qr/"[^"]*\Q$vname\E" is damaged at offset \d+/;
with_manifest(sub { $_[0] =~ s/\n-- tables: (\d+)\n/\n-- tables: ${1}x\n/ or die },
	'XX001', qr/$at_any.*"-- tables: " does not end in an integer/s, 'a tables line with trailing text: XX001');
with_manifest(sub { $_[0] =~ s/\n-- rows: (\d+)\n/\n-- rows: 99999999999999999999999\n/ or die },
	'XX001', qr/$at_any.*"-- rows: " does not end in an integer/s, 'a rows count beyond int64: XX001');
with_manifest(sub { $_[0] =~ s/\n-- lsn: ([0-9A-F]+)\//\n-- lsn: 1${1}00000000\// or die },
	'XX001', qr/$at_any.*"-- lsn: " does not end in an LSN/s, 'an LSN half beyond 32 bits: XX001');
with_manifest(sub { $_[0] =~ s/-- format_version: 2/-- format_version: 3/ },
	'0A000', qr/format version 3, newer than this changestream \(2\)/, 'a newer snapshot format: 0A000');

# A column type in the manifest is text that must not reach SQL as it
# stands: a type that is SQL (an injection), or that names no type, is
# XX001 naming the file and offset; no statement of it runs (the table
# it would drop survives, the sequence it would advance does not move).
$node->safe_psql($db, q{CREATE TABLE public.victim (x int); INSERT INTO public.victim VALUES (1), (2);
	CREATE SEQUENCE public.canary;});
my $victim_before = join(',', map { $_->[0] } cs_rows($node, $db, 'SELECT x FROM public.victim ORDER BY x'));
for my $type (q{int); DROP TABLE public.victim; SELECT nextval('public.canary'); --},
	q{int DEFAULT nextval('public.canary')}, q{nosuchtype}, q{int[] ) ; SELECT 1 --})
{
	my $edit = sub { $_[0] =~ s/("name" : "v", "type" : ")text(")/$1$type$2/ or die "no text column v" };
	my $text = $original;
	$edit->($text);
	open(my $fh, '|-', "gzip -c > '$victim'") or die;
	print $fh $text;
	close($fh) or die "gzip failed";
	my ($out, $err) = ('', '');
	$node->psql($db, "SELECT changestream.restore('dmg', archive_directory => '$copy');",
		stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/ERROR:\s+XX001:.*$at.*The type of column \d+ \(v\) of table \d+ .* is not the name of a type of this database/s,
		"manifest column type \Q$type\E: XX001 naming file and offset");
	my ($called) = cs_rows($node, $db, 'SELECT is_called FROM public.canary');
	is($called->[0], 'f', "manifest column type \Q$type\E: no statement of it ran (the canary sequence did not move)");
	is(join(',', map { $_->[0] } cs_rows($node, $db, 'SELECT x FROM public.victim ORDER BY x')), $victim_before,
		"manifest column type \Q$type\E: the table it names survives with its rows");
}

$node->stop;
done_testing();
