--
-- changestream: the SQL surface.
--
-- Runs on a temporary instance with changestream in shared_preload_libraries
-- and changestream.directory set (see test/regress.conf, scripts/test.sh).
-- What the worker archives depends on timing, so this test checks only what
-- is deterministic: settings, function signatures, argument validation,
-- errors and privileges.  The TAP tests in t/ check the archive itself.
--
CREATE EXTENSION changestream;

SELECT e.extversion, n.nspname AS schema
  FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'changestream';

--
-- Settings: defaults, units, bounds and contexts
-- (changestream.directory is left out: its value is a temporary path)
--
SELECT name, setting, unit, vartype, context, boot_val, min_val, max_val
  FROM pg_settings
 WHERE name LIKE 'changestream.%' AND name <> 'changestream.directory'
 ORDER BY name;
SELECT current_setting('changestream.directory') <> '' AS directory_is_set;

\set VERBOSITY default
-- the prefix is reserved: no made-up changestream.* parameters
SET changestream.no_such_setting = 'on';
\echo :SQLSTATE
-- reloadable settings cannot be changed in a session
SET changestream.segment_size = '1MB';
\echo :SQLSTATE
-- bad values are rejected with a clear message
ALTER SYSTEM SET changestream.segment_size = '1kB';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.segment_size = '2GB';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.compression_level = 10;
\echo :SQLSTATE
ALTER SYSTEM SET changestream.status_interval = '-1s';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.flush_interval = 'soon';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.directory = 'relative/archive';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.slot_name = 'Not-A-Slot';
\echo :SQLSTATE
-- good values with units are accepted
ALTER SYSTEM SET changestream.segment_size = '64MB';
ALTER SYSTEM SET changestream.segment_timeout = '30s';
ALTER SYSTEM RESET changestream.segment_size;
ALTER SYSTEM RESET changestream.segment_timeout;

--
-- The replica's settings: bad values rejected with the reason
--
ALTER SYSTEM SET changestream.replica_url = 'http://bucket/prefix';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_url = 's3:///prefix';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_url = 's3://Bad_Bucket/prefix';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_url = 's3://ab';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_url = 's3://192.168.1.10';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_url = 's3://bucket//prefix';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_url = 's3://bucket/db1/../other';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_url = 's3://bucket/./db1';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_endpoint = 'ftp://127.0.0.1:7480';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_endpoint = 'http://127.0.0.1:99999';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_endpoint = 'http://user:secret@store:7480';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_endpoint = 'http://store:7480/path';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_region = 'US East';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_uri_style = 'virtual';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_credentials = 'relative/credentials';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_profile = '[default]';
\echo :SQLSTATE
ALTER SYSTEM SET changestream.replica_ca_file = 'ca.pem';
\echo :SQLSTATE
-- good values
ALTER SYSTEM SET changestream.replica_url = 's3://my-bucket.example/db1/archive/';
ALTER SYSTEM SET changestream.replica_endpoint = 'http://[::1]:7480/';
ALTER SYSTEM SET changestream.replica_credentials = 'env';
ALTER SYSTEM RESET changestream.replica_url;
ALTER SYSTEM RESET changestream.replica_endpoint;
ALTER SYSTEM RESET changestream.replica_credentials;
-- with no replica configured, replica_check() says so in its first row
SELECT check_name, ok, detail, hint IS NOT NULL AS has_hint
  FROM changestream.replica_check();

--
-- The SigV4 signer against AWS's published examples ("Signature
-- Calculations for the Authorization Header: Transferring Payload in a
-- Single Chunk", Amazon S3 API reference): examplebucket, us-east-1,
-- 20130524T000000Z, the documentation's example keys.  Each expected
-- signature is the one AWS publishes.
--
SELECT name,
       changestream.sigv4_authorization(method, path, query, headers, payload,
         '20130524T000000Z', 'us-east-1', 'AKIAIOSFODNN7EXAMPLE',
         'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY') AS authorization
  FROM (VALUES
    ('GET object', 'GET', '/test.txt', '',
     ARRAY['Host:examplebucket.s3.amazonaws.com', 'Range:bytes=0-9',
           'x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
           'x-amz-date:20130524T000000Z'],
     'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'),
    ('PUT object', 'PUT', '/test$file.text', '',
     ARRAY['Host:examplebucket.s3.amazonaws.com',
           'Date:Fri, 24 May 2013 00:00:00 GMT',
           'x-amz-date:20130524T000000Z',
           'x-amz-storage-class:REDUCED_REDUNDANCY',
           'x-amz-content-sha256:' || encode(sha256('Welcome to Amazon S3.'), 'hex')],
     encode(sha256('Welcome to Amazon S3.'), 'hex')),
    ('GET bucket lifecycle', 'GET', '/', 'lifecycle',
     ARRAY['Host:examplebucket.s3.amazonaws.com',
           'x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
           'x-amz-date:20130524T000000Z'],
     'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'),
    ('GET bucket (list objects)', 'GET', '/', 'prefix=J&max-keys=2',
     ARRAY['Host:examplebucket.s3.amazonaws.com',
           'x-amz-date:20130524T000000Z',
           'x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'],
     'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'))
    AS v(name, method, path, query, headers, payload);
