/*-------------------------------------------------------------------------
 *
 * segment_format.c
 *	  Byte layout of WAL segments: the segment header, frames and entries,
 *	  format versions 1, 2 and 3.  docs/FORMAT.md is the specification; this
 *	  file is its only encoder and decoder.  Fixed-width integers are
 *	  big-endian, like the replication protocol's.
 *
 * Segment header, all versions (the first 64 bytes):
 *	  0 magic "CSTRMWAL" | 8 u32 format version | 12 u32 header size |
 *	  16 u64 system identifier | 24 u64 generation | 32 u64 segment index |
 *	  40 u64 start LSN | 48 u32 timeline | 52 8 zero bytes |
 *	  60 u32 CRC-32C of bytes 0..59
 *	  Versions 2 and 3 add the seal area (64 bytes), all zero until the
 *	  segment is sealed, then rewritten once in place:
 *	  64 u64 end LSN | 72 u64 first commit LSN | 80 u64 last commit LSN |
 *	  88 i64 least commit time | 96 i64 greatest commit time |
 *	  104 u64 transactions | 112 12 zero bytes | 124 u32 CRC-32C of 64..123
 * Frame (one per write; the unit of torn-write detection):
 *	  u32 magic "CSFR" | u32 body length | u32 CRC-32C of length + body |
 *	  body = entries
 * Entry, version 1 (29 bytes + data):
 *	  u8 kind | u32 data length | u64 dataStart | u64 walEnd |
 *	  i64 send time (us since 2000-01-01) | data
 * Frame body, version 2, in three sections:
 *	  varint H | heads (H bytes): per entry u8 kind | varint data length |
 *	  varint F | fields (F bytes): per entry, in entry order:
 *		'w': svarint LSN delta
 *		'W': svarint LSN delta | svarint walEnd - LSN | svarint time delta
 *		'k': svarint walEnd delta | svarint time delta
 *		's', other kinds: none
 *	  data: every entry's data, in entry order, to the end of the body
 *	  varint = unsigned LEB128; svarint = zigzag, then varint; deltas are
 *	  from the previous LSN (time) in the same frame, 0 at its start.
 *	  Like kinds and like fields side by side compress better than entries
 *	  interleaved with their data (bench/README.md).
 * Version 3: version 2 plus two kinds, whose head's data length is 0 and
 *	  whose pgoutput message the reader rebuilds from their fields:
 *		'b' (a BEGIN that would be 'w'): the fields of 'w' |
 *		  svarint final LSN - LSN | svarint commit time - prev begin time |
 *		  svarint (int32) (xid - prev xid)
 *		'c' (a COMMIT that would be 'W'): the fields of 'W' | varint flags |
 *		  svarint commit LSN - prev final LSN | svarint end LSN - LSN |
 *		  svarint commit time - prev begin time
 *	  "prev" is the last 'b' of the frame (all 0 at its start).  BEGIN and
 *	  COMMIT repeat each other and their LSNs, and deflate finds nothing
 *	  to share in their 8-byte fields (docs/FORMAT.md section 8.3).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "port/pg_crc32c.h"
#include "utils/memutils.h"

#include "archive/segment_format.h"
#include "base/wire.h"

#define CS_FRAME_MAGIC 0x43534652	/* "CSFR" */

/*
 * cs_encode_segment_header
 *	  Writes a header of version CS_FORMAT_VERSION for hdr into buf
 *	  (CS_SEGMENT_HEADER_V2 bytes), with the seal area zero (not sealed).
 *	  Returns nothing.
 *	  Source: docs/FORMAT.md section 6.
 */
void
cs_encode_segment_header(const CsSegmentHeader *hdr, char *buf)
{
	pg_crc32c	crc;

	memset(buf, 0, CS_SEGMENT_HEADER_V2);
	memcpy(buf, CS_SEGMENT_MAGIC, 8);
	cs_put32(buf + 8, CS_FORMAT_VERSION);
	cs_put32(buf + 12, CS_SEGMENT_HEADER_V2);
	cs_put64(buf + 16, hdr->system_identifier);
	cs_put64(buf + 24, hdr->generation);
	cs_put64(buf + 32, hdr->segment_index);
	cs_put64(buf + 40, hdr->start_lsn);
	cs_put32(buf + 48, hdr->timeline);
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, buf, 60);
	FIN_CRC32C(crc);
	cs_put32(buf + 60, crc);
}

