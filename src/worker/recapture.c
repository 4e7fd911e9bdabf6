/*-------------------------------------------------------------------------
 *
 * recapture.c
 *	  Re-capture after a schema change that changed rows without archived
 *	  changes (docs/DESIGN.md section 12, "Re-capture").  The archiver
 *	  watches the rows of the extension's changestream.ddl_history as they
 *	  stream past: a row with rows_changed true, once its transaction
 *	  commits, asks for a snapshot of the published tables.  restore()
 *	  starts from the newest snapshot not after its target, so every target
 *	  at or after that snapshot is exact again for the tables such a
 *	  command had made unrestorable; targets between the command and the
 *	  snapshot stay refused.
 *
 *	  Debounced: the snapshot starts once no such command has committed for
 *	  changestream.recapture_delay, or six times that delay after the first
 *	  one not yet covered, so a burst of commands (a migration) costs one
 *	  snapshot.  One snapshot runs at a time (snapshot_worker.c); a command
 *	  that commits while it runs is covered by the next one.  Any snapshot
 *	  whose LSN is at or after the command's commit covers it, whoever
 *	  asked for it (take_snapshot(), snapshot_interval).
 *
 *	  The request outlives the archiver: it is written durably to the
 *	  generation's "recapture" file (archive/recapture_request.c) when a
 *	  commit raises it, before the commit is archived, and removed once a
 *	  snapshot covers it; a session that finds the file wanting an LSN
 *	  past the generation's newest snapshot takes the request up again,
 *	  due a delay from then.
 *
 * Source: the pgoutput readers of replication/logicalproto.h.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "libpq/pqformat.h"
#include "postmaster/bgworker.h"
#include "replication/logicalproto.h"
#include "utils/timestamp.h"

#include "archive/archive_layout.h"
#include "archive/recapture_request.h"
#include "archive/retention_horizon.h"
#include "archive/segment_writer.h"
#include "base/guc.h"
#include "base/shmem_status.h"
#include "worker/recapture.h"
#include "worker/snapshot_worker.h"
#include "worker/stream.h"
#include "base/compat.h"

#define RECAPTURE_BURST_FACTOR	6	/* the longest wait, in delays */
#define RECAPTURE_RETRY_MS	(60 * 1000) /* after a snapshot that failed */

/* the trusted schema history relation of the session, and its column */
static Oid	history_oid = InvalidOid;
static int	rows_changed_col = -1;

/* the transaction being streamed holds a rows_changed record */
static bool txn_wants = false;

/*
 * The request: the end LSN of the newest commit of such a command not yet
 * covered by a snapshot (Invalid: none), the generation it was archived
 * in, when the first of them was seen, when the snapshot is due, and
 * whether one was started for it.
 */
static XLogRecPtr want_lsn = InvalidXLogRecPtr;
static uint64 want_generation = 0;	/* the writer's, at the last commit */
static TimestampTz first_at = 0;
static TimestampTz due_at = 0;
static bool launched = false;

/*
 * The archive being written (set at session start) and what its
 * generations/<gen>/recapture file holds: the generation and LSN written
 * last (file_lsn Invalid: no file written or found by this process).
 */
static char directory[MAXPGPATH];
static uint64 file_generation = 0;
static XLogRecPtr file_lsn = InvalidXLogRecPtr;

/* the payload of a pgoutput message as a StringInfo, past its type byte */
static void
payload_info(StringInfo s, const char *payload, uint32 plen)
{
	s->data = (char *) payload;
	s->len = plen;
	s->maxlen = -1;
	s->cursor = 1;
}

/*
 * cs_recapture_relation
 *	  A Relation message (payload, plen bytes) named changestream.ddl_history
 *	  that the session trusts (trusted, archiver.c) or not: remember its OID
 *	  and where its rows_changed column is.  An untrusted one is forgotten:
 *	  a table of that name anyone could make starts no snapshot.
 */
void
cs_recapture_relation(const char *payload, uint32 plen, bool trusted)
{
	StringInfoData s;
	LogicalRepRelation *rel;

	if (!trusted)
	{
		history_oid = InvalidOid;
		rows_changed_col = -1;
		return;
	}
	payload_info(&s, payload, plen);
	rel = logicalrep_read_rel(&s);
	history_oid = rel->remoteid;
	rows_changed_col = -1;
	for (int i = 0; i < rel->natts; i++)
		if (strcmp(rel->attnames[i], "rows_changed") == 0)
			rows_changed_col = i;
}

