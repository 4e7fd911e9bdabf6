
# Several databases from one cluster (issue 34): changestream.databases
# names three databases, archived at once under a pgbench load in each,
# each archive equal to a second pgoutput slot of its own database (the
# oracle).  Then: a fourth database is added by a reload while the others
# stream, and a fifth whose publication is missing, which stays in error
# without disturbing the others; one is removed from the list by a reload
# (its archive stays readable); DROP DATABASE of an archived one works, also
# while a snapshot worker runs there, and its archive stays readable from
# another database; CREATE DATABASE ...
# TEMPLATE of an archived one works and its archive goes on; a kill -9 of the
# postmaster in the middle of the load leaves every archive equal to its
# oracle; a budget too small names the setting to raise, counting the
# replication slots of other software (the oracle slots).
use ChangestreamTest;
use ArchiveDamage;

my $node = cs_new_node('dbs', conf => qq(
changestream.segment_size = '128kB'
changestream.flush_interval = '50ms'
max_worker_processes = 16
max_replication_slots = 20
));
$node->start;
my $dir = cs_archive_dir($node);
my @dbs = qw(db1 db2 db3 db4);
my $odd = 'My.DB';    # upper case and a dot: its tree is databases/%4Dy%2E%44%42

# the oracle slot of $db (slot names: lower case letters, digits, _)
sub oracle_slot
{
	my ($db) = @_;
	(my $slot = lc "oracle_$db") =~ s/[^a-z0-9_]/_/g;
	return $slot;
}

# Each database: pgbench tables, the extension, its publication and its
# oracle slot (slot names are cluster-wide: oracle_<db>), made before the
# archiver's slot so that it covers everything the archive can hold.
for my $db (@dbs, $odd, 'nopub', 'gone')
{
	$node->safe_psql('postgres', qq{CREATE DATABASE "$db"});
	cs_pgbench($node, $db, '-i', '-s', '1', '-q');
	$node->safe_psql($db, 'CREATE EXTENSION changestream');
	next if $db eq 'nopub';
	$node->safe_psql($db,
		'CREATE PUBLICATION changestream FOR TABLE pgbench_accounts, '
		  . 'pgbench_branches, pgbench_tellers, pgbench_history');
	cs_create_oracle_slot($node, $db, oracle_slot($db));
}

# the status() row of $db, read in $db
sub state_of
{
	my ($db, $in) = @_;
	return $node->safe_psql($in // $db,
		"SELECT state FROM changestream.status() WHERE database = '$db'");
}

