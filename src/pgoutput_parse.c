/*-------------------------------------------------------------------------
 *
 * pgoutput_parse.c
 *	  Reads the few fields of pgoutput messages the archiver needs to place
 *	  them: transaction boundaries with their LSNs, Relation and Type
 *	  message identities, and logical decoding messages.  The rest of each
 *	  message is archived untouched.
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


#include "pgoutput_parse.h"
#include "wire.h"

/*
 * cs_parse_pgoutput
 *	  Fill info from one pgoutput message (data starts at the type byte).
 *	  B: lsn = final LSN (the commit record's LSN).  C: lsn = commit LSN,
 *	  end_lsn = end LSN; B and C: commit_time.  M: lsn, transactional.  R, Y: oid.  Returns false
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
			info->commit_time = (TimestampTz) cs_get64(data + 9);
			break;
		case 'C':				/* Commit: flags, commit LSN, end LSN, time */
			if (len < 1 + 1 + 8 + 8 + 8)
				return false;
			info->lsn = cs_get64(data + 2);
			info->end_lsn = cs_get64(data + 10);
			info->commit_time = (TimestampTz) cs_get64(data + 18);
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
 *	  The relations a sound change message (checked by cs_check_pgoutput())
 *	  names: 1 for Insert, Update and Delete, the count of a Truncate, 0
 *	  for every other type.  cs_pgoutput_relid() returns the nth (from 0).
 */
uint32
cs_pgoutput_relids(const char *data, uint32 len)
{
	if (len < 5)
		return 0;
	switch (data[0])
	{
		case 'I':
		case 'U':
		case 'D':
			return 1;
		case 'T':
			return cs_get32(data + 1);
		default:
			return 0;
	}
}

Oid
cs_pgoutput_relid(const char *data, uint32 nth)
{
	if (data[0] == 'T')
		return cs_get32(data + 1 + 4 + 1 + 4 * nth);
	return cs_get32(data + 1);
}