/*
 * cs_recapture_begin
 *	  A transaction begins in the stream.
 */
void
cs_recapture_begin(void)
{
	txn_wants = false;
}

/*
 * cs_recapture_insert
 *	  An Insert message (payload, plen bytes) of a transaction being
 *	  archived: notes whether it is a schema history row with rows_changed
 *	  true.
 */
void
cs_recapture_insert(const char *payload, uint32 plen)
{
	StringInfoData s;
	LogicalRepTupleData tup;

	if (!OidIsValid(history_oid) || rows_changed_col < 0 ||
		cs_recapture_delay_s < 0 || plen < 5)
		return;
	payload_info(&s, payload, plen);
	if ((Oid) pq_getmsgint(&s, 4) != history_oid)
		return;
	s.cursor = 1;
	(void) logicalrep_read_insert(&s, &tup);
	if (rows_changed_col < tup.ncols &&
		tup.colstatus[rows_changed_col] == LOGICALREP_COLUMN_TEXT &&
		strcmp(tup.colvalues[rows_changed_col].data, "t") == 0)
		txn_wants = true;
}

/*
 * Make the request durable before its commit is archived: rewrite the
 * generation's recapture file when the wanted LSN passes what it holds
 * (once per such commit, never for other transactions), and remove the
 * file of an older generation a hand-off left behind.
 */
static void
record_request(void)
{
	if (file_lsn != InvalidXLogRecPtr && file_generation == want_generation &&
		file_lsn >= want_lsn)
		return;
	if (file_lsn != InvalidXLogRecPtr && file_generation != want_generation)
	{
		cs_remove_recapture_request(directory, file_generation);
		file_lsn = InvalidXLogRecPtr;
	}
	cs_write_recapture_request(directory, want_generation, want_lsn);
	file_generation = want_generation;
	file_lsn = want_lsn;
}

/* The request is satisfied or dropped: so is its file. */
static void
forget_request(void)
{
	want_lsn = InvalidXLogRecPtr;
	launched = false;
	if (file_lsn != InvalidXLogRecPtr)
	{
		cs_remove_recapture_request(directory, file_generation);
		file_lsn = InvalidXLogRecPtr;
	}
}

/*
 * cs_recapture_commit
 *	  The transaction being archived committed, its commit record ending at
 *	  end_lsn, seen at now: if it held a rows_changed record, a snapshot at
 *	  or after end_lsn is wanted; its due time moves to a delay from now,
 *	  but never past RECAPTURE_BURST_FACTOR delays after the first command
 *	  not covered yet.
 */
void
cs_recapture_commit(XLogRecPtr end_lsn, TimestampTz now)
{
	TimestampTz latest;

	if (!txn_wants)
		return;
	txn_wants = false;
	if (want_lsn == InvalidXLogRecPtr)
		first_at = now;
	want_lsn = Max(want_lsn, end_lsn);
	want_generation = cs_writer_generation();
	latest = TimestampTzPlusMilliseconds(first_at, (int64) cs_recapture_delay_s *
										 1000 * RECAPTURE_BURST_FACTOR);
	due_at = Min(TimestampTzPlusMilliseconds(now, (int64) cs_recapture_delay_s * 1000),
				 latest);
	record_request();
}

/*
 * The last snapshot worker has ended (successfully with an LSN before
 * want_lsn, or with an error: lsn Invalid): the next attempt is due a
 * delay from now, or a minute after a failure.
 */
static void
after_uncovering_snapshot(XLogRecPtr lsn, TimestampTz now)
{
	launched = false;
	first_at = now;
	due_at = TimestampTzPlusMilliseconds(now, lsn == InvalidXLogRecPtr ?
										 RECAPTURE_RETRY_MS :
										 (int64) cs_recapture_delay_s * 1000);
}

/*
 * cs_recapture_tick
 *	  From the archiver's stream loop: when a re-capture is wanted and due,
 *	  no snapshot runs and no hand-off is pending, start a snapshot worker
 *	  for the writer's generation; forget the request once a snapshot at or
 *	  after it exists.
 */
