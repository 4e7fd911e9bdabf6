/*-------------------------------------------------------------------------
 *
 * recapture.h
 *	  Declarations of recapture.c: the snapshot the archiver takes after a
 *	  schema change that changed rows without archived changes.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RECAPTURE_H
#define CS_RECAPTURE_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"

extern void cs_recapture_session_start(void);
extern void cs_recapture_resume(const char *archive_dir, TimestampTz now);
extern void cs_recapture_relation(const char *payload, uint32 plen,
								  bool trusted);
extern void cs_recapture_begin(void);
extern void cs_recapture_insert(const char *payload, uint32 plen);
extern void cs_recapture_commit(XLogRecPtr end_lsn, TimestampTz now);
extern void cs_recapture_tick(TimestampTz now);

#endif							/* CS_RECAPTURE_H */
