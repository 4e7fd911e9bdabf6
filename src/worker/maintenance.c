/*-------------------------------------------------------------------------
 *
 * maintenance.c
 *	  The "changestream maintenance" background worker: it gzips sealed
 *	  segments beside the archiver, so that the archiver's receive loop
 *	  only appends and fsyncs and the number of raw sealed segments stays
 *	  bounded under any load (issue 9).
 *
 *	  A raw segment is sealed when a segment with a higher index exists in
 *	  its generation: the archiver creates segment n + 1 only after
 *	  segment n is flushed and closed, and never writes to a lower index
 *	  again.  The newest segment of a generation is left raw, also in
 *	  generations no longer written, unless its header's seal says it is
 *	  complete and a newer generation exists (the hand-off seals it,
 *	  docs/DESIGN.md section 6): a torn tail may only be cut in a raw
 *	  segment (docs/DESIGN.md, "Damaged archives", rule 3).  The worker finds them
 *	  through archive_layout.c's listing, oldest first, compresses one in
 *	  slices (compress.c) and also removes the raw twin left beside a .gz
 *	  by a crash between rename and removal.  It sleeps on its latch, which
 *	  the archiver sets after sealing a segment, and looks again every
 *	  RESCAN_MS in any case.
 *
 *	  Its loop is a list of duties run one slice at a time: compression;
 *	  the spare segment (segment_spare.c: a zero-filled file the archiver
 *	  renames into place as its next segment, prepared only while nothing
 *	  waits for compression); and retention (retention.c: after each
 *	  snapshot and at least every minute, it deletes what the restorable
 *	  window no longer needs, a slice of files at a time).  The archiver's
 *	  receive loop never waits for any of them.  While the archiver
 *	  catches up with a backlog, compression and the spare wait, up to a
 *	  bound of sealed raw segments (update_deferring()).  A retention
 *	  error is caught here, logged once and dropped: it never stops
 *	  compression (docs/DESIGN.md section 11).
 *
 *	  It serves the archive of every archived database (docs/databases.md)
 *	  in turns: it stays with one archive until it has no work left, or
 *	  until it has compressed TURN_SEGMENTS segments there, and then moves
 *	  to the next, between two segments (never with a compression job, a
 *	  spare or a retention run half done), so that a busy database does
 *	  not starve the others.  It sleeps once a whole round found no work.
 *
 *	  It holds its own lock file in the archive directory
 *	  (changestream.compressor.lock), as the archiver holds
 *	  changestream.lock, so that the maintenance worker of a second cluster
 *	  pointed at the same directory stays out.
 *
 *	  A failure (a full disk, an unwritable directory) never touches the
 *	  archiver's session: the error is logged once (log_once.c), shown in
 *	  status() (last_compress_error), the job's .tmp removed, and the next
 *	  attempt waits a delay that doubles from 1 s to 30 s; a reload ends
 *	  the delay.
 *
 * Sources: the error recovery pattern of src/backend/postmaster/
 * bgwriter.c; the registration of contrib/worker_spi.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "libpq/pqsignal.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "tcop/tcopprot.h"
#include "utils/wait_event.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "archive/archive_dir.h"
#include "archive/archive_layout.h"
#include "archive/compress.h"
#include "archive/retention.h"
#include "archive/retention_horizon.h"
#include "archive/segment_reader.h"
#include "archive/segment_spare.h"
#include "base/archive_config.h"
#include "base/guc.h"
#include "base/latch_wait.h"
#include "base/log_once.h"
#include "base/shmem_status.h"
#include "worker/maintenance.h"
#include "worker/slot_wal_watch.h"

#define RESCAN_MS			10000	/* look for work at least this often */
#define BACKOFF_MIN_MS		1000
#define BACKOFF_MAX_MS		30000
#define SPARE_SLICE			(2 * 1024 * 1024)	/* zeros written per step */
#define DEFER_MAX_RAW		4	/* see update_deferring() */
#define TURN_SEGMENTS		4	/* segments compressed per turn when busy */

