/*-------------------------------------------------------------------------
 *
 * retention.c
 *	  Retention, a duty of the maintenance worker (maintenance.c): keep every
 *	  point of the restorable window [now - changestream.retention, now]
 *	  restorable, and delete what no point of it needs (rules 1 to 6 of
 *	  docs/DESIGN.md section 11).
 *
 *	  A run has two parts.  Planning (cheap: directory listings, a few segment
 *	  headers and snapshot manifests) holds the readers' pin lock, honours
 *	  their pins, and makes its decision durable before anything is deleted: a
 *	  generation's new retention horizon (retention_horizon.c) or, for an old
 *	  generation deleted whole, its rename to <gen>.tmp. Deleting then goes a
 *	  slice of files at a time, oldest first, with the directories fsynced
 *	  after each slice, between the maintenance worker's other slices; the
 *	  archiver's receive loop never waits for it.  A crash anywhere leaves an
 *	  archive the readers find sound: they ignore what lies below a horizon and
 *	  every *.tmp, and the next run (or the archiver's session start, for
 *	  *.tmp) removes the rest.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "archive/archive_dir.h"
#include "archive/archive_layout.h"
#include "archive/reader_pins.h"
#include "archive/retention.h"
#include "archive/retention_horizon.h"
#include "archive/segment_reader.h"
#include "archive/snapshot_reader.h"
#include "base/guc.h"
#include "base/shmem_status.h"
#include "base/compat.h"
#include "replica/replica_status.h"

#define RETENTION_SLICE_FILES	16	/* files deleted per step */
#define RETENTION_MAX_GAP_MS	(60 * 1000) /* a run at least this often */
#define RETENTION_RETRY_MS		2000	/* again this soon after a hold */

typedef enum ItemKind
{
	ITEM_FILE,
	ITEM_DIR,					/* rmdir of an emptied directory */
	ITEM_TREE					/* rmtree of a generation renamed to .tmp */
} ItemKind;

/* One thing to delete, with the directory to fsync after it. */
typedef struct RetentionItem
{
	ItemKind	kind;
	char	   *path;
	char	   *parent;
} RetentionItem;

typedef struct RetentionRun
{
	List	   *queue;			/* of RetentionItem, in deletion order */
	List	   *dirty_dirs;		/* to fsync after the slice */
	int			files;
	int64		freed_bytes;
	int			generations;	/* deleted whole */
	bool		has_horizon;	/* of the current generation, new */
	uint64		generation;
	CsHorizon	horizon;
	pid_t		held_pid;		/* a reader's pin kept files: its backend */
	XLogRecPtr	held_lsn;		/* that pin's LSN (0: whole generation) */
	int64		held_bytes;		/* what the pins kept that could go */
} RetentionRun;


static MemoryContext retention_cxt = NULL;
static RetentionRun run;
static TimestampTz last_run_at = 0;
static TimestampTz seen_snapshot_at = 0;
static bool held_back = false;	/* the last run was held back by a pin */
static bool warned = false;
static char last_error[256] = "";


/*
 * cs_retention_reset
 *	  Forget a run in progress (when the archive directory changes): what
 *	  it had not deleted yet lies below a durable horizon or in a *.tmp
 *	  directory, and the next run or the archiver's session start removes
 *	  it.
 */
void
cs_retention_reset(void)
{
	if (retention_cxt == NULL)
		retention_cxt = AllocSetContextCreate(TopMemoryContext,
											  "changestream retention",
											  ALLOCSET_SMALL_SIZES);
	else
		MemoryContextReset(retention_cxt);
	memset(&run, 0, sizeof(run));
	last_run_at = 0;
}

static void
enqueue(ItemKind kind, const char *path, const char *parent)
{
	MemoryContext old = MemoryContextSwitchTo(retention_cxt);
	RetentionItem *item = palloc(sizeof(RetentionItem));

	item->kind = kind;
	item->path = pstrdup(path);
	item->parent = pstrdup(parent);
	run.queue = lappend(run.queue, item);
	MemoryContextSwitchTo(old);
}

