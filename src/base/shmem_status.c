/*-------------------------------------------------------------------------
 *
 * shmem_status.c
 *	  The workers' status in shared memory (CsStatus): written by the
 *	  archiver and the snapshot worker, read by changestream.status() and
 *	  the SQL actions.  This is the only file that touches it.
 *
 *	  The scalars are guarded by a spinlock that is held for a few stores,
 *	  never across a call; timestamps are computed before taking it.  The
 *	  text fields (error messages, progress, names) are guarded by an
 *	  LWLock, as a memcpy of kilobytes is no work for a spinlock.  Latches
 *	  are set after the lock is released, as WalRcvForceReply() does.
 *
 * Sources: src/backend/replication/walreceiverfuncs.c (the spinlock and
 * latch rules); RequestNamedLWLockTranche() as in
 * contrib/pg_stat_statements.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "base/shmem_status.h"

#define CS_LWLOCK_TRANCHE	"changestream status"

/*
 * One CsStatus per archived database (changestream.databases): the
 * launcher (launcher.c) claims an entry for each listed database and
 * passes its index to the archiver it starts.  cs_status is the entry this
 * process works on (cs_status_select()); the first entry until one is
 * selected, so a process that serves one archive needs no change.  One
 * more entry, never claimed, stands for a database no archiver serves
 * (cs_status_select_none()): it always says "not running".
 */
static CsStatus *cs_status_array = NULL;
static CsStatus *cs_status = NULL;

static void set_text(char *field, const char *value, size_t size);

/*
 * The maintenance worker's status: scalars under its own spinlock.  What
 * it found and did in each archive tree (sealed raw segments, segments
 * compressed, its last error there) is in that tree's status entry
 * (maint_* of CsStatus), so that status() shows it in the database's row.
 */
typedef struct CsMaintenanceShared
{
	slock_t		mutex;
	pid_t		pid;
	Latch	   *latch;			/* set by the archiver after sealing */
	/* compression may wait: see cs_maintenance_status_set_catching_up() */
	bool		archiver_catching_up;
	bool		deferring;		/* it waits for the archiver */
} CsMaintenanceShared;

static CsMaintenanceShared *cs_maintenance = NULL;

/*
 * cs_shmem_request
 *	  Reserve space for CsStatus and its LWLock.  Runs from
 *	  shmem_request_hook (PG15+), as contrib/pg_stat_statements does.
 */
void
cs_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(CsStatus) * (CS_MAX_DATABASES + 1)));
	RequestAddinShmemSpace(MAXALIGN(sizeof(CsMaintenanceShared)));
	RequestNamedLWLockTranche(CS_LWLOCK_TRANCHE, 1);
}

/*
 * cs_shmem_startup
 *	  Attach to (and on first use initialise) CsStatus.  Runs from
 *	  shmem_startup_hook in the postmaster and every EXEC_BACKEND child.
 */
void
cs_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	cs_status_array = ShmemInitStruct("changestream status",
									  sizeof(CsStatus) * (CS_MAX_DATABASES + 1),
									  &found);
	if (!found)
	{
		int			i;
		TimestampTz now = GetCurrentTimestamp();

		memset(cs_status_array, 0, sizeof(CsStatus) * (CS_MAX_DATABASES + 1));
		for (i = 0; i <= CS_MAX_DATABASES; i++)
		{
			CsStatus   *st = &cs_status_array[i];

			SpinLockInit(&st->mutex);
			st->state = CS_STATE_NOT_RUNNING;
			st->segment_index = -1;
			st->failures_since = now;
			st->maint_raw_sealed = -1;
			st->lock = &(GetNamedLWLockTranche(CS_LWLOCK_TRANCHE))->lock;
		}
	}
	cs_status = &cs_status_array[0];
	cs_maintenance = ShmemInitStruct("changestream maintenance status",
									sizeof(CsMaintenanceShared), &found);
	if (!found)
	{
		memset(cs_maintenance, 0, sizeof(CsMaintenanceShared));
		SpinLockInit(&cs_maintenance->mutex);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * cs_state_name
 *	  The name status() shows for a worker state (a static string).
 */
const char *
cs_state_name(CsWorkerState state)
{
	switch (state)
	{
		case CS_STATE_NOT_RUNNING:
			return "not running";
		case CS_STATE_DISABLED:
			return "disabled";
		case CS_STATE_STARTING:
			return "starting";
		case CS_STATE_CONNECTING:
			return "connecting";
		case CS_STATE_STREAMING:
			return "streaming";
		case CS_STATE_ERROR:
			return "error";
		case CS_STATE_STOPPING:
			return "stopping";
		case CS_STATE_STANDBY:
			return "standby";
		case CS_STATE_WAITING_FOR_REPLICA:
			return "waiting_for_replica";
	}
	return "unknown";
}

/*
 * cs_status_attached
 *	  Whether this process is attached to changestream's shared memory,
 *	  that is, whether the library was preloaded.
 */
bool
cs_status_attached(void)
{
	return cs_status != NULL;
}

/*
 * cs_status_require_loaded
 *	  Raise 55000 (object_not_in_prerequisite_state) with a hint when the
 *	  library was not preloaded; return otherwise.
 */
void
cs_status_require_loaded(void)
{
	if (cs_status == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("changestream is not loaded"),
				 errhint("Add changestream to shared_preload_libraries and restart the server.")));
}

