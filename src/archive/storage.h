/*-------------------------------------------------------------------------
 *
 * storage.h
 *	  The storage seam: the one layer through which the archive's files are
 *	  listed, examined, opened, read, written, renamed, removed and locked.  A
 *	  driver (CsStorageDriver) implements it: the local directory
 *	  (storage_posix.c), or the replica's bucket for paths "s3://..."
 *	  (storage_s3.c, read-only), chosen by storage.c per path.  Paths are
 *	  made by the layout (archive_layout.c), never here.  See storage.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_STORAGE_H
#define CS_STORAGE_H

#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "nodes/pg_list.h"

/* What a path names, as cs_storage_stat() finds it. */
typedef enum CsStorageType
{
	CS_STORAGE_MISSING,			/* nothing there */
	CS_STORAGE_FILE,			/* a regular file */
	CS_STORAGE_DIR,				/* a directory */
	CS_STORAGE_OTHER			/* a FIFO, socket, device, link, ... */
} CsStorageType;

typedef struct CsStorageInfo
{
	CsStorageType type;
	int64		size;			/* bytes */
	TimestampTz mtime;			/* last modification, microseconds */
	int			nlinks;			/* hard links to the file */
} CsStorageInfo;

/* One entry of a directory, as cs_storage_list_entries() finds it. */
typedef struct CsStorageEntry
{
	char	   *name;			/* palloc'd; never "." or ".." */
	CsStorageInfo info;			/* not through a link; MISSING if unknown */
} CsStorageEntry;

/*
 * How cs_storage_open() and cs_storage_open_stream() open a file: one of
 * READ, WRITE, UPDATE, with CREATE (truncating what is there) or EXCL
 * (failing if anything is there) and NOFOLLOW (failing on a link) added.
 */
#define CS_OPEN_READ		0x00	/* read only */
#define CS_OPEN_WRITE		0x01	/* write only */
#define CS_OPEN_UPDATE		0x02	/* read and write */
#define CS_OPEN_CREATE		0x04	/* create, or truncate to 0 bytes */
#define CS_OPEN_EXCL		0x08	/* create; fail if the name exists */
#define CS_OPEN_NOFOLLOW	0x10	/* fail on a symbolic link */

/*
 * A storage driver.  Every function raises ERROR with the file-access
 * SQLSTATE of the failure (class 58 or 42) unless it says otherwise;
 * none PANICs.  "dir" arguments name the directory holding a path, whose
 * entry must be made durable too.
 */
typedef struct CsStorageDriver
{
	const char *name;
	/* names in a directory (palloc'd strings, unordered; no "." or "..") */
	List	   *(*list) (const char *path, bool missing_ok, bool *found);
	/* what path names (follow: through a symbolic link); 0 or an errno */
	int			(*stat) (const char *path, bool follow, CsStorageInfo *info);
	/* a regular file open read-only; -1 when missing and missing_ok */
	int			(*open_read) (const char *path, bool missing_ok);
	/* a whole small file into out; false when missing and missing_ok */
	bool		(*read_small) (const char *path, Size max_bytes,
							   StringInfo out, bool missing_ok);
	/* replace path with data, durably */
	void		(*write) (const char *path, const char *dir,
						  const char *data, size_t len);
	/* rename from to to (both in dir), durably */
	void		(*rename) (const char *from, const char *to, const char *dir);
	/* remove a file, durably; false when there was none */
	bool		(*remove) (const char *path, const char *dir);
	/* remove a directory and everything below it (not durable) */
	void		(*remove_tree) (const char *path);
	/* create a directory (parent made durable); nothing if it exists */
	void		(*make_dir) (const char *path);
	/* make a file's or a directory's contents durable */
	void		(*sync) (const char *path, bool isdir);
	/* create and lock a lock file, write content; -1 (holder read) if held */
	int			(*lock) (const char *path, const char *content,
						 StringInfo holder);

	/*
	 * The operations below never raise for the failure they report: they
	 * return -1 or false with errno set (or the errno), and the caller
	 * reports it in its own words.
	 */
	/* entries of a directory with what they are; NIL and *err when it fails */
	List	   *(*list_entries) (const char *path, int *err);
	/* what an open file is; 0 or an errno */
	int			(*fstat) (int fd, CsStorageInfo *info);
	/* open (CS_OPEN_* flags), counted by fd.c as a transient file; -1 */
	int			(*open) (const char *path, int flags);
	/* close what open() returned; 0 or -1 */
	int			(*close) (int fd);
	/* open (CS_OPEN_* flags), not tracked by fd.c; -1 */
	int			(*open_stream) (const char *path, int flags);
	/* rename, not durably; 0 or an errno */
	int			(*rename_plain) (const char *from, const char *to);
	/* remove a file, not durably; 0 or an errno (ENOENT included) */
	int			(*unlink) (const char *path);
	/* cut a file to size bytes, not durably; 0 or an errno */
	int			(*truncate) (const char *path, int64 size);
	/* remove an empty directory, not durably; 0 or an errno */
	int			(*remove_dir) (const char *path);
	/* remove a directory and everything below it; false on failure */
	bool		(*try_remove_tree) (const char *path);
} CsStorageDriver;