static int
cmp_names(const ListCell *a, const ListCell *b)
{
	return strcmp(lfirst(a), lfirst(b));
}

/*
 * Queue every regular file of dir (by name: segment and snapshot names
 * sort oldest first), then dir itself.
 */
static void
enqueue_dir(const char *dir)
{
	int			err;
	List	   *entries = cs_storage_list_entries(dir, &err);
	List	   *names = NIL;
	ListCell   *lc;

	if (err != 0)
		return;
	foreach(lc, entries)
	{
		CsStorageEntry *e = lfirst(lc);

		if (e->info.type == CS_STORAGE_FILE)
			names = lappend(names, e->name);
	}
	list_sort(names, cmp_names);
	foreach(lc, names)
		enqueue(ITEM_FILE, cs_file_in(dir, (char *) lfirst(lc)), dir);
	enqueue(ITEM_DIR, dir, dir);
}

/*
 * A reader's pin (of backend pid, at lsn) kept bytes that retention would
 * otherwise delete: add them to the run's hold, which names the pin that
 * keeps the most (the oldest LSN; a whole-generation pin first).
 */
static void
note_hold(pid_t pid, XLogRecPtr lsn, int64 bytes)
{
	if (bytes <= 0)
		return;
	if (run.held_pid == 0 || lsn < run.held_lsn)
	{
		run.held_pid = pid;
		run.held_lsn = lsn;
	}
	run.held_bytes += bytes;
}

/* The bytes on disk of every regular file in dir (0 if it cannot be read). */
static int64
dir_bytes(const char *dir)
{
	int			err;
	List	   *entries = cs_storage_list_entries(dir, &err);
	ListCell   *lc;
	int64		bytes = 0;

	foreach(lc, entries)
	{
		CsStorageEntry *e = lfirst(lc);

		if (e->info.type == CS_STORAGE_FILE)
			bytes += e->info.size;
	}
	list_free_deep(entries);
	return bytes;
}

/* The newest modification time of a generation's segments (or its own). */
static TimestampTz
last_write_time(const char *directory, uint64 generation)
{
	List	   *segments = cs_list_all_segments(directory, generation);
	ListCell   *lc;
	TimestampTz newest = 0;
	CsStorageInfo info;

	foreach(lc, segments)
		newest = Max(newest, ((CsSegmentFile *) lfirst(lc))->mtime);
	if (newest == 0 &&
		cs_storage_stat(cs_generation_path(directory, generation), true,
						&info) == 0 &&
		info.type != CS_STORAGE_MISSING)
		newest = info.mtime;
	return newest;
}

/*
 * Rule 3: an older generation goes whole once its last commit is older
 * than the window's start.  Its newest segment's modification time is
 * never earlier than its last commit was archived, so it stands for it.
 * The generation is renamed to <gen>.tmp (durably) first: readers skip it
 * from then on, and a crash leaves it to session start to remove.
 */
static void
plan_old_generation(const char *directory, uint64 generation,
					TimestampTz window_start)
{
	XLogRecPtr	pin;
	pid_t		pid;
	char	   *gendir;
	char	   *tmp;
	char	   *parent;

	if (last_write_time(directory, generation) >= window_start)
		return;
	if (!cs_replica_generation_up(generation))
		return;					/* not in the replica's bucket yet */
	gendir = cs_generation_path(directory, generation);
	if (cs_pinned(generation, &pin, &pid))
	{
		/* a reader holds it: it stays whole, and the run says so */
		note_hold(pid, InvalidXLogRecPtr,
				  dir_bytes(cs_gendir_wal_path(gendir)) +
				  dir_bytes(cs_gendir_snapshots_path(gendir)));
		return;
	}
	tmp = cs_generation_tmp_path(directory, generation);
	parent = cs_generations_dir_path(directory);
	cs_durable_rename(gendir, tmp, parent);
	enqueue_dir(cs_gendir_wal_path(tmp));
	enqueue_dir(cs_gendir_snapshots_path(tmp));
	enqueue(ITEM_TREE, tmp, parent);
	run.generations++;
}

