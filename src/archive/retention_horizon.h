/*-------------------------------------------------------------------------
 *
 * retention_horizon.h
 *	  The retention horizon of each generation, and the listing of its
 *	  segments and snapshots with the horizon applied
 *	  (retention_horizon.c; docs/DESIGN.md section 11).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RETENTION_HORIZON_H
#define CS_RETENTION_HORIZON_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

/*
 * A generation's retention horizon (generations/<gen>/retention): what
 * retention has decided to keep.  Segments with a lower index and
 * snapshots with a lower LSN are being deleted and readers ignore them.
 */
typedef struct CsHorizon
{
	int64		first_segment;	/* lowest segment index kept */
	XLogRecPtr	snapshot_lsn;	/* oldest snapshot kept */
	TimestampTz snapshot_time;	/* its snapshot_time */
} CsHorizon;

extern bool cs_read_horizon(const char *directory, uint64 generation,
							CsHorizon *horizon);
extern void cs_write_horizon(const char *directory, uint64 generation,
							 const CsHorizon *horizon);
extern char *cs_horizon_text(const CsHorizon *horizon);
extern List *cs_list_segments(const char *directory, uint64 generation);
extern void cs_check_segment_sequence(const char *directory, uint64 generation,
									  List *segments);
extern List *cs_list_snapshots(const char *directory, uint64 generation);

#endif							/* CS_RETENTION_HORIZON_H */
