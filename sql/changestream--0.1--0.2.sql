/* changestream--0.1--0.2.sql: from 0.1 to 0.2, status() says when readers hold retention back */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION changestream UPDATE TO '0.2'" to load this file. \quit

-- status() gains four columns (retention_held, retention_held_since,
-- retention_held_bytes, retention_held_by_pid): a function's OUT columns
-- cannot change in place, so it is dropped and created again, with its
-- privileges as changestream--0.2.sql grants them.
DROP FUNCTION status();

/*
 * status() -> record
 *   One row describing the archiver worker, read from shared memory.
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
	OUT retention_held_by_pid int)
RETURNS record
AS 'MODULE_PATHNAME', 'changestream_status'
LANGUAGE C STRICT VOLATILE;

REVOKE ALL ON FUNCTION status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION status() TO pg_monitor;