/* The start LSN of a listed segment, from its header. */
static XLogRecPtr
segment_start(CsSegmentFile *sf)
{
	CsSegmentReader *r = cs_reader_open(sf->path, sf->compressed, false);
	XLogRecPtr	start = cs_reader_header(r)->start_lsn;

	cs_reader_close(r);
	return start;
}

/*
 * Rules 2 and 4 for the generation being written: the snapshot to keep is
 * the newest one at or before the window's start (and at or before the
 * oldest LSN a reader pinned); the first segment to keep is the one that
 * ends after it.  The active segment (the newest) and the newest snapshot
 * are never below that, nor, with a replica, a snapshot or segment not yet
 * in its bucket (replica_status.c).  Returns false when it would delete
 * nothing.
 */
static bool
choose_horizon(const char *directory, uint64 generation,
			   TimestampTz window_start, XLogRecPtr pin, CsHorizon *h)
{
	List	   *names = cs_list_snapshots(directory, generation);
	char	   *dir = cs_snapshots_dir_path(directory, generation);
	List	   *segments;
	ListCell   *lc;
	bool		found = false;
	int64		first;
	XLogRecPtr	oldest;

	foreach(lc, names)
	{
		CsSnapshotReader *r = cs_snapreader_open(cs_file_in(dir, (char *) lfirst(lc)));
		XLogRecPtr	lsn = cs_snapreader_lsn(r);
		TimestampTz t = cs_snapreader_time(r);

		cs_snapreader_close(r);
		if (t > window_start || (pin != InvalidXLogRecPtr && lsn > pin) ||
			lsn > cs_replica_newest_snapshot_up(generation))
			break;
		h->snapshot_lsn = lsn;
		h->snapshot_time = t;
		found = true;
	}
	if (!found)
		return false;
	segments = cs_list_segments(directory, generation);
	if (segments == NIL)
		return false;
	first = ((CsSegmentFile *) linitial(segments))->index;
	h->first_segment = first;
	for (int i = 0; i + 1 < list_length(segments); i++)
	{
		CsSegmentFile *next = list_nth(segments, i + 1);

		if (segment_start(next) > h->snapshot_lsn)
			break;
		h->first_segment = next->index;
	}
	/* nothing that is not in the replica's bucket yet */
	h->first_segment = Min(h->first_segment,
						   Max(first, cs_replica_first_segment_not_up(generation)));
	/* does it delete anything: an older snapshot, or a segment? */
	return (cs_snapshot_name_lsn(linitial(names), &oldest) &&
			oldest < h->snapshot_lsn) || h->first_segment > first;
}

/*
 * The bytes of generation's files that lie below horizon to but not below
 * horizon from (from NULL: none below it yet): what a pin kept that the
 * window alone would let go.
 */
static int64
bytes_between(const char *directory, uint64 generation,
			  const CsHorizon *from, const CsHorizon *to)
{
	List	   *segments = cs_list_all_segments(directory, generation);
	List	   *names = cs_list_snapshots(directory, generation);
	char	   *snap_dir = cs_snapshots_dir_path(directory, generation);
	ListCell   *lc;
	int64		bytes = 0;
	int64		from_segment = from ? from->first_segment : 0;
	XLogRecPtr	from_lsn = from ? from->snapshot_lsn : InvalidXLogRecPtr;

	foreach(lc, segments)
	{
		CsSegmentFile *sf = lfirst(lc);

		if (sf->index >= from_segment && sf->index < to->first_segment)
			bytes += sf->size;
	}
	foreach(lc, names)
	{
		XLogRecPtr	lsn;
		CsStorageInfo info;

		if (cs_snapshot_name_lsn(lfirst(lc), &lsn) && lsn >= from_lsn &&
			lsn < to->snapshot_lsn &&
			cs_storage_stat(cs_file_in(snap_dir, (char *) lfirst(lc)), true,
							&info) == 0 &&
			info.type != CS_STORAGE_MISSING)
			bytes += info.size;
	}
	return bytes;
}

