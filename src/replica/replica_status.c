/*-------------------------------------------------------------------------
 *
 * replica_status.c
 *	  The uploader's status in shared memory (worker/uploader.c writes it,
 *	  changestream.status() reads it), one entry per archive tree (the
 *	  status entry selected, shmem_status.c: the archiver's own, the tree
 *	  the uploader or the maintenance worker serves now, the row status()
 *	  shows), and the uploaded position that local
 *	  retention (retention.c) honours: with a replica configured, nothing
 *	  is deleted locally before it is in the bucket (docs/DESIGN.md
 *	  section 15).
 *
 *	  As in shmem_status.c, the scalars are guarded by a spinlock held for
 *	  a few stores, never across a call; the error text by an LWLock.
 *
 *	  The archiver's side (docs/DESIGN.md section 15): its durable position
 *	  and the active segment's durable bytes, for the uploader's tail sync;
 *	  its flushes not yet in the bucket, for replica_lag_seconds; the
 *	  remote durable position it may confirm with replica_durability =
 *	  remote; the backlog that replica_max_backlog compares.  Each side
 *	  sets the other's latch when it has something new for it.
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
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "base/guc.h"
#include "base/shmem_status.h"
#include "replica/replica_status.h"
#include "worker/uploader.h"

#define CS_REPLICA_TRANCHE "changestream replica"

#define LAG_RING		256		/* local flushes remembered for the lag */
#define LAG_STEP_MS		100		/* their least spacing, at first */

/* a local flush: the archive was durable up to position from time on */
typedef struct LocalFlush
{
	uint64		generation;
	XLogRecPtr	position;
	TimestampTz time;
} LocalFlush;

typedef struct CsReplicaShared
{
	slock_t		mutex;
	CsReplicaStatus status;		/* last_error under lock, the rest mutex */
	bool		position_known;
	uint64		generation;
	int64		next_segment;
	XLogRecPtr	snapshot_lsn;

	/* the archiver's durable position (mutex) */
	CsLocalDurable local;
	Latch	   *archiver_latch; /* set when the remote position moves */
	Latch	   *uploader_latch; /* set when a commit waits for the bucket */

	/*
	 * Local flushes not yet covered by the remote position, oldest first,
	 * for replica_lag_seconds (mutex): at most LAG_RING, at least lag_step
	 * ms apart; when full, every other one is dropped and the step doubles.
	 */
	int			nflushes;
	int			lag_step_ms;
	LocalFlush	flushes[LAG_RING];
	LWLock	   *lock;
} CsReplicaShared;

static CsReplicaShared *entries = NULL;	/* CS_MAX_DATABASES + 1 */

/*
 * The entry of the archive this process works on: one per status entry
 * (shmem_status.c), i.e. per archived database's tree, the one selected
 * there (cs_status_select()); the first one when none is attached.
 */
static CsReplicaShared *
entry(void)
{
	return &entries[cs_status_attached() ? cs_status_selected() : 0];
}

/*
 * cs_replica_shmem_request
 *	  Reserve the uploader's shared memory and its LWLock (from the
 *	  shmem_request_hook, as cs_shmem_request()).
 */
