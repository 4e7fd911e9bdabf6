
# SnapshotTest.pm: helpers for changestream's snapshot TAP tests
# (t/007..010).  Built on ChangestreamTest.pm, which it uses but does not
# change.
#
# - reading a snapshot file (gzip -dc): its comment header, its JSON
#   manifest, and every table's COPY text rows, decoded (\N, \t, \\, octal,
#   ...) into a canonical form keyed by the table's first column;
# - reading the archive: changestream.wal_records() decoded as pgoutput
#   proto 1 (BEGIN/COMMIT positions, INSERT/UPDATE/DELETE/TRUNCATE tuples);
# - the hand-off check: a snapshot at LSN L, plus every archived
#   transaction whose commit LSN is >= L replayed onto it, must equal the
#   table as it is at the end, with no row inserted twice (doubled at the
#   hand-off) and no row updated or deleted that is not there (lost);
# - the live table's rows in the same canonical form, read with COPY under
#   the session settings the archiver pins on its walsender connection.
#
# A canonical row is the row's fields joined by "\0" ("v<text>" for a
# value, "n" for NULL); text values never contain a NUL byte.

package SnapshotTest;

use strict;
use warnings;

use Carp;
use File::Basename qw(dirname);
use Exporter 'import';
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use ChangestreamTest ();
use ChangestreamTest;

our @EXPORT = qw(
  snap_list snap_path snap_dir_files snap_read snap_copy_fields
  snap_canon snap_canon_text snap_fetch_txns snap_relid snap_replay
  snap_id_balance snap_table_state snap_compare_states snap_verify_at
  snap_write_script snap_psql_stdin snap_lsn_hex snap_check_file
  $PINNED_SETTINGS);

# The settings the archiver pins on its walsender connection
# (src/base/pinned_settings.h): COPY output of the live table under them has the
# same text form as the snapshot's and the pgoutput stream's.
our $PINNED_SETTINGS = ChangestreamTest::cs_pinned_settings_sql();

############################################################################
# Snapshots as SQL sees them, and their files

# "16/B374D848" -> "00000016B374D848" (the file name's LSN)
sub snap_lsn_hex
{
	my ($lsn) = @_;
	my $v = cs_lsn_to_int($lsn);
	return sprintf("%08X%08X", int($v / 4294967296), $v % 4294967296);
}

# snapshots(gen) rows as hashes, in the function's order
sub snap_list
{
	my ($node, $gen, $db) = @_;
	return cs_rows($node, $db,
		"SELECT lsn, file_name, table_count, row_count, size_bytes, "
		  . "extract(epoch FROM created_at) FROM changestream.snapshots('$gen')",
		qw(lsn file tables rows size created));
}

sub snap_path
{
	my ($node, $gen, $file) = @_;
	return cs_archive_dir($node) . "/generations/$gen/snapshots/$file";
}

# every entry of generations/<gen>/snapshots (tmp files included)
sub snap_dir_files
{
	my ($node, $gen) = @_;
	my $dir = cs_archive_dir($node) . "/generations/$gen/snapshots";
	opendir(my $dh, $dir) or return ();
	my @f = sort grep { !/^\.\.?$/ } readdir($dh);
	closedir($dh);
	return @f;
}

############################################################################
# COPY text format

my %COPY_ESC = (
	b => "\b",
	f => "\f",
	n => "\n",
	r => "\r",
	t => "\t",
	v => "\x0b");

