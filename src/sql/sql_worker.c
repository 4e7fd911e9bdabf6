/*-------------------------------------------------------------------------
 *
 * sql_worker.c
 *	  The SQL functions that talk to the workers rather than read the
 *	  archive: status(), take_snapshot() and new_generation().  They go
 *	  through the accessors of shmem_status.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "replication/slot.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"

#include "archive/reader_pins.h"
#include "base/archive_config.h"
#include "base/compat.h"
#include "base/guc.h"
#include "base/shmem_status.h"
#include "base/slot_wal.h"
#include "replica/replica_status.h"
#include "worker/snapshot_worker.h"

PG_FUNCTION_INFO_V1(changestream_status);
PG_FUNCTION_INFO_V1(changestream_take_snapshot);
PG_FUNCTION_INFO_V1(changestream_new_generation);

#define STATUS_COLS		63

static void require_streaming(CsStatus *s, const char *fname,
							  bool error_ok);

/* confirmed_flush_lsn of a slot of the local server, or 0 */
static XLogRecPtr
local_confirmed_flush(const char *name)
{
	ReplicationSlot *slot;
	XLogRecPtr	confirmed = InvalidXLogRecPtr;

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	slot = SearchNamedReplicationSlot(name, false);
	if (slot != NULL)
	{
		SpinLockAcquire(&slot->mutex);
		confirmed = slot->data.confirmed_flush;
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(ReplicationSlotControlLock);
	return confirmed;
}

/*
 * The slot's WAL columns of status(): slot_wal_status,
 * slot_retained_bytes, slot_safe_wal_size, slot_wal_limit_bytes (four
 * values and nulls; slot_wal.c).  slot: the archiver's slot on the local
 * server, or NULL when it streams from another server.
 */
static void
slot_wal_values(const char *slot, Datum *values, bool *nulls)
{
	CsSlotWal	wal;
	int64		limit = cs_slot_wal_limit_bytes();

	values[3] = Int64GetDatum(limit);
	nulls[3] = limit < 0;
	if (slot == NULL || !cs_slot_wal(slot, &wal))
	{
		nulls[0] = nulls[1] = nulls[2] = true;
		return;
	}
	values[0] = CStringGetTextDatum(wal.wal_status);
	values[1] = Int64GetDatum(wal.retained_bytes);
	nulls[1] = strcmp(wal.wal_status, "lost") == 0;
	values[2] = Int64GetDatum(wal.safe_wal_size);
	nulls[2] = !wal.safe_known;
}

/*
 * The snapshot progress columns of status(): snapshot_table,
 * snapshot_rows, waiting_for (three values and nulls).
 */
static void
progress_values(const CsStatus *s, Datum *values, bool *nulls)
{
	/* the archiver's own snapshot first, else the snapshot worker's */
	const CsProgress *p = s->progress[CS_PROGRESS_ARCHIVER].table[0] ?
		&s->progress[CS_PROGRESS_ARCHIVER] : &s->progress[CS_PROGRESS_SNAPSHOT];
	const char *w0 = s->progress[CS_PROGRESS_ARCHIVER].waiting_for;
	const char *w1 = s->progress[CS_PROGRESS_SNAPSHOT].waiting_for;

	values[0] = CStringGetTextDatum(p->table);
	nulls[0] = p->table[0] == '\0';
	values[1] = Int64GetDatum(p->rows);
	nulls[1] = p->table[0] == '\0';
	if (w0[0] && w1[0])
		values[2] = CStringGetTextDatum(psprintf("archiver: %s; snapshot worker: %s", w0, w1));
	else
		values[2] = CStringGetTextDatum(w0[0] ? w0 : w1);
	nulls[2] = !w0[0] && !w1[0];
}

/*
 * The uploader's columns of status() (14, from replica_state), from its
 * shared memory and the archiver's status s (docs/DESIGN.md section 15).
 */
static void
replica_values(const CsStatus *s, Datum *values, bool *nulls)
{
	CsReplicaStatus r;

	cs_replica_status_copy(&r);
	memset(nulls, 0, 14 * sizeof(bool));
	values[0] = CStringGetTextDatum(cs_replica_state_name(r.state));
	nulls[0] = r.pid == 0 && (cs_replica_url == NULL || cs_replica_url[0] == '\0');
	values[1] = Int32GetDatum(r.pid);
	nulls[1] = r.pid == 0;
	values[2] = LSNGetDatum(r.flushed_lsn);
	nulls[2] = r.flushed_lsn == InvalidXLogRecPtr;
	if (r.flushed_lsn != InvalidXLogRecPtr && s->has_generation &&
		s->generation == r.flushed_generation &&
		s->flushed_lsn != InvalidXLogRecPtr)
		values[3] = Int64GetDatum(s->flushed_lsn > r.flushed_lsn ?
								  (int64) (s->flushed_lsn - r.flushed_lsn) : 0);
	else
		nulls[3] = true;
	values[4] = Int64GetDatum(r.backlog_files);
	nulls[4] = r.pid == 0 || r.backlog_files < 0;
	values[5] = Int64GetDatum(r.backlog_bytes);
	nulls[5] = r.pid == 0 || r.backlog_bytes < 0;
	values[6] = TimestampTzGetDatum(r.last_upload_at);
	nulls[6] = r.last_upload_at == 0;
	values[7] = CStringGetTextDatum(r.last_error);
	nulls[7] = r.last_error[0] == '\0';
	values[8] = TimestampTzGetDatum(r.last_error_at);
	nulls[8] = r.last_error_at == 0;
	values[9] = Int64GetDatum((int64) r.puts);
	values[10] = Int64GetDatum((int64) r.gets);
	values[11] = Int64GetDatum((int64) r.lists);
	values[12] = Int64GetDatum((int64) r.deletes);
	values[13] = Int64GetDatum((int64) r.bytes_sent);
}

/*
 * The failure counters of status(): archiver_failures, snapshot_failures,
 * replica_failures, failures_since (four values and nulls).  The
 * uploader's count is the server's (one uploader serves every archive);
 * NULL without a replica, as replica_state.
 */
static void
failure_values(const CsStatus *s, Datum *values, bool *nulls)
{
	CsReplicaStatus r;

	cs_replica_status_copy(&r);
	values[0] = Int64GetDatum((int64) s->archiver_failures);
	nulls[0] = false;
	values[1] = Int64GetDatum((int64) s->snapshot_failures);
	nulls[1] = false;
	values[2] = Int64GetDatum((int64) r.failures);
	nulls[2] = r.pid == 0 && r.failures == 0 &&
		(cs_replica_url == NULL || cs_replica_url[0] == '\0');
	values[3] = TimestampTzGetDatum(s->failures_since);
	nulls[3] = s->failures_since == 0;
}

/*
 * The values of the status() row of the selected status entry, whose
 * archive is config, for a row type of natts columns.
 */
static void
status_values(const CsArchiveConfig *config, int natts, Datum *values,
			  bool *nulls)
{
	CsStatus	s;
	CsMaintenanceStatus c;
	bool		local = cs_archive_config_local(config);
	XLogRecPtr	confirmed = InvalidXLogRecPtr;

	cs_status_copy(&s);
	cs_maintenance_status_copy(&c);

	if (local && s.slot[0] != '\0')
		confirmed = local_confirmed_flush(s.slot);

	memset(nulls, 0, sizeof(bool) * STATUS_COLS);
	values[0] = Int32GetDatum(s.pid);
	nulls[0] = s.pid == 0;
	values[1] = CStringGetTextDatum(cs_state_name(s.state));
	values[2] = CStringGetTextDatum(s.database[0] ? s.database : config->database);
	values[3] = CStringGetTextDatum(s.slot[0] ? s.slot : config->slot_name);
	if (s.has_generation)
		values[4] = CStringGetTextDatum(psprintf("%016llx", (unsigned long long) s.generation));
	else
		nulls[4] = true;
	values[5] = Int64GetDatum(s.segment_index);
	nulls[5] = s.segment_index < 0;
	values[6] = LSNGetDatum(s.received_lsn);
	nulls[6] = s.received_lsn == InvalidXLogRecPtr;
	values[7] = LSNGetDatum(s.flushed_lsn);
	nulls[7] = s.flushed_lsn == InvalidXLogRecPtr;
	values[8] = LSNGetDatum(confirmed);
	nulls[8] = confirmed == InvalidXLogRecPtr;
	if (s.flushed_lsn != InvalidXLogRecPtr)
	{
		XLogRecPtr	head = local && !RecoveryInProgress() ?
			GetFlushRecPtr(NULL) : s.received_lsn;

		values[9] = Int64GetDatum(head > s.flushed_lsn ? (int64) (head - s.flushed_lsn) : 0);
	}
	else
		nulls[9] = true;
	values[10] = TimestampTzGetDatum(s.last_message_at);
	nulls[10] = s.last_message_at == 0;
	values[11] = TimestampTzGetDatum(s.last_flush_at);
	nulls[11] = s.last_flush_at == 0;
	values[12] = Int64GetDatum((int64) s.messages);
	values[13] = Int64GetDatum((int64) s.transactions);
	values[14] = Int64GetDatum((int64) s.bytes);
	values[15] = CStringGetTextDatum(s.last_error);
	nulls[15] = s.last_error[0] == '\0';
	values[16] = TimestampTzGetDatum(s.last_error_at);
	nulls[16] = s.last_error_at == 0;
	progress_values(&s, values + 17, nulls + 17);
	values[20] = CStringGetTextDatum(s.no_replica_identity);
	nulls[20] = s.no_replica_identity[0] == '\0';
	values[21] = Int32GetDatum(c.pid);
	nulls[21] = c.pid == 0;
	values[22] = Int64GetDatum(c.raw_sealed_segments);
	nulls[22] = c.raw_sealed_segments < 0;
	values[23] = Int64GetDatum((int64) c.segments_compressed);
	values[24] = CStringGetTextDatum(c.last_error);
	nulls[24] = c.last_error[0] == '\0';
	values[25] = TimestampTzGetDatum(c.last_error_at);
	nulls[25] = c.last_error_at == 0;
	{
		int64		freed;
		TimestampTz at = cs_retention_status_get(&freed);

		values[26] = TimestampTzGetDatum(at);
		nulls[26] = at == 0;
		values[27] = Int64GetDatum(freed);
	}
	values[28] = BoolGetDatum(c.deferring);
	values[29] = Float8GetDatum(s.commit_rate);
	nulls[29] = s.group_commit_ms == 0;
	values[30] = Int32GetDatum(s.group_commit_ms);
	nulls[30] = s.group_commit_ms == 0;
	{
		pid_t		held_pid;
		int64		held_bytes;
		TimestampTz since = cs_retention_held_get(&held_pid, &held_bytes);

		values[31] = BoolGetDatum(since != 0);
		values[32] = TimestampTzGetDatum(since);
		nulls[32] = since == 0;
		values[33] = Int64GetDatum(held_bytes);
		nulls[33] = since == 0;
		values[34] = Int32GetDatum((int32) held_pid);
		nulls[34] = since == 0;
	}
	values[35] = BoolGetDatum(s.handoff_pending);
	values[36] = CStringGetTextDatum(psprintf("%016llx",
											  (unsigned long long) s.handoff_generation));
	nulls[36] = !s.handoff_pending;
	values[37] = LSNGetDatum(s.handoff_lsn);
	nulls[37] = !s.handoff_pending;
	replica_values(&s, values + 38, nulls + 38);
	slot_wal_values(local ? (s.slot[0] ? s.slot : config->slot_name) : NULL,
					values + 52, nulls + 52);
	values[56] = TimestampTzGetDatum(s.last_commit_time);
	nulls[56] = s.last_commit_time == 0;
	values[57] = TimestampTzGetDatum(s.received_commit_time);
	nulls[57] = s.received_commit_time == 0;
	{
		double		lag;

		nulls[58] = !cs_replica_lag_seconds(GetCurrentTimestamp(), &lag);
		values[58] = Float8GetDatum(lag);
	}
	failure_values(&s, values + 59, nulls + 59);
	if (natts > STATUS_COLS)
		elog(ERROR, "status() declares %d columns, at most %d are known",
			 natts, STATUS_COLS);
}

/*
 * The status() row of every archived database (one per status entry in
 * use, in the order the launcher claimed them), into the materialized
 * result; the current database's row when none is in use yet.
 */
static void
status_rows(FunctionCallInfo fcinfo, const CsArchiveConfig *current)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[STATUS_COLS];
	bool		nulls[STATUS_COLS];
	char		database[NAMEDATALEN];
	int			rows = 0;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < CS_MAX_DATABASES; i++)
	{
		if (!cs_status_in_use(i, database))
			continue;
		cs_status_select(i);
		status_values(cs_archive_config_for(database,
											get_database_oid(database, true)),
					  rsinfo->setDesc->natts, values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		rows++;
	}
	if (rows == 0)
	{
		(void) cs_archive_config_current();	/* selects its entry */
		status_values(current, rsinfo->setDesc->natts, values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

/*
 * changestream.status(), returning one record per archived database
 *	  (docs/databases.md; version 0.1 declares a single record, that of the
 *	  current database's archive: cs_archive_config_current()), of (pid
 *	  int, state text, database text,
 *	  slot text, generation text, segment_index bigint, received_lsn,
 *	  flushed_lsn, confirmed_flush_lsn pg_lsn, lag_bytes bigint,
 *	  last_message_at, last_flush_at timestamptz, messages, transactions, bytes
 *	  bigint, last_error text, last_error_at timestamptz, snapshot_table text,
 *	  snapshot_rows bigint, waiting_for text, tables_without_replica_identity
 *	  text, compressor_pid int, raw_sealed_segments, compressed_segments
 *	  bigint, last_compress_error text, last_compress_error_at timestamptz,
 *	  last_retention_at timestamptz, retention_freed_bytes bigint,
 *	  compression_deferred bool, commit_rate float8, group_commit_ms int,
 *	  retention_held bool, retention_held_since timestamptz,
 *	  retention_held_bytes bigint, retention_held_by_pid int,
 *	  handoff_pending bool, handoff_generation text, handoff_lsn pg_lsn,
 *	  the replica's, slot WAL and commit time columns (see the SQL
 *	  script), archiver_failures, snapshot_failures, replica_failures
 *	  bigint, failures_since timestamptz)
 *	  flushed_lsn is
 *	  what the archiver has made durable and reported; confirmed_flush_lsn is
 *	  read from the local slot (NULL when the slot is on another server);
 *	  lag_bytes is the local WAL flush LSN minus flushed_lsn (received_lsn
 *	  minus flushed_lsn for a remote server). last_retention_at is the
 *	  archiver's last retention run (NULL: none since the server started),
 *	  retention_freed_bytes what retention deleted since then (bytes on disk).
 *	  compression_deferred: the maintenance worker waits while the archiver
 *	  catches up (maintenance.c). commit_rate: transactions archived a second
 *	  over the archiver's last period of measurement (at least 100 ms);
 *	  group_commit_ms: the group commit window it sizes, in ms (flush_interval
 *	  while catching up); both NULL until an archiving session has published
 *	  them (stream_pacing.c, cs_pacing_update_commit_rate(),
 *	  cs_pacing_group_commit_ms()).  retention_held: the last retention run
 *	  kept files the window would let go because a reader pinned them;
 *	  retention_held_since when that began (runs held back ever since),
 *	  retention_held_bytes what the last run could not free (bytes on disk),
 *	  retention_held_by_pid the backend whose pin kept the most (all three NULL
 *	  when not held).  handoff_pending: a requested new generation's
 *	  snapshot is taken and the archiver still writes the generation before
 *	  it, up to the new one's start (docs/DESIGN.md section 6);
 *	  handoff_generation and handoff_lsn name that generation and its start
 *	  (both NULL when none is pending); take_snapshot() and new_generation()
 *	  are refused meanwhile.  replica_state .. replica_bytes_sent: the
 *	  uploader's status (replica_values(), replica_status.c).
 *	  slot_wal_status .. slot_wal_limit_bytes: the WAL the local slot keeps
 *	  (slot_wal_values(), slot_wal.c).  last_commit_time: the commit time
 *	  of the newest transaction the archive holds durably (NULL: none since
 *	  the server started; stream.c, note_durable_commit());
 *	  received_commit_time: that of the newest transaction received (later
 *	  while one waits to be made durable).  replica_lag_seconds: the age of
 *	  the oldest local flush the bucket lacks (cs_replica_lag_seconds()).
 *	  The extension's SQL of version 0.1 declares only the
 *	  first 31 columns: the row is built for as many columns as the declared
 *	  type has.
 *	  Errors: class 55 when the library was not preloaded.
 */
Datum
changestream_status(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[STATUS_COLS];
	bool		nulls[STATUS_COLS];
	CsArchiveConfig *config;

	cs_status_require_loaded();
	config = cs_archive_config_current();
	if (fcinfo->flinfo->fn_retset)
	{
		status_rows(fcinfo, config);
		return (Datum) 0;
	}
	/* version 0.1 declares one row: the current database's */
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	status_values(config, tupdesc->natts, values, nulls);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}

/*
 * Refuse fname while a hand-off to a new generation is pending (s: the
 * status copied when it was found): 55000 naming the pending generation
 * and its start (docs/DESIGN.md section 6).
 */
static void
refuse_during_handoff(const CsStatus *s, const char *fname)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("cannot call %s while the archiver hands off to a new generation",
					fname),
			 errdetail("Generation %016llx has its snapshot at " CS_LSN_FMT " and starts there once the archiver's stream reaches that LSN; until then generation %016llx is still written.",
					   (unsigned long long) s->handoff_generation,
					   LSN_FORMAT_ARGS(s->handoff_lsn),
					   (unsigned long long) s->generation),
			 errhint("Retry once changestream.status() shows handoff_pending false.")));
}

