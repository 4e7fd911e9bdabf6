/*-------------------------------------------------------------------------
 *
 * archive_dir.c
 *	  The archive directory as a whole: creating directories, durable
 *	  renames, fsync of files and directories, the lock that keeps a second
 *	  writer out, and removal of leftover temporary files.
 *
 * Unlike PostgreSQL's fsync_fname(), which PANICs on failure because the
 * data directory cannot be trusted afterwards, a failed fsync here raises
 * ERROR (SQLSTATE 58030): the archiver stops reporting progress, so the
 * slot keeps every change, and the worker retries.  The archive is synced
 * whatever the server's own fsync setting: pg_fsync() would follow
 * fsync = off, and the archive's position of record must not.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/fd.h"

#include "archive_config.h"
#include "archive_dir.h"
#include "shmem_status.h"

/*
 * cs_require_directory() -> const char *
 *	  The configured archive directory.  Raises 55000
 *	  (object_not_in_prerequisite_state) when the library was not preloaded
 *	  or changestream.directory is empty.
 */
const char *
cs_require_directory(void)
{
	CsArchiveConfig *config;

	if (cs_status == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("changestream is not loaded"),
				 errhint("Add changestream to shared_preload_libraries and restart the server.")));
	config = cs_archive_config_current();
	if (!cs_archive_config_enabled(config))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("changestream.directory is not set"),
				 errhint("Set changestream.directory in postgresql.conf and reload.")));
	return config->directory;
}

/*
 * cs_fsync_fd(fd, path) -> void
 *	  fdatasync() an open file (path is for the message).  58030 on failure.
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
 * cs_fsync_path(path, isdir) -> void
 *	  Open path read-only and fsync it; directories need this after a file
 *	  in them is created, renamed or removed.  58030 on failure.
 */
void
cs_fsync_path(const char *path, bool isdir)
{
	int			fd;
	int			save_errno;

	fd = OpenTransientFile(path, isdir ? O_RDONLY : O_RDWR | PG_BINARY);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open \"%s\" for fsync: %m", path)));
	if (fsync(fd) != 0)
	{
		save_errno = errno;
		CloseTransientFile(fd);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not fsync \"%s\": %m", path)));
	}
	CloseTransientFile(fd);
}

/*
 * cs_make_dir(path) -> void
 *	  mkdir with mode 0700 unless it exists; fsyncs the parent when it
 *	  creates.  58030 on failure, with a hint about permissions.
 */
void
cs_make_dir(const char *path)
{
	struct stat st;
	char		parent[MAXPGPATH];

	if (stat(path, &st) == 0)
	{
		if (!S_ISDIR(st.st_mode))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("\"%s\" exists but is not a directory", path)));
		return;
	}
	if (MakePGDirectory(path) != 0 && errno != EEXIST)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", path),
				 errhint("The server's operating system user must be able to write changestream.directory.")));
	strlcpy(parent, path, sizeof(parent));
	get_parent_directory(parent);
	if (parent[0] != '\0')
		cs_fsync_path(parent, true);
}

/*
 * cs_durable_unlink(path, dir) -> bool
 *	  Remove the file path, if it is there, and fsync its directory dir so
 *	  that the removal survives a crash.  Returns whether a file was
 *	  removed (false, doing nothing, for ENOENT).
 *	  Errors: file access SQLSTATEs from unlink(2) or the fsync.
 */
bool
cs_durable_unlink(const char *path, const char *dir)
{
	if (unlink(path) != 0)
	{
		if (errno == ENOENT)
			return false;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", path)));
	}
	cs_fsync_path(dir, true);
	return true;
}

/*
 * cs_durable_rename(from, to, dir) -> void
 *	  fsync "from", rename it to "to", then fsync "dir" (the directory
 *	  holding both), as durable_rename() does but with ERROR, not PANIC.
 */
void
cs_durable_rename(const char *from, const char *to, const char *dir)
{
	cs_fsync_path(from, false);
	if (rename(from, to) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not rename file \"%s\" to \"%s\": %m", from, to)));
	cs_fsync_path(dir, true);
}

/*
 * cs_write_file_durably(path, dir, data, len) -> void
 *	  Replace the small file path (in directory dir) with len bytes of
 *	  data, durably: written to <path>.tmp, then cs_durable_rename() (fsync,
 *	  rename, fsync of dir).  A crash leaves the old file or the new one,
 *	  and at most a .tmp that cs_remove_tmp_files() removes.  Errors: file
 *	  access errors (class 58) as core's messages.
 */
void
cs_write_file_durably(const char *path, const char *dir, const char *data,
					  size_t len)
{
	char	   *tmp = psprintf("%s.tmp", path);
	int			fd;

	fd = OpenTransientFile(tmp, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", tmp)));
	errno = 0;
	if (write(fd, data, len) != (ssize_t) len)
	{
		if (errno == 0)
			errno = ENOSPC;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", tmp)));
	}
	if (CloseTransientFile(fd) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not close file \"%s\": %m", tmp)));
	cs_durable_rename(tmp, path, dir);
	pfree(tmp);
}

/*
 * Take an exclusive flock() on <directory>/<name>, for the archiver or the
 * compressor; see cs_lock_archive().
 */
