
# Many published tables (issue 9, item 7): 10,000 published tables, each
# with a primary key and one row, at the default
# max_locks_per_transaction = 64.  Locking every table in one transaction
# needs more locks than the whole lock table holds ("out of shared
# memory"); the snapshot must lock and copy them in batches, each in a
# transaction that imports the slot's exported snapshot.  Checked: the
# opening snapshot of the generation and a take_snapshot() both hold every
# table and every row (against the source tables), and no transaction of
# the snapshot held more than max_locks_per_transaction locks' worth of
# tables.  The times are printed (note) for the issue's closing note.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use ChangestreamTest;
use SnapshotTest;

my $N = 10_000;

my $node = cs_new_node('many', conf => qq(
max_locks_per_transaction = 64
fsync = off
));
$node->start;
is($node->safe_psql('postgres', 'SHOW max_locks_per_transaction'), '64',
	'max_locks_per_transaction is the default, 64');

# create the tables 500 per transaction (creating them takes locks too);
# the extension's own changestream.ddl_history, which FOR ALL TABLES lists
# too, is neither counted nor in a snapshot
my $t0 = time();
my $sql = "CREATE EXTENSION changestream;\n";
for (my $i = 1; $i <= $N; $i += 500)
{
	my $last = $i + 499;
	$sql .= "DO \$\$BEGIN FOR i IN $i..$last LOOP "
	  . "EXECUTE format('CREATE TABLE many_%s (id int PRIMARY KEY, v int); "
	  . "INSERT INTO many_%s VALUES (%s, %s)', i, i, i, i); END LOOP; END\$\$;\n";
}
$sql .= "CREATE PUBLICATION changestream FOR ALL TABLES;\n";
$node->safe_psql('postgres', $sql, timeout => 900);
note(sprintf('created %d tables in %.1f s', $N, time() - $t0));
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_publication_tables WHERE pubname = 'changestream' AND schemaname <> 'changestream'"),
	$N, "$N tables are published");

# The opening snapshot (the generation's first) ...
$t0 = time();
cs_start_archiving($node, timeout => 600);
my $opening = time() - $t0;
my ($gen) = cs_single_generation($node, 'start');
my @snaps = snap_list($node, $gen);
is(scalar(@snaps), 1, 'the generation opened with a snapshot');
is($snaps[0]{tables}, $N, "the opening snapshot holds $N tables");
is($snaps[0]{rows}, $N, "and $N rows");
my $log = slurp_file($node->logfile);
my ($tables, $rows, $txns, $ms) =
  $log =~ /snapshot at \S+ written: (\d+) tables, (\d+) rows in (\d+) transactions, (\d+) ms/;
is($tables, $N, 'the log reports the tables');
cmp_ok($txns // 0, '>=', $N / 16, "copied in at least $N/16 transactions ($txns)");
unlike($log, qr/out of shared memory/, 'no "out of shared memory"');
note(sprintf('opening snapshot of %d tables: %.1f s from restart to streaming; '
	  . 'copy %s ms after the consistent point, %s transactions',
	  $N, $opening, $ms // '?', $txns // '?'));

# Compare the file with the source tables (the oracle).
my $file = snap_read(snap_path($node, $gen, $snaps[0]{file}), keep_lines => 1, no_state => 1);
is_deeply($file->{errors}, [], 'the snapshot file is well formed');
is(scalar(@{ $file->{order} }), $N, "the file has $N COPY sections");
my $mismatch = 0;
for my $name (@{ $file->{order} })
{
	my ($i) = $name =~ /many_(\d+)$/;
	my $lines = $file->{tables}{$name}{lines};
	$mismatch++
	  unless defined $i && @$lines == 1 && $lines->[0] eq "$i\t$i";
}
is($mismatch, 0, 'every table holds exactly its one source row');

# ... and an on-demand snapshot
$node->safe_psql('postgres', "INSERT INTO many_1 VALUES (-1, -1)");
$t0 = time();
my $lsn = $node->safe_psql('postgres', 'SELECT changestream.take_snapshot()',
	timeout => 600);
note(sprintf('take_snapshot() of %d tables: %.1f s', $N, time() - $t0));
@snaps = snap_list($node, $gen);
my ($snap2) = grep { $_->{lsn} eq $lsn } @snaps;
ok($snap2, "take_snapshot() returned $lsn and the snapshot is listed");
is($snap2->{rows}, $N + 1, 'it holds every row, the new one too') if $snap2;
is($node->safe_psql('postgres', 'SELECT state FROM changestream.status()'),
	'streaming', 'the archiver streams');

$node->stop;
done_testing();
