/*-------------------------------------------------------------------------
 *
 * restore_progress.h
 *	  The progress of each running restore() in shared memory, for the
 *	  view changestream.restore_progress (restore_progress.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RESTORE_PROGRESS_H
#define CS_RESTORE_PROGRESS_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"

typedef enum CsRestorePhase
{
	CS_RESTORE_CHECKING = 1,	/* names, target, snapshot, schema history */
	CS_RESTORE_LOADING,			/* the snapshot through COPY */
	CS_RESTORE_APPLYING,		/* the archived transactions */
	CS_RESTORE_SEQUENCES,		/* setting sequences */
	CS_RESTORE_DRY_RUN			/* counting (dry_run) */
} CsRestorePhase;

extern void cs_progress_shmem_request(void);
extern void cs_progress_shmem_init(void);
extern void cs_progress_begin(uint64 generation, bool dry_run,
							  XLogRecPtr target_lsn, TimestampTz target_time);
extern void cs_progress_phase(CsRestorePhase phase);
extern void cs_progress_snapshot(XLogRecPtr lsn, int64 total_bytes);
extern void cs_progress_loading(const char *table, int64 done_bytes);
extern void cs_progress_applied(XLogRecPtr lsn, int64 transactions,
								int64 changes, int tables);
extern void cs_progress_end(void);

#endif							/* CS_RESTORE_PROGRESS_H */
