/*-------------------------------------------------------------------------
 *
 * storage.c
 *	  The storage interface (storage.h) through the driver of each path:
 *	  the local directory (storage_posix.c), or the replica's bucket
 *	  (storage_s3.c, read-only) for a path "s3://<bucket>/<key>".  Upper code
 *	  (the layout, the writer, the readers, retention) calls these
 *	  functions, never open(2), unlink(2) or rename(2) on archive files.
 *	  Descriptors handed out for reading are counted by fd.c as external
 *	  ones; small files and durable writes use fd.c's transient files.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>
#include <zlib.h>

#include "storage/fd.h"

#include "archive/storage.h"

/*
 * The driver of a path: the replica's for "s3://<bucket>/<key>"
 * (storage_s3.c, read-only), else the local directory's.  Descriptors are
 * local files with either driver, so the operations on one (fstat,
 * close) are always the local driver's.
 */
static inline const CsStorageDriver *
driver_of(const char *path)
{
	if (cs_storage_is_s3_path(path))
		return &cs_storage_s3;
	return &cs_storage_posix;
}


/*
 * cs_storage_list
 *	  Returns the names in directory path as a List of palloc'd strings, in
 *	  no order, without "." and "..".  When path does not exist and
 *	  missing_ok, returns NIL with *found false.
 *	  Errors: XX001 when path is not a directory; file access SQLSTATEs.
 */
List *
cs_storage_list(const char *path, bool missing_ok, bool *found)
{
	return driver_of(path)->list(path, missing_ok, found);
}

/*
 * cs_storage_stat
 *	  Fills *info with what path names (through a symbolic link when
 *	  follow): type CS_STORAGE_MISSING when nothing is there, size in
 *	  bytes, mtime with microseconds, nlinks.  Returns 0, or the errno of
 *	  a failure other than a missing path (the caller reports it: errno is
 *	  set too; ENOENT when the path is missing, for a caller that reports
 *	  that as a failure).  Never raises.
 */
int
cs_storage_stat(const char *path, bool follow, CsStorageInfo *info)
{
	int			err = driver_of(path)->stat(path, follow, info);

	errno = (err == 0 && info->type == CS_STORAGE_MISSING) ? ENOENT : err;
	return err;
}

/*
 * cs_open_regular_file
 *	  Opens a file of the archive read-only without blocking and checks that
 *	  it is a regular file (a symbolic link to one is followed).  Returns
 *	  the file descriptor, which the caller closes, or -1 when the file does
 *	  not exist and missing_ok.  The descriptor is not tracked by fd.c:
 *	  callers account for it with AcquireExternalFD() (as
 *	  cs_open_counted_file() does) or own it through a memory context reset
 *	  callback.
 *	  Errors: XX001 when it is not a regular file; file access errors
 *	  (class 58 or 42, as errcode_for_file_access() finds) for other
 *	  failures.
 */
int
cs_open_regular_file(const char *path, bool missing_ok)
{
	return driver_of(path)->open_read(path, missing_ok);
}

/*
 * cs_open_counted_file
 *	  cs_open_regular_file(), with the descriptor counted by fd.c as an
 *	  external one (AcquireExternalFD()), for a descriptor that zlib or a
 *	  reader owns: cs_close_counted_file() closes it.
 *	  Errors: as cs_open_regular_file(); 53000 when fd.c allows no more
 *	  files.
 */
int
cs_open_counted_file(const char *path, bool missing_ok)
{
	int			fd = cs_open_regular_file(path, missing_ok);

	if (fd >= 0 && !AcquireExternalFD())
	{
		close(fd);
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not open file \"%s\": too many open files", path)));
	}
	return fd;
}

/*
 * cs_close_counted_file
 *	  Closes a descriptor from cs_open_counted_file(): through zlib when a
 *	  gzFile owns it (gzclose() closes it and frees zlib's buffers), else
 *	  directly, and tells fd.c it is gone.  fd < 0 (nothing open) is a
 *	  no-op.  Called from release callbacks and PG_FINALLY blocks: it never
 *	  raises.
 */
void
cs_close_counted_file(struct gzFile_s *gz, int fd)
{
	if (fd < 0)
		return;
	if (gz != NULL)
		gzclose(gz);
	else
		close(fd);
	ReleaseExternalFD();
}