/*
 * Check that the calling transaction holds no xid, that no hand-off to a
 * new generation is pending, and that the archiver is streaming (or, with
 * error_ok, retrying after an error) and copy its status into *s.
 */
static void
require_streaming(CsStatus *s, const char *fname, bool error_ok)
{
	/* slot creation waits for every transaction with an xid: ours too */
	if (TransactionIdIsValid(GetTopTransactionIdIfAny()))
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("cannot call %s in a transaction that has written", fname),
				 errdetail("Creating the snapshot's replication slot waits for every running transaction, this one included."),
				 errhint("Call it in a transaction of its own.")));
	cs_status_require_loaded();
	(void) cs_archive_config_current(); /* selects the database's entry */
	cs_status_copy(s);
	if (s->handoff_pending)
		refuse_during_handoff(s, fname);
	if (s->pid == 0 ||
		!(s->state == CS_STATE_STREAMING ||
		  (error_ok && (s->state == CS_STATE_ERROR ||
						s->state == CS_STATE_CONNECTING))) ||
		(!error_ok && !s->has_generation))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the changestream archiver is not streaming"),
				 errdetail("Its state is \"%s\".", cs_state_name(s->state)),
				 errhint("See changestream.status() and the server log.")));
}

/*
 * After a cancel: wait up to timeout_ms for the terminated snapshot worker
 * to exit (it ends its walsender on the way out, walsender_reap.c), so
 * that the cancelled call returns with nothing left behind and the next
 * call finds the snapshot slot free.  Interrupts are held: the call is
 * already being cancelled.  Never raises.
 */
