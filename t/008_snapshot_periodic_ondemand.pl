
# Periodic and on-demand snapshots under load.  While a workload updates,
# inserts and deletes rows of two published tables:
#   - changestream.snapshot_interval = '5s' (set by reload) takes snapshots
#     on a schedule, and setting it back to 0 stops them;
#   - changestream.take_snapshot() takes one on demand and returns its LSN
#     once the file is durable;
#   - a take_snapshot() held up by a long transaction says so in
#     status().waiting_for, a second take_snapshot() meanwhile fails with
#     55006, and the archiver keeps streaming and acknowledging meanwhile.
# Each snapshot must match the tables at its own LSN: its rows plus every
# archived change with commit LSN >= that LSN equal the final tables,
# with no row doubled or lost.  No snapshot worker or temporary slot is
# left behind.
#
# Size: acct has 30,000 rows (100,000 before issue 32): each of the five or
# more snapshots is read and replayed in perl, in proportion to the rows.
# The workload is the same, and every snapshot must still have archived
# transactions before and after it (tested below).
use IPC::Run;
use Time::HiRes qw(time usleep);
use ChangestreamTest;
use SnapshotTest;

my $T = 26;    # seconds of workload

my $node = cs_setup('periodic', conf => qq(
changestream.flush_interval = '100ms'
max_wal_size = '1GB'
),
	sql => q{
CREATE TABLE acct (id bigint PRIMARY KEY, v text NOT NULL, n int NOT NULL);
INSERT INTO acct SELECT g, md5(g::text), 0 FROM generate_series(1, 30000) g;
CREATE SEQUENCE acct_ids START 1000001;
CREATE TABLE hist (id bigserial PRIMARY KEY, acct bigint, delta int, at timestamptz DEFAULT now());
INSERT INTO hist (acct, delta) SELECT g, 0 FROM generate_series(1, 1000) g;
CREATE PUBLICATION changestream FOR TABLE acct, hist;
},
	archive => 1);
my ($gen, $start) = cs_single_generation($node, 'start');

my $script = snap_write_script('periodic.sql', q{
\set a random(1, 30000)
\set b random(1, 30000)
BEGIN;
UPDATE acct SET n = n + 1, v = 'u' || :client_id WHERE id = :a;
INSERT INTO hist (acct, delta) VALUES (:a, 1);
INSERT INTO acct (id, v, n) VALUES (nextval('acct_ids'), 'new', 0);
DELETE FROM acct WHERE id = :b;
END;
});
my $script2 = snap_write_script('periodic2.sql', q{
DELETE FROM acct WHERE id = (SELECT max(id) FROM acct) - 2;
});
my $bench = cs_pgbench_bg($node, 'postgres', '-n', '-c', '3', '-j', '3',
	'-T', $T, '-R', '250', '-f', "$script\@5", '-f', "$script2\@1");

# take_snapshot(), retried while another snapshot is being taken (55006)
sub take_snapshot
{
	my ($label) = @_;
	my $deadline = time() + 40;
	my ($out, $err, $busy) = ('', '', 0);
	while (time() < $deadline)
	{
		($out, $err) = ('', '');
		$node->psql('postgres', "\\set VERBOSITY verbose\nSELECT changestream.take_snapshot()",
			stdout => \$out, stderr => \$err);
		return ($out, $busy) if $err eq '' && $out =~ m{^[0-9A-F]+/[0-9A-F]+$};
		last unless $err =~ /55006/;
		$busy++;
		usleep(200_000);
	}
	fail("$label: take_snapshot() returns an LSN");
	diag("stdout: $out\nstderr: $err");
	return (undef, $busy);
}

############################################################################
# Periodic snapshots

cs_sleep(1);
$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.snapshot_interval = '5s'; SELECT pg_reload_conf();");
my $ok = cs_poll_or_diag($node, 'postgres',
	"SELECT count(*) >= 3 FROM changestream.snapshots('$gen')", 't', 30,
	'snapshot_interval = 5s: two scheduled snapshots are taken');
$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.snapshot_interval = 0; SELECT pg_reload_conf();");
cs_sleep(0.5);    # the archiver has read the new value
my @periodic = grep { $_->{lsn} ne $start } snap_list($node, $gen);
note("scheduled snapshots at " . join(', ', map { $_->{lsn} } @periodic));
if (@periodic >= 2)
{
	my $gap = $periodic[1]{created} - $periodic[0]{created};
	cmp_ok($gap, '>=', 4, sprintf('scheduled snapshots are about 5s apart (%.1fs)', $gap));
}

############################################################################
# On demand

