# A hot standby (issue 33, section 1).  An HA manager deploys the
# primary's settings on every node, so the standby here is made from a
# base backup of an archiving primary: same shared_preload_libraries, same
# changestream.directory (the primary's own archive, as on shared storage).
#
# On the standby the archiver shows state 'standby', says so once in the
# log, takes no walsender on the primary and does not touch the archive:
# the primary's archiver keeps streaming into it, and the archive's file
# list is exactly what the primary alone would give (no lock file, no
# generation, no temporary file of the standby's).  The reading functions
# work on the standby and give the primary's answers for the same
# generation and LSN range (the oracle: the same calls on the primary);
# take_snapshot() is refused with 55000 naming the state, restore() with
# 25006.  Then the primary stops hard and the standby is promoted: its
# archiver logs the promotion, opens a new generation with the timeline
# change as its reason (its slot did not come across: not a failover slot),
# and archives the new primary's changes; restore() of the table at the
# newest point equals the new primary's table.
use Time::HiRes qw(time usleep);
use ChangestreamTest;

my $primary = cs_setup('primary', archive => 1, conf => qq(
changestream.flush_interval = '100ms'
wal_keep_size = '256MB'
hot_standby_feedback = on
),
	sql => q{
CREATE TABLE t (id int PRIMARY KEY, v text NOT NULL);
INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 500) g;
CREATE PUBLICATION changestream FOR TABLE t;
});
my $dir = cs_archive_dir($primary);
$primary->safe_psql('postgres',
	"INSERT INTO t SELECT g, 'before backup' FROM generate_series(501, 600) g");
cs_wait_archived($primary);

$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
my $standby_log = 0;		# the standby's whole log

cs_wait_state($standby, 'standby', name => 'the standby\'s archiver is in state standby');
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't',
	'the standby is in recovery');
is( $standby->safe_psql('postgres',
		"SELECT current_setting('changestream.directory') = '$dir'"),
	't', 'the standby has the primary\'s changestream.directory');

# Traffic on the primary while the standby waits.
for my $i (1 .. 5)
{
	$primary->safe_psql('postgres',
		"UPDATE t SET v = 'update $i' WHERE id % 5 = $i - 1");
	usleep(300_000);
}
cs_wait_archived($primary);
$primary->wait_for_catchup($standby, 'replay');
is(cs_status($primary)->{state}, 'streaming',
	'the primary\'s archiver streams beside the waiting standby');
is( $primary->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_replication WHERE application_name <> 'standby'"),
	'1', 'the primary has one walsender besides the standby\'s: its own archiver');
is(cs_status($standby)->{state}, 'standby',
	'the standby still waits after the traffic');

my @standby_log = grep { /the server is a standby, archiving waits for promotion/ }
  split /\n/, cs_log_since($standby, $standby_log);
is(scalar(@standby_log), 1, 'the standby says it waits once in its log');

# The standby adds nothing to the archive and takes none of its locks:
# the lock file still names the primary's archiver, and the generations
# are the primary's one, with no temporary directory beside it.
my ($gen) = cs_single_generation($primary, 'primary');
my $lock = PostgreSQL::Test::Utils::slurp_file("$dir/changestream.lock");
my $primary_pid = cs_worker_pid($primary);
my $primary_data = $primary->data_dir;
like($lock, qr/^pid $primary_pid\ndata_directory \Q$primary_data\E\n/,
	'the archive\'s lock names the primary\'s archiver');
opendir(my $dh, "$dir/generations") or die "opendir: $!";
my @gen_dirs = sort grep { !/^\.\.?$/ } readdir($dh);
closedir($dh);
is_deeply(\@gen_dirs, [$gen], 'the archive holds the primary\'s generation only');

