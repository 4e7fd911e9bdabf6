
# ChangestreamTest.pm: helpers shared by changestream's TAP tests.
#
# A new test starts like this (t/*.pl; "make installcheck" or
# scripts/test.sh puts t/ in @INC):
#
#   use ChangestreamTest;   # also: strict, warnings, Test::More,
#                           # PostgreSQL::Test::Cluster and ::Utils
#
#   my $node = cs_setup('mytest',
#       conf    => "changestream.segment_size = '128kB'\n",
#       pgbench => 1,          # pgbench -i -s 1 in postgres first
#       sql     => q{CREATE TABLE t (id int PRIMARY KEY);
#                    CREATE PUBLICATION changestream FOR TABLE t;},
#       oracle  => 1,          # the "oracle" slot, before the archiver's
#       archive => 1);         # archiving on, state 'streaming'
#   ...
#   done_testing();
#
# The two helpers every test uses:
#
# cs_setup($name, %opts) -> $node
#   A started PostgreSQL::Test::Cluster node made by cs_new_node (options
#   conf and status_interval go there), then, in this order and each only
#   if asked for: pgbench => SCALE runs "pgbench -i -s SCALE -q" in
#   postgres; CREATE EXTENSION changestream (always, unless extension =>
#   0), then, with publish_pgbench => 1, the publication "changestream"
#   of the four pgbench tables, then sql => TEXT, all in one safe_psql in
#   postgres; oracle => 1
#   creates the oracle slot (cs_create_oracle_slot); archive => 1 starts
#   archiving (cs_start_archiving, one test: state 'streaming').  Dies if
#   a step fails.
#
# cs_rows($node, $db, $query, @names) -> list of rows
#   Runs $query with safe_psql in $db (undef: postgres) and splits its
#   unaligned output into rows: hash references keyed by @names (in column
#   order) when names are given, else array references.  Values are text;
#   NULL is ''.  Values must not contain "|" or a newline.
#
# Besides these:
# - node setup: cs_new_node makes a node with changestream preloaded,
#   wal_level = logical, archiving off until cs_start_archiving();
# - polling with explicit timeouts (the module's own poll_query_until waits
#   180s, too long for a suite that must stay short when something breaks);
# - the oracle: a second pgoutput slot ("oracle") on the same publication,
#   created before the archiver's slot, whose messages must equal the
#   archive's, transaction for transaction;
# - crash helpers: kill -9 the postmaster (optionally the archiver too),
#   wait until every old process is gone, start again;
# - background pgbench;
# - the object store of the replica tests (cs_object_store, cs_s3_bucket,
#   cs_aws, cs_s3_curl; see "Object store" below), with t/S3FaultProxy.pm
#   in front of it to inject the bucket's faults.
#
# Every function that asserts something takes a test name and runs
# Test::More assertions itself; the caller's plan is done_testing().

package ChangestreamTest;

use strict;
use warnings;

use Carp;
use Exporter ();
our @ISA = ('Exporter');
use File::Basename;
use File::Find;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

our @EXPORT = qw(
  cs_setup cs_rows cs_table_digest cs_new_node cs_archive_dir cs_start_archiving cs_create_oracle_slot
  cs_poll cs_poll_or_diag cs_wait_state cs_wait_archived cs_fence
  cs_status cs_single_generation cs_generations cs_compare_with_oracle
  cs_fetch_archive cs_fetch_oracle cs_group_txns cs_lsn_to_int
  cs_int_to_lsn cs_lsn_file_text cs_lsn_ge cs_crash cs_start_after_crash cs_pgbench_bg
  cs_pgbench_finish cs_pgbench cs_worker_pid cs_slot_confirmed
  cs_wal_segments cs_archive_files cs_finished_files cs_gzip_test cs_log_since
  cs_log_offset cs_sleep cs_pinned_settings_sql cs_pg_major
  cs_object_store cs_s3_bucket cs_aws cs_s3_curl cs_bucket_objects cs_replica_conf
  cs_wait_bucket_covers);

# "use ChangestreamTest;" also turns on strict and warnings and imports
# Test::More, PostgreSQL::Test::Cluster and PostgreSQL::Test::Utils into
# the test, so that a test needs no other preamble.
sub import
{
	my $caller = caller;
	strict->import;
	warnings->import;
	## no critic (BuiltinFunctions::ProhibitStringyEval)
	eval "package $caller; use Test::More; use PostgreSQL::Test::Cluster; "
	  . "use PostgreSQL::Test::Utils; 1"
	  or die $@;
	__PACKAGE__->export_to_level(1, @_);
	return;
}

# Message types the oracle compares: BEGIN, INSERT, UPDATE, DELETE,
# TRUNCATE, COMMIT.  Relation/Type/Origin/Message are session dependent
# (pgoutput sends a Relation message once per session) and are left out.
my %COMPARED = map { $_ => 1 } qw(42 49 55 44 54 43);

# cs_pinned_settings_sql() -> "SET name = 'value'; ..."
# The session settings the archiver pins on its walsender connection, read
# from their one source, src/base/pinned_settings.h: under them the oracle's text
# values are the archive's.
sub cs_pinned_settings_sql
{
	my $h = dirname(__FILE__) . '/../src/base/pinned_settings.h';
	open(my $fh, '<', $h) or croak "open $h: $!";
	my $sql = '';
	while (<$fh>)
	{
		$sql .= "SET $1 = '$2'; " if /^CS_PINNED_SETTING\("([^"]+)", "([^"]+)"\)/;
	}
	close($fh);
	croak "no CS_PINNED_SETTING in $h" if $sql eq '';
	return $sql;
}

our $ORACLE_SETTINGS = cs_pinned_settings_sql();

our $PGOUTPUT_OPTIONS =
  "'proto_version', '1', 'publication_names', 'changestream', "
  . "'messages', 'true'";

############################################################################
# LSNs

