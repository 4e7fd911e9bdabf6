/*-------------------------------------------------------------------------
 *
 * archive_dir.h
 *	  Declarations of archive_dir.c: the archive directory as a whole: the
 *	  configured directory, lock, leftovers.  The file operations (fsync,
 *	  durable rename, ...) are the storage interface's (storage.h).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_ARCHIVE_DIR_H
#define CS_ARCHIVE_DIR_H

#include "archive/storage.h"

extern int	cs_lock_archive(const char *directory);
extern int	cs_lock_archive_maintenance(const char *directory);
extern void cs_remove_tmp_files(const char *directory);
extern const char *cs_require_directory(void);

#endif							/* CS_ARCHIVE_DIR_H */
