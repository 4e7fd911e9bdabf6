
# Issue 8 section 1 (contract items 9-11): recovery never destroys intact,
# acknowledged transactions.
#  (a) A real torn tail -- a frame cut in the middle of its write, never
#      acknowledged -- is still cut back at start, the generation continues
#      and equals the oracle slot.
#  (b) One bit flipped in a frame in the middle of the newest raw segment
#      (valid frames follow it): at start nothing is modified (sha256 of
#      every archive file before and after), the archiver goes to state
#      'error' naming the file and the offset, logs it once with a hint,
#      and does not open a generation on its own.  new_generation() is
#      accepted in that state and recovers into a new generation that
#      equals the oracle from its start; the damaged generation is left as
#      it was.
use strict;
use warnings;

use Digest::SHA;
use File::Basename;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;
use ArchiveDamage;

my $node = ad_new_archive('recovery', conf => "changestream.status_interval = '200ms'\n");
my $gen  = ad_newest_generation($node);
my $gens_dir = cs_archive_dir($node) . '/generations';

# ---------------------------------------------------------------- (a)
{
	$node->stop;
	my $seg = ad_newest_raw($node, $gen);
	my $sha_orig = Digest::SHA::sha256_hex(ad_load($seg));
	my ($orig, $torn) = ad_append_torn_frame($seg);
	my $d = ad_decode(ad_gen_dir($node, $gen));
	is($d->{rc}, 0, 'cs_decode.py: a torn last frame of the newest raw segment is legal')
	  or diag($d->{err});
	like($d->{out}, qr/torn tail: \Q${\basename($seg)}\E at offset $orig/,
		'cs_decode.py reports the torn tail at its offset');
	my $off = cs_log_offset($node);
	# the resumed segment may be close to segment_size: a larger size keeps
	# the archiver from sealing (and the compressor from replacing) it
	# before it is read back below
	$node->append_conf('postgresql.conf', "changestream.segment_size = '1MB'\n");
	$node->start;
	cs_wait_state($node, 'streaming', name => 'torn tail: streaming after start');
	# cut back to the $orig bytes it had (the archiver may have appended
	# complete frames since): those bytes unchanged, and every byte after
	# them valid frames
	my $now = ad_load($seg);
	is(Digest::SHA::sha256_hex(substr($now, 0, $orig)), $sha_orig,
		"torn tail cut: the first $orig bytes are unchanged");
	is(ad_parse_segment($now)->{end}, length($now),
		'torn tail cut: nothing of the torn frame is left (the file is valid frames to its end)');
	is(ad_gens_count($node), 1, 'torn tail: still one generation');
	like(cs_log_since($node, $off), qr/kept $orig of $torn bytes/i,
		'the log says how much was kept');
	$node->append_conf('postgresql.conf', "changestream.segment_size = '64kB'\n");
	$node->reload;
	cs_pgbench($node, 'postgres', '-c', '2', '-t', '100', '-n');
	my $target = cs_wait_archived($node, name => 'after the torn tail');
	my ($g, $start) = cs_single_generation($node, 'after the torn tail');
	cs_compare_with_oracle($node, gen => $g, start_lsn => $start,
		target => $target, name => 'torn tail: oracle', min_txns => 700);
}

# ---------------------------------------------------------------- (b)
ad_small_txns($node, 8);
cs_wait_archived($node, name => 'before the bit flip');
my $nf = ad_ensure_frames($node, $gen, 5);
cmp_ok($nf, '>=', 5, 'the newest raw segment has several frames');
# the slot must have confirmed everything archived, so nothing can be refetched
my $fence = cs_fence($node);
cs_poll_or_diag($node, 'postgres',
	"SELECT confirmed_flush_lsn >= '$fence' FROM pg_replication_slots WHERE slot_name = 'changestream'",
	't', 60, 'the slot confirmed the archived transactions');
$node->stop;

my $seg = ad_newest_raw($node, $gen);
my $nframes = scalar @{ ad_parse_segment(ad_load($seg))->{frames} };
my $k = int($nframes / 2);
my ($foff) = ad_flip_in_frame($seg, $k);
note("flipped a bit in frame $k of $nframes at offset $foff of $seg");
my $segname = basename($seg);

my $d = ad_decode(ad_gen_dir($node, $gen));
is($d->{rc}, 1, 'cs_decode.py: a bad frame followed by valid frames is damage (exit 1)');
like($d->{err}, qr/\Q$segname\E: offset $foff: /, 'cs_decode.py names the file and offset')
  or diag($d->{err});

my $before = ad_sha256_tree($gens_dir);
my $ngens  = ad_gens_count($node);
my $off    = cs_log_offset($node);
$node->start;
cs_wait_state($node, 'error', timeout => 30, name => 'bit flip: archiver goes to state error');
my $st = cs_status($node);
like($st->{last_error} // '', qr/\Q$segname\E/, 'last_error names the segment file')
  or diag("last_error: " . ($st->{last_error} // 'NULL'));
like($st->{last_error} // '', qr/offset $foff\b/, "last_error names the offset $foff");
cs_sleep(4);    # the archiver retries with backoff meanwhile
is(cs_status($node)->{state}, 'error', 'still in state error after retries');
is_deeply(ad_sha256_tree($gens_dir), $before,
	'every archive file is byte-identical after the start (sha256)');
is(ad_gens_count($node), $ngens, 'no generation opened on its own');
my $log = cs_log_since($node, $off);
my @lines = grep { /offset $foff\b/ && /(ERROR|WARNING|LOG):/ } split /\n/, $log;
is(scalar(@lines), 1, 'the damage is logged once') or diag(join("\n", @lines));
like($log, qr/offset $foff\b[^\n]*\n(?:[^\n]*\n){0,3}?[^\n]*HINT:/, 'with a hint');
unlike($log, qr/resends/, 'the log does not claim the server resends anything');

# new_generation() is accepted in state error
my $r = ad_sql($node, 'SELECT changestream.new_generation()', timeout => 120);
ok($r->{ok}, 'new_generation() is accepted in state error')
  or diag($r->{err});
is(ad_gens_count($node), $ngens + 1, 'new_generation() opened one new generation');
cs_wait_state($node, 'streaming', name => 'streaming in the new generation');
my $new = ad_newest_generation($node);
isnt($new, $gen, 'the newest generation is the new one');
cs_pgbench($node, 'postgres', '-c', '2', '-t', '100', '-n');
my $target = cs_wait_archived($node, name => 'after new_generation()');
my ($ng, $nstart) = @{ (cs_generations($node))[-1] };
cs_compare_with_oracle($node, gen => $ng, start_lsn => $nstart,
	target => $target, name => 'new generation: oracle', min_txns => 200);

my $after = ad_sha256_tree($gens_dir);
my @changed = grep { m{^/$gen/} && ($after->{$_} // '') ne $before->{$_} } keys %$before;
is(scalar(@changed), 0, 'the damaged generation is left as it was') or diag("@changed");

$node->stop;
done_testing();