static int
lock_file(const char *directory, const char *name, bool compressor)
{
	char		path[MAXPGPATH];
	char		content[MAXPGPATH + 64];
	int			fd;

	snprintf(path, sizeof(path), "%s/%s", directory, name);
	fd = open(path, O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC | PG_BINARY,
			  S_IRUSR | S_IWUSR);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open lock file \"%s\": %m", path),
				 errhint("The server's operating system user must be able to write changestream.directory.")));
	{
		struct stat st;

		if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		{
			close(fd);
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("lock file \"%s\" is not a regular file", path),
					 errhint("Remove it; the archiver creates it again.")));
		}
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0)
	{
		int			save_errno = errno;
		ssize_t		n = pread(fd, content, sizeof(content) - 1, 0);

		close(fd);
		content[n > 0 ? n : 0] = '\0';
		errno = save_errno;
		if (save_errno == EWOULDBLOCK)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 compressor ?
					 errmsg("archive directory \"%s\" is locked by another compressor", directory) :
					 errmsg("archive directory \"%s\" is locked by another archiver", directory),
					 errdetail("Lock file \"%s\" says: %s", path, content),
					 errhint("Give each cluster its own changestream.directory.")));
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not lock file \"%s\": %m", path)));
	}
	snprintf(content, sizeof(content), "pid %d\ndata_directory %s\n",
			 (int) MyProcPid, DataDir);
	if (ftruncate(fd, 0) != 0 ||
		pwrite(fd, content, strlen(content), 0) != (ssize_t) strlen(content))
	{
		int			save_errno = errno;

		close(fd);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write lock file \"%s\": %m", path)));
	}
	return fd;
}

/*
 * cs_lock_archive(directory) -> int (file descriptor)
 *	  Create the directory if needed and take an exclusive flock() on
 *	  <directory>/changestream.lock; the kernel releases it when the
 *	  process exits, even on kill -9.  The file records who holds it.
 *	  Raises 55006 (object_in_use) when another process holds it, 58030 on
 *	  I/O errors.  The caller closes the descriptor to release the lock.
 */
int
cs_lock_archive(const char *directory)
{
	cs_make_dir(directory);
	return lock_file(directory, "changestream.lock", false);
}

/*
 * cs_lock_archive_compressor
 *	  Returns a file descriptor (int) holding the compressor's own lock, <directory>/changestream.compressor.lock,
 *	  taken as cs_lock_archive() takes the archiver's, so that the
 *	  compressor of a second cluster pointed at the same directory never
 *	  works on the same segment (the directory must exist).  Errors as
 *	  cs_lock_archive().
 */
int
cs_lock_archive_compressor(const char *directory)
{
	return lock_file(directory, "changestream.compressor.lock", true);
}

static bool
has_suffix(const char *name, const char *suffix)
{
	size_t		n = strlen(name);
	size_t		s = strlen(suffix);

	return n >= s && strcmp(name + n - s, suffix) == 0;
}

/* Remove *.tmp entries (files, or generation directories) below path. */
static void
remove_tmp_below(const char *path, int depth)
{
	DIR		   *dir;
	struct dirent *de;
	char		child[MAXPGPATH];

	dir = AllocateDir(path);
	if (dir == NULL)
	{
		if (errno == ENOENT)
			return;

		/*
		 * Inside a generation the archiver only writes where it can read:
		 * a directory it cannot read holds none of its leftovers.  Readers
		 * and recovery report it if they need it.
		 */
		ereport(depth > 0 ? WARNING : ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open directory \"%s\": %m", path),
				 errdetail("Leftover temporary files in it, if any, are not removed.")));
		return;
	}
	while ((de = ReadDir(dir, path)) != NULL)
	{
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(child, sizeof(child), "%s/%s", path, de->d_name);
		if (lstat(child, &st) != 0)
			continue;
		if (has_suffix(de->d_name, ".wal.gz.tmp"))
			continue;			/* the compressor's, which replaces it */
		if (has_suffix(de->d_name, ".tmp"))
		{
			if (S_ISDIR(st.st_mode))
			{
				if (!rmtree(child, true))
					ereport(ERROR,
							(errcode_for_file_access(),
							 errmsg("could not remove directory \"%s\"", child)));
			}
			else if (unlink(child) != 0)
				ereport(ERROR,
						(errcode_for_file_access(),
						 errmsg("could not remove file \"%s\": %m", child)));
			ereport(DEBUG1, (errmsg_internal("removed leftover \"%s\"", child)));
		}
		else if (S_ISDIR(st.st_mode) && depth < 3)
		{
			/* a running snapshot worker owns the tmp files in snapshots/ */
			if (strcmp(de->d_name, "snapshots") == 0 &&
				cs_status_snapshot_running())
				continue;
			remove_tmp_below(child, depth + 1);
		}
	}
	FreeDir(dir);
}

/*
 * cs_remove_tmp_files(directory) -> void
 *	  Remove every leftover *.tmp file or directory in the archive (a crash
 *	  during a durable write leaves them).  Durability rule 5.
 */
void
cs_remove_tmp_files(const char *directory)
{
	char		path[MAXPGPATH];

	snprintf(path, sizeof(path), "%s/generations", directory);
	remove_tmp_below(path, 0);
}
