/*-------------------------------------------------------------------------
 *
 * archive_dir.c
 *	  The archive directory as a whole: the configured directory, the lock
 *	  that keeps a second writer out, and removal of leftover temporary
 *	  files.  Files are reached through the storage interface (storage.h,
 *	  where durable writes, renames and fsyncs now live); names come from
 *	  the layout (archive_layout.c).
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

#include "archive/archive_dir.h"
#include "archive/archive_layout.h"
#include "base/archive_config.h"
#include "base/shmem_status.h"

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

	cs_status_require_loaded();
	config = cs_archive_config_current();
	if (!cs_archive_config_enabled(config))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("changestream.directory is not set"),
				 errhint("Set changestream.directory in postgresql.conf and reload.")));
	return config->directory;
}

/*
 * Take an exclusive flock() on <directory>/<name>, for the archiver or the
 * maintenance worker; see cs_lock_archive().
 */
static int
lock_file(const char *directory, bool maintenance)
{
	char	   *path = cs_lock_file_path(directory, maintenance);
	char		content[MAXPGPATH + 64];
	int			fd;

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
					 maintenance ?
					 errmsg("archive directory \"%s\" is locked by another maintenance worker", directory) :
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
	return lock_file(directory, false);
}

/*
 * cs_lock_archive_maintenance
 *	  Returns a file descriptor (int) holding the maintenance worker's own
 *	  lock, <directory>/changestream.compressor.lock, taken as
 *	  cs_lock_archive() takes the archiver's, so that the maintenance worker of
 *	  a second cluster pointed at the same directory never works on the same
 *	  segment (the directory must exist).  Errors as cs_lock_archive().
 */
int
cs_lock_archive_maintenance(const char *directory)
{
	return lock_file(directory, true);
}

/* Remove *.tmp entries (files, or generation directories) below path. */
static void
remove_tmp_below(const char *path, int depth)
{
	DIR		   *dir;
	struct dirent *de;
	char	   *child;

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
		CsStorageInfo info;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		child = cs_file_in(path, de->d_name);
		if (cs_storage_stat(child, false, &info) != 0 ||
			info.type == CS_STORAGE_MISSING)
			continue;
		if (cs_is_maintenance_tmp_name(de->d_name))
			continue;			/* the maintenance worker replaces it */
		if (cs_is_tmp_name(de->d_name))
		{
			if (info.type == CS_STORAGE_DIR)
				cs_remove_tree(child);
			else
				(void) cs_durable_unlink(child, path);
			ereport(DEBUG1, (errmsg_internal("removed leftover \"%s\"", child)));
		}
		else if (info.type == CS_STORAGE_DIR && depth < 3)
		{
			/* a running snapshot worker owns the tmp files in snapshots/ */
			if (cs_is_snapshots_dir_name(de->d_name) &&
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
	remove_tmp_below(cs_generations_dir_path(directory), 0);
}
