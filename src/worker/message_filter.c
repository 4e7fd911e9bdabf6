/*-------------------------------------------------------------------------
 *
 * message_filter.c
 *	  Which logical decoding messages (pg_logical_emit_message(), pgoutput
 *	  message type 'M') the archiver keeps: those whose prefix is listed in
 *	  changestream.message_prefixes.  Any role that can log in can emit
 *	  such messages, of any size, so archiving them all would let any role
 *	  fill the archive's disk and write records that look like audit
 *	  records.  The default, an empty list, archives none; '*' archives
 *	  all; otherwise a message is kept when its prefix equals one of the
 *	  listed prefixes (case sensitive, as the prefix is).
 *
 *	  The list is parsed with SplitGUCList() (src/backend/utils/adt/
 *	  varlena.c), as core parses list settings that are not identifiers
 *	  (no down-casing, no truncation; double quotes protect commas).
 *
 * Source: the Message message of "Logical Replication Message Formats"
 * (protocol-logicalrep-message-formats), protocol version 1: Byte1('M'),
 * Int8 flags, Int64 LSN, String prefix, Int32 length, Byte[n] content.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "nodes/pg_list.h"
#include "utils/varlena.h"

#include "base/guc.h"
#include "worker/message_filter.h"

/*
 * cs_message_archived
 *	  Should a pgoutput Message ('M') with this prefix (as
 *	  cs_parse_pgoutput() read it) be archived under
 *	  changestream.message_prefixes?  A message too short to hold its
 *	  prefix (prefix NULL) is archived (the archive keeps what the server
 *	  sent; the readers report it).  Never raises.
 */
bool
cs_message_archived(const char *prefix)
{
	char	   *copy;
	List	   *items = NIL;
	ListCell   *lc;
	bool		keep = false;

	if (cs_message_prefixes == NULL || cs_message_prefixes[0] == '\0')
		return false;
	if (prefix == NULL)
		return true;

	copy = pstrdup(cs_message_prefixes);
	if (!SplitGUCList(copy, ',', &items))
		keep = true;			/* cannot happen: the check hook parsed it */
	foreach(lc, items)
	{
		const char *item = lfirst(lc);

		if (strcmp(item, "*") == 0 || strcmp(item, prefix) == 0)
		{
			keep = true;
			break;
		}
	}
	list_free(items);
	pfree(copy);
	return keep;
}
