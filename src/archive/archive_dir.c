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

#include "miscadmin.h"

#include "archive/archive_dir.h"
#include "archive/archive_layout.h"
#include "base/archive_config.h"
#include "base/shmem_status.h"

/*
 * cs_require_directory
 *	  Returns the configured archive directory.  Raises 55000
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
 * Take the exclusive lock on <directory>/<name>, for the archiver or the
 * maintenance worker; see cs_lock_archive().
 */
static int
lock_file(const char *directory, bool maintenance)
{
	char	   *path = cs_lock_file_path(directory, maintenance);
	char		content[MAXPGPATH + 64];
	StringInfoData holder;
	int			fd;

	snprintf(content, sizeof(content), "pid %d\ndata_directory %s\n",
			 (int) MyProcPid, DataDir);
	initStringInfo(&holder);
	fd = cs_storage_lock(path, content, &holder);
	if (fd < 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 maintenance ?
				 errmsg("archive directory \"%s\" is locked by another maintenance worker", directory) :
				 errmsg("archive directory \"%s\" is locked by another archiver", directory),
				 errdetail("Lock file \"%s\" says: %s", path, holder.data),
				 errhint("Give each cluster its own changestream.directory.")));
	pfree(holder.data);
	return fd;
}

/*
 * cs_lock_archive
 *	  Create the directory if needed and take an exclusive lock on
 *	  <directory>/changestream.lock (cs_storage_lock(): flock() in the
 *	  local directory); the kernel releases it when the process exits,
 *	  even on kill -9.  The file records who holds it.  Raises 55006
 *	  (object_in_use) when another process holds it, XX001 when the lock
 *	  file is not a regular file, file access errors (class 58) on I/O
 *	  errors.  Returns the lock file's descriptor; the caller closes it
 *	  to release the lock.
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
	List	   *entries;
	ListCell   *lc;
	int			err;

	entries = cs_storage_list_entries(path, &err);
	if (err != 0)
	{
		if (err == ENOENT)
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
	foreach(lc, entries)
	{
		CsStorageEntry *e = lfirst(lc);
		char	   *child;

		if (e->info.type == CS_STORAGE_MISSING)
			continue;
		if (cs_is_maintenance_tmp_name(e->name))
			continue;			/* the maintenance worker replaces it */
		child = cs_file_in(path, e->name);
		if (cs_is_tmp_name(e->name))
		{
			if (e->info.type == CS_STORAGE_DIR)
				cs_remove_tree(child);
			else
				(void) cs_durable_unlink(child, path);
			ereport(DEBUG1, (errmsg_internal("removed leftover \"%s\"", child)));
		}
		else if (e->info.type == CS_STORAGE_DIR && depth < 3)
		{
			/* a running snapshot worker owns the tmp files in snapshots/ */
			if (cs_is_snapshots_dir_name(e->name) &&
				cs_status_snapshot_running())
				continue;
			remove_tmp_below(child, depth + 1);
		}
	}
	list_free_deep(entries);
}

/*
 * cs_remove_tmp_files
 *	  Remove every leftover *.tmp file or directory in the archive (a crash
 *	  during a durable write leaves them).  Durability rule 5.
 */
void
cs_remove_tmp_files(const char *directory)
{
	remove_tmp_below(cs_generations_dir_path(directory), 0);
}