sub wait_streaming
{
	my ($db, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	return cs_poll_or_diag($node, $db,
		"SELECT state FROM changestream.status() WHERE database = '$db'",
		'streaming', 90, $name // "$db: its archiver streams");
}

# Fence $db and wait until its archive is durable past the fence.
sub wait_archived
{
	my ($db) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $target = cs_fence($node, $db);
	cs_poll_or_diag($node, $db,
		"SELECT flushed_lsn >= '$target' FROM changestream.status() WHERE database = '$db'",
		't', 120, "$db: flushed_lsn reaches $target");
	return $target;
}

# Compare $db's archive (read in $db: its own tree by default) with its
# oracle up to $target.
sub compare
{
	my ($db, $target, $min, $label) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($gen, $start) = cs_single_generation($node, "$label, $db", $db);
	return cs_compare_with_oracle($node,
		gen       => $gen,
		start_lsn => $start,
		target    => $target,
		db        => $db,
		slot      => oracle_slot($db),
		min_txns  => $min,
		name      => "$label, $db");
}

############################################################################
# Three databases at once

$node->append_conf('postgresql.conf', qq(
changestream.directory = '$dir'
changestream.databases = 'db1, db2, db3'
));
$node->restart;
wait_streaming($_) for qw(db1 db2 db3);

is($node->safe_psql('db1',
	"SELECT string_agg(database || ':' || slot, ',' ORDER BY database) FROM changestream.status()"),
	join(',', map {
		"$_:changestream_" . $node->safe_psql('postgres',
			"SELECT oid FROM pg_database WHERE datname = '$_'") } qw(db1 db2 db3)),
	'status() has one row per archived database, each with its slot changestream_<oid>');
is($node->safe_psql('db2',
	"SELECT string_agg(database || ':' || state, ',' ORDER BY database) FROM changestream.stat_archiver"),
	'db1:streaming,db2:streaming,db3:streaming',
	'stat_archiver has one row per archived database, named in its last column');
ok(-d "$dir/databases/$_/generations", "$_ is archived in databases/$_")
  for qw(db1 db2 db3);
ok(!-e "$dir/generations",
	'the directory root holds no archive: changestream.database (postgres) is not listed');

my @bench = map {
	cs_pgbench_bg($node, $_, '-c', '2', '-j', '1', '-T', '8', '-R', '200', '-n')
} qw(db1 db2 db3);

# While they stream: add db4, and nopub, whose publication is missing.
cs_sleep(2);
$node->safe_psql('postgres',
	qq{ALTER SYSTEM SET changestream.databases = 'db1, db2, db3, db4, nopub, "$odd"'; SELECT pg_reload_conf()});
wait_streaming('db4', 'db4, added by a reload, streams while the others do');
wait_streaming($odd, 'a database named with upper case and a dot streams');
ok(-d "$dir/databases/%4Dy%2E%44%42/generations", "and its tree's name is written %XX");
cs_pgbench($node, 'db4', '-c', '2', '-j', '1', '-t', '200', '-n');
cs_poll_or_diag($node, 'db1',
	q{SELECT state || ' ' || (last_error LIKE '%publication "changestream" does not exist%')
	  FROM changestream.status() WHERE database = 'nopub'},
	'error true', 90, 'nopub: its archiver reports the missing publication');

for my $b (@bench)
{
	my ($ok, $out, $err) = cs_pgbench_finish($b);
	ok($ok, 'pgbench load ran') or diag($err);
}
is(state_of($_, 'db1'), 'streaming', "$_ still streams beside nopub's failures")
  for qw(db1 db2 db3 db4);

my %target;
$target{$_} = wait_archived($_) for @dbs;
compare($_, $target{$_}, 300, 'under load') for qw(db1 db2 db3);
compare('db4', $target{db4}, 200, 'added by reload');
$node->safe_psql($odd, 'INSERT INTO pgbench_history VALUES (3, 3, 3, 3, now())');
my $t_odd = wait_archived($odd);
compare($odd, $t_odd, 1, 'named My.DB');
my $d = ad_decode($dir);
is($d->{rc}, 0, 'cs_decode.py reads the root and every tree below databases/')
  or diag($d->{err});
is(scalar(() = $d->{out} =~ /^database (db1|db2|db3|db4|My\.DB), generation [0-9a-f]{16}$/mg),
	5, 'each generation titled with its database');

# A pg_monitor member reads another database's archive; anyone else not.
$node->safe_psql('postgres', 'CREATE ROLE mon LOGIN IN ROLE pg_monitor; CREATE ROLE nobody LOGIN');
$node->safe_psql('db2',
	'GRANT USAGE ON SCHEMA changestream TO mon, nobody; '
	  . 'GRANT EXECUTE ON FUNCTION changestream.generations() TO mon, nobody');
is($node->safe_psql('db2',
	"SET changestream.read_database = 'db1'; SELECT count(*) FROM changestream.generations()",
	extra_params => [ '-U', 'mon' ]),
	'1', 'a pg_monitor member reads db1\'s archive from db2 with changestream.read_database');
my ($rc, $out, $err) = $node->psql('db2',
	"SET changestream.read_database = 'db1'; SELECT count(*) FROM changestream.generations()",
	extra_params => [ '-U', 'nobody' ]);
like($err, qr/permission denied to read the archive of database "db1"/,
	'anyone else may not');

############################################################################
# kill -9 of the postmaster mid-load: every archive equals its oracle

@bench = map {
	cs_pgbench_bg($node, $_, '-c', '2', '-j', '1', '-T', '6', '-R', '200', '-n')
} qw(db1 db2 db3 db4);
cs_sleep(3);
cs_crash($node);
$_->{run}->kill_kill for @bench;
cs_start_after_crash($node);
wait_streaming($_, "$_ streams again after kill -9 of the postmaster") for @dbs;
$target{$_} = wait_archived($_) for @dbs;
compare($_, $target{$_}, 300, 'after kill -9') for @dbs;

############################################################################
# Remove db3 from the list; DROP DATABASE of db2; nopub gone too

my $db3_gen = $node->safe_psql('db3', 'SELECT max(generation) FROM changestream.generations()');
$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.databases = 'db1, db2, db4'; SELECT pg_reload_conf()");
cs_poll_or_diag($node, 'db1',
	"SELECT count(*) FROM changestream.status() WHERE database IN ('db3', 'nopub')",
	'0', 60, 'db3 and nopub leave status() once removed from the list');
cs_poll_or_diag($node, 'postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'changestream archiver' AND datname IN ('db3', 'nopub')",
	'0', 60, 'their archivers stopped');
is($node->safe_psql('db3', 'SELECT max(generation) FROM changestream.generations()'),
	$db3_gen, 'db3 still reads its own archive after leaving the list');
is(state_of('db1'), 'streaming', 'db1 streams on');

my $db2_gen = $node->safe_psql('db2', 'SELECT max(generation) FROM changestream.generations()');
my $db2_records = $node->safe_psql('db2',
	"SELECT count(*) FROM changestream.wal_records('$db2_gen')");
# a snapshot worker of db2 held up by a running transaction (in postgres)
# at the time of the drop: the drop ends it too
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN; SELECT pg_current_xact_id();');
my ($tout, $terr) = ('', '');
my $taker = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('db2'), '-c',
		'SELECT changestream.take_snapshot()' ],
	'>', \$tout, '2>', \$terr);