/*
 * cs_read_small_file
 *	  Reads a whole small text file of the archive (an identity file, say)
 *	  into out, which is reset first; false when it does not exist and
 *	  missing_ok.  max_bytes bounds what is read: a larger file is damage.
 *	  The descriptor is a transient file, released on error.
 *	  Errors: XX001 when the file is not a regular file or is larger than
 *	  max_bytes; file access SQLSTATEs for I/O failures.
 */
bool
cs_read_small_file(const char *path, Size max_bytes, StringInfo out,
				   bool missing_ok)
{
	return driver_of(path)->read_small(path, max_bytes, out, missing_ok);
}

/*
 * cs_write_file_durably
 *	  Replaces the small file path (in directory dir) with len bytes of
 *	  data, durably: written to <path>.tmp, then cs_durable_rename() (fsync,
 *	  rename, fsync of dir).  A crash leaves the old file or the new one,
 *	  and at most a .tmp that cs_remove_tmp_files() removes.  Errors: file
 *	  access errors (class 58) as core's messages.
 */
void
cs_write_file_durably(const char *path, const char *dir, const char *data,
					  size_t len)
{
	driver_of(path)->write(path, dir, data, len);
}

/*
 * cs_durable_rename
 *	  fsyncs from, renames it to to, then fsyncs dir (the directory holding
 *	  both), as core's durable_rename() does but with ERROR, not PANIC.
 */
void
cs_durable_rename(const char *from, const char *to, const char *dir)
{
	driver_of(from)->rename(from, to, dir);
}

/*
 * cs_durable_unlink
 *	  Removes the file path, if it is there, and fsyncs its directory dir so
 *	  that the removal survives a crash.  Returns whether a file was
 *	  removed (false, doing nothing, when there was none).
 *	  Errors: file access SQLSTATEs from the removal or the fsync.
 */
bool
cs_durable_unlink(const char *path, const char *dir)
{
	return driver_of(path)->remove(path, dir);
}

/*
 * cs_remove_tree
 *	  Removes directory path and everything below it (not durable: the
 *	  caller fsyncs the parent if it must).  A missing path is no error.
 *	  Errors: file access SQLSTATEs.
 */
void
cs_remove_tree(const char *path)
{
	driver_of(path)->remove_tree(path);
}

/*
 * cs_make_dir
 *	  Creates directory path (mode 0700) unless it exists, and makes its
 *	  entry in the parent durable.  Errors: 22023 when path exists and is
 *	  not a directory; file access SQLSTATEs, with a hint about permissions.
 */
void
cs_make_dir(const char *path)
{
	driver_of(path)->make_dir(path);
}

/*
 * cs_fsync_path
 *	  Makes the contents of file or directory path durable; directories
 *	  need it after a file in them is created, renamed or removed.
 *	  Errors: file access errors (class 58).
 */
void
cs_fsync_path(const char *path, bool isdir)
{
	driver_of(path)->sync(path, isdir);
}

/*
 * cs_fsync_fd
 *	  fdatasync()s a file open for writing, as the driver returned it (path
 *	  is for the message).  Errors: file access errors (class 58).
 */
void
cs_fsync_fd(int fd, const char *path)
{
	if (fdatasync(fd) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not fsync file \"%s\": %m", path)));
}

/*
 * cs_storage_list_entries
 *	  Returns the entries of directory path as a List of CsStorageEntry
 *	  (palloc'd, in no order, without "." and ".."), each with what it is,
 *	  not through a symbolic link (type CS_STORAGE_MISSING when that could
 *	  not be found: the entry went meanwhile, say).  When the directory
 *	  cannot be opened, returns NIL with *err (and errno) the errno of the
 *	  failure, ENOENT when it is missing; else *err is 0.  Raises only when
 *	  reading an open directory fails (file access errors, class 58).
 */
List *
cs_storage_list_entries(const char *path, int *err)
{
	List	   *entries = driver_of(path)->list_entries(path, err);

	errno = *err;
	return entries;
}

/*
 * cs_storage_fstat
 *	  Fills *info with what the open file fd (from cs_storage_open() or
 *	  cs_storage_open_stream()) is.  Returns 0, or the errno of a failure
 *	  (errno is set too).  Never raises.
 */
int
cs_storage_fstat(int fd, CsStorageInfo *info)
{
	int			err = cs_storage_posix.fstat(fd, info);

	errno = err;
	return err;
}