-- the published signatures, compared: all four must match
SELECT name, split_part(changestream.sigv4_authorization(method, path, query, headers,
         'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
         '20130524T000000Z', 'us-east-1', 'AKIAIOSFODNN7EXAMPLE',
         'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'), 'Signature=', 2) = published AS matches
  FROM (VALUES
    ('GET object', 'GET', '/test.txt', '',
     ARRAY['host:examplebucket.s3.amazonaws.com', 'range:bytes=0-9',
           'x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
           'x-amz-date:20130524T000000Z'],
     'f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41'),
    ('GET bucket lifecycle', 'GET', '/', 'lifecycle=',
     ARRAY['host:examplebucket.s3.amazonaws.com',
           'x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
           'x-amz-date:20130524T000000Z'],
     'fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543'),
    ('GET bucket (list objects)', 'GET', '/', 'max-keys=2&prefix=J',
     ARRAY['host:examplebucket.s3.amazonaws.com',
           'x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
           'x-amz-date:20130524T000000Z'],
     '34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7'))
    AS v(name, method, path, query, headers, published);
SELECT split_part(changestream.sigv4_authorization('PUT', '/test$file.text', '',
         ARRAY['host:examplebucket.s3.amazonaws.com',
               'date:Fri, 24 May 2013 00:00:00 GMT',
               'x-amz-date:20130524T000000Z',
               'x-amz-storage-class:REDUCED_REDUNDANCY',
               'x-amz-content-sha256:44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072'],
         '44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072',
         '20130524T000000Z', 'us-east-1', 'AKIAIOSFODNN7EXAMPLE',
         'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'), 'Signature=', 2)
       = '98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd' AS put_object_matches,
       encode(sha256('Welcome to Amazon S3.'), 'hex')
       = '44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072' AS payload_hash_matches;
-- one byte of the secret changes the signature
SELECT changestream.sigv4_authorization('GET', '/test.txt', '',
         ARRAY['host:examplebucket.s3.amazonaws.com'], 'UNSIGNED-PAYLOAD',
         '20130524T000000Z', 'us-east-1', 'AKIAIOSFODNN7EXAMPLE', 'secret-a')
    <> changestream.sigv4_authorization('GET', '/test.txt', '',
         ARRAY['host:examplebucket.s3.amazonaws.com'], 'UNSIGNED-PAYLOAD',
         '20130524T000000Z', 'us-east-1', 'AKIAIOSFODNN7EXAMPLE', 'secret-b') AS secret_matters;
-- bad arguments
SELECT changestream.sigv4_authorization('GET', 'test.txt', '', ARRAY[]::text[], '',
         '20130524T000000Z', 'us-east-1', 'k', 's');
\echo :SQLSTATE
SELECT changestream.sigv4_authorization('GET', '/', '', ARRAY['no colon'], '',
         '20130524T000000Z', 'us-east-1', 'k', 's');
\echo :SQLSTATE
SELECT changestream.sigv4_authorization('GET', '/', '', ARRAY['host:h'], '',
         '2013-05-24', 'us-east-1', 'k', 's');
\echo :SQLSTATE

--
-- Functions: signatures; EXECUTE for pg_monitor on the read-only ones
--
SELECT p.proname,
       p.pronargs AS in_args,
       p.pronargdefaults AS defaults,
       pg_get_function_result(p.oid) AS result,
       p.proisstrict AS strict,
       p.provolatile AS volatility
  FROM pg_proc p
 WHERE p.pronamespace = 'changestream'::regnamespace
 ORDER BY p.proname;
-- every argument and result column, in order
SELECT p.proname, a.ord, a.mode, a.name, a.type::regtype AS type
  FROM pg_proc p,
       unnest(p.proargnames, p.proallargtypes, p.proargmodes)
         WITH ORDINALITY AS a(name, type, mode, ord)
 WHERE p.pronamespace = 'changestream'::regnamespace
 ORDER BY p.proname, a.ord;

