/*-------------------------------------------------------------------------
 *
 * segment_reader.h
 *	  Declarations of segment_reader.c: reading and scanning one segment.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SEGMENT_READER_H
#define CS_SEGMENT_READER_H

#include "access/xlogdefs.h"
#include "utils/hsearch.h"

#include "archive/generation.h"
#include "archive/pgoutput_parse.h"
#include "archive/segment_format.h"

typedef struct CsSegmentReader CsSegmentReader;

/*
 * How a segment may end (cs_reader_finish(), docs/FORMAT.md section 11.3).
 */
typedef enum CsTailRule
{
	CS_TAIL_SEALED,				/* a .gz, or a raw segment with a successor:
								 * only at a frame boundary */
	CS_TAIL_NEWEST,				/* the newest raw segment, which the archiver
								 * may be writing: also a torn tail (bad bytes,
								 * no valid frame after them) or a
								 * preallocated tail (zeros to the end) */
	CS_TAIL_RECOVERY			/* the newest raw segment at the archiver's
								 * recovery: also bad bytes with valid frames
								 * after them and a page of zeros between,
								 * since the pages of frames written after the
								 * last fdatasync may have reached the disk in
								 * any order; the caller cuts them only above
								 * confirmed_flush_lsn */
} CsTailRule;

extern CsSegmentReader *cs_reader_open(const char *path, bool compressed,
									   bool missing_ok);
extern const CsSegmentHeader *cs_reader_header(CsSegmentReader *reader);
extern bool cs_reader_next_frame(CsSegmentReader *reader);
extern bool cs_reader_next_entry(CsSegmentReader *reader, CsEntry *entry);
extern bool cs_reader_finish(CsSegmentReader *reader, CsTailRule tail);
extern int64 cs_reader_frame_offset(CsSegmentReader *reader);
extern int64 cs_reader_valid_end(CsSegmentReader *reader);
extern uint32 cs_reader_entry_offset(CsSegmentReader *reader);
extern void cs_reader_close(CsSegmentReader *reader);
extern bool cs_segment_sealed(const char *path);
extern void cs_check_segment_header(const char *path,
									const CsSegmentHeader *header,
									int64 index, uint64 generation,
									const CsIdentity *identity);

/*
 * The position of record of a stream of entries, advanced entry by entry
 * (cs_track_entry()), with what is needed to check the stream's order.
 */
typedef struct CsPositionTracker
{
	XLogRecPtr	position;		/* position of record so far */
	bool		in_txn;			/* between a BEGIN and its COMMIT */
	XLogRecPtr	begin_lsn;		/* final LSN of the open transaction */
	XLogRecPtr	last_commit_lsn;	/* commit LSN of the last COMMIT */
	XLogRecPtr	floor;			/* greatest COMMIT end LSN, keepalive
								 * position or non-transactional message
								 * LSN so far: no commit LSN lies below it */
	uint64		transactions;	/* COMMITs seen */
} CsPositionTracker;

extern const char *cs_track_entry(CsPositionTracker *tracker,
								  const CsEntry *entry,
								  const CsMessageInfo *info);
extern const char *cs_check_entry_message(const CsEntry *entry);
extern HTAB *cs_relation_set(MemoryContext cxt);
extern const char *cs_check_relations(HTAB *rels, const CsEntry *entry);

/*
 * Positions found by scanning a segment: what recovery and the SQL
 * functions need to know about its end.
 */
typedef struct CsSegmentScan
{
	CsSegmentHeader header;
	XLogRecPtr	position;		/* position of record at the safe end:
								 * greatest of start LSN, commit end LSNs,
								 * keepalive positions, non-tx message
								 * LSN + 1 */
	XLogRecPtr	last_commit_lsn;	/* commit LSN of last complete txn */
	int64		safe_frame_offset;	/* offset of frame holding safe end */
	uint32		safe_entry_offset;	/* end of safe entries in that frame;
									 * 0 = whole frame is safe */
	int64		safe_end;		/* file offset after last safe frame */
	int64		valid_end;		/* file offset after last valid frame */
	bool		torn;			/* ends in a torn tail */
	bool		zero_tail;		/* ends in a preallocated tail: zeros from
								 * valid_end to the end of the file */
	uint64		transactions;
	CsSegmentSeal contents;		/* commits read so far (scratch) */
	CsSegmentSeal safe_contents;	/* commits before the safe point, and
									 * end_lsn = position: the seal the
									 * segment would get */
} CsSegmentScan;

typedef void (*CsSchemaCallback) (const CsEntry *entry,
								  const CsMessageInfo *info, void *arg);

extern bool cs_scan_segment(const char *path, bool compressed,
							CsTailRule tail, CsSegmentScan *scan,
							CsSchemaCallback schema_cb, void *arg);

#endif							/* CS_SEGMENT_READER_H */
