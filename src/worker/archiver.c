/*-------------------------------------------------------------------------
 *
 * archiver.c
 *	  The archiver background worker: one session after another, each of
 *	  which locks the archive, connects, checks the slot, picks or opens a
 *	  generation (generation_policy.c) and streams the slot into the
 *	  active segment (stream.c) until the configuration or an operator asks
 *	  for a new session.  The durability rules it follows are numbered in
 *	  docs/DESIGN.md, "Durability".
 *
 *	  After an ERROR the session is torn down as bgwriter.c tears down after
 *	  one (every resource fd.c tracks is released; the long-lived files are
 *	  closed explicitly), the error is logged once (repeats of the same message
 *	  are counted, not logged, for five minutes) and shown in status(), and a
 *	  new session starts after a delay that doubles from 1 s to 30 s; the next
 *	  session that makes something durable resets both and is logged with the
 *	  number of failed attempts.  A failed session never opens a generation by
 *	  itself: a damaged archive stays as it is until an operator acts.
 *
 * Sources: the error recovery pattern of src/backend/postmaster/
 * bgwriter.c; LogicalRepApplyLoop() in replication/logical/worker.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "executor/spi.h"
#include "libpq/pqsignal.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/walreceiver.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/wait_event.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "archive/archive_dir.h"
#include "archive/archive_layout.h"
#include "archive/generation.h"
#include "archive/generation_timelines.h"
#include "archive/schema_history.h"
#include "archive/segment_recovery.h"
#include "archive/segment_writer.h"
#include "archive/storage.h"
#include "base/archive_config.h"
#include "base/guc.h"
#include "base/guc_rejected.h"
#include "base/log_once.h"
#include "base/shmem_status.h"
#include "replica/replica_status.h"
#include "worker/archiver.h"
#include "worker/generation_policy.h"
#include "worker/recapture.h"
#include "worker/ri_monitor.h"
#include "worker/snapshot.h"
#include "worker/snapshot_worker.h"
#include "worker/stream.h"
#include "worker/walsender_conn.h"
#include "base/compat.h"

#define SLOT_RELEASE_TRIES	30	/* 100 ms each */
#define BACKOFF_MIN_MS		1000
#define BACKOFF_MAX_MS		30000
#define STANDBY_POLL_MS		1000	/* how often a standby checks for promotion */
#define ARCHIVER_LOCK_TIMEOUT	"10s"	/* see changestream_archiver_main() */

/* session state */
static WalReceiverConn *conn = NULL;
static int	lock_fd = -1;
static MemoryContext session_cxt = NULL;
static TimestampTz next_snapshot_attempt;

/*
 * The archive's configuration the session runs with (in session_cxt):
 * taken before each session, passed down to everything it runs, and
 * compared with the settings on reload.  start_config: the one the worker
 * started with (its database, for startup_exit()).
 */
static CsArchiveConfig *sess_config = NULL;
static CsArchiveConfig *start_config = NULL;

/* across sessions: error log rate limiting and backoff */
static CsLogOnce log_once;
static bool logged_disabled = false;
static bool logged_standby = false;
static long backoff_ms = BACKOFF_MIN_MS;	/* static: it must survive the
											 * longjmp */
static bool last_session_failed = false;
static XLogRecPtr session_start;	/* where the session began streaming */
static bool slot_undecodable = false;	/* see note_stream_error() */

/*
 * The extension's publication changestream_ddl (docs/DESIGN.md section
 * 12): streamed beside changestream.publication once the session starts
 * past the point where it was seen to exist (ddl_wait_lsn), since pgoutput
 * fails on a publication name it cannot find in the catalog as of a
 * change.  ddl_failed: the stream failed on it (see note_stream_error()).
 */
static bool sess_with_ddl = false;
static XLogRecPtr ddl_wait_lsn = InvalidXLogRecPtr;
static bool ddl_failed = false;
static TimestampTz ddl_last_check = 0;

/*
 * The OIDs the generation's schema_history file trusts (read at session
 * start); a relation named changestream.ddl_history with another OID
 * seen in the stream is looked up once (ddl_checked_oids), and if it
 * cannot be proven the extension's now, the session ends after the
 * transaction (ddl_recheck) so that the next one records it.
 */
static List *sess_trusted = NIL;
static List *ddl_checked_oids = NIL;
static bool ddl_recheck = false;

/*
 * Wait ms milliseconds, or until a reload or a new request for a new
 * generation (one that was not pending already) ends the wait.
 */
static void
sleep_ms(long ms)
{
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);
	bool		requested = cs_status_new_generation_requested(false);

	for (;;)
	{
		long		left;
		int			rc;

		CHECK_FOR_INTERRUPTS();
		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), until);
		if (left <= 0)
			break;
		rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					   left, PG_WAIT_EXTENSION);
		if (rc & WL_LATCH_SET)
			ResetLatch(MyLatch);
		if (ConfigReloadPending ||
			(!requested && cs_status_new_generation_requested(false)))
			break;
	}
}

