/*-------------------------------------------------------------------------
 *
 * segment_reader.c
 *	  Reads WAL segments, raw (*.wal) and gzip-compressed (*.wal.gz) alike:
 *	  zlib's gzread() passes uncompressed files through unchanged.  Frames
 *	  are validated (magic, length, CRC-32C) one at a time, so memory is
 *	  bounded by the largest frame, and reading stops at the first frame
 *	  that does not validate: the torn tail of a crash.
 *
 *	  cs_scan_segment() walks a whole segment to find its position of
 *	  record (DESIGN.md, durability rules 2 and 4) and its last safe point,
 *	  the end of the last complete transaction, keepalive position record or
 *	  non-transactional message.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <zlib.h>

#include "nodes/pg_list.h"
#include "utils/memutils.h"

#include "changestream.h"

struct CsSegmentReader
{
	char	   *path;
	gzFile		gz;
	CsSegmentHeader header;
	StringInfoData body;		/* current frame body */
	int64		offset;			/* uncompressed offset of next frame */
	int64		frame_offset;	/* offset of current frame */
	int64		valid_end;		/* offset after last valid frame */
	uint32		entry_offset;	/* next entry inside current frame */
	bool		torn;
};

static int
read_fully(CsSegmentReader *r, char *buf, int len)
{
	int			got = 0;

	while (got < len)
	{
		int			n = gzread(r->gz, buf + got, len - got);

		if (n < 0)
		{
			int			errnum;
			const char *msg = gzerror(r->gz, &errnum);

			if (errnum == Z_ERRNO)
				ereport(ERROR,
						(errcode_for_file_access(),
						 errmsg("could not read file \"%s\": %m", r->path)));
			/* a damaged gzip stream reads as a torn tail */
			ereport(DEBUG1,
					(errmsg_internal("gzip error in \"%s\": %s", r->path, msg)));
			return got;
		}
		if (n == 0)
			break;
		got += n;
	}
	return got;
}

/*
 * cs_reader_open(path, missing_ok) -> CsSegmentReader * (NULL if missing
 * and missing_ok)
 *	  Open a segment and validate its header.  Raises 58030 on I/O errors
 *	  and XX001 (data_corrupted) when the header is not a valid segment
 *	  header.
 */
CsSegmentReader *
cs_reader_open(const char *path, bool missing_ok)
{
	CsSegmentReader *r;
	char		hdr[CS_SEGMENT_HEADER_SIZE];

	r = palloc0(sizeof(CsSegmentReader));
	r->path = pstrdup(path);
	r->gz = gzopen(path, "rb");
	if (r->gz == NULL)
	{
		if (errno == ENOENT && missing_ok)
		{
			pfree(r->path);
			pfree(r);
			return NULL;
		}
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	}
	gzbuffer(r->gz, 128 * 1024);
	if (read_fully(r, hdr, CS_SEGMENT_HEADER_SIZE) != CS_SEGMENT_HEADER_SIZE ||
		!cs_decode_segment_header(hdr, &r->header))
	{
		gzclose(r->gz);
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("\"%s\" is not a valid changestream WAL segment", path),
				 errdetail("The %d-byte segment header is missing, damaged or of an unknown format version.",
						   CS_SEGMENT_HEADER_SIZE)));
	}
	initStringInfo(&r->body);
	r->offset = CS_SEGMENT_HEADER_SIZE;
	r->frame_offset = CS_SEGMENT_HEADER_SIZE;
	r->valid_end = CS_SEGMENT_HEADER_SIZE;
	return r;
}

/* cs_reader_header(reader) -> the segment's decoded header */
const CsSegmentHeader *
cs_reader_header(CsSegmentReader *r)
{
	return &r->header;
}

/*
 * cs_reader_next_frame(reader) -> bool
 *	  Read and validate the next frame.  False at the end of the segment,
 *	  or at a frame that does not validate (then cs_reader_torn() is true).
 */
bool
cs_reader_next_frame(CsSegmentReader *r)
{
	char		fh[CS_FRAME_HEADER_SIZE];
	uint32		body_len;
	uint32		crc;
	int			n;

	if (r->torn)
		return false;
	n = read_fully(r, fh, CS_FRAME_HEADER_SIZE);
	if (n == 0)
		return false;
	if (n < CS_FRAME_HEADER_SIZE || !cs_frame_check_header(fh, &body_len, &crc))
	{
		r->torn = true;
		return false;
	}
	resetStringInfo(&r->body);
	enlargeStringInfo(&r->body, body_len);
	if (read_fully(r, r->body.data, body_len) != (int) body_len ||
		!cs_frame_body_valid(r->body.data, body_len, crc))
	{
		r->torn = true;
		return false;
	}
	r->body.len = body_len;
	r->frame_offset = r->offset;
	r->offset += CS_FRAME_HEADER_SIZE + body_len;
	r->valid_end = r->offset;
	r->entry_offset = 0;
	return true;
}

/*
 * cs_reader_next_entry(reader, *entry) -> bool
 *	  The next entry of the current frame; false when the frame is done.
 *	  entry->data stays valid until the next cs_reader_next_frame().
 */
bool
cs_reader_next_entry(CsSegmentReader *r, CsEntry *entry)
{
	if (r->entry_offset >= (uint32) r->body.len)
		return false;
	return cs_next_entry(r->body.data, r->body.len, &r->entry_offset, entry);
}

