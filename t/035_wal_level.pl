
# wal_level = replica (issue 32).
#
# PostgreSQL 19 enables logical decoding on a server with wal_level =
# replica when its first logical slot is created, and reports the level in
# force in effective_wal_level.  There the archiver, creating its slot,
# switches logical decoding on and archives as under wal_level = logical:
# effective_wal_level reads 'replica' before archiving starts and 'logical'
# after, and every row inserted afterwards is in changes(), compared with
# the source table.
#
# Before 19, a logical slot needs wal_level = logical: the archiver is in
# state 'error' with the server's reason (naming wal_level) in
# status().last_error, retries without flooding the log, archives nothing
# and creates no slot; once wal_level = logical and the server restarted,
# it archives.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;

my $node = cs_setup('wal_level',
	conf => "wal_level = replica\n",
	sql => q{CREATE TABLE t (id int PRIMARY KEY, v text);
		CREATE PUBLICATION changestream FOR TABLE t;});
my $db = 'postgres';
my $v19 = $node->safe_psql($db, 'SHOW server_version_num') >= 190000;

sub archived_rows
{
	return $node->safe_psql($db, q{SELECT coalesce(string_agg(new_row->>'id', ',' ORDER BY commit_lsn, ordinal), '')
		FROM changestream.changes((SELECT generation FROM changestream.status()))
		WHERE action = 'insert' AND table_name = 't'});
}

sub source_rows
{
	return $node->safe_psql($db, q{SELECT string_agg(id::text, ',' ORDER BY id) FROM t});
}

if ($v19)
{
	is($node->safe_psql($db, 'SHOW effective_wal_level'), 'replica',
		'19: effective_wal_level is replica before the archiver has a slot');
	cs_start_archiving($node);
	is($node->safe_psql($db, 'SHOW effective_wal_level'), 'logical',
		"19: the archiver's slot creation switched logical decoding on");
	$node->safe_psql($db, "INSERT INTO t SELECT i, 'r' || i FROM generate_series(1, 50) i");
	$node->safe_psql($db, "INSERT INTO t VALUES (51, 'last')");
	cs_wait_archived($node, name => '19, wal_level = replica');
	is(archived_rows(), source_rows(), '19: every inserted row is archived, as in the source table');
	is($node->safe_psql($db, 'SHOW wal_level'), 'replica', '19: wal_level itself stayed replica');
}
else
{
	my $offset = cs_log_offset($node);
	my $dir = cs_archive_dir($node);
	$node->append_conf('postgresql.conf', "changestream.directory = '$dir'");
	$node->restart;
	cs_wait_state($node, 'error', name => 'before 19: wal_level = replica puts the archiver in state error');
	like($node->safe_psql($db, 'SELECT last_error FROM changestream.status()'),
		qr/wal_level/, 'before 19: last_error names wal_level');
	is($node->safe_psql($db, "SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical'"),
		'0', 'before 19: no logical slot was created');
	# the archiver retries (with its restart delay) rather than flooding the log
	cs_sleep(6);
	my $lines = () = cs_log_since($node, $offset) =~ /wal_level/g;
	cmp_ok($lines, '<=', 6, "before 19: at most a few log lines about wal_level in 6 s ($lines)");
	$node->append_conf('postgresql.conf', "wal_level = logical");
	$node->restart;
	cs_wait_state($node, 'streaming', name => 'before 19: with wal_level = logical the archiver streams');
	$node->safe_psql($db, "INSERT INTO t SELECT i, 'r' || i FROM generate_series(1, 51) i");
	cs_wait_archived($node, name => 'before 19, wal_level = logical');
	is(archived_rows(), source_rows(), 'before 19: every inserted row is archived, as in the source table');
}

$node->stop;
done_testing();