/*
 * Every changestream.snapshot_interval, start a snapshot worker for the
 * current generation (it runs beside this worker; see snapshot_worker.c).
 */
static void
maybe_schedule_snapshot(TimestampTz now)
{
	TimestampTz last;
	bool		running;
	BackgroundWorkerHandle *handle;

	if (cs_snapshot_interval_s <= 0 || now < next_snapshot_attempt ||
		cs_stream_handoff_pending())
		return;
	last = cs_status_last_snapshot(&running);
	if (running ||
		!TimestampDifferenceExceeds(last, now, cs_snapshot_interval_s * 1000))
		return;
	if (cs_launch_snapshot_worker(cs_writer_generation(), 0,
								  &handle) != CS_LAUNCH_OK)
	{
		ereport(LOG,
				(errmsg("could not start a scheduled snapshot"),
				 errdetail("The next attempt is in a minute."),
				 errhint("Raise max_worker_processes if background worker slots are exhausted.")));
		next_snapshot_attempt = TimestampTzPlusMilliseconds(now, 60 * 1000);
		return;
	}
	cs_status_set_last_snapshot(now);
}

/*
 * The OID of the extension's ddl_history if its publication publishes it
 * now (local server, through SPI, in a transaction of its own), else
 * InvalidOid.  Sets *lsn to the server's WAL position read with it.
 */
static Oid
ddl_history_oid_local(XLogRecPtr *lsn)
{
	Oid			oid = InvalidOid;
	bool		isnull;
	Datum		d;
	MemoryContext cxt = CurrentMemoryContext;

	*lsn = InvalidXLogRecPtr;
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not connect to SPI to look up publication \"%s\"",
						CS_DDL_PUBLICATION)));
	if (SPI_execute(cs_ddl_publication_sql(), true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not look up publication \"%s\"", CS_DDL_PUBLICATION),
				 errdetail("The catalog query returned %llu rows, not one.",
						   (unsigned long long) SPI_processed)));
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull)
		oid = cs_ddl_oid_in(TextDatumGetCString(d));
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	if (!isnull)
		*lsn = DatumGetLSN(DirectFunctionCall1(pg_lsn_in,
											   CStringGetDatum(TextDatumGetCString(d))));
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);	/* the commit left TopMemoryContext current */
	return oid;
}

/*
 * While the session streams without the extension's publication: is it
 * time to end the session and start one that streams it?  Once it has
 * been seen (at session start, or here every status_interval on the local
 * server; another server's is looked at by each session start), the
 * session ends when its durable position of record passes the server's
 * WAL position read when it was seen: the next session then starts after
 * the publication's creation, so pgoutput finds it for every change it
 * sends.
 */
static bool
ddl_publication_due(void)
{
	TimestampTz now;

	if (sess_with_ddl)
		return false;
	if (ddl_wait_lsn != InvalidXLogRecPtr)
		return cs_stream_position() >= ddl_wait_lsn;
	if (!cs_archive_config_local(sess_config))
		return false;			/* another server: looked at by each session start */
	now = GetCurrentTimestamp();
	if (!TimestampDifferenceExceeds(ddl_last_check, now, cs_status_interval_ms))
		return false;
	ddl_last_check = now;
	if (OidIsValid(ddl_history_oid_local(&ddl_wait_lsn)))
		return cs_stream_position() >= ddl_wait_lsn;
	ddl_wait_lsn = InvalidXLogRecPtr;
	return false;
}

/*
 * At session start (position: where streaming starts): stream the
 * extension's publication if it exists and was seen before position, or
 * if this is the first look at it (a restart of the server, or a worker
 * that started after CREATE EXTENSION); after a stream failed on it, wait
 * for the position read now.
 */
static bool
ddl_publication_for_session(XLogRecPtr position)
{
	XLogRecPtr	server_lsn;
	Oid			history_oid;

	ddl_last_check = GetCurrentTimestamp();
	if (!cs_ddl_publication_exists(conn, &server_lsn, &history_oid))
	{
		ddl_wait_lsn = InvalidXLogRecPtr;
		ddl_failed = false;
		return false;
	}
	if (ddl_failed)
	{
		ddl_failed = false;
		ddl_wait_lsn = server_lsn;
		ereport(LOG,
				(errmsg("streaming without publication \"%s\" until the archive passes " CS_LSN_FMT,
						CS_DDL_PUBLICATION, LSN_FORMAT_ARGS(server_lsn)),
				 errdetail("The stream failed on a change made before the publication existed.")));
	}
	if (ddl_wait_lsn != InvalidXLogRecPtr && position < ddl_wait_lsn)
		return false;
	ddl_wait_lsn = InvalidXLogRecPtr;
	/* readers take its rows as schema history by this OID only */
	cs_ddl_trust_oid(sess_config->directory, cs_writer_generation(), history_oid);
	sess_trusted = lappend_oid(sess_trusted, history_oid);
	return true;
}

