# Re-capture across a stop of the archiver (issue 30; docs/DESIGN.md
# section 12, "Re-capture"): the request a schema change that changed rows
# without archived changes makes is kept in the generation's "recapture"
# file, so a server stopped before the snapshot was due still takes it
# after it starts again.
#
# changestream.recapture_delay is long enough that the server is stopped
# (immediate mode: a crash; then fast mode) after the command's
# transaction is archived and before the snapshot is due.  After the
# start, a snapshot after the command is taken without take_snapshot(),
# the log says the request was taken up again, restore() after that
# snapshot equals the source (md5 of the rows) and restore() between the
# command and the snapshot is refused (0A000).  Without such a command no
# file is written and a restart takes no snapshot; a damaged file is
# reported (XX001) and answered with a snapshot.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;

my $db = 'postgres';
my $S = $ChangestreamTest::ORACLE_SETTINGS;

# long enough for a wait for the archive and a stop of the server
my $node = cs_setup('recapture_restart',
	conf => "changestream.recapture_delay = '12s'\n",
	sql => q{
CREATE TABLE t_crash (id int PRIMARY KEY, v int);
CREATE TABLE t_fast (id int PRIMARY KEY, v int);
CREATE TABLE t_plain (id int PRIMARY KEY, v int);
CREATE PUBLICATION changestream FOR TABLES IN SCHEMA public;
INSERT INTO t_crash SELECT i, i FROM generate_series(1, 30) i;
INSERT INTO t_fast SELECT i, i FROM generate_series(1, 30) i;
INSERT INTO t_plain SELECT i, i FROM generate_series(1, 30) i;
});
cs_start_archiving($node);
my ($gen) = cs_single_generation($node, 'start');
my $request_file = cs_archive_dir($node) . "/generations/$gen/recapture";
cs_wait_archived($node, name => 'rows');

sub snapshot_count
{
	return $node->safe_psql($db,
		"SELECT count(*) FROM changestream.snapshots('$gen')");
}

sub digest
{
	my ($schema, $table) = @_;
	return $node->safe_psql($db, qq{$S SELECT md5(coalesce(string_agg(r, '|' ORDER BY r), ''))
		FROM (SELECT x::text AS r FROM ONLY $schema.$table x) y});
}

# the LSN the recapture file wants, or undef without a file
sub file_lsn
{
	return undef unless -e $request_file;
	my $text = slurp_file($request_file);
	return $text =~ /^wanted_lsn = ([0-9A-F]+\/[0-9A-F]+)$/m ? $1 : 'unparsed';
}