/* A sealed raw segment to compress. */
typedef struct Candidate
{
	char		wal_dir[MAXPGPATH];
	int64		index;
} Candidate;

static MemoryContext job_cxt = NULL;	/* the job in progress and its scan */
static MemoryContext retention_scratch = NULL;	/* one retention step */
static MemoryContext config_cxt = NULL; /* config */
static List *configs = NIL;		/* every archive's configuration */
static int	turn = 0;			/* the one served now, in configs */
static int	turn_segments = 0;	/* segments compressed in this turn */
static int	idle_archives = 0;	/* archives in a row found without work */
static CsCompressJob *job = NULL;
static int	lock_fd = -1;		/* changestream.compressor.lock */
static char locked_dir[MAXPGPATH];	/* the directory it locks */
static CsLogOnce log_once;
static long backoff_ms = BACKOFF_MIN_MS;
static bool last_attempt_failed = false;
static bool deferring = false;	/* waits for the archiver: update_deferring() */

/* Release the maintenance worker's lock of the archive directory, if held. */
static void
release_lock(void)
{
	if (lock_fd >= 0)
		close(lock_fd);
	lock_fd = -1;
	locked_dir[0] = '\0';
}

/*
 * Remove the raw twin of a compressed segment: the .gz is renamed into
 * place only once durable, so where both exist the raw copy is what a
 * crash kept compression from removing.
 */
static void
remove_raw_twin(const CsSegmentFile *sf, const char *wal_dir)
{
	char		raw[MAXPGPATH];

	strlcpy(raw, sf->path, sizeof(raw));
	raw[strlen(raw) - strlen(".gz")] = '\0';
	if (!cs_durable_unlink(raw, wal_dir))
		return;
	ereport(DEBUG1,
			(errmsg_internal("removed raw twin \"%s\" of a compressed segment", raw)));
}

/*
 * Look at every generation of the archive: remove raw twins, count the
 * sealed raw segments (published in status()), return that count and set
 * *next to the oldest one.  A raw segment with a successor is sealed.  The
 * last segment of a generation is sealed only when its header's seal says
 * so and a newer generation exists: the last segment of the newest one may
 * be the archiver's active segment even with a seal (rotation seals it
 * before creating the next), and the last segment of an older one is
 * sealed at the hand-off (docs/DESIGN.md section 6), or left unsealed,
 * perhaps torn, when its generation was abandoned.
 */
static int64
find_work(const char *directory, Candidate *next)
{
	List	   *gens = cs_list_generations(directory);
	ListCell   *g;
	int64		backlog = 0;

	foreach(g, gens)
	{
		uint64		gen = *(uint64 *) lfirst(g);
		List	   *segments = cs_list_segments(directory, gen);
		char	   *wal_dir = cs_wal_dir_path(directory, gen);
		ListCell   *s;

		foreach(s, segments)
		{
			CsSegmentFile *sf = lfirst(s);

			if (sf->compressed)
			{
				if (sf->raw_twin)
					remove_raw_twin(sf, wal_dir);
				continue;
			}
			if (lnext(segments, s) == NULL &&
				(lnext(gens, g) == NULL || !cs_segment_sealed(sf->path)))
				continue;		/* may be active, or torn */
			if (backlog++ == 0)
			{
				strlcpy(next->wal_dir, wal_dir, MAXPGPATH);
				next->index = sf->index;
			}
		}
	}
	cs_maintenance_status_set_backlog(backlog);
	return backlog;
}

/*
 * Publish whether the maintenance worker holds back for the archiver
 * (status().compression_deferred), with a DEBUG1 message when that
 * changes.
 */
static void
set_deferring(bool defer, int64 backlog)
{
	if (defer == deferring)
		return;
	deferring = defer;
	cs_maintenance_status_set_deferring(defer);
	ereport(DEBUG1,
			(errmsg_internal("changestream compressor %s (%lld sealed raw segments)",
							 defer ? "waits for the archiver to catch up" : "resumes",
							 (long long) backlog)));
}