/*
 * history_relation
 *	  stream.c's CsHistoryRelationHook, on a Relation message named changestream.ddl_history,
 *	  before archiving it: an OID the generation does not trust yet is
 *	  recorded in its schema_history file if it is the extension's table
 *	  now (the local server is asked through SPI: the extension was
 *	  dropped and created again while streaming).  Otherwise (another
 *	  server, or not the extension's table) the session ends after the
 *	  transaction, and the next session start records the extension's
 *	  table; an OID is looked at once per process, so a table of that name
 *	  made by anyone else ends one session at most.
 *	  Returns whether the generation trusts the OID now.
 */
static bool
history_relation(Oid relid)
{
	MemoryContext old;
	XLogRecPtr	lsn;

	if (list_member_oid(sess_trusted, relid))
		return true;
	if (list_member_oid(ddl_checked_oids, relid))
		return false;
	old = MemoryContextSwitchTo(TopMemoryContext);
	ddl_checked_oids = lappend_oid(ddl_checked_oids, relid);
	MemoryContextSwitchTo(old);
	if (cs_archive_config_local(sess_config) &&
		ddl_history_oid_local(&lsn) == relid)
	{
		cs_ddl_trust_oid(sess_config->directory, cs_writer_generation(), relid);
		old = MemoryContextSwitchTo(session_cxt);
		sess_trusted = lappend_oid(sess_trusted, relid);
		MemoryContextSwitchTo(old);
		return true;
	}
	ddl_recheck = true;
	return false;
}

/*
 * Do the settings, re-read, still describe the session's archive?  (The
 * copy taken to compare goes with the stream loop's per-iteration
 * context.)
 */
static bool
config_changed(void)
{
	return !cs_archive_config_session_equal(sess_config,
											cs_archive_config_current());
}

/* Does the configuration or an operator ask for a new session? */
static bool
session_should_end(void)
{
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
		if (config_changed())
		{
			ereport(LOG,
					(errmsg("configuration changed, starting a new archiving session")));
			return true;
		}
	}
	/* a session that hands off to a new generation serves the request */
	if (cs_status_new_generation_requested(false) &&
		!cs_stream_handoff_pending())
	{
		ereport(LOG,
				(errmsg("a new generation was requested, starting a new archiving session")));
		return true;
	}
	if (ddl_recheck && !cs_stream_in_transaction())
	{
		ereport(LOG,
				(errmsg("a table named %s.%s not known as the schema history is in the stream, starting a new archiving session",
						CS_DDL_SCHEMA, CS_DDL_TABLE),
				 errdetail("The session start records the extension's table as the schema history of the generation.")));
		return true;
	}
	if (ddl_publication_due())
	{
		ereport(LOG,
				(errmsg("publication \"%s\" exists, starting a new archiving session that streams it",
						CS_DDL_PUBLICATION),
				 errdetail("The archive's position of record " CS_LSN_FMT " is past " CS_LSN_FMT ", where it was seen.",
						   LSN_FORMAT_ARGS(cs_stream_position()),
						   LSN_FORMAT_ARGS(ddl_wait_lsn))));
		return true;
	}
	return false;
}

/*
 * After failed sessions, a session has recovered once it has made
 * something durable: only then are the backoff and the log-once rule reset
 * and the recovery logged.  A session that reaches START_REPLICATION but
 * fails at its first write (a full disk) thus keeps backing off instead of
 * retrying once a second.
 */
static void
note_recovered(void)
{
	int			failed = cs_log_once_reset(&log_once) + 1;

	ereport(LOG,
			(errmsg_plural("streaming again at " CS_LSN_FMT " after %d failed attempt",
						   "streaming again at " CS_LSN_FMT " after %d failed attempts",
						   failed, LSN_FORMAT_ARGS(session_start), failed)));
	last_session_failed = false;
	backoff_ms = BACKOFF_MIN_MS;
}

/*
 * changestream.replica_max_backlog: once the uploader's backlog is past
 * it, and until it is under half of it, the slot is not read (state waiting_for_replica), only what is due
 * is done (flushes, status updates), so nothing is dropped and the local
 * disk stops growing; the server keeps the WAL in the slot.  *waiting: the
 * state of the previous call.  Returns whether it waited.
 */
static bool
replica_backpressure(bool *waiting)
{
	TimestampTz now;

	if (!cs_replica_backlog_exceeded(*waiting))
	{
		if (*waiting)
		{
			*waiting = false;
			cs_status_set_state(CS_STATE_STREAMING);
			ereport(LOG,
					(errmsg("changestream archiver reads the slot again: the replica's backlog is under half of changestream.replica_max_backlog")));
		}
		return false;
	}
	if (!*waiting)
	{
		*waiting = true;
		cs_status_set_state(CS_STATE_WAITING_FOR_REPLICA);
		ereport(LOG,
				(errmsg("changestream archiver stops reading the slot: the files not yet in the replica's bucket exceed changestream.replica_max_backlog (%d kB)",
						cs_replica_max_backlog_kb),
				 errhint("The uploader's state and last error are in changestream.status(); the server keeps the WAL in the slot meanwhile, up to max_slot_wal_keep_size.")));
	}
	now = GetCurrentTimestamp();
	cs_stream_periodic(now, true);
	cs_stream_pause(now);
	return true;
}

