/*-------------------------------------------------------------------------
 *
 * segment_recovery.h
 *	  Declarations of segment_recovery.c: crash recovery of the newest
 *	  segment of a generation at session start.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SEGMENT_RECOVERY_H
#define CS_SEGMENT_RECOVERY_H

#include "access/xlogdefs.h"

extern bool cs_writer_recover(const char *directory, uint64 generation,
							  XLogRecPtr confirmed_flush,
							  XLogRecPtr *position);

#endif							/* CS_SEGMENT_RECOVERY_H */
