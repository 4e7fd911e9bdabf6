
# Issue 8 section 4 (contract items 4, 6, 7): lengths and identity files
# from disk are not trusted.  Copies of a real generation with:
#   - a frame length of 0x3FFFFFFF, and of 0x40000000, in a middle frame of
#     the newest raw segment, and 0x40000000 in a sealed segment: XX001
#     (never 54000 out of memory) from wal_records(), wal_segments() and
#     generation_stats(); cs_decode.py exits 1;
#   - an empty identity file, and one with a garbage created_at:
#     generations() still lists every generation, with a damage column
#     that is non-NULL for these (naming created_at for the second) and NULL
#     for the sound ones; generation_stats() returns the same row;
#   - an unreadable snapshots/ directory (mode 000), and a regular file in
#     place of snapshots/: snapshots() raises an error, never 0 rows.
use strict;
use warnings;

use File::Basename;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;
use ArchiveDamage;

my $node = ad_new_archive('lengths');
my $gen  = ad_newest_generation($node);
$node->stop;

my %copy;
sub mk
{
	my ($key, $name) = @_;
	$copy{$key} = $name;
	return ad_copy_generation($node, $gen, $name);
}

my %len_case;
for my $c ([ 'raw 0x3FFFFFFF', '0000000000f00001', 0x3FFFFFFF, 'raw' ],
	[ 'raw 0x40000000', '0000000000f00002', 0x40000000, 'raw' ],
	[ 'sealed 0x40000000', '0000000000f00003', 0x40000000, 'gz' ])
{
	my ($label, $name, $len, $where) = @$c;
	mk($label, $name);
	my @s = ad_segments($node, $name);
	my $seg = $where eq 'raw' ? $s[-1] : $s[1];
	die "segment 1 is not sealed" if $where eq 'gz' && !$seg->{gz};
	my $nf = scalar @{ ad_parse_segment(ad_load($seg->{path}))->{frames} };
	die "only $nf frames in $seg->{path}" if $nf < 3;
	my $off = ad_set_frame_length($seg->{path}, 1, $len);
	$len_case{$label} = [ $name, basename($seg->{path}), $off ];
}

my $d1 = mk('empty identity', '0000000000f00011');
ad_store("$d1/generation", '');
my $d2 = mk('garbage created_at', '0000000000f00012');
my $t = ad_load("$d2/generation");
$t =~ s/^created_at = .*$/created_at = the day before yesterday/m or die;
ad_store("$d2/generation", $t);
my $d3 = mk('unreadable snapshots', '0000000000f00021');
my $d4 = mk('snapshots is a file', '0000000000f00022');
system('rm', '-rf', "$d4/snapshots") == 0 or die;
ad_store("$d4/snapshots", "not a directory\n");

$node->start;
cs_wait_state($node, 'streaming', name => 'streaming with the damaged copies beside');
chmod 0000, "$d3/snapshots" or die "chmod: $!";

# ---------------------------------------------------------------- lengths
for my $label (sort keys %len_case)
{
	my ($name, $file, $off) = @{ $len_case{$label} };
	# wal_segments() reads the frames of the newest raw segment only (the
	# end of a sealed segment is the next one's start_lsn)
	my @q = ("count(*) FROM changestream.wal_records('$name')");
	push @q, "count(*) FROM changestream.wal_segments('$name')" if $label =~ /^raw/;
	for my $q (@q)
	{
		my ($fn) = $q =~ /changestream\.(\w+)/;
		my $r = ad_sql($node, "SELECT $q;", timeout => 20);
		is($r->{sqlstate} // ($r->{ok} ? 'no error' : 'none'), 'XX001',
			"length $label: $fn() raises XX001") or diag($r->{err});
		like($r->{err}, qr/\Q$file\E.*offset $off\b|offset $off\b.*\Q$file\E/s,
			"length $label: $fn() names $file and offset $off");
	}
	# generation_stats() returns the generations() row (contract item 6):
	# the damage column names the file, or it raises XX001 naming it
	my $r = ad_sql($node,
		"SELECT generation, damage FROM changestream.generation_stats('$name');", timeout => 20);
	ok(($r->{ok} && $r->{out} =~ /^\Q$name\E\|.*\Q$file\E/)
		  || (($r->{sqlstate} // '') eq 'XX001' && $r->{err} =~ /\Q$file\E/),
		"length $label: generation_stats() reports the damage of $file (damage column or XX001)")
	  or diag("out: $r->{out}\nerr: $r->{err}");
	unlike($r->{err}, qr/54000|out of memory/, "length $label: generation_stats() without 54000");
	my $d = ad_decode(ad_gen_dir($node, $name));
	is($d->{rc}, 1, "length $label: cs_decode.py exits 1");
	like($d->{err}, qr/\Q$file\E: offset $off: /, "length $label: cs_decode.py names file and offset")
	  or diag($d->{err});
}

# ---------------------------------------------------------------- identity
{
	my $r = ad_sql($node,
		"SELECT generation, coalesce(damage, '<null>') FROM changestream.generations() ORDER BY 1;");
	ok($r->{ok}, 'generations() succeeds with damaged identity files beside') or diag($r->{err});
	my %dmg = map { split /\|/, $_, 2 } grep { /\|/ } split /\n/, $r->{out};
	ok(exists $dmg{$_}, "generations() lists $_") for ($gen, values %copy);
	is($dmg{$gen} // '', '<null>', 'damage is NULL for the real generation');
	isnt($dmg{ $copy{'empty identity'} } // '<null>', '<null>',
		'damage is set for the generation with an empty identity file');
	like($dmg{ $copy{'garbage created_at'} } // '', qr/created_at/,
		'damage names created_at for the garbage created_at');
	for my $k ('empty identity', 'garbage created_at')
	{
		my $s = ad_sql($node,
			"SELECT generation, coalesce(damage, '<null>') FROM changestream.generation_stats('$copy{$k}');");
		ok($s->{ok} && $s->{out} =~ /^\Q$copy{$k}\E\|(.+)$/ && $1 ne '<null>',
			"generation_stats() returns the row of the $k generation with its damage")
		  or diag("$s->{out}\n$s->{err}");
		unlike($s->{err}, qr/22007/, "$k: no 22007");
	}
	for my $k ('empty identity', 'garbage created_at')
	{
		my $d = ad_decode(ad_gen_dir($node, $copy{$k}));
		is($d->{rc}, 1, "cs_decode.py: $k is damage");
		like($d->{err}, qr{\Q$copy{$k}\E/generation: offset 0: }, "cs_decode.py names the identity file of $k")
		  or diag($d->{err});
	}
}

# ---------------------------------------------------------------- snapshots/
for my $k ('unreadable snapshots', 'snapshots is a file')
{
	my $r = ad_sql($node, "SELECT count(*) FROM changestream.snapshots('$copy{$k}');");
	ok(!$r->{ok}, "snapshots() on $k: an error, not rows") or diag("rows: $r->{out}");
	like($r->{sqlstate} // 'none', qr/^(42501|42809|58P01|58030|XX001)$/, "snapshots() on $k: file access or data corrupted SQLSTATE")
	  or diag($r->{err});
	like($r->{err}, qr/snapshots/, "snapshots() on $k: names the directory");
}

# An unreadable snapshots/ in an older generation concerns readers of that
# generation only: the archiver, which writes the newest one, still starts.
$node->restart;
cs_wait_state($node, 'streaming', timeout => 30,
	name => 'the archiver starts with an unreadable snapshots/ in an older generation');
chmod 0700, "$d3/snapshots";

$node->stop;
done_testing();