/*
 * cs_decode_segment_header
 *	  Decodes and validates the first CS_SEGMENT_BASE_SIZE bytes of a
 *	  header in buf: magic, CRC, a known version (1 to CS_FORMAT_VERSION)
 *	  and the header size of that version.  Returns false if any fails.
 *	  The seal of a version 2 or 3 header is decoded by
 *	  cs_decode_segment_seal(); here seal_state is set to CS_SEAL_NONE.
 */
bool
cs_decode_segment_header(const char *buf, CsSegmentHeader *hdr)
{
	pg_crc32c	crc;

	memset(hdr, 0, sizeof(*hdr));
	if (memcmp(buf, CS_SEGMENT_MAGIC, 8) != 0)
		return false;
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, buf, 60);
	FIN_CRC32C(crc);
	if (crc != cs_get32(buf + 60))
		return false;
	hdr->format_version = cs_get32(buf + 8);
	hdr->header_size = cs_get32(buf + 12);
	if (!(hdr->format_version == 1 && hdr->header_size == CS_SEGMENT_HEADER_V1) &&
		!(hdr->format_version >= 2 && hdr->format_version <= CS_FORMAT_VERSION &&
		  hdr->header_size == CS_SEGMENT_HEADER_V2))
		return false;
	hdr->system_identifier = cs_get64(buf + 16);
	hdr->generation = cs_get64(buf + 24);
	hdr->segment_index = cs_get64(buf + 32);
	hdr->start_lsn = cs_get64(buf + 40);
	hdr->timeline = cs_get32(buf + 48);
	hdr->seal_state = CS_SEAL_NONE;
	return true;
}

/*
 * cs_decode_segment_seal
 *	  Decodes the seal area of a version 2 or 3 header (buf holds the whole
 *	  CS_SEGMENT_HEADER_V2 bytes) into hdr->seal and hdr->seal_state:
 *	  CS_SEAL_NONE when all 64 bytes are zero, CS_SEAL_VALID when its CRC
 *	  matches, CS_SEAL_BAD otherwise.  Whether a bad seal is damage depends
 *	  on where the segment lies (docs/FORMAT.md section 6.2).
 */
void
cs_decode_segment_seal(const char *buf, CsSegmentHeader *hdr)
{
	const char *p = buf + CS_SEAL_OFFSET;
	pg_crc32c	crc;
	int			i;

	hdr->seal_state = CS_SEAL_NONE;
	memset(&hdr->seal, 0, sizeof(hdr->seal));
	for (i = 0; i < CS_SEAL_SIZE; i++)
		if (p[i] != 0)
			break;
	if (i == CS_SEAL_SIZE)
		return;
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, p, CS_SEAL_SIZE - 4);
	FIN_CRC32C(crc);
	if (crc != cs_get32(p + CS_SEAL_SIZE - 4))
	{
		hdr->seal_state = CS_SEAL_BAD;
		return;
	}
	hdr->seal_state = CS_SEAL_VALID;
	hdr->seal.end_lsn = cs_get64(p);
	hdr->seal.first_commit_lsn = cs_get64(p + 8);
	hdr->seal.last_commit_lsn = cs_get64(p + 16);
	hdr->seal.min_commit_time = (TimestampTz) cs_get64(p + 24);
	hdr->seal.max_commit_time = (TimestampTz) cs_get64(p + 32);
	hdr->seal.transactions = cs_get64(p + 40);
}

/*
 * cs_encode_segment_seal
 *	  Writes the 64-byte seal area for seal into buf (the bytes at header
 *	  offset CS_SEAL_OFFSET).  Returns nothing.
 */