/*
 * Stream until the configuration asks for a new session: receive a batch,
 * do what is due, and wait when idle.  Errors leave through the worker's
 * sigsetjmp.
 */
static void
stream_loop(void)
{
	MemoryContext loop_cxt = AllocSetContextCreate(CurrentMemoryContext,
												   "changestream stream loop",
												   ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(loop_cxt);
	bool		waiting = false;

	for (;;)
	{
		pgsocket	fd = PGINVALID_SOCKET;
		TimestampTz now;
		bool		idle;

		CHECK_FOR_INTERRUPTS();
		if (session_should_end())
			break;
		if (replica_backpressure(&waiting))
			continue;
		idle = cs_stream_receive(&fd);
		now = GetCurrentTimestamp();
		cs_stream_periodic(now, idle);
		if (last_session_failed && cs_stream_made_durable())
			note_recovered();
		maybe_schedule_snapshot(now);
		cs_recapture_tick(now);	/* recapture.c */
		cs_ri_tick(sess_config, now);	/* ri_monitor.c */
		MemoryContextReset(loop_cxt);
		if (idle)
			cs_stream_wait(fd, now);
	}
	MemoryContextSwitchTo(old);
	MemoryContextDelete(loop_cxt);
}

/*
 * Close what a session holds outside fd.c's tracking: the connection, the
 * active segment, the snapshot's files and the lock file.
 */
static void
session_cleanup(void)
{
	cs_stream_reset();
	if (conn != NULL)
		cs_disconnect(conn);
	conn = NULL;
	cs_snapshot_cleanup();
	cs_handoff_reset();
	cs_status_clear_progress(CS_PROGRESS_ARCHIVER);
	cs_writer_reset();
	if (lock_fd >= 0)
		close(lock_fd);
	lock_fd = -1;
}

/*
 * A slot that another process streams from cannot be ours: fail the
 * session before any generation decision.  Our own walsender of a session
 * that just ended may still be releasing it, so wait for it a little
 * first.
 */
static void
require_slot_free(CsSlotInfo *slot)
{
	int			i;

	for (i = 0; slot->exists && slot->active && i < SLOT_RELEASE_TRIES; i++)
	{
		sleep_ms(100);
		cs_get_slot(sess_config, conn, slot);
	}
	if (slot->exists && slot->active)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("replication slot \"%s\" is active for PID %d",
						sess_config->slot_name, slot->active_pid),
				 errdetail("Another process is streaming from the slot."),
				 errhint("Stop the other consumer of the slot, or set changestream.slot_name to a slot that only changestream uses.")));
}

/*
 * Lock the archive, connect and look at the slot: drop it if it cannot be
 * used any more.  Returns the slot event that makes a new generation
 * necessary, or NULL.
 */
static const char *
session_connect(uint64 *sysid, uint32 *tli, CsSlotInfo *slot)
{
	const char *slot_event = NULL;
	const char *directory = sess_config->directory;

	if (path_is_prefix_of_path(DataDir, directory))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("changestream.directory \"%s\" is inside the data directory",
						directory),
				 errhint("Put the archive outside the data directory: base backups would copy it and it would share the cluster's fate.")));
	if (strcmp(sess_config->root, directory) != 0)
	{
		/* a database's tree below the root (docs/databases.md) */
		cs_make_dir(sess_config->root);
		cs_make_dir(cs_databases_dir_path(sess_config->root));
	}
	lock_fd = cs_lock_archive(directory);
	cs_remove_tmp_files(directory);

	conn = cs_connect(sess_config, sysid, tli);
	cs_check_publication(sess_config, conn);
	cs_check_replica_identity(sess_config, conn);
	cs_get_slot(sess_config, conn, slot);
	require_slot_free(slot);
	if (slot->exists && slot_undecodable)
	{
		cs_drop_slot(sess_config, conn);
		slot->exists = false;
		slot_event = psprintf("replication slot \"%s\" could not decode past a point where publication \"%s\" did not exist (it was dropped and created again) and is recreated",
							  sess_config->slot_name, sess_config->publication);
	}
	slot_undecodable = false;
	if (slot->exists && slot->lost)
	{
		cs_drop_slot(sess_config, conn);
		slot->exists = false;
		slot_event = psprintf("replication slot \"%s\" was invalidated (wal_status lost) and is recreated",
							  sess_config->slot_name);
	}
	if (!slot->exists && slot_event == NULL)
		slot_event = psprintf("replication slot \"%s\" did not exist and is created",
							  sess_config->slot_name);
	return slot_event;
}

/*
 * Recover the newest generation (gens, oldest first) to continue it until
 * a new generation starts: its position of record in *position.  False,
 * with the writer reset, when it cannot be continued: recovery finds it
 * damaged (XX001, or a data exception), or the slot has confirmed more
 * than it holds.  Then the new generation opens with a gap before it, and
 * the old one is left as it is (docs/DESIGN.md section 7, rule 11).  Other
 * errors propagate.
 */