/*
 * cs_status_copy
 *	  Copy the whole status into *copy: the scalars under the spinlock,
 *	  the text under the LWLock.
 */
void
cs_status_copy(CsStatus *copy)
{
	SpinLockAcquire(&cs_status->mutex);
	memcpy(copy, cs_status, CS_STATUS_TEXT_START);
	SpinLockRelease(&cs_status->mutex);
	LWLockAcquire(cs_status->lock, LW_SHARED);
	memcpy((char *) copy + CS_STATUS_TEXT_START,
		   (char *) cs_status + CS_STATUS_TEXT_START,
		   sizeof(CsStatus) - CS_STATUS_TEXT_START);
	LWLockRelease(cs_status->lock);
}

/*
 * cs_status_flushed_lsn_of
 *	  The archiver's durable, reported position (LSN) when it is streaming
 *	  into the given generation; InvalidXLogRecPtr otherwise, or when the
 *	  library is not preloaded.
 */
XLogRecPtr
cs_status_flushed_lsn_of(uint64 generation)
{
	XLogRecPtr	flushed = InvalidXLogRecPtr;

	if (cs_status == NULL)
		return InvalidXLogRecPtr;
	SpinLockAcquire(&cs_status->mutex);
	if (cs_status->pid != 0 && cs_status->has_generation &&
		cs_status->generation == generation &&
		cs_status->state == CS_STATE_STREAMING)
		flushed = cs_status->flushed_lsn;
	SpinLockRelease(&cs_status->mutex);
	return flushed;
}

/*
 * cs_status_select
 *	  Make entry index (0 .. CS_MAX_DATABASES - 1) the one this process's
 *	  accessors read and write.
 */
void
cs_status_select(int index)
{
	Assert(index >= 0 && index < CS_MAX_DATABASES);
	cs_status = &cs_status_array[index];
}

/*
 * cs_status_select_none
 *	  Select the entry of no archived database (state "not running"
 *	  forever): for a backend whose database has no entry.
 */
void
cs_status_select_none(void)
{
	cs_status = &cs_status_array[CS_MAX_DATABASES];
}

/*
 * cs_status_selected
 *	  The index of the entry this process works on.
 */
int
cs_status_selected(void)
{
	return (int) (cs_status - cs_status_array);
}

/*
 * cs_status_selected_database
 *	  The database name of the selected entry into database (NAMEDATALEN
 *	  bytes; "" when it serves none).
 */
void
cs_status_selected_database(char *database)
{
	LWLockAcquire(cs_status->lock, LW_SHARED);
	strlcpy(database, cs_status->in_use ? cs_status->database : "", NAMEDATALEN);
	LWLockRelease(cs_status->lock);
}

/*
 * cs_status_index_of
 *	  The index of the entry claimed for database, or -1 when there is
 *	  none.
 */
int
cs_status_index_of(const char *database)
{
	int			found = -1;
	int			i;

	LWLockAcquire(cs_status_array[0].lock, LW_SHARED);
	for (i = 0; i < CS_MAX_DATABASES && found < 0; i++)
		if (cs_status_array[i].in_use &&
			strcmp(cs_status_array[i].database, database) == 0)
			found = i;
	LWLockRelease(cs_status_array[0].lock);
	return found;
}