# "16/B374D848" -> integer (perl is 64-bit here)
sub cs_lsn_to_int
{
	my ($lsn) = @_;
	croak "not an LSN: " . (defined $lsn ? "'$lsn'" : 'undef')
	  unless defined $lsn && $lsn =~ m{^([0-9A-Fa-f]+)/([0-9A-Fa-f]+)$};
	return hex($1) * 4294967296 + hex($2);
}

# The server's text form of an LSN: PostgreSQL 19 pads the low half to 8
# hex digits ("0/0BB8A5D8"), as pg_lsn's output and the server's messages
# (and changestream's, src/base/compat.h) do there; before 19 "0/BB8A5D8".  The
# PostgreSQL under test is the pg_config in PATH.
my ($lsn_format, $pg_major);

# cs_pg_major() -> the major version of the PostgreSQL under test (15, 17...)
sub cs_pg_major
{
	$pg_major //= ((`pg_config --version` // '') =~ /PostgreSQL (\d+)/)[0]
	  // die "pg_config --version gave no version";
	return $pg_major;
}

sub _lsn_format
{
	return $lsn_format //= cs_pg_major() >= 19 ? '%X/%08X' : '%X/%X';
}

# a 64-bit LSN as text in the given sprintf format (high, low halves)
sub _format_lsn
{
	my ($format, $v) = @_;
	return sprintf($format, int($v / 4294967296), $v % 4294967296);
}

sub cs_int_to_lsn
{
	my ($v) = @_;
	return _format_lsn(_lsn_format(), $v);
}

# An LSN as the archive's files write it ("%X/%X", docs/FORMAT.md), on
# every version: cs_lsn_file_text('0/0BB8A5D8') is '0/BB8A5D8'.
sub cs_lsn_file_text
{
	my ($lsn) = @_;
	return _format_lsn('%X/%X', cs_lsn_to_int($lsn));
}

sub cs_lsn_ge
{
	my ($a, $b) = @_;
	return cs_lsn_to_int($a) >= cs_lsn_to_int($b);
}

# 16 hex digits (8 bytes, big endian) -> "X/Y"
sub _hex8_to_lsn
{
	my ($h) = @_;
	return sprintf(_lsn_format(), hex(substr($h, 0, 8)), hex(substr($h, 8, 8)));
}

############################################################################
# Node setup

# One initdb per test run instead of one per node (initdb takes about 2 s,
# the suite makes some 30 nodes).  The first node of a run makes a data
# directory with the options PostgreSQL::Test::Cluster's init() gives
# initdb (-A trust -N), once, under the run's tmp_check (shared by the TAP
# files prove runs in parallel: an flock serializes making it; it is made
# under a temporary name and renamed, so a directory under the final name is
# complete; its name holds "initdb --version", so a tmp_check reused with
# another PostgreSQL gets its own).  Every node is then a copy (cp -RPp) of
# it:
# - on PostgreSQL 16 and later, through the module's own INITDB_TEMPLATE
#   (init() copies it when it is set and no extra initdb options are given);
# - on 15, which has no INITDB_TEMPLATE, by answering init()'s one call
#   system_or_bail('initdb', '-D', PGDATA, '-A', 'trust', '-N') with that
#   copy; any other call goes to the module's function.
# init() writes its configuration lines after the copy, unchanged.  The
# nodes share one system identifier, as nodes made from PostgreSQL's own
# template do; no test compares two nodes' identifiers.
sub _initdb_template
{
	my $version = `initdb --version` // '';
	$version =~ s/\s+$//;
	require Digest::MD5;
	my $tag = substr(Digest::MD5::md5_hex($version), 0, 12);
	my $base = $PostgreSQL::Test::Utils::tmp_check // "tmp_check";
	my $tmpl = "$base/cs_initdb_template_$tag";
	return $tmpl if -d $tmpl;
	require Fcntl;
	open(my $lock, '>', "$tmpl.lock") or die "open $tmpl.lock: $!";
	flock($lock, Fcntl::LOCK_EX()) or die "flock $tmpl.lock: $!";
	if (!-d $tmpl)
	{
		my $tmp = "$tmpl.tmp$$";
		PostgreSQL::Test::Utils::system_or_bail('initdb', '-D', $tmp, '-A',
			'trust', '-N');
		rename($tmp, $tmpl) or die "rename $tmp $tmpl: $!";
	}
	close($lock);
	return $tmpl;
}