void
cs_encode_segment_seal(const CsSegmentSeal *seal, char *buf)
{
	pg_crc32c	crc;

	memset(buf, 0, CS_SEAL_SIZE);
	cs_put64(buf, seal->end_lsn);
	cs_put64(buf + 8, seal->first_commit_lsn);
	cs_put64(buf + 16, seal->last_commit_lsn);
	cs_put64(buf + 24, (uint64) seal->min_commit_time);
	cs_put64(buf + 32, (uint64) seal->max_commit_time);
	cs_put64(buf + 40, seal->transactions);
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, buf, CS_SEAL_SIZE - 4);
	FIN_CRC32C(crc);
	cs_put32(buf + CS_SEAL_SIZE - 4, crc);
}

/*
 * cs_seal_note_commit
 *	  Counts one complete transaction (its commit LSN and commit time) into
 *	  a seal being built.  Returns nothing.
 */
void
cs_seal_note_commit(CsSegmentSeal *seal, XLogRecPtr commit_lsn,
					TimestampTz commit_time)
{
	if (seal->transactions == 0)
	{
		seal->first_commit_lsn = commit_lsn;
		seal->min_commit_time = commit_time;
		seal->max_commit_time = commit_time;
	}
	seal->min_commit_time = Min(seal->min_commit_time, commit_time);
	seal->max_commit_time = Max(seal->max_commit_time, commit_time);
	seal->last_commit_lsn = commit_lsn;
	seal->transactions++;
}

/* Append v as an unsigned LEB128 varint at p; returns the bytes written. */
static int
put_varint(char *p, uint64 v)
{
	int			n = 0;

	while (v >= 0x80)
	{
		p[n++] = (char) ((v & 0x7F) | 0x80);
		v >>= 7;
	}
	p[n++] = (char) v;
	return n;
}

/* Append a signed value, zigzag-coded, as a varint. */
static int
put_svarint(char *p, int64 v)
{
	return put_varint(p, ((uint64) v << 1) ^ (uint64) (v >> 63));
}

/*
 * Read a varint from p[*off .. end); false when it runs past end, is
 * longer than 10 bytes or does not fit in 64 bits.
 */
static bool
get_varint(const char *p, uint32 *off, uint32 end, uint64 *v)
{
	int			shift = 0;

	*v = 0;
	while (*off < end && shift < 70)
	{
		uint8		b = (uint8) p[(*off)++];

		if (shift == 63 && (b & 0x7F) > 1)
			return false;		/* bits beyond the 64th */
		*v |= (uint64) (b & 0x7F) << shift;
		if ((b & 0x80) == 0)
			return true;
		shift += 7;
	}
	return false;
}

static bool
get_svarint(const char *p, uint32 *off, uint32 end, int64 *v)
{
	uint64		u;

	if (!get_varint(p, off, end, &u))
		return false;
	*v = (int64) (u >> 1) ^ -(int64) (u & 1);
	return true;
}

/*
 * cs_coder_init
 *	  Starts an entry encoder or decoder for a frame of the given format
 *	  version.  Returns nothing.
 */
void
cs_coder_init(CsEntryCoder *coder, uint32 version)
{
	coder->version = version;
	coder->prev_lsn = InvalidXLogRecPtr;
	coder->prev_time = 0;
	coder->prev_final = InvalidXLogRecPtr;
	coder->prev_begin_time = 0;
	coder->prev_xid = 0;
	coder->heads_end = 0;
	coder->fields_off = 0;
	coder->fields_end = 0;
	coder->data_off = 0;
}

/*
 * cs_frame_begin
 *	  Resets frame, reserves its 12-byte header, and starts coder for a
 *	  frame of the given format version.  coder must be zeroed before its
 *	  first frame: in versions 2 and 3 its heads and fields buffers are
 *	  allocated then, in frame's memory context, and kept until
 *	  cs_coder_free() or that context's reset.  Returns nothing.
 */
void
cs_frame_begin(StringInfo frame, CsEntryCoder *coder, uint32 version)
{
	cs_coder_init(coder, version);
	resetStringInfo(frame);
	appendStringInfoSpaces(frame, CS_FRAME_HEADER_SIZE);
	if (version == 1)
		return;
	if (coder->heads.data == NULL)
	{
		MemoryContext old;

		old = MemoryContextSwitchTo(GetMemoryChunkContext(frame->data));
		initStringInfo(&coder->heads);
		initStringInfo(&coder->fields);
		MemoryContextSwitchTo(old);
	}
	resetStringInfo(&coder->heads);
	resetStringInfo(&coder->fields);
}