extern const CsStorageDriver cs_storage_posix;
extern const CsStorageDriver cs_storage_s3;

/* storage_s3.c: the replica's paths */
extern char *cs_storage_s3_root(const char **problem);
extern bool cs_storage_is_s3_path(const char *path);
extern bool cs_storage_s3_listed(const char *path, int64 *size,
								 const char **etag);
extern void cs_storage_s3_poll(void);
extern void cs_storage_s3_prefetch_off(void);

/*
 * Damage found in a file of the archive: XX001 (data_corrupted) naming the
 * file and the byte offset (in the uncompressed stream for *.gz files),
 * with the problem as errdetail.  Nothing is changed on disk.
 */
#define CS_DAMAGE_HINT \
	"The file is left as it is: restore it from a copy, or call changestream.new_generation() to start a new generation."

#define cs_segment_damage(path, offset, ...) \
	ereport(ERROR, \
			(errcode(ERRCODE_DATA_CORRUPTED), \
			 errmsg("changestream segment \"%s\" is damaged at offset %lld", \
					(path), (long long) (offset)), \
			 errdetail(__VA_ARGS__), \
			 errhint(CS_DAMAGE_HINT)))

#define cs_file_damage(path, offset, ...) \
	ereport(ERROR, \
			(errcode(ERRCODE_DATA_CORRUPTED), \
			 errmsg("changestream file \"%s\" is damaged at offset %lld", \
					(path), (long long) (offset)), \
			 errdetail(__VA_ARGS__), \
			 errhint(CS_DAMAGE_HINT)))

/* storage.c: the interface, through the archive's driver */
extern List *cs_storage_list(const char *path, bool missing_ok, bool *found);
extern int	cs_storage_stat(const char *path, bool follow,
							CsStorageInfo *info);
extern int	cs_open_regular_file(const char *path, bool missing_ok);
extern int	cs_open_counted_file(const char *path, bool missing_ok);
struct gzFile_s;
extern void cs_close_counted_file(struct gzFile_s *gz, int fd);
extern bool cs_read_small_file(const char *path, Size max_bytes,
							   StringInfo out, bool missing_ok);
extern void cs_write_file_durably(const char *path, const char *dir,
								  const char *data, size_t len);
extern void cs_durable_rename(const char *from, const char *to,
							  const char *dir);
extern bool cs_durable_unlink(const char *path, const char *dir);
extern void cs_remove_tree(const char *path);
extern void cs_make_dir(const char *path);
extern void cs_fsync_path(const char *path, bool isdir);
extern void cs_fsync_fd(int fd, const char *path);
extern List *cs_storage_list_entries(const char *path, int *err);
extern int	cs_storage_fstat(int fd, CsStorageInfo *info);
extern int	cs_storage_open(const char *path, int flags);
extern int	cs_storage_close(int fd);
extern int	cs_storage_open_stream(const char *path, int flags);
extern int	cs_storage_rename(const char *from, const char *to);
extern int	cs_storage_unlink(const char *path);
extern int	cs_storage_truncate(const char *path, int64 size);
extern int	cs_storage_remove_dir(const char *path);
extern bool cs_storage_try_remove_tree(const char *path);
extern int	cs_storage_lock(const char *path, const char *content,
							StringInfo holder);
extern void cs_storage_poll(void);

#endif							/* CS_STORAGE_H */