/* Queue what lies below generation's horizon h, oldest first. */
static void
enqueue_below_horizon(const char *directory, uint64 generation,
					  const CsHorizon *h)
{
	List	   *segments = cs_list_all_segments(directory, generation);
	char	   *wal_dir = cs_wal_dir_path(directory, generation);
	char	   *snap_dir = cs_snapshots_dir_path(directory, generation);
	List	   *entries;
	int			err;
	List	   *names = NIL;
	ListCell   *lc;

	foreach(lc, segments)
	{
		CsSegmentFile *sf = lfirst(lc);

		if (sf->index < h->first_segment)
		{
			/* a raw twin of a compressed segment goes too */
			if (sf->compressed)
				enqueue(ITEM_FILE, cs_segment_path(wal_dir, sf->index, false),
						wal_dir);
			enqueue(ITEM_FILE, sf->path, wal_dir);
		}
	}
	entries = cs_storage_list_entries(snap_dir, &err);
	foreach(lc, entries)
	{
		CsStorageEntry *e = lfirst(lc);
		XLogRecPtr	lsn;

		if (cs_snapshot_name_lsn(e->name, &lsn) && lsn < h->snapshot_lsn)
			names = lappend(names, e->name);
	}
	list_sort(names, cmp_names);
	foreach(lc, names)
		enqueue(ITEM_FILE, cs_file_in(snap_dir, (char *) lfirst(lc)),
				snap_dir);
}

/*
 * The generation being written: move its horizon forward (durably, before
 * anything is deleted), then queue what lies below it, including what a
 * crashed run left there.
 */
static void
plan_current_generation(const char *directory, uint64 generation,
						TimestampTz window_start)
{
	XLogRecPtr	pin = InvalidXLogRecPtr;
	pid_t		pid = 0;
	CsHorizon	old;
	CsHorizon	h;
	CsHorizon	unpinned;
	bool		has_old = cs_read_horizon(directory, generation, &old);
	bool		pinned = cs_pinned(generation, &pin, &pid);
	bool		moves;

	memset(&h, 0, sizeof(h));
	memset(&unpinned, 0, sizeof(unpinned));
	/* a whole-generation pin (a reader listing files) keeps the horizon */
	moves = !(pinned && pin == InvalidXLogRecPtr) &&
		choose_horizon(directory, generation, window_start, pin, &h) &&
		(!has_old || h.first_segment > old.first_segment ||
		 h.snapshot_lsn > old.snapshot_lsn);
	if (moves)
	{
		if (has_old)
		{
			h.first_segment = Max(h.first_segment, old.first_segment);
			if (h.snapshot_lsn < old.snapshot_lsn)
			{
				h.snapshot_lsn = old.snapshot_lsn;
				h.snapshot_time = old.snapshot_time;
			}
		}
		cs_write_horizon(directory, generation, &h);
		run.has_horizon = true;
		run.generation = generation;
		run.horizon = h;
		old = h;
		has_old = true;
	}
	/* what the pin kept: the horizon the window alone would allow */
	if (pinned &&
		choose_horizon(directory, generation, window_start,
					   InvalidXLogRecPtr, &unpinned) &&
		(!has_old || unpinned.first_segment > old.first_segment ||
		 unpinned.snapshot_lsn > old.snapshot_lsn))
		note_hold(pid, pin, bytes_between(directory, generation,
										  has_old ? &old : NULL, &unpinned));
	if (has_old)
		enqueue_below_horizon(directory, generation, &old);
}

/*
 * Plan a run: decide, make the decision durable, queue the deletions.
 * gens is the listing of generations, current the newest of them (the one
 * the archiver writes: it only ever continues the newest).
 */
static void
plan(const char *directory, List *gens, uint64 current, TimestampTz now)
{
	TimestampTz window_start = now - (int64) cs_retention_s * USECS_PER_SEC;
	ListCell   *lc;

	cs_pins_lock();
	foreach(lc, gens)
	{
		uint64		g = *(uint64 *) lfirst(lc);

		if (g < current)
			plan_old_generation(directory, g, window_start);
		else if (g == current)
			plan_current_generation(directory, g, window_start);
	}
	cs_pins_unlock();
}

