/*-------------------------------------------------------------------------
 *
 * generation_span.h
 *	  Declarations of generation_span.c: where a generation ends, and the
 *	  gap in the archive's history before it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_GENERATION_SPAN_H
#define CS_GENERATION_SPAN_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

/*
 * The history missing between a generation and the one before it: from
 * the previous generation's end to this generation's start.
 */
typedef struct CsGap
{
	uint64		previous;		/* the generation before */
	bool		start_known;	/* the previous generation's end could be read */
	XLogRecPtr	start_lsn;		/* the previous generation's end_lsn */
	TimestampTz start_time;		/* its last archived commit time; 0: none */
	XLogRecPtr	end_lsn;		/* this generation's start_lsn */
	TimestampTz end_time;		/* its opening snapshot's time */
} CsGap;

extern XLogRecPtr cs_generation_end(const char *directory, uint64 generation,
									List *segments, XLogRecPtr start_lsn,
									TimestampTz *last_commit_time);
extern bool cs_generation_gap(const char *directory, List *gens,
							  uint64 generation, CsGap *gap);
extern bool cs_handoff_time(const char *directory, List *gens,
							uint64 generation, uint64 *previous,
							TimestampTz *from);

#endif							/* CS_GENERATION_SPAN_H */