/*
 * Does the maintenance worker wait for the archiver, with backlog sealed raw
 * segments?  While the archiver is catching up with a backlog of the local
 * server's WAL (stream.c tells, through shared memory) the maintenance worker
 * holds back: it prepares no spare, and starts a segment only once
 * DEFER_MAX_RAW sealed segments wait, so that the walsender and the archiver
 * have both CPUs of a small machine.  Measured on 2 CPUs (issue 13): the
 * maintenance worker's slices preempted the walsender up to 2,400 times per
 * 100,000-transaction drain, 31 times with the maintenance worker stopped. The
 * bound keeps the raw backlog, and the disk it takes, at about DEFER_MAX_RAW
 * segments in a long catch-up: past it, a segment is compressed for each one
 * sealed.  The end of catching up wakes the maintenance worker.  Returns true
 * when no segment is to be started now.
 */
static bool
update_deferring(int64 backlog)
{
	bool		hold = cs_maintenance_status_archiver_catching_up();

	set_deferring(hold, backlog);
	return hold && backlog < DEFER_MAX_RAW;
}

/*
 * Hold the maintenance worker's lock of the archive directory: a maintenance
 * worker of another cluster pointed at the same directory must never compress
 * the same segment.  Returns false when the directory does not exist yet
 * (nothing to compress).  Raises object_in_use when another maintenance worker
 * holds it.
 */
static bool
lock_directory(const char *directory)
{
	CsStorageInfo info;

	if (lock_fd >= 0 && strcmp(locked_dir, directory) == 0)
		return true;
	release_lock();
	if (cs_storage_stat(directory, true, &info) == 0 &&
		info.type == CS_STORAGE_MISSING)
		return false;
	lock_fd = cs_lock_archive_maintenance(directory);
	strlcpy(locked_dir, directory, sizeof(locked_dir));
	return true;
}

/*
 * The compression duty: one slice of the segment in progress, or, with none in
 * progress, a look for the next one, unless the maintenance worker waits for
 * the archiver (update_deferring()).  Returns true while work remains (the
 * caller does not sleep).
 */
static bool
compress_duty(const char *directory)
{
	Candidate	next;
	MemoryContext old;

	if (job == NULL)
	{
		int64		backlog;

		if (!lock_directory(directory))
		{
			set_deferring(false, 0);	/* nothing to hold back */
			return false;
		}
		MemoryContextReset(job_cxt);
		old = MemoryContextSwitchTo(job_cxt);
		backlog = find_work(directory, &next);
		if (!update_deferring(backlog) && backlog > 0)
			job = cs_compress_begin(next.wal_dir, next.index,
									cs_compression_level);
		MemoryContextSwitchTo(old);
		if (job == NULL)
			return false;
	}
	if (cs_compress_step(job, CS_COMPRESS_SLICE))
		return true;
	job = NULL;
	cs_maintenance_status_compressed();
	if (last_attempt_failed)
	{
		int			failed = cs_log_once_reset(&log_once) + 1;

		ereport(LOG,
				(errmsg_plural("compressing sealed changestream segments again after %d failed attempt",
							   "compressing sealed changestream segments again after %d failed attempts",
							   failed, failed)));
		last_attempt_failed = false;
	}
	backoff_ms = BACKOFF_MIN_MS;
	return true;				/* look for the next one at once */
}

/*
 * The spare duty: one slice of the zero-filled spare segment the archiver
 * takes as its next one (segment_spare.c).  The caller runs it only while
 * no sealed segment waits for compression and the maintenance worker does not
 * hold back for the archiver (update_deferring()).  Returns true while
 * work remains.
 */
static bool
spare_duty(const char *directory)
{
	if (!lock_directory(directory))
		return false;
	return cs_spare_step(directory, SPARE_SLICE);
}

/*
 * The retention duty: one step of retention.c (plan a run that is due, or
 * delete the next slice of one), planned only while no segment is half
 * compressed, so that a new horizon never lands under the compression
 * job.  An error drops the run (cs_retention_failed()) after releasing
 * what it left open, as the error path below does; a compression job in
 * progress is given up with it and started again.  Returns true while
 * work remains.
 */
