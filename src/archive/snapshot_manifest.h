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

/*
 * Version of the snapshot file (manifest and COPY sections, docs/FORMAT.md
 * 3.2) that writers write; readers read every version from 1 to it.
 * Segment formats 2 and 3 changed only segments; snapshot version 2 added
 * each table's "key" and "sequences" to the manifest JSON.
 */
#define CS_SNAPSHOT_FORMAT_VERSION	2

struct stat;
extern bool cs_snapshot_read_manifest(const char *path, XLogRecPtr *lsn,
									  int *tables, int64 *rows,
									  struct stat *st);

#endif							/* CS_SNAPSHOT_MANIFEST_H */