void
cs_replica_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(CsReplicaShared) *
									(CS_MAX_DATABASES + 1)));
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
	entries = ShmemInitStruct("changestream replica status",
							  sizeof(CsReplicaShared) * (CS_MAX_DATABASES + 1),
							  &found);
	if (!found)
	{
		memset(entries, 0, sizeof(CsReplicaShared) * (CS_MAX_DATABASES + 1));
		for (int i = 0; i <= CS_MAX_DATABASES; i++)
		{
			CsReplicaShared *shared = &entries[i];

			SpinLockInit(&shared->mutex);
			shared->status.backlog_files = -1;
			shared->status.backlog_bytes = -1;
			shared->lag_step_ms = LAG_STEP_MS;
			shared->lock = &(GetNamedLWLockTranche(CS_REPLICA_TRANCHE))->lock;
		}
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
	CsReplicaShared *shared = entry();

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
 *	  The uploader process starts: its PID and state idle in every tree's
 *	  entry (it serves them all).
 */
void
cs_replica_status_started(void)
{
	for (int i = 0; i <= CS_MAX_DATABASES; i++)
	{
		CsReplicaShared *shared = &entries[i];

		SpinLockAcquire(&shared->mutex);
		shared->status.pid = MyProcPid;
		shared->status.state = CS_REPLICA_IDLE;
		shared->uploader_latch = MyLatch;
		SpinLockRelease(&shared->mutex);
	}
}

/*
 * cs_replica_status_exited()
 *	  The uploader is gone: state off.  The uploaded position is forgotten,
 *	  so retention waits for the next uploader to publish its own.
 */
void
cs_replica_status_exited(void)
{
	for (int i = 0; i <= CS_MAX_DATABASES; i++)
	{
		CsReplicaShared *shared = &entries[i];

		SpinLockAcquire(&shared->mutex);
		shared->status.pid = 0;
		shared->status.state = CS_REPLICA_OFF;
		shared->position_known = false;
		shared->uploader_latch = NULL;
		SpinLockRelease(&shared->mutex);
	}
}

/*
 * cs_replica_set_state(state)
 *	  Publish the uploader's state.
 */
void
cs_replica_set_state(CsReplicaState state)
{
	CsReplicaShared *shared = entry();

	SpinLockAcquire(&shared->mutex);
	shared->status.state = state;
	SpinLockRelease(&shared->mutex);
}

/*
 * cs_replica_set_error(state, message)
 *	  Publish a failure: the state (backoff or error), the message
 *	  (truncated to 1023 bytes) and the time; one more failure counted
 *	  (status().replica_failures, since the server started).
 */
void
cs_replica_set_error(CsReplicaState state, const char *message)
{
	CsReplicaShared *shared = entry();
	TimestampTz now = GetCurrentTimestamp();

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	strlcpy(shared->status.last_error, message,
			sizeof(shared->status.last_error));
	SpinLockAcquire(&shared->mutex);
	shared->status.state = state;
	shared->status.last_error_at = now;
	shared->status.failures++;
	SpinLockRelease(&shared->mutex);
	LWLockRelease(shared->lock);
}

/*
 * cs_replica_count(kind, bytes_sent)
 *	  Count one request of kind sent to the bucket, with bytes_sent bytes
 *	  of body (by the uploader, or by a backend reading the replica;
 *	  nothing without the shared memory).
 */
void
cs_replica_count(CsReplicaRequest kind, uint64 bytes_sent)
{
	CsReplicaShared *shared;

	if (entries == NULL)
		return;
	shared = entry();
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
	CsReplicaShared *shared = entry();

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
	CsReplicaShared *shared = entry();
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

/* Drop the local flushes the remote position covers (mutex held). */
static void
drop_covered_flushes(void)
{
	CsReplicaShared *shared = entry();
	int			n = 0;

	while (n < shared->nflushes &&
		   (shared->flushes[n].generation < shared->status.flushed_generation ||
			(shared->flushes[n].generation == shared->status.flushed_generation &&
			 shared->flushes[n].position <= shared->status.flushed_lsn)))
		n++;
	if (n == 0)
		return;
	memmove(shared->flushes, shared->flushes + n,
			sizeof(LocalFlush) * (shared->nflushes - n));
	shared->nflushes -= n;
	if (shared->nflushes < LAG_RING / 4 && shared->lag_step_ms > LAG_STEP_MS)
		shared->lag_step_ms /= 2;
}

/*
 * cs_replica_set_flushed(generation, lsn)
 *	  The remote durable position: everything of generation up to lsn (an
 *	  LSN: the end of the newest segment up in order, or of the active
 *	  segment's bytes synced as tail objects) and every older generation is
 *	  in the bucket.  Within a generation it only increases.  With
 *	  changestream.replica_durability = remote the archiver is woken, as it
 *	  may now confirm more.
 */
void
cs_replica_set_flushed(uint64 generation, XLogRecPtr lsn)
{
	CsReplicaShared *shared = entry();
	Latch	   *latch;

	SpinLockAcquire(&shared->mutex);
	if (generation < shared->status.flushed_generation ||
		(generation == shared->status.flushed_generation &&
		 lsn <= shared->status.flushed_lsn))
	{
		SpinLockRelease(&shared->mutex);
		return;
	}
	shared->status.flushed_generation = generation;
	shared->status.flushed_lsn = lsn;
	drop_covered_flushes();
	latch = shared->archiver_latch;
	SpinLockRelease(&shared->mutex);
	if (latch != NULL && cs_replica_durability == CS_REPLICA_DURABILITY_REMOTE)
		SetLatch(latch);
}

/*
 * cs_replica_remote_durable(generation) -> LSN
 *	  What the archiver may confirm of generation with replica_durability =
 *	  remote: the remote durable position when it is in generation,
 *	  PG_UINT64_MAX when the bucket has a later generation (all of this one
 *	  is up), InvalidXLogRecPtr when it has none of it.
 */
XLogRecPtr
cs_replica_remote_durable(uint64 generation)
{
	CsReplicaShared *shared = entry();
	uint64		g;
	XLogRecPtr	lsn;

	SpinLockAcquire(&shared->mutex);
	g = shared->status.flushed_generation;
	lsn = shared->status.flushed_lsn;
	SpinLockRelease(&shared->mutex);
	if (lsn == InvalidXLogRecPtr || g < generation)
		return InvalidXLogRecPtr;
	return g > generation ? PG_UINT64_MAX : lsn;
}

/*
 * Remember a local flush (mutex held).  A flush less than lag_step_ms
 * after the newest remembered one of its generation joins it: that entry
 * keeps its time and takes the new position, so it is dropped only once
 * the bucket covers both, and the lag is never under-stated (it may be
 * over-stated by up to the step).  When the ring is full, pairs are
 * merged the same way and the step doubles.
 */
static void
note_flush(uint64 generation, XLogRecPtr position, TimestampTz now)
{
	CsReplicaShared *shared = entry();
	LocalFlush *last = shared->nflushes > 0 ?
		&shared->flushes[shared->nflushes - 1] : NULL;

	if (last != NULL && last->generation == generation &&
		position <= last->position)
		return;					/* nothing new was made durable */
	if (last != NULL && last->generation == generation &&
		!TimestampDifferenceExceeds(last->time, now, shared->lag_step_ms))
	{
		last->position = Max(last->position, position);
		return;
	}
	if (shared->nflushes == LAG_RING)
	{
		for (int i = 0; i < LAG_RING / 2; i++)
		{
			shared->flushes[i] = shared->flushes[2 * i];
			shared->flushes[i].generation = shared->flushes[2 * i + 1].generation;
			shared->flushes[i].position = shared->flushes[2 * i + 1].position;
		}
		shared->nflushes = LAG_RING / 2;
		shared->lag_step_ms *= 2;
	}
	shared->flushes[shared->nflushes].generation = generation;
	shared->flushes[shared->nflushes].position = position;
	shared->flushes[shared->nflushes].time = now;
	shared->nflushes++;
}

/*
 * cs_replica_note_local_durable(local)
 *	  The archiver made its archive durable up to local->position, the
 *	  active segment (local->index of local->generation) holding
 *	  local->bytes durable bytes: the uploader's tail sync reads them
 *	  (docs/DESIGN.md section 15).  Remembers the flush for
 *	  replica_lag_seconds, and with replica_durability = remote wakes the
 *	  uploader, whose sync a commit now waits for.  Called by the archiver
 *	  only, which registers its latch here.
 */
void
cs_replica_note_local_durable(const CsLocalDurable *local)
{
	CsReplicaShared *shared;
	Latch	   *latch;
	TimestampTz now = GetCurrentTimestamp();

	if (entries == NULL)
		return;
	shared = entry();
	SpinLockAcquire(&shared->mutex);
	shared->archiver_latch = MyLatch;
	shared->local = *local;
	shared->local.at = now;
	note_flush(local->generation, local->position, now);
	latch = shared->uploader_latch;
	SpinLockRelease(&shared->mutex);
	if (latch != NULL && cs_replica_durability == CS_REPLICA_DURABILITY_REMOTE)
		SetLatch(latch);
}

/*
 * cs_replica_local_durable(local) -> bool
 *	  The archiver's durable position and the active segment's durable
 *	  bytes, as last noted (false: none since the server started).
 */
bool
cs_replica_local_durable(CsLocalDurable *local)
{
	CsReplicaShared *shared = entry();

	SpinLockAcquire(&shared->mutex);
	*local = shared->local;
	SpinLockRelease(&shared->mutex);
	return local->at != 0;
}

/*
 * cs_replica_lag_seconds(now, lag) -> bool
 *	  How long the oldest local flush the bucket lacks has been durable
 *	  locally, in seconds, into *lag: 0 when the bucket holds everything
 *	  flushed.  Exact to the spacing of the remembered flushes (100 ms, more
 *	  during a long outage).  false: unknown (no uploader, or nothing
 *	  flushed since the server started).
 */
bool
cs_replica_lag_seconds(TimestampTz now, double *lag)
{
	CsReplicaShared *shared = entry();
	bool		known;
	TimestampTz oldest = 0;

	SpinLockAcquire(&shared->mutex);
	known = shared->status.pid != 0 && shared->local.at != 0;
	drop_covered_flushes();
	if (shared->nflushes > 0)
		oldest = shared->flushes[0].time;
	SpinLockRelease(&shared->mutex);
	*lag = oldest != 0 && now > oldest ? (double) (now - oldest) / USECS_PER_SEC : 0;
	return known;
}

/*
 * cs_replica_backlog_exceeded(waiting) -> bool
 *	  Should the archiver stop consuming the slot, or keep waiting (waiting:
 *	  it waits already): a replica is configured,
 *	  changestream.replica_max_backlog is set and the uploader's backlog
 *	  (finished local files not in the bucket, bytes on disk) is past it,
 *	  or, while it waits, past half of it, so that the archiver does not
 *	  stop and start again for each file the uploader puts.  An uploader
 *	  that has not counted its backlog yet holds nothing back.
 */
bool
cs_replica_backlog_exceeded(bool waiting)
{
	CsReplicaShared *shared = entry();
	int64		bytes;
	int64		limit = (int64) cs_replica_max_backlog_kb * 1024;

	if (!cs_replica_configured() || cs_replica_max_backlog_kb <= 0)
		return false;
	SpinLockAcquire(&shared->mutex);
	bytes = shared->status.backlog_bytes;
	SpinLockRelease(&shared->mutex);
	return bytes > (waiting ? limit / 2 : limit);
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
	CsReplicaShared *shared = entry();

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
 *	  retention deletes nothing until the uploader publishes one again, and
 *	  the remote durable position starts over.
 */
void
cs_replica_forget_position(void)
{
	CsReplicaShared *shared = entry();

	SpinLockAcquire(&shared->mutex);
	shared->position_known = false;
	shared->status.flushed_generation = 0;
	shared->status.flushed_lsn = InvalidXLogRecPtr;
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
	return cs_uploader_registered && entries != NULL &&
		cs_replica_url != NULL && cs_replica_url[0] != '\0';
}

/* The uploaded position, or false when none is known. */
static bool
position(uint64 *generation, int64 *next_segment, XLogRecPtr *snapshot_lsn)
{
	CsReplicaShared *shared = entry();
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
