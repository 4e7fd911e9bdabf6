
# Untrusted roles and monitoring that stays true (issue 9, items 8 and 9):
#   - logical decoding messages emitted by any role are not archived by
#     default; changestream.message_prefixes archives exactly the listed
#     prefixes ('*' all); the source of truth is what was emitted;
#   - changestream.conninfo cannot be read by a plain role; a password in
#     it never appears in changestream's own messages, also when libpq's
#     parse error quotes the connection string;
#   - the GRANTs of docs/roles.md, run as written, are complete: each role
#     can do what it says and no more; EXECUTE without USAGE is not enough;
#   - tables_without_replica_identity follows ALTER PUBLICATION ... ADD
#     TABLE, REPLICA IDENTITY NOTHING and the publish option within
#     seconds, agreeing with whether UPDATE really fails;
#   - every check message names its setting (over-long names and more).
use strict;
use warnings;

use File::Basename;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ChangestreamTest;

my $node = cs_new_node('roles');
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION changestream;
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE TABLE nokey (a int);
CREATE PUBLICATION changestream FOR TABLE t;
CREATE ROLE app LOGIN;
GRANT ALL ON t, nokey TO app;
});
cs_start_archiving($node);
my ($gen) = cs_single_generation($node, 'start');

# messages archived in the generation, as [prefix, content length]
sub archived_messages
{
	my $out = $node->safe_psql('postgres', qq{
SELECT convert_from(substring(data FROM 11 FOR position('\\x00'::bytea IN substring(data FROM 11)) - 1), 'SQL_ASCII')
  FROM changestream.wal_records('$gen') WHERE get_byte(data, 0) = 77});
	return [ grep { $_ ne '' } split /\n/, $out ];
}

sub emit_and_fence
{
	my ($role_sql) = @_;
	$node->safe_psql('postgres', $role_sql);
	$node->safe_psql('postgres', "INSERT INTO t VALUES ((SELECT coalesce(max(id), 0) + 1 FROM t), 'fence')");
	cs_wait_archived($node);
}

############################################################################
# message_prefixes

my $size0 = $node->safe_psql('postgres',
	"SELECT sum(size_bytes) FROM changestream.wal_segments('$gen')");
emit_and_fence(q{
SET ROLE app;
SELECT pg_logical_emit_message(false, 'forged', repeat('x', 2000000));
SELECT pg_logical_emit_message(true, 'forged', repeat('y', 2000000));
SELECT pg_logical_emit_message(false, 'audit', 'not listed yet');
});
is_deeply(archived_messages(), [], 'by default no logical message is archived');
my $size1 = $node->safe_psql('postgres',
	"SELECT sum(size_bytes) FROM changestream.wal_segments('$gen')");
cmp_ok($size1 - $size0, '<', 100_000,
	"4 MB of messages from an unprivileged role did not grow the archive ($size0 -> $size1 bytes)");

$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.message_prefixes = 'audit, app.events'; SELECT pg_reload_conf();");
cs_poll_or_diag($node, 'postgres', 'SHOW changestream.message_prefixes',
	'audit, app.events', 10, 'message_prefixes reloaded');
cs_sleep(1);    # the archiver re-reads its settings at its next loop
emit_and_fence(q{
SET ROLE app;
SELECT pg_logical_emit_message(false, 'audit', 'one');
SELECT pg_logical_emit_message(true, 'app.events', 'two');
SELECT pg_logical_emit_message(false, 'forged', 'three');
SELECT pg_logical_emit_message(false, 'audit2', 'four');
SELECT pg_logical_emit_message(false, 'Audit', 'five');
});
is_deeply(archived_messages(), [ 'audit', 'app.events' ],
	'with a list, exactly the messages whose prefix is listed are archived');

$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.message_prefixes = '*'; SELECT pg_reload_conf();");
cs_poll_or_diag($node, 'postgres', 'SHOW changestream.message_prefixes', '*', 10,
	"message_prefixes = '*' reloaded");
cs_sleep(1);
emit_and_fence(q{SELECT pg_logical_emit_message(false, 'anything', 'six');});
is_deeply(archived_messages(), [ 'audit', 'app.events', 'anything', 'changestream_test' ],
	"'*' archives every message (the test's fence message too)");
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET changestream.message_prefixes; SELECT pg_reload_conf();");

############################################################################
# The GRANTs of docs/roles.md

my $doc = slurp_file(dirname(__FILE__) . '/../docs/roles.md');
my @grants = $doc =~ /^(GRANT [^\n]+ TO (?:watcher|auditor|operator);)$/mg;
cmp_ok(scalar(@grants), '>=', 7, 'docs/roles.md lists GRANTs for watcher, auditor and operator');
$node->safe_psql('postgres',
	"CREATE ROLE watcher LOGIN; CREATE ROLE auditor LOGIN; CREATE ROLE operator LOGIN; CREATE ROLE nousage LOGIN;\n"
	  . "CREATE SCHEMA operator_scratch AUTHORIZATION operator;\n"
	  . join("\n", @grants));