void
cs_recapture_tick(TimestampTz now)
{
	bool		running;
	int			code;
	char		error[CS_ERROR_LEN];
	XLogRecPtr	lsn;
	BackgroundWorkerHandle *handle;

	if (want_lsn == InvalidXLogRecPtr)
		return;
	if (cs_recapture_delay_s < 0)
	{
		forget_request();
		return;
	}
	(void) cs_status_last_snapshot(&running);
	if (running)
		return;
	if (cs_writer_generation() != want_generation)
	{
		/* a newer generation opened with its own snapshot, after it */
		forget_request();
		return;
	}
	lsn = cs_status_snapshot_result(&code, error, false);
	if (lsn != InvalidXLogRecPtr && lsn >= want_lsn)
	{
		ereport(LOG,
				(errmsg("tables re-captured by the snapshot at " CS_LSN_FMT " after a schema change that changed rows without archived changes",
						LSN_FORMAT_ARGS(lsn))));
		forget_request();
		return;
	}
	if (launched)
		after_uncovering_snapshot(lsn, now);
	if (now < due_at || cs_stream_handoff_pending())
		return;
	if (cs_launch_snapshot_worker(cs_writer_generation(), 0, &handle) != CS_LAUNCH_OK)
	{
		ereport(LOG,
				(errmsg("could not start a snapshot to re-capture tables after a schema change at " CS_LSN_FMT,
						LSN_FORMAT_ARGS(want_lsn)),
				 errdetail("The next attempt is in a minute; until a snapshot is taken, restore() refuses those tables at targets after the change."),
				 errhint("Raise max_worker_processes if background worker slots are exhausted.")));
		due_at = TimestampTzPlusMilliseconds(now, RECAPTURE_RETRY_MS);
		return;
	}
	ereport(LOG,
			(errmsg("starting a snapshot to re-capture tables after a schema change at " CS_LSN_FMT " that changed rows without archived changes",
					LSN_FORMAT_ARGS(want_lsn))));
	launched = true;
}

/*
 * cs_recapture_session_start
 *	  A new archiving session: the schema history relation is known again
 *	  from its next Relation message.  A request not yet satisfied stays.
 */
void
cs_recapture_session_start(void)
{
	history_oid = InvalidOid;
	rows_changed_col = -1;
	txn_wants = false;
}

/* The LSN of generation's newest snapshot; Invalid when it has none. */
static XLogRecPtr
newest_snapshot_lsn(uint64 generation)
{
	List	   *names = cs_list_snapshots(directory, generation);
	XLogRecPtr	lsn = InvalidXLogRecPtr;

	if (names != NIL && !cs_snapshot_name_lsn(llast(names), &lsn))
		lsn = InvalidXLogRecPtr;
	list_free_deep(names);
	return lsn;
}

/*
 * cs_recapture_resume
 *	  The session's generation is open (the writer's, in archive_dir, seen
 *	  at now): unless this process still holds a request, take up the one
 *	  the generation's recapture file records, if no snapshot of the
 *	  generation covers it yet (a damaged file wants a snapshot after the
 *	  newest one); it is due a delay from now.  A covered file is removed,
 *	  and so is any with changestream.recapture_delay = -1 (no re-capture).
 */
void
cs_recapture_resume(const char *archive_dir, TimestampTz now)
{
	uint64		generation = cs_writer_generation();
	XLogRecPtr	lsn;
	XLogRecPtr	newest;

	strlcpy(directory, archive_dir, sizeof(directory));
	if (want_lsn != InvalidXLogRecPtr ||
		!cs_read_recapture_request(directory, generation, &lsn))
		return;
	newest = newest_snapshot_lsn(generation);
	if (lsn == InvalidXLogRecPtr)
		lsn = newest + 1;
	if (cs_recapture_delay_s < 0 || lsn <= newest)
	{
		cs_remove_recapture_request(directory, generation);
		return;
	}
	want_lsn = lsn;
	want_generation = generation;
	file_generation = generation;
	file_lsn = lsn;
	first_at = now;
	due_at = TimestampTzPlusMilliseconds(now, (int64) cs_recapture_delay_s * 1000);
	launched = false;
	ereport(LOG,
			(errmsg("resuming the re-capture of tables after a schema change at " CS_LSN_FMT " that changed rows without archived changes",
					LSN_FORMAT_ARGS(lsn)),
			 errdetail("The generation's newest snapshot is at " CS_LSN_FMT "; a snapshot starts in %d s.",
					   LSN_FORMAT_ARGS(newest), cs_recapture_delay_s)));
}