my ($l1, $busy) = take_snapshot('on demand');
note("take_snapshot() -> $l1 after $busy 'already being taken' retries") if $l1;
my @after_l1 = snap_list($node, $gen);
ok((grep { $_->{lsn} eq ($l1 // '') } @after_l1),
	'take_snapshot() returns once snapshots() lists its snapshot');

# A long transaction holds up the next one.
my $holder = $node->background_psql('postgres');
$holder->query_safe(
	"BEGIN; INSERT INTO acct VALUES (900000001, 'holder', 0);");
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
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
	last if $waiting =~ /running transaction/;
	usleep(100_000);
}
like($waiting, qr/waiting for \d+ running transaction\(s\) to finish \(for example pid \d+\)/,
	'status().waiting_for says the snapshot waits for running transactions');
note("waiting_for: $waiting (holder pid $holder_pid)");

# meanwhile: a second snapshot is refused; the archiver keeps going
my ($o2, $e2) = ('', '');
$node->psql('postgres', "\\set VERBOSITY verbose\nSELECT changestream.take_snapshot()",
	stdout => \$o2, stderr => \$e2);
like($e2, qr/ERROR:  55006: a changestream snapshot is already being taken/,
	'a second take_snapshot() meanwhile fails with 55006');
my $f1 = $node->safe_psql('postgres', 'SELECT flushed_lsn FROM changestream.status()');
my $c1 = cs_slot_confirmed($node);
cs_sleep(2.5);
my $f2 = $node->safe_psql('postgres', 'SELECT flushed_lsn FROM changestream.status()');
my $c2 = cs_slot_confirmed($node);
ok(cs_lsn_to_int($f2) > cs_lsn_to_int($f1),
	"the archive keeps advancing while the snapshot waits ($f1 -> $f2)");
ok(cs_lsn_to_int($c2) > cs_lsn_to_int($c1),
	"the slot's confirmed_flush_lsn keeps advancing meanwhile ($c1 -> $c2)");
ok($taker->pumpable, 'take_snapshot() is still waiting');

$holder->query_safe("INSERT INTO acct VALUES (900000002, 'holder', 0); COMMIT;");
my $finished = eval { $taker->finish; 1 };
ok($finished && $taker->result == 0 && $terr eq '', 'the held-up take_snapshot() returns')
  or diag("stderr: $terr");
chomp(my $l2 = $tout);
like($l2, qr{^[0-9A-F]+/[0-9A-F]+$}, "it returns an LSN ($l2)");
$holder->quit;

my ($ok_b, $bout, $berr) = cs_pgbench_finish($bench);
ok($ok_b, 'workload finished') or diag("$berr\n$bout");
cs_wait_archived($node, name => 'after the workload');

my @snaps = snap_list($node, $gen);
is(scalar(@snaps), scalar(@after_l1) + 1,
	'no scheduled snapshot after snapshot_interval was set back to 0');
is(scalar(cs_generations($node)), 1, 'snapshots do not open a generation');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'changestream snapshot'"),
	'0', 'no snapshot worker left');
is($node->safe_psql('postgres', 'SELECT string_agg(slot_name, \',\') FROM pg_replication_slots'),
	'changestream', 'no temporary slot left');
is(join(',', snap_dir_files($node, $gen)), join(',', sort map { $_->{file} } @snaps),
	'no leftover temporary files in snapshots/');
is($node->safe_psql('postgres',
		"SELECT snapshot_count FROM changestream.generations() WHERE generation = '$gen'"),
	scalar(@snaps), 'generations().snapshot_count counts them');

############################################################################
# Every snapshot matches the tables at its own LSN.

my ($txns, $errors) = snap_fetch_txns($node, $gen);
is_deeply($errors, [], 'the archived stream decodes as well-formed pgoutput');
my %final = (
	'public.acct' => snap_table_state($node, 'postgres', 'acct', 'id, v, n'),
	'public.hist' => snap_table_state($node, 'postgres', 'hist', 'id, acct, delta, at'));
my %relid = map { ("public.$_" => snap_relid($node, $_)) } qw(acct hist);

for my $s (@snaps)
{
	my $kind =
	    $s->{lsn} eq $start        ? 'opening'
	  : $s->{lsn} eq ($l1 // '')   ? 'on demand'
	  : $s->{lsn} eq $l2           ? 'held-up on demand'
	  :                              'scheduled';
	my $label = "$kind snapshot at $s->{lsn}";
	my $snap  = snap_check_file($node, $gen, $s, $label);
	next unless $snap;
	is_deeply([ sort @{ $snap->{order} } ], [ 'public.acct', 'public.hist' ],
		"$label: holds both tables");
	if ($kind ne 'opening')
	{
		my $lo = cs_lsn_to_int($s->{lsn});
		my $before = grep { $_->{commit_int} < $lo } @$txns;
		my $after  = grep { $_->{commit_int} >= $lo } @$txns;
		ok($before > 0 && $after > 0,
			"$label: taken under load ($before archived transactions before it, $after after)");
	}
	for my $t ('public.acct', 'public.hist')
	{
		snap_verify_at(
			snap  => $snap,
			lsn   => $s->{lsn},
			table => $t,
			relid => $relid{$t},
			txns  => $txns,
			final => $final{$t},
			name  => "$label, $t");
	}
	if ($kind eq 'held-up on demand')
	{
		# The long transaction had to end before the slot was consistent:
		# it committed before the snapshot LSN, so it is in the snapshot.
		my $st = $snap->{tables}{'public.acct'}{state};
		ok(exists $st->{900000001} && exists $st->{900000002},
			"$label: holds the rows of the transaction it waited for");
		my ($htx) = grep {
			grep { $_->{op} eq 'I' && $_->{relid} == $relid{'public.acct'} && $_->{new}[0] eq '900000001' }
			  @{ $_->{changes} }
		} @$txns;
		ok($htx && $htx->{commit_int} < cs_lsn_to_int($l2),
			"$label: that transaction's archived commit LSN ("
			  . ($htx ? $htx->{commit} : 'none') . ") is before the snapshot LSN");
	}
}
cmp_ok(scalar(@snaps), '>=', 5, scalar(@snaps) . ' snapshots checked');

$node->stop;
done_testing();
