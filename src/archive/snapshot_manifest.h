/*-------------------------------------------------------------------------
 *
 * snapshot_manifest.h
 *	  Reading the manifest at the start of a snapshot file
 *	  (snapshot_manifest.c; docs/FORMAT.md section 3.2).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SNAPSHOT_MANIFEST_H
#define CS_SNAPSHOT_MANIFEST_H

#include "access/xlogdefs.h"

struct stat;
extern bool cs_snapshot_read_manifest(const char *path, XLogRecPtr *lsn,
									  int *tables, int64 *rows,
									  struct stat *st);

#endif							/* CS_SNAPSHOT_MANIFEST_H */
