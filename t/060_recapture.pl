# Re-capture after a schema change that changed rows without archived
# changes (issue 30; docs/DESIGN.md section 12, "Re-capture").
#
# A burst of such commands (ALTER COLUMN TYPE ... USING, ADD COLUMN ...
# DEFAULT, ALTER TYPE ... RENAME VALUE of an enum a table uses, each in its
# own transaction) is followed, changestream.recapture_delay later, by
# one snapshot the archiver takes by itself (not one per command).  The
# oracle is the source: after each step the test records
# pg_current_wal_lsn() and a digest of every table's rows (under the
# archive's pinned settings), then restore()s to each point:
#
# - before the commands: every table equals the source, but for the
#   enum's, refused (the type has lost the label its values have);
# - between the commands and the snapshot: the tables the commands
#   changed are refused (0A000, the hint naming the snapshot's LSN as the
#   nearest exact point after them), the others equal;
# - after the snapshot: every table equals the source again, without a
#   take_snapshot() call.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;

my $db = 'postgres';
my $S = $ChangestreamTest::ORACLE_SETTINGS;

# a quiet time long enough that the burst below (three transactions of one
# psql call, milliseconds apart) falls within it
my $node = cs_setup('recapture', conf => "changestream.recapture_delay = '5s'\n",
	sql => q{
CREATE TYPE hue AS ENUM ('red', 'green');
CREATE TABLE t_using (id int PRIMARY KEY, v int);
CREATE TABLE t_default (id int PRIMARY KEY, v int);
CREATE TABLE t_enum (id int PRIMARY KEY, h hue);
CREATE TABLE t_control (id int PRIMARY KEY, n int);
CREATE PUBLICATION changestream FOR TABLES IN SCHEMA public;
});
cs_start_archiving($node);
cs_wait_state($node, 'streaming');
my ($gen) = cs_single_generation($node, 'start');

sub snapshot_lsns
{
	return map { $_->[0] } cs_rows($node, $db,
		"SELECT lsn FROM changestream.snapshots('$gen') ORDER BY lsn");
}

my @tables = qw(t_control t_default t_enum t_using);
my @points;    # { name, lsn, digest => { t => md5 } }

sub digest_sql
{
	my ($schema, $table) = @_;
	return qq{SELECT '$table', md5(coalesce(string_agg(r, '|' ORDER BY r), ''))
		FROM (SELECT x::text AS r FROM ONLY $schema.$table x) y};
}

sub record_point
{
	my ($name) = @_;
	my $out = $node->safe_psql($db, "$S SELECT pg_current_wal_lsn();\n"
		  . join(";\n", map { digest_sql('public', $_) } @tables));
	my @lines = split /\n/, $out;
	my $lsn = shift @lines;
	push @points, { name => $name, lsn => $lsn, digest => { map { split /\|/ } @lines } };
	return $points[-1];
}

$node->safe_psql($db, q{
INSERT INTO t_using SELECT i, i FROM generate_series(1, 20) i;
INSERT INTO t_default SELECT i, i FROM generate_series(1, 20) i;
INSERT INTO t_enum SELECT i, CASE WHEN i % 2 = 0 THEN 'red' ELSE 'green' END::hue FROM generate_series(1, 20) i;
INSERT INTO t_control SELECT i, i FROM generate_series(1, 20) i;
});
cs_wait_archived($node, name => 'rows');
my @before = snapshot_lsns();
my $p_before = record_point('before the commands');

# the burst: three transactions, each changing rows without a change
$node->safe_psql($db, q{
ALTER TABLE t_using ALTER COLUMN v TYPE text USING 'u' || v;
ALTER TABLE t_default ADD COLUMN d int DEFAULT 7;
ALTER TYPE hue RENAME VALUE 'red' TO 'crimson';
UPDATE t_control SET n = -n WHERE id = 1;
});
my $p_between = record_point('between the commands and the snapshot');

