/*-------------------------------------------------------------------------
 *
 * compress.c
 *	  gzip compression of sealed WAL segments, in slices, so that the
 *	  archiver's receive loop never stalls on it: cs_compress_step()
 *	  compresses at most a given number of input bytes and returns.
 *
 *	  Each segment is written as <index>.wal.gz.tmp, fsynced, renamed to
 *	  <index>.wal.gz, the directory fsynced, then <index>.wal removed and
 *	  the directory fsynced again (docs/DESIGN.md, "Archive layout").  A crash at
 *	  any point leaves either the raw segment or a complete .gz (plus,
 *	  perhaps, a raw copy or a .tmp that the next start cleans up).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "nodes/pg_list.h"
#include "utils/memutils.h"

#include "archive_dir.h"
#include "archive_layout.h"
#include "compress.h"
#include "guc.h"

typedef struct CompressJob
{
	char	   *wal_dir;
	int64		index;
} CompressJob;

static MemoryContext compress_cxt = NULL;
static List *queue = NIL;

/* the job in progress */
static CompressJob *active = NULL;
static int	in_fd = -1;
static int	out_fd = -1;
static gzFile out_gz = NULL;
static char raw_path[MAXPGPATH];
static char gz_path[MAXPGPATH];
static char tmp_path[MAXPGPATH];

static void
close_active(bool remove_tmp)
{
	if (out_gz != NULL)
		gzclose(out_gz);
	out_gz = NULL;
	if (out_fd >= 0)
		close(out_fd);
	out_fd = -1;
	if (in_fd >= 0)
		close(in_fd);
	in_fd = -1;
	if (remove_tmp && active != NULL)
		unlink(tmp_path);
	active = NULL;
}

/*
 * cs_compress_reset
 *	  Abandon the job in progress (its .tmp is removed) and empty the queue.
 *	  Used at session start and after an error.
 */
void
cs_compress_reset(void)
{
	close_active(true);
	queue = NIL;
	if (compress_cxt == NULL)
		compress_cxt = AllocSetContextCreate(TopMemoryContext,
											 "changestream compression",
											 ALLOCSET_SMALL_SIZES);
	else
		MemoryContextReset(compress_cxt);
}

/*
 * cs_compress_enqueue
 *	  Queue sealed segment <wal_dir>/<index>.wal for compression.
 */
void
cs_compress_enqueue(const char *wal_dir, int64 index)
{
	MemoryContext old;
	CompressJob *job;

	if (compress_cxt == NULL)
		cs_compress_reset();
	old = MemoryContextSwitchTo(compress_cxt);
	job = palloc(sizeof(CompressJob));
	job->wal_dir = pstrdup(wal_dir);
	job->index = index;
	queue = lappend(queue, job);
	MemoryContextSwitchTo(old);
}

/* cs_compress_backlog: sealed segments waiting or in progress (returns int) */
int
cs_compress_backlog(void)
{
	return list_length(queue) + (active != NULL ? 1 : 0);
}

/* cs_compress_pending: is there work queued or in progress? (returns bool) */
bool
cs_compress_pending(void)
{
	return active != NULL || queue != NIL;
}

static void
start_next(void)
{
	char	   *name;

	active = linitial(queue);
	queue = list_delete_first(queue);

	name = cs_segment_file_name(active->index, false);
	snprintf(raw_path, MAXPGPATH, "%s/%s", active->wal_dir, name);
	snprintf(gz_path, MAXPGPATH, "%s.gz", raw_path);
	snprintf(tmp_path, MAXPGPATH, "%s.gz.tmp", raw_path);
	pfree(name);

	in_fd = cs_open_regular_file(raw_path, true);
	if (in_fd < 0)
	{
		struct stat st;

		if (stat(gz_path, &st) == 0)
		{
			active = NULL;		/* already compressed */
			return;
		}
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", raw_path)));
	}
	out_fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY,
				  S_IRUSR | S_IWUSR);
	if (out_fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", tmp_path)));
	out_gz = gzdopen(dup(out_fd), "wb");
	if (out_gz == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not start gzip stream for \"%s\"", tmp_path)));
	gzbuffer(out_gz, 256 * 1024);
	if (gzsetparams(out_gz, cs_compression_level, Z_DEFAULT_STRATEGY) != Z_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not set gzip level %d", cs_compression_level)));
}

static void
finish_active(void)
{
	int			rc = gzclose(out_gz);

	out_gz = NULL;
	if (rc != Z_OK)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\" (zlib error %d): %m",
						tmp_path, rc)));
	close(out_fd);
	out_fd = -1;
	close(in_fd);
	in_fd = -1;
	cs_durable_rename(tmp_path, gz_path, active->wal_dir);
	if (unlink(raw_path) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", raw_path)));
	cs_fsync_path(active->wal_dir, true);
	active = NULL;
}

/*
 * cs_compress_step
 *	  Compress up to budget_bytes of input (bytes) of the queued segments,
 *	  finishing a segment (fsync, rename, remove raw) when its input ends.
 *	  Raises errcode_for_file_access() codes on I/O errors; the caller's error path calls
 *	  cs_compress_reset().
 *	  Returns bool (true if work remains).
 */
bool
cs_compress_step(long budget_bytes)
{
	static char buf[128 * 1024];

	while (budget_bytes > 0)
	{
		ssize_t		n;

		if (active == NULL)
		{
			if (queue == NIL)
				return false;
			start_next();
			if (active == NULL)
				continue;
		}
		n = read(in_fd, buf, Min((long) sizeof(buf), budget_bytes));
		if (n < 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read file \"%s\": %m", raw_path)));
		if (n == 0)
		{
			finish_active();
			continue;
		}
		if (gzwrite(out_gz, buf, (unsigned) n) != (int) n)
		{
			int			errnum;

			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not write file \"%s\": %s", tmp_path,
							gzerror(out_gz, &errnum))));
		}
		budget_bytes -= n;
	}
	return cs_compress_pending();
}

