/*-------------------------------------------------------------------------
 *
 * segment_schema.c
 *	  The schema a segment carries (docs/FORMAT.md, section 9.2): every
 *	  Relation ('R') and Type ('Y') message in force, by OID, and which of
 *	  them the active segment already holds.  Before a change (Insert,
 *	  Update, Delete, Truncate) whose relation the segment does not hold
 *	  yet, the writer adds copies of that relation's Type messages and of
 *	  its Relation message as preamble entries, as pgoutput itself sends
 *	  them before a relation's first use in a session.  A segment thus
 *	  carries only the schema of the relations it uses, each before its
 *	  first use, and decodes on its own.
 *
 *	  Which segment holds what is an epoch number: a new segment starts a
 *	  new epoch, and an entry whose epoch is the current one is in the
 *	  segment.
 *
 *	  The messages' fields are read by pgoutput_parse.c, the one module
 *	  that knows their layout.
 *
 * Source: "Logical Replication Message Formats" in the PostgreSQL
 * documentation (protocol version 1: Relation, Type, Insert, Update,
 * Delete, Truncate); send_relation_and_attrs() in
 * src/backend/replication/pgoutput/pgoutput.c, which sends a Type message
 * for each column of a non-built-in type before the Relation message.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/hsearch.h"

#include "archive/pgoutput_parse.h"
#include "archive/segment_schema.h"

typedef struct SchemaKey
{
	Oid			oid;
	char		type;			/* 'R' or 'Y' */
	char		pad[3];			/* zeroed: the key is hashed as bytes */
} SchemaKey;

typedef struct SchemaEntry
{
	SchemaKey	key;
	uint32		len;
	char	   *data;			/* the message, type byte first */
	uint64		epoch;			/* the segment epoch it was last put in */
	int			ntypes;			/* R: column type OIDs */
	Oid		   *types;
} SchemaEntry;

static MemoryContext schema_cxt = NULL;
static HTAB *schema = NULL;
static uint64 epoch = 1;

static SchemaEntry *
lookup(char type, Oid oid, bool create)
{
	SchemaKey	key;
	SchemaEntry *se;
	bool		found;

	memset(&key, 0, sizeof(key));
	key.type = type;
	key.oid = oid;
	se = hash_search(schema, &key, create ? HASH_ENTER : HASH_FIND, &found);
	if (se != NULL && !found)
		memset((char *) se + sizeof(SchemaKey), 0,
			   sizeof(SchemaEntry) - sizeof(SchemaKey));
	return se;
}

/*
 * The column type OIDs of a Relation message (cs_pgoutput_column_types()),
 * in the schema's context.  A message that does not parse gives none.
 */
static void
parse_column_types(SchemaEntry *se)
{
	MemoryContext old = MemoryContextSwitchTo(schema_cxt);

	se->types = cs_pgoutput_column_types(se->data, se->len, &se->ntypes);
	MemoryContextSwitchTo(old);
}

/*
 * cs_schema_reset
 *	  Forget everything; the table lives in cxt (the writer's context,
 *	  whose reset frees it).  Used at session start and on the error path.
 */
void
cs_schema_reset(MemoryContext cxt)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(SchemaKey);
	ctl.entrysize = sizeof(SchemaEntry);
	ctl.hcxt = cxt;
	schema_cxt = cxt;
	schema = hash_create("changestream schema", 256, &ctl,
						 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	epoch++;
}

/*
 * cs_schema_new_segment
 *	  A new segment starts: it holds no Relation or Type message yet.
 */
void
cs_schema_new_segment(void)
{
	epoch++;
}

/*
 * cs_schema_note
 *	  Remember a Relation or Type message (data, len bytes; type 'R' or
 *	  'Y'; oid its relation or type OID) as the one in force for its OID.
 *	  in_segment: it is (being) written to the active segment.
 */
void
cs_schema_note(const char *data, uint32 len, char type, Oid oid,
			   bool in_segment)
{
	SchemaEntry *se = lookup(type, oid, true);
	bool		same;

	same = se->data != NULL && se->len == len && memcmp(se->data, data, len) == 0;
	if (!same)
	{
		if (se->data != NULL)
			pfree(se->data);
		if (se->types != NULL)
			pfree(se->types);
		se->data = MemoryContextAlloc(schema_cxt, len);
		memcpy(se->data, data, len);
		se->len = len;
		se->epoch = 0;
		se->types = NULL;
		se->ntypes = 0;
		if (type == 'R')
			parse_column_types(se);
	}
	if (in_segment)
		se->epoch = epoch;
}

/* Emit a Relation message with its Type messages unless the segment has it. */
static void
require_relation(Oid relid, CsSchemaEmit emit, void *arg)
{
	SchemaEntry *rel = lookup('R', relid, false);
	int			i;

	if (rel == NULL || rel->epoch == epoch)
		return;
	for (i = 0; i < rel->ntypes; i++)
	{
		SchemaEntry *typ = lookup('Y', rel->types[i], false);

		if (typ != NULL && typ->epoch != epoch)
		{
			emit(typ->data, typ->len, arg);
			typ->epoch = epoch;
		}
	}
	emit(rel->data, rel->len, arg);
	rel->epoch = epoch;
}

/*
 * cs_schema_require
 *	  Before a pgoutput message (data, len bytes) is added to the active
 *	  segment: if it is a change (Insert, Update, Delete, Truncate: the
 *	  relations cs_pgoutput_relids() finds in it), call emit for each Type
 *	  and Relation message of its relations that the segment does not hold
 *	  yet, in the order pgoutput sends them (types first).  Relations not
 *	  seen in this session (pgoutput always sends one before its first use)
 *	  are left alone.  Never raises.
 */
void
cs_schema_require(const char *data, uint32 len, CsSchemaEmit emit, void *arg)
{
	uint32		n;

	if (schema == NULL)
		return;
	n = cs_pgoutput_relids(data, len);
	for (uint32 i = 0; i < n; i++)
		require_relation(cs_pgoutput_relid(data, i), emit, arg);
}
