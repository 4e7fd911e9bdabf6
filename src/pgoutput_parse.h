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

typedef struct CsMessageInfo
{
	char		type;			/* pgoutput message type byte */
	XLogRecPtr	lsn;			/* B: final (commit) LSN; C: commit LSN; M:
								 * message LSN */
	XLogRecPtr	end_lsn;		/* C: end LSN */
	bool		transactional;	/* M: flag */
	Oid			oid;			/* R: relation OID; Y: type OID */
} CsMessageInfo;

extern bool cs_parse_pgoutput(const char *data, uint32 len,
							  CsMessageInfo *info);

#endif							/* CS_PGOUTPUT_PARSE_H */
