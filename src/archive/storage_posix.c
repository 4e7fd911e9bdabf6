/*-------------------------------------------------------------------------
 *
 * storage_posix.c
 *	  The local-directory storage driver (storage.h): the archive as files
 *	  of a POSIX file system, through PostgreSQL's fd.c (AllocateDir(),
 *	  OpenTransientFile()) so that an error never leaks a descriptor; only
 *	  the descriptors a writer keeps open across transactions (the active
 *	  segment, a snapshot being written) and the lock files are plain
 *	  open(2)s, owned by their caller.  The archive directory's locks are
 *	  flock()s on those lock files, a matter of the local directory.
 *
 * Unlike PostgreSQL's fsync_fname(), which PANICs on failure because the
 * data directory cannot be trusted afterwards, a failed fsync here raises
 * ERROR (a file access error, class 58): the archiver stops reporting progress, so the
 * slot keeps every change, and the worker retries.  The archive is synced
 * whatever the server's own fsync setting: pg_fsync() would follow
 * fsync = off, and the archive's position of record must not.
 *
 * Everything found on disk is untrusted.  A name that should be a regular
 * file but is not (a FIFO, a socket, a device, a directory, a symbolic
 * link loop) is damage (XX001) instead of being opened, because opening a
 * FIFO blocks in open(2) where no interrupt can reach it: files are opened
 * with O_NONBLOCK and checked with fstat() before the first read.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file_utils.h"
#include "storage/fd.h"
#include "utils/timestamp.h"

#include "archive/storage.h"

/* The names in directory path; NIL and *found false when it is missing. */
static List *
posix_list(const char *path, bool missing_ok, bool *found)
{
	DIR		   *dir = AllocateDir(path);
	struct dirent *de;
	List	   *names = NIL;

	*found = (dir != NULL);
	if (dir == NULL)
	{
		if (errno == ENOENT && missing_ok)
			return NIL;
		if (errno == ENOTDIR)
			cs_file_damage(path, 0, "It is not a directory.");
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open directory \"%s\": %m", path)));
	}
	while ((de = ReadDir(dir, path)) != NULL)
	{
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		names = lappend(names, pstrdup(de->d_name));
	}
	FreeDir(dir);
	return names;
}

/* What st says, as a CsStorageInfo. */
static void
info_from_stat(const struct stat *st, CsStorageInfo *info)
{
	if (S_ISREG(st->st_mode))
		info->type = CS_STORAGE_FILE;
	else if (S_ISDIR(st->st_mode))
		info->type = CS_STORAGE_DIR;
	else
		info->type = CS_STORAGE_OTHER;
	info->size = st->st_size;
	info->mtime = time_t_to_timestamptz(st->st_mtim.tv_sec) +
		st->st_mtim.tv_nsec / 1000;
	info->nlinks = (int) st->st_nlink;
}

/* stat() or lstat() path into info; 0, or the errno of a failure. */
static int
posix_stat(const char *path, bool follow, CsStorageInfo *info)
{
	struct stat st;

	memset(info, 0, sizeof(*info));
	if ((follow ? stat(path, &st) : lstat(path, &st)) != 0)
	{
		if (errno == ENOENT)
			return 0;
		return errno;
	}
	info_from_stat(&st, info);
	return 0;
}

/* fstat() fd into info; 0, or the errno of a failure. */
static int
posix_fstat(int fd, CsStorageInfo *info)
{
	struct stat st;

	memset(info, 0, sizeof(*info));
	if (fstat(fd, &st) != 0)
		return errno;
	info_from_stat(&st, info);
	return 0;
}

/*
 * Open a regular file read-only without blocking (a symbolic link to one is
 * followed); -1 when missing and missing_ok.  XX001 when it is not a
 * regular file.  The descriptor is not tracked by fd.c: see storage.c.
 */
static int
posix_open_read(const char *path, bool missing_ok)
{
	int			fd;
	struct stat st;
	int			flags;

	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | PG_BINARY, 0);
	if (fd < 0)
	{
		if (errno == ENOENT && missing_ok)
			return -1;
		if (errno == ELOOP || errno == ENXIO)
			cs_file_damage(path, 0, "It is not a regular file.");
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	}
	if (fstat(fd, &st) != 0)
	{
		int			save_errno = errno;

		close(fd);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", path)));
	}
	if (!S_ISREG(st.st_mode))
	{
		close(fd);
		cs_file_damage(path, 0, "It is not a regular file.");
	}
	/* regular files ignore O_NONBLOCK; clear it all the same */
	flags = fcntl(fd, F_GETFL);
	if (flags >= 0)
		(void) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
	return fd;
}

