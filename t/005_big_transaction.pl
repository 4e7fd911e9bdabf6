
# (e) Slow server timeout: with wal_sender_timeout = '2s' (and the default
# status_interval of 10s, so only replies to the server's requests and
# updates during long work can keep the connection alive), one INSERT of
# 1,000,000 rows in a single transaction is archived completely, with no
# disconnect, while another process writes and fsyncs beside the server.
use ChangestreamTest;

my $rows = 1_000_000;

# fsync = on (PostgreSQL::Test::Cluster turns it off): the archiver's
# fdatasync calls go through pg_fdatasync(), which fsync = off makes no-ops;
# here they must cost what they cost in production.
my $node = cs_setup('big', status_interval => '10s', conf => qq(
fsync = on
wal_sender_timeout = '2s'
logical_decoding_work_mem = '64MB'
),
	sql => q{
CREATE TABLE big (id int);
CREATE PUBLICATION changestream FOR TABLE big;
},
	archive => 1);
my ($gen) = cs_single_generation($node, 'at start');
my $pid0 = cs_status($node)->{pid};
ok($pid0 =~ /^\d+$/, "archiver pid $pid0");
my $log_offset = cs_log_offset($node);

# Heavy fsync traffic beside the server: each fdatasync of the archiver
# then takes long (ext4 commits the journal for everyone), and a reply to
# the walsender's keepalive must not wait for one.  Before the reply was
# sent first, this made the walsender time out again and again.
my $io_file = $node->basedir . '/io_pressure';
my $io = IPC::Run::start([ 'sh', '-c',
	"while :; do dd if=/dev/zero of='$io_file' bs=1M count=256 conv=fsync status=none; rm -f '$io_file'; done" ]);

my $t0 = time();
$node->safe_psql('postgres',
	"INSERT INTO big SELECT g FROM generate_series(1, $rows) g");
my $target = cs_wait_archived($node, name => 'the big transaction', timeout => 300);
$io->kill_kill;
unlink $io_file;
note(sprintf("archived %d rows in %.0fs after the INSERT started", $rows, time() - $t0));

my $log = cs_log_since($node, $log_offset);
unlike($log, qr/replication timeout|terminating walsender/i,
	'no walsender timeout in the log');
unlike($log, qr/ERROR|FATAL/, 'no ERROR or FATAL in the log')
  or diag(join("\n", grep { /ERROR|FATAL/ } split /\n/, $log));
my $st = cs_status($node);
is($st->{pid}, $pid0, 'the archiver was not restarted');
is($st->{state}, 'streaming', 'still streaming');
is($st->{last_error}, '', 'no last_error');

# Messages per transaction, in stream order: exactly one transaction has
# INSERTs and it has all of them.
my $per_txn = $node->safe_psql(
	'postgres', qq{
SELECT txn, count(*) FILTER (WHERE t = 73)
FROM (SELECT sum((t = 66)::int) OVER (ORDER BY n) AS txn, t
      FROM (SELECT n, get_byte(data, 0) AS t
            FROM changestream.wal_records('$gen') WITH ORDINALITY
                 AS w(lsn, wal_end, sent_at, data, n)) a) b
WHERE t IN (66, 67, 73)
GROUP BY txn HAVING count(*) FILTER (WHERE t = 73) > 0 ORDER BY txn});
my @txns = grep { $_ ne '' } split /\n/, $per_txn;
is(scalar(@txns), 1, 'exactly one archived transaction holds INSERTs')
  or diag($per_txn);
my ($inserts) = $txns[0] =~ /\|(\d+)$/;
is($inserts, $rows, "that transaction has $rows INSERT messages");

# ... and they carry every value once: 'I', relid, 'N', natts=1, 't',
# len, text => the value starts at byte 14.
my $vals = $node->safe_psql(
	'postgres', qq{
SELECT count(DISTINCT v), min(v), max(v)
FROM (SELECT convert_from(substring(data FROM 14), 'UTF8')::int AS v
      FROM changestream.wal_records('$gen')
      WHERE get_byte(data, 0) = 73) s});
is($vals, "$rows|1|$rows", "the INSERTs carry the values 1..$rows, each once");

# Sanity of the framing: BEGIN and COMMIT pair up.
my $bc = $node->safe_psql('postgres',
	"SELECT count(*) FILTER (WHERE get_byte(data,0) = 66) = count(*) FILTER (WHERE get_byte(data,0) = 67) FROM changestream.wal_records('$gen')"
);
is($bc, 't', 'as many BEGINs as COMMITs');

my @segs = cs_wal_segments($node, $gen);
note("segments: " . scalar(@segs) . ", bytes: " . eval { my $s = 0; $s += $_->{size} for @segs; $s });

$node->stop;
done_testing();
