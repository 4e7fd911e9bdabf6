/*-------------------------------------------------------------------------
 *
 * compress.c
 *	  gzip compression of one sealed changestream segment, in slices, for
 *	  the maintenance worker (maintenance.c): cs_compress_begin() opens the
 *	  raw segment and its .gz.tmp, cs_compress_step() compresses at most a
 *	  given number of input bytes, and when the input ends it writes the
 *	  gzip trailer, fsyncs the .tmp, renames it to <index>.wal.gz, fsyncs
 *	  the directory, removes <index>.wal and fsyncs the directory again
 *	  (docs/DESIGN.md, "Archive layout").  A crash at any point leaves
 *	  either the raw segment or a complete .gz (plus, perhaps, a raw twin
 *	  or a .tmp, which the maintenance worker removes).
 *
 *	  zlib's deflate() is driven directly (gzip wrapper, windowBits 15 + 16)
 *	  and its output written with write(), so an I/O error is reported with
 *	  errno in core's wording, never with gzerror()'s "<fd:N>:" prefix.
 *
 * Sources: zlib.h (deflateInit2(), deflate(), deflateEnd()); the gzip
 * format of RFC 1952 as zlib writes it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>
#include <zlib.h>

#include "archive/archive_dir.h"
#include "archive/archive_layout.h"
#include "archive/compress.h"
#include "base/guc.h"

#define OUT_BUF_SIZE	(128 * 1024)

struct CsCompressJob
{
	char		wal_dir[MAXPGPATH];
	char		raw_path[MAXPGPATH];
	char		gz_path[MAXPGPATH];
	char		tmp_path[MAXPGPATH];
	int			in_fd;			/* cs_open_regular_file(): closed here */
	int			out_fd;			/* cs_storage_open(): a transient file */
	z_stream	zs;
	bool		zs_live;		/* deflateInit2() succeeded */
	int64		in_bytes;		/* read so far */
	int64		out_bytes;		/* written so far */
	char	   *in_buf;
	char	   *out_buf;
};

/* the one job in progress, for cs_compress_abort() */
static CsCompressJob *current = NULL;

/* write(2) all of buf to the job's .tmp; errors in core's wording */
static void
write_out(CsCompressJob *job, const char *buf, size_t len)
{
	while (len > 0)
	{
		ssize_t		n;

		errno = 0;
		n = write(job->out_fd, buf, len);
		if (n <= 0)
		{
			if (n < 0 && errno == EINTR)
				continue;
			if (errno == 0)
				errno = ENOSPC; /* a short write without an error: no space */
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not write to file \"%s\": %m", job->tmp_path),
					 errdetail("Sealed changestream segment \"%s\" stays uncompressed until this succeeds.",
							   job->raw_path),
					 errhint("Check free space in changestream.directory; streaming is not affected.")));
		}
		buf += n;
		len -= n;
		job->out_bytes += n;
	}
}

/* Run deflate() with the given flush mode until its input is consumed. */
static void
deflate_all(CsCompressJob *job, int flush)
{
	int			rc;

	do
	{
		job->zs.next_out = (Bytef *) job->out_buf;
		job->zs.avail_out = OUT_BUF_SIZE;
		rc = deflate(&job->zs, flush);
		if (rc == Z_STREAM_ERROR)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not compress file \"%s\": %s", job->raw_path,
							job->zs.msg ? job->zs.msg : "zlib stream error")));
		write_out(job, job->out_buf, OUT_BUF_SIZE - job->zs.avail_out);
	} while (job->zs.avail_out == 0 ||
			 (flush == Z_FINISH && rc != Z_STREAM_END));
}

/*
 * cs_compress_begin
 *	  Start compressing sealed raw segment <wal_dir>/<index>.wal at zlib
 *	  level "level" (0..9) into <index>.wal.gz.tmp (a leftover .tmp is
 *	  replaced).  Returns the job (allocated in CurrentMemoryContext), or
 *	  NULL when the raw segment no longer exists (compressed meanwhile).
 *	  Only one job may be in progress per process.
 *	  Errors: file access SQLSTATEs (class 58 or 42) when a file cannot be
 *	  opened, created or replaced, XX001 when the segment is not a regular
 *	  file, 53200 (out_of_memory) when zlib cannot start.
 */