# restore() of $table to $lsn, as (md5 of its rows or undef, stderr)
sub restore_digest
{
	my ($table, $lsn) = @_;
	my ($o, $e) = ('', '');
	$node->psql($db, "$S BEGIN; SELECT changestream.restore('r', target_lsn => '$lsn', tables => '{$table}') IS NOT NULL;\n"
		  . qq{SELECT md5(coalesce(string_agg(r, '|' ORDER BY r), '')) FROM (SELECT x::text AS r FROM ONLY r.$table x) y;\n}
		  . "ROLLBACK;",
		stdout => \$o, stderr => \$e, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	my @lines = split /\n/, $o;
	return ((@lines == 2 && $lines[0] eq 't') ? $lines[1] : undef, $e);
}

# One case: the command on $table, the server stopped in $mode, started.
sub stopped_before_the_snapshot
{
	my ($table, $mode) = @_;
	my $before = snapshot_count();
	my $p_before = $node->safe_psql($db, 'SELECT pg_current_wal_lsn()');
	$node->safe_psql($db, "ALTER TABLE $table ADD COLUMN d int DEFAULT 7");
	my $p_between = $node->safe_psql($db, 'SELECT pg_current_wal_lsn()');
	cs_wait_archived($node, name => "$mode: the command");

	my $wanted = file_lsn();
	ok(defined $wanted && $wanted ne 'unparsed'
		  && cs_lsn_to_int($wanted) > cs_lsn_to_int($p_before)
		  && cs_lsn_to_int($wanted) <= cs_lsn_to_int($p_between),
		"$mode: the recapture file wants the command's commit")
	  or diag("file: " . ($wanted // 'none') . ", command between $p_before and $p_between");
	is(snapshot_count(), $before, "$mode: no snapshot yet when the server stops");
	is($node->safe_psql($db, "SELECT count(*) FROM changestream.verify('$gen')"), '0',
		"$mode: verify() passes the recapture file by");
	$node->stop($mode);
	my $offset = cs_log_offset($node);
	$node->start;
	cs_wait_state($node, 'streaming', name => "$mode: streaming again");

	cs_poll_or_diag($node, $db,
		"SELECT count(*) > 0 FROM changestream.snapshots('$gen') WHERE lsn > '$p_between'",
		't', 90, "$mode: a snapshot after the command is taken after the start");
	my ($capture) = $node->safe_psql($db,
		"SELECT min(lsn) FROM changestream.snapshots('$gen') WHERE lsn > '$p_between'");
	is(snapshot_count(), $before + 1, "$mode: one snapshot");
	$node->wait_for_log(qr/resuming the re-capture of tables after a schema change at/, $offset);
	my ($resumed) = cs_log_since($node, $offset) =~ /resuming the re-capture of tables after a schema change at ([0-9A-F]+\/[0-9A-F]+)/;
	is(defined $resumed ? cs_lsn_to_int($resumed) : 'none', cs_lsn_to_int($wanted // '0/0'),
		"$mode: the log says the request was taken up again");
	$node->wait_for_log(qr/tables re-captured by the snapshot at/, $offset);
	my ($logged) = cs_log_since($node, $offset) =~ /tables re-captured by the snapshot at ([0-9A-F]+\/[0-9A-F]+)/;
	is(defined $logged ? cs_lsn_to_int($logged) : 'none', cs_lsn_to_int($capture),
		"$mode: the log names the re-capture snapshot");
	ok(!-e $request_file, "$mode: the recapture file is removed once covered");

	$node->safe_psql($db, "UPDATE $table SET v = -v WHERE id % 3 = 0");
	my $p_after = cs_wait_archived($node, name => "$mode: after the snapshot");
	my ($got, $err) = restore_digest($table, $p_after);
	is($got // "error: $err", digest('public', $table),
		"$mode: restore() after the snapshot equals the source");
	($got, $err) = restore_digest($table, $p_between);
	ok(!defined $got && $err =~ /ERROR:\s+0A000:.*cannot be restored exactly/s,
		"$mode: restore() between the command and the snapshot is refused")
	  or diag($err);
	return;
}

stopped_before_the_snapshot('t_crash', 'immediate');
stopped_before_the_snapshot('t_fast', 'fast');

# Without such a command: no file, and a restart takes no snapshot.  A
# short delay, so that a request taken up would be due within the wait.
$node->append_conf('postgresql.conf', "changestream.recapture_delay = '1s'\n");
$node->safe_psql($db, 'ALTER TABLE t_plain ADD COLUMN e int');
$node->safe_psql($db, 'UPDATE t_plain SET v = v + 1 WHERE id < 5');
cs_wait_archived($node, name => 'a command that changed no rows');
ok(!-e $request_file, 'a command without rows changed writes no recapture file');
my $count = snapshot_count();
my $offset = cs_log_offset($node);
$node->restart;
cs_wait_state($node, 'streaming', name => 'streaming after the restart');
my $deadline = time() + 5;
my $same = 1;
while (time() < $deadline)
{
	$same = 0 if snapshot_count() != $count;
	cs_sleep(0.5);
}
ok($same && snapshot_count() == $count, 'no request pending: no snapshot after the restart');
unlike(cs_log_since($node, $offset), qr/resuming the re-capture/,
	'no request pending: nothing taken up');

# A damaged file: reported, and a snapshot taken.
$node->stop('fast');
open(my $fh, '>', $request_file) or die "$request_file: $!";
print $fh "# changestream re-capture\nwanted_lsn = not an LSN\n";
close $fh;
$offset = cs_log_offset($node);
$node->start;
ok($node->wait_for_log(qr/WARNING:\s+changestream file "\Q$request_file\E" is damaged at offset 26/, $offset),
	'a damaged recapture file is reported (file and offset)');
cs_poll_or_diag($node, $db, "SELECT count(*) FROM changestream.snapshots('$gen')",
	$count + 1, 60, 'a damaged recapture file is answered with a snapshot');
ok($node->wait_for_log(qr/tables re-captured by the snapshot at/, $offset)
	  && !-e $request_file, 'the damaged file is removed once the snapshot is taken');
cs_single_generation($node, 'end');

$node->stop;
done_testing();