static void
wait_worker_gone(BackgroundWorkerHandle *handle, int timeout_ms)
{
	TimestampTz start = GetCurrentTimestamp();
	pid_t		pid;

	HOLD_INTERRUPTS();
	while (GetBackgroundWorkerPid(handle, &pid) != BGWH_STOPPED &&
		   !TimestampDifferenceExceeds(start, GetCurrentTimestamp(), timeout_ms))
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 50, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	RESUME_INTERRUPTS();
}

/*
 * changestream.take_snapshot(), returning pg_lsn
 *	  Start a "changestream snapshot" worker for the current generation and
 *	  wait for it; returns the snapshot's consistent LSN once its file is
 *	  durable.  Cancelling the call terminates the worker, which ends its
 *	  walsender (and so its temporary slot) on the way out, and waits up
 *	  to 5 s for it to exit.  Errors: the
 *	  archiver is not streaming, a snapshot is already running, or a
 *	  hand-off to a new generation is pending (class 55, docs/DESIGN.md
 *	  section 6); no worker slot is free (class 53); the calling transaction holds
 *	  a transaction id, which slot creation would wait for forever (class
 *	  25); the snapshot worker's own error, with its SQLSTATE.
 */
Datum
changestream_take_snapshot(PG_FUNCTION_ARGS)
{
	CsStatus	s;
	BackgroundWorkerHandle *handle;
	BgwHandleStatus st;
	pid_t		pid;
	XLogRecPtr	lsn;
	int			code;
	char		error[CS_ERROR_LEN];

	require_streaming(&s, "changestream.take_snapshot()", false);
	if (s.snapshot_running)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("a changestream snapshot is already being taken"),
				 errhint("Wait for it: changestream.status() shows its progress.")));
	switch (cs_launch_snapshot_worker(s.generation, MyProcPid, &handle))
	{
		case CS_LAUNCH_OK:
			break;
		case CS_LAUNCH_BUSY:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("a changestream snapshot is already being taken"),
					 errhint("Wait for it: changestream.status() shows its progress.")));
			break;
		case CS_LAUNCH_NO_WORKER:
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("could not start the changestream snapshot worker"),
					 errhint("Raise max_worker_processes.")));
			break;
		case CS_LAUNCH_HANDOFF:
			cs_status_copy(&s);
			refuse_during_handoff(&s, "changestream.take_snapshot()");
			break;
	}
	/* a cancelled call stops its snapshot too */
	PG_TRY();
	{
		st = WaitForBackgroundWorkerStartup(handle, &pid);
		if (st == BGWH_STARTED)
			st = WaitForBackgroundWorkerShutdown(handle);
	}
	PG_CATCH();
	{
		TerminateBackgroundWorker(handle);
		wait_worker_gone(handle, 5000);
		PG_RE_THROW();
	}
	PG_END_TRY();
	lsn = cs_status_snapshot_result(&code, error, st != BGWH_STOPPED || pid == 0);
	if (lsn != InvalidXLogRecPtr)
		PG_RETURN_LSN(lsn);
	if (code != 0)
		ereport(ERROR,
				(errcode(code),
				 errmsg_internal("%s", error),
				 errdetail("The changestream snapshot worker failed with this error."),
				 errhint("See the server log for the snapshot worker's messages.")));
	ereport(ERROR,
			(errcode(ERRCODE_SYSTEM_ERROR),
			 errmsg("could not take a changestream snapshot"),
			 errdetail("%s.", error[0] ? error : "The snapshot worker did not start"),
			 errhint("See the server log for the snapshot worker's messages.")));
	PG_RETURN_NULL();			/* keep the compiler quiet */
}