/*
 * cs_coder_free
 *	  Frees the buffers of an encoder started by cs_frame_begin(), and
 *	  zeroes it.  Returns nothing.
 */
void
cs_coder_free(CsEntryCoder *coder)
{
	if (coder->heads.data != NULL)
		pfree(coder->heads.data);
	if (coder->fields.data != NULL)
		pfree(coder->fields.data);
	memset(coder, 0, sizeof(*coder));
}

/*
 * cs_frame_pending_size
 *	  The size in bytes the frame being built would have if it were
 *	  finished now, header included, give or take the section lengths.
 *	  Returns int.
 */
int
cs_frame_pending_size(const StringInfo frame, const CsEntryCoder *coder)
{
	if (coder->version == 1)
		return frame->len;
	return frame->len + coder->heads.len + coder->fields.len;
}

/* Version 1: the fixed 29-byte entry header. */
static void
append_entry_v1(StringInfo frame, char kind, XLogRecPtr data_start,
				XLogRecPtr wal_end, TimestampTz send_time,
				const char *data, uint32 len)
{
	char	   *p;

	enlargeStringInfo(frame, CS_ENTRY_HEADER_SIZE_V1 + len);
	p = frame->data + frame->len;
	p[0] = kind;
	cs_put32(p + 1, len);
	cs_put64(p + 5, data_start);
	cs_put64(p + 13, wal_end);
	cs_put64(p + 21, (uint64) send_time);
	if (len > 0)
		memcpy(p + CS_ENTRY_HEADER_SIZE_V1, data, len);
	frame->len += CS_ENTRY_HEADER_SIZE_V1 + len;
	frame->data[frame->len] = '\0';
}

/*
 * Does a message keep its walEnd and send time in version 2?  A COMMIT
 * (once per transaction), a non-transactional logical message, and any
 * message whose walEnd is not its dataStart (so nothing is lost).  info:
 * the message as cs_parse_pgoutput() read it, or NULL.
 */
static bool
message_is_full(XLogRecPtr data_start, XLogRecPtr wal_end,
				const CsMessageInfo *info)
{
	if (wal_end != data_start)
		return true;
	if (info == NULL)
		return false;
	if (info->type == 'C')
		return true;
	return info->type == 'M' && !info->transactional;
}

/*
 * Version 3: the fields of a 'b' entry for the 21-byte BEGIN parsed into
 * info (logicalrep_write_begin(), src/backend/replication/logical/proto.c),
 * at p; updates the coder's BEGIN state.  Returns the bytes written.
 */
static int
put_begin_fields(char *p, CsEntryCoder *coder, XLogRecPtr data_start,
				 const CsMessageInfo *info)
{
	XLogRecPtr	final_lsn = info->lsn;
	TimestampTz time = info->commit_time;
	uint32		xid = info->xid;
	int			n = 0;

	/* differences modulo 2^64 (2^32 for the xid): every value fits */
	n += put_svarint(p + n, (int64) (final_lsn - data_start));
	n += put_svarint(p + n,
					 (int64) ((uint64) time - (uint64) coder->prev_begin_time));
	n += put_svarint(p + n, (int64) (int32) (xid - coder->prev_xid));
	coder->prev_final = final_lsn;
	coder->prev_begin_time = time;
	coder->prev_xid = xid;
	return n;
}

/*
 * Version 3: the fields of a 'c' entry for the 26-byte COMMIT parsed into
 * info (logicalrep_write_commit(), proto.c), at p.  Returns the bytes
 * written.
 */
static int
put_commit_fields(char *p, const CsEntryCoder *coder, XLogRecPtr data_start,
				  const CsMessageInfo *info)
{
	XLogRecPtr	commit_lsn = info->lsn;
	XLogRecPtr	end_lsn = info->end_lsn;
	TimestampTz time = info->commit_time;
	int			n = 0;

	n += put_varint(p + n, info->flags);
	n += put_svarint(p + n, (int64) (commit_lsn - coder->prev_final));
	n += put_svarint(p + n, (int64) (end_lsn - data_start));
	n += put_svarint(p + n,
					 (int64) ((uint64) time - (uint64) coder->prev_begin_time));
	return n;
}

