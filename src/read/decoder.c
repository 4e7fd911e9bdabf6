/*-------------------------------------------------------------------------
 *
 * decoder.c
 *	  The one decoder of archived pgoutput, shared by changes(), restore()
 *	  and verify().  Entries come from the generation reader
 *	  (generation_reader.c), which checks the segments' continuity and the
 *	  order of commit LSNs; each message is parsed with PostgreSQL's own
 *	  protocol readers (replication/logicalproto.h: logicalrep_read_begin,
 *	  _commit, _rel, _typ, _insert, _update, _delete, _truncate), the way
 *	  the built-in apply worker does (replication/logical/worker.c).
 *
 *	  A relation map is kept per read: Relation and Type messages from each
 *	  segment's preamble and from the stream replace the entry of their
 *	  OID, so every change is decoded with the Relation in force at its
 *	  LSN.  A message the readers cannot parse, trailing bytes after one, a
 *	  change for a relation with no Relation message before it, or a tuple
 *	  whose column count is not its Relation's is XX001 naming the file and
 *	  the frame's offset.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "libpq/pqformat.h"
#include "miscadmin.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "read/decoder.h"
#include "read/generation_reader.h"

typedef struct RelEntry
{
	Oid			oid;			/* hash key */
	LogicalRepRelation *rel;
	int32	   *typmods;		/* per column, from the same message */
} RelEntry;

typedef struct TypEntry
{
	Oid			oid;			/* hash key */
	char	   *nspname;
	char	   *typname;
} TypEntry;

struct CsDecoder
{
	MemoryContext cxt;			/* the decoder and its relation map */
	MemoryContext msg_cxt;		/* one message's data, reset per call */
	CsGenerationReader *reader;
	HTAB	   *rels;
	HTAB	   *types;
	bool		in_txn;
	XLogRecPtr	commit_lsn;
	TimestampTz commit_time;
	TransactionId xid;
	int			ordinal;
	XLogRecPtr	position;		/* position of record reached */
	TimestampTz last_send_time; /* newest send time of an entry read */
};

/*
 * cs_newest_generation
 *	  Returns the newest generation of the archive in directory.
 *	  Errors: 42704 (undefined_object) when the archive has none; file
 *	  access SQLSTATEs when generations/ cannot be read.
 */
static uint64
cs_newest_generation(const char *directory)
{
	List	   *gens = cs_list_generations(directory);

	if (gens == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("the archive in \"%s\" has no generation", directory)));
	return *(uint64 *) llast(gens);
}

/*
 * cs_resolve_generation
 *	  Returns the generation named by gen_text (16 lowercase hex digits) in
 *	  the archive in directory, or the newest when gen_text is NULL.
 *	  Errors: 22023 for a malformed name; 42704 when it does not exist or
 *	  the archive has no generation.
 */
uint64
cs_resolve_generation(const char *directory, const char *gen_text)
{
	uint64		generation;
	CsStorageInfo info;
	char	   *path;

	if (gen_text == NULL)
		return cs_newest_generation(directory);
	cs_validate_generation_arg(gen_text, &generation);
	path = cs_generation_path(directory, generation);
	if (cs_storage_stat(path, true, &info) != 0 ||
		info.type != CS_STORAGE_DIR)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("generation \"%s\" does not exist", gen_text),
				 errhint("Call changestream.generations() to list the generations.")));
	return generation;
}

/*
 * cs_decoder_open
 *	  Starts decoding a generation of the archive in directory.  start_bound
 *	  and end_bound (LSNs, InvalidXLogRecPtr for none) let the generation
 *	  reader skip whole segments; the caller still filters changes.  The
 *	  decoder lives in a child of CurrentMemoryContext.
 *	  Errors: as cs_genreader_open().
 */
