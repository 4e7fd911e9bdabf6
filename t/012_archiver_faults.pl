
# Archiver faults that must not turn into generation storms or leaks.
#
# (a) The archiver's slot is held by another consumer (pg_recvlogical,
#     streaming and confirming): each session fails with a clear error and
#     a hint before any generation decision, under the backoff.  No
#     generation and no snapshot is written, however long it lasts (five
#     failed sessions: the first, two after their backoff delay, two with
#     the delay cut short by a reload), and the error is logged once.
#     new_generation() is accepted meanwhile and is honoured once the slot
#     is free.
# (b) A failed session releases what it held: with a non-removable
#     "stuck.tmp/" under wal/, every session fails while removing leftover
#     temporary files, and the archiver's open file count stays flat across
#     ten such sessions (each used to leak three directory handles).
use strict;
use warnings;

use File::Find;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use ChangestreamTest;

my $node = cs_new_node('faults');
$node->start;
my $dir = cs_archive_dir($node);

$node->safe_psql(
	'postgres', q{
CREATE EXTENSION changestream;
CREATE TABLE t (id int PRIMARY KEY, v text);
CREATE PUBLICATION changestream FOR TABLE t;
INSERT INTO t SELECT g, 'x' FROM generate_series(1, 100) g;
});
cs_start_archiving($node);
my ($gen0) = cs_single_generation($node, 'first start');

# Every file below generations/: generation directories, snapshots, tmps.
sub archive_entries
{
	my @found;
	find({ wanted => sub { push @found, $File::Find::name }, no_chdir => 1 },
		"$dir/generations");
	return sort @found;
}

sub fd_count
{
	my ($pid) = @_;
	opendir(my $dh, "/proc/$pid/fd") or die "opendir /proc/$pid/fd: $!";
	my $n = grep { !/^\.\.?$/ } readdir($dh);
	closedir($dh);
	return $n;
}

sub error_at
{
	return $node->safe_psql('postgres',
		"SELECT coalesce(last_error_at::text, '') FROM changestream.status()");
}

# Wait for up to $n more failed sessions (a new last_error_at each, and
# last_error matching $error_re when given); reload the configuration
# before the waits numbered above $reload_after (a reload cuts the
# backoff short).  Returns how many came.
sub wait_failed_sessions
{
	my ($n, $error_re, $reload_after) = @_;
	my $failed = 0;
	my $cond = defined $error_re ? " AND last_error ~ '$error_re'" : '';
	for my $i (1 .. $n)
	{
		my $prev = error_at();
		$node->safe_psql('postgres', 'SELECT pg_reload_conf()')
		  if defined $reload_after && $i > $reload_after;
		my ($ok) = cs_poll($node, 'postgres',
			"SELECT coalesce(last_error_at::text, '') <> '$prev'$cond FROM changestream.status()",
			't', 90);
		last unless $ok;
		$failed++;
	}
	return $failed;
}

############################################################################
# (a) the slot is held by pg_recvlogical

$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.directory = ''; SELECT pg_reload_conf();");
cs_wait_state($node, 'disabled', name => 'disabled to hand the slot over');
cs_poll($node, 'postgres',
	"SELECT active FROM pg_replication_slots WHERE slot_name = 'changestream'",
	'f', 30);

my $recv_out = $node->basedir . '/recvlogical.out';
my ($rl_stdout, $rl_stderr) = ('', '');
my $recv = IPC::Run::start(
	[
		'pg_recvlogical', '-d', $node->connstr('postgres'),
		'-S', 'changestream', '--start', '-f', $recv_out,
		'-o', 'proto_version=1', '-o', 'publication_names=changestream',
		'-F', '1', '-s', '1'
	],
	'>', \$rl_stdout, '2>', \$rl_stderr);
cs_poll_or_diag($node, 'postgres',
	"SELECT active_pid IS NOT NULL AND active_pid <> pg_backend_pid() FROM pg_replication_slots WHERE slot_name = 'changestream'",
	't', 30, 'pg_recvlogical holds the slot');
my $recv_pid = $node->safe_psql('postgres',
	"SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'changestream'");

# pg_recvlogical consumes and confirms: the slot moves past the archive.
$node->safe_psql('postgres',
	"INSERT INTO t SELECT g, 'y' FROM generate_series(101, 200) g");