/*
 * Version 3: the kind a message written as kind ('w' or 'W') gets: 'b'
 * for a BEGIN that would be 'w', 'c' for a COMMIT that would be 'W'.
 */
static char
message_kind_v3(char kind, const CsMessageInfo *info, uint32 len)
{
	if (info == NULL)
		return kind;
	if (kind == CS_ENTRY_MESSAGE && len == CS_PGOUTPUT_BEGIN_SIZE &&
		info->type == 'B')
		return CS_ENTRY_BEGIN;
	if (kind == CS_ENTRY_MESSAGE_FULL && len == CS_PGOUTPUT_COMMIT_SIZE &&
		info->type == 'C')
		return CS_ENTRY_COMMIT;
	return kind;
}

/*
 * cs_append_entry
 *	  Appends one entry (kind CS_ENTRY_MESSAGE, _PREAMBLE or _POSITION,
 *	  its positions, send time and len bytes of data) to a frame begun with
 *	  cs_frame_begin(), in the frame's format version.  In versions 2 and 3
 *	  a message is written as 'W' (with walEnd and send time) or 'w'
 *	  (without: message_is_full()), a preamble entry without positions; in
 *	  version 3 a BEGIN that would be 'w' as 'b', and a COMMIT that would
 *	  be 'W' as 'c', their messages as fields and no data.  info is the
 *	  message as cs_parse_pgoutput() read it (NULL for other entries):
 *	  the encoder takes the fields it stores from there, never from the
 *	  message's bytes.  Returns nothing.  Source: docs/FORMAT.md sections
 *	  8.2 and 8.3.
 */
void
cs_append_entry(StringInfo frame, CsEntryCoder *coder, char kind,
				XLogRecPtr data_start, XLogRecPtr wal_end,
				TimestampTz send_time, const char *data, uint32 len,
				const CsMessageInfo *info)
{
	char		fields[96];
	char		head[11];
	int			nf = 0;
	char		stored;

	if (coder->version == 1)
	{
		append_entry_v1(frame, kind, data_start, wal_end, send_time, data, len);
		return;
	}
	if (kind == CS_ENTRY_MESSAGE &&
		message_is_full(data_start, wal_end, info))
		kind = CS_ENTRY_MESSAGE_FULL;
	if (coder->version >= 3)
		stored = message_kind_v3(kind, info, len);
	else
		stored = kind;
	if (kind == CS_ENTRY_MESSAGE || kind == CS_ENTRY_MESSAGE_FULL)
	{
		nf += put_svarint(fields + nf, (int64) (data_start - coder->prev_lsn));
		coder->prev_lsn = data_start;
	}
	if (kind == CS_ENTRY_MESSAGE_FULL)
		nf += put_svarint(fields + nf, (int64) (wal_end - data_start));
	if (kind == CS_ENTRY_POSITION)
	{
		nf += put_svarint(fields + nf, (int64) (wal_end - coder->prev_lsn));
		coder->prev_lsn = wal_end;
	}
	if (kind == CS_ENTRY_MESSAGE_FULL || kind == CS_ENTRY_POSITION)
	{
		/* modulo 2^64, as the decoder's sum: no signed overflow */
		nf += put_svarint(fields + nf, (int64) ((uint64) send_time -
												(uint64) coder->prev_time));
		coder->prev_time = send_time;
	}
	if (stored == CS_ENTRY_BEGIN)
		nf += put_begin_fields(fields + nf, coder, data_start, info);
	else if (stored == CS_ENTRY_COMMIT)
		nf += put_commit_fields(fields + nf, coder, data_start, info);
	if (stored == CS_ENTRY_BEGIN || stored == CS_ENTRY_COMMIT)
		len = 0;				/* the reader rebuilds the message */
	head[0] = stored;
	appendBinaryStringInfo(&coder->heads, head, 1 + put_varint(head + 1, len));
	appendBinaryStringInfo(&coder->fields, fields, nf);
	if (len > 0)
		appendBinaryStringInfo(frame, data, len);
}