CsDecoder *
cs_decoder_open(const char *directory, uint64 generation,
				XLogRecPtr start_bound, XLogRecPtr end_bound)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext,
											  "changestream decoder",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	CsDecoder  *d = palloc0(sizeof(CsDecoder));
	HASHCTL		ctl;

	d->cxt = cxt;
	d->msg_cxt = AllocSetContextCreate(cxt, "changestream decoder message",
									   ALLOCSET_DEFAULT_SIZES);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(RelEntry);
	ctl.hcxt = cxt;
	d->rels = hash_create("changestream decoder relations", 64, &ctl,
						  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	ctl.entrysize = sizeof(TypEntry);
	d->types = hash_create("changestream decoder types", 16, &ctl,
						   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	d->reader = cs_genreader_open(directory, generation, start_bound,
								  end_bound);
	MemoryContextSwitchTo(old);
	return d;
}

/*
 * The type modifiers of a Relation message, which logicalrep_read_rel()
 * reads past.  The message was just read whole by it, so its layout is
 * known to be sound.
 */
static int32 *
read_typmods(const char *data, int len, int natts)
{
	StringInfoData s;
	int32	   *typmods = palloc0(sizeof(int32) * Max(natts, 1));

	s.data = (char *) data;
	s.len = len;
	s.maxlen = len;
	s.cursor = 0;
	(void) pq_getmsgint(&s, 4);	/* relation OID */
	(void) pq_getmsgstring(&s);	/* namespace */
	(void) pq_getmsgstring(&s);	/* name */
	(void) pq_getmsgbyte(&s);	/* replica identity */
	(void) pq_getmsgint(&s, 2);	/* column count */
	for (int i = 0; i < natts; i++)
	{
		(void) pq_getmsgbyte(&s);	/* flags */
		(void) pq_getmsgstring(&s); /* name */
		(void) pq_getmsgint(&s, 4); /* type OID */
		typmods[i] = (int32) pq_getmsgint(&s, 4);
	}
	return typmods;
}

static LogicalRepRelation *
lookup_rel(CsDecoder *d, Oid oid, const CsReadItem *item)
{
	RelEntry   *e = hash_search(d->rels, &oid, HASH_FIND, NULL);

	if (e == NULL)
		cs_segment_damage(item->path, item->frame_offset,
						  "A change to relation OID %u comes before any Relation message for it.",
						  oid);
	return e->rel;
}

static void
check_tuple(const LogicalRepRelation *rel, const LogicalRepTupleData *tup,
			const CsReadItem *item)
{
	if (tup->ncols != rel->natts)
		cs_segment_damage(item->path, item->frame_offset,
						  "A change to \"%s.%s\" has %d columns; its Relation message has %d.",
						  rel->nspname, rel->relname, tup->ncols, rel->natts);
}

static void
remember_rel(CsDecoder *d, StringInfo s, const char *data, int len)
{
	MemoryContext old = MemoryContextSwitchTo(d->cxt);
	LogicalRepRelation *rel = logicalrep_read_rel(s);
	RelEntry   *e;
	bool		found;

	e = hash_search(d->rels, &rel->remoteid, HASH_ENTER, &found);
	e->rel = rel;
	e->typmods = read_typmods(data, len, rel->natts);
	MemoryContextSwitchTo(old);
}

static void
remember_typ(CsDecoder *d, StringInfo s)
{
	MemoryContext old = MemoryContextSwitchTo(d->cxt);
	LogicalRepTyp typ;
	TypEntry   *e;
	bool		found;

	logicalrep_read_typ(s, &typ);
	e = hash_search(d->types, &typ.remoteid, HASH_ENTER, &found);
	e->nspname = typ.nspname;
	e->typname = typ.typname;
	MemoryContextSwitchTo(old);
}

/* A Message message (logicalproto.h has no reader for it in every version). */
static void
read_message(StringInfo s, CsChange *c)
{
	uint8		flags = pq_getmsgbyte(s);
	int32		len;

	c->transactional = (flags & 1) != 0;
	(void) pq_getmsgint64(s);	/* its LSN: the entry's, already parsed */
	c->prefix = pq_getmsgstring(s);
	len = pq_getmsgint(s, 4);
	if (len < 0)
		pq_getmsgend(s);		/* raises the protocol error */
	c->content = pq_getmsgbytes(s, len);
	c->content_len = len;
}

/* BEGIN: the transaction's commit LSN, commit time and xid. */
static void
decode_begin(CsDecoder *d, StringInfo s, CsChange *c)
{
	LogicalRepBeginData b;

	logicalrep_read_begin(s, &b);
	d->in_txn = true;
	d->commit_lsn = b.final_lsn;
	d->commit_time = b.committime;
	d->xid = b.xid;
	d->ordinal = 0;
	c->kind = CS_CHANGE_BEGIN;
}

/*
 * UPDATE: the new tuple, and the old one ('K' key or 'O' whole row) when
 * the message carries it.  Errors: XX001 when a tuple does not fit the
 * relation.
 */
static void
decode_update(CsDecoder *d, const CsReadItem *item, StringInfo s, CsChange *c)
{
	Oid			relid;
	bool		has_old;

	c->kind = CS_CHANGE_UPDATE;
	c->old_kind = item->entry.len > 5 && item->entry.data[5] != 'N' ?
		item->entry.data[5] : 0;
	relid = logicalrep_read_update(s, &has_old, &c->oldtup, &c->newtup);
	if (!has_old)
		c->old_kind = 0;
	c->rel = lookup_rel(d, relid, item);
	check_tuple(c->rel, &c->newtup, item);
	if (has_old)
		check_tuple(c->rel, &c->oldtup, item);
}

/* TRUNCATE: its options and the relations it names, in order. */
static void
decode_truncate(CsDecoder *d, const CsReadItem *item, StringInfo s,
				CsChange *c)
{
	List	   *relids;
	ListCell   *lc;

	c->kind = CS_CHANGE_TRUNCATE;
	relids = logicalrep_read_truncate(s, &c->cascade, &c->restart_seqs);
	foreach(lc, relids)
		c->truncated = lappend(c->truncated,
							   lookup_rel(d, lfirst_oid(lc), item));
}

/* Decode one 'w' message of type c->kind's byte into c. */
static void
decode_message(CsDecoder *d, const CsReadItem *item, StringInfo s,
			   CsChange *c)
{
	char		type = item->entry.data[0];
	Oid			relid;

	switch (type)
	{
		case 'B':
			decode_begin(d, s, c);
			break;
		case 'C':
			{
				LogicalRepCommitData cd;

				logicalrep_read_commit(s, &cd);
				c->kind = CS_CHANGE_COMMIT;
				c->end_lsn = cd.end_lsn;
				break;
			}
		case 'R':
			remember_rel(d, s, item->entry.data + 1, item->entry.len - 1);
			c->kind = CS_CHANGE_RELATION;
			c->rel = lookup_rel(d, item->info.oid, item);
			break;
		case 'Y':
			remember_typ(d, s);
			c->kind = CS_CHANGE_TYPE;
			break;
		case 'I':
			c->kind = CS_CHANGE_INSERT;
			relid = logicalrep_read_insert(s, &c->newtup);
			c->rel = lookup_rel(d, relid, item);
			check_tuple(c->rel, &c->newtup, item);
			break;
		case 'U':
			decode_update(d, item, s, c);
			break;
		case 'D':
			c->kind = CS_CHANGE_DELETE;
			c->old_kind = item->entry.len > 5 ? item->entry.data[5] : 0;
			relid = logicalrep_read_delete(s, &c->oldtup);
			c->rel = lookup_rel(d, relid, item);
			check_tuple(c->rel, &c->oldtup, item);
			break;
		case 'T':
			decode_truncate(d, item, s, c);
			break;
		case 'M':
			c->kind = CS_CHANGE_MESSAGE;
			read_message(s, c);
			break;
		case 'O':
			{
				XLogRecPtr	origin_lsn;

				(void) logicalrep_read_origin(s, &origin_lsn);
				c->kind = CS_CHANGE_TYPE;	/* carries nothing to report */
				break;
			}
		default:
			cs_segment_damage(item->path, item->frame_offset,
							  "A pgoutput message has the unknown type byte 0x%02x.",
							  (unsigned char) type);
	}
	if (s->cursor != s->len)
		cs_segment_damage(item->path, item->frame_offset,
						  "A pgoutput message of type '%c' has %d bytes after its last field.",
						  type, s->len - s->cursor);
}

/*
 * Parse one message with the protocol readers.  They raise
 * protocol_violation (or an internal error) on a short or malformed
 * message: that is damage of the archive, reported as XX001 with the file
 * and the offset.  Other errors (a cancel, out of memory) pass unchanged.
 */
static void
parse_entry(CsDecoder *d, const CsReadItem *item, CsChange *c)
{
	StringInfoData s;
	MemoryContext cxt = CurrentMemoryContext;
	ErrorData  *volatile edata = NULL;

	s.data = (char *) item->entry.data + 1;
	s.len = item->entry.len - 1;
	s.maxlen = s.len;
	s.cursor = 0;
	PG_TRY();
	{
		if (item->entry.kind == CS_ENTRY_PREAMBLE)
		{
			if (item->entry.data[0] == 'R')
				remember_rel(d, &s, item->entry.data + 1, item->entry.len - 1);
			else if (item->entry.data[0] == 'Y')
				remember_typ(d, &s);
		}
		else
			decode_message(d, item, &s, c);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_PROTOCOL_VIOLATION &&
			edata->sqlerrcode != ERRCODE_INTERNAL_ERROR)
			PG_RE_THROW();
		FlushErrorState();
	}
	PG_END_TRY();
	if (edata != NULL)
		cs_segment_damage(item->path, item->frame_offset,
						  "A pgoutput message of type '%c' cannot be read: %s",
						  item->entry.data[0], edata->message);
}