my $lsn_after = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
cs_poll_or_diag($node, 'postgres',
	"SELECT confirmed_flush_lsn >= '$lsn_after' FROM pg_replication_slots WHERE slot_name = 'changestream'",
	't', 30, 'pg_recvlogical confirms past the archive');

my @before = archive_entries();
my $off = cs_log_offset($node);
$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.directory = '$dir'; SELECT pg_reload_conf();");
cs_poll_or_diag($node, 'postgres',
	"SELECT state = 'error' AND last_error ~ 'is active for PID $recv_pid' FROM changestream.status()",
	't', 30, 'state error naming the PID that holds the slot');

# Four more failed sessions (each waits 3 s for the slot to be released),
# nothing is written: two after their backoff delay (1 s, 2 s), two with
# the delay cut short by a reload.
is(wait_failed_sessions(4, undef, 2), 4, 'four more failed sessions while the slot is held');
my @after = archive_entries();
is(scalar(cs_generations($node)), 1, 'no new generation after the retries');
is_deeply(\@after, \@before,
	'the archive is unchanged: no generation, snapshot or temporary directory');
my $log = cs_log_since($node, $off);
like($log,
	qr/ERROR:  replication slot "changestream" is active for PID $recv_pid\n(?:.*DETAIL:.*\n)?.*HINT:  Stop the other consumer/,
	'the log has the error with a hint');
unlike($log, qr/started generation|ahead of the archive|snapshot at/,
	'the log claims no generation and no snapshot');
my $errors = () = $log =~ /ERROR:  replication slot "changestream" is active/g;
cmp_ok($errors, '<=', 2, "the error is logged once, repeats are counted ($errors)");
my $st = cs_status($node);
is($st->{state}, 'error', 'status().state is still error');

# new_generation() is accepted in state error; it is honoured once the
# slot is free.
my ($ng_out, $ng_err) = ('', '');
my $ng = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $node->connstr('postgres'),
		'-c', 'SELECT changestream.new_generation()'
	],
	'>', \$ng_out, '2>', \$ng_err);
cs_poll_or_diag($node, 'postgres',
	"SELECT count(*) > 0 FROM pg_stat_activity WHERE query ~ 'changestream.new_generation' AND pid <> pg_backend_pid()",
	't', 30, 'new_generation() is waiting');
usleep(500_000);
ok($ng->pumpable, 'new_generation() was accepted while the archiver is in error')
  or diag("new_generation(): $ng_out $ng_err");

$off = cs_log_offset($node);
$recv->kill_kill;
$recv->finish;
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');    # end the backoff
my $deadline = time() + 60;
while ($ng->pumpable && time() < $deadline)
{
	$ng->pump_nb;
	usleep(100_000);
}
$ng->kill_kill if $ng->pumpable;
$ng->finish;
chomp $ng_out;
my @g = map { $_->[0] } cs_generations($node);
is(scalar(@g), 2, 'exactly one new generation once the slot is free');
is($ng_out, $g[-1], 'new_generation() returns it') or diag($ng_err);
like(cs_log_since($node, $off),
	qr/started generation $g[-1] .*\n.*DETAIL:  Reason: requested by changestream\.new_generation\(\)/,
	'its reason is the request');
cs_wait_state($node, 'streaming', name => 'streaming again');

############################################################################
# take_snapshot() raises the snapshot worker's own SQLSTATE: with snapshots/
# not writable, permission denied (42501), not a generic 58000.

my $snapdir = "$dir/generations/$g[-1]/snapshots";
SKIP:
{
	skip 'running as root: the directory would be writable', 2 if $> == 0;
	chmod 0500, $snapdir or die "chmod $snapdir: $!";
	my ($ts_out, $ts_err) = ('', '');
	$node->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT changestream.take_snapshot();",
		stdout => \$ts_out, stderr => \$ts_err);
	chmod 0700, $snapdir;
	like($ts_err, qr/ERROR:  42501: could not (create|open) file/,
		"take_snapshot() fails with the worker's SQLSTATE 42501");
	like($ts_err, qr/DETAIL:  The changestream snapshot worker failed/,
		'the detail says the snapshot worker failed');
}