/*
 * cs_status_claim
 *	  The launcher's: the index of database's entry, claiming a free one
 *	  (reset to "not running", its failure counters to 0 from now) when it
 *	  has none; -1 when all CS_MAX_DATABASES are taken.
 */
int
cs_status_claim(const char *database)
{
	int			found = cs_status_index_of(database);
	int			i;
	TimestampTz now = GetCurrentTimestamp();

	if (found >= 0)
		return found;
	LWLockAcquire(cs_status_array[0].lock, LW_EXCLUSIVE);
	for (i = 0; i < CS_MAX_DATABASES && found < 0; i++)
	{
		CsStatus   *st = &cs_status_array[i];

		if (st->in_use)
			continue;
		memset((char *) st + offsetof(CsStatus, pid), 0,
			   offsetof(CsStatus, lock) - offsetof(CsStatus, pid));
		memset((char *) st + CS_STATUS_TEXT_START, 0,
			   sizeof(CsStatus) - CS_STATUS_TEXT_START);
		st->state = CS_STATE_NOT_RUNNING;
		st->segment_index = -1;
		st->failures_since = now;
		st->maint_raw_sealed = -1;
		strlcpy(st->database, database, NAMEDATALEN);
		st->in_use = true;
		found = i;
	}
	LWLockRelease(cs_status_array[0].lock);
	return found;
}

/*
 * cs_status_release
 *	  The launcher's: entry index no longer serves a database (it left
 *	  changestream.databases and its archiver is gone).
 */
void
cs_status_release(int index)
{
	LWLockAcquire(cs_status_array[0].lock, LW_EXCLUSIVE);
	cs_status_array[index].in_use = false;
	LWLockRelease(cs_status_array[0].lock);
}

/*
 * cs_status_in_use
 *	  Does entry index serve a database?  Its name into database
 *	  (NAMEDATALEN bytes) when it does.
 */
bool
cs_status_in_use(int index, char *database)
{
	bool		in_use;

	LWLockAcquire(cs_status_array[0].lock, LW_SHARED);
	in_use = cs_status_array[index].in_use;
	if (in_use)
		strlcpy(database, cs_status_array[index].database, NAMEDATALEN);
	LWLockRelease(cs_status_array[0].lock);
	return in_use;
}

/*
 * cs_status_set_dropping
 *	  DROP DATABASE of the selected entry's database is in progress (true)
 *	  or over (false); dropped: it succeeded.  The archiver ends and the
 *	  launcher starts none while dropping or dropped (dropdb_hook.c).
 */