/*
 * cs_decoder_next
 *	  Decodes the next message of the generation into *change: BEGIN,
 *	  COMMIT, each change, Relation and Type messages (after the map took
 *	  them in), and logical messages.  Segment preambles only feed the
 *	  map.  Returns false at the end (of the newest raw segment, only
 *	  complete transactions are read).
 *	  Errors: XX001 naming the file and offset (see the file header, and
 *	  cs_genreader_next()); file access SQLSTATEs on I/O; 57014 on cancel.
 */
bool
cs_decoder_next(CsDecoder *d, CsChange *change)
{
	CsReadItem	item;
	MemoryContext old;

	MemoryContextReset(d->msg_cxt);
	old = MemoryContextSwitchTo(d->msg_cxt);
	for (;;)
	{
		if (!cs_genreader_next(d->reader, &item))
		{
			MemoryContextSwitchTo(old);
			return false;
		}
		if (item.entry.kind == CS_ENTRY_MESSAGE ||
			item.entry.kind == CS_ENTRY_POSITION)
			d->last_send_time = Max(d->last_send_time, item.entry.send_time);
		if (item.entry.kind == CS_ENTRY_POSITION)
			d->position = Max(d->position, item.entry.wal_end);
		if (item.entry.kind != CS_ENTRY_MESSAGE &&
			item.entry.kind != CS_ENTRY_PREAMBLE)
			continue;
		if (item.entry.len < 1)
			cs_segment_damage(item.path, item.frame_offset,
							  "An entry holds an empty pgoutput message.");
		memset(change, 0, sizeof(CsChange));
		parse_entry(d, &item, change);
		if (item.entry.kind == CS_ENTRY_PREAMBLE)
			continue;
		break;
	}
	MemoryContextSwitchTo(old);

	change->path = item.path;
	change->frame_offset = item.frame_offset;
	change->in_txn = d->in_txn;
	if (d->in_txn)
	{
		change->commit_lsn = d->commit_lsn;
		change->commit_time = d->commit_time;
		change->xid = d->xid;
		if (change->kind == CS_CHANGE_INSERT || change->kind == CS_CHANGE_UPDATE ||
			change->kind == CS_CHANGE_DELETE || change->kind == CS_CHANGE_MESSAGE)
			change->ordinal = ++d->ordinal;
		else if (change->kind == CS_CHANGE_TRUNCATE)
		{
			change->ordinal = d->ordinal + 1;
			d->ordinal += list_length(change->truncated);
		}
	}
	else
	{
		change->commit_lsn = item.info.lsn;
		change->xid = InvalidTransactionId;
		change->ordinal = 1;
	}
	if (change->kind == CS_CHANGE_COMMIT)
	{
		d->in_txn = false;
		d->position = Max(d->position, change->end_lsn);
	}
	else if (change->kind == CS_CHANGE_MESSAGE && !change->in_txn)
		d->position = Max(d->position, change->commit_lsn + 1);
	return true;
}