/* Versions 2 and 3: put the heads and fields sections before the data. */
static void
join_sections(StringInfo frame, CsEntryCoder *coder)
{
	char		hlen[10];
	char		flen[10];
	int			nh = put_varint(hlen, coder->heads.len);
	int			nf = put_varint(flen, coder->fields.len);
	int			prefix = nh + coder->heads.len + nf + coder->fields.len;
	char	   *p;

	enlargeStringInfo(frame, prefix);
	p = frame->data + CS_FRAME_HEADER_SIZE;
	memmove(p + prefix, p, frame->len - CS_FRAME_HEADER_SIZE);
	memcpy(p, hlen, nh);
	p += nh;
	memcpy(p, coder->heads.data, coder->heads.len);
	p += coder->heads.len;
	memcpy(p, flen, nf);
	p += nf;
	memcpy(p, coder->fields.data, coder->fields.len);
	frame->len += prefix;
	frame->data[frame->len] = '\0';
	resetStringInfo(&coder->heads);
	resetStringInfo(&coder->fields);
}

/*
 * cs_frame_finish
 *	  Completes the frame built with coder: in versions 2, 3 puts the heads and
 *	  fields sections before the data, then fills in the frame header:
 *	  magic, body length and CRC-32C over the length field and the body.
 *	  Returns nothing.
 */
void
cs_frame_finish(StringInfo frame, CsEntryCoder *coder)
{
	uint32		body_len;
	pg_crc32c	crc;

	if (coder->version != 1)
		join_sections(frame, coder);
	body_len = frame->len - CS_FRAME_HEADER_SIZE;
	cs_put32(frame->data, CS_FRAME_MAGIC);
	cs_put32(frame->data + 4, body_len);
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, frame->data + 4, 4);
	COMP_CRC32C(crc, frame->data + CS_FRAME_HEADER_SIZE, body_len);
	FIN_CRC32C(crc);
	cs_put32(frame->data + 8, crc);
}

/*
 * cs_frame_check_header
 *	  Decodes a 12-byte frame header into *body_len and *crc.  Returns
 *	  false if the magic or the length is wrong.
 */
bool
cs_frame_check_header(const char *hdr, uint32 *body_len, uint32 *crc)
{
	if (cs_get32(hdr) != CS_FRAME_MAGIC)
		return false;
	*body_len = cs_get32(hdr + 4);
	*crc = cs_get32(hdr + 8);
	return *body_len > 0 && *body_len <= CS_MAX_FRAME_BODY;
}

/*
 * cs_frame_body_valid
 *	  Checks a frame body of body_len bytes against the CRC from its header,
 *	  and that its entries, decoded as the given format version, exactly
 *	  fill it.  Returns bool.
 */
bool
cs_frame_body_valid(uint32 version, const char *body, uint32 body_len,
					uint32 crc)
{
	pg_crc32c	c;
	char		lenbuf[4];
	uint32		off = 0;
	CsEntry		e;
	CsEntryCoder coder;

	cs_put32(lenbuf, body_len);
	INIT_CRC32C(c);
	COMP_CRC32C(c, lenbuf, 4);
	COMP_CRC32C(c, body, body_len);
	FIN_CRC32C(c);
	if (c != crc)
		return false;
	cs_coder_init(&coder, version);
	while (off < body_len)
		if (!cs_next_entry(&coder, body, body_len, &off, &e))
			return false;
	return off == body_len;
}

/* Version 1: decode the entry at *offset. */
static bool
next_entry_v1(const char *body, uint32 body_len, uint32 *offset,
			  CsEntry *entry)
{
	const char *p = body + *offset;
	uint32		len;

	if (*offset + CS_ENTRY_HEADER_SIZE_V1 > body_len)
		return false;
	len = cs_get32(p + 1);
	if (len > body_len - *offset - CS_ENTRY_HEADER_SIZE_V1)
		return false;
	entry->kind = p[0];
	entry->len = len;
	entry->data_start = cs_get64(p + 5);
	entry->wal_end = cs_get64(p + 13);
	entry->send_time = (TimestampTz) cs_get64(p + 21);
	entry->data = p + CS_ENTRY_HEADER_SIZE_V1;
	*offset += CS_ENTRY_HEADER_SIZE_V1 + len;
	return true;
}