static bool
recover_for_handoff(List *gens, const CsSlotInfo *slot, XLogRecPtr *position)
{
	const char *directory = sess_config->directory;
	uint64		newest = *(uint64 *) llast(gens);
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool sealed = false;
	ErrorData  *volatile damage = NULL;

	PG_TRY();
	{
		sealed = cs_writer_recover(directory, newest, slot->confirmed_flush,
								   position);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		damage = CopyErrorData();
		if (damage->sqlerrcode != ERRCODE_DATA_CORRUPTED &&
			ERRCODE_TO_CATEGORY(damage->sqlerrcode) != ERRCODE_DATA_EXCEPTION)
			PG_RE_THROW();
		FlushErrorState();
		/* what recovery had open (fd.c's transient files) */
		AtEOXact_Files(false);
	}
	PG_END_TRY();
	if (damage == NULL && slot->confirmed_flush <= *position)
	{
		cs_status_set_segment(cs_writer_segment_index());
		if (sealed)
			cs_maintenance_wake();	/* it compresses the sealed segment */
		return true;
	}
	ereport(LOG,
			(errmsg("generation %016llx cannot be continued until the new generation starts",
					(unsigned long long) newest),
			 damage != NULL ?
			 errdetail("%s", damage->message) :
			 errdetail("Replication slot \"%s\" has confirmed " CS_LSN_FMT ", past the archived position " CS_LSN_FMT ".",
					   sess_config->slot_name,
					   LSN_FORMAT_ARGS(slot->confirmed_flush),
					   LSN_FORMAT_ARGS(*position)),
			 errhint("changestream.generations() shows the gap before the new generation.")));
	cs_writer_reset();
	return false;
}

/*
 * handoff_to_new_generation
 *	  stream.c's CsHandoffHook: the stream has reached the pending
 *	  generation's start and the writer's generation ends there durably.
 *	  Seal it, start the new one (generation_policy.c), give the new one the
 *	  schema history's OIDs this session trusts, and publish it.
 */
static void
handoff_to_new_generation(void)
{
	uint64		old = cs_writer_generation();
	uint64		generation;
	XLogRecPtr	start;
	ListCell   *lc;

	(void) cs_handoff_pending(&generation, &start);
	generation = cs_complete_handoff();
	foreach(lc, sess_trusted)
		cs_ddl_trust_oid(sess_config->directory, generation, lfirst_oid(lc));
	cs_status_set_generation(generation);
	cs_status_new_generation_requested(true);	/* satisfied by this one */
	cs_maintenance_wake();		/* the old generation's last segment is sealed */
	ereport(LOG,
			(errmsg("started generation %016llx at " CS_LSN_FMT,
					(unsigned long long) generation, LSN_FORMAT_ARGS(start)),
			 errdetail("Reason: requested by changestream.new_generation(); generation %016llx was archived up to " CS_LSN_FMT " and ends there, without a gap.",
					   (unsigned long long) old, LSN_FORMAT_ARGS(start))));
}

/*
 * Recover the newest generation's segments for this session (its position
 * of record into *position), as cs_writer_recover() does.
 */
static void
recover_newest(uint64 generation, const CsSlotInfo *slot,
			   XLogRecPtr *position)
{
	bool		sealed;

	sealed = cs_writer_recover(sess_config->directory, generation,
							   slot->confirmed_flush, position);
	cs_status_set_segment(cs_writer_segment_index());
	if (sealed)
		cs_maintenance_wake();	/* it compresses the sealed segment */
}

/*
 * The server's timeline is not the newest generation's, and nothing else
 * differs (reason says so): a promotion.  The generation continues on the
 * new timeline when that is provably gapless: the slot came across (it
 * exists: a failover slot a standby kept in step, PostgreSQL 17 and later),
 * it is not ahead of the archive's position of record P, and P is not past
 * the point where the generation's timeline ended in the new timeline's
 * history, so every transaction the archive holds is one the new timeline
 * has too.  Then the new timeline is recorded in the generation's
 * timelines file (durably, before anything of it is archived) and NULL is
 * returned, the generation recovered (*position is P).  Otherwise returns
 * the reason for a new generation, saying why, with the writer reset.
 */