############################################################################
# (b) no leak across failing sessions

my $stuck = "$dir/generations/$g[-1]/wal/stuck.tmp";
mkdir $stuck or die "mkdir $stuck: $!";
mkdir "$stuck/sub" or die "mkdir: $!";
open(my $fh, '>', "$stuck/sub/file") or die "create: $!";
close($fh);
chmod 0500, "$stuck/sub" or die "chmod: $!";

SKIP:
{
	skip 'running as root: the directory would be removable', 4 if $> == 0;

	$node->restart;
	cs_poll_or_diag($node, 'postgres',
		"SELECT state = 'error' AND last_error ~ 'could not remove' FROM changestream.status()",
		't', 60, 'a non-removable stuck.tmp fails the session');
	my $pid = cs_worker_pid($node);

	# Each reload ends the backoff wait: one more failed session.
	my @counts;
	for my $i (1 .. 11)
	{
		my $prev = error_at();
		$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
		my ($ok) = cs_poll($node, 'postgres',
			"SELECT coalesce(last_error_at::text, '') <> '$prev' FROM changestream.status()",
			't', 30);
		last unless $ok;
		push @counts, fd_count($pid);
	}
	is(scalar(@counts), 11, '11 more failed sessions');
	is(cs_worker_pid($node), $pid, 'the same archiver process ran them');
	note("archiver fds after each failed session: @counts");
	cmp_ok($counts[-1], '<=', $counts[0],
		"open files stay flat: $counts[0] after the first, $counts[-1] after the last");

	# The cause removed, the archiver recovers by itself.
	chmod 0700, "$stuck/sub";
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	cs_wait_state($node, 'streaming', name => 'streaming once stuck.tmp is removable');
}
chmod 0700, "$stuck/sub" if -d "$stuck/sub";

############################################################################
# (c) The newest generation's identity file is damaged and the generation
# holds acknowledged transactions: the archiver stops in state error (its
# sessions, retried under the backoff, fail the same way) and leaves the
# generation as it is; new_generation() starts a new one.

# generation directories, from the file system (generations() itself may
# not read a damaged identity file)
sub gen_dirs
{
	opendir(my $dh, "$dir/generations") or die "opendir: $!";
	my @d = sort grep { /^[0-9a-f]{16}$/ } readdir($dh);
	closedir($dh);
	return @d;
}

$node->safe_psql('postgres',
	"INSERT INTO t SELECT g, 'z' FROM generate_series(201, 300) g");
cs_wait_archived($node, name => 'before the identity file is damaged');
my @gd = gen_dirs();
my $victim = "$dir/generations/$gd[-1]";
$node->stop;
truncate("$victim/generation", 0) or die "truncate: $!";
my @victim_files = archive_entries();
$off = cs_log_offset($node);
$node->start;
cs_poll_or_diag($node, 'postgres',
	"SELECT state = 'error' AND last_error ~ 'cannot continue generation $gd[-1]' FROM changestream.status()",
	't', 60, 'a damaged identity file with acknowledged data: state error');
# two more sessions fail the same way (after the backoff delay: 1 s, 2 s)
is(wait_failed_sessions(2, 'cannot continue generation'), 2, 'two more sessions fail the same way');
is_deeply([ gen_dirs() ], \@gd, 'no new generation on the archiver\'s own initiative');
is_deeply([ archive_entries() ], \@victim_files, 'no file added or removed');
is(-s "$victim/generation", 0, 'the damaged identity file is left as it is');
like(cs_log_since($node, $off),
	qr/ERROR:  cannot continue generation $gd[-1]\n.*DETAIL:  .*acknowledged data.*\n.*HINT:  .*new_generation/,
	'the log says why, with a hint');

my $newgen = $node->safe_psql('postgres', 'SELECT changestream.new_generation()');
my @gd2 = gen_dirs();
is(scalar(@gd2), scalar(@gd) + 1, 'new_generation() in state error adds one generation');
is($newgen, $gd2[-1], 'and returns it');
ok(-d $victim && -s "$victim/generation" == 0, 'the damaged generation is still there, untouched');
cs_wait_state($node, 'streaming', name => 'streaming in the new generation');

$node->stop;
done_testing();
