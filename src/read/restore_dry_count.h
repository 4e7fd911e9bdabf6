/*-------------------------------------------------------------------------
 *
 * restore_dry_count.h
 *	  restore()'s dry run: the rows of a snapshot's table section the real
 *	  run would load, with its row filter (restore_dry_count.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RESTORE_DRY_COUNT_H
#define CS_RESTORE_DRY_COUNT_H

#include "nodes/pg_list.h"

#include "archive/snapshot_reader.h"

extern int64 cs_dry_count_section(CsSnapshotReader *reader, const char *path,
								  const char *name, const char *progress_table,
								  List *pairs, Node *row_filter);

#endif							/* CS_RESTORE_DRY_COUNT_H */
