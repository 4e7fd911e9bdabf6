/*-------------------------------------------------------------------------
 *
 * generation_reader.h
 *	  Reading a generation's segments in order, with continuity checked.
 *	  See generation_reader.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_GENERATION_READER_H
#define CS_GENERATION_READER_H

#include "archive/archive_layout.h"
#include "archive/generation.h"
#include "archive/pgoutput_parse.h"
#include "archive/segment_format.h"
#include "archive/segment_reader.h"

typedef struct CsGenerationReader CsGenerationReader;

/* One entry read from a generation, with where it lies. */
typedef struct CsReadItem
{
	CsEntry		entry;
	CsMessageInfo info;			/* parsed, for kind CS_ENTRY_MESSAGE */
	const char *path;			/* the segment file */
	int64		frame_offset;	/* offset of the entry's frame */
} CsReadItem;

/*
 * What a caller remembers of segments read before (verify(), with its
 * record of the replica: verify_record.h).  known() says whether the
 * compressed segment sf was read whole and found sound before and is
 * unchanged since, and gives its header as read then; the reader then
 * checks that header's continuity and seal against the segments around it
 * and passes over the segment without opening it.  read() is told of each
 * compressed, sealed segment read whole and found sound now, with its
 * header.
 */
typedef struct CsSegmentMemory
{
	bool		(*known) (void *arg, const CsSegmentFile *sf,
						  CsSegmentHeader *header);
	void		(*read) (void *arg, const CsSegmentFile *sf,
						 const CsSegmentHeader *header);
	void	   *arg;
} CsSegmentMemory;

extern CsGenerationReader *cs_genreader_open(const char *directory,
											 uint64 generation,
											 XLogRecPtr start_bound,
											 XLogRecPtr end_bound);
extern void cs_genreader_set_time_bounds(CsGenerationReader *reader,
										 bool has_start,
										 TimestampTz start_time,
										 bool has_end, TimestampTz end_time);
extern void cs_genreader_set_stop_time(CsGenerationReader *reader,
									   TimestampTz stop_time);
extern bool cs_genreader_stopped(CsGenerationReader *reader);
extern void cs_genreader_set_memory(CsGenerationReader *reader,
									const CsSegmentMemory *memory);
extern bool cs_genreader_next(CsGenerationReader *reader, CsReadItem *item);
extern void cs_genreader_close(CsGenerationReader *reader);
extern CsSegmentReader *cs_open_listed_segment(CsSegmentFile *sf);

#endif							/* CS_GENERATION_READER_H */
