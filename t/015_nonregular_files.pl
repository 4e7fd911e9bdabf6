
# Issue 8 section 3 (contract item 5): non-regular files never hang a
# reader, the archiver or the server.  A FIFO named like a segment, like
# the identity file, or like a snapshot, in a copy of a real generation:
# wal_segments(), wal_records(), generations(), generation_stats() and
# snapshots() return an error (XX001, naming the file) within a few seconds
# under statement_timeout, also as a pg_monitor role; cs_decode.py too.
# Then a FIFO named like the next segment of the archiver's own generation:
# the archiver does not block (state error naming the file) and the server
# still stops with pg_ctl stop -m fast.
use strict;
use warnings;

use File::Basename;
use IPC::Run;
use POSIX qw(mkfifo);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use ChangestreamTest;
use ArchiveDamage;

my $node = ad_new_archive('fifo', frames => 3);
my $gen  = ad_newest_generation($node);
$node->safe_psql('postgres', 'CREATE ROLE cs_monitor LOGIN IN ROLE pg_monitor');
$node->stop;

# A: segment, B: identity file, C: snapshot
my %fifo;
{
	my $a = ad_copy_generation($node, $gen, '0000000000e00001');
	my $seg = ad_newest_raw($node, '0000000000e00001');
	unlink $seg or die;
	mkfifo($seg, 0600) or die "mkfifo: $!";
	$fifo{A} = $seg;

	my $b = ad_copy_generation($node, $gen, '0000000000e00002');
	unlink "$b/generation" or die;
	mkfifo("$b/generation", 0600) or die "mkfifo: $!";
	$fifo{B} = "$b/generation";

	my $c = ad_copy_generation($node, $gen, '0000000000e00003');
	my ($snap) = glob("$c/snapshots/*.snapshot.gz");
	die "no snapshot in $c" unless $snap;
	unlink $snap or die;
	mkfifo($snap, 0600) or die "mkfifo: $!";
	$fifo{C} = $snap;
}
$node->start;
cs_wait_state($node, 'streaming', name => 'streaming with the FIFOs beside');

