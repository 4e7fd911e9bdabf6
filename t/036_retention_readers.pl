# Retention that readers cannot starve (issue 36), under a steady
# rate-limited insert load (pgbench -R 100) with retention = 5s,
# snapshot_interval = 2s and 64 kB segments:
#
# 1. A reader polls changes() (from the last commit it saw, as a consumer
#    does) every 200 ms, five times what the issue asks, for the whole
#    phase.  Every segment on disk when the poller started (all written
#    before it) must be removed while it runs; from the time the window
#    is full, no segment on disk may be older than the window, a snapshot
#    interval, a retention retry and 10 s of slack ($max_age s, first-seen
#    times of the files on disk); the generation's restorable start must
#    stay within as much of now; and the archive must hold well under
#    what was written (the sum of every file ever seen).  The poller must
#    run without an error throughout.  Before issue 36, its pins (whole
#    generation, for each call's transaction) stopped every run.
# 2. A non-superuser pg_monitor role holds a transaction open after
#    generations(): retention still removes the segments that were on disk
#    when it called generations() (the call pins only while it runs).
# 3. A changes() cursor held open: it keeps its own files (from the
#    segment holding the newest snapshot at or before its start LSN's
#    segment, which the restorable start needs, to the end; checked on
#    disk), retention removes the older ones while it is open, and status() says retention is held
#    back (retention_held, retention_held_since set, retention_held_bytes >
#    0, retention_held_by_pid = the cursor's pg_backend_pid()); after
#    COMMIT the fields clear and its segment goes.
# 4. changes(start_time => before the restorable start) is refused with
#    22023 naming the available range (errdetail) and a hint, as the same
#    start given as an LSN is; a start_time at the restorable start reads.
# 5. ALTER EXTENSION changestream UPDATE from 0.1 gives status() the new
#    columns (a database of its own).
#
# Every wait is a poll with a long timeout, so the file holds under the
# load of three other files; it takes about 60 s alone.
use strict;
use warnings;

use File::Basename;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ChangestreamTest;

my $retention = 5;
my $snapshot_interval = 2;
# the oldest a segment may be once the window is full: the window, a
# snapshot interval, the 2 s retry after a held run, and slack
my $max_age = $retention + $snapshot_interval + 2 + 10;
my $node = cs_new_node('retention_readers', conf => qq{
changestream.segment_size = '64kB'
changestream.snapshot_interval = '${snapshot_interval}s'
changestream.retention = '${retention}s'
});
$node->start;
my $db = 'postgres';
my $dir = cs_archive_dir($node);

$node->safe_psql($db, q{
CREATE EXTENSION changestream;
CREATE TABLE w (id bigserial PRIMARY KEY, v text);
CREATE PUBLICATION changestream FOR TABLE w;
CREATE ROLE mon LOGIN IN ROLE pg_monitor;
});
cs_start_archiving($node);
my $gen = $node->safe_psql($db, 'SELECT generation FROM changestream.status()');
my $wal_dir = "$dir/generations/$gen/wal";

my $tmp = PostgreSQL::Test::Utils::tempdir();
sub script
{
	my ($name, $text) = @_;
	my $path = "$tmp/$name";
	open(my $fh, '>', $path) or die "$path: $!";
	print $fh $text;
	close $fh;
	return $path;
}
# ~300 bytes a row, 100 rows/s: a 64 kB segment every two seconds or so
my $writes = script('writes.sql', q{INSERT INTO w (v) VALUES (repeat('x', 250));
});
my $load = cs_pgbench_bg($node, $db, '-n', '-f', $writes, '-R', '100', '-T', '600', '-c', '1');

# segment index -> file name, of the generation's segments on disk
sub segments_on_disk
{
	my %seg;
	opendir(my $dh, $wal_dir) or return %seg;
	for my $f (readdir($dh))
	{
		$seg{hex($1)} = $f if $f =~ /^([0-9a-f]{16})\.wal(\.gz)?$/;
	}
	closedir($dh);
	return %seg;
}

