/* changestream--0.2.sql: SQL surface of the changestream archiver */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION changestream" to load this file. \quit

/*
 * The schema must be the extension's own: a schema changestream that
 * existed before, owned by a role that is not a superuser or open to
 * CREATE by one, could hold objects that the SECURITY DEFINER functions
 * below would resolve (42501).  Every name here is schema-qualified.
 */
DO $$
DECLARE
	owner_super boolean;
	creators text;
BEGIN
	SELECT r.rolsuper INTO owner_super
	  FROM pg_catalog.pg_namespace n
	  JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
	 WHERE n.nspname OPERATOR(pg_catalog.=) 'changestream';
	IF owner_super IS DISTINCT FROM true THEN
		RAISE EXCEPTION 'schema "changestream" is owned by a role that is not a superuser'
			USING ERRCODE = '42501',
				  DETAIL = 'The extension''s SECURITY DEFINER functions resolve objects in that schema; its owner could plant objects there.',
				  HINT = 'Drop or rename that schema (after checking what it holds), then create the extension again.';
	END IF;
	SELECT pg_catalog.string_agg(CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid
									  THEN 'PUBLIC' ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END, ', ')
	  INTO creators
	  FROM pg_catalog.pg_namespace n,
		   LATERAL pg_catalog.aclexplode(n.nspacl) a
	 WHERE n.nspname OPERATOR(pg_catalog.=) 'changestream'
	   AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
	   AND NOT coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r
						  WHERE r.oid OPERATOR(pg_catalog.=) a.grantee), false);
	IF creators IS NOT NULL THEN
		RAISE EXCEPTION 'schema "changestream" grants CREATE to roles that are not superusers: %', creators
			USING ERRCODE = '42501',
				  DETAIL = 'The extension''s SECURITY DEFINER functions resolve objects in that schema; those roles could plant objects there.',
				  HINT = 'REVOKE CREATE ON SCHEMA changestream from them, then create or update the extension again.';
	END IF;
END
$$;

/*
 * generations() -> setof record
 *   One row per generation in changestream.directory, oldest first.
 *   size_bytes counts every file of the generation (bytes on disk).
 *   A generation that cannot be read is still listed: damage says why
 *   (NULL for a sound one), and the columns that could not be read are NULL.
 *   restorable_from_lsn/_time: the oldest snapshot kept, the earliest point
 *   restore() can reach in the generation (later after retention deleted
 *   older history; see changestream.retention).
 *   gap_start_lsn/_end_lsn, gap_start_time/_end_time: the history no
 *   generation holds before this one, from the previous generation's end
 *   (its end_lsn and last archived commit time) to this generation's start
 *   (start_lsn and its opening snapshot's time); restore() refuses a target
 *   there (22023, naming the gap).  NULL when the generation continues the
 *   previous one without a gap (new_generation() hands off at the new
 *   generation's start) or is the oldest.  A gap remains where the previous
 *   generation could not be continued: a lost or recreated slot, a changed
 *   system identifier, timeline, slot, database or plugin options, a wiped,
 *   older or damaged archive.  gap_start_* is NULL when the previous
 *   generation's end cannot be read (its damage column says why).
 *   Errors: 55000 when changestream.directory is not set; file access
 *   SQLSTATEs when generations/ itself cannot be read.
 */
