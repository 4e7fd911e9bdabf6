/*-------------------------------------------------------------------------
 *
 * archive_dir.h
 *	  Declarations of archive_dir.c: the archive directory as a whole: fsync,
 *	  durable rename, lock, leftovers.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_ARCHIVE_DIR_H
#define CS_ARCHIVE_DIR_H


extern void cs_fsync_path(const char *path, bool isdir);
extern void cs_fsync_fd(int fd, const char *path);
extern void cs_make_dir(const char *path);
extern int	cs_lock_archive(const char *directory);
extern int	cs_lock_archive_compressor(const char *directory);
extern void cs_remove_tmp_files(const char *directory);
extern bool cs_durable_unlink(const char *path, const char *dir);
extern void cs_durable_rename(const char *from, const char *to,
							  const char *dir);
extern void cs_write_file_durably(const char *path, const char *dir,
								  const char *data, size_t len);
extern const char *cs_require_directory(void);

#endif							/* CS_ARCHIVE_DIR_H */