static const char *
continue_across_promotion(const CsIdentity *identity, uint32 tli,
						  const CsSlotInfo *slot, const char *reason,
						  XLogRecPtr *position)
{
	const char *directory = sess_config->directory;
	uint32		gen_tli = cs_generation_timeline(directory, identity);
	XLogRecPtr	switch_lsn = InvalidXLogRecPtr;
	const char *why = NULL;

	recover_newest(identity->generation, slot, position);
	if (!cs_timeline_switch_lsn(conn, tli, gen_tli, &switch_lsn))
		why = psprintf("timeline %u is not in the history of timeline %u",
					   gen_tli, tli);
	else if (*position > switch_lsn)
		why = psprintf("the archive's position of record " CS_LSN_FMT " is past " CS_LSN_FMT ", where timeline %u ended, so the new timeline may lack what the archive holds",
					   LSN_FORMAT_ARGS(*position), LSN_FORMAT_ARGS(switch_lsn), gen_tli);
	else if (slot->confirmed_flush > *position)
		why = psprintf("replication slot \"%s\" is ahead of the archive: its confirmed_flush_lsn " CS_LSN_FMT " is past the archived position " CS_LSN_FMT,
					   sess_config->slot_name, LSN_FORMAT_ARGS(slot->confirmed_flush),
					   LSN_FORMAT_ARGS(*position));
	if (why != NULL)
	{
		cs_writer_reset();
		return psprintf("%s; %s", reason, why);
	}
	cs_add_generation_timeline(directory, identity, tli, switch_lsn);
	ereport(LOG,
			(errmsg("continuing generation %016llx on timeline %u after a promotion",
					(unsigned long long) identity->generation, tli),
			 errdetail("Timeline %u ended at " CS_LSN_FMT "; the archive ends at " CS_LSN_FMT " and replication slot \"%s\" came across at " CS_LSN_FMT ".",
					   gen_tli, LSN_FORMAT_ARGS(switch_lsn),
					   LSN_FORMAT_ARGS(*position), sess_config->slot_name,
					   LSN_FORMAT_ARGS(slot->confirmed_flush))));
	return NULL;
}

/*
 * Continue the newest generation, or open a new one when there is a true
 * reason; returns the position of record streaming starts at.  When the
 * reason is an operator's request and the newest generation can be
 * continued, the new generation's snapshot is taken now (at C), and the
 * session continues the newest generation from its position of record
 * until C, where the stream hands off (*handoff_lsn is C; else Invalid):
 * no commit falls between the two (docs/DESIGN.md section 6).
 */
static XLogRecPtr
choose_generation(uint64 sysid, uint32 tli, const CsSlotInfo *slot,
				  const char *slot_event, XLogRecPtr *handoff_lsn)
{
	const char *directory = sess_config->directory;
	List	   *gens = cs_list_generations(directory);
	CsIdentity	identity;
	const char *reason;
	uint64		generation;
	XLogRecPtr	position = InvalidXLogRecPtr;
	bool		requested = cs_status_new_generation_requested(false);
	bool		promotion;
	bool		recovered = false;

	*handoff_lsn = InvalidXLogRecPtr;
	reason = cs_new_generation_reason(sess_config, gens, sysid, tli, slot,
									  slot_event, requested, &identity,
									  &promotion);
	if (promotion)
	{
		reason = continue_across_promotion(&identity, tli, slot, reason,
										   &position);
		recovered = (reason == NULL);
	}
	if (reason != NULL && requested &&
		cs_generation_continuable(sess_config, gens, sysid, tli, slot,
								  slot_event, &identity) &&
		recover_for_handoff(gens, slot, &position))
	{
		generation = cs_writer_generation();
		*handoff_lsn = cs_prepare_handoff(sess_config, sysid, tli, reason);
		if (*handoff_lsn < position)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("the new generation's snapshot at " CS_LSN_FMT " is before the archive's position of record " CS_LSN_FMT,
							LSN_FORMAT_ARGS(*handoff_lsn), LSN_FORMAT_ARGS(position))));
		ereport(LOG,
				(errmsg("continuing generation %016llx from " CS_LSN_FMT " until the new generation's start " CS_LSN_FMT,
						(unsigned long long) generation,
						LSN_FORMAT_ARGS(position), LSN_FORMAT_ARGS(*handoff_lsn)),
				 errdetail("Reason for the new generation: %s.", reason)));
		cs_status_set_last_snapshot(cs_newest_snapshot_time(directory,
															generation));
		return position;
	}
	if (reason == NULL)
	{
		generation = *(uint64 *) llast(gens);
		if (!recovered)
			recover_newest(generation, slot, &position);

		/*
		 * Recovery found the archive intact: a slot past its position of
		 * record means the archive is older than the slot (restored from a
		 * copy), and what lies between is lost to this generation.
		 */
		if (slot->confirmed_flush > position)
		{
			reason = psprintf("replication slot \"%s\" is ahead of the archive: its confirmed_flush_lsn " CS_LSN_FMT " is past the archived position " CS_LSN_FMT,
							  sess_config->slot_name, LSN_FORMAT_ARGS(slot->confirmed_flush),
							  LSN_FORMAT_ARGS(position));
			cs_writer_reset();
		}
	}
	if (reason != NULL)
	{
		generation = cs_open_generation(sess_config, conn, !slot->exists,
										sysid, tli, reason, &position);
		cs_status_new_generation_requested(true);	/* satisfied by this one */
		ereport(LOG,
				(errmsg("started generation %016llx at " CS_LSN_FMT,
						(unsigned long long) generation,
						LSN_FORMAT_ARGS(position)),
				 errdetail("Reason: %s.", reason)));
	}
	else
	{
		ereport(last_session_failed ? DEBUG1 : LOG,
				(errmsg("resuming generation %016llx at " CS_LSN_FMT,
						(unsigned long long) generation,
						LSN_FORMAT_ARGS(position))));
		cs_status_set_last_snapshot(cs_newest_snapshot_time(directory,
															generation));
	}
	return position;
}

