/*-------------------------------------------------------------------------
 *
 * restore_progress.c
 *	  The progress of each running restore(), visible from any session
 *	  through changestream.restore_progress, in the manner of
 *	  pg_stat_progress_copy: a slot per backend in shared memory (the
 *	  core's progress parameters take only its own command types), which
 *	  the restoring backend claims at the start, updates as it goes (per
 *	  snapshot read of the COPY callback, per applied transaction), and
 *	  frees at its end, at the end of its transaction or subtransaction
 *	  on error (transaction callbacks), or when it exits.  Each slot has a spinlock: the writer
 *	  holds it for a few stores, a reader to copy the slot.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "read/restore_progress.h"

PG_FUNCTION_INFO_V1(changestream_restore_progress_info);

#define PROGRESS_COLS	17
#define TABLE_NAME_LEN	(2 * NAMEDATALEN + 2)

typedef struct CsProgressSlot
{
	slock_t		mutex;
	pid_t		pid;			/* 0: free */
	Oid			dbid;
	Oid			userid;
	TimestampTz started_at;
	int			phase;			/* CsRestorePhase */
	bool		dry_run;
	uint64		generation;
	XLogRecPtr	target_lsn;		/* Invalid: none */
	TimestampTz target_time;	/* 0: none */
	XLogRecPtr	snapshot_lsn;
	int64		snapshot_bytes_total;
	int64		snapshot_bytes_done;
	char		table[TABLE_NAME_LEN];	/* being loaded */
	XLogRecPtr	applied_lsn;
	int64		transactions;
	int64		changes;
	int			tables;
} CsProgressSlot;

typedef struct CsProgress
{
	int			nslots;
	CsProgressSlot slots[FLEXIBLE_ARRAY_MEMBER];
} CsProgress;

static CsProgress *progress = NULL;
static CsProgressSlot *mine = NULL;
static bool callbacks_registered = false;

static Size
progress_size(void)
{
	return add_size(offsetof(CsProgress, slots),
					mul_size(MaxBackends, sizeof(CsProgressSlot)));
}

/*
 * cs_progress_shmem_request
 *	  Reserves a slot per backend.  Runs from shmem_request_hook, through
 *	  changestream.c.
 */
void
cs_progress_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(progress_size()));
}

/*
 * cs_progress_shmem_init
 *	  Attaches to (and first initialises) the slots.  Runs from
 *	  shmem_startup_hook, through changestream.c.
 */
void
cs_progress_shmem_init(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	progress = ShmemInitStruct("changestream restore progress",
							   progress_size(), &found);
	if (!found)
	{
		memset(progress, 0, progress_size());
		progress->nslots = MaxBackends;
		for (int i = 0; i < progress->nslots; i++)
			SpinLockInit(&progress->slots[i].mutex);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * cs_progress_end
 *	  Frees this backend's slot, if it holds one.
 */
void
cs_progress_end(void)
{
	if (mine == NULL)
		return;
	SpinLockAcquire(&mine->mutex);
	mine->pid = 0;
	SpinLockRelease(&mine->mutex);
	mine = NULL;
}

static void
progress_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		cs_progress_end();
}

/* A restore() in an aborted subtransaction has ended too. */
static void
progress_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						  SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		cs_progress_end();
}

static void
progress_exit_callback(int code, Datum arg)
{
	cs_progress_end();
}

/*
 * cs_progress_begin
 *	  Claims a slot for the restore() starting in this backend (a second
 *	  call in the same transaction takes it over).  Without shared memory
 *	  (not preloaded) or a free slot, progress is not shown.
 */
void
cs_progress_begin(uint64 generation, bool dry_run, XLogRecPtr target_lsn,
				  TimestampTz target_time)
{
	if (progress == NULL)
		return;
	if (!callbacks_registered)
	{
		RegisterXactCallback(progress_xact_callback, NULL);
		RegisterSubXactCallback(progress_subxact_callback, NULL);
		before_shmem_exit(progress_exit_callback, (Datum) 0);
		callbacks_registered = true;
	}
	for (int i = 0; mine == NULL && i < progress->nslots; i++)
	{
		CsProgressSlot *s = &progress->slots[i];

		SpinLockAcquire(&s->mutex);
		if (s->pid == 0)
		{
			s->pid = MyProcPid;
			mine = s;
		}
		SpinLockRelease(&s->mutex);
	}
	if (mine == NULL)
		return;
	SpinLockAcquire(&mine->mutex);
	mine->dbid = MyDatabaseId;
	mine->userid = GetUserId();
	mine->started_at = GetCurrentTimestamp();
	mine->phase = CS_RESTORE_CHECKING;
	mine->dry_run = dry_run;
	mine->generation = generation;
	mine->target_lsn = target_lsn;
	mine->target_time = target_time;
	mine->snapshot_lsn = InvalidXLogRecPtr;
	mine->snapshot_bytes_total = 0;
	mine->snapshot_bytes_done = 0;
	mine->table[0] = '\0';
	mine->applied_lsn = InvalidXLogRecPtr;
	mine->transactions = 0;
	mine->changes = 0;
	mine->tables = 0;
	SpinLockRelease(&mine->mutex);
}