sub as_role
{
	my ($role, $sql) = @_;
	my ($out, $err) = ('', '');
	$node->psql('postgres', "\\set VERBOSITY verbose\nSET ROLE $role;\n$sql",
		stdout => \$out, stderr => \$err);
	return ($out, $err);
}

my ($o, $e) = as_role('watcher',
	"SELECT state FROM changestream.status(); SELECT count(*) > 0 FROM changestream.generations();"
	  . " SELECT count(*) > 0 FROM changestream.wal_segments('$gen'); SELECT count(*) > 0 FROM changestream.snapshots('$gen');");
is("$o|$e", "streaming\nt\nt\nt|", 'watcher (pg_monitor) reads status(), generations(), wal_segments(), snapshots()');
($o, $e) = as_role('watcher', "SELECT count(*) FROM changestream.wal_records('$gen')");
like($e, qr/42501: permission denied for function wal_records/, 'watcher cannot read archived rows');
($o, $e) = as_role('auditor', "SELECT count(*) > 0 FROM changestream.wal_records('$gen')");
is("$o|$e", 't|', 'auditor reads wal_records() with the documented GRANTs');
($o, $e) = as_role('auditor',
	"SELECT count(*) > 0 FROM changestream.changes('$gen', relations => '{t}')");
is("$o|$e", 't|', 'auditor reads changes() with the documented GRANTs');
($o, $e) = as_role('auditor', "SELECT tables FROM changestream.restore('x', '$gen')");
like($e, qr/42501: permission denied for function restore/, 'auditor cannot restore');
($o, $e) = as_role('operator',
	"BEGIN; SELECT tables FROM changestream.restore('operator_scratch', '$gen', tables => '{t}'); ROLLBACK;");
is($o, '1', 'operator restores a table with the documented GRANTs');
unlike($e, qr/ERROR/, 'operator restores without an error');
($o, $e) = as_role('auditor', 'SELECT changestream.take_snapshot()');
like($e, qr/42501: permission denied for function take_snapshot/, 'auditor cannot take snapshots');
($o, $e) = as_role('operator', 'SELECT changestream.take_snapshot()');
like("$o|$e", qr{^[0-9A-F]+/[0-9A-F]+\|$}, 'operator takes a snapshot with the documented GRANTs');
($o, $e) = as_role('operator', 'SELECT changestream.new_generation()');
like("$o|$e", qr{^[0-9a-f]{16}\|$}, 'operator opens a new generation with the documented GRANTs');
$gen = $node->safe_psql('postgres', 'SELECT max(generation) FROM changestream.generations()');
$node->safe_psql('postgres',
	'GRANT EXECUTE ON FUNCTION changestream.take_snapshot() TO nousage');
($o, $e) = as_role('nousage', 'SELECT changestream.take_snapshot()');
like($e, qr/42501: permission denied for schema changestream/,
	'EXECUTE without USAGE on the schema is not enough');

############################################################################
# conninfo: superuser-only, and no password in our messages

($o, $e) = as_role('app', 'SHOW changestream.conninfo');
# the wording is 15's; 16 and later say "permission denied to examine"
like($e, qr/42501: (?:must be superuser or have privileges of pg_read_all_settings to examine|permission denied to examine) "changestream.conninfo"/,
	'a plain role cannot read changestream.conninfo');
my $offset = cs_log_offset($node);
# an unterminated IPv6 address: libpq's error quotes the whole URI
$node->safe_psql('postgres',
	q{ALTER SYSTEM SET changestream.conninfo = 'postgresql://app:Sup3rS3cretPw@[::1'; SELECT pg_reload_conf();});
my $deadline = time() + 20;
my $err_msg = '';
while (time() < $deadline)
{
	$err_msg = $node->safe_psql('postgres',
		"SELECT coalesce(last_error, '') FROM changestream.status() WHERE last_error LIKE '%replication connection%'");
	last if $err_msg ne '';
	usleep(200_000);
}
like($err_msg, qr/could not open a replication connection/,
	'the session fails to connect');
unlike($err_msg, qr/Sup3rS3cretPw/, 'status().last_error holds no password');
# Core's own lines (the statement, "parameter ... changed to") are not ours.
my @lines = grep { !/statement: ALTER SYSTEM|parameter "changestream.conninfo" changed to/ }
  split /\n/, cs_log_since($node, $offset);
my @masked = grep { /\*\*\*\*\*\*\*\*/ } @lines;
my @leaks = grep { /Sup3rS3cretPw/ } @lines;
ok(@masked >= 1, 'libpq\'s error quoting the connection string is logged with the password masked')
  or diag(join("\n", @lines));
