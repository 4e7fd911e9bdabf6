/*-------------------------------------------------------------------------
 *
 * slot_wal.h
 *	  The WAL a slot of the local server retains (slot_wal.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SLOT_WAL_H
#define CS_SLOT_WAL_H

#include "access/xlogdefs.h"

typedef struct CsSlotWal
{
	const char *wal_status;		/* pg_replication_slots.wal_status */
	int64		retained_bytes; /* WAL from restart_lsn to the server's */
	bool		safe_known;		/* max_slot_wal_keep_size is set */
	int64		safe_wal_size;	/* pg_replication_slots.safe_wal_size */
	XLogRecPtr	restart_lsn;
	XLogRecPtr	confirmed_flush;
} CsSlotWal;

extern bool cs_slot_wal(const char *name, CsSlotWal *wal);
extern int64 cs_slot_wal_limit_bytes(void);

#endif							/* CS_SLOT_WAL_H */