/* cs_progress_phase: the restore enters phase. */
void
cs_progress_phase(CsRestorePhase phase)
{
	if (mine == NULL)
		return;
	SpinLockAcquire(&mine->mutex);
	mine->phase = phase;
	SpinLockRelease(&mine->mutex);
}

/* cs_progress_snapshot: the snapshot chosen, its LSN and file size. */
void
cs_progress_snapshot(XLogRecPtr lsn, int64 total_bytes)
{
	if (mine == NULL)
		return;
	SpinLockAcquire(&mine->mutex);
	mine->snapshot_lsn = lsn;
	mine->snapshot_bytes_total = total_bytes;
	SpinLockRelease(&mine->mutex);
}

/* cs_progress_loading: loading table, done_bytes of the file read. */
void
cs_progress_loading(const char *table, int64 done_bytes)
{
	if (mine == NULL)
		return;
	SpinLockAcquire(&mine->mutex);
	strlcpy(mine->table, table, TABLE_NAME_LEN);
	mine->snapshot_bytes_done = done_bytes;
	SpinLockRelease(&mine->mutex);
}

/* cs_progress_applied: the last transaction applied and the counts. */
void
cs_progress_applied(XLogRecPtr lsn, int64 transactions, int64 changes,
					int tables)
{
	if (mine == NULL)
		return;
	SpinLockAcquire(&mine->mutex);
	mine->applied_lsn = lsn;
	mine->transactions = transactions;
	mine->changes = changes;
	mine->tables = tables;
	SpinLockRelease(&mine->mutex);
}

static const char *
phase_name(int phase)
{
	switch (phase)
	{
		case CS_RESTORE_CHECKING:
			return "checking";
		case CS_RESTORE_LOADING:
			return "loading snapshot";
		case CS_RESTORE_APPLYING:
			return "applying changes";
		case CS_RESTORE_SEQUENCES:
			return "setting sequences";
		case CS_RESTORE_DRY_RUN:
			return "dry run";
	}
	return "unknown";
}

/*
 * changestream.restore_progress_info()
 *	  Returns setof (pid int, datid oid, userid oid, started_at
 *	  timestamptz, phase text, dry_run boolean, generation text,
 *	  target_lsn pg_lsn, target_time timestamptz, snapshot_lsn pg_lsn,
 *	  snapshot_bytes_total bigint, snapshot_bytes_done bigint, table_name
 *	  text, applied_lsn pg_lsn, transactions bigint, changes bigint,
 *	  tables int): one
 *	  row per restore() running now.  snapshot_bytes_* count the
 *	  compressed snapshot file (done: read so far); applied_lsn is the
 *	  commit LSN of the last transaction applied (NULL before the first),
 *	  to compare with target_lsn (NULL for a time target or none).  The
 *	  view changestream.restore_progress shows it.
 */
Datum
changestream_restore_progress_info(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; progress != NULL && i < progress->nslots; i++)
	{
		CsProgressSlot s;
		Datum		values[PROGRESS_COLS];
		bool		nulls[PROGRESS_COLS];

		SpinLockAcquire(&progress->slots[i].mutex);
		memcpy(&s, &progress->slots[i], sizeof(s));
		SpinLockRelease(&progress->slots[i].mutex);
		if (s.pid == 0)
			continue;
		memset(nulls, 0, sizeof(nulls));
		values[0] = Int32GetDatum(s.pid);
		values[1] = ObjectIdGetDatum(s.dbid);
		values[2] = ObjectIdGetDatum(s.userid);
		values[3] = TimestampTzGetDatum(s.started_at);
		values[4] = CStringGetTextDatum(phase_name(s.phase));
		values[5] = BoolGetDatum(s.dry_run);
		values[6] = CStringGetTextDatum(psprintf("%016llx",
												 (unsigned long long) s.generation));
		values[7] = LSNGetDatum(s.target_lsn);
		nulls[7] = XLogRecPtrIsInvalid(s.target_lsn);
		values[8] = TimestampTzGetDatum(s.target_time);
		nulls[8] = (s.target_time == 0);
		values[9] = LSNGetDatum(s.snapshot_lsn);
		nulls[9] = XLogRecPtrIsInvalid(s.snapshot_lsn);
		values[10] = Int64GetDatum(s.snapshot_bytes_total);
		values[11] = Int64GetDatum(s.snapshot_bytes_done);
		s.table[TABLE_NAME_LEN - 1] = '\0';
		values[12] = CStringGetTextDatum(s.table);
		nulls[12] = (s.table[0] == '\0');
		values[13] = LSNGetDatum(s.applied_lsn);
		nulls[13] = XLogRecPtrIsInvalid(s.applied_lsn);
		values[14] = Int64GetDatum(s.transactions);
		values[15] = Int64GetDatum(s.changes);
		values[16] = Int32GetDatum(s.tables);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
