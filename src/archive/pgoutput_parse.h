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

/* sizes of the fixed-size messages (logicalrep_write_begin(), _commit()) */
#define CS_PGOUTPUT_BEGIN_SIZE	21	/* 'B', u64 final LSN, i64 time, u32 xid */
#define CS_PGOUTPUT_COMMIT_SIZE 26	/* 'C', u8 flags, u64 commit LSN, u64 end
									 * LSN, i64 commit time */

typedef struct CsMessageInfo
{
	char		type;			/* pgoutput message type byte */
	XLogRecPtr	lsn;			/* B: final (commit) LSN; C: commit LSN; M:
								 * message LSN */
	XLogRecPtr	end_lsn;		/* C: end LSN */
	TimestampTz commit_time;	/* B, C: commit time */
	TransactionId xid;			/* B: xid */
	uint8		flags;			/* C, M: flags byte */
	bool		transactional;	/* M: flag */
	Oid			oid;			/* R: relation OID; Y: type OID */
	const char *nspname;		/* R, Y: namespace and name, into the */
	const char *relname;		/* message; NULL unless both are terminated */
	const char *prefix;			/* M: the prefix, into the message; NULL
								 * unless terminated */
} CsMessageInfo;

extern bool cs_parse_pgoutput(const char *data, uint32 len,
							  CsMessageInfo *info);
extern const char *cs_check_pgoutput(const char *data, uint32 len);
extern uint32 cs_pgoutput_relids(const char *data, uint32 len);
extern Oid	cs_pgoutput_relid(const char *data, uint32 nth);
extern Oid *cs_pgoutput_column_types(const char *data, uint32 len,
									 int *ntypes);
extern void cs_pgoutput_build_begin(char *buf, XLogRecPtr final_lsn,
									TimestampTz commit_time,
									TransactionId xid);
extern void cs_pgoutput_build_commit(char *buf, uint8 flags,
									 XLogRecPtr commit_lsn, XLogRecPtr end_lsn,
									 TimestampTz commit_time);

#endif							/* CS_PGOUTPUT_PARSE_H */