CREATE FUNCTION generations(
	OUT generation text,
	OUT snapshot_count int,
	OUT wal_count int,
	OUT created_at timestamptz,
	OUT updated_at timestamptz,
	OUT start_lsn pg_lsn,
	OUT end_lsn pg_lsn,
	OUT size_bytes bigint,
	OUT damage text,
	OUT restorable_from_lsn pg_lsn,
	OUT restorable_from_time timestamptz,
	OUT gap_start_lsn pg_lsn,
	OUT gap_end_lsn pg_lsn,
	OUT gap_start_time timestamptz,
	OUT gap_end_time timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'changestream_generations'
LANGUAGE C STRICT VOLATILE;

/*
 * generation_stats(generation text) -> record
 *   The generations() row of one generation.
 *   Errors: 22023 if generation is not 16 lowercase hex digits;
 *           22004 if it is NULL; 42704 if no such generation exists.
 */
CREATE FUNCTION generation_stats(
	generation text,
	OUT generation text,
	OUT snapshot_count int,
	OUT wal_count int,
	OUT created_at timestamptz,
	OUT updated_at timestamptz,
	OUT start_lsn pg_lsn,
	OUT end_lsn pg_lsn,
	OUT size_bytes bigint,
	OUT damage text,
	OUT restorable_from_lsn pg_lsn,
	OUT restorable_from_time timestamptz,
	OUT gap_start_lsn pg_lsn,
	OUT gap_end_lsn pg_lsn,
	OUT gap_start_time timestamptz,
	OUT gap_end_time timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'changestream_generation_stats'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;

/*
 * wal_segments(generation text) -> setof record
 *   The WAL segments of a generation in index order.  start_lsn is the
 *   archive's position of record when the segment was opened; end_lsn its
 *   position of record at the segment's last valid record.
 *   Errors: as generation_stats().
 */
CREATE FUNCTION wal_segments(
	generation text,
	OUT segment_index bigint,
	OUT file_name text,
	OUT start_lsn pg_lsn,
	OUT end_lsn pg_lsn,
	OUT compressed bool,
	OUT size_bytes bigint,
	OUT modified_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'changestream_wal_segments'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;

/*
 * wal_records(generation text, start_lsn pg_lsn, end_lsn pg_lsn) -> setof record
 *   Every archived pgoutput message of the generation in stream order, read
 *   from raw and gzip segments alike.  lsn and wal_end are the XLogData
 *   header's dataStart and walEnd as the walsender sent them; sent_at its
 *   send time.  With bounds, only transactions whose commit LSN lies in
 *   [start_lsn, end_lsn] (and messages outside transactions whose own LSN
 *   does) are returned; NULL means unbounded.
 *   Errors: as generation_stats(); XX001 if a sealed segment is corrupt.
 */
CREATE FUNCTION wal_records(
	generation text,
	start_lsn pg_lsn DEFAULT NULL,
	end_lsn pg_lsn DEFAULT NULL,
	OUT lsn pg_lsn,
	OUT wal_end pg_lsn,
	OUT sent_at timestamptz,
	OUT data bytea)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'changestream_wal_records'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;

/*
 * status() -> setof record
 *   One row per archived database (changestream.databases, or
 *   changestream.database alone; docs/databases.md) describing its
 *   archiver, read from shared memory; database names it.
 *   lag_bytes: bytes of WAL the server has flushed that are not yet durable
 *   in the archive (local server), or received minus flushed (remote).
 *   compressor_pid .. last_compress_error_at: the compressor worker;
 *   raw_sealed_segments is what it found at its last look (NULL before).
 *   last_retention_at: the last retention run (NULL: none since the server
 *   started); retention_freed_bytes: bytes it deleted since then.
 *   compression_deferred: the compressor holds back while the archiver
 *   catches up with a backlog (it starts a segment only once 4 sealed
 *   segments wait raw).
 *   commit_rate: transactions archived a second (commits/s) over the
 *   archiver's last period of measurement (at least 100 ms);
 *   group_commit_ms: the group commit window it sizes (ms): 5 up to 1,200
 *   commits/s, 20 from 3,000 on, linear between, at most flush_interval,
 *   and flush_interval while catching up.  Both NULL until an archiving
 *   session has published them.
 *   retention_held: the last retention run kept files the window would let
 *   go, because a reader pinned them (a transaction that read them, or a
 *   call in progress); retention_held_since: when that began (each run
 *   since was held back), retention_held_bytes: what the last run could
 *   not free (bytes on disk), retention_held_by_pid: the backend whose pin
 *   kept the most (pg_stat_activity.pid).  The three are NULL when
 *   retention is not held back.
 *   handoff_pending: a requested new generation's snapshot is taken and
 *   the archiver still writes the generation before it, until the stream
 *   reaches the new one's start; handoff_generation, handoff_lsn: that
 *   generation and its start (NULL when none is pending).  take_snapshot()
 *   and new_generation() are refused while one is pending.
 *   replica_state .. replica_bytes_sent: the uploader (docs/DESIGN.md
 *   section 15).  replica_state: idle, uploading, backoff (a retryable
 *   failure: it tries again after a delay) or error (a setting, the keys,
 *   the bucket, or a conflict: it tries again, slowly); 'off' when
 *   changestream.replica_url is set but no uploader runs (it is started
 *   only when the setting is set at server start), NULL without a
 *   replica.  replica_flushed_lsn: the end of the newest segment in the
 *   bucket with every one before it (the remote durable position);
 *   replica_lag_bytes: flushed_lsn minus it, in the same generation
 *   (NULL otherwise).  replica_backlog_files and _bytes: finished local
 *   files not in the bucket yet (sealed segments, snapshots; bytes on
 *   disk).  The request counters and replica_bytes_sent (request bodies)
 *   count since the server started.
 *   slot_wal_status .. slot_wal_limit_bytes: the WAL the archiver's slot
 *   keeps on the local server (NULL when the slot is elsewhere or
 *   missing): pg_replication_slots' wal_status and safe_wal_size, the
 *   bytes from its restart_lsn to the server's WAL position, and
 *   max_slot_wal_keep_size in bytes (NULL: unlimited, so a stuck archive
 *   can fill pg_wal; the maintenance worker warns in the log).
 *   last_commit_time: the commit time of the newest transaction the
 *   archive holds durably; received_commit_time: that of the newest
 *   transaction received (later than last_commit_time while one waits to
 *   be made durable).  Both NULL until one since the server started.
 *   replica_lag_seconds: how long the oldest change the archive holds
 *   durably and the bucket lacks has waited, in seconds (0: the bucket
 *   holds everything flushed; NULL without a running uploader or before
 *   the first flush); docs/replica.md.  state is waiting_for_replica
 *   while changestream.replica_max_backlog holds the archiver back.
 *   archiver_failures: the archiver's sessions that ended in an error
 *   (each is retried after a backoff), and its starts that could not
 *   connect to the database; snapshot_failures: snapshot workers
 *   (take_snapshot(), snapshot_interval) that ended without a durable
 *   snapshot; replica_failures: the uploader's failed passes (state
 *   backoff or error; the server's one uploader, NULL without a replica).
 *   They count in shared memory from failures_since: the server's start
 *   (a crash restart included) or when the database joined
 *   changestream.databases; they are not kept across a restart.
 */
CREATE FUNCTION status(
	OUT pid int,
	OUT state text,
	OUT database text,
	OUT slot text,
	OUT generation text,
	OUT segment_index bigint,
	OUT received_lsn pg_lsn,
	OUT flushed_lsn pg_lsn,
	OUT confirmed_flush_lsn pg_lsn,
	OUT lag_bytes bigint,
	OUT last_message_at timestamptz,
	OUT last_flush_at timestamptz,
	OUT messages bigint,
	OUT transactions bigint,
	OUT bytes bigint,
	OUT last_error text,
	OUT last_error_at timestamptz,
	OUT snapshot_table text,
	OUT snapshot_rows bigint,
	OUT waiting_for text,
	OUT tables_without_replica_identity text,
	OUT compressor_pid int,
	OUT raw_sealed_segments bigint,
	OUT compressed_segments bigint,
	OUT last_compress_error text,
	OUT last_compress_error_at timestamptz,
	OUT last_retention_at timestamptz,
	OUT retention_freed_bytes bigint,
	OUT compression_deferred boolean,
	OUT commit_rate double precision,
	OUT group_commit_ms int,
	OUT retention_held boolean,
	OUT retention_held_since timestamptz,
	OUT retention_held_bytes bigint,
	OUT retention_held_by_pid int,
	OUT handoff_pending boolean,
	OUT handoff_generation text,
	OUT handoff_lsn pg_lsn,
	OUT replica_state text,
	OUT replica_pid int,
	OUT replica_flushed_lsn pg_lsn,
	OUT replica_lag_bytes bigint,
	OUT replica_backlog_files bigint,
	OUT replica_backlog_bytes bigint,
	OUT replica_last_upload_at timestamptz,
	OUT replica_last_error text,
	OUT replica_last_error_at timestamptz,
	OUT replica_put_requests bigint,
	OUT replica_get_requests bigint,
	OUT replica_list_requests bigint,
	OUT replica_delete_requests bigint,
	OUT replica_bytes_sent bigint,
	OUT slot_wal_status text,
	OUT slot_retained_bytes bigint,
	OUT slot_safe_wal_size bigint,
	OUT slot_wal_limit_bytes bigint,
	OUT last_commit_time timestamptz,
	OUT received_commit_time timestamptz,
	OUT replica_lag_seconds double precision,
	OUT archiver_failures bigint,
	OUT snapshot_failures bigint,
	OUT replica_failures bigint,
	OUT failures_since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'changestream_status'
LANGUAGE C STRICT VOLATILE;

/*
 * snapshots(generation text) -> setof record
 *   The snapshots of a generation, oldest first, read from each file's
 *   manifest: consistent LSN, table and row counts, bytes on disk.
 *   Errors: as generation_stats().
 */
CREATE FUNCTION snapshots(
	generation text,
	OUT lsn pg_lsn,
	OUT file_name text,
	OUT table_count int,
	OUT row_count bigint,
	OUT size_bytes bigint,
	OUT created_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'changestream_snapshots'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;

/*
 * take_snapshot() -> pg_lsn
 *   Take a snapshot of the published tables now, in a "changestream
 *   snapshot" background worker with a temporary slot, while the archiver
 *   keeps streaming.  Returns the snapshot's consistent LSN once the file
 *   is durable.  Errors: 55000 when the archiver is not streaming; 55006
 *   when a snapshot is already being taken; 53000 when no background
 *   worker slot is free; the snapshot worker's own SQLSTATE when the
 *   snapshot fails (58000 when the worker ends without an error).
 */
CREATE FUNCTION take_snapshot()
RETURNS pg_lsn
AS 'MODULE_PATHNAME', 'changestream_take_snapshot'
LANGUAGE C STRICT VOLATILE;

/*
 * new_generation() -> text
 *   Ask the archiver to close the current generation and open a new one
 *   (with its opening snapshot); returns the new generation once it
 *   exists.  Accepted while the archiver streams and while it retries
 *   after an error: the damaged newest generation is then left as it is.
 *   Errors: 55000 when the archiver is not running.
 */
CREATE FUNCTION new_generation()
RETURNS text
AS 'MODULE_PATHNAME', 'changestream_new_generation'
LANGUAGE C STRICT VOLATILE;

REVOKE ALL ON FUNCTION generations() FROM PUBLIC;
REVOKE ALL ON FUNCTION generation_stats(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION wal_segments(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION wal_records(text, pg_lsn, pg_lsn) FROM PUBLIC;
REVOKE ALL ON FUNCTION status() FROM PUBLIC;
REVOKE ALL ON FUNCTION snapshots(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION take_snapshot() FROM PUBLIC;
REVOKE ALL ON FUNCTION new_generation() FROM PUBLIC;

GRANT USAGE ON SCHEMA changestream TO pg_monitor;
GRANT EXECUTE ON FUNCTION generations() TO pg_monitor;
GRANT EXECUTE ON FUNCTION generation_stats(text) TO pg_monitor;
GRANT EXECUTE ON FUNCTION wal_segments(text) TO pg_monitor;
-- wal_records() returns row data of every published table: not a
-- monitoring function, so superusers only, or by explicit GRANT.
GRANT EXECUTE ON FUNCTION status() TO pg_monitor;
GRANT EXECUTE ON FUNCTION snapshots(text) TO pg_monitor;
-- take_snapshot() and new_generation() act: superusers only, or by GRANT.

/*
 * changes(generation, start_lsn, end_lsn, start_time, end_time, relations)
 *   -> setof record
 *   The archived changes of a generation (NULL: the newest) as rows, in
 *   commit order, decoded with the Relation in force at each change.
 *   A transaction is returned when its commit LSN lies in
 *   [start_lsn, end_lsn] and its commit time in [start_time, end_time]
 *   (NULL: unbounded); relations keeps changes to the named tables
 *   ("schema.table" or "table").  action is insert, update, delete,
 *   truncate (one row per table), message, or ddl: a row of the schema
 *   history (ddl_history), named by the table the command affected, with
 *   the record in new_row.  Row values are the archived
 *   text form as JSON strings (SQL NULL as JSON null), json and jsonb
 *   columns embedded, so jsonb_populate_record(NULL::t, new_row) gives the
 *   typed row back (a json value jsonb cannot hold, e.g. with \u0000, is
 *   a string of its exact text, with a WARNING).  old_row is the old key (the whole old row under
 *   REPLICA IDENTITY FULL); unchanged TOASTed columns are left out of
 *   new_row and listed in unchanged_columns.
 *   Errors: 22023 malformed generation; 42704 no such generation;
 *           55000 changestream.directory not set; 54000 a column value
 *           longer than a jsonb string may be (268435455 bytes); XX001
 *           damaged archive (file and offset named).
 */
CREATE FUNCTION changes(
	generation text DEFAULT NULL,
	start_lsn pg_lsn DEFAULT NULL,
	end_lsn pg_lsn DEFAULT NULL,
	start_time timestamptz DEFAULT NULL,
	end_time timestamptz DEFAULT NULL,
	relations text[] DEFAULT NULL,
	OUT commit_lsn pg_lsn,
	OUT commit_time timestamptz,
	OUT xid xid,
	OUT ordinal int,
	OUT action text,
	OUT schema_name text,
	OUT table_name text,
	OUT old_row jsonb,
	OUT new_row jsonb,
	OUT unchanged_columns text[])
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'changestream_changes'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;

/*
 * verify(generation text DEFAULT NULL, source text DEFAULT NULL,
 *        full boolean DEFAULT false) -> setof record
 *   Reads a generation (NULL: all of them) without trusting anything: every
 *   frame CRC, every message through the decoder, segment continuity and
 *   order, strictly increasing commit LSNs, each snapshot's gzip stream,
 *   manifest and row and table counts, and a snapshot at the generation's
 *   start.  One row per problem (file_name relative to the generation's
 *   directory, byte_offset in the uncompressed stream); no row for a sound
 *   archive.  source: 'auto' (NULL: the local archive where it holds the
 *   generations, else the replica's bucket), 'local', or 'replica': the
 *   bucket of changestream.replica_url, read the same way, and compared
 *   with the local archive (the files both hold have the same size and
 *   CRC-32C; no local file is missing between files the bucket has).
 *   Reading the bucket, an object an earlier call found sound is not
 *   downloaded again while the listing shows it with the same size and
 *   ETag (the record: replica.verified in changestream.directory, else
 *   changestream_replica.verified in the data directory, rewritten at the
 *   end; a NOTICE says how many objects were read and how many taken as
 *   verified); full => true reads every object again.
 *   Errors: 22023 malformed generation or source; 42704 no such
 *           generation; 55000 changestream.directory not set (or, for
 *           'replica', changestream.replica_url); 08006, F0000 the bucket
 *           could not be read (the object named).
 */
CREATE FUNCTION verify(
	generation text DEFAULT NULL,
	source text DEFAULT NULL,
	full boolean DEFAULT false,
	OUT generation text,
	OUT file_name text,
	OUT byte_offset bigint,
	OUT problem text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'changestream_verify'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;

/*
 * restore(target_schema, generation, target_lsn, target_time, tables,
 *         archive_directory, skip_inexact, dry_run, row_filter) -> record
 *   Restores archived tables (tables: "schema.table" or "table"; NULL for
 *   all) as of the last transaction that committed at or before target_lsn
 *   or target_time (at most one; NULL: everything archived), into
 *   target_schema.<table> (NULL: each table's own schema), in the caller's
 *   transaction.  The newest snapshot not after the target is loaded with
 *   COPY, then the archived transactions after it are applied in commit
 *   order (session_replication_role = replica; column changes followed).
 *   Existing target tables must be empty and have the archived columns
 *   (and, for updates and deletes, the key as replica identity index or
 *   primary key); missing ones are created, with the replica identity
 *   key as primary key (following it when the archive shows it change).
 *   Then the sequences the targets' columns own are set past the
 *   restored rows and the snapshot's archived values, never back (a
 *   NOTICE each).  archive_directory (superuser only) reads a
 *   copy of an archive, for disaster recovery; 'replica' (any caller)
 *   reads the bucket of changestream.replica_url, and NULL reads the
 *   local archive where it holds the generation, else that bucket.  NOTICEs report progress.
 *   A table whose existing rows a DDL command changed without archived
 *   changes (ddl_history.rows_changed) between the snapshot and the
 *   target is refused (0A000, naming the command, its LSN and the nearest
 *   exact targets), or, with skip_inexact, left out with a WARNING.
 *   Tables renamed, moved or dropped by recorded DDL follow it; the
 *   tables filter matches a table by any name the history gives it from
 *   the snapshot to the target.  A record of a table the restore never
 *   meets in the archive refuses nothing.  A name in tables that matches
 *   no table of the whole generation (tables()) is refused before any
 *   work (42P01, close names in DETAIL).  dry_run reads the archive to
 *   the target and reports what the restore would do (snapshot, tables,
 *   snapshot_rows: the rows it would load, with row_filter those that
 *   satisfy it; transactions, changes; following the schema history's
 *   drops, renames and refusals) without creating or changing anything.  row_filter (tables required) is one SQL
 *   expression over the table's columns: only rows satisfying it are
 *   loaded from the snapshot and kept through the changes
 *   (docs/restore.md).  snapshot_bytes is the snapshot file's size,
 *   wal_bytes the source WAL from the snapshot to restored_lsn,
 *   restored_tables the archived names of the tables restored.
 *   Errors: 0A000 a table cannot be restored exactly (above), or
 *           row_filter calls a volatile function or cannot follow an
 *           update; 42P01 a name in tables matches nothing archived; 22023 target outside the generation (range in DETAIL), or both
 *           targets given, or row_filter is not one expression or has no tables; 42P07 two tables would share a target; 55000 a
 *           target table is not empty; 42703 a target lacks a column;
 *           42501 archive_directory without superuser, or row level
 *           security of a target would hide rows from the caller; 42704 no
 *           such generation; XX001 damaged archive (file and offset
 *           named), a snapshot manifest's column type included when it is
 *           not the name of a type of this database.
 */
CREATE FUNCTION restore(
	target_schema text,
	generation text DEFAULT NULL,
	target_lsn pg_lsn DEFAULT NULL,
	target_time timestamptz DEFAULT NULL,
	tables text[] DEFAULT NULL,
	archive_directory text DEFAULT NULL,
	skip_inexact boolean DEFAULT false,
	dry_run boolean DEFAULT false,
	row_filter text DEFAULT NULL,
	OUT generation text,
	OUT snapshot_lsn pg_lsn,
	OUT restored_lsn pg_lsn,
	OUT restored_commit_time timestamptz,
	OUT tables int,
	OUT snapshot_rows bigint,
	OUT transactions bigint,
	OUT changes bigint,
	OUT dry_run boolean,
	OUT snapshot_bytes bigint,
	OUT wal_bytes bigint,
	OUT restored_tables text[])
RETURNS record
AS 'MODULE_PATHNAME', 'changestream_restore'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;

REVOKE ALL ON FUNCTION changes(text, pg_lsn, pg_lsn, timestamptz, timestamptz, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION verify(text, text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION restore(text, text, pg_lsn, timestamptz, text[], text, boolean, boolean, text) FROM PUBLIC;

/*
 * tables(generation) -> setof record
 *   Each name a table of the generation (NULL: the newest) had in the
 *   archive: its OID on the archived server (a renamed table has a row per
 *   name), whether a snapshot's manifest lists it, its first and last
 *   sighting (a snapshot's LSN, or the commit LSN of a transaction that
 *   changed it, carried its Relation message or a schema history record
 *   naming it), the changes archived under that name, and its columns as
 *   last archived.  The archive keeps no index of tables: this reads the
 *   snapshots' manifests and decodes the generation's segments once
 *   (docs/restore.md).  The names restore()'s tables and changes()'
 *   relations accept are these.
 *   Errors: 22023 malformed generation; 42704 no such generation; 55000
 *           changestream.directory unset; XX001 damaged archive.
 */
CREATE FUNCTION tables(
	generation text DEFAULT NULL,
	OUT schema_name text,
	OUT table_name text,
	OUT relid oid,
	OUT in_snapshot boolean,
	OUT first_lsn pg_lsn,
	OUT last_lsn pg_lsn,
	OUT changes bigint,
	OUT columns text[])
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'changestream_tables'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;

REVOKE ALL ON FUNCTION tables(text) FROM PUBLIC;
COMMENT ON FUNCTION tables(text) IS 'The tables a generation archives, one row per name, with OID, snapshot presence, first and last sighting, change count and columns.';

/*
 * restore_progress_info() -> setof record, and the view restore_progress
 *   One row per restore() running now, in the manner of
 *   pg_stat_progress_copy: its backend (pid, database, user), start,
 *   phase (checking, loading snapshot, applying changes, setting
 *   sequences, dry run), generation and target, the snapshot chosen with
 *   snapshot_bytes_done of snapshot_bytes_total (the compressed file),
 *   the table being loaded, and applied_lsn (the last transaction
 *   applied, to compare with target_lsn), transactions, changes and
 *   tables so far.  Shared memory, a slot per backend, freed at the end
 *   of the restore's transaction.
 */
CREATE FUNCTION restore_progress_info(
	OUT pid int,
	OUT datid oid,
	OUT userid oid,
	OUT started_at timestamptz,
	OUT phase text,
	OUT dry_run boolean,
	OUT generation text,
	OUT target_lsn pg_lsn,
	OUT target_time timestamptz,
	OUT snapshot_lsn pg_lsn,
	OUT snapshot_bytes_total bigint,
	OUT snapshot_bytes_done bigint,
	OUT table_name text,
	OUT applied_lsn pg_lsn,
	OUT transactions bigint,
	OUT changes bigint,
	OUT tables int)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'changestream_restore_progress_info'
LANGUAGE C STRICT VOLATILE;

CREATE VIEW restore_progress AS
	SELECT p.pid, p.datid, d.datname, p.userid, r.rolname AS usename,
		   p.started_at, p.phase, p.dry_run, p.generation, p.target_lsn,
		   p.target_time, p.snapshot_lsn, p.snapshot_bytes_total,
		   p.snapshot_bytes_done, p.table_name, p.applied_lsn,
		   p.transactions, p.changes, p.tables
	  FROM restore_progress_info() p
	  LEFT JOIN pg_catalog.pg_database d ON d.oid OPERATOR(pg_catalog.=) p.datid
	  LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) p.userid;

REVOKE ALL ON FUNCTION restore_progress_info() FROM PUBLIC;
REVOKE ALL ON TABLE restore_progress FROM PUBLIC;
GRANT SELECT ON TABLE restore_progress TO pg_monitor;
GRANT EXECUTE ON FUNCTION restore_progress_info() TO pg_monitor;
COMMENT ON FUNCTION restore_progress_info() IS 'Internal: the rows of the view restore_progress.';
COMMENT ON VIEW restore_progress IS 'One row per running restore(): phase, snapshot bytes read of the total, last applied LSN against the target, counts.';
-- changes() returns row data like wal_records(): superusers only, or by
-- explicit GRANT.  verify() returns file names and problems only.
GRANT EXECUTE ON FUNCTION verify(text, text, boolean) TO pg_monitor;

/*
 * The replica's client layer (docs/DESIGN.md section 14).
 *
 * replica_check(): a self-test of the bucket changestream.replica_* names,
 * one row per check.  It writes to the bucket (and deletes what it wrote),
 * so superusers only, or roles granted EXECUTE.
 */
CREATE FUNCTION replica_check(
	OUT check_name text,
	OUT ok boolean,
	OUT detail text,
	OUT hint text,
	OUT elapsed_ms double precision)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'changestream_replica_check'
LANGUAGE C STRICT VOLATILE;

/*
 * sigv4_authorization(): the request signer, as a test and diagnostic aid
 * (the regression test checks it against AWS's published examples).  Its
 * arguments include a secret key: superusers only, and test keys only.
 */
CREATE FUNCTION sigv4_authorization(
	method text,
	path text,
	query text,
	headers text[],
	payload_sha256 text,
	amz_date text,
	region text,
	access_key text,
	secret_key text)
RETURNS text
AS 'MODULE_PATHNAME', 'changestream_sigv4_authorization'
LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;

REVOKE ALL ON FUNCTION replica_check() FROM PUBLIC;
REVOKE ALL ON FUNCTION sigv4_authorization(text, text, text, text[], text, text, text, text, text) FROM PUBLIC;

/*
 * Schema history (docs/DESIGN.md section 12).
 *
 * ddl_history: one row per DDL command and table it affects, written in
 * the command's own transaction by the event triggers below, and decoded
 * into the archive through the extension's own publication
 * changestream_ddl (the archiver adds it to pgoutput's publication_names
 * when it exists, and records this table's OID in the generation: readers
 * take rows as schema history only from that OID).  Only the SECURITY
 * DEFINER trigger functions write it: nobody else has any privilege on
 * it, and a logical message, which any role can emit, is never taken for
 * a DDL record.  No statement text is kept (a query string can hold
 * secrets, and restore() never executes one): the command tag and the
 * object identity say what ran.
 *   event: ddl_command_end, sql_drop or table_rewrite.
 *   object_type, object_identity: as pg_event_trigger_ddl_commands() and
 *     pg_event_trigger_dropped_objects() give them.
 *   table_oid, schema_name, table_name: the table affected (for an index
 *     or constraint, its table), named as after the command.
 *   publication: for a change of a publication's tables (ALTER or CREATE
 *     PUBLICATION), the publication; NULL otherwise.
 *   rewrite_reason: table_rewrite's reason bits (1 persistence, 2 default
 *     value, 4 column type, 8 access method); NULL for other events.
 *   columns: the columns whose existing values the command set without
 *     an archived change (ADD COLUMN with a default, ALTER COLUMN TYPE,
 *     ALTER COLUMN DROP EXPRESSION);
 *     NULL when none.
 *   retyped, retyped_to: of those, the columns retyped without USING, and
 *     their new types' OIDs: restore() replays a cast it knows to
 *     be independent of the session (integer widening, numeric to float,
 *     text to varchar...) and refuses every other.
 *   rows_changed: the command changed, or may have changed, existing rows
 *     of the table without sending changes (the table's storage is not
 *     empty: the test does not depend on the command's snapshot): a
 *     rewrite for a volatile default, a default given to existing rows,
 *     any ALTER COLUMN TYPE, a change of persistence (rows written while
 *     unlogged are never decoded), an ALTER TYPE of a type its columns
 *     use, a table added to or removed from a publication.
 *     restore() refuses to replay the table across it.
 *   definition: the table's full definition at the end of the command
 *     (ddl_table_definition(): columns, constraints, indexes, replica
 *     identity, as docs/FORMAT.md section 3.2 describes it) on every
 *     ddl_command_end row, and on the sql_drop rows of a table a
 *     publication stops publishing and of a column another command than
 *     ALTER TABLE dropped (object_type 'table column': DROP DOMAIN ...
 *     CASCADE, say); NULL on table_rewrite rows (the
 *     command's ddl_command_end row carries it) and on the rows of a
 *     dropped table or index.
 *   A dropped index is recorded on its own (sql_drop, object_type
 *   'index', table_oid 0, schema_name and table_name the INDEX's schema
 *   and name: its table can no longer be looked up), so that a reader
 *   holding the table's definition can remove it by name: an index that
 *   DROP INDEX named, and any other index dropped by a command that drops
 *   no table of the index's schema (ALTER TABLE ... DROP COLUMN, DROP ...
 *   CASCADE); an index dropped with its table is not recorded (a table of
 *   its schema is dropped by the same command: an index always lives in
 *   its table's schema).  The index may have belonged to a table that is
 *   not recorded (unlogged, say): a reader ignores a name it does not
 *   hold.
 */
CREATE TABLE ddl_history (
	id bigserial PRIMARY KEY,
	event text NOT NULL,
	command_tag text NOT NULL,
	object_type text,
	object_identity text,
	table_oid oid NOT NULL,
	schema_name text NOT NULL,
	table_name text NOT NULL,
	publication text,
	rewrite_reason int,
	columns text[],
	retyped text[],
	retyped_to oid[],
	rows_changed boolean NOT NULL,
	definition json
);
REVOKE ALL ON TABLE ddl_history FROM PUBLIC;
REVOKE ALL ON SEQUENCE ddl_history_id_seq FROM PUBLIC;
GRANT SELECT ON TABLE ddl_history TO pg_monitor;

/*
 * ddl_columns_set(command pg_ddl_command) -> setof (table_oid oid,
 *   column_name text)
 *   For an ALTER TABLE collected by ddl_command_end: the columns whose
 *   existing values the command may have set without archived changes:
 *   ADD COLUMN with a default (its own, a missing value, or its domain's)
 *   every ALTER COLUMN TYPE (with or without USING: a cast may depend
 *   on the session's settings) and every DROP EXPRESSION (the values
 *   computed stay, never published); for the table and each of its inheritors
 *   (partitions) that has the column.  new_type: the new type of a column
 *   retyped without USING, else NULL.  No row for other commands.
 */
CREATE FUNCTION ddl_columns_set(command pg_ddl_command,
	OUT table_oid oid, OUT column_name text, OUT new_type oid)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'changestream_ddl_columns_set'
LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION ddl_columns_set(pg_ddl_command) FROM PUBLIC;

/*
 * ddl_adds_enum_value(command pg_ddl_command) -> boolean
 *   Is the command collected by ddl_command_end an ALTER TYPE ... ADD
 *   VALUE?  It changes no stored value (RENAME VALUE, with the same tag,
 *   does), and is not recorded.
 */
CREATE FUNCTION ddl_adds_enum_value(command pg_ddl_command)
RETURNS boolean
AS 'MODULE_PATHNAME', 'changestream_ddl_adds_enum_value'
LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION ddl_adds_enum_value(pg_ddl_command) FROM PUBLIC;

/*
 * ddl_table_definition(relid oid) -> json
 *   The full definition of the table relid as the catalog holds it in the
 *   caller's transaction (docs/FORMAT.md section 3.2, "definition": the
 *   snapshot manifest's, read by the same query); NULL when relid is no
 *   ordinary or partitioned table.
 */
CREATE FUNCTION ddl_table_definition(relid oid)
RETURNS json
AS 'MODULE_PATHNAME', 'changestream_ddl_table_definition'
LANGUAGE C STRICT VOLATILE
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION ddl_table_definition(oid) FROM PUBLIC;

/*
 * ddl_recorded_table(relid, any_persistence) -> (schema_name, table_name)
 *   A table whose DDL is recorded: ordinary or partitioned, not ours,
 *   permanent (any_persistence: unlogged too); NULLs for anything else.
 *   Read from the system caches: the catalog as it is now, also under
 *   REPEATABLE READ (a table another session renamed or created since the
 *   transaction's snapshot is seen as it is).
 */
CREATE FUNCTION ddl_recorded_table(relid oid, any_persistence boolean,
	OUT schema_name text, OUT table_name text)
RETURNS record
AS 'MODULE_PATHNAME', 'changestream_ddl_recorded_table'
LANGUAGE C STRICT VOLATILE
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION ddl_recorded_table(oid, boolean) FROM PUBLIC;

/*
 * ddl_typed_tables(typ) -> setof oid
 *   The tables made with CREATE TABLE ... OF typ (callers keep the
 *   recorded ones), read on the catalog as it is now, as ALTER TYPE ...
 *   CASCADE finds them, also under REPEATABLE READ (a typed table another
 *   session created since the transaction's snapshot is found).
 */
CREATE FUNCTION ddl_typed_tables(typ oid)
RETURNS SETOF oid
AS 'MODULE_PATHNAME', 'changestream_ddl_typed_tables'
LANGUAGE C STRICT VOLATILE
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION ddl_typed_tables(oid) FROM PUBLIC;

/*
 * ddl_table_has_rows(relid) -> boolean
 *   Does the table (for a partitioned one, any partition) have storage
 *   that may hold rows?  A size, not a query: no snapshot (REPEATABLE
 *   READ's included) can hide rows from it, and a table whose rows were
 *   all deleted counts as holding rows (conservatively).
 */
CREATE FUNCTION ddl_table_has_rows(relid oid)
RETURNS boolean
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT pg_catalog.pg_relation_size(relid) > 0
		OR EXISTS (SELECT FROM pg_catalog.pg_partition_tree(relid) t
					WHERE pg_catalog.pg_relation_size(t.relid) > 0)
$$;
REVOKE ALL ON FUNCTION ddl_table_has_rows(oid) FROM PUBLIC;

/*
 * ddl_type_columns(typ) -> setof (table_oid, column_name)
 *   The columns (of any relation; callers keep the recorded tables) whose
 *   values are, or hold, values of type typ: of typ itself or of a type
 *   built on it, transitively: its array, a domain over it, a composite
 *   type or a table's row type with an attribute of it, a range or
 *   multirange over it.  An ALTER TYPE of typ (ADD or DROP ATTRIBUTE of a
 *   composite, RENAME VALUE of an enum) or an ALTER TABLE of a table whose
 *   row type typ is may change how their stored values read, without a
 *   change.
 */
CREATE FUNCTION ddl_type_columns(typ oid, OUT table_oid oid, OUT column_name text)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
	WITH RECURSIVE deps(t) AS (
		SELECT typ
		UNION
		SELECT u.t
		  FROM deps d CROSS JOIN LATERAL (
			SELECT b.typarray AS t FROM pg_catalog.pg_type b
			 WHERE b.oid = d.t AND b.typarray <> 0
			UNION ALL
			SELECT b.oid FROM pg_catalog.pg_type b WHERE b.typbasetype = d.t
			UNION ALL
			SELECT c.reltype
			  FROM pg_catalog.pg_attribute a
			  JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
			 WHERE a.atttypid = d.t AND a.attnum > 0 AND NOT a.attisdropped
			   AND c.reltype <> 0
			UNION ALL
			SELECT r.rngtypid FROM pg_catalog.pg_range r WHERE r.rngsubtype = d.t
			UNION ALL
			SELECT r.rngmultitypid FROM pg_catalog.pg_range r
			 WHERE r.rngsubtype = d.t AND r.rngmultitypid <> 0) u
	)
	SELECT a.attrelid, a.attname::text
	  FROM pg_catalog.pg_attribute a
	 WHERE a.atttypid IN (SELECT t FROM deps WHERE t <> 0)
	   AND a.attnum > 0 AND NOT a.attisdropped
$$;
REVOKE ALL ON FUNCTION ddl_type_columns(oid) FROM PUBLIC;

/* ddl_command_end: one row per command and table it affects */
CREATE FUNCTION ddl_command_end_trigger()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	cmd record;
	tbl record;
	relid oid;
	part oid;
	cols text[];
	rcols text[];
	rtypes oid[];
	pub text;
	typ oid;
BEGIN
	FOR cmd IN SELECT * FROM pg_catalog.pg_event_trigger_ddl_commands()
	LOOP
		-- a change of a publication's tables: each table it concerns
		pub := NULL;
		IF cmd.classid = 'pg_catalog.pg_publication_rel'::regclass THEN
			SELECT p.pubname INTO pub
			  FROM pg_catalog.pg_publication_rel r
			  JOIN pg_catalog.pg_publication p ON p.oid = r.prpubid
			 WHERE r.oid = cmd.objid;
		ELSIF cmd.classid = 'pg_catalog.pg_publication_namespace'::regclass THEN
			SELECT p.pubname INTO pub
			  FROM pg_catalog.pg_publication_namespace r
			  JOIN pg_catalog.pg_publication p ON p.oid = r.pnpubid
			 WHERE r.oid = cmd.objid;
		ELSIF cmd.classid = 'pg_catalog.pg_publication'::regclass THEN
			SELECT p.pubname INTO pub
			  FROM pg_catalog.pg_publication p WHERE p.oid = cmd.objid;
		END IF;
		IF pub IS NOT NULL THEN
			FOR relid IN
				SELECT r.prrelid FROM pg_catalog.pg_publication_rel r
				 WHERE cmd.classid = 'pg_catalog.pg_publication_rel'::regclass
				   AND r.oid = cmd.objid
				UNION
				SELECT c.oid
				  FROM pg_catalog.pg_publication_namespace r
				  JOIN pg_catalog.pg_class c ON c.relnamespace = r.pnnspid
				 WHERE cmd.classid = 'pg_catalog.pg_publication_namespace'::regclass
				   AND r.oid = cmd.objid
				UNION
				SELECT pg_catalog.to_regclass(pg_catalog.quote_ident(pt.schemaname)
						|| '.' || pg_catalog.quote_ident(pt.tablename))::oid
				  FROM pg_catalog.pg_publication_tables pt
				 WHERE cmd.classid = 'pg_catalog.pg_publication'::regclass
				   AND pt.pubname = pub
			LOOP
				-- with publish_via_partition_root, the partitions too
				CONTINUE WHEN relid IS NULL;
				FOR part IN
					SELECT relid
					UNION
					SELECT t.relid FROM pg_catalog.pg_partition_tree(relid) t
				LOOP
					SELECT * INTO tbl FROM @extschema@.ddl_recorded_table(part, false);
					CONTINUE WHEN tbl.table_name IS NULL;
					INSERT INTO @extschema@.ddl_history (event, command_tag, object_type,
						object_identity, table_oid, schema_name, table_name,
						publication, rows_changed, definition)
					VALUES ('ddl_command_end', cmd.command_tag, cmd.object_type,
						cmd.object_identity, part, tbl.schema_name, tbl.table_name,
						pub, @extschema@.ddl_table_has_rows(part),
						@extschema@.ddl_table_definition(part));
				END LOOP;
			END LOOP;
			CONTINUE;
		END IF;
		-- ALTER TYPE (RENAME VALUE of an enum; ADD, DROP or RENAME
		-- ATTRIBUTE of a composite type, reported as its pg_class row), or
		-- ALTER TABLE of a table whose row type columns use: each table
		-- with a column of the type or of a type built on it (an array, a
		-- domain, a composite holding it, transitively), whose stored
		-- values may now read differently
		typ := NULL;
		IF cmd.command_tag = 'ALTER TYPE' AND cmd.classid = 'pg_catalog.pg_type'::regclass THEN
			CONTINUE WHEN @extschema@.ddl_adds_enum_value(cmd.command);
			typ := cmd.objid;
		ELSIF cmd.command_tag IN ('ALTER TYPE', 'ALTER TABLE')
			AND cmd.classid = 'pg_catalog.pg_class'::regclass THEN
			SELECT c.reltype INTO typ FROM pg_catalog.pg_class c
			 WHERE c.oid = cmd.objid AND c.relkind IN ('c', 'r', 'p')
			   AND c.reltype <> 0;
		END IF;
		IF typ IS NOT NULL THEN
			FOR relid, cols IN
				SELECT u.table_oid, array_agg(u.column_name ORDER BY u.column_name)
				  FROM @extschema@.ddl_type_columns(typ) u
				 WHERE u.table_oid <> cmd.objid
				 GROUP BY u.table_oid
				 ORDER BY u.table_oid
			LOOP
				SELECT * INTO tbl FROM @extschema@.ddl_recorded_table(relid, false);
				CONTINUE WHEN tbl.table_name IS NULL;
				IF NOT @extschema@.ddl_table_has_rows(relid) THEN
					cols := NULL;
				END IF;
				INSERT INTO @extschema@.ddl_history (event, command_tag, object_type,
					object_identity, table_oid, schema_name, table_name, columns,
					rows_changed, definition)
				-- (for an ALTER TABLE, the record names the table's row type)
				VALUES ('ddl_command_end', cmd.command_tag,
					CASE WHEN cmd.command_tag = 'ALTER TYPE' THEN cmd.object_type
						 ELSE 'composite type' END,
					CASE WHEN cmd.command_tag = 'ALTER TYPE' THEN cmd.object_identity
						 ELSE (SELECT o.identity
								 FROM pg_catalog.pg_identify_object('pg_catalog.pg_type'::regclass, typ, 0) o)
						 END,
					relid, tbl.schema_name, tbl.table_name, cols,
					cols IS NOT NULL, @extschema@.ddl_table_definition(relid));
			END LOOP;
			-- ALTER TYPE ... CASCADE of a composite type changes the
			-- columns of the typed tables (CREATE TABLE ... OF) built on
			-- it, and of their partitions: each gets a record with its
			-- definition, as an ALTER TABLE of it would, with the columns
			-- ALTER ATTRIBUTE ... TYPE retyped (a cast of the stored
			-- values; the command collects a subcommand per typed table)
			IF cmd.command_tag = 'ALTER TYPE' THEN
				FOR relid IN
					SELECT c FROM @extschema@.ddl_typed_tables(typ) c
					UNION
					SELECT t.relid
					  FROM @extschema@.ddl_typed_tables(typ) c
					 CROSS JOIN LATERAL pg_catalog.pg_partition_tree(c) t
					ORDER BY 1
				LOOP
					SELECT * INTO tbl FROM @extschema@.ddl_recorded_table(relid, false);
					CONTINUE WHEN tbl.table_name IS NULL;
					SELECT array_agg(s.column_name ORDER BY s.column_name),
						   array_agg(s.column_name ORDER BY s.column_name)
							 FILTER (WHERE s.new_type IS NOT NULL),
						   array_agg(s.new_type ORDER BY s.column_name)
							 FILTER (WHERE s.new_type IS NOT NULL)
					  INTO cols, rcols, rtypes
					  FROM @extschema@.ddl_columns_set(cmd.command) s
					 WHERE s.table_oid = relid;
					IF cols IS NOT NULL AND NOT @extschema@.ddl_table_has_rows(relid) THEN
						cols := NULL;
						rcols := NULL;
						rtypes := NULL;
					END IF;
					INSERT INTO @extschema@.ddl_history (event, command_tag, object_type,
						object_identity, table_oid, schema_name, table_name, columns,
						retyped, retyped_to, rows_changed, definition)
					VALUES ('ddl_command_end', cmd.command_tag, 'table',
						pg_catalog.quote_ident(tbl.schema_name) || '.'
							|| pg_catalog.quote_ident(tbl.table_name),
						relid, tbl.schema_name, tbl.table_name, cols, rcols, rtypes,
						cols IS NOT NULL, @extschema@.ddl_table_definition(relid));
				END LOOP;
			END IF;
			CONTINUE WHEN cmd.command_tag = 'ALTER TYPE';
		END IF;
		relid := CASE
			WHEN cmd.classid = 'pg_catalog.pg_class'::regclass THEN
				coalesce((SELECT i.indrelid FROM pg_catalog.pg_index i
						   WHERE i.indexrelid = cmd.objid), cmd.objid)
			WHEN cmd.classid = 'pg_catalog.pg_constraint'::regclass THEN
				(SELECT c.conrelid FROM pg_catalog.pg_constraint c WHERE c.oid = cmd.objid)
			END;
		CONTINUE WHEN relid IS NULL;
		SELECT * INTO tbl FROM @extschema@.ddl_recorded_table(relid, false);
		CONTINUE WHEN tbl.table_name IS NULL;
		-- the command's own table, then every other table whose rows it
		-- set, and (ALTER TABLE, which recurses: ADD or DROP COLUMN, say)
		-- every inheritor, whose definition may have changed too
		FOR relid, cols, rcols, rtypes IN
			SELECT r.table_oid,
				   array_agg(r.column_name ORDER BY r.column_name)
					 FILTER (WHERE r.column_name IS NOT NULL),
				   array_agg(r.column_name ORDER BY r.column_name)
					 FILTER (WHERE r.new_type IS NOT NULL),
				   array_agg(r.new_type ORDER BY r.column_name)
					 FILTER (WHERE r.new_type IS NOT NULL)
			  FROM (SELECT relid AS table_oid, NULL::text AS column_name,
						   NULL::oid AS new_type
					UNION ALL
					SELECT s.table_oid, s.column_name, s.new_type
					  FROM @extschema@.ddl_columns_set(cmd.command) s
					UNION ALL
					SELECT h.child, NULL::text, NULL::oid
					  FROM (WITH RECURSIVE inh(child) AS (
							SELECT i.inhrelid FROM pg_catalog.pg_inherits i
							 WHERE i.inhparent = relid
							UNION
							SELECT i.inhrelid FROM pg_catalog.pg_inherits i
							  JOIN inh ON i.inhparent = inh.child)
						SELECT inh.child FROM inh) h
					 WHERE cmd.command_tag = 'ALTER TABLE') r
			 GROUP BY r.table_oid
			 ORDER BY r.table_oid <> relid, r.table_oid
		LOOP
			SELECT * INTO tbl FROM @extschema@.ddl_recorded_table(relid, false);
			CONTINUE WHEN tbl.table_name IS NULL;
			IF cols IS NOT NULL AND NOT @extschema@.ddl_table_has_rows(relid) THEN
				cols := NULL;
				rcols := NULL;
				rtypes := NULL;
			END IF;
			INSERT INTO @extschema@.ddl_history (event, command_tag, object_type,
				object_identity, table_oid, schema_name, table_name, columns,
				retyped, retyped_to, rows_changed, definition)
			VALUES ('ddl_command_end', cmd.command_tag, cmd.object_type,
				cmd.object_identity, relid, tbl.schema_name, tbl.table_name, cols,
				rcols, rtypes, cols IS NOT NULL,
				@extschema@.ddl_table_definition(relid));
		END LOOP;
	END LOOP;
END
$$;

/*
 * sql_drop: one row per table dropped, and per table a publication stops
 * publishing (ALTER PUBLICATION ... DROP TABLE, DROP TABLES IN SCHEMA:
 * its later changes are not archived, rows_changed true; with the table's
 * definition), and per index dropped other than with its table (table_oid
 * 0, named by the index: see ddl_history above for the rule).
 */
CREATE FUNCTION ddl_sql_drop_trigger()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	obj record;
	relid oid;
	part oid;
	tbl record;
BEGIN
	FOR obj IN SELECT * FROM pg_catalog.pg_event_trigger_dropped_objects()
	LOOP
		IF obj.object_type IN ('publication relation', 'publication namespace') THEN
			FOR relid IN
				SELECT pg_catalog.to_regclass(pg_catalog.quote_ident(obj.address_names[1])
						|| '.' || pg_catalog.quote_ident(obj.address_names[2]))::oid
				 WHERE obj.object_type = 'publication relation'
				UNION
				SELECT c.oid FROM pg_catalog.pg_class c
				  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
				 WHERE obj.object_type = 'publication namespace'
				   AND n.nspname = obj.address_names[1]
			LOOP
				CONTINUE WHEN relid IS NULL;
				FOR part IN
					SELECT relid
					UNION
					SELECT t.relid FROM pg_catalog.pg_partition_tree(relid) t
				LOOP
					SELECT * INTO tbl FROM @extschema@.ddl_recorded_table(part, false);
					CONTINUE WHEN tbl.table_name IS NULL;
					INSERT INTO @extschema@.ddl_history (event, command_tag, object_type,
						object_identity, table_oid, schema_name, table_name,
						publication, rows_changed, definition)
					VALUES ('sql_drop', tg_tag, obj.object_type, obj.object_identity,
						part, tbl.schema_name, tbl.table_name,
						obj.address_args[1], true,
						@extschema@.ddl_table_definition(part));
				END LOOP;
			END LOOP;
			CONTINUE;
		END IF;
		-- a column dropped by another command than ALTER TABLE (which
		-- records its own ddl_command_end row): DROP DOMAIN, TYPE,
		-- COLLATION or FUNCTION ... CASCADE; with the table's definition
		-- after it, unless the table is dropped too
		IF obj.classid = 'pg_catalog.pg_class'::regclass AND obj.objsubid <> 0
			AND obj.object_type = 'table column' AND tg_tag <> 'ALTER TABLE'
			AND NOT EXISTS (SELECT FROM pg_catalog.pg_event_trigger_dropped_objects() t
							 WHERE t.classid = 'pg_catalog.pg_class'::regclass
							   AND t.objid = obj.objid AND t.objsubid = 0) THEN
			SELECT * INTO tbl FROM @extschema@.ddl_recorded_table(obj.objid, false);
			CONTINUE WHEN tbl.table_name IS NULL;
			INSERT INTO @extschema@.ddl_history (event, command_tag, object_type,
				object_identity, table_oid, schema_name, table_name,
				rows_changed, definition)
			VALUES ('sql_drop', tg_tag, obj.object_type, obj.object_identity,
				obj.objid, tbl.schema_name, tbl.table_name, false,
				@extschema@.ddl_table_definition(obj.objid));
			CONTINUE;
		END IF;
		-- an index dropped by DROP INDEX, or by a command that drops no
		-- table of its schema (so not with its table)
		IF obj.classid = 'pg_catalog.pg_class'::regclass AND obj.objsubid = 0
			AND obj.object_type = 'index' AND NOT obj.is_temporary
			AND obj.schema_name NOT IN ('pg_catalog', 'information_schema', 'pg_toast', '@extschema@')
			AND (obj.original
				 OR NOT EXISTS (SELECT FROM pg_catalog.pg_event_trigger_dropped_objects() t
								 WHERE t.classid = 'pg_catalog.pg_class'::regclass
								   AND t.objsubid = 0 AND t.object_type = 'table'
								   AND t.schema_name = obj.schema_name)) THEN
			INSERT INTO @extschema@.ddl_history (event, command_tag, object_type,
				object_identity, table_oid, schema_name, table_name, rows_changed)
			VALUES ('sql_drop', tg_tag, obj.object_type,
				obj.object_identity, 0, obj.schema_name, obj.object_name, false);
			CONTINUE;
		END IF;
		CONTINUE WHEN obj.classid <> 'pg_catalog.pg_class'::regclass
			OR obj.objsubid <> 0 OR obj.object_type <> 'table'
			OR obj.is_temporary
			OR obj.schema_name IN ('pg_catalog', 'information_schema', 'pg_toast', '@extschema@');
		INSERT INTO @extschema@.ddl_history (event, command_tag, object_type,
			object_identity, table_oid, schema_name, table_name, rows_changed)
		VALUES ('sql_drop', tg_tag, obj.object_type,
			obj.object_identity, obj.objid, obj.schema_name, obj.object_name,
			false);
	END LOOP;
END
$$;

/*
 * table_rewrite: one row per table rewritten, and per partitioned table
 * above it (a publication with publish_via_partition_root sends the
 * partition's rows as the root's).  A change of persistence is recorded
 * for an unlogged table too (SET LOGGED: its rows were never decoded).
 */
CREATE FUNCTION ddl_table_rewrite_trigger()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	rewritten oid := pg_catalog.pg_event_trigger_table_rewrite_oid();
	reason int := pg_catalog.pg_event_trigger_table_rewrite_reason();
	relid oid;
	tbl record;
	changed boolean;
BEGIN
	-- persistence (1): what was written while unlogged is not decoded;
	-- a volatile default (2): existing rows get values no change carries
	-- (a type change, 4, is judged by ddl_command_end's record, which
	-- names the columns and whether USING was given)
	changed := (reason & 1) <> 0 OR
		((reason & 2) <> 0 AND @extschema@.ddl_table_has_rows(rewritten));
	FOR relid IN
		SELECT rewritten
		UNION
		SELECT a.relid FROM pg_catalog.pg_partition_ancestors(rewritten) a
	LOOP
		SELECT * INTO tbl FROM @extschema@.ddl_recorded_table(relid, (reason & 1) <> 0);
		CONTINUE WHEN tbl.table_name IS NULL;
		INSERT INTO @extschema@.ddl_history (event, command_tag, object_type,
			object_identity, table_oid, schema_name, table_name, rewrite_reason,
			rows_changed)
		VALUES ('table_rewrite', tg_tag, 'table',
			pg_catalog.quote_ident(tbl.schema_name) || '.' || pg_catalog.quote_ident(tbl.table_name),
			relid, tbl.schema_name, tbl.table_name, reason, changed);
	END LOOP;
END
$$;

REVOKE ALL ON FUNCTION ddl_command_end_trigger() FROM PUBLIC;
REVOKE ALL ON FUNCTION ddl_sql_drop_trigger() FROM PUBLIC;
REVOKE ALL ON FUNCTION ddl_table_rewrite_trigger() FROM PUBLIC;

CREATE EVENT TRIGGER changestream_ddl_command_end ON ddl_command_end
	EXECUTE FUNCTION ddl_command_end_trigger();
CREATE EVENT TRIGGER changestream_sql_drop ON sql_drop
	EXECUTE FUNCTION ddl_sql_drop_trigger();
CREATE EVENT TRIGGER changestream_table_rewrite ON table_rewrite
	EXECUTE FUNCTION ddl_table_rewrite_trigger();
-- also under session_replication_role = replica (tools that replay DDL)
ALTER EVENT TRIGGER changestream_ddl_command_end ENABLE ALWAYS;
ALTER EVENT TRIGGER changestream_sql_drop ENABLE ALWAYS;
ALTER EVENT TRIGGER changestream_table_rewrite ENABLE ALWAYS;

/*
 * The extension's publication: ddl_history's inserts only.  The archiver
 * streams it beside changestream.publication once it exists and publishes
 * this extension's ddl_history.  A publication cannot be a member of an
 * extension, so DROP EXTENSION leaves it behind, publishing nothing; such
 * a leftover is replaced here.  A publication of that name that publishes
 * anything is someone else's: 42710.
 */
DO $$
BEGIN
	IF EXISTS (SELECT FROM pg_catalog.pg_publication p
			    WHERE p.pubname = 'changestream_ddl'
				  AND (p.puballtables
					   OR EXISTS (SELECT FROM pg_catalog.pg_publication_rel r
								   WHERE r.prpubid = p.oid)
					   OR EXISTS (SELECT FROM pg_catalog.pg_publication_namespace n
								   WHERE n.pnpubid = p.oid))) THEN
		RAISE EXCEPTION 'publication "changestream_ddl" already exists and publishes tables'
			USING ERRCODE = '42710',
				  HINT = 'changestream owns a publication of that name: rename or drop this one.';
	END IF;
	DROP PUBLICATION IF EXISTS changestream_ddl;
END
$$;
CREATE PUBLICATION changestream_ddl FOR TABLE ddl_history WITH (publish = 'insert');

/*
 * stat_archiver: the archive's health at a glance, one row per archived
 * database (database names it: docs/databases.md), in the style
 * of pg_stat_archiver (docs/DESIGN.md section "SQL surface"), derived
 * from status() and the settings.
 *   healthy: state is streaming, no error is current, lag_bytes is below
 *     256 MB and lag_seconds below 300, the slot's WAL is not about to be
 *     lost (slot_wal_status neither unreserved nor lost) and the replica,
 *     when one is configured, is neither in error nor off.
 *   error_current: the archiver's last error is newer than its last
 *     successful flush (last_flush_at), or its state is error.  An error
 *     of a session that later archived (e.g. a publication created after
 *     the worker started) is history, not current.
 *   lag_bytes: status().lag_bytes, WAL the server has flushed that the
 *     archive does not hold durably.
 *   lag_seconds: while a received transaction waits to be made durable
 *     (received_commit_time later than last_commit_time), now() minus the
 *     commit time of the newest durable transaction (of the waiting one
 *     when none is durable yet); 0 otherwise.  An idle server's archive
 *     has lag 0, however old its last commit.  A stream that stalls before
 *     the archiver receives anything shows in lag_bytes, not here.
 *   last_archived_commit_at: commit time of the newest durable transaction
 *     (NULL: none since the server started).
 *   replica_error_current: the uploader's last error is newer than its
 *     last upload.
 *   retention_effective: changestream.retention can delete history: true
 *     when it and changestream.snapshot_interval are both set, false when
 *     retention is set without snapshot_interval (it then deletes
 *     nothing), NULL when retention is 0 (everything is kept). *   archiver_failures, snapshot_failures, replica_failures, failures_since:
 *     status()'s failure counters (sessions, snapshots and upload passes
 *     that failed since failures_since, in shared memory: reset when the
 *     server starts), as pg_stat_archiver's failed_count and stats_reset;
 *     an alert watches their increase.
 */
CREATE VIEW stat_archiver AS
SELECT s.state = 'streaming'
	   AND NOT e.error_current
	   AND coalesce(s.lag_bytes < 268435456, false)
	   AND l.lag_seconds < 300
	   AND coalesce(s.slot_wal_status NOT IN ('unreserved', 'lost'), true)
	   AND coalesce(s.replica_state NOT IN ('error', 'off'), true) AS healthy,
	   s.state,
	   s.pid,
	   s.generation,
	   e.error_current,
	   s.last_error,
	   s.last_error_at,
	   s.lag_bytes,
	   l.lag_seconds,
	   s.last_commit_time AS last_archived_commit_at,
	   s.last_flush_at,
	   s.transactions AS archived_transactions,
	   s.last_compress_error_at IS NOT NULL
	   AND s.last_compress_error_at > coalesce(s.last_flush_at, '-infinity') AS compress_error_current,
	   s.replica_state,
	   s.replica_lag_bytes,
	   s.replica_last_error_at IS NOT NULL
	   AND s.replica_last_error_at > coalesce(s.replica_last_upload_at, '-infinity') AS replica_error_current,
	   s.slot_wal_status,
	   s.slot_retained_bytes,
	   g.retention_seconds,
	   g.snapshot_interval_seconds,
	   CASE WHEN g.retention_seconds > 0 THEN g.snapshot_interval_seconds > 0 END AS retention_effective,
	   s.retention_held,
	   s.database,
	   s.archiver_failures,
	   s.snapshot_failures,
	   s.replica_failures,
	   s.failures_since
  FROM @extschema@.status() s
 CROSS JOIN LATERAL (
	SELECT s.state = 'error'
		   OR (s.last_error IS NOT NULL
			   AND s.last_error_at > coalesce(s.last_flush_at, '-infinity')) AS error_current) e
 CROSS JOIN LATERAL (
	SELECT CASE WHEN s.received_commit_time IS NOT NULL
				 AND (s.last_commit_time IS NULL
					  OR s.received_commit_time > s.last_commit_time)
			THEN GREATEST(pg_catalog.date_part('epoch',
					pg_catalog.now() - coalesce(s.last_commit_time, s.received_commit_time)), 0)
			ELSE 0 END::double precision AS lag_seconds) l
 CROSS JOIN (
	SELECT (SELECT p.setting::bigint FROM pg_catalog.pg_settings p
			 WHERE p.name = 'changestream.retention') AS retention_seconds,
		   (SELECT p.setting::bigint FROM pg_catalog.pg_settings p
			 WHERE p.name = 'changestream.snapshot_interval') AS snapshot_interval_seconds) g;

REVOKE ALL ON TABLE stat_archiver FROM PUBLIC;
GRANT SELECT ON TABLE stat_archiver TO pg_monitor;

/*
 * Ready roles (README "Roles").  Roles are the cluster's, not the
 * database's: created once if they do not exist, never dropped by DROP
 * EXTENSION, and granted the rights of this database's extension.
 *   changestream_reader: history and verification: generations(),
 *     generation_stats(), wal_segments(), snapshots(), changes(),
 *     wal_records(), verify(), tables(), status(), stat_archiver and
 *     restore_progress.  changes() and
 *     wal_records() return the row data of every published table.
 *   changestream_operator: the reader's rights, and restore(),
 *     take_snapshot(), new_generation() and replica_check().
 *     restore()'s archive_directory stays superuser-only (42501).
 */
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles
					WHERE rolname OPERATOR(pg_catalog.=) 'changestream_reader') THEN
		CREATE ROLE changestream_reader NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles
					WHERE rolname OPERATOR(pg_catalog.=) 'changestream_operator') THEN
		CREATE ROLE changestream_operator NOLOGIN;
	END IF;
	IF NOT pg_catalog.pg_has_role('changestream_operator', 'changestream_reader', 'MEMBER') THEN
		GRANT changestream_reader TO changestream_operator;
	END IF;
END
$$;

GRANT USAGE ON SCHEMA changestream TO changestream_reader;
GRANT EXECUTE ON FUNCTION generations() TO changestream_reader;
GRANT EXECUTE ON FUNCTION generation_stats(text) TO changestream_reader;
GRANT EXECUTE ON FUNCTION wal_segments(text) TO changestream_reader;
GRANT EXECUTE ON FUNCTION snapshots(text) TO changestream_reader;
GRANT EXECUTE ON FUNCTION changes(text, pg_lsn, pg_lsn, timestamptz, timestamptz, text[]) TO changestream_reader;
GRANT EXECUTE ON FUNCTION wal_records(text, pg_lsn, pg_lsn) TO changestream_reader;
GRANT EXECUTE ON FUNCTION verify(text, text, boolean) TO changestream_reader;
GRANT EXECUTE ON FUNCTION status() TO changestream_reader;
GRANT EXECUTE ON FUNCTION tables(text) TO changestream_reader;
GRANT SELECT ON TABLE restore_progress TO changestream_reader;
GRANT EXECUTE ON FUNCTION restore_progress_info() TO changestream_reader;
GRANT SELECT ON TABLE stat_archiver TO changestream_reader;
GRANT EXECUTE ON FUNCTION restore(text, text, pg_lsn, timestamptz, text[], text, boolean, boolean, text) TO changestream_operator;
GRANT EXECUTE ON FUNCTION take_snapshot() TO changestream_operator;
GRANT EXECUTE ON FUNCTION new_generation() TO changestream_operator;
GRANT EXECUTE ON FUNCTION replica_check() TO changestream_operator;

/* What \df+ and \dv+ say of each object */
COMMENT ON FUNCTION generations() IS 'One row per archived generation: its range, size, restorable start, damage and the gap before it.';
COMMENT ON FUNCTION generation_stats(text) IS 'The generations() row of one generation.';
COMMENT ON FUNCTION wal_segments(text) IS 'The WAL segments of a generation in index order, with their LSN range, size and compression.';
COMMENT ON FUNCTION wal_records(text, pg_lsn, pg_lsn) IS 'Every archived pgoutput message of a generation in stream order, optionally bounded by commit LSN.';
COMMENT ON FUNCTION status() IS 'The archiver, compressor, uploader and slot as shared memory shows them now (one row per archived database).';
COMMENT ON FUNCTION snapshots(text) IS 'The snapshots of a generation, oldest first, from their manifests.';
COMMENT ON FUNCTION take_snapshot() IS 'Take a snapshot of the published tables now; returns its consistent LSN once it is durable.';
COMMENT ON FUNCTION new_generation() IS 'Close the current generation and open a new one with its opening snapshot; returns the new generation.';
COMMENT ON FUNCTION changes(text, pg_lsn, pg_lsn, timestamptz, timestamptz, text[]) IS 'The archived changes of a generation as JSON rows in commit order, filtered by LSN, time and table.';
COMMENT ON FUNCTION verify(text, text, boolean) IS 'Read a generation (NULL: all) end to end without trusting it, from the local archive or the replica''s bucket (compared with the local archive; objects found sound before and unchanged in the listing are not downloaded again unless full); one row per problem, none for a sound archive.';
COMMENT ON FUNCTION restore(text, text, pg_lsn, timestamptz, text[], text, boolean, boolean, text) IS 'Rebuild the archived tables as of an LSN or time into an empty target schema (dry_run: report only; row_filter: only the rows satisfying it).';
COMMENT ON FUNCTION replica_check() IS 'Self-test of the object store bucket the replica uses (writes and deletes a test object).';
COMMENT ON FUNCTION sigv4_authorization(text, text, text, text[], text, text, text, text, text) IS 'The AWS Signature Version 4 Authorization header of a request (test and diagnostic aid, test keys only).';
COMMENT ON FUNCTION ddl_columns_set(pg_ddl_command) IS 'Internal: the columns an ALTER TABLE may have set without archived changes.';
COMMENT ON FUNCTION ddl_adds_enum_value(pg_ddl_command) IS 'Internal: is a collected command an ALTER TYPE ... ADD VALUE?';
COMMENT ON FUNCTION ddl_table_definition(oid) IS 'Internal: a table''s full definition (columns, constraints, indexes, replica identity) as JSON.';
COMMENT ON FUNCTION ddl_recorded_table(oid, boolean) IS 'Internal: the name of a table whose DDL the schema history records, NULLs for any other relation.';
COMMENT ON FUNCTION ddl_typed_tables(oid) IS 'Internal: the tables made with CREATE TABLE ... OF a composite type, read on the catalog as it is now.';
COMMENT ON FUNCTION ddl_table_has_rows(oid) IS 'Internal: may the table (or a partition of it) hold rows?';
COMMENT ON FUNCTION ddl_type_columns(oid) IS 'Internal: the columns whose values are or hold values of a type.';
COMMENT ON FUNCTION ddl_command_end_trigger() IS 'Internal: event trigger recording DDL commands in ddl_history.';
COMMENT ON FUNCTION ddl_sql_drop_trigger() IS 'Internal: event trigger recording dropped tables and indexes, and tables a publication stops publishing, in ddl_history.';
COMMENT ON FUNCTION ddl_table_rewrite_trigger() IS 'Internal: event trigger recording table rewrites in ddl_history.';
COMMENT ON TABLE ddl_history IS 'The schema history: one row per DDL command and table it affects, archived through the publication changestream_ddl.';
COMMENT ON VIEW stat_archiver IS 'The archive''s health at a glance (one row per archived database): healthy, current error, lag in bytes and seconds, replica, slot, retention and failure counts since the server started.';