is_deeply(\@leaks, [], 'no other log line holds the password');
$node->safe_psql('postgres',
	'ALTER SYSTEM RESET changestream.conninfo; SELECT pg_reload_conf();');
cs_wait_state($node, 'streaming', timeout => 60);

############################################################################
# tables_without_replica_identity stays true

sub lacking
{
	return $node->safe_psql('postgres',
		"SELECT coalesce(tables_without_replica_identity, '') FROM changestream.status()");
}

sub update_fails
{
	my ($table) = @_;
	my ($out, $err) = ('', '');
	$node->psql('postgres', "SET ROLE app; UPDATE $table SET " . ($table eq 't' ? 'v = v' : 'a = a'),
		stdout => \$out, stderr => \$err);
	return $err =~ /does not have a replica identity and publishes updates/ ? 1 : 0;
}

$node->safe_psql('postgres', 'INSERT INTO nokey VALUES (1)');
is(lacking(), '', 'no table lacks a replica identity at first');
$offset = cs_log_offset($node);
$node->safe_psql('postgres', 'ALTER PUBLICATION changestream ADD TABLE nokey');
cs_poll_or_diag($node, 'postgres',
	"SELECT tables_without_replica_identity FROM changestream.status()",
	'public.nokey', 10, 'ALTER PUBLICATION ... ADD TABLE of a table without a key shows within seconds');
is(update_fails('nokey'), 1, 'and UPDATE on it really fails');
like(cs_log_since($node, $offset), qr/WARNING:  published tables without a replica identity: public\.nokey/,
	'and the worker warns in the log');

$node->safe_psql('postgres', 'ALTER TABLE t REPLICA IDENTITY NOTHING');
cs_poll_or_diag($node, 'postgres',
	"SELECT tables_without_replica_identity FROM changestream.status()",
	'public.nokey, public.t', 10, 'REPLICA IDENTITY NOTHING shows within seconds');
is(update_fails('t'), 1, 'and UPDATE on t really fails');

$node->safe_psql('postgres', "ALTER PUBLICATION changestream SET (publish = 'insert')");
cs_poll_or_diag($node, 'postgres',
	"SELECT coalesce(tables_without_replica_identity, '') FROM changestream.status()",
	'', 10, 'a publication that publishes no UPDATE/DELETE lists none');
is(update_fails('t') + update_fails('nokey'), 0, 'and UPDATE works again');

$node->safe_psql('postgres', "ALTER PUBLICATION changestream SET (publish = 'insert, update, delete, truncate')");
cs_poll_or_diag($node, 'postgres',
	"SELECT tables_without_replica_identity FROM changestream.status()",
	'public.nokey, public.t', 10, 'a wider publish shows them again');
$node->safe_psql('postgres', 'ALTER TABLE t REPLICA IDENTITY DEFAULT; ALTER TABLE nokey REPLICA IDENTITY FULL');
cs_poll_or_diag($node, 'postgres',
	"SELECT coalesce(tables_without_replica_identity, '') FROM changestream.status()",
	'', 10, 'fixed replica identities clear the list');

############################################################################
# Every check message names its setting

my %bad = (
	'changestream.publication'     => "'" . ('p' x 64) . "'",
	'changestream.database'        => "'" . ('d' x 64) . "'",
	'changestream.slot_name'       => "'" . ('s' x 64) . "'",
	'changestream.slot_name '      => "'Bad-Name'",
	'changestream.directory'       => "'relative/path'",
	'changestream.message_prefixes' => q{'"unterminated'},
);
for my $key (sort keys %bad)
{
	(my $name = $key) =~ s/ $//;
	my ($out, $err) = ('', '');
	$node->psql('postgres', "ALTER SYSTEM SET $name = $bad{$key}",
		stdout => \$out, stderr => \$err);
	like($err, qr/ERROR:  \Q$name\E /, "a bad $name ($bad{$key}) is rejected naming the setting")
	  or diag($err);
}

# A bad value in postgresql.conf at server start: PostgreSQL warns and
# keeps the default; the archiver must not run silently on the default.
$node->append_conf('postgresql.conf',
	"changestream.publication = '" . ('q' x 64) . "'");
$node->restart;
cs_poll_or_diag($node, 'postgres',
	"SELECT state = 'error' AND last_error LIKE 'changestream.publication was rejected at server start%' FROM changestream.status()",
	't', 30, 'a publication rejected at start stops the archiver with an error naming the setting');
like(slurp_file($node->logfile), qr/changestream\.publication must be 1 to 63 characters/,
	'the log says why it was rejected');
$node->append_conf('postgresql.conf', "changestream.publication = 'changestream'");
$node->reload;
cs_wait_state($node, 'streaming', timeout => 60);

$node->stop;
done_testing();