# the archiver's own snapshot, after the commands
cs_poll_or_diag($node, $db,
	"SELECT count(*) > 0 FROM changestream.snapshots('$gen') WHERE lsn > '$p_between->{lsn}'",
	't', 120, 'a snapshot after the commands is taken without take_snapshot()');
my @after = snapshot_lsns();
my @new = grep { cs_lsn_to_int($_) > cs_lsn_to_int($p_before->{lsn}) } @after;
is(scalar(@new), 1, 'the burst of three commands started one snapshot')
  or diag("snapshots before: @before; after: @after");
my $capture = $new[0] // 'none';
ok($node->wait_for_log(qr/tables re-captured by the snapshot at \Q$capture\E after a schema change/),
	'the log names the re-capture');

$node->safe_psql($db, q{
UPDATE t_control SET n = n + 100 WHERE id = 2;
UPDATE t_default SET v = -v WHERE id = 3;
});
my $p_after = record_point('after the snapshot');
cs_wait_archived($node, name => 'after the snapshot');

# restore() to each point, compared with the source then.  The tables
# refused at each point: the enum's table before the command too (its
# restored column has the type as it is now, without the label 'red').
$p_before->{refused} = { t_enum => 1 };
$p_between->{refused} = { map { $_ => 1 } qw(t_using t_default t_enum) };
$p_after->{refused} = {};
for my $p (@points)
{
	my $sql = "$S BEGIN; SELECT tables FROM changestream.restore('r', target_lsn => '$p->{lsn}', skip_inexact => true);\n"
	  . join(";\n", map { digest_sql('r', $_) } @tables) . ";\nROLLBACK;";
	my ($o, $e) = ('', '');
	$node->psql($db, $sql, stdout => \$o, stderr => \$e, on_error_stop => 0,
		extra_params => [ '-v', 'ON_ERROR_ROLLBACK=on' ]);
	my @lines = split /\n/, $o;
	my $restored = shift @lines // '';
	my %got = map { split /\|/, $_, 2 } @lines;
	my %refused = map { $_ => 1 } ($e =~ /WARNING:\s+table "public\.(\w+)" cannot be restored exactly/g);
	ok($restored =~ /^\d+$/, "$p->{name}: restore with skip_inexact succeeds") or diag($e);
	for my $t (@tables)
	{
		if ($p->{refused}{$t})
		{
			ok($refused{$t} && !defined $got{$t}, "$p->{name}: $t is refused")
			  or diag($e);
		}
		else
		{
			ok(!$refused{$t}, "$p->{name}: $t is not refused") or diag($e);
			is($got{$t} // 'missing', $p->{digest}{$t}, "$p->{name}: $t equals the source");
		}
	}
}

# without skip_inexact, between the commands and the snapshot: the error
# names the snapshot as the nearest exact point after the command
my ($rc, $o, $e) = $node->psql($db,
	"BEGIN; SELECT changestream.restore('r', target_lsn => '$p_between->{lsn}', tables => '{t_using}'); ROLLBACK;",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($e, qr/ERROR:\s+0A000:\s+table "public\.t_using" cannot be restored exactly: ALTER TABLE public\.t_using at [0-9A-F]+\/[0-9A-F]+ changed its existing rows.*HINT:\s+Restore to a target before [0-9A-F]+\/[0-9A-F]+, or at or after [0-9A-F]+\/[0-9A-F]+ \(the next snapshot/s,
	'between the command and the snapshot: 0A000, the hint naming a snapshot as the nearest exact point');
# compared as numbers: pg_lsn's text pads the low half from PostgreSQL 19 on
my ($hint_lsn) = $e =~ /or at or after ([0-9A-F]+\/[0-9A-F]+) \(the next snapshot/;
is(defined $hint_lsn ? cs_lsn_to_int($hint_lsn) : 'none', cs_lsn_to_int($capture),
	'the hint\'s exact point is the re-capture snapshot');

$node->stop;
done_testing();