/*
 * cs_decoder_type_name
 *	  Returns the SQL name of an archived column type, palloc'd: a built-in
 *	  type (OID below FirstNormalObjectId, the same on every server) by
 *	  format_type_with_typemod(); another one by the schema-qualified name
 *	  its Type message gave.  NULL when no Type message named it.
 */
char *
cs_decoder_type_name(CsDecoder *d, Oid typid, int32 typmod)
{
	TypEntry   *e;

	if (typid < FirstNormalObjectId)
		return format_type_with_typemod(typid, typmod);
	e = hash_search(d->types, &typid, HASH_FIND, NULL);
	if (e == NULL)
		return NULL;
	return quote_qualified_identifier(e->nspname[0] ? e->nspname : "pg_catalog",
									  e->typname);
}

/*
 * cs_decoder_typmods
 *	  Returns the type modifiers of rel's columns (from the same Relation
 *	  message), or NULL if rel is not the one in force.
 */
const int32 *
cs_decoder_typmods(CsDecoder *d, LogicalRepRelation *rel)
{
	RelEntry   *e = hash_search(d->rels, &rel->remoteid, HASH_FIND, NULL);

	return (e != NULL && e->rel == rel) ? e->typmods : NULL;
}

/*
 * cs_decoder_set_time_bounds
 *	  Lets the decoder skip sealed segments with no transaction committed
 *	  in the bounds (cs_genreader_set_time_bounds()); the caller still
 *	  filters by commit time and wants no message outside a transaction.
 *	  Returns nothing.
 */