# Each call: statement_timeout 3 s; psql itself is given 10 s.  A backend
# that blocks in open(2) anyway is released afterwards (write end of the
# FIFO), so that the next case can run.
sub call_fails
{
	my ($label, $sql, $fifo, %o) = @_;
	my $r = ad_sql($node, $sql, timeout => 3, client_timeout => 10, role => $o{role});
	ad_fifo_unblock($fifo);
	ok(!$r->{timed_out} && $r->{secs} < 8, "$label: returns within 8 s")
	  or diag(sprintf('took %.1f s, timed out: %d', $r->{secs}, $r->{timed_out}));
	ok(!$r->{ok}, "$label: raises an error") or diag("output: $r->{out}");
	is($r->{sqlstate} // 'none', 'XX001', "$label: SQLSTATE XX001") or diag($r->{err});
	like($r->{err}, qr/\Q$fifo\E|\Q${\basename($fifo)}\E/, "$label: names the file")
	  unless $o{no_name};
	return $r;
}

my $mon = 'cs_monitor';

# generation_stats() returns the generations() row (contract item 6): its
# damage column names the file -- or it raises XX001 naming it; either way
# within a few seconds.
sub stats_damaged
{
	my ($label, $name, $fifo) = @_;
	my $r = ad_sql($node,
		"SELECT generation, damage FROM changestream.generation_stats('$name');",
		timeout => 3, client_timeout => 10, role => $mon);
	ad_fifo_unblock($fifo);
	ok(!$r->{timed_out} && $r->{secs} < 8, "$label: returns within 8 s")
	  or diag(sprintf('took %.1f s, timed out: %d', $r->{secs}, $r->{timed_out}));
	my $file = basename($fifo);
	ok(($r->{ok} && $r->{out} =~ /^\Q$name\E\|.*\Q$file\E/)
		  || (($r->{sqlstate} // '') eq 'XX001' && $r->{err} =~ /\Q$file\E/),
		"$label: the damage column (or an XX001 error) names $file")
	  or diag("out: $r->{out}\nerr: $r->{err}");
	return;
}
call_fails('FIFO segment: wal_segments() as pg_monitor',
	"SELECT * FROM changestream.wal_segments('0000000000e00001');", $fifo{A}, role => $mon);
stats_damaged('FIFO segment: generation_stats() as pg_monitor', '0000000000e00001', $fifo{A});
call_fails('FIFO segment: wal_records()',
	"SELECT count(*) FROM changestream.wal_records('0000000000e00001');", $fifo{A});
stats_damaged('FIFO identity file: generation_stats() as pg_monitor', '0000000000e00002', $fifo{B});
call_fails('FIFO identity file: wal_segments() as pg_monitor',
	"SELECT * FROM changestream.wal_segments('0000000000e00002');", $fifo{B}, role => $mon);
call_fails('FIFO snapshot: snapshots() as pg_monitor',
	"SELECT * FROM changestream.snapshots('0000000000e00003');", $fifo{C}, role => $mon);

# generations() lists every generation: those with a FIFO are damaged
# (contract item 6: a damage column, not a failure of the whole list), or
# it fails with XX001 -- but it never blocks.
{
	my $r = ad_sql($node,
		"SELECT generation, damage FROM changestream.generations() ORDER BY 1;",
		timeout => 3, client_timeout => 10, role => $mon);
	ad_fifo_unblock($_) for values %fifo;
	ok(!$r->{timed_out} && $r->{secs} < 8, 'generations() as pg_monitor returns within 8 s');
	ok($r->{ok}, 'generations() lists the generations') or diag($r->{err});
	like($r->{out}, qr/^0000000000e00001\|.+$/m, 'generations(): the copy with a FIFO segment is marked damaged');
	like($r->{out}, qr/^0000000000e00002\|.+$/m, 'generations(): the copy with a FIFO identity file is marked damaged');
	like($r->{out}, qr/^\Q$gen\E\|$/m, 'generations(): the real generation is not');
}

for my $k (sort keys %fifo)
{
	my $d = ad_decode(dirname($fifo{$k}) =~ m{/(?:wal|snapshots)$} ? dirname(dirname($fifo{$k})) : dirname($fifo{$k}));
	is($d->{rc}, 1, "cs_decode.py: FIFO $k is damage (exit 1)");
	like($d->{err}, qr/\Q$fifo{$k}\E: offset 0: .*not a regular file/, "cs_decode.py names FIFO $k")
	  or diag($d->{err});
}

# The archiver: a FIFO named like the next segment of its own generation.
my @segs = ad_segments($node, $gen);
$node->stop;
my $next = dirname($segs[-1]{path}) . sprintf('/%016x.wal', $segs[-1]{index} + 1);
mkfifo($next, 0600) or die "mkfifo: $!";
$node->start;
my ($ok) = cs_poll($node, 'postgres',
	"SELECT state = 'error' AND last_error LIKE '%" . basename($next) . "%' FROM changestream.status()",
	't', 20);
ad_fifo_unblock($next) unless $ok;
ok($ok, 'archiver: a FIFO named like a segment puts it in state error naming the file')
  or diag('status: ' . join(', ', map { "$_=" . (cs_status($node)->{$_} // '') } qw(state last_error)));

my $t0 = time();
my ($out, $err) = ('', '');
my $stopped = IPC::Run::run(
	[ 'pg_ctl', '-D', $node->data_dir, '-m', 'fast', '-t', '20', 'stop' ],
	'>', \$out, '2>', \$err);
ok($stopped, sprintf('pg_ctl stop -m fast succeeds (%.1f s)', time() - $t0))
  or diag("$out$err");
$node->{_pid} = undef if $stopped;
if (!$stopped)
{
	# release the blocked process; the pending fast shutdown then proceeds
	ad_fifo_unblock($next);
	my $deadline = time() + 30;
	while (-f $node->data_dir . '/postmaster.pid' && time() < $deadline)
	{
		ad_fifo_unblock($next);
		cs_sleep(0.5);
	}
	if (-f $node->data_dir . '/postmaster.pid')
	{
		$node->stop('immediate', fail_ok => 1);
	}
	$node->{_pid} = undef;
}
unlink $next;
done_testing();