/*
 * One archiving session under sess_config (taken by the caller, in
 * session_cxt): returns after a clean end, leaves by the worker's
 * sigsetjmp after an error.
 */
static void
run_session(void)
{
	uint64		sysid;
	uint32		tli;
	CsSlotInfo	slot;
	const char *slot_event;
	XLogRecPtr	position;
	XLogRecPtr	handoff_lsn;

	next_snapshot_attempt = 0;
	sess_with_ddl = false;
	sess_trusted = NIL;
	ddl_recheck = false;
	cs_recapture_session_start();
	MemoryContextSwitchTo(session_cxt);

	cs_status_set_state(CS_STATE_CONNECTING);
	cs_status_set_slot(sess_config->slot_name);
	cs_stream_reset();
	cs_guc_require_accepted();	/* no silent default: guc_rejected.c */
	cs_writer_reset();

	slot_event = session_connect(&sysid, &tli, &slot);
	position = choose_generation(sysid, tli, &slot, slot_event, &handoff_lsn);
	cs_stream_writer_opened(position);
	if (handoff_lsn != InvalidXLogRecPtr)
		cs_stream_set_handoff(handoff_lsn, handoff_to_new_generation);
	cs_status_set_generation(cs_writer_generation());
	cs_recapture_resume(sess_config->directory, GetCurrentTimestamp());

	sess_trusted = cs_ddl_trusted_oids(sess_config->directory, cs_writer_generation());
	sess_with_ddl = ddl_publication_for_session(position);
	cs_start_replication(sess_config, conn, position, sess_with_ddl);
	cs_stream_started(sess_config, conn, history_relation);
	cs_status_set_state(CS_STATE_STREAMING);
	session_start = position;

	stream_loop();

	/* a clean end of session: make everything durable and say so */
	cs_status_set_state(CS_STATE_STOPPING);
	cs_stream_finish();
	session_cleanup();
}

/*
 * before_shmem_exit callback: on SIGTERM (die -> FATAL) and any other
 * FATAL, make what was received durable and send a last status update
 * (durability rule 6).
 */
static void
archiver_exit(int code, Datum arg)
{
	if (!cs_status_attached())
		return;
	cs_status_set_state(CS_STATE_STOPPING);
	cs_stream_exit();
	if (conn != NULL)
		cs_disconnect(conn);
	conn = NULL;
	cs_status_archiver_exited();
}

/*
 * before_shmem_exit callback for a worker that dies before it is connected
 * (typically: changestream.database does not exist): say so in status().
 */
static void
startup_exit(int code, Datum arg)
{
	cs_status_archiver_startup_failed(start_config->database);
}

/*
 * pgoutput decodes with the catalog as of each change: once a publication
 * is dropped, the slot cannot decode the changes made before it is created
 * again, and every restart of the stream fails at the same change.  When
 * the stream failed that way although the publication existed when the
 * session began, the next session recreates the slot and opens a new
 * generation (with its snapshot), instead of failing forever.  The match
 * is on the server's English message text.
 */
static void
note_stream_error(const char *message, bool was_streaming)
{
	char	   *needle;

	if (!was_streaming || message == NULL)
		return;
	needle = psprintf("publication \"%s\" does not exist",
					  sess_config->publication);
	if (strstr(message, needle) != NULL && strstr(message, "WAL stream") != NULL)
	{
		slot_undecodable = true;
		ereport(LOG,
				(errmsg("replication slot \"%s\" cannot decode past a change made while publication \"%s\" did not exist",
						sess_config->slot_name, sess_config->publication),
				 errdetail("The next session recreates the slot and opens a new generation once the publication exists.")));
	}
	pfree(needle);
	needle = psprintf("publication \"%s\" does not exist", CS_DDL_PUBLICATION);
	if (sess_with_ddl && strstr(message, needle) != NULL &&
		strstr(message, "WAL stream") != NULL)
	{
		ddl_failed = true;
		ereport(LOG,
				(errmsg("the stream failed on a change decoded before publication \"%s\" existed, or after it was dropped",
						CS_DDL_PUBLICATION),
				 errdetail("The next session streams without it until the archive has passed the server's current position.")));
	}
	pfree(needle);
}

/*
 * The error path of a session, entered through sigsetjmp: log the error
 * (once), release what the session held, publish the error and wait the
 * backoff delay.
 */