/*
 * changestream.new_generation(), returning text
 *	  Ask the archiver to open a new generation (with its opening snapshot)
 *	  and wait until it has; returns its name.  Accepted while the archiver
 *	  streams and while it retries after an error (then the next session
 *	  opens the new generation before it looks at the newest one, which is
 *	  left as it is).  Cancellable.  Errors: the archiver does not run,
 *	  or a hand-off to a new generation is pending (class 55: 55000 naming
 *	  the pending generation and its start, docs/DESIGN.md section 6); the
 *	  calling transaction holds a transaction id (class 25).
 */
Datum
changestream_new_generation(PG_FUNCTION_ARGS)
{
	CsStatus	s;
	uint64		before;

	require_streaming(&s, "changestream.new_generation()", true);
	before = s.has_generation ? s.generation : 0;
	switch (cs_status_request_new_generation())
	{
		case CS_REQUEST_MADE:
			break;
		case CS_REQUEST_NO_ARCHIVER:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the changestream archiver is not running"),
					 errhint("See changestream.status() and the server log.")));
			break;
		case CS_REQUEST_HANDOFF_PENDING:
			cs_status_copy(&s);
			refuse_during_handoff(&s, "changestream.new_generation()");
			break;
	}

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		cs_status_copy(&s);
		if (s.has_generation && s.generation != before &&
			s.state == CS_STATE_STREAMING)
			PG_RETURN_TEXT_P(cstring_to_text(psprintf("%016llx",
													  (unsigned long long) s.generation)));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 100, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