void
cs_status_set_dropping(bool dropping, bool dropped)
{
	Latch	   *latch;

	SpinLockAcquire(&cs_status->mutex);
	cs_status->dropping = dropping;
	cs_status->dropped = dropped;
	latch = cs_status->archiver_latch;
	SpinLockRelease(&cs_status->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

/*
 * cs_status_forget_dropped
 *	  The launcher's, at a reload: a database dropped earlier may have been
 *	  created again; its archiver is started again (and says so if not).
 */
void
cs_status_forget_dropped(void)
{
	SpinLockAcquire(&cs_status->mutex);
	if (!cs_status->dropping)
		cs_status->dropped = false;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_status_dropping
 *	  Is the selected entry's database being dropped, or dropped?
 */
bool
cs_status_dropping(void)
{
	bool		dropping;

	SpinLockAcquire(&cs_status->mutex);
	dropping = cs_status->dropping || cs_status->dropped;
	SpinLockRelease(&cs_status->mutex);
	return dropping;
}

/*
 * cs_status_archiver_pid
 *	  The PID of the selected entry's archiver, 0 when none runs.
 */
pid_t
cs_status_archiver_pid(void)
{
	pid_t		pid;

	SpinLockAcquire(&cs_status->mutex);
	pid = cs_status->pid;
	SpinLockRelease(&cs_status->mutex);
	return pid;
}

/*
 * cs_status_archiver_disabled
 *	  The PID of the selected entry's archiver when it runs in state
 *	  "disabled" (it waits for a reload that sets changestream.directory),
 *	  else 0.
 */
pid_t
cs_status_archiver_disabled(void)
{
	pid_t		pid;

	SpinLockAcquire(&cs_status->mutex);
	pid = cs_status->state == CS_STATE_DISABLED ? cs_status->pid : 0;
	SpinLockRelease(&cs_status->mutex);
	return pid;
}

/*
 * cs_status_set_launch_error
 *	  The launcher's: why entry's archiver does not run (a budget too
 *	  small), shown in status() as last_error with state "error".
 */
void
cs_status_set_launch_error(const char *message)
{
	TimestampTz now = GetCurrentTimestamp();

	set_text(cs_status->last_error, message, CS_ERROR_LEN);
	SpinLockAcquire(&cs_status->mutex);
	cs_status->last_error_at = now;
	if (cs_status->pid == 0)
		cs_status->state = CS_STATE_ERROR;
	SpinLockRelease(&cs_status->mutex);
}

/* Set a text field under the LWLock (truncated to size - 1 bytes). */
static void
set_text(char *field, const char *value, size_t size)
{
	LWLockAcquire(cs_status->lock, LW_EXCLUSIVE);
	strlcpy(field, value ? value : "", size);
	LWLockRelease(cs_status->lock);
}

/*
 * cs_status_archiver_started
 *	  The archiver process starts: its PID, latch (for new_generation()),
 *	  database and slot names; state "starting".
 */
void
cs_status_archiver_started(Latch *latch, const char *database,
						   const char *slot)
{
	LWLockAcquire(cs_status->lock, LW_EXCLUSIVE);
	strlcpy(cs_status->database, database, NAMEDATALEN);
	strlcpy(cs_status->slot, slot, NAMEDATALEN);
	LWLockRelease(cs_status->lock);
	SpinLockAcquire(&cs_status->mutex);
	cs_status->pid = MyProcPid;
	cs_status->archiver_latch = latch;
	cs_status->state = CS_STATE_STARTING;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_status_archiver_startup_failed
 *	  The archiver exits before it could connect to database (typically:
 *	  it does not exist); say so in status() if it is still starting.
 */
void
cs_status_archiver_startup_failed(const char *database)
{
	TimestampTz now = GetCurrentTimestamp();
	char		message[CS_ERROR_LEN];
	bool		starting;

	snprintf(message, sizeof(message),
			 "the archiver could not connect to database \"%s\" (changestream.database or changestream.databases); see the server log",
			 database);
	SpinLockAcquire(&cs_status->mutex);
	starting = cs_status->pid == MyProcPid &&
		cs_status->state == CS_STATE_STARTING;
	if (starting)
	{
		cs_status->last_error_at = now;
		cs_status->state = CS_STATE_NOT_RUNNING;
		cs_status->pid = 0;
		cs_status->archiver_failures++;
	}
	SpinLockRelease(&cs_status->mutex);
	if (starting)
		set_text(cs_status->last_error, message, CS_ERROR_LEN);
}

/*
 * cs_status_archiver_exited
 *	  The archiver process is gone: no PID, no latch, "not running", no
 *	  commit rate or group commit window, no hand-off pending.
 */
void
cs_status_archiver_exited(void)
{
	SpinLockAcquire(&cs_status->mutex);
	cs_status->pid = 0;
	cs_status->archiver_latch = NULL;
	cs_status->state = CS_STATE_NOT_RUNNING;
	cs_status->commit_rate = 0;
	cs_status->group_commit_ms = 0;
	cs_status->handoff_pending = false;
	cs_status->handoff_generation = 0;
	cs_status->handoff_lsn = InvalidXLogRecPtr;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_status_set_state
 *	  Publish the archiver's state.
 */
void
cs_status_set_state(CsWorkerState state)
{
	SpinLockAcquire(&cs_status->mutex);
	cs_status->state = state;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_status_set_error
 *	  Record the archiver's last error (truncated to CS_ERROR_LEN - 1
 *	  bytes) and when, and enter state "error".  Errors stay visible until
 *	  the next one.  Called once per session that ended in an error: it
 *	  counts one more in archiver_failures.
 */
void
cs_status_set_error(const char *message)
{
	TimestampTz now = GetCurrentTimestamp();

	set_text(cs_status->last_error, message, CS_ERROR_LEN);
	SpinLockAcquire(&cs_status->mutex);
	cs_status->last_error_at = now;
	cs_status->state = CS_STATE_ERROR;
	cs_status->archiver_failures++;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_status_set_slot
 *	  The slot the archiver's session uses.
 */
void
cs_status_set_slot(const char *slot)
{
	set_text(cs_status->slot, slot, NAMEDATALEN);
}

/*
 * cs_status_set_generation
 *	  The generation the archiver writes.
 */
void
cs_status_set_generation(uint64 generation)
{
	SpinLockAcquire(&cs_status->mutex);
	cs_status->has_generation = true;
	cs_status->generation = generation;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_status_set_segment
 *	  The index of the active segment.
 */
void
cs_status_set_segment(int64 index)
{
	SpinLockAcquire(&cs_status->mutex);
	cs_status->segment_index = index;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_status_publish_progress
 *	  The session's positions and counters, as status() shows them.
 */
void
cs_status_publish_progress(const CsStreamCounters *c)
{
	SpinLockAcquire(&cs_status->mutex);
	cs_status->received_lsn = c->received_lsn;
	cs_status->flushed_lsn = c->flushed_lsn;
	cs_status->last_message_at = c->last_message_at;
	cs_status->last_flush_at = c->last_flush_at;
	cs_status->last_commit_time = c->last_commit_time;
	cs_status->received_commit_time = c->received_commit_time;
	cs_status->messages = c->messages;
	cs_status->transactions = c->transactions;
	cs_status->bytes = c->bytes;
	cs_status->commit_rate = c->commit_rate;
	cs_status->group_commit_ms = c->group_commit_ms;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_status_new_generation_requested
 *	  Has new_generation() asked for a new generation?  With clear, the
 *	  request is taken (the archiver has opened one).
 */
bool
cs_status_new_generation_requested(bool clear)
{
	bool		requested;

	SpinLockAcquire(&cs_status->mutex);
	requested = cs_status->new_generation_requested;
	if (clear)
		cs_status->new_generation_requested = false;
	SpinLockRelease(&cs_status->mutex);
	return requested;
}

/*
 * cs_status_request_new_generation
 *	  Ask the archiver for a new generation and wake it.  Refused, with
 *	  nothing asked, while a hand-off to a new generation is pending (its
 *	  snapshot is taken: a request now would be served by a generation
 *	  whose start may precede it, docs/DESIGN.md section 6) and when no
 *	  archiver runs.  Returns which.
 */
CsRequestResult
cs_status_request_new_generation(void)
{
	Latch	   *latch;

	SpinLockAcquire(&cs_status->mutex);
	if (cs_status->handoff_pending)
	{
		SpinLockRelease(&cs_status->mutex);
		return CS_REQUEST_HANDOFF_PENDING;
	}
	cs_status->new_generation_requested = true;
	latch = cs_status->archiver_latch;
	SpinLockRelease(&cs_status->mutex);
	if (latch == NULL)
		return CS_REQUEST_NO_ARCHIVER;
	SetLatch(latch);
	return CS_REQUEST_MADE;
}

/*
 * cs_status_set_handoff
 *	  Publish whether a hand-off is pending: generation's opening snapshot
 *	  is taken and the archiver streams the generation before it until
 *	  start_lsn (an LSN, C), docs/DESIGN.md section 6.  Not pending: the
 *	  hand-off is done, or the session that prepared it ended.  While it is
 *	  pending, snapshots and new requests are refused
 *	  (cs_status_claim_snapshot(), cs_status_request_new_generation()).
 */
void
cs_status_set_handoff(bool pending, uint64 generation, XLogRecPtr start_lsn)
{
	SpinLockAcquire(&cs_status->mutex);
	cs_status->handoff_pending = pending;
	cs_status->handoff_generation = pending ? generation : 0;
	cs_status->handoff_lsn = pending ? start_lsn : InvalidXLogRecPtr;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_status_last_snapshot
 *	  When the last snapshot of the current generation was taken (or the
 *	  generation opened), and in *running whether one is being taken.
 */
TimestampTz
cs_status_last_snapshot(bool *running)
{
	TimestampTz last;

	SpinLockAcquire(&cs_status->mutex);
	last = cs_status->last_snapshot_at;
	*running = cs_status->snapshot_running;
	SpinLockRelease(&cs_status->mutex);
	return last;
}

/*
 * cs_status_set_last_snapshot
 *	  A snapshot of the current generation was taken at "at".
 */
void
cs_status_set_last_snapshot(TimestampTz at)
{
	SpinLockAcquire(&cs_status->mutex);
	cs_status->last_snapshot_at = at;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_status_claim_snapshot
 *	  Claim the single snapshot slot and clear the last result.  False when
 *	  a snapshot is already running, or when a hand-off to a new generation
 *	  is pending (*handoff_pending then true): a snapshot of the generation
 *	  being written could lie past its end, the new generation's start
 *	  (docs/DESIGN.md section 6).
 */
bool
cs_status_claim_snapshot(bool *handoff_pending)
{
	bool		claimed;

	SpinLockAcquire(&cs_status->mutex);
	*handoff_pending = cs_status->handoff_pending;
	claimed = !cs_status->snapshot_running && !cs_status->handoff_pending;
	if (claimed)
	{
		cs_status->snapshot_running = true;
		cs_status->snapshot_result_lsn = InvalidXLogRecPtr;
		cs_status->snapshot_result_code = 0;
	}
	SpinLockRelease(&cs_status->mutex);
	if (claimed)
		set_text(cs_status->snapshot_result_error, "", CS_ERROR_LEN);
	return claimed;
}

/*
 * cs_status_snapshot_not_launched
 *	  Release the claim: no background worker slot was free.
 */
void
cs_status_snapshot_not_launched(void)
{
	set_text(cs_status->snapshot_result_error,
			 "could not register a background worker for the snapshot",
			 CS_ERROR_LEN);
	SpinLockAcquire(&cs_status->mutex);
	cs_status->snapshot_running = false;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_status_snapshot_done
 *	  The snapshot at lsn is durable.
 */
void
cs_status_snapshot_done(XLogRecPtr lsn)
{
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&cs_status->mutex);
	cs_status->snapshot_result_lsn = lsn;
	cs_status->last_snapshot_at = now;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_status_snapshot_failed
 *	  The snapshot worker failed with sqlerrcode and message.
 */
void
cs_status_snapshot_failed(int sqlerrcode, const char *message)
{
	set_text(cs_status->snapshot_result_error, message, CS_ERROR_LEN);
	SpinLockAcquire(&cs_status->mutex);
	cs_status->snapshot_result_code = sqlerrcode;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_status_slot
 *	  The slot the selected entry's archiver published (cs_status_set_slot())
 *	  into slot (NAMEDATALEN bytes; "" before its first session).
 */
void
cs_status_slot(char *slot)
{
	LWLockAcquire(cs_status->lock, LW_SHARED);
	strlcpy(slot, cs_status->slot, NAMEDATALEN);
	LWLockRelease(cs_status->lock);
}

/*
 * cs_status_snapshot_worker_started
 *	  The snapshot worker of the selected entry runs: its PID, which
 *	  DROP DATABASE of its database ends (dropdb_hook.c).
 */
void
cs_status_snapshot_worker_started(void)
{
	SpinLockAcquire(&cs_status->mutex);
	cs_status->snapshot_pid = MyProcPid;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_status_snapshot_pid
 *	  The PID of the selected entry's snapshot worker, 0 when none runs.
 */
pid_t
cs_status_snapshot_pid(void)
{
	pid_t		pid;

	SpinLockAcquire(&cs_status->mutex);
	pid = cs_status->snapshot_pid;
	SpinLockRelease(&cs_status->mutex);
	return pid;
}

/*
 * cs_status_snapshot_worker_exited
 *	  The snapshot worker exits (before_shmem_exit): the slot is free, its
 *	  progress is cleared, and an exit without a result becomes an error
 *	  and counts one more in snapshot_failures.
 */
void
cs_status_snapshot_worker_exited(void)
{
	bool		no_result;

	LWLockAcquire(cs_status->lock, LW_EXCLUSIVE);
	memset(&cs_status->progress[CS_PROGRESS_SNAPSHOT], 0, sizeof(CsProgress));
	SpinLockAcquire(&cs_status->mutex);
	no_result = cs_status->snapshot_result_lsn == InvalidXLogRecPtr;
	cs_status->snapshot_running = false;
	if (no_result)
		cs_status->snapshot_failures++;
	cs_status->snapshot_pid = 0;
	SpinLockRelease(&cs_status->mutex);
	if (no_result && cs_status->snapshot_result_error[0] == '\0')
		strlcpy(cs_status->snapshot_result_error,
				"the snapshot worker exited before the snapshot was durable",
				CS_ERROR_LEN);
	LWLockRelease(cs_status->lock);
}

/*
 * cs_status_snapshot_result
 *	  The last snapshot's LSN, or InvalidXLogRecPtr with its SQLSTATE in
 *	  *sqlerrcode (0 if it did not fail with an error) and its message in
 *	  error (CS_ERROR_LEN bytes).  worker_gone: the caller saw the worker
 *	  never start or not stop cleanly; the slot is then freed here.
 */
XLogRecPtr
cs_status_snapshot_result(int *sqlerrcode, char *error, bool worker_gone)
{
	XLogRecPtr	lsn;

	LWLockAcquire(cs_status->lock, LW_SHARED);
	strlcpy(error, cs_status->snapshot_result_error, CS_ERROR_LEN);
	LWLockRelease(cs_status->lock);
	SpinLockAcquire(&cs_status->mutex);
	lsn = cs_status->snapshot_result_lsn;
	*sqlerrcode = cs_status->snapshot_result_code;
	if (worker_gone)
		cs_status->snapshot_running = false;
	SpinLockRelease(&cs_status->mutex);
	return lsn;
}

/*
 * cs_status_snapshot_running
 *	  Is a snapshot worker active?  (Its tmp files must then stay.)
 */
bool
cs_status_snapshot_running(void)
{
	bool		running;

	SpinLockAcquire(&cs_status->mutex);
	running = cs_status->snapshot_running;
	SpinLockRelease(&cs_status->mutex);
	return running;
}

/*
 * cs_status_set_progress
 *	  Snapshot progress of the archiver (which = CS_PROGRESS_ARCHIVER) or
 *	  of the snapshot worker: the table being copied (NULL: none), rows
 *	  copied of it, and what slot creation waits for (NULL: unchanged).
 */
void
cs_status_set_progress(int which, const char *table, int64 rows,
					   const char *waiting_for)
{
	CsProgress *p = &cs_status->progress[which];

	LWLockAcquire(cs_status->lock, LW_EXCLUSIVE);
	strlcpy(p->table, table ? table : "", sizeof(p->table));
	p->rows = rows;
	if (waiting_for != NULL)
		strlcpy(p->waiting_for, waiting_for, sizeof(p->waiting_for));
	LWLockRelease(cs_status->lock);
}

/*
 * cs_status_clear_progress
 *	  No snapshot is being taken by "which".
 */
void
cs_status_clear_progress(int which)
{
	LWLockAcquire(cs_status->lock, LW_EXCLUSIVE);
	memset(&cs_status->progress[which], 0, sizeof(CsProgress));
	LWLockRelease(cs_status->lock);
}

/*
 * cs_status_set_no_replica_identity
 *	  The published tables without a replica identity, as a list.
 */
void
cs_status_set_no_replica_identity(const char *tables)
{
	set_text(cs_status->no_replica_identity, tables,
			 sizeof(cs_status->no_replica_identity));
}

/*
 * cs_maintenance_status_copy
 *	  Copy the maintenance worker's status into *copy (pid 0 when it does not
 *	  run; raw_sealed_segments -1 before its first look at the archive):
 *	  its figures and last error in the selected entry's tree.
 */
void
cs_maintenance_status_copy(CsMaintenanceStatus *copy)
{
	SpinLockAcquire(&cs_maintenance->mutex);
	copy->pid = cs_maintenance->pid;
	copy->deferring = cs_maintenance->deferring;
	SpinLockRelease(&cs_maintenance->mutex);
	SpinLockAcquire(&cs_status->mutex);
	copy->raw_sealed_segments = cs_status->maint_raw_sealed;
	copy->segments_compressed = cs_status->maint_compressed;
	copy->last_error_at = cs_status->maint_error_at;
	SpinLockRelease(&cs_status->mutex);
	LWLockAcquire(cs_status->lock, LW_SHARED);
	strlcpy(copy->last_error, cs_status->maint_error,
			sizeof(copy->last_error));
	LWLockRelease(cs_status->lock);
}

/*
 * cs_maintenance_status_started
 *	  The maintenance worker process starts: its PID and the latch the archiver
 *	  sets after sealing a segment.
 */
void
cs_maintenance_status_started(Latch *latch)
{
	SpinLockAcquire(&cs_maintenance->mutex);
	cs_maintenance->pid = MyProcPid;
	cs_maintenance->latch = latch;
	SpinLockRelease(&cs_maintenance->mutex);
}

/*
 * cs_maintenance_status_exited
 *	  The maintenance worker process is gone.
 */
void
cs_maintenance_status_exited(void)
{
	SpinLockAcquire(&cs_maintenance->mutex);
	cs_maintenance->pid = 0;
	cs_maintenance->latch = NULL;
	cs_maintenance->deferring = false;
	SpinLockRelease(&cs_maintenance->mutex);
}

/*
 * cs_maintenance_status_set_backlog
 *	  The number of sealed raw segments the maintenance worker found in the
 *	  selected entry's tree (-1: it has no archive to look at).
 */
void
cs_maintenance_status_set_backlog(int64 raw_sealed_segments)
{
	SpinLockAcquire(&cs_status->mutex);
	cs_status->maint_raw_sealed = raw_sealed_segments;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_maintenance_status_compressed
 *	  One more segment compressed in the selected entry's tree; the backlog
 *	  found there is one smaller.
 */
void
cs_maintenance_status_compressed(void)
{
	SpinLockAcquire(&cs_status->mutex);
	cs_status->maint_compressed++;
	if (cs_status->maint_raw_sealed > 0)
		cs_status->maint_raw_sealed--;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_maintenance_status_set_error
 *	  Record the maintenance worker's last error in the selected entry's tree
 *	  (truncated to CS_ERROR_LEN - 1 bytes) and when.  It stays visible
 *	  until the next one there.
 */
void
cs_maintenance_status_set_error(const char *message)
{
	TimestampTz now = GetCurrentTimestamp();

	set_text(cs_status->maint_error, message, CS_ERROR_LEN);
	SpinLockAcquire(&cs_status->mutex);
	cs_status->maint_error_at = now;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_maintenance_status_set_catching_up
 *	  The archiver is (catching_up true) or is no longer catching up with a
 *	  backlog of the local server's WAL (stream.c's catching_up()).  While
 *	  it is, the maintenance worker starts no new segment until the backlog of
 *	  sealed raw segments reaches DEFER_MAX_RAW (maintenance.c), so that
 *	  the walsender and the archiver have the CPUs.  The end of catching
 *	  up wakes the maintenance worker.
 */
void
cs_maintenance_status_set_catching_up(bool catching_up)
{
	bool		was;

	if (cs_maintenance == NULL)
		return;
	SpinLockAcquire(&cs_maintenance->mutex);
	was = cs_maintenance->archiver_catching_up;
	cs_maintenance->archiver_catching_up = catching_up;
	SpinLockRelease(&cs_maintenance->mutex);
	if (was && !catching_up)
		cs_maintenance_wake();
}

/*
 * cs_maintenance_status_archiver_catching_up
 *	  Is the archiver catching up (as last set by
 *	  cs_maintenance_status_set_catching_up())?  The archiver clears it at
 *	  every end of a session and first thing in its exit callback
 *	  (stream.c), and a crash reinitializes shared memory, so an archiver
 *	  that is gone never holds compression back.
 */
bool
cs_maintenance_status_archiver_catching_up(void)
{
	bool		catching_up;

	SpinLockAcquire(&cs_maintenance->mutex);
	catching_up = cs_maintenance->archiver_catching_up;
	SpinLockRelease(&cs_maintenance->mutex);
	return catching_up;
}

/*
 * cs_maintenance_status_set_deferring
 *	  The maintenance worker waits (deferring true) or no longer waits for the
 *	  archiver to catch up, as status() shows.
 */
void
cs_maintenance_status_set_deferring(bool deferring)
{
	SpinLockAcquire(&cs_maintenance->mutex);
	cs_maintenance->deferring = deferring;
	SpinLockRelease(&cs_maintenance->mutex);
}

/*
 * cs_maintenance_wake
 *	  Wake the maintenance worker (a segment was sealed, a snapshot finished);
 *	  nothing when it does not run.  The latch is set after the spinlock
 *	  is released.
 */
void
cs_maintenance_wake(void)
{
	Latch	   *latch;

	if (cs_maintenance == NULL)
		return;
	SpinLockAcquire(&cs_maintenance->mutex);
	latch = cs_maintenance->latch;
	SpinLockRelease(&cs_maintenance->mutex);
	if (latch != NULL)
		SetLatch(latch);
}
