# restore() of tables whose replica identity key is published only in
# part (issue 30): a column list that leaves out a key column (allowed for
# a publication of inserts only).  The snapshot manifest names no key for
# them (not every key column is published), and pgoutput's Relation marks
# the published key columns only, a part of the key that need not be
# unique.  restore() must not build a primary key from that part: the
# tables hold rows whose published part of the key repeats.  ck has a
# composite primary key, ci a composite REPLICA IDENTITY USING INDEX.
# Rows are inserted before and after the generation's snapshot; after
# each step the test records the LSN and each table's digest (md5 of the
# published columns' text forms, in order) and its primary key columns;
# every point is restored into a scratch schema and into a fresh database
# (tables restore() creates): the rows must equal the source's published
# columns, and the target must have no primary key, as no key of the
# source is wholly in the restored table.
use strict;
use warnings;

use ChangestreamTest;

my $S = $ChangestreamTest::ORACLE_SETTINGS;
my $db = 'postgres';

my $helpers = q{
CREATE FUNCTION public.cs_pkcols(sch text, tab text) RETURNS text
LANGUAGE sql AS $$
	SELECT coalesce((SELECT string_agg(a.attname, ',' ORDER BY a.attname)
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid
			AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = format('%I.%I', sch, tab)::regclass AND i.indisprimary), '')
$$;
};

my $node = cs_setup('colkey', sql => $helpers . q{
CREATE TABLE ck (a int, b int, v text, PRIMARY KEY (a, b));
CREATE TABLE ci (a int NOT NULL, b int NOT NULL, v text);
CREATE UNIQUE INDEX ci_ab ON ci (a, b);
ALTER TABLE ci REPLICA IDENTITY USING INDEX ci_ab;
INSERT INTO ck SELECT i % 5, i, 'c' || i FROM generate_series(1, 40) i;
INSERT INTO ci SELECT i % 5, i, 'i' || i FROM generate_series(1, 40) i;
CREATE PUBLICATION changestream FOR TABLE ck (a, v), ci (a, v) WITH (publish = 'insert');
});
cs_start_archiving($node);

# the manifest names no key for either table
my ($gen) = cs_rows($node, $db, 'SELECT generation FROM changestream.status()');
$gen = $gen->[0];

my @points;
sub step
{
	my ($name, $sql) = @_;
	$node->safe_psql($db, $sql) if defined $sql;
	my ($row) = cs_rows($node, $db, "$S SELECT pg_current_wal_lsn(), "
		  . join(', ', map { "(SELECT md5(coalesce(string_agg(ROW(a, v)::text, '|' ORDER BY ROW(a, v)::text), '')) FROM $_)" } qw(ck ci)));
	cs_wait_archived($node, name => $name);
	push @points, { name => $name, lsn => $row->[0], ck => $row->[1], ci => $row->[2] };
	return;
}

step('snapshot rows');
step('rows after the snapshot whose published key part repeats', q{
	INSERT INTO ck SELECT i % 5, i, 'c' || i FROM generate_series(41, 60) i;
	INSERT INTO ci SELECT i % 5, i, 'i' || i FROM generate_series(41, 60) i;});
step('more rows', q{
	INSERT INTO ck VALUES (1, 1000, 'again');
	INSERT INTO ci VALUES (1, 1000, 'again');});

my $snap = (glob(cs_archive_dir($node) . "/generations/$gen/snapshots/*.snapshot.gz"))[0];
my ($json) = `gzip -dc '$snap'` =~ /^-- manifest: (.*)$/m;
like($json, qr/"name": "ck", "oid": \d+, "replica_identity": "d", "columns": \[[^\]]*\], "key": \[\]/,
	'the manifest names no key for ck (b is not published)');
like($json, qr/"name": "ci", "oid": \d+, "replica_identity": "i", "columns": \[[^\]]*\], "key": \[\]/,
	'the manifest names no key for ci (b is not published)');

$node->safe_psql($db, 'CREATE DATABASE fresh');
$node->safe_psql('fresh', "CREATE EXTENSION changestream; $helpers");

my $i = 0;
for my $pt (@points)
{
	$i++;
	for my $target ([ $db, "'r$i'", "r$i" ], [ 'fresh', 'NULL', 'public' ])
	{
		my ($dbname, $arg, $schema) = @$target;
		my ($ret, $out, $err) = $node->psql($dbname,
			"$S BEGIN; SELECT tables FROM changestream.restore($arg, target_lsn => '$pt->{lsn}', tables => '{ck,ci}');"
			  . join('', map { "SELECT md5(coalesce(string_agg(ROW(a, v)::text, '|' ORDER BY ROW(a, v)::text), '')), public.cs_pkcols('$schema', '$_') FROM $schema.$_;" } qw(ck ci))
			  . ' ROLLBACK;');
		my ($n, @got) = split /\n/, $out;
		is_deeply([ $ret, $n, @got ], [ 0, 2, "$pt->{ck}|", "$pt->{ci}|" ],
			"'$pt->{name}' into $dbname.$schema: rows equal the source's published columns, no primary key from a part of a key")
		  or diag($err);
	}
}

# restore() under pressure (issue 35): a target time in the future is
# refused before any work.
my ($ret, $out, $err);
($ret, $out, $err) = $node->psql('postgres',
	"SELECT tables FROM changestream.restore('scratch_miss', target_time => now() + interval '1 hour')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  22023: the target time .* is in the future\nDETAIL:  It is now .*; the archive holds nothing later\./,
	'a target time in the future: 22023 at once');

$node->stop;
done_testing();
