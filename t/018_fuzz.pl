
# Issue 8, "Tests": a seeded fuzz test of every reader.  scripts/cs_fuzz.py
# mutates renamed copies of a real generation (bit flips, truncation,
# insertion, duplicated, dropped and swapped frames, frame lengths,
# structure-aware mutations of entries and pgoutput messages with the frame
# CRC-32C recomputed, header fields with the header CRC recomputed, missing,
# copied, renamed and non-regular segment files, damaged identity files).
# Each case is moved into the archive, and one session calls
# generations(), generation_stats(), wal_segments(), wal_records() and
# snapshots() on it with statement_timeout, and scripts/cs_decode.py reads
# it.  Pass: no backend crash, no hang (every call ends within its
# statement_timeout), every error has a SQLSTATE and none is XX000
# (internal) or a resource error (53xxx, 54xxx), cs_decode.py never fails
# with a traceback, the session's fd count and RSS are flat, and
# cs_decode.py and wal_records() agree on every case: cs_decode.py exits 1
# exactly when wal_records() raises XX001 (both read docs/FORMAT.md; a
# disagreement is a bug in one of them).
#
# FUZZ_CASES (default 100; about 40 s on a busy 2-core machine) and FUZZ_SEED (default 1) choose the cases;
# scripts/fuzz.sh runs thousands and prints the figures.
#
# cs_decode.py runs in one Python process for all the cases (a small
# driver, below, that executes the script as __main__ once per case with
# sys.argv, stdout and stderr of its own): starting Python costs more CPU
# than reading a case, and this test started it 100 times.  The driver
# runs the script's own code path, its __main__ block included (its exit
# codes, its "internal error" exit 3, a traceback and exit 1 for what
# escapes), writes with the encoding and error handler of a pipe as the
# script's own process would, and is restarted after a case that does not
# end within the same 300 s.
#
# FUZZ_SOURCE chooses the generation the cases are made from.  By default
# it is t/fuzz_source/0003049627ffa64c, a generation of format 3 the
# archiver wrote (240 pgbench transactions and 6 small ones in two
# segments, one compressed; its snapshot cut to 10 rows of
# pgbench_accounts, which no case touches), so that a seed always gives
# the same cases and the same figures.  FUZZ_SOURCE=live makes them from
# the generation this test's own node has just archived instead: what the
# archiver writes today, but the frame boundaries, position records and
# values differ from run to run, and with them what the same seed damages.
# Any other value is the path of a generation directory.
use strict;
use warnings;

use File::Basename;
use File::Path qw(rmtree);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use ChangestreamTest;
use ArchiveDamage;

my $cases = $ENV{FUZZ_CASES} // 100;
my $seed  = $ENV{FUZZ_SEED}  // 1;
my $stmt_timeout = 5;

# two segments (240 pgbench transactions fill one and part of the next):
# one compressed, one raw
my $node = ad_new_archive('fuzz', txns => 120, segments => 2);
my $gen  = ad_newest_generation($node);
$node->stop;
my $src = $node->basedir . "/fuzz_source";
mkdir $src or die;
my $source_dir = $ENV{FUZZ_SOURCE} || 'fuzz_source/0003049627ffa64c';
if ($source_dir eq 'live')
{
	$source_dir = ad_gen_dir($node, $gen);
}
elsif ($source_dir !~ m{^/})
{
	$source_dir = -d "t/$source_dir" ? "t/$source_dir" : "$ENV{TESTDIR}/t/$source_dir";
}
-d "$source_dir/wal" or die "FUZZ_SOURCE: no generation at $source_dir";
system('cp', '-a', $source_dir, "$src/") == 0 or die "cp failed";
my $source = "$src/" . basename($source_dir);
note("fuzz cases made from $source_dir");
my $stage  = $node->basedir . '/fuzz_cases';
my $gens   = cs_archive_dir($node) . '/generations';
$node->start;
cs_wait_state($node, 'streaming', name => 'streaming');
my $log_off = cs_log_offset($node);

my $script_dir = -d 'scripts' ? 'scripts' : "$ENV{TESTDIR}/scripts";

my %fig = (cases => 0, calls => 0, crashes => 0, hangs => 0, no_sqlstate => 0,
	bad_sqlstate => 0, decode_internal => 0, disagree => 0);
my (%states, %decode_rc, @bad, @disagree);

my $sess;
my $pid;
sub open_session
{
	$sess = ad_session($node);
	$pid  = ad_session_query($sess, 'SELECT pg_backend_pid();')->{out};
	ad_session_query($sess, "SET statement_timeout = '${stmt_timeout}s';");
	return;
}
open_session();
sub measure
{
	my $r = ad_session_query($sess, $ArchiveDamage::FDS_RSS_SQL);
	return ad_backend_fds_rss($r->{out});
}

