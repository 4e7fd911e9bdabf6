/*-------------------------------------------------------------------------
 *
 * segment_spare.c
 *	  The spare segment: a zero-filled, fsynced file of segment_size bytes
 *	  that the maintenance worker prepares ahead of time and the archiver
 *	  renames into place as its next segment (changestream.
 *	  preallocate_segments).
 *
 *	  Why: the archiver fdatasyncs its active segment at every group
 *	  commit.  When each fdatasync follows an append, the file's size and
 *	  block map change too, and the kernel writes and waits for that
 *	  metadata as well (measured on ext4: twice the CPU and twice the time
 *	  of an fdatasync that overwrites blocks already on disk).  PostgreSQL
 *	  zero-fills its own WAL segments before use for the same reason
 *	  (XLogFileInitInternal() in src/backend/access/transam/xlog.c).  The
 *	  archiver overwrites the zeros and cuts the file back to its data at
 *	  the seal, so only the newest raw segment of a generation ever ends in
 *	  zeros (docs/FORMAT.md section 11.3, "preallocated tail").
 *
 *	  Files, in changestream.directory:
 *	    spare.wal.part   being zero-filled by the maintenance worker
 *	    spare.wal        complete: every byte zero, fsynced, renamed, the
 *	                     directory fsynced
 *	  Only the maintenance worker writes them (it holds
 *	  changestream.compressor.lock) and only the archiver (changestream.lock)
 *	  takes spare.wal, with one rename(2).  A spare that is not a regular file
 *	  with a single link is never written through: the maintenance worker
 *	  removes it and makes a new one.
 *
 *	  The zero-fill runs in slices, and only while no sealed segment waits
 *	  for compression and the archiver is not catching up with a backlog
 *	  (maintenance.c), so it never delays compression and the archiver
 *	  never waits for it: without a spare ready, the archiver creates its
 *	  next segment empty and appends to it, as before.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "archive/archive_dir.h"
#include "archive/archive_layout.h"
#include "archive/segment_spare.h"
#include "base/guc.h"

#define ZERO_CHUNK		(64 * 1024)

static const char zeros[ZERO_CHUNK];

/* the spare being zero-filled (maintenance worker side) */
static int	part_fd = -1;
static char part_path[MAXPGPATH];
static int64 part_written;
static int64 part_target;

/* a directory holds a spare file's name: warned once (see name_blocked()) */
static bool blocked_warned = false;

/*
 * cs_spare_size
 *	  Size of a spare, in bytes: changestream.segment_size rounded up to a multiple
 *	  of BLCKSZ.
 */
static int64
cs_spare_size(void)
{
	int64		bytes = (int64) cs_segment_size_kb * 1024;

	return ((bytes + BLCKSZ - 1) / BLCKSZ) * BLCKSZ;
}

/*
 * Look at path (not through a link): 1 a usable spare, 0 none, -1
 * something that must go (not a regular file with one link), -2 a spare
 * of another size (made before a change of changestream.segment_size).
 */
static int
judge_spare(const char *path)
{
	CsStorageInfo info;

	if (cs_storage_stat(path, false, &info) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", path)));
	if (info.type == CS_STORAGE_MISSING)
		return 0;
	if (info.type != CS_STORAGE_FILE || info.nlinks != 1)
		return -1;
	if (info.size != cs_spare_size())
		return -2;
	return 1;
}

/*
 * Is path a directory?  The maintenance worker never removes a directory from
 * the archive (and unlink(2) could not): a spare file's name held by one means
 * no preallocation (the archiver creates its segments empty), with one WARNING
 * per directory, instead of an error every few seconds that would delay
 * compression.  Raises when path cannot be examined (other than missing).
 */
static bool
name_blocked(const char *path)
{
	CsStorageInfo info;

	if (cs_storage_stat(path, false, &info) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", path)));
	if (info.type != CS_STORAGE_DIR)
		return false;
	if (!blocked_warned)
		ereport(WARNING,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is a directory: changestream segments are not preallocated", path),
				 errdetail("The maintenance worker zero-fills its spare segment under that name; the archiver creates each segment empty instead."),
				 errhint("Remove the directory, or turn changestream.preallocate_segments off.")));
	blocked_warned = true;
	return true;
}

/* Start zero-filling a new spare.wal.part. */
static void
begin_part(const char *directory)
{
	strlcpy(part_path, cs_spare_part_path(directory), sizeof(part_path));
	/* a leftover part (or anything under its name) is not trusted */
	(void) cs_storage_unlink(part_path);
	part_fd = cs_storage_open(part_path, CS_OPEN_WRITE | CS_OPEN_EXCL);
	if (part_fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", part_path),
				 errhint("The server's operating system user must be able to write changestream.directory.")));
	part_written = 0;
	part_target = cs_spare_size();
}

