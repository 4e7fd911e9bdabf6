
# (f) Reload: the server starts with changestream.directory = '' (the
# archiver is 'disabled' and says so once); setting the directory with
# ALTER SYSTEM + pg_reload_conf() starts archiving; a segment_size change by
# reload takes effect; invalid values are rejected; clearing the directory
# by reload disables archiving again.
use ChangestreamTest;

my $node = cs_setup('reload',
	sql => q{
CREATE TABLE r (id int PRIMARY KEY, pad text);
CREATE PUBLICATION changestream FOR TABLE r;
});
my $dir = cs_archive_dir($node);

cs_wait_state($node, 'disabled', name => "state 'disabled' while the directory is empty");
cs_sleep(3);
my $log = cs_log_since($node, 0);
my @disabled =
  grep { /changestream\.directory/ && !/\b(?:HINT|DETAIL|CONTEXT|STATEMENT):/ }
  split /\n/, $log;
cmp_ok(scalar(@disabled), '==', 1,
	'the log mentions the empty changestream.directory exactly once')
  or diag(join("\n", @disabled));
is($node->safe_psql('postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'changestream archiver'"),
	'1', "the 'changestream archiver' worker runs while disabled");
is($node->safe_psql('postgres',
	"SELECT count(*) FROM pg_replication_slots"), '0',
	'no slot is created while disabled');
opendir(my $dh, $dir) or die;
my @entries = grep { !/^\.\.?$/ } readdir($dh);
closedir $dh;
is(scalar(@entries), 0, 'nothing is written to the (future) archive directory');

# Invalid values are rejected, valid settings are untouched.
my ($ret, $out, $err) = $node->psql('postgres',
	"ALTER SYSTEM SET changestream.segment_size = '1kB'");
isnt($ret, 0, "ALTER SYSTEM rejects segment_size '1kB'");
like($err, qr/changestream\.segment_size/, 'the error names the parameter');
($ret, $out, $err) = $node->psql('postgres',
	"ALTER SYSTEM SET changestream.compression_level = 12");
isnt($ret, 0, 'ALTER SYSTEM rejects compression_level 12');
like($err, qr/changestream\.compression_level/, 'the error names the parameter');
($ret, $out, $err) = $node->psql('postgres',
	"ALTER SYSTEM SET changestream.directory = 'relative/path'");
isnt($ret, 0, 'ALTER SYSTEM rejects a relative directory');
($ret, $out, $err) = $node->psql('postgres',
	"ALTER SYSTEM SET changestream.no_such_setting = 1");
isnt($ret, 0, 'ALTER SYSTEM rejects an unknown changestream.* parameter');
is($node->safe_psql('postgres', 'SHOW changestream.segment_size'), '16MB',
	'segment_size is still the default 16MB');
is($node->safe_psql('postgres', 'SHOW changestream.compression_level'), '3',
	'compression_level is still the default 3');

# Set the directory by reload: archiving starts.
cs_start_archiving($node, reload => 1);
my ($gen, $start_lsn) = cs_single_generation($node, 'after the reload');
ok(-d "$dir/generations/$gen/wal", 'the generation directory exists on disk');
ok(-e "$dir/changestream.lock", 'the archive lock file exists');
is($node->safe_psql('postgres',
	"SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'changestream'"),
	'1', 'the slot was created');

# ~1MB of changes with the default 16MB segments: one segment.
sub load
{
	my ($from) = @_;
	for my $i (0 .. 9)
	{
		my $lo = $from + $i * 500 + 1;
		my $hi = $lo + 499;
		$node->safe_psql('postgres',
			"INSERT INTO r SELECT g, repeat(md5(g::text), 6) FROM generate_series($lo, $hi) g"
		);
	}
}
load(0);
cs_wait_archived($node, name => 'with 16MB segments');
my @segs = cs_wal_segments($node, $gen);
is(scalar(@segs), 1, 'one segment with segment_size 16MB');

# Shrink segment_size by reload: rotation follows.
$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.segment_size = '64kB'; SELECT pg_reload_conf();");
cs_poll($node, 'postgres', 'SHOW changestream.segment_size', '64kB', 10);
load(10_000);
cs_wait_archived($node, name => 'with 64kB segments');
@segs = cs_wal_segments($node, $gen);
cmp_ok(scalar(@segs), '>=', 5, 'at least 5 segments once segment_size is 64kB by reload')
  or diag(join("\n", map { "$_->{index} $_->{file} $_->{size}" } @segs));
my @oversized = grep { $_->{compressed} eq 'f' && $_->{size} > 1024 * 1024 } @segs[ 1 .. $#segs ];
is(scalar(@oversized), 0, 'no raw segment after the first exceeds 1MB');

# segment_timeout by reload: a segment holding data is sealed once it is
# older than that, and a segment without transactions is not, even while
# keepalive positions are recorded (WAL of an unpublished table).
$node->safe_psql('postgres', q{
CREATE TABLE unpublished (id int);
ALTER SYSTEM SET changestream.segment_size = '16MB';
ALTER SYSTEM SET changestream.segment_timeout = '1s';
SELECT pg_reload_conf();});
cs_poll($node, 'postgres', 'SHOW changestream.segment_timeout', '1s', 10);
cs_sleep(2);    # a segment still holding data from before is sealed now
my $n0 = scalar(cs_wal_segments($node, $gen));
$node->safe_psql('postgres', "INSERT INTO r VALUES (-2, 'one small transaction')");
cs_wait_archived($node, name => 'one small transaction');
cs_poll_or_diag($node, 'postgres',
	"SELECT count(*) > $n0 FROM changestream.wal_segments('$gen')",
	't', 10, 'with segment_timeout 1s the segment holding the small transaction is sealed');
cs_sleep(1.5);
my $n1 = scalar(cs_wal_segments($node, $gen));
for my $i (1 .. 6)
{
	$node->safe_psql('postgres', "INSERT INTO unpublished SELECT generate_series(1, 1000)");
	cs_sleep(0.5);
}
my $n2 = scalar(cs_wal_segments($node, $gen));
is($n2, $n1, "no rotation without transactions ($n1 segments before, $n2 after 3s)");
$node->safe_psql('postgres', q{
ALTER SYSTEM RESET changestream.segment_timeout;
SELECT pg_reload_conf();});

# Clear the directory by reload: the worker stops archiving.
$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.directory = ''; SELECT pg_reload_conf();");
cs_wait_state($node, 'disabled', name => "state 'disabled' again after clearing the directory");
my $slot_before = cs_slot_confirmed($node);
$node->safe_psql('postgres', "INSERT INTO r VALUES (-1, 'while disabled')");
cs_sleep(2);
is(cs_slot_confirmed($node), $slot_before, 'the slot does not move while disabled');

# And back: same generation, the change made while disabled is archived.
cs_start_archiving($node, reload => 1);
cs_wait_archived($node, name => 'after re-enabling');
my ($gen2) = cs_single_generation($node, 'after re-enabling');
is($gen2, $gen, 're-enabling continues the same generation');
my $found = $node->safe_psql('postgres',
	"SELECT count(*) FROM changestream.wal_records('$gen') WHERE position(convert_to('while disabled', 'UTF8') in data) > 0"
);
is($found, '1', 'the change made while disabled is archived once');

$node->stop;
done_testing();
