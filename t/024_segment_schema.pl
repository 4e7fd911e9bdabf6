
# The per-segment schema (issue 9, item 6): with 1,000 published tables
# each touched once and segment_size = '64kB', then 200 one-row
# transactions, segments are sealed by the size of their data, not by
# Relation messages repeated in every segment (which made 202 segments of
# 118 kB, one per transaction).  Each segment carries the Relation message
# of every relation it uses before its first use, and decodes on its own:
# scripts/cs_decode.py (written from FORMAT.md alone) checks that for every
# change, segment by segment; the archive matches the oracle slot.
use strict;
use warnings;

use File::Basename;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;

my $TABLES = 1000;
my $node = cs_new_node('schema', conf => qq(
changestream.segment_size = '64kB'
max_locks_per_transaction = 256
));
$node->start;
my $dir = cs_archive_dir($node);
my $decoder = dirname(__FILE__) . '/../scripts/cs_decode.py';

$node->safe_psql('postgres', qq{
CREATE EXTENSION changestream;
DO \$\$
BEGIN
	FOR i IN 1..$TABLES LOOP
		EXECUTE format('CREATE TABLE t%s (id int PRIMARY KEY, v text)', i);
	END LOOP;
END \$\$;
CREATE PUBLICATION changestream FOR ALL TABLES;
});
cs_create_oracle_slot($node);
cs_start_archiving($node);
my ($gen, $start_lsn) = cs_single_generation($node, 'first start');

# Each table touched once, one transaction each; then 200 one-row
# transactions on one table.
$node->safe_psql('postgres', qq{
DO \$\$
BEGIN
	FOR i IN 1..$TABLES LOOP
		EXECUTE format('INSERT INTO t%s VALUES (1, ''first'')', i);
		COMMIT;
	END LOOP;
	FOR i IN 2..201 LOOP
		INSERT INTO t1 VALUES (i, 'one row');
		COMMIT;
	END LOOP;
END \$\$;
});
my $target = cs_wait_archived($node, name => 'after the load');

my @segs = cs_wal_segments($node, $gen);
my $n = scalar(@segs);
note("segments: $n");
cmp_ok($n, '>=', 2, "the data needed more than one segment ($n)");
cmp_ok($n, '<=', 12, "few segments, not one per transaction ($n)");

# The uncompressed size of each sealed segment: its data stops at one
# transaction past 64 kB, and repeated schema does not inflate it.
my @sizes;
for my $s (@segs[ 0 .. $#segs - 1 ])
{
	my $path = "$dir/generations/$gen/wal/$s->{file}";
	my $bytes = $s->{compressed} eq 't'
	  ? length(scalar `gzip -dc '$path'`)
	  : -s $path;
	push @sizes, $bytes;
}
note("uncompressed sizes of the sealed segments: @sizes");
my $max = (sort { $b <=> $a } @sizes)[0] // 0;
cmp_ok($max, '<=', 80 * 1024, "every sealed segment is near 64 kB ($max bytes at most)");
my $min = (sort { $a <=> $b } @sizes)[0] // 0;
cmp_ok($min, '>=', 60 * 1024, "and none is sealed early ($min bytes at least)");

# Each segment decodes on its own: cs_decode.py checks every change's
# Relation message is earlier in the same segment (preamble or streamed).
my ($out, $err) = ('', '');
my $ok = IPC::Run::run([ 'python3', $decoder, '--summary', "$dir/generations/$gen" ],
	'>', \$out, '2>', \$err);
ok($ok, 'cs_decode.py validates the generation') or diag("$err\n" . substr($out, 0, 2000));
like($out, qr/all CRCs and messages valid/, 'cs_decode.py: all valid');
unlike($out . $err, qr/has no Relation message before it/,
	'every change has its Relation message earlier in its segment');

# Segments after the first hold the Relation message of t1 as a preamble
# entry (it was streamed only once, in segment 0).
my ($out1, $err1) = ('', '');
IPC::Run::run([ 'python3', $decoder, "$dir/generations/$gen/wal/$segs[-1]{file}" ],
	'>', \$out1, '2>', \$err1);
like($out1, qr/preamble.*\bR\b.*public.*\bt1\b|preamble.*t1/,
	'the newest segment carries t1\'s Relation message as a preamble entry')
  or diag(substr($out1, 0, 1500));
my $preambles = () = $out1 =~ /preamble/g;
cmp_ok($preambles, '<=', 5, "and only what it uses ($preambles preamble lines)");

cs_compare_with_oracle(
	$node,
	gen       => $gen,
	start_lsn => $start_lsn,
	target    => $target,
	name      => 'oracle',
	min_txns  => $TABLES + 200);

# After a restart the newest segment is continued: a change in it of a
# relation it does not hold yet still gets its Relation message first.
$node->restart;
cs_wait_state($node, 'streaming', name => 'streaming after restart');
$node->safe_psql('postgres', "INSERT INTO t500 VALUES (2, 'after restart')");
cs_wait_archived($node, name => 'after the restart');
($out, $err) = ('', '');
$ok = IPC::Run::run([ 'python3', $decoder, '--summary', "$dir/generations/$gen" ],
	'>', \$out, '2>', \$err);
ok($ok, 'cs_decode.py validates the generation after a restart')
  or diag("$err\n" . substr($out, 0, 2000));

$node->stop;
done_testing();
