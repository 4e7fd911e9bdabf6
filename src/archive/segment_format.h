/*-------------------------------------------------------------------------
 *
 * segment_format.h
 *	  Declarations of segment_format.c: the byte layout of segments: header,
 *	  frames, entries,
 *	  for format versions 1, 2 and 3.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SEGMENT_FORMAT_H
#define CS_SEGMENT_FORMAT_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "lib/stringinfo.h"

#include "archive/pgoutput_parse.h"

#define CS_FORMAT_VERSION		3	/* what writers write */
#define CS_SEGMENT_MAGIC		"CSTRMWAL"
#define CS_SEGMENT_HEADER_V1	64	/* header size of version 1 */
#define CS_SEGMENT_HEADER_V2	128 /* header size of versions 2 and 3 */
#define CS_SEGMENT_HEADER_MAX	128
#define CS_SEGMENT_BASE_SIZE	64	/* the part both versions share */
#define CS_SEAL_OFFSET			64	/* versions 2, 3: the seal area */
#define CS_SEAL_SIZE			64
#define CS_FRAME_HEADER_SIZE	12
#define CS_ENTRY_HEADER_SIZE_V1 29
#define CS_MAX_FRAME_BODY		(1024 * 1024 * 1024)

/* entry kinds inside a frame, as readers see them */
#define CS_ENTRY_MESSAGE	'w'		/* an XLogData message as streamed */
#define CS_ENTRY_PREAMBLE	's'		/* Relation/Type message repeated at
									 * segment start */
#define CS_ENTRY_POSITION	'k'		/* durable keepalive position */
/* versions 2 and 3: a message that carries walEnd and send time */
#define CS_ENTRY_MESSAGE_FULL 'W'
/* version 3 only: a pgoutput BEGIN ('w') or COMMIT ('W') stored as fields */
#define CS_ENTRY_BEGIN		'b'
#define CS_ENTRY_COMMIT		'c'

/* What a version 2 or 3 header says about its sealed segment's contents. */
typedef enum CsSealState
{
	CS_SEAL_NONE,				/* version 1, or all zeros: not sealed */
	CS_SEAL_VALID,				/* the seal area's CRC matches */
	CS_SEAL_BAD					/* not zero, and its CRC does not match */
} CsSealState;

/*
 * The seal of a segment: written into the header of a version 2 or 3 segment
 * when it is sealed (rotation), so that readers learn its range without
 * reading its body.
 */
typedef struct CsSegmentSeal
{
	XLogRecPtr	end_lsn;		/* position of record at the seal */
	XLogRecPtr	first_commit_lsn;	/* 0 when transactions == 0 */
	XLogRecPtr	last_commit_lsn;
	TimestampTz min_commit_time;
	TimestampTz max_commit_time;
	uint64		transactions;	/* complete transactions (COMMITs) */
} CsSegmentSeal;

typedef struct CsSegmentHeader
{
	uint32		format_version;
	uint32		header_size;	/* 64 (version 1) or 128 (versions 2, 3) */
	uint64		system_identifier;
	uint64		generation;
	uint64		segment_index;
	XLogRecPtr	start_lsn;
	uint32		timeline;
	CsSealState seal_state;
	CsSegmentSeal seal;			/* when seal_state == CS_SEAL_VALID */
} CsSegmentHeader;

typedef struct CsEntry
{
	char		kind;			/* 'W', 'b', 'c' are returned as
								 * CS_ENTRY_MESSAGE */
	XLogRecPtr	data_start;
	XLogRecPtr	wal_end;
	TimestampTz send_time;		/* 0 where versions 2, 3 keep none */
	uint32		len;
	const char *data;			/* into the frame body, or (version 3 'b'
								 * and 'c') into the decoder: valid until
								 * the next entry is decoded */
} CsEntry;

/*
 * The state an entry encoder or decoder carries through one frame: version
 * 2 stores positions and times as differences from the previous ones in
 * the same frame (both start at 0 in every frame), and splits the frame
 * body into three sections: the entries' heads (kind and data length),
 * their fields, and their data.  Version 3 adds the state of its 'b' and
 * 'c' entries (also 0 at the start of every frame), and the decoder
 * rebuilds their pgoutput message into rebuilt.
 */
typedef struct CsEntryCoder
{
	uint32		version;
	XLogRecPtr	prev_lsn;
	TimestampTz prev_time;
	/* version 3: the last 'b' entry's final LSN, commit time and xid */
	XLogRecPtr	prev_final;
	TimestampTz prev_begin_time;
	uint32		prev_xid;
	/* version 3 decoder: the message of the last 'b' or 'c' entry */
	char		rebuilt[CS_PGOUTPUT_COMMIT_SIZE];
	/* version 2, 3 decoder: the sections, once read (heads_end > 0) */
	uint32		heads_end;
	uint32		fields_off;		/* next field to decode */
	uint32		fields_end;
	uint32		data_off;		/* next entry's data */
	/* version 2, 3 encoder: heads and fields, put before the data at finish */
	StringInfoData heads;
	StringInfoData fields;
} CsEntryCoder;

extern void cs_encode_segment_header(const CsSegmentHeader *hdr, char *buf);
extern bool cs_decode_segment_header(const char *buf, CsSegmentHeader *hdr);
extern void cs_decode_segment_seal(const char *buf, CsSegmentHeader *hdr);
extern void cs_encode_segment_seal(const CsSegmentSeal *seal, char *buf);
extern void cs_seal_note_commit(CsSegmentSeal *seal, XLogRecPtr commit_lsn,
								TimestampTz commit_time);
extern void cs_coder_init(CsEntryCoder *coder, uint32 version);
extern void cs_append_entry(StringInfo frame, CsEntryCoder *coder, char kind,
							XLogRecPtr data_start, XLogRecPtr wal_end,
							TimestampTz send_time,
							const char *data, uint32 len,
							const CsMessageInfo *info);
extern void cs_frame_begin(StringInfo frame, CsEntryCoder *coder,
						   uint32 version);
extern int	cs_frame_pending_size(const StringInfo frame,
								  const CsEntryCoder *coder);
extern void cs_frame_finish(StringInfo frame, CsEntryCoder *coder);
extern void cs_coder_free(CsEntryCoder *coder);
extern bool cs_frame_check_header(const char *hdr, uint32 *body_len,
								  uint32 *crc);
extern bool cs_frame_body_valid(uint32 version, const char *body,
								uint32 body_len, uint32 crc);
extern bool cs_next_entry(CsEntryCoder *coder, const char *body,
						  uint32 body_len, uint32 *offset, CsEntry *entry);

#endif							/* CS_SEGMENT_FORMAT_H */