/*
 * Versions 2 and 3: read the section lengths at the start of the body into
 * coder; *offset becomes the first head.  False if they do not fit in the
 * body or the heads section is empty.
 */
static bool
read_sections(CsEntryCoder *coder, const char *body, uint32 body_len,
			  uint32 *offset)
{
	uint32		off = 0;
	uint64		h;
	uint64		f;

	if (!get_varint(body, &off, body_len, &h) || h == 0 ||
		h > body_len - off)
		return false;
	*offset = off;
	coder->heads_end = off + (uint32) h;
	off = coder->heads_end;
	if (!get_varint(body, &off, body_len, &f) || f > body_len - off)
		return false;
	coder->fields_off = off;
	coder->fields_end = off + (uint32) f;
	coder->data_off = coder->fields_end;
	return true;
}

/*
 * Version 3: decode the fields a 'b' entry adds to those of 'w', and
 * rebuild its BEGIN message into coder->rebuilt.
 */
static bool
next_begin_fields(CsEntryCoder *coder, const char *body, CsEntry *entry)
{
	uint32	   *off = &coder->fields_off;
	uint32		end = coder->fields_end;
	int64		final_d;
	int64		time_d;
	int64		xid_d;

	if (!get_svarint(body, off, end, &final_d) ||
		!get_svarint(body, off, end, &time_d) ||
		!get_svarint(body, off, end, &xid_d))
		return false;
	coder->prev_final = entry->data_start + (uint64) final_d;
	coder->prev_begin_time = (TimestampTz)
		((uint64) coder->prev_begin_time + (uint64) time_d);
	coder->prev_xid = coder->prev_xid + (uint32) (uint64) xid_d;
	cs_pgoutput_build_begin(coder->rebuilt, coder->prev_final,
							coder->prev_begin_time, coder->prev_xid);
	entry->len = CS_PGOUTPUT_BEGIN_SIZE;
	return true;
}

/*
 * Version 3: decode the fields a 'c' entry adds to those of 'W', and
 * rebuild its COMMIT message into coder->rebuilt.  False if its flags do
 * not fit in a byte.
 */
static bool
next_commit_fields(CsEntryCoder *coder, const char *body, CsEntry *entry)
{
	uint32	   *off = &coder->fields_off;
	uint32		end = coder->fields_end;
	uint64		flags;
	int64		commit_d;
	int64		end_d;
	int64		time_d;

	if (!get_varint(body, off, end, &flags) || flags > 255 ||
		!get_svarint(body, off, end, &commit_d) ||
		!get_svarint(body, off, end, &end_d) ||
		!get_svarint(body, off, end, &time_d))
		return false;
	cs_pgoutput_build_commit(coder->rebuilt, (uint8) flags,
							 coder->prev_final + (uint64) commit_d,
							 entry->data_start + (uint64) end_d,
							 (TimestampTz) ((uint64) coder->prev_begin_time +
											(uint64) time_d));
	entry->len = CS_PGOUTPUT_COMMIT_SIZE;
	return true;
}

/*
 * Versions 2 and 3: decode the fields of an entry of the given kind (as
 * stored: in version 3 'b' and 'c' have the fields of 'w' and 'W' first).
 */
