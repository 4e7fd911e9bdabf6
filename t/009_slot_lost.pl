
# Slot lost: each event that loses the continuity of the archiver's slot
# opens a new generation with its own snapshot, says why in the log, and
# archiving goes on in it:
#   1. the slot is dropped while archiving is off (directory '' + reload);
#   2. the slot is invalidated (wal_status 'lost') through a small
#      max_slot_wal_keep_size while archiving is off;
#   3. changestream.new_generation() is called (the slot still exists: the
#      snapshot comes from a temporary slot and the slot is streamed from
#      that snapshot's LSN).
# Changes made while no slot covered them are in the new generation's
# snapshot; each new generation's snapshot, taken while a workload runs,
# plus its archived changes equals the final table, with no row doubled or
# lost; older generations are left as they were; no retry loop opens
# generation after generation.
use Time::HiRes qw(time usleep);
use ChangestreamTest;
use SnapshotTest;

my $node = cs_setup('slotlost', conf => qq(
changestream.flush_interval = '100ms'
max_wal_size = '1GB'
),
	sql => q{
CREATE TABLE t (id bigint PRIMARY KEY, v text NOT NULL, n int NOT NULL);
INSERT INTO t SELECT g, md5(g::text), 0 FROM generate_series(1, 30000) g;
CREATE SEQUENCE t_ids START 1000001;
CREATE PUBLICATION changestream FOR TABLE t;
});
my $dir = cs_archive_dir($node);
my $relid = snap_relid($node, 't');

my $script = snap_write_script('slotlost.sql', q{
\set a random(1, 20000)
\set b random(1, 20000)
BEGIN;
INSERT INTO t VALUES (nextval('t_ids'), 'w' || :client_id, 1);
UPDATE t SET n = n + 1 WHERE id = :a;
DELETE FROM t WHERE id = :b;
END;
});
sub workload
{
	my ($secs) = @_;
	return cs_pgbench_bg($node, 'postgres', '-n', '-c', '2', '-j', '2',
		'-T', $secs, '-R', '200', '-f', $script);
}
sub finish
{
	my ($h, $label) = @_;
	my ($ok, $out, $err) = cs_pgbench_finish($h);
	ok($ok, "$label: workload finished") or diag("$err\n$out");
}

# Changes nothing archives: no slot covers them.  They touch rows the
# workload (ids 1..20000 and new ones) leaves alone, so the next snapshot
# holds exactly 150 rows tagged so.
sub unarchived_changes
{
	my ($tag) = @_;
	$node->safe_psql(
		'postgres', qq{
INSERT INTO t SELECT nextval('t_ids'), '$tag', 7 FROM generate_series(1, 100);
UPDATE t SET v = '$tag-upd' WHERE id IN
	(SELECT id FROM t WHERE id BETWEEN 20001 AND 30000 AND v NOT LIKE '%-upd' ORDER BY id LIMIT 50);
DELETE FROM t WHERE id IN
	(SELECT id FROM t WHERE id BETWEEN 20001 AND 30000 ORDER BY id DESC LIMIT 50);
});
}

sub disable_archiving
{
	my ($label) = @_;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET changestream.directory = ''; SELECT pg_reload_conf();");
	cs_wait_state($node, 'disabled', name => "$label: archiving disabled");
	cs_poll_or_diag($node, 'postgres',
		"SELECT active FROM pg_replication_slots WHERE slot_name = 'changestream'",
		'f', 30, "$label: the slot is no longer in use");
}

sub enable_archiving
{
	my ($label) = @_;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET changestream.directory = '$dir'; SELECT pg_reload_conf();");
	cs_wait_state($node, 'streaming', name => "$label: archiving again");
}

# The newest generation: one more than before, opened with a snapshot at
# its start LSN, that plus its archive = the final table; the log gives
# the reason.  Returns (generation, start_lsn).
sub check_new_generation
{
	my ($label, $ngen, $reason_re, $log_off, $tags) = @_;
	my @g = cs_generations($node);
	is(scalar(@g), $ngen, "$label: generations() shows $ngen generations");
	my ($gen, $start) = @{ $g[-1] };
	is(cs_status($node)->{generation}, $gen, "$label: status() shows the new generation");
	like(cs_log_since($node, $log_off),
		qr/started generation $gen at \Q$start\E\n.*DETAIL:  Reason: $reason_re/,
		"$label: the log says why the generation was started");
	is($node->safe_psql('postgres',
			"SELECT snapshot_count FROM changestream.generations() WHERE generation = '$gen'"),
		'1', "$label: the new generation has a snapshot");
	my @s = snap_list($node, $gen);
	is($s[0]{lsn}, $start, "$label: the snapshot is at the generation's start_lsn");
	my $snap = $s[0] ? snap_check_file($node, $gen, $s[0], "$label snapshot") : undef;
	return ($gen, $start) unless $snap;
	my $st = $snap->{tables}{'public.t'}{state} // {};
	for my $tag (@$tags)
	{
		my $n = grep { /\0v\Q$tag\E(?:-upd)?\0/ } values %$st;
		is($n, 150, "$label: the snapshot holds the changes made while no slot covered them ($tag)");
	}
	my ($txns, $errors) = snap_fetch_txns($node, $gen);
	is_deeply($errors, [], "$label: the archive decodes as well-formed pgoutput");
	my @early = grep { $_->{commit_int} < cs_lsn_to_int($start) } @$txns;
	is(scalar(@early), 0, "$label: no archived transaction commits before $start");
	snap_verify_at(
		snap        => $snap,
		lsn         => $start,
		table       => 'public.t',
		relid       => $relid,
		txns        => $txns,
		final       => snap_table_state($node, 'postgres', 't', 'id, v, n'),
		name        => $label,
		min_applied => 20);
	return ($gen, $start);
}