/* Write up to budget zero bytes to the part; true when it is complete. */
static bool
fill_part(int64 budget)
{
	int64		stop = Min(part_target, part_written + budget);

	while (part_written < stop)
	{
		ssize_t		n = write(part_fd, zeros, Min(ZERO_CHUNK, stop - part_written));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
		{
			if (n == 0)
				errno = ENOSPC;
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not write to file \"%s\": %m", part_path),
					 errhint("Check free space in changestream.directory, or turn changestream.preallocate_segments off.")));
		}
		part_written += n;
	}
	return part_written >= part_target;
}

/* fsync the complete part and rename it to spare.wal (durably). */
static void
finish_part(const char *directory)
{
	char		spare[MAXPGPATH];

	cs_fsync_fd(part_fd, part_path);
	cs_storage_close(part_fd);
	part_fd = -1;
	strlcpy(spare, cs_spare_path(directory), sizeof(spare));
	if (cs_storage_rename(part_path, spare) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not rename file \"%s\" to \"%s\": %m",
						part_path, spare)));
	part_path[0] = '\0';
	cs_fsync_path(directory, true);
	ereport(DEBUG1,
			(errmsg_internal("prepared spare changestream segment \"%s\" (%lld bytes)",
							 spare, (long long) part_target)));
}

/*
 * cs_spare_step
 *	  One step of the maintenance worker's spare duty for the archive directory
 *	  (an absolute path): with changestream.preallocate_segments on and no
 *	  usable spare.wal, write at most budget (bytes) of zeros to
 *	  spare.wal.part, and rename it to spare.wal once it holds
 *	  cs_spare_size() bytes and is fsynced.  With the setting off, remove
 *	  any spare files.  A spare.wal that is not a regular file with one
 *	  link is removed (LOG) and made again, and so is one whose size is
 *	  not cs_spare_size() (segment_size changed).  A directory under either
 *	  name is left alone (one WARNING, 42809): no spare is made while it is
 *	  there.  Returns true while work remains.  Errors: file access
 *	  errors (class 58; 53100 disk full); after one, cs_spare_abort()
 *	  cleans up.
 */
bool
cs_spare_step(const char *directory, int64 budget)
{
	char		spare[MAXPGPATH];
	int			verdict;

	strlcpy(spare, cs_spare_path(directory), sizeof(spare));
	if (!cs_preallocate_segments)
	{
		char		part[MAXPGPATH];

		cs_spare_abort();
		strlcpy(part, cs_spare_part_path(directory), sizeof(part));
		/* a crashed maintenance worker's */
		(void) cs_durable_unlink(part, directory);
		(void) cs_durable_unlink(spare, directory);
		return false;
	}
	if (part_fd < 0)
	{
		char		part[MAXPGPATH];

		strlcpy(part, cs_spare_part_path(directory), sizeof(part));
		if (name_blocked(spare) || name_blocked(part))
			return false;
		blocked_warned = false;
		verdict = judge_spare(spare);
		if (verdict == 1)
			return false;
		if (verdict == -2)
			(void) cs_durable_unlink(spare, directory);
		else if (verdict < 0)
		{
			ereport(LOG,
					(errmsg("removing \"%s\": it is not a regular file with a single link",
							spare),
					 errdetail("The archiver writes into the spare segment, so it must be a file of changestream's own.")));
			(void) cs_durable_unlink(spare, directory);
		}
		begin_part(directory);
	}
	if (!fill_part(budget))
		return true;
	finish_part(directory);
	return false;
}

