/*-------------------------------------------------------------------------
 *
 * replica_status.c
 *	  The uploader's status in shared memory (worker/uploader.c writes it,
 *	  changestream.status() reads it), and the uploaded position that local
 *	  retention (retention.c) honours: with a replica configured, nothing
 *	  is deleted locally before it is in the bucket (docs/DESIGN.md
 *	  section 15).
 *
 *	  As in shmem_status.c, the scalars are guarded by a spinlock held for
 *	  a few stores, never across a call; the error text by an LWLock.
 *
 *	  The uploaded position: every generation older than "generation" is
 *	  entirely up; of "generation", the segments below next_segment and the
 *	  snapshots up to snapshot_lsn are.  Until the uploader has published
 *	  one since the server started, none is known and retention deletes
 *	  nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "base/guc.h"
#include "replica/replica_status.h"
#include "worker/uploader.h"

#define CS_REPLICA_TRANCHE "changestream replica"

typedef struct CsReplicaShared
{
	slock_t		mutex;
	CsReplicaStatus status;		/* last_error under lock, the rest mutex */
	bool		position_known;
	uint64		generation;
	int64		next_segment;
	XLogRecPtr	snapshot_lsn;
	LWLock	   *lock;
} CsReplicaShared;

static CsReplicaShared *shared = NULL;

/*
 * cs_replica_shmem_request
 *	  Reserve the uploader's shared memory and its LWLock (from the
 *	  shmem_request_hook, as cs_shmem_request()).
 */
void
cs_replica_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(CsReplicaShared)));
	RequestNamedLWLockTranche(CS_REPLICA_TRANCHE, 1);
}

/*
 * cs_replica_shmem_startup
 *	  Attach to (and on first use initialise) the uploader's shared memory
 *	  (from the shmem_startup_hook).
 */
void
cs_replica_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("changestream replica status",
							 sizeof(CsReplicaShared), &found);
	if (!found)
	{
		memset(shared, 0, sizeof(CsReplicaShared));
		SpinLockInit(&shared->mutex);
		shared->status.backlog_files = -1;
		shared->status.backlog_bytes = -1;
		shared->lock = &(GetNamedLWLockTranche(CS_REPLICA_TRANCHE))->lock;
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * cs_replica_state_name(state) -> static string
 *	  The name status() shows for state.
 */
const char *
cs_replica_state_name(CsReplicaState state)
{
	switch (state)
	{
		case CS_REPLICA_OFF:
			return "off";
		case CS_REPLICA_IDLE:
			return "idle";
		case CS_REPLICA_UPLOADING:
			return "uploading";
		case CS_REPLICA_BACKOFF:
			return "backoff";
		case CS_REPLICA_ERROR:
			return "error";
	}
	return "unknown";
}

/*
 * cs_replica_status_copy(copy)
 *	  Copy the uploader's status into *copy (state off and pid 0 when no
 *	  uploader runs).  With a replica configured and no uploader running,
 *	  an empty last error becomes a sentence saying that retention holds
 *	  the files: the registration at server start may have failed with
 *	  only a log line (RegisterBackgroundWorker() past
 *	  max_worker_processes).
 */
void
cs_replica_status_copy(CsReplicaStatus *copy)
{
	LWLockAcquire(shared->lock, LW_SHARED);
	SpinLockAcquire(&shared->mutex);
	*copy = shared->status;
	SpinLockRelease(&shared->mutex);
	LWLockRelease(shared->lock);
	if (copy->pid == 0 && copy->last_error[0] == '\0' &&
		cs_replica_configured())
		strlcpy(copy->last_error,
				"no uploader is running: local retention keeps every file not in the bucket; "
				"if the server log says \"too many background workers\" at start, raise max_worker_processes and restart",
				sizeof(copy->last_error));
}

/*
 * cs_replica_status_started()
 *	  The uploader process starts: its PID, state idle.
 */
void
cs_replica_status_started(void)
{
	SpinLockAcquire(&shared->mutex);
	shared->status.pid = MyProcPid;
	shared->status.state = CS_REPLICA_IDLE;
	SpinLockRelease(&shared->mutex);
}

/*
 * cs_replica_status_exited()
 *	  The uploader is gone: state off.  The uploaded position is forgotten,
 *	  so retention waits for the next uploader to publish its own.
 */
void
cs_replica_status_exited(void)
{
	SpinLockAcquire(&shared->mutex);
	shared->status.pid = 0;
	shared->status.state = CS_REPLICA_OFF;
	shared->position_known = false;
	SpinLockRelease(&shared->mutex);
}

/*
 * cs_replica_set_state(state)
 *	  Publish the uploader's state.
 */
void
cs_replica_set_state(CsReplicaState state)
{
	SpinLockAcquire(&shared->mutex);
	shared->status.state = state;
	SpinLockRelease(&shared->mutex);
}

/*
 * cs_replica_set_error(state, message)
 *	  Publish a failure: the state (backoff or error), the message
 *	  (truncated to 1023 bytes) and the time.
 */
void
cs_replica_set_error(CsReplicaState state, const char *message)
{
	TimestampTz now = GetCurrentTimestamp();

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	strlcpy(shared->status.last_error, message,
			sizeof(shared->status.last_error));
	SpinLockAcquire(&shared->mutex);
	shared->status.state = state;
	shared->status.last_error_at = now;
	SpinLockRelease(&shared->mutex);
	LWLockRelease(shared->lock);
}

/*
 * cs_replica_count(kind, bytes_sent)
 *	  Count one request of kind sent to the bucket, with bytes_sent bytes
 *	  of body.
 */
void
cs_replica_count(CsReplicaRequest kind, uint64 bytes_sent)
{
	SpinLockAcquire(&shared->mutex);
	switch (kind)
	{
		case CS_REPLICA_PUT:
			shared->status.puts++;
			break;
		case CS_REPLICA_GET:
			shared->status.gets++;
			break;
		case CS_REPLICA_LIST:
			shared->status.lists++;
			break;
		case CS_REPLICA_DELETE:
			shared->status.deletes++;
			break;
	}
	shared->status.bytes_sent += bytes_sent;
	SpinLockRelease(&shared->mutex);
}

/*
 * cs_replica_set_backlog(files, bytes)
 *	  Publish the finished files not up yet and their bytes on disk.
 */
void
cs_replica_set_backlog(int64 files, int64 bytes)
{
	SpinLockAcquire(&shared->mutex);
	shared->status.backlog_files = files;
	shared->status.backlog_bytes = bytes;
	SpinLockRelease(&shared->mutex);
}

/*
 * cs_replica_uploaded(bytes, one_file_less)
 *	  A file of bytes bytes is up (or adopted): the backlog shrinks by it
 *	  when one_file_less, and the last upload time is now.
 */
void
cs_replica_uploaded(uint64 bytes, bool one_file_less)
{
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&shared->mutex);
	shared->status.last_upload_at = now;
	if (one_file_less && shared->status.backlog_files > 0)
	{
		shared->status.backlog_files--;
		shared->status.backlog_bytes =
			Max(shared->status.backlog_bytes - (int64) bytes, 0);
	}
	SpinLockRelease(&shared->mutex);
}

