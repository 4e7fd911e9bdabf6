/*-------------------------------------------------------------------------
 *
 * pgoutput_parse.h
 *	  Declarations of pgoutput_parse.c: the few pgoutput fields the archive
 *	  needs.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_PGOUTPUT_PARSE_H
#define CS_PGOUTPUT_PARSE_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"

typedef struct CsMessageInfo
{
	char		type;			/* pgoutput message type byte */
	XLogRecPtr	lsn;			/* B: final (commit) LSN; C: commit LSN; M:
								 * message LSN */
	XLogRecPtr	end_lsn;		/* C: end LSN */
	TimestampTz commit_time;	/* B, C: commit time */
	bool		transactional;	/* M: flag */
	Oid			oid;			/* R: relation OID; Y: type OID */
} CsMessageInfo;

extern bool cs_parse_pgoutput(const char *data, uint32 len,
							  CsMessageInfo *info);
extern const char *cs_check_pgoutput(const char *data, uint32 len);
extern uint32 cs_pgoutput_relids(const char *data, uint32 len);
extern Oid	cs_pgoutput_relid(const char *data, uint32 nth);

#endif							/* CS_PGOUTPUT_PARSE_H */
