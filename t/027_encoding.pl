
# A non-UTF8 database (issue 9, item 5).  changestream.database is a
# LATIN1 database with a table "café" and accented values:
#   - the snapshot file is UTF-8 (as COPY with client_encoding = UTF8
#     writes it), its manifest is valid JSON and records the source
#     encoding, as does the generation's identity file;
#   - zcat snapshot | psql loads it into a UTF8 database, and the rows
#     there equal the source rows (the oracle: the source table, read with
#     client_encoding = UTF8);
#   - wal_records() returns the stream as archived: text values in the
#     source encoding (LATIN1 bytes);
# and a SQL_ASCII database is recorded as SQL_ASCII and its bytes pass
# through unchanged.
use strict;
use warnings;

use Encode qw(decode);
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ChangestreamTest;
use SnapshotTest;

my $node = cs_new_node('latin1', conf => qq(
changestream.database = 'latin1db'
));
$node->start;
$node->safe_psql('postgres', q{
CREATE DATABASE latin1db ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
CREATE DATABASE utf8db ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
CREATE DATABASE asciidb ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
});

# The statements below are UTF-8 bytes; the server converts them to LATIN1.
my $ddl = qq{
SET client_encoding = 'UTF8';
CREATE TABLE "caf\xc3\xa9" (id int PRIMARY KEY, "pr\xc3\xa9nom" text, note text);
};
my $rows = qq{
SET client_encoding = 'UTF8';
INSERT INTO "caf\xc3\xa9" VALUES
  (1, 'Cr\xc3\xa8me br\xc3\xbbl\xc3\xa9e', 'na\xc3\xafve \xc2\xbd \xc2\xa7'),
  (2, '\xc3\x86r\xc3\xb8sk\xc3\xb8bing', E'tab\\there \xc3\xbf'),
  (3, 'plain', NULL);
};
$node->safe_psql('latin1db', $ddl . $rows . q{
CREATE EXTENSION changestream;
CREATE PUBLICATION changestream FOR ALL TABLES;
});
$node->safe_psql('utf8db', $ddl);
cs_start_archiving($node, db => 'latin1db');
my ($gen) = cs_single_generation($node, 'latin1', 'latin1db');

my @snaps = snap_list($node, $gen, 'latin1db');
is(scalar(@snaps), 1, 'the generation opened with a snapshot');
my $path = snap_path($node, $gen, $snaps[0]{file});
my $bytes = '';
IPC::Run::run([ 'gzip', '-dc', '--', $path ], '>', \$bytes) or die "gzip -dc $path";

ok(eval { decode('UTF-8', $bytes, Encode::FB_CROAK | Encode::LEAVE_SRC); 1 },
	'the snapshot file is valid UTF-8');
like($bytes, qr/^COPY public\."caf\xc3\xa9" \("id", "pr\xc3\xa9nom", "note"\)|^COPY public\."caf\xc3\xa9" \(id, "pr\xc3\xa9nom", note\)/m,
	'the COPY line names the table and columns in UTF-8');
like($bytes, qr/^1\tCr\xc3\xa8me br\xc3\xbbl\xc3\xa9e\tna\xc3\xafve \xc2\xbd \xc2\xa7$/m,
	'accented values are UTF-8 in the snapshot');
my ($json) = $bytes =~ /^-- manifest: (.*)$/m;
my $manifest = eval { JSON::PP->new->utf8->decode($json) };
ok($manifest, 'the manifest is valid JSON') or diag($@);
is($manifest->{source_encoding}, 'LATIN1', 'the manifest records the source encoding');
is($manifest->{encoding}, 'UTF8', 'and the file encoding');
is($manifest->{tables}[0]{name}, "caf\x{e9}", 'the manifest names the table café');
like($bytes, qr/^-- source_encoding: LATIN1$/m, 'the comment header records it too');
my $identity = slurp_file(cs_archive_dir($node) . "/generations/$gen/generation");
like($identity, qr/^encoding = LATIN1$/m, 'the identity file records the encoding');

# zcat snapshot | psql into a UTF8 database
my ($out, $err) = ('', '');
my $ok = IPC::Run::run([ 'gzip', '-dc', '--', $path ], '|',
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('utf8db') ],
	'>', \$out, '2>', \$err);
ok($ok && $err eq '', 'zcat snapshot | psql loads it into a UTF8 database') or diag($err);
my $q = qq{SET client_encoding = 'UTF8'; SELECT id, "pr\xc3\xa9nom", coalesce(note, 'NULL') FROM "caf\xc3\xa9" ORDER BY id};
is($node->safe_psql('utf8db', $q), $node->safe_psql('latin1db', $q),
	'the loaded rows equal the source rows');

# the stream: as archived, in the source encoding
$node->safe_psql('latin1db',
	qq{SET client_encoding = 'UTF8'; INSERT INTO "caf\xc3\xa9" VALUES (4, '\xc3\xa9t\xc3\xa9', NULL)});
cs_wait_archived($node, db => 'latin1db');
my $hex = $node->safe_psql('latin1db',
	"SELECT encode(data, 'hex') FROM changestream.wal_records('$gen') WHERE get_byte(data, 0) = 73");
like($hex, qr/e974e9/, 'wal_records() returns text values as archived, in LATIN1 ("\xe9t\xe9")');

############################################################################
# SQL_ASCII: recorded as such, bytes passed through

$node->safe_psql('asciidb', qq{
CREATE TABLE raw (id int PRIMARY KEY, b text);
INSERT INTO raw VALUES (1, 'latin1 \xe9 and utf8 \xc3\xa9');
CREATE EXTENSION changestream;
CREATE PUBLICATION changestream FOR ALL TABLES;
});
$node->append_conf('postgresql.conf',
	"changestream.database = 'asciidb'\nchangestream.slot_name = 'ascii_slot'");
$node->restart;
cs_wait_state($node, 'streaming', db => 'asciidb', timeout => 60);
my $agen = $node->safe_psql('asciidb',
	'SELECT max(generation) FROM changestream.generations()');
isnt($agen, $gen, 'another database opens a new generation');
my @asnaps = snap_list($node, $agen, 'asciidb');
my $apath = snap_path($node, $agen, $asnaps[0]{file});
my $abytes = '';
IPC::Run::run([ 'gzip', '-dc', '--', $apath ], '>', \$abytes) or die;
like($abytes, qr/^1\tlatin1 \xe9 and utf8 \xc3\xa9$/m,
	'SQL_ASCII bytes pass through unchanged');
my ($ajson) = $abytes =~ /^-- manifest: (.*)$/m;
my $am = eval { JSON::PP->new->decode($ajson) };
is($am && $am->{source_encoding}, 'SQL_ASCII', 'the manifest records SQL_ASCII');
is($am && $am->{encoding}, 'SQL_ASCII', 'and says the file holds the bytes as stored');
like(slurp_file(cs_archive_dir($node) . "/generations/$agen/generation"),
	qr/^encoding = SQL_ASCII$/m, 'the identity file records SQL_ASCII');

$node->stop;
done_testing();
