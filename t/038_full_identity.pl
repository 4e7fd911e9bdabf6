# restore() of REPLICA IDENTITY FULL tables (issue 30): the row an UPDATE
# or DELETE refers to is found by the whole old row, including columns
# whose types have no equality operator (point, box, polygon, circle, line,
# lseg, path, json, xml), and among rows an equality operator cannot tell
# apart but whose values differ (numeric 1.0 and 1.00, float8 0 and -0,
# citext-like case differences through a text column compared as text).
# Rows are inserted before the generation's snapshot and after it, with
# NULLs and exact duplicates, then updated and deleted in steps.  After
# each step the test records the LSN and the source table's digest (md5 of
# its rows' text forms, in order, under the archive's pinned settings);
# every point is restored into a scratch schema, and the restored table's
# digest must equal the source's at that point.
use strict;
use warnings;

use ChangestreamTest;

my $S = $ChangestreamTest::ORACLE_SETTINGS;
my $db = 'postgres';
my $cols = 'id int, n numeric, f8 float8, t text, p point, b box, pg polygon, '
  . 'c circle, l line, ls lseg, pa path, j json, x xml';

my $node = cs_setup('fullid', sql => qq{
CREATE TABLE f1 ($cols);
ALTER TABLE f1 REPLICA IDENTITY FULL;
CREATE PUBLICATION changestream FOR TABLE f1;
INSERT INTO f1 VALUES
	(1, 1.0, 0, 'a', '(1,2)', '(0,0),(1,1)', '((0,0),(1,0),(0,1))', '<(0,0),1>',
	 '{1,-1,0}', '[(0,0),(1,1)]', '((0,0),(1,1))', '{"a": 1}', '<r>1</r>'),
	(2, 1.00, '-0', 'a', '(1,2)', '(0,0),(1,1)', '((0,0),(1,0),(0,1))', '<(0,0),1>',
	 '{1,-1,0}', '[(0,0),(1,1)]', '((0,0),(1,1))', '{"a":1}', '<r>1</r>'),
	(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
	(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
});
cs_start_archiving($node);

sub digest
{
	my ($table) = @_;
	return $node->safe_psql($db, "$S SELECT md5(coalesce(string_agg(r::text, '|' ORDER BY r::text), '')) FROM $table r");
}

my @points;
sub step
{
	my ($name, $sql) = @_;
	$node->safe_psql($db, $sql) if defined $sql;
	my $lsn = $node->safe_psql($db, 'SELECT pg_current_wal_lsn()');
	cs_wait_archived($node, name => $name);
	push @points, { name => $name, lsn => $lsn, digest => digest('f1') };
}

step('snapshot rows');
step('rows after the snapshot', q{
	INSERT INTO f1 VALUES
	(4, 2.50, 1.5, 'b', '(3,4)', '(2,2),(3,3)', '((1,1),(2,1),(1,2))', '<(1,1),2>',
	 '{0,1,-2}', '[(1,1),(2,2)]', '[(0,0),(2,2),(3,1)]', '[1, 2]', '<r a="1"/>'),
	(4, 2.5, 1.5, 'b', '(3,4)', '(2,2),(3,3)', '((1,1),(2,1),(1,2))', '<(1,1),2>',
	 '{0,1,-2}', '[(1,1),(2,2)]', '[(0,0),(2,2),(3,1)]', '[1,2]', '<r a="1"/>'),
	(5, 3, 2, 'c', '(5,6)', NULL, NULL, NULL, NULL, NULL, NULL, '{"dup": 1, "dup": 2}', NULL),
	(5, 3, 2, 'c', '(5,6)', NULL, NULL, NULL, NULL, NULL, NULL, '{"dup": 1, "dup": 2}', NULL)});
# equal by the operators (1.00 = 1.0, -0 = 0, json has none), different values
step('update the second of two operator-equal rows',
	q{UPDATE f1 SET t = 'upd2', p = '(9,9)' WHERE id = 2});
step('update by a point and a json value', q{
	UPDATE f1 SET pg = '((5,5),(6,5),(5,6))', j = '{"b": 2}' WHERE id = 4 AND n::text = '2.5';
	UPDATE f1 SET x = '<r>2</r>' WHERE id = 1});
step('delete one of two duplicates and the -0 row', q{
	DELETE FROM f1 WHERE ctid = (SELECT min(ctid) FROM f1 WHERE id = 5);
	DELETE FROM f1 WHERE ctid = (SELECT min(ctid) FROM f1 WHERE id = 3);
	DELETE FROM f1 WHERE id = 2});
step('update every row', q{UPDATE f1 SET t = coalesce(t, '') || '!', c = '<(7,7),7>'});
step('delete the rest', q{DELETE FROM f1 WHERE id <> 1});

my $i = 0;
for my $pt (@points)
{
	$i++;
	my ($ret, $out, $err) = $node->psql($db,
		"$S BEGIN; CREATE SCHEMA r$i; "
		  . "SELECT tables FROM changestream.restore('r$i', target_lsn => '$pt->{lsn}', tables => '{f1}'); "
		  . "SELECT md5(coalesce(string_agg(r::text, '|' ORDER BY r::text), '')) FROM r$i.f1 r; ROLLBACK;");
	is($ret, 0, "point $i ($pt->{name}): restore() succeeds") or diag($err);
	my @lines = split /\n/, $out;
	is($lines[-1] // '', $pt->{digest}, "point $i ($pt->{name}): the restored table equals the source");
}

done_testing();
