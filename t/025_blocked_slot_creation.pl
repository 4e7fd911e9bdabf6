
# Snapshots whose slot creation is blocked (issue 9, items 4 and 9):
#   - a transaction holding an xid stays open; ten take_snapshot() calls
#     are cancelled by statement_timeout.  Each cancelled call must end its
#     snapshot worker, that worker's walsender and its temporary slot:
#     afterwards no temporary slot is left, the walsenders are the
#     archiver's only, a replication connection can still be opened
#     (max_wal_senders is not used up) and, once the transaction ends,
#     take_snapshot() works;
#   - a pending prepared transaction blocks slot creation: status()
#     .waiting_for names it by its gid, as pg_prepared_xacts shows it.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ChangestreamTest;

my $node = cs_new_node('blocked', conf => qq(
max_prepared_transactions = 5
));
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION changestream;
CREATE TABLE t (id int PRIMARY KEY, v text);
INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g;
CREATE PUBLICATION changestream FOR TABLE t;
});
cs_start_archiving($node);

my $walsenders_q =
  "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender'";
my $base_walsenders = $node->safe_psql('postgres', $walsenders_q);
is($base_walsenders, '1', 'one walsender (the archiver) before the test');

############################################################################
# Ten cancelled take_snapshot() calls

my $holder = $node->background_psql('postgres');
$holder->query_safe("BEGIN; INSERT INTO t VALUES (100001, 'holder');");

my $cancelled = 0;
my @other;
for my $i (1 .. 10)
{
	my ($out, $err) = ('', '');
	$node->psql('postgres',
		"\\set VERBOSITY verbose\nSET statement_timeout = '2s';\nSELECT changestream.take_snapshot();",
		stdout => \$out, stderr => \$err);
	if ($err =~ /ERROR:  57014: canceling statement due to statement timeout/)
	{
		$cancelled++;
	}
	else
	{
		push @other, "call $i: $err";
	}
}
is($cancelled, 10, 'all ten take_snapshot() calls were cancelled by statement_timeout')
  or diag(join("\n", @other));

# within seconds: no temporary slot, no extra walsender, no snapshot worker
cs_poll_or_diag($node, 'postgres',
	"SELECT count(*) FROM pg_replication_slots WHERE temporary", '0', 10,
	'no temporary slot remains after the cancelled calls');
cs_poll_or_diag($node, 'postgres', $walsenders_q, $base_walsenders, 10,
	'no walsender remains besides the archiver');
cs_poll_or_diag($node, 'postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'changestream snapshot'",
	'0', 10, 'no snapshot worker remains');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_replication_slots WHERE catalog_xmin IS NOT NULL"),
	'1', 'only the archiver\'s slot pins a catalog_xmin');

# max_wal_senders is not used up: a replication connection works
my ($rout, $rerr) = ('', '');
IPC::Run::run(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres') . ' replication=database',
		'-c', 'IDENTIFY_SYSTEM' ],
	'>', \$rout, '2>', \$rerr);
like($rout, qr/^\d+\|\d+\|/, 'a replication connection can be opened')
  or diag($rerr);
my $log = slurp_file($node->logfile);
my $terminated = () = $log =~ /terminated walsender process \d+ of an abandoned replication connection/g;
cmp_ok($terminated, '>=', 1,
	"the snapshot workers terminated their blocked walsenders ($terminated logged)");

# the archiver was not disturbed; once the transaction ends, a snapshot works
is($node->safe_psql('postgres', 'SELECT state FROM changestream.status()'),
	'streaming', 'the archiver kept streaming');
$holder->query_safe('COMMIT');
$holder->quit;
my $lsn = $node->safe_psql('postgres', 'SELECT changestream.take_snapshot()');
like($lsn, qr{^[0-9A-F]+/[0-9A-F]+$}, "take_snapshot() works afterwards ($lsn)");

############################################################################
# A pending prepared transaction is named in waiting_for

$node->safe_psql('postgres',
	"BEGIN; INSERT INTO t VALUES (100002, 'prepared'); PREPARE TRANSACTION 'cs_gid_42';");
my ($tout, $terr) = ('', '');
my $taker = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		'SELECT changestream.take_snapshot()' ],
	'>', \$tout, '2>', \$terr);
my $deadline = time() + 20;
my $waiting = '';
while (time() < $deadline)
{
	$waiting = $node->safe_psql('postgres',
		"SELECT coalesce(waiting_for, '') FROM changestream.status()");
	last if $waiting =~ /prepared/;
	usleep(100_000);
}
like($waiting,
	qr/waiting for 1 prepared transaction\(s\) to be committed or rolled back \(for example gid 'cs_gid_42' in pg_prepared_xacts\)/,
	'status().waiting_for names the pending prepared transaction by its gid');
unlike($waiting, qr/running transaction/,
	'and does not count it as a running backend transaction');
note("waiting_for: $waiting");
$node->safe_psql('postgres', "COMMIT PREPARED 'cs_gid_42'");
my $finished = eval { $taker->finish; 1 };
ok($finished && $taker->result == 0 && $tout =~ m{^[0-9A-F]+/[0-9A-F]+$},
	'take_snapshot() returns once the prepared transaction is committed')
  or diag("stdout: $tout stderr: $terr");
is($node->safe_psql('postgres',
		"SELECT coalesce(waiting_for, '') FROM changestream.status()"),
	'', 'waiting_for is empty afterwards');

$node->stop;
done_testing();