# The readers on the standby against the same calls on the primary.
my $fence = $primary->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
cs_wait_archived($primary);
$primary->wait_for_catchup($standby, 'replay');
for my $q (
	"SELECT generation, start_lsn, snapshot_count FROM changestream.generations()",
	"SELECT count(*), sum(hashtext(coalesce(new_row::text, '') || coalesce(old_row::text, ''))) FROM changestream.changes('$gen', end_lsn => '$fence')",
	"SELECT count(*) FROM changestream.verify('$gen')",
	"SELECT lsn, file_name, table_count, row_count FROM changestream.snapshots('$gen')")
{
	my $on_primary = $primary->safe_psql('postgres', $q);
	my ($ret, $on_standby, $err) = $standby->psql('postgres', $q);
	is($ret, 0, "the standby runs: $q") or diag($err);
	is($on_standby, $on_primary, "the standby's answer equals the primary's: $q");
}

my ($ret, $out, $err) = $standby->psql('postgres',
	'SELECT changestream.take_snapshot()', extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/55000.*not streaming.*\n.*"standby"/s,
	'take_snapshot() on the standby: 55000 naming the state');
($ret, $out, $err) = $standby->psql('postgres',
	"SELECT * FROM changestream.restore('r')", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/25006.*during recovery/,
	'restore() on the standby: 25006');

# Failover: the primary dies, the standby is promoted.
$primary->stop('immediate');
$standby->promote;
cs_wait_state($standby, 'streaming', name => 'the promoted server archives');
like(cs_log_since($standby, $standby_log),
	qr/the server was promoted, archiving starts/, 'the promotion is logged');
$standby->safe_psql('postgres', q{
INSERT INTO t SELECT g, 'after promotion' FROM generate_series(601, 700) g;
UPDATE t SET v = 'changed after promotion' WHERE id <= 50;
DELETE FROM t WHERE id BETWEEN 51 AND 60;
});
cs_wait_archived($standby);
my @gens = map { $_->[0] } cs_generations($standby);
is(scalar(@gens), 2, 'the promoted server opened a second generation');
like(cs_log_since($standby, $standby_log),
	qr/started generation.*\n.*Reason: replication slot "changestream" did not exist and is created; the timeline changed from 1 to 2 \(the server was promoted/,
	'its reason names the missing slot and the timeline change');

my $new_gen = $gens[-1];
$standby->safe_psql('postgres', "SELECT * FROM changestream.restore('r', '$new_gen')");
is( $standby->safe_psql('postgres',
		'SELECT count(*) FROM (SELECT * FROM t EXCEPT SELECT * FROM r.t) a') . '/'
	  . $standby->safe_psql('postgres',
		'SELECT count(*) FROM (SELECT * FROM r.t EXCEPT SELECT * FROM t) a') . '/'
	  . $standby->safe_psql('postgres', 'SELECT count(*) FROM r.t'),
	'0/0/690', 'restore() on the promoted server equals its table');

# verify() reads a timelines file (FORMAT.md 4.4) as untrusted: each
# malformed or out-of-order line is a problem naming the file.
my $tl = "$dir/generations/$new_gen/timelines";
for my $case (
	[ "# c\n0x2 0/0\n", qr/The line is not "<timeline> <switch LSN>"/ ],
	[ "-1 0/3000000\n",   qr/The line is not/ ],
	[ "2 0/3000000 \n",   qr/The line is not/ ],
	[ "3 0/0\n",          qr/does not follow timeline 2/ ],
	[ "3 FFFFFFFF/0\n3 FFFFFFFF/1\n", qr/Timeline 3 at FFFFFFFF\/1 does not follow timeline 3/ ],
	[ "3 FFFFFFFF/0",     qr/The last line has no line feed/ ],
	[ "3 FFFFFFFF/0\n\0\n", qr/NUL byte/ ])
{
	open(my $fh, '>', $tl) or die "open $tl: $!";
	print $fh $case->[0];
	close($fh);
	like( $standby->safe_psql('postgres',
			"SELECT string_agg(file_name || ': ' || problem, '; ') FROM changestream.verify('$new_gen')"),
		qr/timelines: .*$case->[1]/,
		'verify() names a damaged timelines file: ' . ($case->[0] =~ s/\n/\\n/gr =~ s/\0/\\0/gr));
}
unlink($tl) or die "unlink $tl: $!";
is($standby->safe_psql('postgres', "SELECT count(*) FROM changestream.verify('$new_gen')"),
	'0', 'without it, verify() finds nothing');

done_testing();