static bool
next_fields(CsEntryCoder *coder, const char *body, char stored, CsEntry *entry)
{
	uint32	   *off = &coder->fields_off;
	uint32		end = coder->fields_end;
	int64		d;
	char		kind = stored;

	if (coder->version >= 3 && stored == CS_ENTRY_BEGIN)
		kind = CS_ENTRY_MESSAGE;
	else if (coder->version >= 3 && stored == CS_ENTRY_COMMIT)
		kind = CS_ENTRY_MESSAGE_FULL;

	if (kind == CS_ENTRY_MESSAGE || kind == CS_ENTRY_MESSAGE_FULL)
	{
		if (!get_svarint(body, off, end, &d))
			return false;
		entry->data_start = coder->prev_lsn + (uint64) d;
		entry->wal_end = entry->data_start;
		coder->prev_lsn = entry->data_start;
	}
	if (kind == CS_ENTRY_MESSAGE_FULL)
	{
		if (!get_svarint(body, off, end, &d))
			return false;
		entry->wal_end = entry->data_start + (uint64) d;
		entry->kind = CS_ENTRY_MESSAGE;
	}
	if (kind == CS_ENTRY_POSITION)
	{
		if (!get_svarint(body, off, end, &d))
			return false;
		entry->wal_end = coder->prev_lsn + (uint64) d;
		coder->prev_lsn = entry->wal_end;
	}
	if (kind == CS_ENTRY_MESSAGE_FULL || kind == CS_ENTRY_POSITION)
	{
		if (!get_svarint(body, off, end, &d))
			return false;
		/* modulo 2^64, as the writer's delta: no signed overflow */
		entry->send_time = (TimestampTz) ((uint64) coder->prev_time + (uint64) d);
		coder->prev_time = entry->send_time;
	}
	if (kind != stored && stored == CS_ENTRY_BEGIN)
		return next_begin_fields(coder, body, entry);
	if (kind != stored && stored == CS_ENTRY_COMMIT)
		return next_commit_fields(coder, body, entry);
	return true;
}

/*
 * cs_next_entry
 *	  Decodes the next entry of a frame body, in the version and with the
 *	  frame state of coder (cs_coder_init() at each frame, *offset 0), and
 *	  advances *offset.  In version 1 *offset is where the entry starts; in
 *	  versions 2 and 3 it is where its head starts in the heads section,
 *	  and it is body_len after the last entry, as in version 1.  Returns
 *	  false at the end, or if the entry would overrun the body or its
 *	  fields do not decode, or (versions 2, 3) if after the last entry the
 *	  fields and data sections are not exactly used up, or (version 3) if
 *	  a 'b' or 'c' entry has a data length other than 0 or flags above 255.
 *	  entry->data points into body, except for a version 3 'b' or 'c'
 *	  entry, whose message is rebuilt in coder: it is then valid until the
 *	  next entry is decoded with coder.  'W', 'b' and 'c' entries are
 *	  returned as CS_ENTRY_MESSAGE, and a 'w' or 'b' one with walEnd =
 *	  dataStart and send time 0.  Source: docs/FORMAT.md sections 8.2, 8.3.
 */
bool
cs_next_entry(CsEntryCoder *coder, const char *body, uint32 body_len,
			  uint32 *offset, CsEntry *entry)
{
	uint32		off = *offset;
	uint64		n;
	char		kind;

	if (coder->version == 1)
		return next_entry_v1(body, body_len, offset, entry);
	if (off == 0 && coder->heads_end == 0 &&
		!read_sections(coder, body, body_len, &off))
		return false;
	if (off >= coder->heads_end)
		return false;
	kind = body[off++];
	if (!get_varint(body, &off, coder->heads_end, &n) ||
		n > body_len - coder->data_off)
		return false;
	memset(entry, 0, sizeof(*entry));
	entry->kind = kind;
	if (coder->version >= 3 &&
		(kind == CS_ENTRY_BEGIN || kind == CS_ENTRY_COMMIT))
	{
		/* the message is in the fields, nothing in the data section */
		if (n != 0 || !next_fields(coder, body, kind, entry))
			return false;
		entry->kind = CS_ENTRY_MESSAGE;
		entry->data = coder->rebuilt;
	}
	else
	{
		if (!next_fields(coder, body, kind, entry))
			return false;
		entry->data = body + coder->data_off;
		entry->len = (uint32) n;
		coder->data_off += (uint32) n;
	}
	if (off == coder->heads_end)
	{
		/* the last entry: every section must be used up exactly */
		if (coder->fields_off != coder->fields_end ||
			coder->data_off != body_len)
			return false;
		off = body_len;
	}
	*offset = off;
	return true;
}