SELECT p.proname,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_can_execute,
       has_function_privilege('pg_monitor', p.oid, 'EXECUTE') AS pg_monitor_can_execute,
       has_function_privilege('changestream_reader', p.oid, 'EXECUTE') AS reader_can_execute,
       has_function_privilege('changestream_operator', p.oid, 'EXECUTE') AS operator_can_execute
  FROM pg_proc p
 WHERE p.pronamespace = 'changestream'::regnamespace
 ORDER BY p.proname;
-- every function and view says what it is (\df+, \dv+)
SELECT c.relname
  FROM pg_class c
 WHERE c.relnamespace = 'changestream'::regnamespace AND c.relkind IN ('r', 'v')
   AND obj_description(c.oid, 'pg_class') IS NULL
UNION ALL
SELECT p.proname
  FROM pg_proc p
 WHERE p.pronamespace = 'changestream'::regnamespace
   AND obj_description(p.oid, 'pg_proc') IS NULL;
-- the health view and who may read it; the ready roles
SELECT a.attnum, a.attname, a.atttypid::regtype AS type
  FROM pg_attribute a
 WHERE a.attrelid = 'changestream.stat_archiver'::regclass AND a.attnum > 0
 ORDER BY a.attnum;
SELECT r.rolname,
       has_table_privilege(r.rolname, 'changestream.stat_archiver', 'SELECT') AS can_select
  FROM (VALUES ('public'), ('pg_monitor'), ('changestream_reader'), ('changestream_operator')) AS r(rolname);
SELECT rolname, rolcanlogin, rolsuper,
       pg_has_role('changestream_operator', oid, 'MEMBER') AS operator_is_member
  FROM pg_roles WHERE rolname LIKE 'changestream%' ORDER BY rolname;
SELECT has_schema_privilege('public', 'changestream', 'USAGE') AS public_usage,
       has_schema_privilege('pg_monitor', 'changestream', 'USAGE') AS pg_monitor_usage;

--
-- Schema history: the table only the event triggers write, the triggers,
-- the extension's publication
--
SELECT has_table_privilege('public', 'changestream.ddl_history', 'INSERT') AS public_insert,
       has_table_privilege('public', 'changestream.ddl_history', 'SELECT') AS public_select,
       has_table_privilege('pg_monitor', 'changestream.ddl_history', 'INSERT') AS pg_monitor_insert,
       has_table_privilege('pg_monitor', 'changestream.ddl_history', 'SELECT') AS pg_monitor_select;
SELECT p.proname, p.prosecdef AS security_definer, p.proconfig
  FROM pg_proc p
 WHERE p.pronamespace = 'changestream'::regnamespace AND p.proname LIKE 'ddl%'
 ORDER BY p.proname;
SELECT evtname, evtevent, evtfoid::regproc AS function, evtenabled
  FROM pg_event_trigger WHERE evtname LIKE 'changestream%' ORDER BY evtname;
SELECT p.pubname, p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate,
       (SELECT string_agg(schemaname || '.' || tablename, ', ')
          FROM pg_publication_tables t WHERE t.pubname = p.pubname) AS tables
  FROM pg_publication p WHERE p.pubname = 'changestream_ddl';

--
-- generations() and status(): result columns and types
--
SELECT * FROM changestream.generations() WHERE false;
SELECT count(*) >= 0 AS ok FROM changestream.generations();
SELECT * FROM changestream.status() WHERE false;
SELECT count(*) AS rows,
       pg_typeof(min(state)) AS state_type,
       bool_and(state IN ('disabled', 'starting', 'connecting', 'streaming',
                          'error', 'stopping')) AS state_is_known,
       bool_and(pid IS NULL OR pid > 0) AS pid_ok
  FROM changestream.status();
SELECT pg_typeof(lag_bytes) AS lag_bytes, pg_typeof(flushed_lsn) AS flushed_lsn,
       pg_typeof(last_error_at) AS last_error_at
  FROM changestream.status();
SELECT pg_typeof(commit_rate) AS commit_rate,
       pg_typeof(group_commit_ms) AS group_commit_ms,
       (commit_rate IS NULL) = (group_commit_ms IS NULL) AS null_together,
       group_commit_ms IS NULL OR group_commit_ms BETWEEN 1 AND 200 AS window_ok
  FROM changestream.status();
SELECT pg_typeof(retention_held) AS held,
       pg_typeof(retention_held_since) AS since,
       pg_typeof(retention_held_bytes) AS bytes,
       pg_typeof(retention_held_by_pid) AS pid,
       (retention_held_since IS NOT NULL) = retention_held AS since_iff_held
  FROM changestream.status();