/* Check that fd is a regular file of at most max_bytes, and read it into out. */
static void
read_regular_fd(int fd, const char *path, Size max_bytes, StringInfo out)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", path)));
	if (!S_ISREG(st.st_mode))
		cs_file_damage(path, 0, "It is not a regular file.");
	if ((Size) st.st_size > max_bytes)
		cs_file_damage(path, 0, "It is %lld bytes long, more than the %zu bytes such a file can hold.",
					   (long long) st.st_size, max_bytes);
	resetStringInfo(out);
	enlargeStringInfo(out, st.st_size + 1);
	for (;;)
	{
		ssize_t		n = read(fd, out->data + out->len, out->maxlen - out->len - 1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read file \"%s\": %m", path)));
		if (n == 0)
			break;
		out->len += n;
		if ((Size) out->len >= max_bytes)
			cs_file_damage(path, 0, "It grew past the %zu bytes such a file can hold.",
						   max_bytes);
		if (out->len >= out->maxlen - 1)
			enlargeStringInfo(out, 1024);
	}
	out->data[out->len] = '\0';
}

/* Read a whole small file through a transient file (released on error). */
static bool
posix_read_small(const char *path, Size max_bytes, StringInfo out,
				 bool missing_ok)
{
	int			fd;

	fd = OpenTransientFile(path, O_RDONLY | O_NONBLOCK | PG_BINARY);
	if (fd < 0)
	{
		if (errno == ENOENT && missing_ok)
			return false;
		if (errno == ELOOP || errno == ENXIO)
			cs_file_damage(path, 0, "It is not a regular file.");
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	}
	PG_TRY();
	{
		read_regular_fd(fd, path, max_bytes, out);
	}
	PG_FINALLY();
	{
		CloseTransientFile(fd);
	}
	PG_END_TRY();
	return true;
}

/* Open path and fsync it (file access errors, class 58, on failure). */
static void
posix_sync(const char *path, bool isdir)
{
	int			fd;
	int			save_errno;

	fd = OpenTransientFile(path, isdir ? O_RDONLY : O_RDWR | PG_BINARY);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	if (fsync(fd) != 0)
	{
		save_errno = errno;
		CloseTransientFile(fd);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not fsync file \"%s\": %m", path)));
	}
	CloseTransientFile(fd);
}

/*
 * fsync from (a file, or a directory whose contents the caller made
 * durable), rename it to to, fsync dir: durable_rename() with ERROR.
 */
static void
posix_rename(const char *from, const char *to, const char *dir)
{
	struct stat st;

	posix_sync(from, lstat(from, &st) == 0 && S_ISDIR(st.st_mode));
	if (rename(from, to) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not rename file \"%s\" to \"%s\": %m", from, to)));
	posix_sync(dir, true);
}

/* Write <path>.tmp, then posix_rename() it over path. */
static void
posix_write(const char *path, const char *dir, const char *data, size_t len)
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
	posix_rename(tmp, path, dir);
	pfree(tmp);
}

/* unlink path and fsync dir; false (nothing done) for ENOENT. */
static bool
posix_remove(const char *path, const char *dir)
{
	if (unlink(path) != 0)
	{
		if (errno == ENOENT)
			return false;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", path)));
	}
	posix_sync(dir, true);
	return true;
}

/* rmtree() path; a missing path is no error. */
static void
posix_remove_tree(const char *path)
{
	struct stat st;

	if (lstat(path, &st) != 0 && errno == ENOENT)
		return;
	if (!rmtree(path, true))
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not remove directory \"%s\"", path)));
}

/* mkdir 0700 unless it exists; fsync the parent when it creates. */
static void
posix_make_dir(const char *path)
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
		posix_sync(parent, true);
}

/*
 * The entries of directory path, each lstat()ed (type CS_STORAGE_MISSING
 * when that fails); NIL with *err set when the directory cannot be opened.
 */
static List *
posix_list_entries(const char *path, int *err)
{
	DIR		   *dir = AllocateDir(path);
	struct dirent *de;
	List	   *entries = NIL;

	*err = 0;
	if (dir == NULL)
	{
		*err = errno;
		return NIL;
	}
	while ((de = ReadDir(dir, path)) != NULL)
	{
		CsStorageEntry *e;
		char	   *child;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		e = palloc0(sizeof(CsStorageEntry));
		e->name = pstrdup(de->d_name);
		child = psprintf("%s/%s", path, de->d_name);
		if (posix_stat(child, false, &e->info) != 0)
			e->info.type = CS_STORAGE_MISSING;
		pfree(child);
		entries = lappend(entries, e);
	}
	FreeDir(dir);
	return entries;
}