/* Offset of the current frame's header in the uncompressed segment. */
int64
cs_reader_frame_offset(CsSegmentReader *r)
{
	return r->frame_offset;
}

/* Offset just after the last frame that validated. */
int64
cs_reader_valid_end(CsSegmentReader *r)
{
	return r->valid_end;
}

/* Offset inside the current frame's body of the next entry. */
uint32
cs_reader_entry_offset(CsSegmentReader *r)
{
	return r->entry_offset;
}

/* The current frame's body. */
const char *
cs_reader_frame_body(CsSegmentReader *r)
{
	return r->body.data;
}

/* True if reading stopped at bytes that did not validate. */
bool
cs_reader_torn(CsSegmentReader *r)
{
	return r->torn;
}

/* cs_reader_close(reader) -> void: close the file, free the reader. */
void
cs_reader_close(CsSegmentReader *r)
{
	gzclose(r->gz);
	pfree(r->body.data);
	pfree(r->path);
	pfree(r);
}

typedef struct PendingSchema
{
	CsEntry		entry;
	CsMessageInfo info;
} PendingSchema;

/*
 * cs_scan_segment(path, *scan, schema_cb, arg) -> bool (false if missing)
 *	  Walk a segment and fill *scan: the position of record at its last
 *	  safe point (greatest of the header's start LSN, the end LSN of each
 *	  complete transaction and each keepalive position record), where that
 *	  safe point lies, and whether trailing bytes failed to validate.
 *	  schema_cb, if given, sees each Relation/Type message (preamble or
 *	  streamed) that lies before the safe point, in order.  Raises as
 *	  cs_reader_open() and XX000 on a malformed pgoutput message.
 */
bool
cs_scan_segment(const char *path, CsSegmentScan *scan,
				CsSchemaCallback schema_cb, void *arg)
{
	CsSegmentReader *r = cs_reader_open(path, true);
	bool		in_txn = false;
	List	   *pending = NIL;
	MemoryContext scan_cxt;
	MemoryContext old;

	if (r == NULL)
		return false;
	memset(scan, 0, sizeof(*scan));
	scan->header = r->header;
	scan->position = r->header.start_lsn;
	scan->safe_frame_offset = CS_SEGMENT_HEADER_SIZE;
	scan->safe_entry_offset = 0;
	scan->safe_end = CS_SEGMENT_HEADER_SIZE;

	scan_cxt = AllocSetContextCreate(CurrentMemoryContext, "changestream scan",
									 ALLOCSET_DEFAULT_SIZES);
	while (cs_reader_next_frame(r))
	{
		CsEntry		e;

		while (cs_reader_next_entry(r, &e))
		{
			CsMessageInfo info;

			if (e.kind == CS_ENTRY_POSITION)
			{
				if (!in_txn && e.wal_end > scan->position)
					scan->position = e.wal_end;
			}
			else if (e.kind == CS_ENTRY_MESSAGE || e.kind == CS_ENTRY_PREAMBLE)
			{
				if (!cs_parse_pgoutput(e.data, e.len, &info))
					ereport(ERROR,
							(errcode(ERRCODE_DATA_CORRUPTED),
							 errmsg("malformed pgoutput message in \"%s\"", path)));
				if (e.kind == CS_ENTRY_PREAMBLE)
				{
					if (schema_cb)
						schema_cb(&e, &info, arg);
				}
				else if (info.type == 'B')
				{
					in_txn = true;
					MemoryContextReset(scan_cxt);
					pending = NIL;
				}
				else if (info.type == 'C')
				{
					ListCell   *lc;

					in_txn = false;
					scan->last_commit_lsn = info.lsn;
					if (info.end_lsn > scan->position)
						scan->position = info.end_lsn;
					scan->transactions++;
					if (schema_cb)
						foreach(lc, pending)
						{
							PendingSchema *ps = lfirst(lc);

							schema_cb(&ps->entry, &ps->info, arg);
						}
					pending = NIL;
					MemoryContextReset(scan_cxt);
				}
				else if (info.type == 'M' && !info.transactional && !in_txn)
				{
					if (info.lsn + 1 > scan->position)
						scan->position = info.lsn + 1;
				}
				else if ((info.type == 'R' || info.type == 'Y') && schema_cb)
				{
					PendingSchema *ps;
					char	   *copy;

					old = MemoryContextSwitchTo(scan_cxt);
					ps = palloc(sizeof(PendingSchema));
					copy = palloc(e.len);
					memcpy(copy, e.data, e.len);
					ps->entry = e;
					ps->entry.data = copy;
					ps->info = info;
					if (in_txn)
						pending = lappend(pending, ps);
					MemoryContextSwitchTo(old);
					if (!in_txn)
						schema_cb(&e, &info, arg);
				}
			}
			if (!in_txn)
			{
				scan->safe_frame_offset = r->frame_offset;
				scan->safe_entry_offset = r->entry_offset;
				if (r->entry_offset == (uint32) r->body.len)
				{
					scan->safe_end = r->offset;
					scan->safe_entry_offset = 0;
					scan->safe_frame_offset = r->offset;
				}
			}
		}
	}
	scan->valid_end = r->valid_end;
	scan->torn = r->torn;
	cs_reader_close(r);
	MemoryContextDelete(scan_cxt);
	return true;
}