CsCompressJob *
cs_compress_begin(const char *wal_dir, int64 index, int level)
{
	CsCompressJob *job = palloc0(sizeof(CsCompressJob));
	char	   *name = cs_segment_file_name(index, false);
	int			fd;

	strlcpy(job->wal_dir, wal_dir, MAXPGPATH);
	strlcpy(job->raw_path, cs_file_in(wal_dir, name), MAXPGPATH);
	strlcpy(job->gz_path, cs_compressed_path(job->raw_path), MAXPGPATH);
	strlcpy(job->tmp_path, cs_compressed_tmp_path(job->raw_path), MAXPGPATH);
	pfree(name);
	job->in_fd = job->out_fd = -1;

	fd = cs_open_regular_file(job->raw_path, true);
	if (fd < 0)
	{
		pfree(job);
		return NULL;
	}
	job->in_fd = fd;
	current = job;

	if (cs_storage_unlink(job->tmp_path) != 0 && errno != ENOENT)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", job->tmp_path),
				 errdetail("Sealed changestream segment \"%s\" stays uncompressed until this succeeds.",
						   job->raw_path)));
	job->out_fd = cs_storage_open(job->tmp_path,
								  CS_OPEN_WRITE | CS_OPEN_EXCL);
	if (job->out_fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", job->tmp_path),
				 errdetail("Sealed changestream segment \"%s\" stays uncompressed until this succeeds.",
						   job->raw_path)));
	job->in_buf = palloc(CS_COMPRESS_SLICE);
	job->out_buf = palloc(OUT_BUF_SIZE);
	if (deflateInit2(&job->zs, level, Z_DEFLATED, 15 + 16, 8,
					 Z_DEFAULT_STRATEGY) != Z_OK)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory"),
				 errdetail("zlib could not start compressing \"%s\".", job->raw_path)));
	job->zs_live = true;
	return job;
}

/* The input ended: trailer, fsync, rename into place, remove the raw. */
static void
finish(CsCompressJob *job)
{
	deflate_all(job, Z_FINISH);
	deflateEnd(&job->zs);
	job->zs_live = false;
	cs_fsync_fd(job->out_fd, job->tmp_path);
	cs_storage_close(job->out_fd);
	job->out_fd = -1;
	close(job->in_fd);
	job->in_fd = -1;
	cs_durable_rename(job->tmp_path, job->gz_path, job->wal_dir);
	if (cs_storage_unlink(job->raw_path) != 0 && errno != ENOENT)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", job->raw_path)));
	cs_fsync_path(job->wal_dir, true);
	current = NULL;
}

/*
 * cs_compress_step
 *	  Compress up to budget_bytes (bytes, at most CS_COMPRESS_SLICE) of the
 *	  job's input; when the input ends, finish the job (see the file
 *	  header) and free it.  Returns true while input remains, false once
 *	  the segment is compressed (the job is then gone).
 *	  Errors: file access SQLSTATEs on read, write, fsync, rename or
 *	  removal failures, XX000 on a zlib stream error; the caller's error
 *	  path calls cs_compress_abort().
 */
bool
cs_compress_step(CsCompressJob *job, long budget_bytes)
{
	ssize_t		n;

	n = read(job->in_fd, job->in_buf, Min(budget_bytes, CS_COMPRESS_SLICE));
	if (n < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not read file \"%s\": %m", job->raw_path)));
	if (n == 0)
	{
		finish(job);
		pfree(job->in_buf);
		pfree(job->out_buf);
		pfree(job);
		return false;
	}
	job->in_bytes += n;
	job->zs.next_in = (Bytef *) job->in_buf;
	job->zs.avail_in = (uInt) n;
	deflate_all(job, Z_NO_FLUSH);
	return true;
}

/*
 * cs_compress_abort
 *	  The error path: release the job in progress, if any (zlib's state,
 *	  its files, its .tmp when that is a file).  Its memory belongs to the
 *	  caller's context.  Never raises.
 */
void
cs_compress_abort(void)
{
	CsCompressJob *job = current;
	CsStorageInfo info;

	current = NULL;
	if (job == NULL)
		return;
	if (job->zs_live)
		deflateEnd(&job->zs);
	job->zs_live = false;
	if (job->out_fd >= 0)
		cs_storage_close(job->out_fd);
	if (job->in_fd >= 0)
		close(job->in_fd);
	job->in_fd = job->out_fd = -1;
	if (cs_storage_stat(job->tmp_path, false, &info) == 0 &&
		info.type == CS_STORAGE_FILE)
		(void) cs_storage_unlink(job->tmp_path);
}