static void
session_failed(void)
{
	ErrorData  *edata;
	bool		was_streaming = cs_stream_is_streaming();

	error_context_stack = NULL;
	HOLD_INTERRUPTS();
	MemoryContextSwitchTo(TopMemoryContext);
	edata = CopyErrorData();
	note_stream_error(edata->message, was_streaming);
	if (cs_log_once_should_log(&log_once, edata->sqlerrcode, edata->message))
		EmitErrorReport();
	FlushErrorState();

	/*
	 * Release what the failed session held, as bgwriter.c does after an
	 * error: wait events, LWLocks, the transaction if one was open, and
	 * every file and directory fd.c tracks (AllocateDir, AllocateFile,
	 * OpenTransientFile), which outside a transaction nothing else would
	 * close.  The long-lived files are closed by session_cleanup().
	 */
	pgstat_report_wait_end();
	LWLockReleaseAll();
	AbortOutOfAnyTransaction();
	AtEOXact_Files(false);
	session_cleanup();
	MemoryContextReset(session_cxt);
	sess_config = NULL;
	cs_status_set_error(edata->message);
	FreeErrorData(edata);
	MemoryContextSwitchTo(TopMemoryContext);
	RESUME_INTERRUPTS();

	sleep_ms(backoff_ms);
	backoff_ms = Min(backoff_ms * 2, BACKOFF_MAX_MS);
	last_session_failed = true;
}

/*
 * The configuration of the next session, from the current settings, in a
 * fresh session_cxt.
 */
static void
take_session_config(void)
{
	MemoryContext old;

	sess_config = NULL;
	MemoryContextReset(session_cxt);
	old = MemoryContextSwitchTo(session_cxt);
	sess_config = cs_archive_config_current();
	MemoryContextSwitchTo(old);
}

/*
 * While the server is a hot standby: show state "standby", say so once in
 * the log, and wait STANDBY_POLL_MS (or until the latch is set) before the
 * caller looks again.  Nothing is archived and the archive directory is not
 * touched (not even its lock): a standby cannot write to the primary's
 * slot, and an HA manager deploys the primary's settings, directory
 * included, on every node (docs/DESIGN.md section 1).  Returns true while
 * the server is a standby; false once it is not, logging the promotion
 * when a standby state was shown before.
 */
static bool
wait_while_standby(void)
{
	int			rc;

	if (!RecoveryInProgress())
	{
		if (logged_standby)
			ereport(LOG,
					(errmsg("changestream archiver: the server was promoted, archiving starts")));
		logged_standby = false;
		return false;
	}
	cs_status_set_state(CS_STATE_STANDBY);
	if (!logged_standby)
		ereport(LOG,
				(errmsg("changestream archiver: the server is a standby, archiving waits for promotion"),
				 errdetail("A standby does not archive and leaves the archive directory to the primary's archiver."),
				 errhint("The archive functions can read the archive here; archiving starts when the server is promoted.")));
	logged_standby = true;
	rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
				   STANDBY_POLL_MS, PG_WAIT_EXTENSION);
	if (rc & WL_LATCH_SET)
		ResetLatch(MyLatch);
	return true;
}

/*
 * changestream_archiver_main
 *	  Entry point of a "changestream archiver" background worker, started
 *	  by the launcher (launcher.c) with its database's status entry index
 *	  in main_arg and the database's name in bgw_extra.  Connects to that
 *	  database and runs archiving sessions into its archive until SIGTERM;
 *	  never returns.
 */
void
changestream_archiver_main(Datum main_arg)
{
	sigjmp_buf	local_sigjmp_buf;
	char		database[NAMEDATALEN];

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	MemoryContextSwitchTo(TopMemoryContext);
	strlcpy(database, MyBgworkerEntry->bgw_extra, NAMEDATALEN);
	cs_status_select(DatumGetInt32(main_arg));
	cs_archive_config_serve(database);
	start_config = cs_archive_config_current();
	cs_status_archiver_started(MyLatch, start_config->database,
							   start_config->slot_name);
	before_shmem_exit(startup_exit, (Datum) 0);
	BackgroundWorkerInitializeConnection(start_config->database, NULL, 0);

	/*
	 * A transaction waiting in synchronous replication for the archiver
	 * (changestream.synchronous) still holds its locks: the archiver's own
	 * catalog queries must never wait on them for long.  A timeout fails
	 * the session, which resumes from what is durable.
	 */
	SetConfigOption("lock_timeout", ARCHIVER_LOCK_TIMEOUT, PGC_SUSET,
					PGC_S_OVERRIDE);
	cs_status_set_state(CS_STATE_CONNECTING);
	load_file("libpqwalreceiver", false);
	before_shmem_exit(archiver_exit, (Datum) 0);

	session_cxt = AllocSetContextCreate(TopMemoryContext, "changestream session",
										ALLOCSET_DEFAULT_SIZES);

	if (sigsetjmp(local_sigjmp_buf, 1) != 0)
		session_failed();
	PG_exception_stack = &local_sigjmp_buf;

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (wait_while_standby())
			continue;
		take_session_config();
		if (!cs_archive_config_enabled(sess_config))
		{
			int			rc;

			cs_status_set_state(CS_STATE_DISABLED);
			if (!logged_disabled)
				ereport(LOG,
						(errmsg("archiving is disabled because changestream.directory is not set"),
						 errhint("Set changestream.directory in postgresql.conf and reload the configuration.")));
			logged_disabled = true;
			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_EXIT_ON_PM_DEATH, -1,
						   PG_WAIT_EXTENSION);
			if (rc & WL_LATCH_SET)
				ResetLatch(MyLatch);
			continue;
		}
		logged_disabled = false;
		run_session();
	}
}
