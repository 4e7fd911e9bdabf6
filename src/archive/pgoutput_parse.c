/*-------------------------------------------------------------------------
 *
 * pgoutput_parse.c
 *	  The one module that knows the byte layout of pgoutput messages on
 *	  the write side.  Reads the few fields the archiver needs to place
 *	  them: transaction boundaries with their LSNs, Relation and Type
 *	  message identities, and logical decoding messages; the relations a
 *	  change names and the column types of a Relation message (the schema
 *	  preamble, segment_schema.c).  The rest of each message is archived
 *	  untouched.  Format version 3 stores BEGIN and COMMIT as fields
 *	  (segment_format.c), which are taken from the parsed message and
 *	  rebuilt into the message here.
 *
 *	  The readers of the archive also check every archived message to its
 *	  last byte (cs_check_pgoutput()), as docs/FORMAT.md section 11.5
 *	  requires: a message that does not parse is damage, whatever reads
 *	  it (wal_records() returns the bytes without decoding them).
 *
 * Source: "Logical Replication Message Formats" in the PostgreSQL
 * documentation (protocol-logicalrep-message-formats), protocol version 1,
 * and src/backend/replication/logical/proto.c which writes them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"

#include "archive/pgoutput_parse.h"
#include "base/wire.h"

/*
 * The namespace and name strings after the OID of a Relation or Type
 * message, when both end inside the message.
 */
static void
parse_names(const char *data, uint32 len, CsMessageInfo *info)
{
	const char *nsp = data + 1 + 4;
	const char *end = data + len;
	const char *rel;

	rel = memchr(nsp, '\0', end - nsp);
	if (rel == NULL)
		return;
	rel++;
	if (memchr(rel, '\0', end - rel) == NULL)
		return;
	info->nspname = nsp;
	info->relname = rel;
}

/*
 * cs_parse_pgoutput
 *	  Fill info from one pgoutput message (data starts at the type byte,
 *	  len bytes).  B: lsn = final LSN (the commit record's LSN), xid.  C:
 *	  flags, lsn = commit LSN, end_lsn = end LSN; B and C: commit_time.  M:
 *	  flags, lsn, transactional, and prefix when it is terminated inside
 *	  the message.  R, Y: oid, and nspname and relname when
 *	  both strings are terminated inside the message.  This is the one
 *	  place that knows where these fields lie: the archiver parses each
 *	  message once and hands info down to the writer and the segment
 *	  encoder.  Returns false when the message is too short for its type
 *	  (the caller raises protocol_violation).
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
			info->commit_time = (TimestampTz) cs_get64(data + 9);
			info->xid = cs_get32(data + 17);
			break;
		case 'C':				/* Commit: flags, commit LSN, end LSN, time */
			if (len < 1 + 1 + 8 + 8 + 8)
				return false;
			info->flags = (uint8) data[1];
			info->lsn = cs_get64(data + 2);
			info->end_lsn = cs_get64(data + 10);
			info->commit_time = (TimestampTz) cs_get64(data + 18);
			break;
		case 'M':				/* Message: flags, LSN, prefix, content */
			if (len < 1 + 1 + 8)
				return false;
			info->flags = (uint8) data[1];
			info->transactional = (data[1] & 1) != 0;
			info->lsn = cs_get64(data + 2);
			if (memchr(data + 1 + 1 + 8, '\0', len - (1 + 1 + 8)) != NULL)
				info->prefix = data + 1 + 1 + 8;
			break;
		case 'R':				/* Relation: OID, ... */
		case 'Y':				/* Type: OID, ... */
			if (len < 1 + 4)
				return false;
			info->oid = cs_get32(data + 1);
			parse_names(data, len, info);
			break;
		default:
			break;
	}
	return true;
}

/* A bounds-checked cursor over one message, for cs_check_pgoutput(). */
typedef struct MsgCursor
{
	const char *data;
	uint32		len;
	uint32		pos;
	const char *problem;		/* first problem found, or NULL */
} MsgCursor;

static bool
take(MsgCursor *c, uint32 n)
{
	if (c->problem != NULL)
		return false;
	if (n > c->len - c->pos)
	{
		c->problem = psprintf("It ends after %u bytes, inside a field that needs %u more.",
							  c->len, n - (c->len - c->pos));
		return false;
	}
	c->pos += n;
	return true;
}

static uint32
take_u32(MsgCursor *c)
{
	if (!take(c, 4))
		return 0;
	return cs_get32(c->data + c->pos - 4);
}