-- the generations() row of each generation that exists equals generation_stats()
SELECT count(*) AS mismatches
  FROM changestream.generations() g
 WHERE (SELECT s.generation FROM changestream.generation_stats(g.generation) s)
       IS DISTINCT FROM g.generation;

--
-- Bad arguments: a generation is 16 lowercase hex digits, nothing else
--
SELECT * FROM changestream.generation_stats('xyz');
\echo :SQLSTATE
SELECT * FROM changestream.generation_stats('../../etc');
\echo :SQLSTATE
SELECT * FROM changestream.generation_stats('');
\echo :SQLSTATE
SELECT * FROM changestream.generation_stats('0123456789abcde');
\echo :SQLSTATE
SELECT * FROM changestream.generation_stats('0123456789abcdef0');
\echo :SQLSTATE
SELECT * FROM changestream.generation_stats('../0123456789abc');
\echo :SQLSTATE
SELECT * FROM changestream.wal_segments('0123456789ABCDEF');
\echo :SQLSTATE
SELECT * FROM changestream.wal_segments(' 0123456789abcde');
\echo :SQLSTATE
SELECT * FROM changestream.wal_records('0123456789abcdeg');
\echo :SQLSTATE
SELECT * FROM changestream.wal_records('zzzzzzzzzzzzzzzz', '0/0', '0/0');
\echo :SQLSTATE
SELECT * FROM changestream.snapshots('../snapshots');
\echo :SQLSTATE
-- wal_records() is not STRICT (its bounds may be NULL), but the generation may not be
SELECT * FROM changestream.wal_records(NULL);
\echo :SQLSTATE
SELECT * FROM changestream.wal_records(NULL, '0/0', NULL);
\echo :SQLSTATE
-- a NULL generation is an error for every function that takes one (22004)
SELECT generation IS NULL AS null_in_null_out FROM changestream.generation_stats(NULL);
SELECT count(*) AS rows FROM changestream.wal_segments(NULL);
SELECT count(*) AS rows FROM changestream.snapshots(NULL);

-- a well-formed generation that does not exist is an error, not an empty result
SELECT * FROM changestream.generation_stats('0000000000000000');
\echo :SQLSTATE
SELECT * FROM changestream.wal_segments('0000000000000000');
\echo :SQLSTATE
SELECT * FROM changestream.wal_records('0000000000000000');
\echo :SQLSTATE
SELECT * FROM changestream.wal_records('0000000000000000', '0/0', 'FFFFFFFF/FFFFFFFF');
\echo :SQLSTATE
SELECT * FROM changestream.snapshots('0000000000000000');
\echo :SQLSTATE

-- changes(), verify() and restore(): the same argument checks
SELECT * FROM changestream.changes('xyz');
\echo :SQLSTATE
SELECT * FROM changestream.changes('0000000000000000');
\echo :SQLSTATE
SELECT * FROM changestream.verify('../0123456789abc');
\echo :SQLSTATE
SELECT * FROM changestream.verify('0000000000000000');
\echo :SQLSTATE
SELECT * FROM changestream.restore('scratch', 'xyz');
\echo :SQLSTATE
SELECT * FROM changestream.restore('scratch', '0000000000000000');
\echo :SQLSTATE
-- at most one target
SELECT * FROM changestream.restore('scratch', '0000000000000000', '0/1', now());
\echo :SQLSTATE
-- archive_directory is an absolute path
SELECT * FROM changestream.restore('scratch', archive_directory => 'relative/dir');
\echo :SQLSTATE

