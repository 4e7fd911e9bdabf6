/*-------------------------------------------------------------------------
 *
 * retention.h
 *	  Retention: the restorable window, the retention horizon recorded in
 *	  each generation, the readers' pins that retention honours, and the
 *	  compressor's retention runs.  See retention.c, retention_horizon.c and
 *	  reader_pins.c, and docs/DESIGN.md section 11.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RETENTION_H
#define CS_RETENTION_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "utils/elog.h"

#include "archive_layout.h"

/* ---------- guc.c ---------- */

extern int	cs_retention_s;		/* changestream.retention, 0 = keep all */

/* ---------- retention_horizon.c ---------- */

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
extern List *cs_list_segments(const char *directory, uint64 generation);
extern void cs_check_segment_sequence(const char *directory, uint64 generation,
									  List *segments);
extern List *cs_list_snapshots(const char *directory, uint64 generation);

/* ---------- reader_pins.c ---------- */

#define CS_PIN_ALL_GENERATIONS	0

extern Size cs_pins_shmem_size(void);
extern void cs_pins_shmem_init(void);
extern void cs_pin_read(uint64 generation, XLogRecPtr oldest_lsn);
extern bool cs_pinned(uint64 generation, XLogRecPtr *oldest_lsn, pid_t *pid);
extern void cs_pin_reader_begin(void);
extern void cs_pin_reader_end(void);
extern void cs_pin_advance(uint64 generation, XLogRecPtr lsn);
extern void cs_pin_call_begin(void);
extern void cs_pin_call_end(void);
extern void cs_pins_lock(void);
extern void cs_pins_unlock(void);
extern void cs_retention_status_set(TimestampTz at, int64 freed_bytes);
extern TimestampTz cs_retention_status_get(int64 *freed_bytes);
extern void cs_retention_held_set(TimestampTz now, pid_t pid, int64 bytes);
extern TimestampTz cs_retention_held_get(pid_t *pid, int64 *bytes);

/* ---------- retention.c ---------- */

extern void cs_retention_reset(void);
extern bool cs_retention_step(const char *directory, TimestampTz now,
							  bool may_plan);
extern void cs_retention_failed(ErrorData *edata);
extern long cs_retention_retry_ms(void);

#endif							/* CS_RETENTION_H */
