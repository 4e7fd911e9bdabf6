/*-------------------------------------------------------------------------
 *
 * segment_format.c
 *	  Byte layout of WAL segments: the segment header, frames and entries.
 *	  docs/FORMAT.md is the specification; this file is its only encoder
 *	  and decoder.  All integers are big-endian, like the replication
 *	  protocol's.
 *
 * Segment header (CS_SEGMENT_HEADER_SIZE = 64 bytes):
 *	  0 magic "CSTRMWAL" | 8 u32 format version | 12 u32 header size |
 *	  16 u64 system identifier | 24 u64 generation | 32 u64 segment index |
 *	  40 u64 start LSN | 48 u32 timeline | 52 8 zero bytes |
 *	  60 u32 CRC-32C of bytes 0..59
 * Frame (one per write; the unit of torn-write detection):
 *	  u32 magic "CSFR" | u32 body length | u32 CRC-32C of length + body |
 *	  body = entries
 * Entry (CS_ENTRY_HEADER_SIZE = 29 bytes + data):
 *	  u8 kind | u32 data length | u64 dataStart | u64 walEnd |
 *	  i64 send time (us since 2000-01-01) | data
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "port/pg_crc32c.h"

#include "generation_reader.h"
#include "segment_format.h"
#include "wire.h"

#define CS_FRAME_MAGIC 0x43534652	/* "CSFR" */

/*
 * cs_encode_segment_header(hdr, buf) -> void
 *	  Write the 64-byte header into buf (CS_SEGMENT_HEADER_SIZE bytes).
 */
void
cs_encode_segment_header(const CsSegmentHeader *hdr, char *buf)
{
	pg_crc32c	crc;

	memset(buf, 0, CS_SEGMENT_HEADER_SIZE);
	memcpy(buf, CS_SEGMENT_MAGIC, 8);
	cs_put32(buf + 8, CS_FORMAT_VERSION);
	cs_put32(buf + 12, CS_SEGMENT_HEADER_SIZE);
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
 * cs_decode_segment_header(buf, *hdr) -> bool
 *	  Decode and validate (magic, CRC, known version) a 64-byte header.
 */
bool
cs_decode_segment_header(const char *buf, CsSegmentHeader *hdr)
{
	pg_crc32c	crc;

	if (memcmp(buf, CS_SEGMENT_MAGIC, 8) != 0)
		return false;
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, buf, 60);
	FIN_CRC32C(crc);
	if (crc != cs_get32(buf + 60))
		return false;
	hdr->format_version = cs_get32(buf + 8);
	if (hdr->format_version < 1 || hdr->format_version > CS_FORMAT_VERSION ||
		cs_get32(buf + 12) != CS_SEGMENT_HEADER_SIZE)
		return false;
	hdr->system_identifier = cs_get64(buf + 16);
	hdr->generation = cs_get64(buf + 24);
	hdr->segment_index = cs_get64(buf + 32);
	hdr->start_lsn = cs_get64(buf + 40);
	hdr->timeline = cs_get32(buf + 48);
	return true;
}

/*
 * cs_frame_begin(frame) -> void
 *	  Reset frame and reserve its 12-byte header.
 */
void
cs_frame_begin(StringInfo frame)
{
	resetStringInfo(frame);
	appendStringInfoSpaces(frame, CS_FRAME_HEADER_SIZE);
}

/*
 * cs_append_entry(frame, kind, data_start, wal_end, send_time, data, len)
 *	  Append one entry to a frame begun with cs_frame_begin().
 */
void
cs_append_entry(StringInfo frame, char kind, XLogRecPtr data_start,
				XLogRecPtr wal_end, TimestampTz send_time,
				const char *data, uint32 len)
{
	char	   *p;

	enlargeStringInfo(frame, CS_ENTRY_HEADER_SIZE + len);
	p = frame->data + frame->len;
	p[0] = kind;
	cs_put32(p + 1, len);
	cs_put64(p + 5, data_start);
	cs_put64(p + 13, wal_end);
	cs_put64(p + 21, (uint64) send_time);
	if (len > 0)
		memcpy(p + CS_ENTRY_HEADER_SIZE, data, len);
	frame->len += CS_ENTRY_HEADER_SIZE + len;
	frame->data[frame->len] = '\0';
}

/*
 * cs_frame_finish(frame) -> void
 *	  Fill in the frame header: magic, body length and CRC-32C over the
 *	  length field and the body.
 */
void
cs_frame_finish(StringInfo frame)
{
	uint32		body_len = frame->len - CS_FRAME_HEADER_SIZE;
	pg_crc32c	crc;

	cs_put32(frame->data, CS_FRAME_MAGIC);
	cs_put32(frame->data + 4, body_len);
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, frame->data + 4, 4);
	COMP_CRC32C(crc, frame->data + CS_FRAME_HEADER_SIZE, body_len);
	FIN_CRC32C(crc);
	cs_put32(frame->data + 8, crc);
}

/*
 * cs_frame_check_header(hdr, *body_len, *crc) -> bool
 *	  Decode a 12-byte frame header; false if the magic or length is wrong.
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
 * cs_frame_body_valid(body, body_len, crc) -> bool
 *	  Check a frame body against the CRC from its header, and that its
 *	  entries exactly fill it.
 */
bool
cs_frame_body_valid(const char *body, uint32 body_len, uint32 crc)
{
	pg_crc32c	c;
	char		lenbuf[4];
	uint32		off = 0;
	CsEntry		e;

	cs_put32(lenbuf, body_len);
	INIT_CRC32C(c);
	COMP_CRC32C(c, lenbuf, 4);
	COMP_CRC32C(c, body, body_len);
	FIN_CRC32C(c);
	if (c != crc)
		return false;
	while (off < body_len)
		if (!cs_next_entry(body, body_len, &off, &e))
			return false;
	return off == body_len;
}

/*
 * cs_next_entry(body, body_len, *offset, *entry) -> bool
 *	  Decode the entry at *offset and advance it; false at the end or if
 *	  the entry would overrun the body.  entry->data points into body.
 */
bool
cs_next_entry(const char *body, uint32 body_len, uint32 *offset, CsEntry *entry)
{
	const char *p = body + *offset;
	uint32		len;

	if (*offset + CS_ENTRY_HEADER_SIZE > body_len)
		return false;
	len = cs_get32(p + 1);
	if (len > body_len - *offset - CS_ENTRY_HEADER_SIZE)
		return false;
	entry->kind = p[0];
	entry->len = len;
	entry->data_start = cs_get64(p + 5);
	entry->wal_end = cs_get64(p + 13);
	entry->send_time = (TimestampTz) cs_get64(p + 21);
	entry->data = p + CS_ENTRY_HEADER_SIZE;
	*offset += CS_ENTRY_HEADER_SIZE + len;
	return true;
}
