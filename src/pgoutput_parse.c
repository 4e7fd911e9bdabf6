/*-------------------------------------------------------------------------
 *
 * pgoutput_parse.c
 *	  Reads the few fields of pgoutput messages the archiver needs to place
 *	  them: transaction boundaries with their LSNs, Relation and Type
 *	  message identities, and logical decoding messages.  The rest of each
 *	  message is archived untouched.
 *
 * Source: "Logical Replication Message Formats" in the PostgreSQL
 * documentation (protocol-logicalrep-message-formats), protocol version 1,
 * and src/backend/replication/logical/proto.c which writes them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"


#include "generation_reader.h"
#include "pgoutput_parse.h"
#include "wire.h"

/*
 * cs_parse_pgoutput
 *	  Fill info from one pgoutput message (data starts at the type byte).
 *	  B: lsn = final LSN (the commit record's LSN).  C: lsn = commit LSN,
 *	  end_lsn = end LSN.  M: lsn, transactional.  R, Y: oid.  Returns false
 *	  when the message is too short for its type (the caller raises
 *	  protocol_violation).
 */
bool
cs_parse_pgoutput(const char *data, uint32 len, CsMessageInfo *info)
{
	memset(info, 0, sizeof(*info));
	if (len < 1)
		return false;
	info->type = data[0];
	switch (info->type)
	{
		case 'B':				/* Begin: final_lsn, commit time, xid */
			if (len < 1 + 8 + 8 + 4)
				return false;
			info->lsn = cs_get64(data + 1);
			break;
		case 'C':				/* Commit: flags, commit LSN, end LSN, time */
			if (len < 1 + 1 + 8 + 8 + 8)
				return false;
			info->lsn = cs_get64(data + 2);
			info->end_lsn = cs_get64(data + 10);
			break;
		case 'M':				/* Message: flags, LSN, prefix, content */
			if (len < 1 + 1 + 8)
				return false;
			info->transactional = (data[1] & 1) != 0;
			info->lsn = cs_get64(data + 2);
			break;
		case 'R':				/* Relation: OID, ... */
		case 'Y':				/* Type: OID, ... */
			if (len < 1 + 4)
				return false;
			info->oid = cs_get32(data + 1);
			break;
		default:
			break;
	}
	return true;
}