void
cs_decoder_set_time_bounds(CsDecoder *d, bool has_start, TimestampTz start_time,
						   bool has_end, TimestampTz end_time)
{
	cs_genreader_set_time_bounds(d->reader, has_start, start_time, has_end,
								 end_time);
}

/*
 * cs_decoder_set_stop_time
 *	  For a caller that stops at its first transaction committed after
 *	  stop_time: the decoder ends before a sealed segment all of whose
 *	  transactions committed after it (cs_genreader_set_stop_time()), and
 *	  cs_decoder_stopped() says so.  Returns nothing.
 */
void
cs_decoder_set_stop_time(CsDecoder *d, TimestampTz stop_time)
{
	cs_genreader_set_stop_time(d->reader, stop_time);
}

/*
 * cs_decoder_set_memory
 *	  Lets the decoder pass over the segments the caller's memory knows,
 *	  and tells it of those read whole (cs_genreader_set_memory()).
 *	  Returns nothing.
 */
void
cs_decoder_set_memory(CsDecoder *d, const CsSegmentMemory *memory)
{
	cs_genreader_set_memory(d->reader, memory);
}

/*
 * cs_decoder_stopped
 *	  Returns true when decoding ended before a sealed segment whose
 *	  transactions all committed after the stop time.
 */
bool
cs_decoder_stopped(CsDecoder *d)
{
	return cs_genreader_stopped(d->reader);
}

/*
 * cs_decoder_reached
 *	  What the archive proves about the stream read so far: *position, the
 *	  position of record (every transaction committing before it has been
 *	  read), and *send_time, the newest send time of an entry read (the
 *	  server had sent everything up to *position by then).
 */
void
cs_decoder_reached(CsDecoder *d, XLogRecPtr *position, TimestampTz *send_time)
{
	*position = d->position;
	*send_time = d->last_send_time;
}

/*
 * cs_decoder_close
 *	  Closes the generation reader and frees the decoder.
 */
void
cs_decoder_close(CsDecoder *d)
{
	cs_genreader_close(d->reader);
	MemoryContextDelete(d->cxt);
}

/*
 * cs_relation_names
 *	  The relation names given to changes() or restore() as a text[]
 *	  ("schema.table" or "table"), as a List of palloc'd C strings; NULL
 *	  elements are left out.
 */
List *
cs_relation_names(ArrayType *arr)
{
	Datum	   *elems;
	bool	   *elem_nulls;
	int			n;
	List	   *result = NIL;

	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems,
					  &elem_nulls, &n);
	for (int i = 0; i < n; i++)
		if (!elem_nulls[i])
			result = lappend(result, TextDatumGetCString(elems[i]));
	return result;
}