# Fingerprint of a generation's files (name, size, mtime) to show it is
# left alone once a newer one exists.
sub gen_files
{
	my ($gen) = @_;
	my $out = '';
	for my $sub ('snapshots', 'wal')
	{
		my $d = "$dir/generations/$gen/$sub";
		opendir(my $dh, $d) or next;
		for my $f (sort grep { !/^\./ } readdir($dh))
		{
			my @st = stat("$d/$f");
			$out .= "$sub/$f $st[7] $st[9]\n";
		}
		closedir($dh);
	}
	return $out;
}

cs_start_archiving($node);
my ($gen_a, $start_a) = cs_single_generation($node, 'first generation');
my $w = workload(3);
finish($w, 'first generation');
cs_wait_archived($node, name => 'first generation');

############################################################################
# 1. The slot is dropped.

disable_archiving('drop');
$node->safe_psql('postgres', "SELECT pg_drop_replication_slot('changestream')");
unarchived_changes('dropped');
my $files_a = gen_files($gen_a);
my $off = cs_log_offset($node);
$w = workload(6);
cs_sleep(1);
enable_archiving('drop');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'changestream' AND NOT temporary"),
	'1', 'drop: the slot is created again');
finish($w, 'drop');
cs_wait_archived($node, name => 'drop');
my ($gen_b, $start_b) = check_new_generation('drop', 2,
	qr/replication slot "changestream" did not exist and is created/, $off, ['dropped']);
my $end_a = $node->safe_psql('postgres',
	"SELECT end_lsn FROM changestream.generations() WHERE generation = '$gen_a'");
ok(cs_lsn_to_int($start_b) >= cs_lsn_to_int($end_a),
	"drop: the new generation starts ($start_b) after the old one ends ($end_a)");
is(gen_files($gen_a), $files_a, 'drop: the old generation\'s files are left as they were');

# Archiving continues in the new generation.
$node->safe_psql('postgres', "INSERT INTO t VALUES (5000001, 'after drop', 0)");
cs_wait_archived($node, name => 'drop: one more insert');
my ($tx) = snap_fetch_txns($node, $gen_b);
ok((grep { grep { $_->{op} eq 'I' && $_->{new}[0] eq '5000001' } @{ $_->{changes} } } @$tx),
	'drop: a new insert is archived in the new generation');

############################################################################
# 2. The slot is invalidated (wal_status 'lost').

disable_archiving('invalidate');
$node->safe_psql('postgres',
	"ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'; SELECT pg_reload_conf();");
unarchived_changes('invalidated');
for (1 .. 3)
{
	$node->safe_psql('postgres',
		"CREATE TABLE IF NOT EXISTS filler (x text); INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 2000); SELECT pg_switch_wal();"
	);
}
cs_poll_or_diag($node, 'postgres',
	"CHECKPOINT; SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'changestream'",
	'lost', 30, 'invalidate: the slot is invalidated (wal_status lost)')
  or diag($node->safe_psql('postgres', 'SELECT * FROM pg_replication_slots'));
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET max_slot_wal_keep_size; SELECT pg_reload_conf();");
my $files_b = gen_files($gen_b);
$off = cs_log_offset($node);
$w = workload(6);
cs_sleep(1);
enable_archiving('invalidate');
is($node->safe_psql('postgres',
		"SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'changestream'"),
	'reserved', 'invalidate: the slot is recreated');
finish($w, 'invalidate');
cs_wait_archived($node, name => 'invalidate');
my ($gen_c, $start_c) = check_new_generation('invalidate', 3,
	qr/replication slot "changestream" was invalidated \(wal_status lost\) and is recreated/,
	$off, ['invalidated']);
is(gen_files($gen_b), $files_b, 'invalidate: the previous generation\'s files are left as they were');

############################################################################
# 3. changestream.new_generation() under load: the slot exists, so the
# snapshot comes from a temporary slot and the slot streams from there.

$off = cs_log_offset($node);
$w = workload(6);
cs_sleep(2);
my $gen_d = $node->safe_psql('postgres', 'SELECT changestream.new_generation()');
like($gen_d, qr/^[0-9a-f]{16}$/, "new_generation() returns the new generation ($gen_d)");
finish($w, 'new_generation()');
cs_wait_archived($node, name => 'new_generation()');
my ($gen_d2, $start_d) = check_new_generation('new_generation()', 4,
	qr/requested by changestream\.new_generation\(\)/, $off, []);
is($gen_d2, $gen_d, 'new_generation() returned the newest generation');
my $snap_workers = $node->safe_psql('postgres',
	"SELECT count(*) FROM pg_replication_slots WHERE slot_name <> 'changestream'");
is($snap_workers, '0', 'new_generation(): no temporary slot left');


# The previous generation is no longer written; once the maintenance
# worker has compressed its last segment (sealed by the hand-off), its
# files stay as they are.
cs_poll($node, 'postgres', "SELECT raw_sealed_segments = 0 FROM changestream.status()", 't', 60);
my $files_c = gen_files($gen_c);

# No retry loop: the generations stay as they are, the worker streams.
cs_sleep(3);
is(scalar(cs_generations($node)), 4, 'no further generation is opened');
is(gen_files($gen_c), $files_c, 'new_generation(): the previous generation\'s files are left as they were');
is(cs_status($node)->{state}, 'streaming', 'the archiver is streaming');
unlike(cs_log_since($node, $off), qr/ERROR|FATAL/, 'no error in the log since new_generation()');

$node->stop;
done_testing();
