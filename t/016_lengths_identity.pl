
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
chmod 0000, "$d3/snapshots" or die "chmod: $!";
my $d4 = mk('snapshots is a file', '0000000000f00022');
system('rm', '-rf', "$d4/snapshots") == 0 or die;
ad_store("$d4/snapshots", "not a directory\n");

$node->start;
cs_wait_state($node, 'streaming', name => 'streaming with the copies beside');

# ---------------------------------------------------------------- lengths
for my $label (sort keys %len_case)
{
	my ($name, $file, $off) = @{ $len_case{$label} };
	# wal_records() reads every frame; wal_segments() and generation_stats()
	# read headers and scan only the newest segment (the generation's end),
	# so they see a bad length there (verify() reads everything).
	my $in_newest = $label =~ /^raw/;
	my @q = ("count(*) FROM changestream.wal_records('$name')");
	push @q, "count(*) FROM changestream.wal_segments('$name')" if $in_newest;
	for my $q (@q)
	{
		my ($fn) = $q =~ /changestream\.(\w+)/;
		my $r = ad_sql($node, "SELECT $q;", timeout => 20);
		is($r->{sqlstate} // ($r->{ok} ? 'no error' : 'none'), 'XX001',
			"length $label: $fn() raises XX001") or diag($r->{err});
		like($r->{err}, qr/\Q$file\E.*offset $off\b|offset $off\b.*\Q$file\E/s,
			"length $label: $fn() names $file and offset $off");
	}
	if ($in_newest)
	{
		my $r = ad_sql($node,
			"SELECT damage FROM changestream.generation_stats('$name');", timeout => 20);
		ok($r->{ok}, "length $label: generation_stats() returns the row") or diag($r->{err});
		like($r->{out}, qr/\Q$file\E.*offset $off\b/,
			"length $label: generation_stats() damage names $file and offset $off");
	}
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
	like($r->{sqlstate} // 'none', qr/^(42501|58P01|58030|XX001)$/, "snapshots() on $k: file access or data corrupted SQLSTATE")
	  or diag($r->{err});
	like($r->{err}, qr/snapshots/, "snapshots() on $k: names the directory");
}
chmod 0700, "$d3/snapshots";

$node->stop;
done_testing();