static void
mark_dirty(const char *dir)
{
	ListCell   *lc;
	MemoryContext old;

	foreach(lc, run.dirty_dirs)
		if (strcmp(lfirst(lc), dir) == 0)
			return;
	old = MemoryContextSwitchTo(retention_cxt);
	run.dirty_dirs = lappend(run.dirty_dirs, pstrdup(dir));
	MemoryContextSwitchTo(old);
}

/* Delete one queued item; its directory is fsynced after the slice. */
static void
delete_item(RetentionItem *item)
{
	CsStorageInfo info;

	if (item->kind == ITEM_TREE)
	{
		if (!cs_storage_try_remove_tree(item->path) && errno != ENOENT)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not remove directory \"%s\": %m", item->path)));
	}
	else if (item->kind == ITEM_DIR)
	{
		if (cs_storage_remove_dir(item->path) != 0 && errno != ENOENT)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not remove directory \"%s\": %m", item->path)));
		return;
	}
	else if (cs_storage_stat(item->path, false, &info) == 0 &&
			 info.type != CS_STORAGE_MISSING)
	{
		if (cs_storage_unlink(item->path) != 0 && errno != ENOENT)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not remove file \"%s\": %m", item->path)));
		run.files++;
		run.freed_bytes += info.size;
	}
	mark_dirty(item->parent);
}

/* The run is done: say what it freed, once, and show it in status(). */
static void
finish_run(TimestampTz now)
{
	if (run.files > 0)
	{
		if (run.has_horizon)
			ereport(LOG,
					(errmsg("retention removed %d files (%lld bytes) from the changestream archive",
							run.files, (long long) run.freed_bytes),
					 errdetail("Generation %016llx is restorable from " CS_LSN_FMT " (%s); %d older generations were removed whole.",
							   (unsigned long long) run.generation,
							   LSN_FORMAT_ARGS(run.horizon.snapshot_lsn),
							   timestamptz_to_str(run.horizon.snapshot_time),
							   run.generations)));
		else
			ereport(LOG,
					(errmsg("retention removed %d files (%lld bytes) from the changestream archive",
							run.files, (long long) run.freed_bytes),
					 errdetail("%d older generations were removed whole.",
							   run.generations)));
	}
	cs_retention_status_set(now, run.freed_bytes);
	MemoryContextReset(retention_cxt);
	memset(&run, 0, sizeof(run));
}

/* Delete a slice of the queue, then fsync the directories touched. */
static void
delete_slice(TimestampTz now)
{
	ListCell   *lc;

	for (int i = 0; i < RETENTION_SLICE_FILES && run.queue != NIL; i++)
	{
		delete_item(linitial(run.queue));
		run.queue = list_delete_first(run.queue);
	}
	foreach(lc, run.dirty_dirs)
	{
		CsStorageInfo info;

		if (cs_storage_stat(lfirst(lc), true, &info) == 0 &&
			info.type != CS_STORAGE_MISSING)
			cs_fsync_path(lfirst(lc), true);
	}
	run.dirty_dirs = NIL;
	if (run.queue == NIL)
		finish_run(now);
}

/* With retention and no scheduled snapshots, say once what that means. */
static void
warn_without_snapshots(void)
{
	if (cs_snapshot_interval_s > 0)
	{
		warned = false;
		return;
	}
	if (warned)
		return;
	warned = true;
	ereport(WARNING,
			(errmsg("changestream.retention is set but changestream.snapshot_interval is not"),
			 errdetail("Without scheduled snapshots, the changestream segments since a generation's only snapshot can never be removed."),
			 errhint("Set changestream.snapshot_interval to a fraction of changestream.retention.")));
}

