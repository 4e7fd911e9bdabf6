/*-------------------------------------------------------------------------
 *
 * generation_timelines.h
 *	  The promotions a generation was continued across
 *	  (generation_timelines.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_GENERATION_TIMELINES_H
#define CS_GENERATION_TIMELINES_H

#include "access/xlogdefs.h"
#include "archive/generation.h"

extern uint32 cs_generation_timeline(const char *directory,
									 const CsIdentity *identity);
extern void cs_add_generation_timeline(const char *directory,
									   const CsIdentity *identity,
									   uint32 timeline, XLogRecPtr switch_lsn);

#endif							/* CS_GENERATION_TIMELINES_H */
