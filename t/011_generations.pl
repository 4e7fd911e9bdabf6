
# Generation changes: a new generation starts, and says why in the log,
# exactly when continuity cannot be proven --
#   - the slot was dropped and is recreated;
#   - the archive was restored from an older copy (the slot is ahead of it);
#   - the archive was wiped.
# Each new generation starts at the slot's position and from there equals
# the oracle.  Clean restarts in between do not start one.
use File::Path ();
use PostgreSQL::Test::RecursiveCopy;
use ChangestreamTest;

my $node = cs_setup('gens',
	pgbench => 1,
	publish_pgbench => 1,
	oracle => 1,
	archive => 1);
my $dir = cs_archive_dir($node);

sub load { cs_pgbench($node, 'postgres', '-c', '2', '-t', '150', '-n'); }

sub gens { return map { $_->[0] } cs_generations($node); }

sub newest_matches_oracle
{
	my ($label) = @_;
	my $target = cs_wait_archived($node, name => $label);
	my @g = cs_generations($node);
	my ($gen, $start) = @{ $g[-1] };
	is(cs_status($node)->{generation}, $gen, "$label: status() shows the newest generation");
	cs_compare_with_oracle(
		$node,
		gen       => $gen,
		start_lsn => $start,
		target    => $target,
		name      => $label,
		min_txns  => 250);
	return ($gen, $start);
}

load();
my ($gen_a) = newest_matches_oracle('first generation');
is(scalar(gens()), 1, 'one generation at first');

# A clean restart continues it.
$node->restart;
cs_wait_state($node, 'streaming', name => 'streaming after a clean restart');
load();
newest_matches_oracle('first generation after a restart');
is(scalar(gens()), 1, 'a clean restart does not start a generation');

# 1. The slot is dropped (archiving disabled meanwhile) and recreated.
my $off = cs_log_offset($node);
$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.directory = ''; SELECT pg_reload_conf();");
cs_wait_state($node, 'disabled', name => 'disabled to drop the slot');
cs_poll($node, 'postgres',
	"SELECT active FROM pg_replication_slots WHERE slot_name = 'changestream'",
	'f', 30);
$node->safe_psql('postgres', "SELECT pg_drop_replication_slot('changestream')");
load();    # not archived: no slot
cs_start_archiving($node, reload => 1);
my @g = gens();
is(scalar(@g), 2, 'recreating the slot starts a second generation');
like(cs_log_since($node, $off), qr/started generation $g[-1].*\n.*DETAIL:.*slot "changestream" did not exist/,
	'the log says why: the slot did not exist');
my $slot_start = $node->safe_psql('postgres',
	"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'changestream'");
load();
my ($gen_b, $start_b) = newest_matches_oracle('after the slot was recreated');
ok(cs_lsn_ge($slot_start, $start_b), "the new generation starts at the new slot's position ($start_b)");

# 2. The archive is restored from an older copy while the slot has moved
# on: the slot is ahead of the archive.  (Done without a server restart:
# before PostgreSQL 17 a restart can bring the slot's confirmed_flush_lsn
# back to an older persisted value, and then the server resends what the
# old copy lacks and the generation rightly continues.)
$node->stop;
my $copy = $node->basedir . '/archive_copy';
PostgreSQL::Test::RecursiveCopy::copypath($dir, $copy);
$node->start;
cs_wait_state($node, 'streaming', name => 'streaming before the restore');
load();
my $before_restore = cs_wait_archived($node, name => 'archived before the restore');
$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.directory = ''; SELECT pg_reload_conf();");
cs_wait_state($node, 'disabled', name => 'disabled to restore the old copy');
File::Path::rmtree($dir);
PostgreSQL::Test::RecursiveCopy::copypath($copy, $dir);
ok(cs_lsn_ge(cs_slot_confirmed($node), $before_restore),
	'the slot is past what the old copy holds');
$off = cs_log_offset($node);
cs_start_archiving($node, reload => 1);
@g = gens();
is(scalar(@g), 3, 'an archive older than the slot starts a third generation');
like(cs_log_since($node, $off), qr/started generation $g[-1].*\n.*DETAIL:.*ahead of the archive/,
	'the log says why: the slot is ahead of the archive');
my $start_c = (cs_generations($node))[-1][1];
ok(cs_lsn_ge($start_c, $before_restore),
	"the third generation starts at the slot's position ($start_c), not at the old copy's end");
load();
newest_matches_oracle('after the restore');

# 3. The archive is wiped.
$node->stop;
File::Path::rmtree($dir);
mkdir $dir or die "mkdir $dir: $!";
$off = cs_log_offset($node);
$node->start;
cs_wait_state($node, 'streaming', name => 'streaming after the wipe');
@g = gens();
is(scalar(@g), 1, 'a wiped archive starts over with one generation');
like(cs_log_since($node, $off), qr/started generation $g[-1]/,
	'the log reports the new generation');
ok(!grep({ $_ eq $gen_a || $_ eq $gen_b } @g), 'it is a new generation name');
load();
newest_matches_oracle('after the wipe');

$node->stop;
done_testing();