sub _copy_unescape
{
	my ($s) = @_;
	return $s if index($s, '\\') < 0;
	$s =~ s{\\(?:([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|(.))}{
		defined $1 ? chr(oct($1) & 0xff)
		: defined $2 ? chr(hex($2))
		: ($COPY_ESC{$3} // $3)
	}gse;
	return $s;
}

# one COPY text line -> [ value or undef, ... ]
sub snap_copy_fields
{
	my ($line) = @_;
	return [ map { $_ eq '\\N' ? undef : _copy_unescape($_) }
		  split /\t/, $line, -1 ];
}

# [fields] -> canonical row
sub snap_canon
{
	my ($f) = @_;
	return join("\0", map { defined $_ ? "v$_" : 'n' } @$f);
}

# canonical row -> readable text for diagnostics
sub snap_canon_text
{
	my ($c) = @_;
	return '(none)' unless defined $c;
	my @f = map { $_ eq 'n' ? 'NULL' : substr($_, 1) } split /\0/, $c, -1;
	my $s = join(' | ', @f);
	$s =~ s/([\x00-\x1f\\])/sprintf('\\x%02x', ord($1))/ge;
	return length($s) > 200 ? substr($s, 0, 200) . '...' : $s;
}

############################################################################
# Reading a snapshot file

# The snapshot format version the writer writes, from its one source,
# src/archive/snapshot_manifest.h.
our $SNAPSHOT_FORMAT_VERSION = do
{
	my $h = dirname(__FILE__) . '/../src/archive/snapshot_manifest.h';
	open(my $fh, '<', $h) or croak "open $h: $!";
	my ($v) = map { /^#define CS_SNAPSHOT_FORMAT_VERSION\s+(\d+)/ ? $1 : () } <$fh>;
	close($fh);
	croak "no CS_SNAPSHOT_FORMAT_VERSION in $h" unless defined $v;
	$v;
};

# snap_read($path, %opts) -> {
#   header   => { 'format_version' => 1, generation, lsn, snapshot_time,
#                 tables, rows, ... }  (the "-- key: value" lines)
#   first_line => the first line of the file,
#   manifest => the decoded JSON of the "-- manifest:" line,
#   order    => [ table as named in its COPY line, ... ],
#   tables   => { name => { copy => the COPY line, columns => [names],
#                 nrows => N, state => { key => canonical row },
#                 dups => [keys seen twice], lines => [raw lines] } },
#   errors   => [ structural problems ] }
# opts: keep_lines => 1 keeps each table's raw lines; no_state => 1 skips
# the keyed state (only counts rows).
sub snap_read
{
	my ($path, %opts) = @_;
	my %r = (header => {}, order => [], tables => {}, errors => []);
	my $err = $r{errors};
	open(my $fh, '-|', 'gzip', '-dc', '--', $path)
	  or croak "cannot run gzip -dc $path: $!";
	binmode $fh;
	my $state = 'header';
	my $cur;
	my $lineno = 0;
	while (my $line = <$fh>)
	{
		$lineno++;
		if (substr($line, -1) ne "\n")
		{
			push @$err, "line $lineno: no newline at the end of the file";
		}
		else
		{
			chop $line;
		}
		if ($state eq 'header')
		{
			$r{first_line} //= $line;
			if ($line eq '-- end of manifest')
			{
				$state = 'blank';
			}
			elsif ($line =~ /^-- manifest: (.*)$/)
			{
				my $m = eval { JSON::PP->new->decode($1) };
				push @$err, "line $lineno: manifest is not valid JSON: $@"
				  unless defined $m;
				$r{manifest} = $m;
			}
			elsif ($line =~ /^-- ([a-z_]+): (.*)$/)
			{
				$r{header}{$1} = $2;
			}
			elsif ($line =~ /^-- /)
			{
				$r{header_other} //= [];
				push @{ $r{header_other} }, $line;
			}
			else
			{
				push @$err, "line $lineno: not a manifest line: "
				  . substr($line, 0, 80);
			}
		}
		elsif ($state eq 'blank')
		{
			if ($line ne '')
			{
				push @$err, "line $lineno: expected a blank line, got: "
				  . substr($line, 0, 80);
			}
			$state = 'copy';
		}
		elsif ($state eq 'copy')
		{
			if ($line =~ /^COPY (.+) \((.*)\) FROM stdin;$/)
			{
				my ($name, $cols) = ($1, $2);
				push @$err, "line $lineno: table $name twice"
				  if $r{tables}{$name};
				$cur = {
					copy    => $line,
					columns => [ split /, /, $cols ],
					nrows   => 0,
					state   => {},
					dups    => [],
					lines   => []
				};
				$r{tables}{$name} = $cur;
				push @{ $r{order} }, $name;
				$state = 'rows';
			}
			else
			{
				push @$err, "line $lineno: expected a COPY line, got: "
				  . substr($line, 0, 80);
			}
		}
		elsif ($state eq 'rows')
		{
			if ($line eq '\\.')
			{
				$state = 'blank';
				next;
			}
			$cur->{nrows}++;
			push @{ $cur->{lines} }, $line if $opts{keep_lines};
			next if $opts{no_state};
			my $f = snap_copy_fields($line);
			my $key = $f->[0] // '';
			push @{ $cur->{dups} }, $key if exists $cur->{state}{$key};
			$cur->{state}{$key} = snap_canon($f);
		}
	}
	close($fh) or push @$err, "gzip -dc $path failed: exit $?";
	push @$err, "file ends inside table data (no \\.)" if $state eq 'rows';
	push @$err, "file ends inside the manifest" if $state eq 'header';
	return \%r;
}

# snap_check_file($node, $gen, $snap, $name, %opts) -> snap_read result
#   $snap: a snap_list() row.  Tests that the file is where snapshots()
#   says, named after its LSN, passes gzip -t, is well formed, and that its
#   header and manifest agree with snapshots() and with the rows it holds.
sub snap_check_file
{
	my ($node, $gen, $snap, $name, %opts) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $path = snap_path($node, $gen, $snap->{file});
	is($snap->{file}, snap_lsn_hex($snap->{lsn}) . '.snapshot.gz',
		"$name: file named after its LSN $snap->{lsn}");
	ok(-f $path, "$name: file exists") or return undef;
	is($snap->{size}, -s $path, "$name: snapshots().size_bytes is the file size");
	my ($o, $e) = ('', '');
	ok(IPC::Run::run([ 'gzip', '-t', $path ], '>', \$o, '2>', \$e),
		"$name: gzip -t passes")
	  or diag($e);
	my $r = snap_read($path, %opts);
	is_deeply($r->{errors}, [], "$name: file is well formed");
	my $h = $r->{header};
	my $m = $r->{manifest} // {};
	is($r->{first_line}, '-- changestream snapshot', "$name: first line");
	is($h->{format_version}, $SNAPSHOT_FORMAT_VERSION,
		"$name: format_version $SNAPSHOT_FORMAT_VERSION (the writer's)");
	is($m->{format_version} // '', $h->{format_version}, "$name: manifest format_version = header's");
	is($h->{generation}, $gen, "$name: header names generation $gen");
	is($h->{lsn}, cs_lsn_file_text($snap->{lsn}), "$name: header lsn = snapshots().lsn");
	like($h->{snapshot_time} // '', qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/,
		"$name: snapshot_time is an ISO 8601 UTC time");
	my $total = 0;
	$total += $_->{nrows} for values %{ $r->{tables} };
	my $ntab = scalar @{ $r->{order} };
	is($h->{tables}, $ntab, "$name: header tables = COPY sections ($ntab)");
	is($h->{rows}, $total, "$name: header rows = rows in the file ($total)");
	is($snap->{tables}, $ntab, "$name: snapshots().table_count");
	is($snap->{rows}, $total, "$name: snapshots().row_count");
	is($m->{lsn}, cs_lsn_file_text($snap->{lsn}), "$name: manifest lsn");
	is($m->{generation}, $gen, "$name: manifest generation");
	my @mt = @{ $m->{tables} // [] };
	is(scalar(@mt), $ntab, "$name: manifest lists every table");
	my @bad;
	for my $t (@mt)
	{
		my $qn = _quote_ident($t->{schema}) . '.' . _quote_ident($t->{name});
		my $ft = $r->{tables}{$qn};
		if (!$ft)
		{
			push @bad, "manifest table $qn has no COPY section";
			next;
		}
		push @bad, "$qn: manifest rows $t->{rows} but $ft->{nrows} in the file"
		  if $t->{rows} != $ft->{nrows};
		my @mc = map { _quote_ident($_->{name}) } @{ $t->{columns} // [] };
		push @bad, "$qn: manifest columns (@mc) but COPY columns (@{ $ft->{columns} })"
		  if join(',', @mc) ne join(',', @{ $ft->{columns} });
		push @bad, "$qn: no key and sequences arrays (format 2)"
		  if ($m->{format_version} // 1) >= 2
		  && (ref($t->{key}) ne 'ARRAY' || ref($t->{sequences}) ne 'ARRAY');
		push @bad, "$qn: duplicate first-column values in the snapshot: "
		  . join(', ', @{ $ft->{dups} }[ 0 .. ($#{ $ft->{dups} } < 4 ? $#{ $ft->{dups} } : 4) ])
		  if @{ $ft->{dups} } && !$opts{dups_ok};
	}
	is_deeply(\@bad, [], "$name: manifest tables match the COPY sections");
	return $r;
}

# quote_ident() as PostgreSQL does it for ordinary names (lowercase
# letters, digits, underscore, not starting with a digit; keywords are not
# handled: the tests do not use them as names)
sub _quote_ident
{
	my ($s) = @_;
	return $s if $s =~ /^[a-z_][a-z0-9_]*$/;
	$s =~ s/"/""/g;
	return "\"$s\"";
}

############################################################################
# The archive, decoded

# relation OID of a table
sub snap_relid
{
	my ($node, $table, $db) = @_;
	return $node->safe_psql($db // 'postgres', "SELECT '$table'::regclass::oid");
}

sub _tuple
{
	my ($buf, $pos) = @_;
	my $n = unpack('n', substr($buf, $pos, 2));
	$pos += 2;
	my @f;
	for (1 .. $n)
	{
		my $k = substr($buf, $pos, 1);
		$pos++;
		if ($k eq 'n')
		{
			push @f, undef;
		}
		elsif ($k eq 'u')
		{
			push @f, \'u';
		}
		elsif ($k eq 't' || $k eq 'b')
		{
			my $len = unpack('N', substr($buf, $pos, 4));
			$pos += 4;
			push @f, substr($buf, $pos, $len);
			$pos += $len;
		}
		else
		{
			die sprintf("unknown TupleData kind 0x%02x at byte %d\n", ord($k), $pos - 1);
		}
	}
	return (\@f, $pos);
}

# snap_fetch_txns($node, $gen, %opts) -> (\@txns, \@errors)
#   from / to: wal_records() bounds (LSN text or undef).
#   Each transaction: { commit => "X/Y", commit_int, end_int,
#     changes => [ { op => I|U|D|T, relid, old => [..] or undef,
#                    new => [..] or undef, relids => [..] (T) } ] }
#   errors: malformed messages, changes outside a transaction, a COMMIT
#   whose LSN differs from its BEGIN's, an unfinished transaction.
sub snap_fetch_txns
{
	my ($node, $gen, %opts) = @_;
	my $db   = $opts{db} // 'postgres';
	my $from = defined $opts{from} ? "'$opts{from}'" : 'NULL';
	my $to   = defined $opts{to}   ? "'$opts{to}'"   : 'NULL';
	my $out  = $node->safe_psql($db,
		"SELECT encode(data, 'hex') FROM changestream.wal_records('$gen', $from, $to)");
	my (@txns, @errors, $cur);
	my $i = 0;
	for my $hex (split /\n/, $out)
	{
		next if $hex eq '';
		$i++;
		my $m    = pack('H*', $hex);
		my $type = substr($m, 0, 1);
		my $ok   = eval {
			if ($type eq 'B')
			{
				push @errors, "message $i: BEGIN inside a transaction" if $cur;
				my $lsn = unpack('Q>', substr($m, 1, 8));
				$cur = {
					commit_int => $lsn,
					commit     => cs_int_to_lsn($lsn),
					changes    => []
				};
			}
			elsif ($type eq 'C')
			{
				my ($lsn, $end) = unpack('Q>Q>', substr($m, 2, 16));
				if (!$cur)
				{
					push @errors, "message $i: COMMIT outside a transaction";
				}
				else
				{
					push @errors,
					  "message $i: COMMIT LSN " . cs_int_to_lsn($lsn)
					  . " differs from BEGIN's $cur->{commit}"
					  if $lsn != $cur->{commit_int};
					$cur->{end_int} = $end;
					push @txns, $cur;
				}
				undef $cur;
			}
			elsif ($type eq 'I' || $type eq 'U' || $type eq 'D')
			{
				my $relid = unpack('N', substr($m, 1, 4));
				my $pos   = 5;
				my ($old, $new);
				my $k = substr($m, $pos, 1);
				if ($type ne 'I' && ($k eq 'K' || $k eq 'O'))
				{
					($old, $pos) = _tuple($m, $pos + 1);
					$k = substr($m, $pos, 1);
				}
				if ($type ne 'D')
				{
					die "expected 'N', got '$k'\n" unless $k eq 'N';
					($new, $pos) = _tuple($m, $pos + 1);
				}
				die "DELETE without an old tuple\n" if $type eq 'D' && !$old;
				die "trailing bytes\n" if $pos != length($m);
				if (!$cur)
				{
					push @errors, "message $i: $type outside a transaction";
				}
				else
				{
					push @{ $cur->{changes} },
					  { op => $type, relid => $relid, old => $old, new => $new };
				}
			}
			elsif ($type eq 'T')
			{
				my ($n) = unpack('N', substr($m, 1, 4));
				my @rel = unpack("N$n", substr($m, 6, 4 * $n));
				if (!$cur)
				{
					push @errors, "message $i: TRUNCATE outside a transaction";
				}
				else
				{
					push @{ $cur->{changes} }, { op => 'T', relids => \@rel };
				}
			}
			1;
		};
		push @errors, "message $i ($type): cannot decode: $@" unless $ok;
	}
	push @errors, "unfinished transaction $cur->{commit} at the end" if $cur;
	return (\@txns, \@errors);
}

############################################################################
# Replay

# snap_replay(\%state, \@txns, $relid, %opts) -> { applied => N txns,
#   changes => N, anomalies => [...], inserts => N, deletes => N }
# Applies, in order, the changes to $relid of every transaction whose
# commit LSN is >= from (an LSN text; default all) onto \%state (key =
# first column).  Anomalies: an INSERT of a key already present (the row
# was doubled: it is in the snapshot and in the stream), an UPDATE or
# DELETE of a key not present (the row was lost).
sub snap_replay
{
	my ($state, $txns, $relid, %opts) = @_;
	my $from = defined $opts{from} ? cs_lsn_to_int($opts{from}) : 0;
	my %res = (applied => 0, changes => 0, inserts => 0, deletes => 0,
		updates => 0, anomalies => []);
	my $an = $res{anomalies};
	for my $t (@$txns)
	{
		next if $t->{commit_int} < $from;
		my $touched = 0;
		for my $c (@{ $t->{changes} })
		{
			if ($c->{op} eq 'T')
			{
				next unless grep { $_ == $relid } @{ $c->{relids} };
				%$state = ();
				$touched = 1;
				next;
			}
			next unless $c->{relid} == $relid;
			$touched = 1;
			$res{changes}++;
			if ($c->{op} eq 'I')
			{
				my $key = $c->{new}[0] // '';
				push @$an, "commit $t->{commit}: INSERT of key $key, already present ("
				  . snap_canon_text($state->{$key}) . ')'
				  if exists $state->{$key};
				$state->{$key} = snap_canon($c->{new});
				$res{inserts}++;
			}
			elsif ($c->{op} eq 'D')
			{
				my $key = $c->{old}[0] // '';
				push @$an, "commit $t->{commit}: DELETE of key $key, not present"
				  unless exists $state->{$key};
				delete $state->{$key};
				$res{deletes}++;
			}
			else
			{
				my $old_key = $c->{old} ? ($c->{old}[0] // '') : ($c->{new}[0] // '');
				my $prev = $state->{$old_key};
				push @$an, "commit $t->{commit}: UPDATE of key $old_key, not present"
				  unless defined $prev;
				my @prevf =
				  defined $prev
				  ? map { $_ eq 'n' ? undef : substr($_, 1) } split(/\0/, $prev, -1)
				  : ();
				my @new = @{ $c->{new} };
				for my $j (0 .. $#new)
				{
					$new[$j] = $prevf[$j] if ref $new[$j];    # unchanged TOAST
				}
				delete $state->{$old_key};
				$state->{ $new[0] // '' } = snap_canon(\@new);
				$res{updates}++;
			}
		}
		$res{applied}++ if $touched;
	}
	return \%res;
}

# snap_id_balance(\%snapshot_state, \@txns, $relid, $from, \%final) ->
#   list of problems.  The issue's check, literally: ids in the snapshot,
#   plus ids of archived INSERTs with commit LSN >= $from, minus ids of
#   archived DELETEs, counted as a multiset, equal the final ids exactly
#   (every final id counted once, every other id zero times).
sub snap_id_balance
{
	my ($snap, $txns, $relid, $from, $final) = @_;
	my $lo = cs_lsn_to_int($from);
	my %n;
	$n{$_}++ for keys %$snap;
	for my $t (@$txns)
	{
		next if $t->{commit_int} < $lo;
		for my $c (@{ $t->{changes} })
		{
			# a TRUNCATE of the table empties the balance: the issue's
			# ids + inserts - deletes, generalised to truncation
			if ($c->{op} eq 'T')
			{
				%n = () if grep { $_ == $relid } @{ $c->{relids} };
				next;
			}
			next unless ($c->{relid} // -1) == $relid;
			$n{ $c->{new}[0] // '' }++ if $c->{op} eq 'I';
			$n{ $c->{old}[0] // '' }-- if $c->{op} eq 'D';
		}
	}
	my @p;
	for my $id (keys %$final)
	{
		my $c = delete $n{$id} // 0;
		push @p, "id $id: counted $c times, is in the table" if $c != 1;
	}
	for my $id (keys %n)
	{
		push @p, "id $id: counted $n{$id} times, is not in the table"
		  if $n{$id} != 0;
	}
	no warnings 'numeric';
	return sort { ($a =~ /^id (\S+):/)[0] <=> ($b =~ /^id (\S+):/)[0] or $a cmp $b } @p;
}

############################################################################
# The live table

# snap_table_state($node, $db, $table, $columns) -> { key => canonical row }
#   COPY (SELECT $columns FROM $table) TO STDOUT under the pinned settings.
sub snap_table_state
{
	my ($node, $db, $table, $columns) = @_;
	my $out = $node->safe_psql($db // 'postgres',
		"$PINNED_SETTINGS COPY (SELECT $columns FROM $table) TO STDOUT");
	my %s;
	for my $line (split /\n/, $out)
	{
		my $f = snap_copy_fields($line);
		$s{ $f->[0] // '' } = snap_canon($f);
	}
	return \%s;
}

# snap_compare_states(\%got, \%want, $name) -> bool; one test
sub snap_compare_states
{
	my ($got, $want, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my (@missing, @extra, @diff);
	for my $k (keys %$want)
	{
		if (!exists $got->{$k})
		{
			push @missing, $k;
		}
		elsif ($got->{$k} ne $want->{$k})
		{
			push @diff, $k;
		}
	}
	for my $k (keys %$got)
	{
		push @extra, $k unless exists $want->{$k};
	}
	my $same = !@missing && !@extra && !@diff;
	ok($same, "$name (" . scalar(keys %$want) . " rows)");
	if (!$same)
	{
		my $num = sub { no warnings; sort { $a <=> $b || $a cmp $b } @_ };
		my @m = $num->(@missing);
		my @e = $num->(@extra);
		my @d = $num->(@diff);
		diag(   scalar(@m) . " rows missing, "
			  . scalar(@e) . " extra, "
			  . scalar(@d)
			  . " different\n"
			  . (@m ? "missing keys: " . join(', ', @m[ 0 .. ($#m < 19 ? $#m : 19) ]) . "\n" : '')
			  . (@e ? "extra keys: " . join(', ', @e[ 0 .. ($#e < 19 ? $#e : 19) ]) . "\n" : '')
			  . join('', map { "key $_: got " . snap_canon_text($got->{$_}) . "\n    want " . snap_canon_text($want->{$_}) . "\n" } @d[ 0 .. ($#d < 4 ? $#d : 4) ]));
	}
	return $same;
}

# snap_verify_at(%p) -> replay result; tests:
#   - the snapshot holds $p{table} (name as in its COPY line);
#   - replaying the archived transactions with commit LSN >= the snapshot
#     LSN onto it finds no doubled and no lost row;
#   - the result equals $p{final};
#   - the issue's id balance holds.
#   p: snap (snap_read result), lsn, table, relid, txns, final, name,
#      min_applied (at least this many transactions replayed; default 0)
sub snap_verify_at
{
	my (%p) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $name = $p{name};
	my $t    = $p{snap}{tables}{ $p{table} };
	ok($t, "$name: snapshot holds $p{table}")
	  or return undef;
	my %state = %{ $t->{state} };
	my $res   = snap_replay(\%state, $p{txns}, $p{relid}, from => $p{lsn});
	my @an    = @{ $res->{anomalies} };
	is(scalar(@an), 0,
		"$name: replaying $res->{applied} archived transactions with commit LSN >= $p{lsn} "
		  . "neither doubles nor loses a row")
	  or diag(join("\n", @an[ 0 .. ($#an < 19 ? $#an : 19) ]));
	cmp_ok($res->{applied}, '>=', $p{min_applied},
		"$name: at least $p{min_applied} archived transactions after the snapshot")
	  if $p{min_applied};
	snap_compare_states(\%state, $p{final},
		"$name: snapshot + archived changes after $p{lsn} = the final table");
	my @p = snap_id_balance($t->{state}, $p{txns}, $p{relid}, $p{lsn}, $p{final});
	is(scalar(@p), 0,
		"$name: snapshot ids + archived INSERT ids - archived DELETE ids = final ids")
	  or diag(scalar(@p) . " problems:\n" . join("\n", @p[ 0 .. ($#p < 19 ? $#p : 19) ]));
	$res->{snapshot_rows} = $t->{nrows};
	return $res;
}

############################################################################
# Misc

# write a file under the test's tmp directory; returns its path
sub snap_write_script
{
	my ($name, $text) = @_;
	my $path = "$PostgreSQL::Test::Utils::tmp_check/$name";
	open(my $fh, '>', $path) or die "$path: $!";
	print $fh $text;
	close $fh;
	return $path;
}

# snap_psql_stdin($node, $db, $input, %opts) -> (ok, stdout, stderr)
#   psql -X -v ON_ERROR_STOP=1 with $input on stdin (a string, or
#   file => path read through gzip -dc when gz => 1).
sub snap_psql_stdin
{
	my ($node, $db, $input, %opts) = @_;
	my ($out, $err) = ('', '');
	my @psql = (
		$node->installed_command('psql'), '-X', '-q', '-v', 'ON_ERROR_STOP=1',
		'-d', $node->connstr($db));
	local %ENV = %ENV;
	delete $ENV{PGOPTIONS};
	my $ok;
	if ($opts{gz})
	{
		$ok = IPC::Run::run([ 'gzip', '-dc', '--', $input ], '|', \@psql,
			'>', \$out, '2>', \$err);
	}
	else
	{
		$ok = IPC::Run::run(\@psql, '<', \$input, '>', \$out, '2>', \$err);
	}
	return ($ok ? 1 : 0, $out, $err);
}

1;