# Every archive file ever seen: path key -> { first => time, size => bytes }
my %seen;
# -> (bytes on disk, bytes of every file ever seen, age in s of the oldest
#     segment on disk by the time it was first seen)
sub sample_archive
{
	my $now = time();
	my ($disk, $oldest) = (0, 0);
	my %present;
	for my $sub ("$gen/wal", "$gen/snapshots")
	{
		opendir(my $dh, "$dir/generations/$sub") or next;
		for my $f (readdir($dh))
		{
			my $path = "$dir/generations/$sub/$f";
			next unless -f $path;
			my $size = -s _;
			my $key = "$sub/" . ($f =~ s/\.gz$//r);
			$disk += $size;
			$seen{$key}{first} //= $now;
			$seen{$key}{size} = $size;
			$present{$key} = 1;
		}
		closedir($dh);
	}
	my $all = 0;
	for my $k (keys %seen)
	{
		$all += $seen{$k}{size};
		next unless $present{$k} && $k =~ m{/wal/};
		$oldest = $now - $seen{$k}{first} if $now - $seen{$k}{first} > $oldest;
	}
	return ($disk, $all, $oldest);
}

# Wait until $cond->() is true, sampling the archive each 200 ms; one test.
# lsn_at_least(a, b): true when LSN a (text, X/X) is at or after LSN b,
# compared by the server's pg_lsn type
sub lsn_at_least
{
	my ($a, $b) = @_;
	return $node->safe_psql($db, "SELECT '$a'::pg_lsn >= '$b'::pg_lsn") eq 't';
}

sub wait_for
{
	my ($cond, $timeout, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $deadline = time() + $timeout;
	while (1)
	{
		sample_archive();
		return ok(1, $name) if $cond->();
		last if time() > $deadline;
		usleep(200_000);
	}
	return ok(0, $name);
}

# some history before the readers: a few segments and snapshots
wait_for(sub { scalar(keys %{ { segments_on_disk() } }) >= 4 }, 120,
	'the load fills at least 4 segments');

############################################################################
# 1. a reader polling changes() during retention

my $poll = script('poll.sql', q{SELECT quote_literal(coalesce(max(commit_lsn), :last::pg_lsn)::text) AS last
  FROM changestream.changes(start_lsn => :last::pg_lsn) \gset
\sleep 200 ms
});
my $t0 = time();
my %before = segments_on_disk();
my @before_names = sort values %before;
my $poller = cs_pgbench_bg($node, $db, '-n', '-f', $poll, '-D', "last='0/0'",
	'-T', $max_age + 12, '-c', '1');
my @samples;    # [ t, disk, all, oldest ]
wait_for(sub {
		my %now = segments_on_disk();
		return !grep { exists $now{$_} } keys %before;
	}, 120, 'every segment on disk when the poller started (' . scalar(@before_names)
	  . ') is removed while it polls');
# from when the window is full until the poller ends: bounded
while (time() - $t0 < $max_age + 10)
{
	my $tick = time();
	push @samples, [ time() - $t0, sample_archive() ];
	my $left = 1 - (time() - $tick);
	usleep(int($left * 1e6)) if $left > 0;
}
my $from_ok = $node->safe_psql($db,
	"SELECT restorable_from_time >= clock_timestamp() - interval '$max_age s'
	   FROM changestream.generations() WHERE generation = '$gen'");
my ($poll_ok, $poll_out, $poll_err) = cs_pgbench_finish($poller);
ok($poll_ok, 'the poller ran without an error') or diag("$poll_err\n$poll_out");
my ($polls) = $poll_out =~ /number of transactions actually processed: (\d+)/;
ok(($polls // 0) >= 20, 'the poller called changes() at least 20 times (' . ($polls // 0) . ')');
my @late = grep { $_->[0] >= $max_age } @samples;
my @old = grep { $_->[3] > $max_age } @late;
ok(@late >= 3 && !@old, sprintf('under the poller no segment on disk is older than %d s (%d samples; too old: %s)',
	$max_age, scalar(@late), join(' ', map { sprintf('%.0fs', $_->[3]) } @old) || 'none'));
is($from_ok, 't', "under the poller the restorable start stays within $max_age s of now");
my $last = $samples[-1];
note(sprintf('under the poller: archive %d kB on disk, %d kB written; oldest segment %.0f s',
	$last->[1] / 1024, $last->[2] / 1024, $last->[3]));
ok($last->[1] < 0.75 * $last->[2], sprintf('the archive stays bounded under the poller: %d kB on disk of %d kB written',
	$last->[1] / 1024, $last->[2] / 1024));

############################################################################
# 2. a pg_monitor role holding a transaction open after generations()

my $mon = $node->background_psql($db, extra_params => [ '-U', 'mon' ]);
is($mon->query_safe('SELECT rolsuper FROM pg_roles WHERE rolname = current_user'), 'f',
	'the monitoring role is not a superuser');
%before = segments_on_disk();
$mon->query_safe('BEGIN; SELECT count(*) FROM changestream.generations()');
my $mon_pid = $mon->query_safe('SELECT pg_backend_pid()');
wait_for(sub {
		my %now = segments_on_disk();
		return !grep { exists $now{$_} } keys %before;
	}, 120, 'with a pg_monitor transaction open after generations(), retention removes the '
	  . scalar(keys %before) . ' segments that were on disk');
is($node->safe_psql($db, "SELECT retention_held_by_pid IS DISTINCT FROM $mon_pid FROM changestream.status()"),
	't', 'status() does not name the monitoring session as holding retention');
$mon->query_safe('COMMIT');
$mon->quit;

############################################################################
# 3. a changes() cursor held open keeps only its own files

# The cursor's start: the newest commit, once the newest snapshot at or
# before its segment lies after the oldest segment on disk, so that the
# cursor has older files for retention to remove.  A pin keeps the newest
# snapshot at or before the reader's position and everything from it on
# (the restorable start is always a snapshot): its "own files" begin at
# segment $keep_from, the one holding that snapshot.
my ($from, $seg_index, $seg, $keep_from);
wait_for(sub {
		$from = $node->safe_psql($db, 'SELECT max(commit_lsn) FROM changestream.changes()');
		($seg_index, $seg, $keep_from) = split /\|/, $node->safe_psql($db,
			"WITH s AS (SELECT segment_index, file_name, start_lsn FROM changestream.wal_segments('$gen')
			             WHERE start_lsn <= '$from' ORDER BY segment_index DESC LIMIT 1)
			 SELECT s.segment_index, s.file_name,
			        (SELECT max(segment_index) FROM changestream.wal_segments('$gen')
			          WHERE start_lsn <= (SELECT max(lsn) FROM changestream.snapshots('$gen')
			                               WHERE lsn <= s.start_lsn))
			   FROM s");
		my %now = segments_on_disk();
		return defined($keep_from) && $keep_from ne '' && grep { $_ < $keep_from } keys %now;
	}, 120, 'a cursor start with older segments on disk');
my $cur = $node->background_psql($db);
my $cur_pid = $cur->query_safe('SELECT pg_backend_pid()');
$cur->query_safe("BEGIN; DECLARE c CURSOR FOR SELECT commit_lsn
	FROM changestream.changes('$gen', start_lsn => '$from')");
my $first = $cur->query_safe('FETCH 1 FROM c');
is($first, $from, 'the cursor starts at its start LSN');
%before = segments_on_disk();
my @older = grep { $_ < $keep_from } keys %before;
ok(@older >= 1, "segments older than the cursor's files (from $keep_from) are on disk when it opens (" . scalar(@older) . ')');
my $held_query = "SELECT retention_held AND retention_held_by_pid = $cur_pid
	  AND retention_held_since IS NOT NULL AND retention_held_bytes > 0 FROM changestream.status()";
cs_poll_or_diag($node, $db, $held_query, 't', 120,
	"status() says retention is held back by the cursor's backend ($cur_pid), since when, and bytes > 0");
my %own;
wait_for(sub {
		%own = segments_on_disk();
		return !grep { exists $own{$_} } @older;
	}, 120, 'retention removes the ' . scalar(@older) . ' segments older than the cursor\'s while it is open');
# its own files: from the snapshot before its segment, every one that was on disk
my @missing = grep { $_ >= $keep_from && !exists $own{$_} } keys %before;
ok(exists $own{$seg_index} && !@missing,
	"the cursor keeps its own files: its segment $seg, those from segment $keep_from on (missing: @missing)");
like($node->safe_psql($db, 'SELECT retention_held_bytes FROM changestream.status()'),
	qr/^[1-9]\d*$/, 'retention_held_bytes counts what the cursor keeps');
my $rest = $cur->query_safe('FETCH ALL FROM c');
ok(length($rest) > 0, 'the cursor reads on');
$cur->query_safe('COMMIT');
cs_poll_or_diag($node, $db,
	"SELECT NOT retention_held AND retention_held_since IS NULL AND retention_held_bytes IS NULL
	    AND retention_held_by_pid IS NULL FROM changestream.status()",
	't', 120, 'after the cursor commits, status() no longer says retention is held back');
wait_for(sub { my %now = segments_on_disk(); return !exists $now{$seg_index} }, 120,
	"after the cursor commits, retention removes its segment $seg");
$cur->quit;

############################################################################
# 4. changes(start_time => before the restorable start) is refused

{
	my ($from_lsn, $from_time) = split /\|/, $node->safe_psql($db,
		"SELECT restorable_from_lsn, restorable_from_time FROM changestream.generations()
		  WHERE generation = '$gen'");
	my ($out, $err) = ('', '');
	$node->psql($db,
		"SELECT count(*) FROM changestream.changes('$gen', start_time => '$from_time'::timestamptz - interval '1 s')",
		stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/ERROR:\s+22023: changestream history before .* of generation $gen was removed by retention/,
		'changes(start_time) before the restorable start is refused with 22023');
	# the insert load goes on, so retention may move the restorable start
	# between reading it and the refusal: the refusal names that start or a
	# later one, never an earlier one
	ok(($err =~ /DETAIL:\s+The requested start time .* lies before the generation's restorable start; its history is available from (\S+) /)
		&& lsn_at_least($1, $from_lsn),
		"the refusal names the available range (from $from_lsn or later)") or diag($err);
	like($err, qr/HINT:\s+Start at or after restorable_from_time/, 'the refusal has a hint');
	($out, $err) = ('', '');
	$node->psql($db,
		"SELECT count(*) FROM changestream.changes('$gen', start_lsn => '$from_lsn'::pg_lsn - 1)",
		stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	ok(($err =~ /ERROR:\s+22023: .*\n.*DETAIL:.*its history is available from (\S+) /)
		&& lsn_at_least($1, $from_lsn),
		"the same start as an LSN is refused alike (from $from_lsn or later)") or diag($err);
	# a start at the restorable start reads (the horizon may move on: retry)
	cs_poll_or_diag($node, $db,
		"SELECT count(*) >= 0 FROM changestream.changes('$gen',
		   start_time => (SELECT restorable_from_time FROM changestream.generations() WHERE generation = '$gen'))",
		't', 60, 'changes(start_time) at the restorable start reads');
}

############################################################################
# 5. the upgrade from 0.1

$node->safe_psql($db, 'CREATE DATABASE up');
$node->safe_psql('up', "CREATE EXTENSION changestream VERSION '0.1'");
is($node->safe_psql('up', 'SELECT count(*) FROM changestream.status()'), '1',
	'status() of extension 0.1 works with this library');
$node->safe_psql('up', 'ALTER EXTENSION changestream UPDATE');
is($node->safe_psql('up',
		"SELECT extversion FROM pg_extension WHERE extname = 'changestream'"), '0.2',
	'the extension updates to 0.2');
is($node->safe_psql('up', 'SELECT retention_held IS NOT NULL FROM changestream.status()'), 't',
	'after the update status() has retention_held');
is($node->safe_psql('up', "SELECT has_function_privilege('mon', 'changestream.status()', 'EXECUTE')"),
	't', 'pg_monitor still may call status() after the update');

$load->{run}->kill_kill;
is($node->safe_psql($db, "SELECT count(*) FROM changestream.verify('$gen')"), '0',
	'verify() finds the generation sound');
$node->stop;
done_testing();