/*
 * cs_replica_set_flushed(generation, lsn)
 *	  The remote durable position: the end LSN of the newest segment up
 *	  in order, in generation.
 */
void
cs_replica_set_flushed(uint64 generation, XLogRecPtr lsn)
{
	SpinLockAcquire(&shared->mutex);
	shared->status.flushed_generation = generation;
	shared->status.flushed_lsn = lsn;
	SpinLockRelease(&shared->mutex);
}

/*
 * cs_replica_set_position(generation, next_segment, snapshot_lsn)
 *	  Publish the uploaded position (see the file header): generations
 *	  before generation are up whole; of generation, the segments below
 *	  next_segment and the snapshots up to snapshot_lsn (0: none).
 */
void
cs_replica_set_position(uint64 generation, int64 next_segment,
						XLogRecPtr snapshot_lsn)
{
	SpinLockAcquire(&shared->mutex);
	shared->position_known = true;
	shared->generation = generation;
	shared->next_segment = next_segment;
	shared->snapshot_lsn = snapshot_lsn;
	SpinLockRelease(&shared->mutex);
}

/*
 * cs_replica_forget_position()
 *	  No uploaded position is known (the bucket or prefix changed): local
 *	  retention deletes nothing until the uploader publishes one again.
 */
void
cs_replica_forget_position(void)
{
	SpinLockAcquire(&shared->mutex);
	shared->position_known = false;
	SpinLockRelease(&shared->mutex);
}

/*
 * cs_replica_configured() -> bool
 *	  Whether local retention must wait for the uploader: an uploader was
 *	  registered at server start and changestream.replica_url is set.
 */
bool
cs_replica_configured(void)
{
	return cs_uploader_registered && shared != NULL &&
		cs_replica_url != NULL && cs_replica_url[0] != '\0';
}

/* The uploaded position, or false when none is known. */
static bool
position(uint64 *generation, int64 *next_segment, XLogRecPtr *snapshot_lsn)
{
	bool		known;

	SpinLockAcquire(&shared->mutex);
	known = shared->position_known;
	*generation = shared->generation;
	*next_segment = shared->next_segment;
	*snapshot_lsn = shared->snapshot_lsn;
	SpinLockRelease(&shared->mutex);
	return known;
}

/*
 * cs_replica_generation_up(generation) -> bool
 *	  Whether local retention may delete generation whole: no replica, or
 *	  every file of it is in the bucket.
 */
bool
cs_replica_generation_up(uint64 generation)
{
	uint64		g;
	int64		seg;
	XLogRecPtr	snap;

	if (!cs_replica_configured())
		return true;
	return position(&g, &seg, &snap) && generation < g;
}

/*
 * cs_replica_first_segment_not_up(generation) -> segment index
 *	  The lowest segment index of generation that local retention must
 *	  keep for the uploader (PG_INT64_MAX: none).
 */
int64
cs_replica_first_segment_not_up(uint64 generation)
{
	uint64		g;
	int64		seg;
	XLogRecPtr	snap;

	if (!cs_replica_configured())
		return PG_INT64_MAX;
	if (!position(&g, &seg, &snap) || generation > g)
		return 0;
	return generation < g ? PG_INT64_MAX : seg;
}

/*
 * cs_replica_newest_snapshot_up(generation) -> LSN
 *	  The newest snapshot LSN of generation in the bucket, every older one
 *	  being there too (PG_UINT64_MAX: all of them; 0: none).  Local
 *	  retention keeps every snapshot after it.
 */
XLogRecPtr
cs_replica_newest_snapshot_up(uint64 generation)
{
	uint64		g;
	int64		seg;
	XLogRecPtr	snap;

	if (!cs_replica_configured())
		return PG_UINT64_MAX;
	if (!position(&g, &seg, &snap) || generation > g)
		return InvalidXLogRecPtr;
	return generation < g ? PG_UINT64_MAX : snap;
}