sub _init_from_template
{
	my ($node, %params) = @_;
	my $tmpl = _initdb_template();
	if (cs_pg_major() >= 16)
	{
		local $ENV{INITDB_TEMPLATE} = $tmpl;
		$node->init(%params);
		return;
	}
	my $orig = \&PostgreSQL::Test::Utils::system_or_bail;
	no warnings 'redefine';
	local *PostgreSQL::Test::Utils::system_or_bail = sub {
		my @cmd = @_;
		if (join(' ', @cmd[ 0, 1, 3 .. $#cmd ]) eq 'initdb -D -A trust -N'
			&& !-e $cmd[2])
		{
			note("initdb: copying the run's template $tmpl");
			PostgreSQL::Test::Utils::system_log('cp', '-RPp', $tmpl, $cmd[2]) == 0
			  or BAIL_OUT("cp -RPp $tmpl $cmd[2] failed");
			return;
		}
		return $orig->(@cmd);
	};
	$node->init(%params);
	return;
}

# cs_new_node($name, %opts) -> node (initialized, not started)
#   conf => extra postgresql.conf lines (appended last)
#   status_interval => default '500ms'
# Archiving is off (changestream.directory = '') until cs_start_archiving.
# The server's own DateStyle/IntervalStyle/TimeZone/extra_float_digits are
# deliberately unusual: archived values must not depend on them.
# Re-capture (changestream.recapture_delay) is off, so that no snapshot
# starts at a time a test does not choose (a take_snapshot() meeting it
# would fail with 55006, a refusal a test expects would vanish); t/048
# and t/060 turn it on through conf.
sub cs_new_node
{
	my ($name, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	_init_from_template($node, allows_streaming => 'logical');
	my $status_interval = $opts{status_interval} // '500ms';
	my $archive = $node->basedir . '/archive';
	mkdir $archive or die "mkdir $archive: $!";
	$node->{cs_archive} = $archive;
	$node->append_conf(
		'postgresql.conf', qq(
shared_preload_libraries = 'changestream'
changestream.directory = ''
changestream.status_interval = '$status_interval'
changestream.recapture_delay = -1
max_connections = 40
max_wal_senders = 10
max_replication_slots = 10
shared_buffers = '32MB'
max_wal_size = '512MB'
log_statement = 'ddl'
log_min_duration_statement = -1
timezone = 'America/New_York'
datestyle = 'SQL, DMY'
intervalstyle = 'sql_standard'
extra_float_digits = 0
) . ($opts{conf} // ''));
	return $node;
}

# cs_setup($name, %opts) -> started node; see the top of this file.
sub cs_setup
{
	my ($name, %opts) = @_;
	my $node = cs_new_node($name,
		conf => $opts{conf},
		status_interval => $opts{status_interval});
	$node->start;
	cs_pgbench($node, 'postgres', '-i', '-s', $opts{pgbench}, '-q')
	  if $opts{pgbench};
	my $sql = ($opts{extension} // 1) ? "CREATE EXTENSION changestream;\n" : '';
	$sql .= "CREATE PUBLICATION changestream FOR TABLE pgbench_accounts, "
	  . "pgbench_branches, pgbench_tellers, pgbench_history;\n"
	  if $opts{publish_pgbench};
	$sql .= $opts{sql} // '';
	$node->safe_psql('postgres', $sql) if $sql ne '';
	cs_create_oracle_slot($node) if $opts{oracle};
	cs_start_archiving($node) if $opts{archive};
	return $node;
}

# cs_table_digest($node, $db, $schema, $table) -> md5 of the text forms
# of every row of $schema.$table in database $db, in the order of those
# texts: two tables have the same digest when they hold the same rows (a
# restored table against its source).
sub cs_table_digest
{
	my ($node, $db, $schema, $table) = @_;
	return $node->safe_psql($db,
		"SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM $schema.$table t");
}

# cs_rows($node, $db, $query, @names) -> rows; see the top of this file.
sub cs_rows
{
	my ($node, $db, $query, @names) = @_;
	my $out = $node->safe_psql($db // 'postgres', $query);
	my @rows;
	for my $line (grep { $_ ne '' } split /\n/, $out)
	{
		my @f = split /\|/, $line, -1;
		if (@names)
		{
			my %r;
			@r{@names} = @f;
			push @rows, \%r;
		}
		else
		{
			push @rows, \@f;
		}
	}
	return @rows;
}

sub cs_archive_dir
{
	my ($node) = @_;
	return $node->{cs_archive};
}

# cs_start_archiving($node, %opts): point changestream.directory at the
# node's archive directory.  By default through postgresql.conf and a
# restart (a server start is the most basic path); reload => 1 uses
# ALTER SYSTEM + pg_reload_conf() instead.  Then waits for 'streaming'.
sub cs_start_archiving
{
	my ($node, %opts) = @_;
	my $dir = cs_archive_dir($node);
	my $db  = $opts{db} // 'postgres';
	if ($opts{reload})
	{
		$node->safe_psql('postgres',
			"ALTER SYSTEM SET changestream.directory = '$dir'; SELECT pg_reload_conf();"
		);
	}
	else
	{
		$node->append_conf('postgresql.conf',
			"changestream.directory = '$dir'");
		$node->restart;
	}
	return cs_wait_state($node, 'streaming', db => $db,
		timeout => $opts{timeout} // 60);
}

# The oracle slot: pgoutput on the same database, created before the
# archiver's slot so that it covers everything the archive can hold.
sub cs_create_oracle_slot
{
	my ($node, $db, $slot) = @_;
	$db   //= 'postgres';
	$slot //= 'oracle';
	$node->safe_psql($db,
		"SELECT pg_create_logical_replication_slot('$slot', 'pgoutput')");
	return;
}

############################################################################
# Polling and status

sub cs_sleep
{
	my ($secs) = @_;
	usleep(int($secs * 1_000_000));
	return;
}

# cs_poll($node, $db, $query, $expected, $timeout) -> (ok, last stdout, last stderr)
sub cs_poll
{
	my ($node, $db, $query, $expected, $timeout) = @_;
	$expected //= 't';
	$timeout  //= 60;
	my $deadline = time() + $timeout;
	my ($out, $err);
	while (1)
	{
		($out, $err) = ('', '');
		$node->psql($db, $query, stdout => \$out, stderr => \$err);
		$out //= '';
		$err //= '';
		return (1, $out, $err) if $out eq $expected && $err eq '';
		last if time() > $deadline;
		usleep(100_000);
	}
	return (0, $out, $err);
}

# Like cs_poll but reports a failed test (with diagnostics) on timeout.
sub cs_poll_or_diag
{
	my ($node, $db, $query, $expected, $timeout, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($ok, $out, $err) = cs_poll($node, $db, $query, $expected, $timeout);
	ok($ok, $name)
	  or diag("query: $query\nexpected: "
		  . ($expected // 't')
		  . "\nlast output: $out\nstderr: $err\n"
		  . "status(): "
		  . _status_text($node, $db));
	return $ok;
}

sub _status_text
{
	my ($node, $db) = @_;
	my ($out, $err) = ('', '');
	$node->psql($db // 'postgres',
		"SELECT row_to_json(s) FROM changestream.status() s",
		stdout => \$out, stderr => \$err);
	return $out ne '' ? $out : "(error: $err)";
}

# status() as a hash
sub cs_status
{
	my ($node, $db) = @_;
	my @cols = qw(pid state database slot generation segment_index
	  received_lsn flushed_lsn confirmed_flush_lsn lag_bytes last_message_at
	  last_flush_at messages transactions bytes last_error last_error_at
	  compressor_pid raw_sealed_segments compressed_segments
	  last_compress_error last_compress_error_at);
	return $node->query_hash($db // 'postgres',
		'SELECT __COLUMNS__ FROM changestream.status()', @cols);
}

# Wait until status().state = $state; one test.
sub cs_wait_state
{
	my ($node, $state, %opts) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	return cs_poll_or_diag($node, $opts{db} // 'postgres',
		"SELECT state FROM changestream.status()",
		$state, $opts{timeout} // 60,
		$opts{name} // "archiver reaches state '$state'");
}

# cs_fence($node, $db) -> target LSN
# Takes the current WAL position, then commits a transaction holding only a
# transactional logical message, so that the archiver has a commit beyond
# the target to flush even when it only reports commit positions.
sub cs_fence
{
	my ($node, $db) = @_;
	$db //= 'postgres';
	my $target = $node->safe_psql($db, "SELECT pg_current_wal_lsn()");
	$node->safe_psql($db,
		"SELECT pg_logical_emit_message(true, 'changestream_test', 'fence')");
	return $target;
}

# cs_wait_archived($node, %opts) -> target LSN
# Fence, then wait until status().flushed_lsn >= target; one test.
sub cs_wait_archived
{
	my ($node, %opts) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $db     = $opts{db} // 'postgres';
	my $target = cs_fence($node, $db);
	cs_poll_or_diag($node, $db,
		"SELECT flushed_lsn >= '$target' FROM changestream.status()",
		't', $opts{timeout} // 120,
		($opts{name} // 'archive') . ": flushed_lsn reaches $target");
	return $target;
}

sub cs_generations
{
	my ($node, $db) = @_;
	return cs_rows($node, $db,
		"SELECT generation, start_lsn, wal_count FROM changestream.generations() ORDER BY generation"
	);
}

# Exactly one generation; returns (generation, start_lsn).  One test.
sub cs_single_generation
{
	my ($node, $name, $db) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my @g = cs_generations($node, $db);
	is(scalar(@g), 1, "$name: exactly one generation")
	  or diag("generations: " . join(', ', map { join('|', @$_) } @g));
	return @g ? ($g[0][0], $g[0][1]) : (undef, undef);
}

sub cs_worker_pid
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'changestream archiver'"
	);
}

sub cs_slot_confirmed
{
	my ($node, $slot) = @_;
	$slot //= 'changestream';
	return $node->safe_psql('postgres',
		"SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '$slot'"
	);
}

############################################################################
# Archive files

# wal_segments() rows as hashes, in index order
sub cs_wal_segments
{
	my ($node, $gen, $db) = @_;
	return cs_rows($node, $db,
		"SELECT segment_index, file_name, start_lsn, end_lsn, compressed, size_bytes "
		  . "FROM changestream.wal_segments('$gen') ORDER BY segment_index",
		qw(index file start end compressed size));
}

# Files in <archive>/generations/<gen>/wal
sub cs_archive_files
{
	my ($node, $gen) = @_;
	my $dir = cs_archive_dir($node) . "/generations/$gen/wal";
	opendir(my $dh, $dir) or return ();
	my @f = sort grep { !/^\.\.?$/ } readdir($dh);
	closedir($dh);
	return @f;
}

# cs_finished_files($dir) -> { name relative to $dir => size }
#   The finished files of the archive (or database tree) at $dir, those the
#   replica receives: each generation's identity and schema history files,
#   compressed segments and snapshots.  Raw segments, temporary files, the
#   journal and the horizon are left out.
sub cs_finished_files
{
	my ($dir) = @_;
	my %f;
	find(
		{
			no_chdir => 1,
			wanted => sub {
				return unless -f $_;
				my $rel = substr($_, length($dir) + 1);
				return unless $rel =~ m{^generations/[0-9a-f]{16}/(generation|schema_history|wal/[0-9a-f]+\.wal\.gz|snapshots/[0-9a-f]+\.snapshot\.gz)$};
				$f{$rel} = -s $_;
			}
		},
		"$dir/generations");
	return \%f;
}

# gzip -t every .wal.gz; one test.  Returns number of files tested.
# One gzip process for all files (spawning one per file is slow); only if
# that fails are the files tested one by one to name the bad ones.
sub cs_gzip_test
{
	my ($node, $gen, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $dir = cs_archive_dir($node) . "/generations/$gen/wal";
	my @gz = map { "$dir/$_" } grep { /\.wal\.gz$/ } cs_archive_files($node, $gen);
	my @bad;
	if (@gz)
	{
		my ($out, $err) = ('', '');
		if (!IPC::Run::run([ 'gzip', '-t', @gz ], '>', \$out, '2>', \$err))
		{
			for my $f (@gz)
			{
				($out, $err) = ('', '');
				IPC::Run::run([ 'gzip', '-t', $f ], '>', \$out, '2>', \$err)
				  or push @bad, "$f: $err";
			}
			push @bad, "gzip -t failed: $err" unless @bad;
		}
	}
	ok(@gz > 0 && !@bad,
		"$name: " . scalar(@gz) . " .wal.gz files pass gzip -t")
	  or diag(@gz ? join("\n", @bad) : "no .wal.gz files in $dir");
	return scalar @gz;
}

############################################################################
# Logs

sub cs_log_offset
{
	my ($node) = @_;
	return -s $node->logfile // 0;
}

sub cs_log_since
{
	my ($node, $offset) = @_;
	return PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
}

############################################################################
# The oracle

# hex pgoutput messages of the archive (whole generation)
sub cs_fetch_archive
{
	my ($node, $gen, $db) = @_;
	my $out = $node->safe_psql($db // 'postgres',
		"SELECT encode(data, 'hex') FROM changestream.wal_records('$gen')");
	return grep { $_ ne '' } split /\n/, $out;
}

# hex pgoutput messages of the oracle slot (peek: the slot does not move);
# $slot defaults to 'oracle'
sub cs_fetch_oracle
{
	my ($node, $db, $slot) = @_;
	$slot //= 'oracle';
	my $out = $node->safe_psql($db // 'postgres',
		"$ORACLE_SETTINGS SELECT encode(data, 'hex') FROM "
		  . "pg_logical_slot_peek_binary_changes('$slot', NULL, NULL, $PGOUTPUT_OPTIONS)"
	);
	return grep { $_ ne '' } split /\n/, $out;
}

# cs_group_txns(\@hexmsgs) -> (\@txns, \@errors)
# Keeps B/I/U/D/T/C and groups them into transactions:
#   { commit => "X/Y" (BEGIN's final LSN), commit_int, msgs => [hex...] }
# errors: structural problems (change outside a transaction, COMMIT whose
# commit LSN differs from its BEGIN's final LSN, nested or unfinished BEGIN).
sub cs_group_txns
{
	my ($msgs) = @_;
	my (@txns, @errors, $cur);
	my $i = 0;
	for my $m (@$msgs)
	{
		$i++;
		my $type = substr($m, 0, 2);
		next unless $COMPARED{$type};
		if ($type eq '42')    # BEGIN: final_lsn int64, ts int64, xid int32
		{
			push @errors, "message $i: BEGIN inside transaction $cur->{commit}"
			  if $cur;
			my $lsn = _hex8_to_lsn(substr($m, 2, 16));
			$cur = {
				commit     => $lsn,
				commit_int => cs_lsn_to_int($lsn),
				msgs       => [$m]
			};
		}
		elsif ($type eq '43')  # COMMIT: flags int8, commit_lsn, end_lsn, ts
		{
			if (!$cur)
			{
				push @errors, "message $i: COMMIT outside a transaction: $m";
				next;
			}
			my $lsn = _hex8_to_lsn(substr($m, 4, 16));
			push @errors,
			  "message $i: COMMIT LSN $lsn differs from BEGIN's $cur->{commit}"
			  if $lsn ne $cur->{commit};
			push @{ $cur->{msgs} }, $m;
			push @txns, $cur;
			undef $cur;
		}
		else
		{
			if (!$cur)
			{
				push @errors, "message $i: change outside a transaction: "
				  . substr($m, 0, 80);
				next;
			}
			push @{ $cur->{msgs} }, $m;
		}
	}
	push @errors, "unfinished transaction $cur->{commit} at the end"
	  if $cur;
	return (\@txns, \@errors);
}

sub _txn_text
{
	my ($t, $max) = @_;
	$max //= 12;
	my @m = @{ $t->{msgs} };
	my $s = "commit $t->{commit}, " . scalar(@m) . " messages:\n";
	my $n = 0;
	for my $m (@m)
	{
		last if ++$n > $max;
		my $shown = length($m) > 200 ? substr($m, 0, 200) . '...' : $m;
		$s .= "    " . chr(hex(substr($m, 0, 2))) . " $shown\n";
	}
	$s .= "    ... (" . (@m - $max) . " more)\n" if @m > $max;
	return $s;
}

# cs_compare_with_oracle($node, %p) -> number of transactions compared
#   gen, start_lsn (generation start), target (upper bound, inclusive),
#   name, min_txns (the comparison must cover at least this many), db,
#   slot (the oracle slot, default 'oracle')
# Tests: archive well-formed; no commit LSN twice; all archived commits >=
# start_lsn; oracle covers >= min_txns; archive == oracle over the range.
sub cs_compare_with_oracle
{
	my ($node, %p) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $name  = $p{name} // 'oracle';
	my $db    = $p{db}   // 'postgres';
	my $lo    = cs_lsn_to_int($p{start_lsn});
	my $hi    = cs_lsn_to_int($p{target});
	my @arch  = cs_fetch_archive($node, $p{gen}, $db);
	my @orcl  = cs_fetch_oracle($node, $db, $p{slot});
	my ($atx, $aerr) = cs_group_txns(\@arch);
	my ($otx, $oerr) = cs_group_txns(\@orcl);

	is(scalar(@$aerr), 0, "$name: archived stream is well formed")
	  or diag(join("\n", @$aerr[ 0 .. ($#$aerr < 9 ? $#$aerr : 9) ]));
	diag("oracle stream problems: " . join("\n", @$oerr)) if @$oerr;

	my (%seen, @dups);
	for my $t (@$atx)
	{
		push @dups, $t->{commit} if $seen{ $t->{commit} }++ == 1;
	}
	is(scalar(@dups), 0, "$name: no commit LSN archived twice")
	  or diag(scalar(@dups)
		  . " commit LSNs archived more than once, first: "
		  . join(', ', @dups[ 0 .. ($#dups < 9 ? $#dups : 9) ]));

	my @early = grep { $_->{commit_int} < $lo } @$atx;
	is(scalar(@early), 0,
		"$name: every archived commit LSN >= generation start $p{start_lsn}")
	  or diag("first: " . _txn_text($early[0], 3));

	my @a = grep { $_->{commit_int} >= $lo && $_->{commit_int} <= $hi } @$atx;
	my @o = grep { $_->{commit_int} >= $lo && $_->{commit_int} <= $hi } @$otx;
	my $min = $p{min_txns} // 1;
	cmp_ok(scalar(@o), '>=', $min,
		"$name: oracle has at least $min transactions in [$p{start_lsn}, $p{target}]"
	);

	my $first_diff;
	my $n = @a > @o ? @a : @o;
	for my $i (0 .. $n - 1)
	{
		my $x = $a[$i] ? join(',', @{ $a[$i]{msgs} }) : '';
		my $y = $o[$i] ? join(',', @{ $o[$i]{msgs} }) : '';
		if ($x ne $y)
		{
			$first_diff = $i;
			last;
		}
	}
	my $same = !defined $first_diff;
	ok($same,
		"$name: archive equals oracle transaction for transaction ("
		  . scalar(@a)
		  . " archived, "
		  . scalar(@o)
		  . " in oracle)");
	if (!$same)
	{
		my %in_a = map { $_->{commit} => 1 } @a;
		my %in_o = map { $_->{commit} => 1 } @o;
		my @missing = grep { !$in_a{$_} } map { $_->{commit} } @o;
		my @extra   = grep { !$in_o{$_} } map { $_->{commit} } @a;
		my $i       = $first_diff;
		diag(   "first difference at transaction #$i of the range\n"
			  . "archive: "
			  . ($a[$i] ? _txn_text($a[$i]) : "(none)\n")
			  . "oracle:  "
			  . ($o[$i] ? _txn_text($o[$i]) : "(none)\n")
			  . scalar(@missing)
			  . " oracle transactions missing from the archive"
			  . (@missing ? " (first: " . join(', ', @missing[ 0 .. ($#missing < 4 ? $#missing : 4) ]) . ")" : '')
			  . "; "
			  . scalar(@extra)
			  . " archived transactions not in the oracle"
			  . (@extra ? " (first: " . join(', ', @extra[ 0 .. ($#extra < 4 ? $#extra : 4) ]) . ")" : ''));
	}
	return scalar @o;
}

############################################################################
# pgbench

sub _pgbench_cmd
{
	my ($node, $db, @args) = @_;
	return [
		'pgbench', '-h', $node->host, '-p', $node->port, @args, $db
	];
}

# Foreground pgbench; dies unless it succeeds.
sub cs_pgbench
{
	my ($node, $db, @args) = @_;
	my ($out, $err) = ('', '');
	my $cmd = _pgbench_cmd($node, $db, @args);
	IPC::Run::run($cmd, '>', \$out, '2>', \$err)
	  or die "pgbench @args failed: $err\n$out";
	return $out;
}

# Background pgbench: returns a handle for cs_pgbench_finish.
sub cs_pgbench_bg
{
	my ($node, $db, @args) = @_;
	my $h = { out => '', err => '' };
	$h->{run} = IPC::Run::start(_pgbench_cmd($node, $db, @args),
		'>', \$h->{out}, '2>', \$h->{err});
	return $h;
}

# -> (exit ok, stdout, stderr)
sub cs_pgbench_finish
{
	my ($h) = @_;
	my $ok = eval { $h->{run}->finish; 1 } && $h->{run}->result == 0;
	return ($ok ? 1 : 0, $h->{out}, $h->{err});
}

############################################################################
# Crashes

sub _postmaster_pid
{
	my ($node) = @_;
	open(my $fh, '<', $node->data_dir . '/postmaster.pid') or return undef;
	my $pid = <$fh>;
	close $fh;
	chomp $pid if defined $pid;
	return $pid;
}

sub _children_of
{
	my ($ppid) = @_;
	my @kids;
	opendir(my $dh, '/proc') or return ();
	for my $p (grep { /^\d+$/ } readdir($dh))
	{
		open(my $fh, '<', "/proc/$p/stat") or next;
		my $stat = <$fh>;
		close $fh;
		next unless defined $stat;
		# pid (comm) state ppid ...; comm may contain spaces
		push @kids, $p if $stat =~ /\)\s+\S+\s+(\d+)/ && $1 == $ppid;
	}
	closedir($dh);
	return @kids;
}

# Still there, zombies included: a new postmaster refuses to start while
# the old one's pid exists (it checks with kill(pid, 0)).
sub _alive
{
	my ($pid) = @_;
	return kill(0, $pid) ? 1 : 0;
}

# cs_crash($node, %opts): SIGKILL the postmaster (and, with also_archiver,
# the archiver worker, and with also_pids => [...] those processes, in the
# same instant, so that they cannot finish what they were writing), then
# wait until every process of the old server is gone.
sub cs_crash
{
	my ($node, %opts) = @_;
	my $pm = _postmaster_pid($node) or die "no postmaster.pid";
	my @kids = _children_of($pm);
	my @victims;
	if ($opts{also_archiver})
	{
		my $w = cs_worker_pid($node);
		push @victims, $w if $w =~ /^\d+$/;
	}
	push @victims, grep { /^\d+$/ } @{ $opts{also_pids} // [] };
	if (@victims)
	{
		note("SIGKILL archiver @victims and postmaster $pm");
		kill 9, @victims, $pm;
	}
	else
	{
		note("SIGKILL postmaster $pm");
	}
	$node->kill9;    # SIGKILL to the postmaster, forget its pid
	my $deadline = time() + 60;
	while (grep { _alive($_) } ($pm, @kids))
	{
		if (time() > $deadline)
		{
			my @left = grep { _alive($_) } ($pm, @kids);
			my $ps   = `ps -o pid,ppid,stat,args -p @{[join(',', @left)]}`;
			die "old server processes still alive 60s after kill -9 of the postmaster:\n$ps";
		}
		usleep(50_000);
	}
	return;
}

# Start after cs_crash, retrying while the old shared memory is released.
sub cs_start_after_crash
{
	my ($node) = @_;
	for my $try (1 .. 5)
	{
		return 1 if $node->start(fail_ok => 1);
		# a failed start may have adopted a stale pid: forget it
		$node->{_pid} = undef;
		cs_sleep(1);
	}
	BAIL_OUT("node " . $node->name . " did not restart after a crash");
}

############################################################################
# Object store
#
# The replica tests (issue 31) run against a real S3 store: a one-node
# Ceph cluster with RADOS Gateway that scripts/test.sh starts when a TAP
# file it runs calls cs_object_store (scripts/test-matrix.sh starts one on
# the host for every version and hands it to the chroots).  The store is
# named by the env file in CS_OBJECT_STORE_ENV (scripts/object-store.sh).
#
#   my $s3 = cs_object_store();      # first, before any test
#   my $bucket = cs_s3_bucket($s3);  # a new empty bucket, unique name
#   my ($rc, $out, $err) = cs_aws($s3, 's3', 'ls', "s3://$bucket/");
#   my ($rc, $out, $err) = cs_s3_curl($s3, '-X', 'PUT', ..., "$s3->{endpoint}/$bucket/key");
#
# With t/S3FaultProxy.pm in front of the store, give {endpoint => $proxy->url}
# as the options (see cs_aws).

my $store;
my $bucket_seq = 0;

# cs_object_store() -> hashref, or skips/fails the whole test file
#   endpoint     http://127.0.0.1:PORT (path-style: $endpoint/$bucket/$key)
#   region       the region to sign for
#   access_key, secret_key   the test user's keys
#   credentials  their file in the AWS shared credentials format ([default],
#                mode 0600, owned by the test's user): what
#                changestream.replica_credentials names
#   env_file     the store's env file
# The store must answer a signed request (awscli's list-buckets).  When it
# does not, or none was started: under CI=true the test file dies (fails:
# CI must run the replica tests); otherwise it is skipped with the reason.
# Call it before any test.
sub cs_object_store
{
	return $store if $store;
	my $file = $ENV{CS_OBJECT_STORE_ENV} // '';
	my ($why, %env);
	if ($file eq '')
	{
		$why = 'CS_OBJECT_STORE_ENV is not set (scripts/test.sh starts the '
		  . 'store for the TAP files that call cs_object_store; by hand: '
		  . 'bash scripts/object-store.sh start)';
	}
	elsif (!open(my $fh, '<', $file))
	{
		$why = "cannot read the object store's env file $file: $!";
	}
	else
	{
		while (<$fh>)
		{
			$env{$1} = $2 if /^(CS_S3_[A-Z_]+)=(.*)$/;
		}
		close($fh);
		$why = "$file names no endpoint" unless $env{CS_S3_ENDPOINT};
	}
	my $s3;
	if (!$why)
	{
		$s3 = {
			endpoint => $env{CS_S3_ENDPOINT},
			region => $env{CS_S3_REGION},
			access_key => $env{CS_S3_ACCESS_KEY},
			secret_key => $env{CS_S3_SECRET_KEY},
			credentials => $env{CS_S3_CREDENTIALS},
			env_file => $file,
		};
		my ($rc, $out, $err) = cs_aws($s3, 's3api', 'list-buckets');
		$why = "the object store at $s3->{endpoint} does not answer: $err"
		  if $rc != 0;
	}
	if ($why)
	{
		die "object store unavailable under CI=true: $why\n"
		  if ($ENV{CI} // '') eq 'true';
		plan skip_all => "object store unavailable: $why";
	}
	return $store = $s3;
}

# Debian's awscli (a Python environment may put another aws first in PATH)
sub _aws_program
{
	return -x '/usr/bin/aws' ? '/usr/bin/aws' : 'aws';
}

# cs_aws($s3, [\%opts,] @args) -> ($exit_code, $stdout, $stderr)
#   Runs "aws --endpoint-url ENDPOINT @args" with the store's keys and
#   region, no configuration or credentials file of the user, no pager,
#   checksums only where the operation requires them (as older awscli).
#   %opts overrides endpoint (e.g. a fault proxy's url), access_key,
#   secret_key, region; stdin => text.  awscli retries 5xx, 429 and
#   SlowDown itself (3 attempts).
sub cs_aws
{
	my ($s3, @args) = @_;
	my %o = ref $args[0] eq 'HASH' ? %{ shift @args } : ();
	local $ENV{AWS_ACCESS_KEY_ID} = $o{access_key} // $s3->{access_key};
	local $ENV{AWS_SECRET_ACCESS_KEY} = $o{secret_key} // $s3->{secret_key};
	local $ENV{AWS_DEFAULT_REGION} = $o{region} // $s3->{region};
	local $ENV{AWS_CONFIG_FILE} = '/dev/null';
	local $ENV{AWS_SHARED_CREDENTIALS_FILE} = '/dev/null';
	local $ENV{AWS_PAGER} = '';
	local $ENV{AWS_EC2_METADATA_DISABLED} = 'true';
	# awscli 2.23 and later checksum every upload by default, in an
	# aws-chunked body with a trailer that the gateway of Ceph 16 refuses
	# (XAmzContentSHA256Mismatch): only where the operation requires it
	local $ENV{AWS_REQUEST_CHECKSUM_CALCULATION} = 'when_required';
	local $ENV{AWS_RESPONSE_CHECKSUM_VALIDATION} = 'when_required';
	delete local $ENV{AWS_SESSION_TOKEN};
	delete local $ENV{AWS_PROFILE};
	my @cmd = (_aws_program(), '--endpoint-url', $o{endpoint} // $s3->{endpoint}, @args);
	my ($in, $out, $err) = ($o{stdin} // '', '', '');
	IPC::Run::run(\@cmd, '<', \$in, '>', \$out, '2>', \$err,
		IPC::Run::timeout(300));
	note("aws @args: exit " . ($? >> 8)
		  . ($err ne '' ? '; stderr: ' . substr($err, -1000) : ''));
	return ($? >> 8, $out, $err);
}

# cs_wait_bucket_covers($node, $db, $s3, $bucket, $prefix, $lsn, $name)
#   Waits (180 s at most; one test) until every commit up to $lsn of the
#   newest generation of $db's archive lies in a sealed, compressed segment
#   that the bucket lists (awscli) as <prefix>/generations/<gen>/wal/
#   <index>.wal.gz: the newest (active) local segment starts past $lsn, no
#   segment before it is raw, and each is listed.  status().
#   replica_flushed_lsn alone is not enough: it counts the active
#   segment's tail objects, which readers of finished files do not read.
#   The segment holding $lsn is sealed only once a commit follows it and
#   segment_timeout passes: the caller makes traffic after $lsn.
sub cs_wait_bucket_covers
{
	my ($node, $db, $s3, $bucket, $prefix, $lsn, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $gen = "(SELECT max(generation) FROM changestream.generations())";
	my $sql = qq{
SELECT string_agg(segment_index::text || ':' || compressed::text, ' ' ORDER BY segment_index)
       || ' | ' || ((SELECT start_lsn FROM changestream.wal_segments($gen)
                      ORDER BY segment_index DESC LIMIT 1) > '$lsn'::pg_lsn)::text
       || ' | ' || $gen
  FROM changestream.wal_segments($gen)
 WHERE segment_index < (SELECT max(segment_index) FROM changestream.wal_segments($gen))};
	my $last = '';
	my $deadline = time() + 180;
	while (time() < $deadline)
	{
		$last = $node->safe_psql($db, $sql);
		my ($segs, $past, $g) = split / \| /, $last;
		if (defined $g && $past eq 'true' && $segs !~ /:false/)
		{
			my $objects = cs_bucket_objects($s3, $bucket, $prefix);
			my @missing = grep { !exists $objects->{sprintf('generations/%s/wal/%016x.wal.gz', $g, $_)} }
			  map { (split /:/)[0] } split / /, $segs;
			return pass($name) if !@missing;
			$last .= ' | not listed: ' . join(',', @missing);
		}
		sleep(1);
	}
	diag("segments index:compressed | active starts past $lsn | generation: $last");
	return fail($name);
}

# cs_bucket_objects($s3, $bucket, $prefix) -> { key under "$prefix/" => size }
#   The objects under the prefix, as awscli's ListObjectsV2 gives them (the
#   oracle of the replica tests); dies if the listing fails.
sub cs_bucket_objects
{
	my ($s3, $bucket, $prefix) = @_;
	my ($rc, $out, $err) = cs_aws($s3, 's3api', 'list-objects-v2',
		'--bucket', $bucket, '--prefix', "$prefix/", '--query',
		'Contents[].[Key,Size]', '--output', 'text');
	die "list-objects-v2 failed: $err" if $rc != 0;
	my %o;
	for my $line (split /\n/, $out)
	{
		my ($key, $size) = split /\s+/, $line;
		next unless defined $size && $key =~ s{^\Q$prefix\E/}{};
		$o{$key} = $size;
	}
	return \%o;
}

# cs_s3_bucket($s3, [$tag]) -> the name of a new, empty bucket
#   "cs-<tag>-<pid>-<n>", tag default "t" (lower case, digits and "-"); a
#   test makes its own buckets and never reuses another test's.
sub cs_s3_bucket
{
	my ($s3, $tag) = @_;
	$tag = lc($tag // 't');
	$tag =~ s/[^a-z0-9-]/-/g;
	my $name = substr(sprintf('cs-%s-%d-%d', $tag, $$, ++$bucket_seq), 0, 63);
	my ($rc, $out, $err) = cs_aws($s3, 's3api', 'create-bucket', '--bucket', $name);
	die "create-bucket $name failed: $err" if $rc != 0;
	return $name;
}

# cs_replica_conf($s3, bucket => NAME, prefix => PREFIX, dir => DIR,
#                 [endpoint => URL]) -> configuration text
#   Writes DIR/credentials (the store's keys as profile [default] of an AWS
#   shared credentials file, mode 0600; replaced whole on every call) and
#   returns the four lines that point changestream's replica at
#   s3://NAME/PREFIX: replica_url, replica_endpoint (the store's, or URL,
#   e.g. a fault proxy's), replica_region (the store's) and
#   replica_credentials (DIR/credentials), each ending in a newline.
sub cs_replica_conf
{
	my ($s3, %o) = @_;
	for my $k (qw(bucket prefix dir))
	{
		croak "cs_replica_conf: $k is required" unless defined $o{$k};
	}
	my $creds = "$o{dir}/credentials";
	# written aside and renamed: a server already using the file never
	# reads it half written
	open(my $fh, '>', "$creds.new") or die "open $creds.new: $!";
	print $fh "[default]\naws_access_key_id = $s3->{access_key}\n"
	  . "aws_secret_access_key = $s3->{secret_key}\n";
	close($fh) or die "close $creds.new: $!";
	chmod(0600, "$creds.new") or die "chmod $creds.new: $!";
	rename("$creds.new", $creds) or die "rename $creds.new: $!";
	my $endpoint = $o{endpoint} // $s3->{endpoint};
	return "changestream.replica_url = 's3://$o{bucket}/$o{prefix}'\n"
	  . "changestream.replica_endpoint = '$endpoint'\n"
	  . "changestream.replica_region = '$s3->{region}'\n"
	  . "changestream.replica_credentials = '$creds'\n";
}

# cs_s3_curl($s3, [\%opts,] @curl_args) -> ($exit_code, $stdout, $stderr)
#   curl -sS with SigV4 signing for the store's region and keys (curl's own
#   signer, an oracle independent of awscli's) and an unsigned payload
#   (x-amz-content-sha256: UNSIGNED-PAYLOAD: curl does not send the header
#   the gateway requires).  %opts overrides access_key, secret_key, region.
#   curl's signer sorts no query parameters: give at most one.  The URL is
#   in @curl_args (e.g. "$s3->{endpoint}/$bucket/$key").
sub cs_s3_curl
{
	my ($s3, @args) = @_;
	my %o = ref $args[0] eq 'HASH' ? %{ shift @args } : ();
	my $region = $o{region} // $s3->{region};
	my @cmd = (
		'curl', '-sS',
		'--aws-sigv4', "aws:amz:$region:s3",
		'--user', ($o{access_key} // $s3->{access_key}) . ':'
		  . ($o{secret_key} // $s3->{secret_key}),
		'-H', 'x-amz-content-sha256: UNSIGNED-PAYLOAD', @args);
	my ($in, $out, $err) = ('', '', '');
	IPC::Run::run(\@cmd, '<', \$in, '>', \$out, '2>', \$err,
		IPC::Run::timeout(300));
	return ($? >> 8, $out, $err);
}

1;