-- take_snapshot() needs a streaming archiver; here the worker cannot stream
-- (database "postgres" has no publication), so it is refused at once
-- (sqlstate only: the message names the worker's current state)
\set VERBOSITY sqlstate
SELECT changestream.take_snapshot();
\set VERBOSITY default
-- inside a transaction that holds an xid, both are refused before anything
-- else: the snapshot's slot creation would wait for that transaction forever
BEGIN;
CREATE TEMP TABLE regress_cs_written (i int);
SELECT changestream.take_snapshot();
ROLLBACK;
BEGIN;
CREATE TEMP TABLE regress_cs_written (i int);
SELECT changestream.new_generation();
ROLLBACK;

--
-- Privileges
--
CREATE ROLE regress_cs_nobody;
CREATE ROLE regress_cs_monitor;
GRANT pg_monitor TO regress_cs_monitor;

-- no rights at all: the schema is closed
SET ROLE regress_cs_nobody;
SELECT state FROM changestream.status();
\echo :SQLSTATE
RESET ROLE;

-- usage on the schema is not enough: EXECUTE is revoked from PUBLIC
GRANT USAGE ON SCHEMA changestream TO regress_cs_nobody;
SET ROLE regress_cs_nobody;
SELECT state FROM changestream.status();
\echo :SQLSTATE
SELECT count(*) FROM changestream.generations();
\echo :SQLSTATE
SELECT * FROM changestream.generation_stats('0000000000000000');
\echo :SQLSTATE
SELECT * FROM changestream.wal_segments('0000000000000000');
\echo :SQLSTATE
SELECT * FROM changestream.wal_records('0000000000000000');
\echo :SQLSTATE
SELECT * FROM changestream.snapshots('0000000000000000');
\echo :SQLSTATE
SELECT count(*) FROM changestream.changes();
\echo :SQLSTATE
SELECT count(*) FROM changestream.verify();
\echo :SQLSTATE
SELECT * FROM changestream.restore('scratch');
\echo :SQLSTATE
RESET ROLE;
-- restore() granted: archive_directory stays for superusers
GRANT EXECUTE ON FUNCTION changestream.restore(text, text, pg_lsn, timestamptz, text[], text, boolean, boolean, text) TO regress_cs_nobody;
SET ROLE regress_cs_nobody;
SELECT * FROM changestream.restore('scratch', archive_directory => '/tmp');
\echo :SQLSTATE
RESET ROLE;
REVOKE EXECUTE ON FUNCTION changestream.restore(text, text, pg_lsn, timestamptz, text[], text, boolean, boolean, text) FROM regress_cs_nobody;
REVOKE USAGE ON SCHEMA changestream FROM regress_cs_nobody;

-- pg_monitor may read the archive's statistics ...
SET ROLE regress_cs_monitor;
SELECT count(*) AS rows,
       bool_and(state IN ('disabled', 'starting', 'connecting', 'streaming',
                          'error', 'stopping')) AS state_is_known
  FROM changestream.status();
SELECT count(*) >= 0 AS ok FROM changestream.generations();
SELECT * FROM changestream.generation_stats('not-a-generation');
\echo :SQLSTATE
SELECT count(*) AS rows FROM changestream.snapshots('0000000000000000');
\echo :SQLSTATE
-- ... but not the archived row data: wal_records() returns every published
-- table's rows, whatever the reader's table privileges
SELECT count(*) FROM changestream.wal_records('0000000000000000');
\echo :SQLSTATE
SELECT count(*) FROM changestream.changes('0000000000000000');
\echo :SQLSTATE
-- verify() reports file names and problems only: pg_monitor may call it
SELECT * FROM changestream.verify('0000000000000000');
\echo :SQLSTATE
-- ... and not act: take_snapshot() and new_generation() are for superusers
SELECT changestream.take_snapshot();
\echo :SQLSTATE
SELECT changestream.new_generation();
\echo :SQLSTATE
RESET ROLE;

DROP ROLE regress_cs_nobody;
DROP ROLE regress_cs_monitor;

--
-- Archiving disabled: with changestream.directory empty the archive
-- functions raise 55000 and the worker reports state 'disabled'.
-- (A new connection picks up the reloaded setting; the \if retries once
-- in case the postmaster had not reloaded yet.)
--
ALTER SYSTEM SET changestream.directory = '';
SELECT pg_reload_conf();
\c
SELECT current_setting('changestream.directory') = '' AS reloaded \gset
\if :reloaded
\else
SELECT pg_sleep(3) \g /dev/null
\c
\endif
SELECT current_setting('changestream.directory') AS directory;
SELECT * FROM changestream.generations();
\echo :SQLSTATE
SELECT * FROM changestream.generation_stats('0000000000000000');
\echo :SQLSTATE
SELECT * FROM changestream.changes();
\echo :SQLSTATE
SELECT * FROM changestream.verify();
\echo :SQLSTATE
SELECT * FROM changestream.restore('scratch');
\echo :SQLSTATE
-- the worker notices on its next SIGHUP (wait up to 30 s)
DO $$
BEGIN
  FOR i IN 1..300 LOOP
    EXIT WHEN (SELECT state FROM changestream.status()) = 'disabled';
    PERFORM pg_sleep(0.1);
  END LOOP;
END
$$;
SELECT state FROM changestream.status();
-- back to the test configuration
ALTER SYSTEM RESET changestream.directory;
SELECT pg_reload_conf();
\c
SELECT current_setting('changestream.directory') <> '' AS reloaded \gset
\if :reloaded
\else
SELECT pg_sleep(3) \g /dev/null
\c
\endif
SELECT current_setting('changestream.directory') <> '' AS directory_is_set;
SELECT count(*) >= 0 AS ok FROM changestream.generations();

DROP EXTENSION changestream;