cs_poll_or_diag($node, 'postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'changestream snapshot' AND datname = 'db2'",
	'1', 60, 'a snapshot worker of db2 runs, held up by a running transaction');
my ($drc, $dout, $derr) = $node->psql('postgres', 'DROP DATABASE db2');
is($drc, 0, 'DROP DATABASE of an archived database whose snapshot worker runs succeeds at once')
  or diag($derr);
$taker->finish;
$holder->query_safe('COMMIT');
$holder->quit;
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_database WHERE datname = 'db2'"),
	'0', 'DROP DATABASE of an archived database succeeds');
is($node->safe_psql('postgres',
	"SELECT count(*) FROM pg_replication_slots WHERE database = 'db2'"),
	'0', 'its slots are gone with it');
is($node->safe_psql('db1', q{SELECT state FROM changestream.status() WHERE database = 'db2'}),
	'not running', 'status() shows it not running');
is($node->safe_psql('db1',
	"SET changestream.read_database = 'db2'; SELECT count(*) FROM changestream.wal_records('$db2_gen')"),
	$db2_records, 'its archive stays readable (from db1, with changestream.read_database)');
$node->safe_psql('db1', 'INSERT INTO pgbench_history VALUES (1, 1, 1, 1, now())');
my $t1 = wait_archived('db1');
compare('db1', $t1, 300, 'after the drop of db2');

# CREATE DATABASE ... TEMPLATE of an archived database: its archiver lets
# go for the copy and comes back, in the same generation.
$node->safe_psql('postgres', 'CREATE DATABASE db1copy TEMPLATE db1');
is($node->safe_psql('db1copy', 'SELECT count(*) FROM pgbench_branches'),
	'1', 'CREATE DATABASE ... TEMPLATE of an archived database succeeds');
wait_streaming('db1', 'db1 streams again after the copy');
$node->safe_psql('db1', 'INSERT INTO pgbench_history VALUES (2, 2, 2, 2, now())');
$t1 = wait_archived('db1');
compare('db1', $t1, 300, 'after the copy of db1');

############################################################################
# A budget too small names the setting

$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.databases = 'db1, db4, db3, nopub, gone'; SELECT pg_reload_conf()");
$node->append_conf('postgresql.conf', "max_wal_senders = 4\nmax_replication_slots = 10\n");
my $log = cs_log_offset($node);
$node->restart;
# the oracle slots are other software's: they count against the budget
my $others = $node->safe_psql('postgres',
	"SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'oracle%'");
cs_poll_or_diag($node, 'db1',
	"SELECT count(*) FROM changestream.status() WHERE last_error LIKE '%raise max_wal_senders to at least 6%'",
	'2', 60, 'the databases past the slot budget say which setting to raise');
like(cs_log_since($node, $log),
	qr/changestream\.databases lists 5 databases, which need 6 WAL senders .*max_wal_senders is 4/,
	'the log says it too');
like(cs_log_since($node, $log),
	qr/changestream\.databases lists 5 databases, which need 6 replication slots .*max_replication_slots is 10 and other software uses $others\n(?:.*\n)*?.*HINT:  Raise max_replication_slots to at least @{[6 + $others]} /,
	"the replication slots other software uses ($others oracle slots) count against the budget, named in the log");
wait_streaming($_) for qw(db1 db4 db3);

done_testing();
