
# Preallocated segments (issue 13, TPS): the compressor zero-fills a spare
# segment (changestream.directory/spare.wal) and the archiver renames it in
# as its next segment, so each group commit's fdatasync overwrites blocks
# instead of growing the file (src/archive/segment_spare.c, docs/FORMAT.md
# section 11.3, "preallocated tail").
#
# (a) The spare appears, segment_size bytes, all zero.
# (b) Under pgbench, with a second session reading wal_records() and
#     verify() of the active generation all the while: never an error (a
#     reader that meets the zeros while the archiver writes over them must
#     not call it damage); the archive matches the oracle slot; the newest
#     raw segment is preallocated and cs_decode.py reports its zero tail;
#     sealed segments carry no zeros (cs_decode.py and verify()).
# (c) A crash with a preallocated tail: the restart cuts it, nothing is
#     lost (oracle).  (c2) A bad frame with a valid frame after it above
#     confirmed_flush_lsn (frames of a power loss that reached the disk out
#     of order): recovery cuts from the bad frame, nothing is lost.
# (d) What a reader makes of zeros in the newest raw segment of a fixed
#     generation (t/fuzz_source): zeros to the end are the clean end; zeros
#     then a valid frame are damage (XX001 at the first zero byte); zeros
#     then a few bytes that are no frame are a torn tail.
# (e) A spare that is a symbolic link or a hard link is never written
#     through; the compressor replaces it.
# (f) preallocate_segments = off removes the spare and segments grow as
#     before; on again brings it back; a change of segment_size makes the
#     spare again at the new size.
# (g) A directory under the spare's name (or its part's) is left alone:
#     one WARNING, no compression error, segments created empty; once it is
#     gone the spare comes back.
# (h) A change of changestream.directory removes the spare the compressor
#     made in the former directory.
#
# Load sizes (issue 32: the fixed pgbench loads were 22,800 of the file's
# 25,400 archived transactions, archived, compressed, decoded and compared
# with the oracle; now 12,800):
# a pgbench tpcb-like transaction takes about 290 bytes of the archive, so
# a 256 kB segment holds about 900 of them.  Each load is sized to the
# rotations its point needs, with margin: (e) 1,500 transactions (1.7
# segments: the archiver takes at least one segment while the link is
# there, and the compressor is woken by the seal); (g) 3,000 (3.4 segments
# for the 2 rotations it asserts); (f) off 2,000 (2.2 segments: the newest
# segment is one made without a spare); (f) at 128 kB 1,000 (2.2 segments
# of the new size).
use strict;
use warnings;

use File::Copy;
use File::Path qw(rmtree);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use ChangestreamTest;
use ArchiveDamage;

my $seg_kb = 256;
my $spare_bytes = $seg_kb * 1024;
my $node = cs_setup('prealloc',
	conf => "changestream.segment_size = '${seg_kb}kB'\n",
	pgbench => 1,
	publish_pgbench => 1,
	oracle => 1,
	archive => 1);
my $dir = cs_archive_dir($node);
my $spare = "$dir/spare.wal";
my $script_dir = -d 'scripts' ? 'scripts' : "$ENV{TESTDIR}/scripts";
my $fixture_dir = -d 't/fuzz_source' ? 't/fuzz_source' : "$ENV{TESTDIR}/t/fuzz_source";
my ($gen, $start_lsn) = cs_single_generation($node, 'first start');
my $wal_dir = "$dir/generations/$gen/wal";

sub all_zero
{
	my ($path) = @_;
	my $b = ad_load($path);
	return length($b) > 0 && $b !~ /[^\0]/;
}

sub decode
{
	my ($path) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'python3', "$script_dir/cs_decode.py", '--summary', $path ],
		'>', \$out, '2>', \$err);
	return ($? >> 8, $out, $err);
}

sub newest_raw
{
	opendir(my $dh, $wal_dir) or die "opendir $wal_dir: $!";
	my @raw = sort grep { /^[0-9a-f]{16}\.wal$/ } readdir($dh);
	closedir($dh);
	return "$wal_dir/$raw[-1]";
}

