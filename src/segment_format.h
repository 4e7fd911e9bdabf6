/*-------------------------------------------------------------------------
 *
 * segment_format.h
 *	  Declarations of segment_format.c: the byte layout of segments: header,
 *	  frames, entries.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SEGMENT_FORMAT_H
#define CS_SEGMENT_FORMAT_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "lib/stringinfo.h"

#define CS_FORMAT_VERSION		1
#define CS_SEGMENT_MAGIC		"CSTRMWAL"
#define CS_SEGMENT_HEADER_SIZE	64
#define CS_FRAME_HEADER_SIZE	12
#define CS_ENTRY_HEADER_SIZE	29
#define CS_MAX_FRAME_BODY		(1024 * 1024 * 1024)

/* entry kinds inside a frame */
#define CS_ENTRY_MESSAGE	'w'		/* an XLogData message as streamed */
#define CS_ENTRY_PREAMBLE	's'		/* Relation/Type message repeated at
									 * segment start */
#define CS_ENTRY_POSITION	'k'		/* durable keepalive position */

typedef struct CsSegmentHeader
{
	uint32		format_version;
	uint64		system_identifier;
	uint64		generation;
	uint64		segment_index;
	XLogRecPtr	start_lsn;
	uint32		timeline;
} CsSegmentHeader;

typedef struct CsEntry
{
	char		kind;
	XLogRecPtr	data_start;
	XLogRecPtr	wal_end;
	TimestampTz send_time;
	uint32		len;
	const char *data;
} CsEntry;

extern void cs_encode_segment_header(const CsSegmentHeader *hdr, char *buf);
extern bool cs_decode_segment_header(const char *buf, CsSegmentHeader *hdr);
extern void cs_append_entry(StringInfo frame, char kind, XLogRecPtr data_start,
							XLogRecPtr wal_end, TimestampTz send_time,
							const char *data, uint32 len);
extern void cs_frame_begin(StringInfo frame);
extern void cs_frame_finish(StringInfo frame);
extern bool cs_frame_check_header(const char *hdr, uint32 *body_len,
								  uint32 *crc);
extern bool cs_frame_body_valid(const char *body, uint32 body_len, uint32 crc);
extern bool cs_next_entry(const char *body, uint32 body_len, uint32 *offset,
						  CsEntry *entry);

#endif							/* CS_SEGMENT_FORMAT_H */