static uint16
take_u16(MsgCursor *c)
{
	if (!take(c, 2))
		return 0;
	return ((uint16) (unsigned char) c->data[c->pos - 2] << 8) |
		(unsigned char) c->data[c->pos - 1];
}

static char
take_byte(MsgCursor *c)
{
	if (!take(c, 1))
		return '\0';
	return c->data[c->pos - 1];
}

static void
take_string(MsgCursor *c)
{
	const char *nul;

	if (c->problem != NULL)
		return;
	nul = memchr(c->data + c->pos, '\0', c->len - c->pos);
	if (nul == NULL)
		c->problem = psprintf("A string starting at byte %u has no terminating zero byte.",
							  c->pos);
	else
		c->pos = (nul - c->data) + 1;
}

/* TupleData: Int16 column count, then per column 'n', 'u', or 't'/'b'. */
static void
take_tuple(MsgCursor *c)
{
	uint16		ncols = take_u16(c);

	for (uint16 i = 0; i < ncols && c->problem == NULL; i++)
	{
		char		kind = take_byte(c);

		if (c->problem != NULL)
			break;
		if (kind == 't' || kind == 'b')
			(void) take(c, take_u32(c));
		else if (kind != 'n' && kind != 'u')
			c->problem = psprintf("Column %u of a tuple has the unknown kind byte 0x%02x.",
								  i + 1, (unsigned char) kind);
	}
}

/* An old tuple ('K' or 'O') or the new one ('N'), by the byte before it. */
static void
expect_byte(MsgCursor *c, const char *allowed, const char *what)
{
	char		b = take_byte(c);

	if (c->problem == NULL && (b == '\0' || strchr(allowed, b) == NULL))
		c->problem = psprintf("The byte before its %s is 0x%02x, not one of \"%s\".",
							  what, (unsigned char) b, allowed);
}

/*
 * cs_check_pgoutput
 *	  Checks one archived pgoutput message (protocol version 1, data
 *	  starting at its type byte) to its last byte, by the layouts of
 *	  docs/FORMAT.md section 12: every field present, every string
 *	  terminated, every count and length within the message, no byte left
 *	  over, and a type byte that protocol version 1 sends.  Returns NULL
 *	  when it is sound, else the problem, for errdetail.
 */
const char *
cs_check_pgoutput(const char *data, uint32 len)
{
	MsgCursor	c = {data, len, 0, NULL};
	char		type;

	if (len < 1)
		return "It is empty.";
	type = take_byte(&c);
	switch (type)
	{
		case 'B':				/* final LSN, commit time, xid */
			(void) take(&c, 8 + 8 + 4);
			break;
		case 'C':				/* flags, commit LSN, end LSN, commit time */
			(void) take(&c, 1 + 8 + 8 + 8);
			break;
		case 'O':				/* origin LSN, origin name */
			(void) take(&c, 8);
			take_string(&c);
			break;
		case 'R':				/* OID, namespace, name, identity, columns */
			{
				uint16		natts;

				(void) take(&c, 4);
				take_string(&c);
				take_string(&c);
				(void) take(&c, 1);
				natts = take_u16(&c);
				for (uint16 i = 0; i < natts && c.problem == NULL; i++)
				{
					(void) take(&c, 1);
					take_string(&c);
					(void) take(&c, 4 + 4);
				}
				break;
			}
		case 'Y':				/* OID, namespace, name */
			(void) take(&c, 4);
			take_string(&c);
			take_string(&c);
			break;
		case 'I':				/* relation OID, 'N', new tuple */
			(void) take(&c, 4);
			expect_byte(&c, "N", "new tuple");
			take_tuple(&c);
			break;
		case 'U':				/* relation OID, ['K'|'O' old], 'N' new */
			{
				char		b;

				(void) take(&c, 4);
				b = take_byte(&c);
				if (c.problem == NULL && (b == 'K' || b == 'O'))
				{
					take_tuple(&c);
					b = take_byte(&c);
				}
				if (c.problem == NULL && b != 'N')
					c.problem = psprintf("The byte before its new tuple is 0x%02x, not 'N'.",
										 (unsigned char) b);
				take_tuple(&c);
				break;
			}
		case 'D':				/* relation OID, 'K'|'O', old tuple */
			(void) take(&c, 4);
			expect_byte(&c, "KO", "old tuple");
			take_tuple(&c);
			break;
		case 'T':				/* count, options, OIDs */
			{
				uint32		n = take_u32(&c);

				(void) take(&c, 1);
				if (c.problem == NULL && n > (len - c.pos) / 4)
					c.problem = psprintf("It names %u relations, more than its %u bytes can hold.",
										 n, len);
				else
					(void) take(&c, n * 4);
				break;
			}
		case 'M':				/* flags, LSN, prefix, length, content */
			(void) take(&c, 1 + 8);
			take_string(&c);
			(void) take(&c, take_u32(&c));
			break;
		default:
			return psprintf("Its type byte 0x%02x is not one of protocol version 1.",
							(unsigned char) type);
	}
	if (c.problem != NULL)
		return c.problem;
	if (c.pos != len)
		return psprintf("It has %u bytes after its last field.", len - c.pos);
	return NULL;
}