/*
 * cs_spare_abort
 *	  Forget the spare being filled and remove its part file; for the
 *	  maintenance worker's error path and for a change of directory.  The
 *	  descriptor itself is a transient file, closed by AtEOXact_Files() on
 *	  the error path, or here.  Never raises.
 */
void
cs_spare_abort(void)
{
	if (part_fd >= 0)
	{
		cs_storage_close(part_fd);
		part_fd = -1;
	}
	if (part_path[0] != '\0')
		(void) cs_storage_unlink(part_path);
	part_path[0] = '\0';
}

/*
 * cs_spare_discard
 *	  When changestream.directory changes away from directory (an absolute
 *	  path): remove the spare files the maintenance worker made there, which no
 *	  archiver will take now.  A removal the archiver races (it renamed
 *	  spare.wal into place first) finds nothing.  Not fsynced: a spare
 *	  that comes back after a crash is still a valid one.  Never raises.
 */
void
cs_spare_discard(const char *directory)
{
	char		path[MAXPGPATH];

	cs_spare_abort();
	blocked_warned = false;
	strlcpy(path, cs_spare_part_path(directory), sizeof(path));
	(void) cs_storage_unlink(path);
	strlcpy(path, cs_spare_path(directory), sizeof(path));
	if (cs_storage_unlink(path) == 0)
		ereport(DEBUG1,
				(errmsg_internal("removed spare changestream segment \"%s\" of a former changestream.directory",
								 path)));
}

/*
 * cs_spare_forget
 *	  After AtEOXact_Files() closed the part's descriptor (the maintenance
 *	  worker's error path): remove the part without closing anything.  Never
 *	  raises.
 */
void
cs_spare_forget(void)
{
	part_fd = -1;
	if (part_path[0] != '\0')
		(void) cs_storage_unlink(part_path);
	part_path[0] = '\0';
}

/*
 * cs_spare_take
 *	  For the archiver, at segment creation: with changestream.
 *	  preallocate_segments on, rename directory's spare.wal to dest (the
 *	  new segment's .tmp path, in the same file system) and return a
 *	  descriptor open for writing on it, after checking through that
 *	  descriptor that it is a regular file with one link and of
 *	  cs_spare_size() bytes; the rename's removal from directory is fsynced.
 *	  Returns -1, leaving no dest behind, when there is no spare, it is not
 *	  one of changestream's own (a link: it is never written through), or
 *	  the rename or open fails (logged at DEBUG1): the caller then creates
 *	  the segment empty.  The caller owns the descriptor
 *	  (cs_storage_open_stream(), as the active segment's always is).
 *	  Errors: file access SQLSTATEs if the directory fsync fails.
 */
int
cs_spare_take(const char *directory, const char *dest)
{
	char		spare[MAXPGPATH];
	CsStorageInfo info;
	int			fd;

	if (!cs_preallocate_segments)
		return -1;
	strlcpy(spare, cs_spare_path(directory), sizeof(spare));
	/* only a regular file is moved (the maintenance worker sees to the rest) */
	if (cs_storage_stat(spare, false, &info) != 0 ||
		info.type != CS_STORAGE_FILE)
		return -1;
	if (cs_storage_rename(spare, dest) != 0)
	{
		if (errno != ENOENT)
			ereport(DEBUG1,
					(errmsg_internal("could not rename spare segment \"%s\" to \"%s\": %m",
									 spare, dest)));
		return -1;
	}
	cs_fsync_path(directory, true);
	fd = cs_storage_open_stream(dest, CS_OPEN_WRITE | CS_OPEN_NOFOLLOW);
	if (fd >= 0 &&
		(cs_storage_fstat(fd, &info) != 0 || info.type != CS_STORAGE_FILE ||
		 info.nlinks != 1 || info.size != cs_spare_size()))
	{
		close(fd);
		fd = -1;
	}
	if (fd < 0)
	{
		ereport(DEBUG1,
				(errmsg_internal("spare segment \"%s\" is not usable: removed",
								 spare)));
		(void) cs_storage_unlink(dest);
	}
	return fd;
}