/*
 * cs_storage_open
 *	  Opens a file of the archive as flags (CS_OPEN_*, storage.h) say, as a
 *	  descriptor that fd.c counts and closes at the end of the transaction
 *	  or on error (a transient file); new files get mode 0600.  The caller
 *	  closes it with cs_storage_close().  Returns the descriptor, or -1
 *	  with errno set: the caller reports the failure.  Never raises.
 */
int
cs_storage_open(const char *path, int flags)
{
	return driver_of(path)->open(path, flags);
}

/*
 * cs_storage_close
 *	  Closes a descriptor from cs_storage_open().  Returns 0, or -1 with
 *	  errno set.  Never raises.
 */
int
cs_storage_close(int fd)
{
	return cs_storage_posix.close(fd);
}

/*
 * cs_storage_open_stream
 *	  Opens a file of the archive as flags (CS_OPEN_*) say, for a writer
 *	  that keeps it open across transactions (the active segment, a
 *	  snapshot being written): the descriptor is not tracked by fd.c and
 *	  the caller closes it with close(2).  New files get mode 0600.
 *	  Returns the descriptor, or -1 with errno set.  Never raises.
 */
int
cs_storage_open_stream(const char *path, int flags)
{
	return driver_of(path)->open_stream(path, flags);
}

/*
 * cs_storage_rename
 *	  Renames from to to, not durably (the caller fsyncs the directory).
 *	  Returns 0, or the errno of the failure (errno is set too).  Never
 *	  raises.
 */
int
cs_storage_rename(const char *from, const char *to)
{
	int			err = driver_of(from)->rename_plain(from, to);

	errno = err;
	return err;
}

/*
 * cs_storage_unlink
 *	  Removes the file path, not durably: for cleanup of temporary files,
 *	  or when the caller fsyncs the directory itself.  Returns 0, or the
 *	  errno of the failure, ENOENT when there was none (errno is set too).
 *	  Never raises.
 */
int
cs_storage_unlink(const char *path)
{
	int			err = driver_of(path)->unlink(path);

	errno = err;
	return err;
}

/*
 * cs_storage_truncate
 *	  Cuts the file path to size bytes, not durably (the caller fsyncs it).
 *	  Returns 0, or the errno of the failure (errno is set too).  Never
 *	  raises.
 */
int
cs_storage_truncate(const char *path, int64 size)
{
	int			err = driver_of(path)->truncate(path, size);

	errno = err;
	return err;
}

/*
 * cs_storage_remove_dir
 *	  Removes the empty directory path, not durably.  Returns 0, or the
 *	  errno of the failure (errno is set too).  Never raises.
 */
int
cs_storage_remove_dir(const char *path)
{
	int			err = driver_of(path)->remove_dir(path);

	errno = err;
	return err;
}

/*
 * cs_storage_try_remove_tree
 *	  Removes directory path and everything below it, not durably.
 *	  Returns false, with errno set, when that failed (a missing path is a
 *	  failure too, with errno ENOENT); the driver may have said why at
 *	  WARNING.  Never raises an ERROR.
 */
bool
cs_storage_try_remove_tree(const char *path)
{
	return driver_of(path)->try_remove_tree(path);
}

/*
 * cs_storage_lock
 *	  Creates the lock file path unless it exists, takes an exclusive lock
 *	  on it that the system releases when the process exits (even on kill
 *	  -9), and writes content into it.  Returns the descriptor that holds
 *	  the lock (closing it releases the lock), or -1 when another process
 *	  holds it, with what the file says appended to holder.
 *	  Errors: XX001 when the lock file is not a regular file; file access
 *	  errors (class 58 or 42) when it cannot be opened, locked or written.
 */
int
cs_storage_lock(const char *path, const char *content, StringInfo holder)
{
	return driver_of(path)->lock(path, content, holder);
}

/*
 * cs_storage_poll
 *	  Lets the downloads a driver started ahead of its readers move on
 *	  without waiting (the replica's prefetch of segment objects,
 *	  storage_s3.c); readers call it as they read a file, so the next
 *	  files arrive while one is decoded.  Cheap when nothing is under way.
 *	  Runs CHECK_FOR_INTERRUPTS(); raises only on interrupts and
 *	  out-of-memory.
 */
void
cs_storage_poll(void)
{
	cs_storage_s3_poll();
}