static bool
retention_duty(const char *directory)
{
	MemoryContext old;
	volatile bool more = false;

	if (!lock_directory(directory))
		return false;
	old = MemoryContextSwitchTo(retention_scratch);
	PG_TRY();
	{
		more = cs_retention_step(directory, GetCurrentTimestamp(),
								 job == NULL);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(TopMemoryContext);
		edata = CopyErrorData();
		FlushErrorState();
		cs_compress_abort();
		job = NULL;
		LWLockReleaseAll();
		AtEOXact_Files(false);
		cs_spare_forget();		/* AtEOXact_Files() closed its part */
		MemoryContextReset(job_cxt);
		cs_retention_failed(edata);
		FreeErrorData(edata);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(old);
	MemoryContextReset(retention_scratch);
	return more;
}

/*
 * The error path, entered through sigsetjmp: log the error once, release
 * the job (zlib state, files, its .tmp), publish the error and wait the
 * backoff delay.  Streaming goes on in the archiver meanwhile.
 */
static void
compression_failed(void)
{
	ErrorData  *edata;

	error_context_stack = NULL;
	HOLD_INTERRUPTS();
	MemoryContextSwitchTo(TopMemoryContext);
	edata = CopyErrorData();
	if (cs_log_once_should_log(&log_once, edata->sqlerrcode, edata->message))
		EmitErrorReport();
	FlushErrorState();

	/* as bgwriter.c does after an error; the job's files first */
	cs_compress_abort();
	job = NULL;
	pgstat_report_wait_end();
	LWLockReleaseAll();
	AtEOXact_Files(false);
	cs_spare_forget();
	MemoryContextReset(job_cxt);
	cs_maintenance_status_set_error(edata->message);
	FreeErrorData(edata);
	RESUME_INTERRUPTS();

	last_attempt_failed = true;
	/* the next archive's turn: one that fails does not hold up the others */
	if (list_length(configs) > 1)
	{
		release_lock();
		cs_retention_reset();
		turn = (turn + 1) % list_length(configs);
		turn_segments = 0;
	}
	cs_latch_wait_ms(backoff_ms, true);
	backoff_ms = Min(backoff_ms * 2, BACKOFF_MAX_MS);
}

/*
 * Every archive's configuration from the current settings (one per
 * archived database, cs_archived_databases()), in config_cxt (the
 * previous ones are freed): taken at start and after each reload.
 */
static List *
take_configs(void)
{
	MemoryContext old;
	List	   *taken = NIL;
	ListCell   *lc;

	MemoryContextReset(config_cxt);
	old = MemoryContextSwitchTo(config_cxt);
	foreach(lc, cs_archived_databases())
		taken = lappend(taken, cs_archive_config_for(lfirst(lc), InvalidOid));
	MemoryContextSwitchTo(old);
	return taken;
}

/* Is directory the tree of one of configs? */
static bool
served(List *list, const char *directory)
{
	ListCell   *lc;

	foreach(lc, list)
		if (strcmp(((CsArchiveConfig *) lfirst(lc))->directory, directory) == 0)
			return true;
	return false;
}

/*
 * Leave the archive served now: nothing half done may stay (the caller
 * switches only between segments), the lock is released and retention
 * forgets its state.  With discard, the spare made there is removed too
 * (no archiver takes it now).
 */
static void
leave_archive(bool discard)
{
	if (job != NULL)
	{
		cs_compress_abort();
		job = NULL;
	}
	if (discard && locked_dir[0] != '\0')
		cs_spare_discard(locked_dir);
	else
		cs_spare_abort();
	release_lock();
	cs_retention_reset();
}

/*
 * The archive to serve now: configs' entry turn, with its database's
 * status entry selected (retention reads its last snapshot time there).
 */
static CsArchiveConfig *
serve_turn(void)
{
	CsArchiveConfig *config;

	if (turn >= list_length(configs))
		turn = 0;
	config = list_nth(configs, turn);
	(void) cs_archive_config_select(config->database, InvalidOid);
	return config;
}

/* before_shmem_exit callback: the worker is gone from status(). */
static void
maintenance_exit(int code, Datum arg)
{
	cs_compress_abort();
	cs_spare_abort();
	cs_maintenance_status_exited();
}

/*
 * changestream_maintenance_main
 *	  Entry point of the "changestream maintenance" background worker
 *	  (main_arg is unused).  Needs no database connection.  Compresses
 *	  sealed segments, prepares spares and applies retention in the archive
 *	  of every archived database until SIGTERM; never returns.
 */
void
changestream_maintenance_main(Datum main_arg)
{
	sigjmp_buf	local_sigjmp_buf;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	cs_maintenance_status_started(MyLatch);
	before_shmem_exit(maintenance_exit, (Datum) 0);
	job_cxt = AllocSetContextCreate(TopMemoryContext,
									"changestream maintenance",
									ALLOCSET_DEFAULT_SIZES);
	retention_scratch = AllocSetContextCreate(TopMemoryContext,
											  "changestream retention step",
											  ALLOCSET_DEFAULT_SIZES);
	config_cxt = AllocSetContextCreate(TopMemoryContext,
									   "changestream maintenance configuration",
									   ALLOCSET_SMALL_SIZES);
	configs = take_configs();

	if (sigsetjmp(local_sigjmp_buf, 1) != 0)
		compression_failed();
	PG_exception_stack = &local_sigjmp_buf;

	for (;;)
	{
		CsArchiveConfig *config;
		bool		compress_more;
		bool		other_more = false;
		bool		more;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			configs = take_configs();
			if (job != NULL)
			{
				/* the directory may have changed: start over */
				cs_compress_abort();
				job = NULL;
			}
			if (locked_dir[0] != '\0' && !served(configs, locked_dir))
				leave_archive(true);
			turn_segments = 0;
			idle_archives = 0;
		}
		config = serve_turn();
		cs_slot_wal_watch(config);	/* also while archiving is off */
		if (!cs_archive_config_enabled(config))
		{
			cs_maintenance_status_set_backlog(-1);
			set_deferring(false, 0);
			cs_latch_wait_ms(RESCAN_MS, false);	/* the slot may still keep WAL */
			continue;
		}
		if (strcmp(config->directory, locked_dir) != 0)
			release_lock();
		compress_more = compress_duty(config->directory);
		if (!compress_more && !deferring)
			other_more = spare_duty(config->directory);
		other_more = retention_duty(config->directory) || other_more;
		more = compress_more || other_more;
		if (compress_more && job == NULL)
			turn_segments++;
		idle_archives = more ? 0 : idle_archives + 1;
		if (list_length(configs) > 1 && job == NULL && !other_more &&
			(!more || turn_segments >= TURN_SEGMENTS))
		{
			leave_archive(false);
			turn = (turn + 1) % list_length(configs);
			turn_segments = 0;
		}
		if (!more && idle_archives >= list_length(configs))
		{
			long		retry = cs_retention_retry_ms();

			idle_archives = 0;
			cs_latch_wait_ms(retry > 0 ? Min(retry, RESCAN_MS) : RESCAN_MS, false);
		}
	}
}

/*
 * cs_register_maintenance
 *	  Register the maintenance worker at _PG_init(): BGWORKER_SHMEM_ACCESS only
 *	  (no database connection), started once recovery has finished, restarted
 *	  by the postmaster 5 s after an unexpected exit.  Mirrors the registration
 *	  in contrib/worker_spi.
 */
void
cs_register_maintenance(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "changestream");
	snprintf(worker.bgw_function_name, BGW_MAXLEN,
			 "changestream_maintenance_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "changestream maintenance");
	snprintf(worker.bgw_type, BGW_MAXLEN, "changestream maintenance");
	worker.bgw_notify_pid = 0;
	RegisterBackgroundWorker(&worker);
}