/*
 * cs_pgoutput_relids
 *	  The relations a change message (data, len bytes) names: 1 for
 *	  Insert, Update and Delete, the count of a Truncate (no more than its
 *	  bytes hold, so that an unchecked message is safe too), 0 for every
 *	  other type.  cs_pgoutput_relid() returns the nth (from 0).
 */
uint32
cs_pgoutput_relids(const char *data, uint32 len)
{
	if (len < 1 + 4)
		return 0;
	switch (data[0])
	{
		case 'I':
		case 'U':
		case 'D':
			return 1;
		case 'T':				/* count, options, OIDs */
			if (len < 1 + 4 + 1)
				return 0;
			return Min(cs_get32(data + 1), (len - (1 + 4 + 1)) / 4);
		default:
			return 0;
	}
}

/*
 * cs_pgoutput_relid
 *	  The nth relation OID (from 0, below cs_pgoutput_relids()) of a change
 *	  message.
 */
Oid
cs_pgoutput_relid(const char *data, uint32 nth)
{
	if (data[0] == 'T')
		return cs_get32(data + 1 + 4 + 1 + 4 * nth);
	return cs_get32(data + 1);
}

/* Skip a NUL-terminated string at *pos; false if it does not end in time. */
static bool
skip_string(const char *data, uint32 len, uint32 *pos)
{
	const char *end;

	if (*pos >= len)
		return false;
	end = memchr(data + *pos, '\0', len - *pos);
	if (end == NULL)
		return false;
	*pos = (end - data) + 1;
	return true;
}

/*
 * cs_pgoutput_column_types
 *	  The column type OIDs of a Relation message (data, len bytes: 'R',
 *	  relid, namespace, name, replica identity, column count, then per
 *	  column flags, name, type OID and typmod), palloc'd in the current
 *	  memory context, their number in *ntypes.  A column count outside
 *	  1..MaxTupleAttributeNumber gives NULL and 0; columns that do not
 *	  parse end the array early.
 */
Oid *
cs_pgoutput_column_types(const char *data, uint32 len, int *ntypes)
{
	uint32		pos = 1 + 4;
	int			ncols;
	Oid		   *types;

	*ntypes = 0;
	if (!skip_string(data, len, &pos) || !skip_string(data, len, &pos) ||
		pos + 1 + 2 > len)
		return NULL;
	pos += 1;
	ncols = (int16) ((uint8) data[pos] << 8 | (uint8) data[pos + 1]);
	pos += 2;
	if (ncols <= 0 || ncols > MaxTupleAttributeNumber)
		return NULL;
	types = palloc(ncols * sizeof(Oid));
	for (int i = 0; i < ncols; i++)
	{
		pos += 1;
		if (!skip_string(data, len, &pos) || pos + 8 > len)
			break;
		types[(*ntypes)++] = cs_get32(data + pos);
		pos += 8;
	}
	return types;
}

/*
 * cs_pgoutput_build_begin
 *	  Writes the CS_PGOUTPUT_BEGIN_SIZE bytes of a BEGIN message with these
 *	  fields into buf, as logicalrep_write_begin() (proto.c) does.
 */
void
cs_pgoutput_build_begin(char *buf, XLogRecPtr final_lsn,
						TimestampTz commit_time, TransactionId xid)
{
	buf[0] = 'B';
	cs_put64(buf + 1, final_lsn);
	cs_put64(buf + 9, (uint64) commit_time);
	cs_put32(buf + 17, xid);
}

/*
 * cs_pgoutput_build_commit
 *	  Writes the CS_PGOUTPUT_COMMIT_SIZE bytes of a COMMIT message with
 *	  these fields into buf, as logicalrep_write_commit() (proto.c) does.
 */
void
cs_pgoutput_build_commit(char *buf, uint8 flags, XLogRecPtr commit_lsn,
						 XLogRecPtr end_lsn, TimestampTz commit_time)
{
	buf[0] = 'C';
	buf[1] = (char) flags;
	cs_put64(buf + 2, commit_lsn);
	cs_put64(buf + 10, end_lsn);
	cs_put64(buf + 18, (uint64) commit_time);
}