# "python3 cs_decode.py --summary <path>" for each path read on stdin, in
# one process: one line "<exit code> <stdout in hex> <stderr in hex>" each
my $decode_driver = $node->basedir . '/cs_decode_cases.py';
PostgreSQL::Test::Utils::append_to_file($decode_driver, <<'PY');
import io, sys, traceback
script = sys.argv[1]
with open(script, "rb") as f:
    code = compile(f.read(), script, "exec")
real_out, real_err = sys.stdout, sys.stderr
for line in sys.stdin:
    out_b, err_b = io.BytesIO(), io.BytesIO()
    out_w = io.TextIOWrapper(out_b, encoding=real_out.encoding, errors=real_out.errors)
    err_w = io.TextIOWrapper(err_b, encoding=real_err.encoding, errors=real_err.errors)
    sys.stdout, sys.stderr = out_w, err_w
    sys.argv = [script, "--summary", line.rstrip("\n")]
    rc = 0
    try:
        exec(code, {"__name__": "__main__", "__file__": script, "__builtins__": __builtins__})
    except SystemExit as e:
        if e.code is None:
            rc = 0
        elif isinstance(e.code, int):
            rc = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            rc = 1
    except BaseException:
        traceback.print_exc()
        rc = 1
    sys.stdout, sys.stderr = real_out, real_err
    for w in (out_w, err_w):
        try:
            w.flush()
        except Exception:
            pass
    real_out.write("%d %s %s\n" % (rc, out_b.getvalue().hex(), err_b.getvalue().hex()))
    out_w.detach()
    err_w.detach()
    real_out.flush()
PY
my ($dec_h, $dec_timer, $dec_in, $dec_out, $dec_err);
sub start_decoder
{
	($dec_in, $dec_out, $dec_err) = ('', '', '');
	$dec_timer = IPC::Run::timeout(300);
	$dec_h = IPC::Run::start([ 'python3', $decode_driver, "$script_dir/cs_decode.py" ],
		'<', \$dec_in, '>', \$dec_out, '2>', \$dec_err, $dec_timer);
	return;
}
start_decoder();