############################################################################
# (a) the spare

my $t0 = time;
usleep(100_000) until (-f $spare && -s $spare == $spare_bytes) || time - $t0 > 60;
is(-s $spare, $spare_bytes, "(a) spare.wal appears with segment_size bytes");
ok(all_zero($spare), '(a) every byte of the spare is zero');

############################################################################
# (b) load with a reader beside it

my $bench = cs_pgbench_bg($node, 'postgres', '-c', '4', '-j', '2', '-T', '8',
	'-n', '-b', 'tpcb-like');
my ($reads, @read_errors) = (0);
my $until = time + 7;
while (time < $until)
{
	my ($rc, $out, $err) = $node->psql('postgres',
		"SELECT count(*) FROM changestream.wal_records('$gen'); "
		  . "SELECT count(*) FROM changestream.verify('$gen');");
	$reads++;
	push @read_errors, $err if $rc != 0 || $out !~ /^\d+\n0$/;
}
my ($bench_ok, $bench_out, $bench_err) = cs_pgbench_finish($bench);
ok($bench_ok, '(b) pgbench ran') or diag($bench_err);
is(scalar(@read_errors), 0,
	"(b) $reads reads of wal_records() and verify() beside the archiver: no error, no problem")
  or diag(join("\n", @read_errors[ 0 .. ($#read_errors < 4 ? $#read_errors : 4) ]));

my $target = cs_wait_archived($node, name => '(b)');
cs_compare_with_oracle($node, gen => $gen, start_lsn => $start_lsn,
	target => $target, name => '(b) oracle', min_txns => 100);

# the compressor works beside the archiver and holds back while it catches
# up (at most 4 sealed segments raw): under the load of other test files it
# may not have compressed the last seals yet, so wait for it (60 s)
cs_poll($node, 'postgres',
	"SELECT count(*) >= 2 FROM changestream.wal_segments('$gen') WHERE compressed", 't', 60);
my $seals = $node->safe_psql('postgres',
	"SELECT count(*) FROM changestream.wal_segments('$gen') WHERE compressed");
cmp_ok($seals, '>=', 2, '(b) segments were sealed and compressed')
  or diag("status(): "
	  . $node->safe_psql('postgres',
		"SELECT row_to_json(s) FROM changestream.status() s")
	  . "\nserver WAL flushed to "
	  . $node->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()')
	  . "\nsegments:\n"
	  . $node->safe_psql('postgres',
		"SELECT segment_index, start_lsn, end_lsn, compressed FROM changestream.wal_segments('$gen')"));
my $newest = newest_raw();
my ($rc, $out, $err) = decode("$dir/generations/$gen");
is($rc, 0, '(b) cs_decode.py reads the generation without a problem') or diag($err);
if (-s $newest > $spare_bytes - 1)
{
	my $newest_name = (split m{/}, $newest)[-1];
	like($out, qr/preallocated tail: \Q$newest_name\E: \d+ zero bytes/,
		'(b) the newest raw segment is preallocated, and cs_decode.py says so');
}
else
{
	fail('(b) the newest raw segment is preallocated (size ' . (-s $newest) . ')');
}
unlike($out, qr/torn tail/, '(b) no torn tail');
is($node->safe_psql('postgres', "SELECT count(*) FROM changestream.verify('$gen')"),
	'0', '(b) verify() finds nothing');

############################################################################
# (c) crash with a preallocated tail

my $bench2 = cs_pgbench_bg($node, 'postgres', '-c', '4', '-j', '2', '-T', '30',
	'-n', '-b', 'tpcb-like');
cs_sleep(3);
cs_crash($node);
cs_pgbench_finish($bench2);
cs_start_after_crash($node);
cs_wait_state($node, 'streaming', name => '(c) streaming after the crash');
cs_pgbench($node, 'postgres', '-c', '2', '-t', '200', '-n', '-b', 'tpcb-like');
$target = cs_wait_archived($node, name => '(c)');
my ($gen_c) = cs_single_generation($node, '(c)');
is($gen_c, $gen, '(c) still the first generation');
cs_compare_with_oracle($node, gen => $gen, start_lsn => $start_lsn,
	target => $target, name => '(c) oracle after the crash', min_txns => 100);
($rc, $out, $err) = decode("$dir/generations/$gen");
is($rc, 0, '(c) cs_decode.py: no problem after the crash') or diag($err);

############################################################################
# (c2) after a power loss, frames written since the last fdatasync may have
# reached the disk in any order: one still zeros, a later one complete.
# Above confirmed_flush_lsn, recovery cuts from the first bad frame (the
# server sends it all again) when a whole page of zeros lies before the next
# valid frame (a page that never reached the disk); a bit flip is still
# damage (t/013).  Made here by writing 12 kB of zeros then a copy of the
# last frame where the data ends, with the server down.

cs_crash($node);
my $seg_c2 = newest_raw();
my $buf_c2 = ad_load($seg_c2);
my $parsed_c2 = ad_parse_segment($buf_c2);
my $end_c2 = $parsed_c2->{end};
my $lastf = $parsed_c2->{frames}[-1];
my $planted = ("\0" x 12288) . substr($buf_c2, $lastf->{offset}, 12 + $lastf->{length});
substr($buf_c2, $end_c2, length($planted), $planted);
ad_store($seg_c2, $buf_c2);
my $log_c2 = cs_log_offset($node);
cs_start_after_crash($node);
cs_wait_state($node, 'streaming', name => '(c2) streaming after a bad frame with a valid frame after it, above confirmed_flush');
like(cs_log_since($node, $log_c2), qr/cut changestream segment .* back to its last complete transaction/,
	'(c2) recovery cut the unsynced frames, and the log says so');
cs_pgbench($node, 'postgres', '-c', '2', '-t', '200', '-n', '-b', 'tpcb-like');
$target = cs_wait_archived($node, name => '(c2)');
is((cs_single_generation($node, '(c2)'))[0], $gen, '(c2) still the first generation');
cs_compare_with_oracle($node, gen => $gen, start_lsn => $start_lsn,
	target => $target, name => '(c2) oracle after the cut', min_txns => 100);

############################################################################
# (d) zeros in the newest raw segment of a fixed generation

my $fx_name = '0003049627ffa64c';
my $fx_seg = "$dir/generations/$fx_name/wal/0000000000000001.wal";
sub put_fixture
{
	rmtree("$dir/generations/$fx_name");
	system('cp', '-a', "$fixture_dir/$fx_name", "$dir/generations/") == 0
	  or die "cp fixture";
	chmod 0600, $fx_seg;
	return;
}
put_fixture();
my $clean = ad_load($fx_seg);
my $parsed = ad_parse_segment($clean);
is($parsed->{end}, length($clean), '(d) the fixture segment ends at a frame boundary');
my $records = $node->safe_psql('postgres',
	"SELECT count(*) FROM changestream.wal_records('$fx_name')");
cmp_ok($records, '>', 0, "(d) the fixture holds $records records");
my $last = $parsed->{frames}[-1];
my $last_frame = substr($clean, $last->{offset}, 12 + $last->{length});

my %cases = (
	'zeros to the end' => [ $clean . ("\0" x 65536), 'clean' ],
	'zeros then a valid frame' => [ $clean . ("\0" x 8192) . $last_frame, 'damage' ],
	'zeros then bytes that are no frame' => [ $clean . ("\0" x 8192) . "junk!", 'torn' ],
);
for my $name (sort keys %cases)
{
	my ($bytes, $want) = @{ $cases{$name} };
	put_fixture();
	ad_store($fx_seg, $bytes);
	my ($qrc, $qout, $qerr) = $node->psql('postgres',
		"SELECT count(*) FROM changestream.wal_records('$fx_name')");
	my $vrows = $node->safe_psql('postgres',
		"SELECT byte_offset FROM changestream.verify('$fx_name')");
	my ($drc, $dout, $derr) = decode("$dir/generations/$fx_name");
	if ($want eq 'damage')
	{
		like($qerr, qr/is damaged at offset @{[ length($clean) ]}/,
			"(d) $name: wal_records() reports damage at the first zero byte");
		is($vrows, length($clean), "(d) $name: verify() names the same offset");
		is($drc, 1, "(d) $name: cs_decode.py reports damage") or diag($dout . $derr);
	}
	else
	{
		is($qout, $records, "(d) $name: wal_records() returns every record")
		  or diag($qerr);
		is($vrows, '', "(d) $name: verify() finds nothing");
		is($drc, 0, "(d) $name: cs_decode.py accepts it") or diag($derr);
		like($dout, $want eq 'clean' ? qr/preallocated tail/ : qr/torn tail/,
			"(d) $name: cs_decode.py calls it a " . ($want eq 'clean' ? 'preallocated tail' : 'torn tail'));
	}
}
rmtree("$dir/generations/$fx_name");

############################################################################
# (e) a spare that is a link

my $victim = $node->basedir . '/victim';
my $victim2 = $node->basedir . '/victim2';
for my $v ($victim, $victim2)
{
	open(my $fh, '>', $v) or die;
	print $fh "not changestream's\n" x 100;
	close $fh;
}
my $victim_before = ad_load($victim);
usleep(100_000) until -f $spare;
unlink($spare);
symlink($victim, $spare) or die "symlink: $!";
my $victim_stat_before = join(',', (stat($victim))[ 7, 9 ]);
cs_pgbench($node, 'postgres', '-c', '2', '-t', '750', '-n', '-b', 'tpcb-like');
cs_wait_archived($node, name => '(e) symlink');
$t0 = time;
usleep(100_000) until (!-l $spare && -f $spare) || time - $t0 > 60;
ok(!-l $spare && -f $spare, '(e) the compressor replaced the symbolic link by a spare of its own');
is(ad_load($victim), $victim_before, '(e) the symbolic link\'s target is untouched');

unlink($spare);
link($victim2, $spare) or die "link: $!";
cs_pgbench($node, 'postgres', '-c', '2', '-t', '750', '-n', '-b', 'tpcb-like');
cs_wait_archived($node, name => '(e) hard link');
$t0 = time;
usleep(100_000) until ((stat($spare))[3] // 0) == 1 || time - $t0 > 60;
is((stat($spare))[3], 1, '(e) the compressor replaced the hard link by a spare of its own');
is(ad_load($victim2), $victim_before, '(e) the hard link\'s other name is untouched');
is($node->safe_psql('postgres', "SELECT count(*) FROM changestream.verify('$gen')"),
	'0', '(e) verify() finds nothing');

############################################################################
# (g) a directory under the spare's name, then under the part's

for my $name ($spare, "$spare.part")
{
	my $what = $name eq $spare ? 'spare.wal' : 'spare.wal.part';
	usleep(100_000) until -f $spare;
	unlink($spare);
	mkdir($name) or die "mkdir $name: $!";
	my $log_off = cs_log_offset($node);
	my $seg_before = $node->safe_psql('postgres', 'SELECT segment_index FROM changestream.status()');
	cs_pgbench($node, 'postgres', '-c', '2', '-t', '1500', '-n', '-b', 'tpcb-like');
	cs_wait_archived($node, name => "(g) $what a directory");
	cmp_ok($node->safe_psql('postgres', 'SELECT segment_index FROM changestream.status()'),
		'>=', $seg_before + 2, "(g) $what a directory: segments rotate under load");
	cs_poll_or_diag($node, 'postgres',
		'SELECT raw_sealed_segments = 0 FROM changestream.status()',
		't', 60, "(g) $what a directory: every sealed segment is compressed");
	ok(-d $name, "(g) $what: the directory is left alone");
	ok(!-e $spare || -d $spare, "(g) $what: no spare is made meanwhile");
	my $log = cs_log_since($node, $log_off);
	my @warnings = ($log =~ /WARNING:  "\Q$name\E" is a directory: changestream segments are not preallocated/g);
	is(scalar(@warnings), 1, "(g) $what a directory: one WARNING, not one per attempt")
	  or diag($log);
	unlike($log, qr/ERROR:.*spare/, "(g) $what a directory: no compressor error");
	is($node->safe_psql('postgres', 'SELECT last_compress_error IS NULL FROM changestream.status()'),
		't', "(g) $what a directory: status() shows no compression error");
	rmdir($name) or die "rmdir $name: $!";
	$t0 = time;
	usleep(100_000) until (-f $spare && -s $spare == $spare_bytes) || time - $t0 > 60;
	is(-s $spare, $spare_bytes, "(g) $what: the directory gone, the spare is back");
}
is($node->safe_psql('postgres', "SELECT count(*) FROM changestream.verify('$gen')"),
	'0', '(g) verify() finds nothing');

############################################################################
# (f) off, then on again

$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.preallocate_segments = off; SELECT pg_reload_conf();");
$t0 = time;
usleep(100_000) while -e $spare && time - $t0 < 60;
ok(!-e $spare, '(f) off: the spare is removed');
cs_pgbench($node, 'postgres', '-c', '2', '-t', '1000', '-n', '-b', 'tpcb-like');
$target = cs_wait_archived($node, name => '(f) off');
($rc, $out, $err) = decode("$dir/generations/$gen");
is($rc, 0, '(f) off: cs_decode.py: no problem') or diag($err);
unlike($out, qr/preallocated tail/, '(f) off: the newest segment has no preallocated tail');
ok(!-e $spare, '(f) off: no spare made under load');
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET changestream.preallocate_segments; SELECT pg_reload_conf();");
$t0 = time;
usleep(100_000) until (-f $spare && -s $spare == $spare_bytes) || time - $t0 > 60;
is(-s $spare, $spare_bytes, '(f) on again: the spare is back');
$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.segment_size = '128kB'; SELECT pg_reload_conf();");
$t0 = time;
usleep(100_000) until (-f $spare && -s $spare == 128 * 1024) || time - $t0 > 60;
is(-s $spare, 128 * 1024, '(f) segment_size changed: the spare is made again at the new size');
cs_pgbench($node, 'postgres', '-c', '2', '-t', '500', '-n', '-b', 'tpcb-like');
$node->safe_psql('postgres',
	"ALTER SYSTEM RESET changestream.segment_size; SELECT pg_reload_conf();");
cs_compare_with_oracle($node, gen => $gen, start_lsn => $start_lsn,
	target => $target, name => '(f) oracle at the end', min_txns => 1000);

############################################################################
# (h) a change of directory: the former one's spare is removed

$t0 = time;
usleep(100_000) until (-f $spare && -s $spare == $spare_bytes) || time - $t0 > 60;
ok(-f $spare, '(h) the spare is there before the change');
my $dir2 = $node->basedir . '/archive2';
$node->safe_psql('postgres',
	"ALTER SYSTEM SET changestream.directory = '$dir2'; SELECT pg_reload_conf();");
cs_wait_state($node, 'streaming', name => '(h) streaming into the new directory');
$t0 = time;
usleep(100_000) while -e $spare && time - $t0 < 60;
ok(!-e $spare, '(h) the former directory\'s spare is removed');
$t0 = time;
usleep(100_000) until (-f "$dir2/spare.wal" && -s "$dir2/spare.wal" == $spare_bytes) || time - $t0 > 60;
is(-s "$dir2/spare.wal", $spare_bytes, '(h) the new directory gets its own spare');
ok(-d "$dir/generations/$gen", '(h) the former archive itself is untouched');

$node->stop;
done_testing();