/* Is a run due: after a snapshot finished, and at least every minute? */
static bool
run_due(TimestampTz now)
{
	bool		running;
	TimestampTz snap = cs_status_last_snapshot(&running);
	long		gap = Min(RETENTION_MAX_GAP_MS,
						  Max((long) cs_retention_s * 1000 / 4, 1000));

	if (!running && snap != seen_snapshot_at)
	{
		seen_snapshot_at = snap;
		return true;
	}
	/* a run a reader held back: again soon, as the reader may be done */
	if (held_back)
		gap = Min(gap, RETENTION_RETRY_MS);
	return TimestampDifferenceExceeds(last_run_at, now, gap);
}

/*
 * cs_retention_step
 *	  One step of retention in the maintenance worker, between its slices: plan
 *	  a run when one is due (after each snapshot, and at least every minute, or
 *	  every quarter of changestream.retention when that is shorter) and
 *	  may_plan is true (the maintenance worker has no segment half compressed),
 *	  or delete the next slice of a run in progress.  directory is the archive,
 *	  now the loop's time.  Returns true when more of a run is left, so that
 *	  the caller does not sleep before the next step. Allocates its listings in
 *	  CurrentMemoryContext (the caller resets it).  Errors: file access errors
 *	  (class 58) and XX001 for damage met while planning; the caller catches
 *	  them and passes them to cs_retention_failed().  What a run has made
 *	  durable before an error stays valid, and the next run continues it.
 */
bool
cs_retention_step(const char *directory, TimestampTz now, bool may_plan)
{
	List	   *gens;

	if (retention_cxt == NULL)
		cs_retention_reset();
	if (run.queue != NIL)
	{
		delete_slice(now);
		return run.queue != NIL;
	}
	if (cs_retention_s <= 0)
	{
		warned = false;
		if (held_back)
			cs_retention_held_set(now, 0, 0);
		held_back = false;
		return false;
	}
	warn_without_snapshots();
	if (!may_plan || !run_due(now))
		return false;
	last_run_at = now;
	gens = cs_list_generations(directory);
	if (gens != NIL)
		plan(directory, gens, *(uint64 *) llast(gens), now);
	held_back = (run.held_pid != 0);
	cs_retention_held_set(now, run.held_pid, run.held_bytes);
	if (held_back)
		elog(DEBUG1, "retention held back by the reader of backend %d: %lld bytes kept",
			 (int) run.held_pid, (long long) run.held_bytes);
	last_error[0] = '\0';		/* a run went through: log the next error */
	if (run.queue == NIL)
	{
		cs_retention_status_set(now, 0);
		MemoryContextReset(retention_cxt);
		memset(&run, 0, sizeof(run));
		return false;
	}
	return true;
}

/*
 * cs_retention_retry_ms
 *	  How long (ms) the maintenance worker may sleep before retention wants to
 *	  run again: RETENTION_RETRY_MS after a run a reader held back, so that
 *	  retention goes on soon after the reader lets go; -1 otherwise (the
 *	  maintenance worker's own rescan interval is then short enough).
 */
long
cs_retention_retry_ms(void)
{
	return (held_back && cs_retention_s > 0) ? RETENTION_RETRY_MS : -1;
}

/*
 * cs_retention_failed
 *	  A run failed (a damaged file retention reads, a file it cannot
 *	  remove): retention must never stop the archiving or the compression,
 *	  so the run is dropped and logged as a WARNING (once per distinct
 *	  message), and the next run starts over.  What the run made durable
 *	  stays valid: readers honour the horizon, and the next run removes
 *	  what lies below it.  The caller has released the files and locks the
 *	  error left (as the maintenance worker's error path does).
 */
void
cs_retention_failed(ErrorData *edata)
{
	if (strcmp(edata->message, last_error) != 0)
	{
		ereport(WARNING,
				(errcode(edata->sqlerrcode),
				 errmsg("retention skipped a run: %s", edata->message),
				 edata->detail ? errdetail_internal("%s", edata->detail) : 0,
				 errhint("Retention tries again at its next run; archiving goes on.")));
		strlcpy(last_error, edata->message, sizeof(last_error));
	}
	if (retention_cxt != NULL)
		MemoryContextReset(retention_cxt);
	memset(&run, 0, sizeof(run));
}