# -> (exit code, stdout, stderr) of cs_decode.py for the path sent last;
# undef when it did not end within 300 s of being sent, or the driver
# ended (the driver is restarted)
sub decode_result
{
	my $ok = eval {
		while ($dec_out !~ /\n/)
		{
			die "the driver ended\n" unless $dec_h->pumpable;
			$dec_h->pump;
		}
		1;
	};
	if (!$ok || $dec_out !~ s/^(\d+) ([0-9a-f]*) ([0-9a-f]*)\n//)
	{
		my $why = $@ || "driver output: $dec_out";
		eval { $dec_h->kill_kill };
		my $err = $dec_err;
		start_decoder();
		return (undef, '', "$why $err");
	}
	return ($1, pack('H*', $2), pack('H*', $3));
}

sub run_case
{
	my ($name, $case, $desc) = @_;
	rename("$stage/$name", "$gens/$name") or die "rename $name: $!";
	$dec_in .= "$gens/$name\n";
	$dec_timer->start(300);
	$dec_h->pump_nb;
	my $sql_damage = 0;
	for my $q ("SELECT count(*) FROM changestream.generations();",
		"SELECT count(*) FROM changestream.generation_stats('$name');",
		"SELECT count(*) FROM changestream.wal_segments('$name');",
		"SELECT count(*) FROM changestream.wal_records('$name');",
		"SELECT count(*) FROM changestream.snapshots('$name');")
	{
		$fig{calls}++;
		my $r = ad_session_query($sess, $q, $stmt_timeout + 10);
		if ($r->{timed_out})
		{
			$fig{hangs}++;
			push @bad, "case $case ($desc): hang in $q";
			eval { ad_session_close($sess) };
			open_session();
			next;
		}
		if ($r->{err} =~ /server closed the connection|connection to server was lost|terminat/)
		{
			$fig{crashes}++;
			push @bad, "case $case ($desc): backend lost in $q: $r->{err}";
			cs_poll($node, 'postgres', 'SELECT 1', '1', 60);
			eval { ad_session_close($sess) };
			open_session();
			next;
		}
		next unless $r->{err} =~ /ERROR/;
		my $st = $r->{sqlstate};
		if (!defined $st)
		{
			$fig{no_sqlstate}++;
			push @bad, "case $case ($desc): error without SQLSTATE in $q: $r->{err}";
			next;
		}
		$states{$st}++;
		$sql_damage = 1 if $st eq 'XX001' && $q =~ /wal_records/;
		if ($st =~ /^(XX000|53...|54...)$/)
		{
			$fig{bad_sqlstate}++;
			push @bad, "case $case ($desc): $st in $q: " . substr($r->{err}, 0, 300);
		}
		if ($st eq '57014')
		{
			$fig{timeouts}++;
			push @bad, "case $case ($desc): statement_timeout in $q";
		}
	}
	my ($rc, $dout, $derr) = decode_result();
	push @bad, "case $case ($desc): cs_decode.py timed out: $derr" unless defined $rc;
	$rc //= -1;
	$decode_rc{$rc}++;
	if ($rc >= 2 || $derr =~ /Traceback/)
	{
		$fig{decode_internal}++;
		push @bad, "case $case ($desc): cs_decode.py exit $rc: " . substr($derr, 0, 300);
	}
	if (($rc == 1) != $sql_damage)
	{
		$fig{disagree}++;
		push @disagree, "case $case ($desc): cs_decode.py exit $rc, wal_records() "
		  . ($sql_damage ? 'XX001' : 'no XX001');
	}
	if ($case == 0)
	{
		is($rc, 0, 'control case: cs_decode.py accepts the undamaged copy') or diag($derr);
		is($sql_damage, 0, 'control case: wal_records() reads the undamaged copy');
	}
	rmtree("$gens/$name");
	$fig{cases}++;
	return;
}

# warm up, then measure
ad_session_query($sess, $_) for (
	"SELECT count(*) FROM changestream.generations();",
	"SELECT count(*) FROM changestream.wal_records('$gen');",
	"SELECT count(*) FROM changestream.snapshots('$gen');",
	$ArchiveDamage::FDS_RSS_SQL);
my ($fd0, $rss0) = measure();
my $t0 = time();

my $batch = 100;
for (my $first = 0; $first <= $cases; $first += $batch)
{
	my $count = $first + $batch > $cases + 1 ? $cases + 1 - $first : $batch;
	rmtree($stage);
	my ($o, $e) = ('', '');
	IPC::Run::run([ 'python3', "$script_dir/cs_fuzz.py", '--source', $source,
			'--out', $stage, '--seed', $seed, '--first', $first, '--count', $count ],
		'>', \$o, '2>', \$e) or die "cs_fuzz.py failed: $e";
	open(my $fh, '<', "$stage/cases.tsv") or die;
	while (my $line = <$fh>)
	{
		chomp $line;
		my ($name, $case, $desc) = split /\t/, $line, 3;
		run_case($name, $case, $desc);
	}
	close $fh;
}
my ($fd1, $rss1) = measure();
my $pid1 = ad_session_query($sess, 'SELECT pg_backend_pid();')->{out};
ad_session_close($sess);
$dec_in = '';
$dec_h->finish;

my $signals = () = cs_log_since($node, $log_off) =~ /terminated by signal|PANIC|TRAP:/g;
$fig{crashes} += $signals if $fig{crashes} == 0;
my $secs = time() - $t0;

my $figures = sprintf(
	"FUZZ FIGURES: seed %d, cases %d, calls %d, crashes %d, hangs %d, errors without SQLSTATE %d, "
	  . "XX000/53xxx/54xxx %d, statement timeouts %d, session fds %d -> %d, RssAnon %d kB -> %d kB, "
	  . "cs_decode.py exit codes {%s}, cs_decode.py internal errors %d, "
	  . "cs_decode.py vs wal_records() disagreements %d, SQLSTATEs {%s}, %.0f s",
	$seed, $fig{cases}, $fig{calls}, $fig{crashes}, $fig{hangs}, $fig{no_sqlstate},
	$fig{bad_sqlstate}, $fig{timeouts} // 0, $fd0, $fd1, $rss0, $rss1,
	join(', ', map { "$_: $decode_rc{$_}" } sort keys %decode_rc),
	$fig{decode_internal}, $fig{disagree},
	join(', ', map { "$_: $states{$_}" } sort keys %states), $secs);
diag($figures);
diag("first problems:\n" . join("\n", @bad[ 0 .. ($#bad < 19 ? $#bad : 19) ])) if @bad;

is($fig{cases}, $cases + 1, "ran $cases fuzz cases and the control");
is($fig{crashes}, 0, 'no backend crash');
is($fig{hangs}, 0, 'no hang: every call returned within its statement_timeout');
is($fig{timeouts} // 0, 0, 'no call needed its statement_timeout');
is($fig{no_sqlstate}, 0, 'every error has a SQLSTATE');
is($fig{bad_sqlstate}, 0, 'no internal (XX000) or resource (53xxx, 54xxx) error');
cmp_ok($states{XX001} // 0, '>', $cases / 4, 'damage is reported as XX001');
is($fig{decode_internal}, 0, 'cs_decode.py: no traceback, no internal error');
is($fig{disagree}, 0, 'cs_decode.py and wal_records() agree on damage in every case')
  or diag("cs_decode.py / wal_records() disagreements:\n" . join("\n", @disagree));
is($pid1, $pid, 'the session kept its backend') if $fig{hangs} == 0 && $fig{crashes} == 0;
is($fd1, $fd0, "the session's open files are flat ($fd0 -> $fd1)");
cmp_ok($rss1 - $rss0, '<', 20 * 1024, "the session's RSS is flat ($rss0 kB -> $rss1 kB)");

$node->stop;
done_testing();