/* The open(2) flags for CS_OPEN_* flags. */
static int
posix_flags(int flags)
{
	int			oflags = PG_BINARY;

	if (flags & CS_OPEN_WRITE)
		oflags |= O_WRONLY;
	else if (flags & CS_OPEN_UPDATE)
		oflags |= O_RDWR;
	else
		oflags |= O_RDONLY;
	if (flags & CS_OPEN_CREATE)
		oflags |= O_CREAT | O_TRUNC;
	if (flags & CS_OPEN_EXCL)
		oflags |= O_CREAT | O_EXCL;
	if (flags & CS_OPEN_NOFOLLOW)
		oflags |= O_NOFOLLOW;
	return oflags;
}

/* OpenTransientFile() (mode pg_file_create_mode); -1 with errno. */
static int
posix_open(const char *path, int flags)
{
	return OpenTransientFile(path, posix_flags(flags));
}

/* CloseTransientFile(); 0, or -1 with errno. */
static int
posix_close(int fd)
{
	return CloseTransientFile(fd);
}

/* open(2), mode 0600, not tracked by fd.c; -1 with errno. */
static int
posix_open_stream(const char *path, int flags)
{
	return open(path, posix_flags(flags), S_IRUSR | S_IWUSR);
}

/* rename(2); 0, or the errno of a failure. */
static int
posix_rename_plain(const char *from, const char *to)
{
	return rename(from, to) == 0 ? 0 : errno;
}

/* unlink(2); 0, or the errno of a failure. */
static int
posix_unlink(const char *path)
{
	return unlink(path) == 0 ? 0 : errno;
}

/* truncate(2); 0, or the errno of a failure. */
static int
posix_truncate(const char *path, int64 size)
{
	return truncate(path, (off_t) size) == 0 ? 0 : errno;
}

/* rmdir(2); 0, or the errno of a failure. */
static int
posix_remove_dir(const char *path)
{
	return rmdir(path) == 0 ? 0 : errno;
}

/* rmtree(); false (errno set, rmtree's own WARNINGs given) on failure. */
static bool
posix_try_remove_tree(const char *path)
{
	return rmtree(path, true);
}

/*
 * Create path (0600) without blocking, check it is a regular file, take
 * an exclusive flock() and write content over it.  -1, with what the file
 * says in holder and errno EWOULDBLOCK, when another process holds it.
 */
static int
posix_lock(const char *path, const char *content, StringInfo holder)
{
	char		said[MAXPGPATH + 64];
	int			fd;
	struct stat st;

	fd = open(path, O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC | PG_BINARY,
			  S_IRUSR | S_IWUSR);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open lock file \"%s\": %m", path),
				 errhint("The server's operating system user must be able to write changestream.directory.")));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
	{
		close(fd);
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("lock file \"%s\" is not a regular file", path),
				 errhint("Remove it; the archiver creates it again.")));
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0)
	{
		int			save_errno = errno;
		ssize_t		n = pread(fd, said, sizeof(said) - 1, 0);

		close(fd);
		said[n > 0 ? n : 0] = '\0';
		errno = save_errno;
		if (save_errno == EWOULDBLOCK)
		{
			appendStringInfoString(holder, said);
			errno = save_errno;
			return -1;
		}
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not lock file \"%s\": %m", path)));
	}
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

const CsStorageDriver cs_storage_posix = {
	.name = "posix",
	.list = posix_list,
	.stat = posix_stat,
	.open_read = posix_open_read,
	.read_small = posix_read_small,
	.write = posix_write,
	.rename = posix_rename,
	.remove = posix_remove,
	.remove_tree = posix_remove_tree,
	.make_dir = posix_make_dir,
	.sync = posix_sync,
	.lock = posix_lock,
	.list_entries = posix_list_entries,
	.fstat = posix_fstat,
	.open = posix_open,
	.close = posix_close,
	.open_stream = posix_open_stream,
	.rename_plain = posix_rename_plain,
	.unlink = posix_unlink,
	.truncate = posix_truncate,
	.remove_dir = posix_remove_dir,
	.try_remove_tree = posix_try_remove_tree,
};
