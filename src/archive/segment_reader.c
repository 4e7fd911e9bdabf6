/*-------------------------------------------------------------------------
 *
 * segment_reader.c
 *	  Reads changestream segments, raw (*.wal) and gzip-compressed
 *	  (*.wal.gz) alike: zlib's gzread() passes uncompressed files through
 *	  unchanged.  Frames are validated (magic, length, CRC-32C, entries that
 *	  fill the body) one at a time, and a frame's length is checked against
 *	  the bytes really there before its body is read, in slices, so memory
 *	  is bounded by the bytes of the largest real frame, whatever a damaged
 *	  length says.
 *
 *	  Reading stops at the first frame that does not validate.  Whether
 *	  those bytes are a torn tail (the last write of the newest raw
 *	  segment, cut short by a crash) or damage is decided by
 *	  cs_reader_finish(), by the segment's tail rule (CsTailRule): a torn
 *	  tail can only be the end of the newest raw segment with no valid
 *	  frame anywhere after it (at the writer's recovery, also with a page
 *	  of zeros before the next valid frame), and zeros from there to the
 *	  end of the file are its preallocated tail, the clean end of its data
 *	  (docs/DESIGN.md, damaged-archive rules; docs/FORMAT.md section 11.3).
 *	  Anything else is XX001 naming the file and the offset.
 *
 *	  A reader owns its file through a memory context reset callback, so an
 *	  error anywhere (in the reader or in its caller) closes the file and
 *	  frees zlib's buffers when the caller's memory context goes, and the
 *	  descriptor is counted by fd.c (AcquireExternalFD()).
 *
 *	  cs_scan_segment() walks a whole segment to find its position of
 *	  record (docs/DESIGN.md, durability rules 2 and 4) and its last safe
 *	  point: the end of the last complete transaction, keepalive position
 *	  record or non-transactional message.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "storage/fd.h"
#include "utils/memutils.h"

#include "archive/archive_layout.h"
#include "archive/pgoutput_parse.h"
#include "archive/segment_format.h"
#include "archive/segment_reader.h"
#include "archive/storage.h"
#include "base/wire.h"
#include "base/compat.h"

#define READ_SLICE		(1024 * 1024)	/* body bytes read per gzread() */
#define RESYNC_CHUNK	(1024 * 1024)	/* bytes searched per pread() */
#define CS_PAGE_BYTES	4096	/* the kernel's unit of writeback */

struct CsSegmentReader
{
	MemoryContext cxt;			/* holds the reader; its reset closes the file */
	MemoryContextCallback release;
	char	   *path;
	int			fd;				/* -1 when there is no open file */
	gzFile		gz;				/* reads fd; NULL before gzdopen() */
	bool		compressed;		/* named *.gz: only sealed, complete data */
	int64		file_size;		/* raw files: bytes on disk last seen */
	CsSegmentHeader header;
	StringInfoData body;		/* current frame body */
	int64		offset;			/* uncompressed offset of next frame */
	int64		frame_offset;	/* offset of current frame */
	int64		valid_end;		/* offset after last valid frame */
	uint32		entry_offset;	/* next entry inside current frame */
	CsEntryCoder coder;			/* decoder state of the current frame */
	bool		bad;			/* stopped at bytes that do not validate */
	char	   *bad_reason;		/* why, for errdetail */
	bool		zero_tail;		/* stopped at a preallocated tail */
	uLong		gz_crc;			/* compressed: CRC-32 and length of the */
	int64		gz_len;			/* uncompressed bytes read so far */
};

/* Memory context reset callback: the file and zlib's buffers go. */
static void
reader_release(void *arg)
{
	CsSegmentReader *r = (CsSegmentReader *) arg;

	cs_close_counted_file(r->gz, r->fd);
	r->gz = NULL;
	r->fd = -1;
}

/* Stop reading at the current offset: the bytes there do not validate. */
static bool
stop(CsSegmentReader *r, const char *reason)
{
	r->bad = true;
	r->bad_reason = MemoryContextStrdup(r->cxt, reason);
	return false;
}

/*
 * Read up to len bytes; returns the count (short at the end of the file),
 * or -1 after stop() when the gzip stream is damaged.  I/O errors raise.
 */
static int
read_fully(CsSegmentReader *r, char *buf, int len)
{
	int			got = 0;

	/* the replica's next segments download meanwhile (storage_s3.c) */
	cs_storage_poll();
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
			/* zlib names a gzdopen()ed file "<fd:N>": drop that */
			if (strncmp(msg, "<fd:", 4) == 0 && strstr(msg, ": ") != NULL)
				msg = strstr(msg, ": ") + 2;
			stop(r, psprintf("The gzip stream is damaged (%s).", msg));
			return -1;
		}
		if (n == 0)
			break;
		if (r->compressed)
		{
			r->gz_crc = crc32(r->gz_crc, (const Bytef *) buf + got, n);
			r->gz_len += n;
		}
		got += n;
	}
	return got;
}

/*
 * A compressed segment read to its end: is the file exactly one gzip
 * member (docs/FORMAT.md section 5.2)?  zlib's gzread() ignores bytes
 * after the last member that do not start another one, so look at the
 * file's last 8 bytes: they must be the member's trailer, the CRC-32 and
 * the length (modulo 2^32) of everything read.  Returns false after
 * stop() when they are not.  A file that is not gzip at all (gzread()
 * passes it through) is judged by its frames alone.
 */
static bool
check_gzip_end(CsSegmentReader *r)
{
	struct stat st;
	unsigned char tail[8];
	uint32		crc;
	uint32		isize;

	if (!r->compressed || gzdirect(r->gz))
		return true;
	if (fstat(r->fd, &st) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", r->path)));
	if (st.st_size < (off_t) sizeof(tail) ||
		pread(r->fd, tail, sizeof(tail), st.st_size - sizeof(tail)) != (ssize_t) sizeof(tail))
		return stop(r, "The gzip file is too short for its trailer.");
	crc = (uint32) tail[0] | ((uint32) tail[1] << 8) |
		((uint32) tail[2] << 16) | ((uint32) tail[3] << 24);
	isize = (uint32) tail[4] | ((uint32) tail[5] << 8) |
		((uint32) tail[6] << 16) | ((uint32) tail[7] << 24);
	if (crc != (uint32) r->gz_crc || isize != (uint32) r->gz_len)
		return stop(r, "The gzip file does not end with the trailer of the data it holds: bytes follow its gzip stream (a segment file is one gzip member and nothing else).");
	return true;
}

/*
 * cs_reader_open
 *	  Opens a segment file and validates its 64-byte header.  compressed
 *	  says whether it is named *.wal.gz.  Returns the reader, allocated in
 *	  a child of CurrentMemoryContext, or NULL if the file does not exist
 *	  and missing_ok.  The file is closed by cs_reader_close() or, on error,
 *	  when CurrentMemoryContext is reset or deleted.
 *	  Errors: XX001 when the file is not a regular file or the header is
 *	  not a valid segment header; 53000 when fd.c allows no more files;
 *	  file access SQLSTATEs for I/O failures.
 */
CsSegmentReader *
cs_reader_open(const char *path, bool compressed, bool missing_ok)
{
	MemoryContext cxt;
	CsSegmentReader *r;
	char		hdr[CS_SEGMENT_HEADER_MAX];
	int			fd;
	int			n;
	struct stat st;

	fd = cs_open_counted_file(path, missing_ok);
	if (fd < 0)
		return NULL;
	cxt = AllocSetContextCreate(CurrentMemoryContext,
								"changestream segment reader",
								ALLOCSET_SMALL_SIZES);
	r = MemoryContextAllocZero(cxt, sizeof(CsSegmentReader));
	r->cxt = cxt;
	r->fd = fd;
	r->release.func = reader_release;
	r->release.arg = r;
	MemoryContextRegisterResetCallback(cxt, &r->release);
	r->path = MemoryContextStrdup(cxt, path);
	r->compressed = compressed;
	r->file_size = fstat(fd, &st) == 0 ? st.st_size : -1;
	r->gz_crc = crc32(0L, Z_NULL, 0);

	r->gz = gzdopen(fd, "rb");
	if (r->gz == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory"),
				 errdetail("zlib could not open \"%s\".", path)));
	gzbuffer(r->gz, 128 * 1024);
	n = read_fully(r, hdr, CS_SEGMENT_BASE_SIZE);
	if (n < 0)
		cs_segment_damage(path, 0, "%s", r->bad_reason);
	if (n != CS_SEGMENT_BASE_SIZE || !cs_decode_segment_header(hdr, &r->header))
		cs_segment_damage(path, 0,
						  "The %d-byte segment header is missing, damaged or of an unknown format version.",
						  CS_SEGMENT_BASE_SIZE);
	if (r->header.header_size > CS_SEGMENT_BASE_SIZE)
	{
		int			rest = r->header.header_size - CS_SEGMENT_BASE_SIZE;

		n = read_fully(r, hdr + CS_SEGMENT_BASE_SIZE, rest);
		if (n < 0)
			cs_segment_damage(path, 0, "%s", r->bad_reason);
		if (n != rest)
			cs_segment_damage(path, 0,
							  "The file ends inside its %u-byte segment header.",
							  r->header.header_size);
		cs_decode_segment_seal(hdr, &r->header);
	}
	r->body.data = MemoryContextAlloc(cxt, 1024);
	r->body.maxlen = 1024;
	resetStringInfo(&r->body);
	r->offset = r->header.header_size;
	r->frame_offset = r->header.header_size;
	r->valid_end = r->header.header_size;
	return r;
}

/* cs_reader_header: the segment's decoded header. */
const CsSegmentHeader *
cs_reader_header(CsSegmentReader *r)
{
	return &r->header;
}

/*
 * Would a frame of body_len bytes at the current offset run past the end
 * of a raw file?  The archiver may be appending: look again before saying
 * so.
 */
static bool
runs_past_end(CsSegmentReader *r, uint32 body_len)
{
	int64		end = r->offset + CS_FRAME_HEADER_SIZE + (int64) body_len;
	struct stat st;

	if (r->compressed || r->file_size < 0 || end <= r->file_size)
		return false;
	if (fstat(r->fd, &st) == 0)
		r->file_size = st.st_size;
	return end > r->file_size;
}

/* Read a frame body of body_len bytes in slices into r->body. */
static bool
read_body(CsSegmentReader *r, uint32 body_len)
{
	resetStringInfo(&r->body);
	while ((uint32) r->body.len < body_len)
	{
		int			want = Min(body_len - r->body.len, READ_SLICE);
		int			n;

		enlargeStringInfo(&r->body, want);
		n = read_fully(r, r->body.data + r->body.len, want);
		if (n < 0)
			return false;
		r->body.len += n;
		if (n < want)
			return stop(r, psprintf("The file ends inside the body of a frame of %u bytes.",
									body_len));
	}
	return true;
}

/*
 * cs_reader_next_frame
 *	  Reads and validates the next frame.  Returns false at the end of the
 *	  segment or at bytes that do not validate; cs_reader_finish() tells
 *	  the two apart.  Errors: file access SQLSTATEs on I/O failures.
 */
bool
cs_reader_next_frame(CsSegmentReader *r)
{
	char		fh[CS_FRAME_HEADER_SIZE];
	uint32		body_len;
	uint32		crc;
	int			n;

	if (r->bad)
		return false;
	n = read_fully(r, fh, CS_FRAME_HEADER_SIZE);
	if (n == 0)
	{
		/* the end of the file; of a compressed one, also of its member */
		(void) check_gzip_end(r);
		return false;
	}
	if (n < 0)
		return false;
	if (n < CS_FRAME_HEADER_SIZE)
		return stop(r, "The file ends inside a frame header.");
	if (!cs_frame_check_header(fh, &body_len, &crc))
		return stop(r, psprintf("The frame header is not valid (magic %08x, length %u).",
								cs_get32(fh), cs_get32(fh + 4)));
	if (body_len >= MaxAllocSize)
		return stop(r, psprintf("The frame length %u is larger than any frame can be.",
								body_len));
	if (runs_past_end(r, body_len))
		return stop(r, psprintf("The frame length %u runs past the end of the file (%lld bytes).",
								body_len, (long long) r->file_size));
	if (!read_body(r, body_len))
		return false;
	if (!cs_frame_body_valid(r->header.format_version, r->body.data,
							 body_len, crc))
		return stop(r, "The frame's CRC-32C does not match its body, or its entries do not fill it.");
	r->frame_offset = r->offset;
	r->offset += CS_FRAME_HEADER_SIZE + body_len;
	r->valid_end = r->offset;
	r->entry_offset = 0;
	cs_coder_init(&r->coder, r->header.format_version);
	return true;
}

/*
 * pread() of the raw file, leaving zlib's file position alone; returns the
 * bytes read (0 at the end of the file).  Errors: file access SQLSTATEs.
 */
static ssize_t
pread_raw(CsSegmentReader *r, char *buf, size_t len, int64 at)
{
	ssize_t		n = pread(r->fd, buf, len, at);

	if (n < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not read file \"%s\": %m", r->path)));
	return n;
}

/*
 * The offset of the first valid frame in a raw file after offset from, or
 * -1 if there is none.  A frame is recognised by its magic, a length that
 * fits in the file and a matching CRC-32C.  The file is searched with
 * pread(), which leaves zlib's file position alone.
 */
static int64
next_valid_frame(CsSegmentReader *r, int64 from)
{
	struct stat st;
	char	   *chunk;
	int64		pos;
	int64		found = -1;

	if (fstat(r->fd, &st) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", r->path)));
	chunk = palloc(RESYNC_CHUNK);
	for (pos = from + 1; found < 0 && pos + CS_FRAME_HEADER_SIZE <= st.st_size;)
	{
		ssize_t		n;
		ssize_t		i;

		CHECK_FOR_INTERRUPTS();
		n = pread_raw(r, chunk, RESYNC_CHUNK, pos);
		for (i = 0; found < 0 && i + CS_FRAME_HEADER_SIZE <= n; i++)
		{
			uint32		len;
			uint32		crc;
			char	   *body;

			if (!cs_frame_check_header(chunk + i, &len, &crc) ||
				pos + i + CS_FRAME_HEADER_SIZE + (int64) len > st.st_size ||
				len >= MaxAllocSize)
				continue;
			body = palloc(len);
			if (pread(r->fd, body, len, pos + i + CS_FRAME_HEADER_SIZE) == (ssize_t) len &&
				cs_frame_body_valid(r->header.format_version, body, len, crc))
				found = pos + i;
			pfree(body);
		}
		if (n < CS_FRAME_HEADER_SIZE)
			break;
		pos += n - (CS_FRAME_HEADER_SIZE - 1);
	}
	pfree(chunk);
	return found;
}

/* Are all n (> 0) bytes of buf zero?  (The first is, and each equals the next.) */
static bool
all_zero(const char *buf, size_t n)
{
	return buf[0] == 0 && (n < 2 || memcmp(buf, buf + 1, n - 1) == 0);
}

/*
 * Is every byte of the raw file from offset from to its end zero?  That is
 * a preallocated tail (segment_spare.c, docs/FORMAT.md section 11.3): the
 * zeros of a spare segment that the archiver has not written over yet.
 * Only the newest raw segment of a generation may have one.  Reads with
 * pread(), which leaves zlib's file position alone.
 */
static bool
zeros_to_end(CsSegmentReader *r, int64 from)
{
	char	   *chunk = palloc(RESYNC_CHUNK);
	int64		pos = from;
	bool		zero = true;

	for (;;)
	{
		ssize_t		n;

		CHECK_FOR_INTERRUPTS();
		n = pread_raw(r, chunk, RESYNC_CHUNK, pos);
		if (n == 0)
			break;
		if (!all_zero(chunk, n))
		{
			zero = false;
			break;
		}
		pos += n;
	}
	pfree(chunk);
	return zero && pos > from;
}

/*
 * Does [from, to) of the raw file hold a whole, aligned page of zeros
 * (CS_PAGE_BYTES)?  After a power loss, the pages of frames written after
 * the last fdatasync may have reached the disk in any order, and a page
 * that never did reads back as it was before: zeros, in a preallocated
 * segment (or in a hole of a grown one).  A bit flip leaves no such page.
 */
static bool
zero_page_between(CsSegmentReader *r, int64 from, int64 to)
{
	char	   *page = palloc(CS_PAGE_BYTES);
	int64		pos = TYPEALIGN(CS_PAGE_BYTES, from);
	bool		found = false;

	for (; !found && pos + CS_PAGE_BYTES <= to; pos += CS_PAGE_BYTES)
	{
		CHECK_FOR_INTERRUPTS();
		if (pread_raw(r, page, CS_PAGE_BYTES, pos) != CS_PAGE_BYTES)
			break;				/* the file ends (it shrank meanwhile) */
		found = all_zero(page, CS_PAGE_BYTES);
	}
	pfree(page);
	return found;
}

/* Does a valid frame start at offset at of the raw file?  (pread()) */
static bool
frame_valid_at(CsSegmentReader *r, int64 at)
{
	char		fh[CS_FRAME_HEADER_SIZE];
	uint32		len;
	uint32		crc;
	char	   *body;
	bool		valid = false;

	struct stat st;

	if (pread(r->fd, fh, CS_FRAME_HEADER_SIZE, at) != CS_FRAME_HEADER_SIZE ||
		!cs_frame_check_header(fh, &len, &crc) || len >= MaxAllocSize)
		return false;
	/* the length is untrusted: check it against the bytes there first */
	if (fstat(r->fd, &st) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", r->path)));
	if (at + CS_FRAME_HEADER_SIZE + (int64) len > (int64) st.st_size)
		return false;
	body = palloc(len);
	if (pread(r->fd, body, len, at + CS_FRAME_HEADER_SIZE) == (ssize_t) len)
		valid = cs_frame_body_valid(r->header.format_version, body, len, crc);
	pfree(body);
	return valid;
}

/*
 * cs_reader_finish
 *	  Judges where reading stopped, by the tail rule (CsTailRule) of the
 *	  segment.  Returns false at a clean end of the segment (also, in the
 *	  newest raw segment, a preallocated tail: zeros from there to the end
 *	  of the file, docs/FORMAT.md section 11.3, and a frame the archiver
 *	  appended while this reader looked), true at a torn tail: bytes that
 *	  do not validate at the end of the newest raw segment with no valid
 *	  frame after them, or, under CS_TAIL_RECOVERY, with valid frames after
 *	  them and a whole page of zeros before the first of those (pages of a
 *	  power loss that never reached the disk; the caller cuts only above
 *	  confirmed_flush_lsn).
 *	  Errors: XX001 naming the file and offset for anything else.
 */
bool
cs_reader_finish(CsSegmentReader *r, CsTailRule tail)
{
	bool		may_be_torn = tail != CS_TAIL_SEALED;
	int64		next;

	if (!r->bad)
		return false;
	if (may_be_torn && !r->compressed)
	{
		if (zeros_to_end(r, r->valid_end))
		{
			r->zero_tail = true;
			return false;
		}
		next = next_valid_frame(r, r->valid_end);
		if (next < 0)
			return true;
		/* frames of a power loss that reached the disk out of order */
		if (tail == CS_TAIL_RECOVERY &&
			zero_page_between(r, r->valid_end, next))
			return true;
		/*
		 * A valid frame follows.  If one is now also where reading stopped,
		 * the archiver appended while this reader looked: every frame is
		 * written after the one before it, so the frame at valid_end was
		 * complete before any later one existed.  Damage never becomes
		 * valid by itself.  Reading ends cleanly where it stopped.
		 */
		if (frame_valid_at(r, r->valid_end))
			return false;
	}
	cs_segment_damage(r->path, r->valid_end, "%s%s", r->bad_reason,
					  r->compressed ? "" :
					  (may_be_torn ? " Valid frames follow, so this is not the torn tail of an interrupted write." :
					   " Only the newest segment of a generation may end in an interrupted write."));
	return false;				/* keep the compiler quiet */
}

/*
 * cs_reader_next_entry
 *	  The next entry of the current frame; false when the frame is done.
 *	  entry->data stays valid until the next cs_reader_next_entry() or
 *	  cs_reader_next_frame() (a format 3 BEGIN or COMMIT is rebuilt in the
 *	  reader's decoder; every other message points into the frame body).
 */
bool
cs_reader_next_entry(CsSegmentReader *r, CsEntry *entry)
{
	if (r->entry_offset >= (uint32) r->body.len)
		return false;
	return cs_next_entry(&r->coder, r->body.data, r->body.len,
						 &r->entry_offset, entry);
}

/* cs_reader_frame_offset: offset of the current frame's header. */
int64
cs_reader_frame_offset(CsSegmentReader *r)
{
	return r->frame_offset;
}

/* cs_reader_valid_end: offset just after the last frame that validated. */
int64
cs_reader_valid_end(CsSegmentReader *r)
{
	return r->valid_end;
}

/* cs_reader_entry_offset: offset inside the current frame of the next entry. */
uint32
cs_reader_entry_offset(CsSegmentReader *r)
{
	return r->entry_offset;
}

/*
 * cs_check_segment_header
 *	  Checks that a segment's header belongs where its file was found: its
 *	  index is the file name's, its generation the directory's, and its
 *	  system identifier and timeline those of the generation's identity.
 *	  Errors: XX001 naming the file at offset 0.
 */
void
cs_check_segment_header(const char *path, const CsSegmentHeader *h,
						int64 index, uint64 generation,
						const CsIdentity *identity)
{
	if ((int64) h->segment_index != index)
		cs_segment_damage(path, 0,
						  "Its header says it is segment %lld, but its name says %lld: it is a copy of another segment.",
						  (long long) h->segment_index, (long long) index);
	if (h->generation != generation)
		cs_segment_damage(path, 0,
						  "Its header names generation %016llx, but it lies in generation %016llx.",
						  (unsigned long long) h->generation,
						  (unsigned long long) generation);
	if (h->system_identifier != identity->system_identifier ||
		h->timeline != identity->timeline)
		cs_segment_damage(path, 0,
						  "Its header names system %llu, timeline %u; the generation's identity file says system %llu, timeline %u.",
						  (unsigned long long) h->system_identifier, h->timeline,
						  (unsigned long long) identity->system_identifier,
						  identity->timeline);
}

/*
 * cs_reader_close
 *	  Closes the file and frees the reader (deleting its memory context
 *	  runs the release callback).
 */
void
cs_reader_close(CsSegmentReader *r)
{
	MemoryContextDelete(r->cxt);
}

/*
 * cs_segment_sealed
 *	  Does the raw segment at path carry a valid seal in its header (version
 *	  2 or 3, docs/FORMAT.md section 6.2)?  The archiver seals a segment only
 *	  once it holds everything it ever will, ending between transactions: at
 *	  rotation, and for the last segment of a generation at the hand-off to
 *	  the next (docs/DESIGN.md section 6).  Reads the header only.  False
 *	  when the file is missing, unreadable or shorter than a sealed header,
 *	  or its header or seal does not decode: the readers judge such a file,
 *	  not this test.  Never raises.
 */
bool
cs_segment_sealed(const char *path)
{
	char		buf[CS_SEGMENT_HEADER_MAX];
	CsSegmentHeader header;
	int			fd = cs_storage_open(path, CS_OPEN_READ);
	ssize_t		n;

	if (fd < 0)
		return false;
	n = read(fd, buf, CS_SEGMENT_HEADER_V2);
	cs_storage_close(fd);
	if (n != CS_SEGMENT_HEADER_V2 || !cs_decode_segment_header(buf, &header) ||
		header.header_size != CS_SEGMENT_HEADER_V2)
		return false;
	cs_decode_segment_seal(buf, &header);
	return header.seal_state == CS_SEAL_VALID;
}

/*
 * cs_track_entry
 *	  Advances a position of record over one entry, by the rules of
 *	  docs/DESIGN.md (durability rule 2): a complete transaction's end LSN,
 *	  a keepalive position recorded outside a transaction, or a
 *	  non-transactional message's LSN + 1.  info is the parsed message, NULL
 *	  for a position entry.  Returns NULL, or the reason the entry breaks
 *	  the stream's order (docs/FORMAT.md section 11.6, rule 7: a commit LSN
 *	  that does not increase or lies below a position already reached, a
 *	  COMMIT that does not match its BEGIN or ends before it, a keepalive
 *	  position or non-transactional message that does not advance the
 *	  position of record), for errdetail.
 */
const char *
cs_track_entry(CsPositionTracker *t, const CsEntry *e, const CsMessageInfo *info)
{
	if (info == NULL)
	{
		/* the writer records a keepalive only outside a transaction, and
		 * only when it advances the position; it carries no data */
		if (e->len != 0)
			return psprintf("A keepalive position entry holds %u bytes of data; it holds none.",
							e->len);
		if (t->in_txn)
			return "A keepalive position is recorded inside a transaction.";
		if (e->wal_end <= t->position)
			return psprintf("The keepalive position " CS_LSN_FMT " does not advance the position of record " CS_LSN_FMT ".",
							LSN_FORMAT_ARGS(e->wal_end), LSN_FORMAT_ARGS(t->position));
		t->position = e->wal_end;
		t->floor = Max(t->floor, e->wal_end);
		return NULL;
	}
	switch (info->type)
	{
		case 'B':
			if (t->in_txn)
				return "A BEGIN follows a BEGIN without a COMMIT between them.";
			t->in_txn = true;
			t->begin_lsn = info->lsn;
			break;
		case 'C':
			if (!t->in_txn)
				return "A COMMIT is not preceded by its BEGIN.";
			if (info->lsn != t->begin_lsn)
				return psprintf("The COMMIT's commit LSN " CS_LSN_FMT " differs from its BEGIN's final LSN " CS_LSN_FMT ".",
								LSN_FORMAT_ARGS(info->lsn), LSN_FORMAT_ARGS(t->begin_lsn));
			if (t->last_commit_lsn != InvalidXLogRecPtr &&
				info->lsn <= t->last_commit_lsn)
				return psprintf("The commit LSN " CS_LSN_FMT " does not follow the previous commit LSN " CS_LSN_FMT ": a transaction is archived twice or out of order.",
								LSN_FORMAT_ARGS(info->lsn),
								LSN_FORMAT_ARGS(t->last_commit_lsn));
			if (info->lsn < t->floor)
				return psprintf("The commit LSN " CS_LSN_FMT " lies before " CS_LSN_FMT ", a position the stream had already reached: the entries are out of order.",
								LSN_FORMAT_ARGS(info->lsn),
								LSN_FORMAT_ARGS(t->floor));
			if (info->end_lsn < info->lsn)
				return psprintf("The COMMIT's end LSN " CS_LSN_FMT " lies before its commit LSN " CS_LSN_FMT ".",
								LSN_FORMAT_ARGS(info->end_lsn),
								LSN_FORMAT_ARGS(info->lsn));
			t->in_txn = false;
			t->last_commit_lsn = info->lsn;
			t->position = Max(t->position, info->end_lsn);
			t->floor = Max(t->floor, info->end_lsn);
			t->transactions++;
			break;
		case 'M':
			if (info->transactional && !t->in_txn)
				return "A transactional logical message lies outside a transaction.";
			if (!info->transactional && !t->in_txn)
			{
				/* archived only at or after the position of record */
				if (info->lsn < t->position)
					return psprintf("The non-transactional logical message's LSN " CS_LSN_FMT " lies before the position of record " CS_LSN_FMT ": it is archived twice or out of order.",
									LSN_FORMAT_ARGS(info->lsn),
									LSN_FORMAT_ARGS(t->position));
				t->position = Max(t->position, info->lsn + 1);
				t->floor = Max(t->floor, info->lsn);
			}
			break;
		case 'I':
		case 'U':
		case 'D':
		case 'T':
		case 'R':
		case 'Y':
			if (!t->in_txn)
				return psprintf("A message of type \"%c\" lies outside a transaction.",
								info->type);
			break;
		default:
			break;
	}
	return NULL;
}

/*
 * cs_relation_set
 *	  A set of relation OIDs, in cxt, for cs_check_relations(): the
 *	  relations whose Relation message a segment has held so far.
 */
HTAB *
cs_relation_set(MemoryContext cxt)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(Oid);
	ctl.hcxt = cxt;
	return hash_create("changestream segment relations", 64, &ctl,
					   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/*
 * cs_check_relations
 *	  docs/FORMAT.md section 9.2: every relation a change (Insert, Update,
 *	  Delete, Truncate) names has its Relation message earlier in the same
 *	  segment, as a preamble or a streamed entry.  rels holds the OIDs seen
 *	  so far in the segment; a Relation message adds its own.  e's message
 *	  was checked by cs_check_entry_message().  Returns NULL, or the
 *	  problem, for errdetail.
 */
const char *
cs_check_relations(HTAB *rels, const CsEntry *e)
{
	uint32		n;

	if (e->data[0] == 'R')
	{
		CsMessageInfo info;

		if (cs_parse_pgoutput(e->data, e->len, &info))
			(void) hash_search(rels, &info.oid, HASH_ENTER, NULL);
		return NULL;
	}
	n = cs_pgoutput_relids(e->data, e->len);
	for (uint32 i = 0; i < n; i++)
	{
		Oid			oid = cs_pgoutput_relid(e->data, i);

		if (hash_search(rels, &oid, HASH_FIND, NULL) == NULL)
			return psprintf("A change of type \"%c\" to relation OID %u comes before any Relation message for it in this segment; a segment holds the Relation message of each relation it changes before the change.",
							e->data[0], oid);
	}
	return NULL;
}

typedef struct PendingSchema
{
	CsEntry		entry;
	CsMessageInfo info;
} PendingSchema;

/*
 * Parse an entry's pgoutput message; XX001 at the frame when it is
 * malformed (cs_check_pgoutput()) or, in a preamble entry, not a Relation
 * or Type message.
 */
static void
parse_or_damage(CsSegmentReader *r, const CsEntry *e, CsMessageInfo *info)
{
	const char *problem = cs_check_entry_message(e);

	if (problem == NULL && !cs_parse_pgoutput(e->data, e->len, info))
		problem = "It is too short for its type.";
	if (problem != NULL)
		cs_segment_damage(r->path, r->frame_offset,
						  "The entry ending at byte %u of the frame holds a malformed pgoutput message. %s",
						  r->entry_offset, problem);
}

/*
 * cs_check_entry_message
 *	  Checks the pgoutput message of a message or preamble entry to its
 *	  last byte (cs_check_pgoutput()); a preamble entry must hold a
 *	  Relation or Type message (docs/FORMAT.md section 8.1).  Returns NULL
 *	  when it is sound, else the problem, for errdetail.
 */
const char *
cs_check_entry_message(const CsEntry *e)
{
	const char *problem = cs_check_pgoutput(e->data, e->len);

	if (problem == NULL && e->kind == CS_ENTRY_PREAMBLE &&
		e->data[0] != 'R' && e->data[0] != 'Y')
		problem = psprintf("A preamble entry holds a message of type 0x%02x; it holds only Relation and Type messages.",
						   (unsigned char) e->data[0]);
	return problem;
}

/* Hand the Relation/Type messages of a transaction to schema_cb at COMMIT. */
static void
flush_pending(List *pending, CsSchemaCallback schema_cb, void *arg)
{
	ListCell   *lc;

	foreach(lc, pending)
	{
		PendingSchema *ps = lfirst(lc);

		schema_cb(&ps->entry, &ps->info, arg);
	}
}

/* Remember a Relation/Type message seen inside a transaction. */
static List *
add_pending(List *pending, MemoryContext cxt, const CsEntry *e,
			const CsMessageInfo *info)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);
	PendingSchema *ps = palloc(sizeof(PendingSchema));
	char	   *copy = palloc(e->len);

	memcpy(copy, e->data, e->len);
	ps->entry = *e;
	ps->entry.data = copy;
	ps->info = *info;
	pending = lappend(pending, ps);
	MemoryContextSwitchTo(old);
	return pending;
}

/* Record the safe point after the entry just read, outside a transaction. */
static void
note_safe_point(CsSegmentReader *r, CsSegmentScan *scan)
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

/*
 * cs_scan_segment
 *	  Walks a segment and fills *scan: the position of record at its last
 *	  safe point, where that safe point lies, and whether it ends in a torn
 *	  tail.  tail says how the segment may end (CsTailRule).  schema_cb, if given, sees each Relation/Type message
 *	  (preamble or streamed) that lies before the safe point, in order;
 *	  those inside a transaction once the transaction is complete.
 *	  Returns false if the file is missing.
 *	  Errors: as cs_reader_open(); XX001 naming file and offset for a frame
 *	  that does not validate (other than a torn tail), a malformed pgoutput
 *	  message or transactions out of order.
 */
bool
cs_scan_segment(const char *path, bool compressed, CsTailRule tail,
				CsSegmentScan *scan, CsSchemaCallback schema_cb, void *arg)
{
	CsSegmentReader *r = cs_reader_open(path, compressed, true);
	CsPositionTracker track;
	List	   *pending = NIL;
	MemoryContext scan_cxt;
	HTAB	   *rels;

	if (r == NULL)
		return false;
	memset(scan, 0, sizeof(*scan));
	memset(&track, 0, sizeof(track));
	scan->header = r->header;
	track.position = r->header.start_lsn;
	scan->safe_frame_offset = r->header.header_size;
	scan->safe_end = r->header.header_size;

	scan_cxt = AllocSetContextCreate(r->cxt, "changestream scan",
									 ALLOCSET_DEFAULT_SIZES);
	rels = cs_relation_set(r->cxt);
	while (cs_reader_next_frame(r))
	{
		CsEntry		e;

		while (cs_reader_next_entry(r, &e))
		{
			CsMessageInfo info;
			const char *problem = NULL;

			if (e.kind == CS_ENTRY_POSITION)
				problem = cs_track_entry(&track, &e, NULL);
			else if (e.kind == CS_ENTRY_PREAMBLE)
			{
				/* inside a transaction: only once it is complete */
				parse_or_damage(r, &e, &info);
				problem = cs_check_relations(rels, &e);
				if (schema_cb && track.in_txn)
					pending = add_pending(pending, scan_cxt, &e, &info);
				else if (schema_cb)
					schema_cb(&e, &info, arg);
			}
			else if (e.kind == CS_ENTRY_MESSAGE)
			{
				parse_or_damage(r, &e, &info);
				problem = cs_check_relations(rels, &e);
				if (problem == NULL)
					problem = cs_track_entry(&track, &e, &info);
				if (info.type == 'B' || info.type == 'C')
				{
					if (info.type == 'C' && schema_cb)
						flush_pending(pending, schema_cb, arg);
					pending = NIL;
					MemoryContextReset(scan_cxt);
				}
				else if ((info.type == 'R' || info.type == 'Y') && schema_cb)
				{
					if (track.in_txn)
						pending = add_pending(pending, scan_cxt, &e, &info);
					else
						schema_cb(&e, &info, arg);
				}
			}
			if (problem != NULL)
				cs_segment_damage(path, r->frame_offset, "%s", problem);
			if (e.kind == CS_ENTRY_MESSAGE && info.type == 'C')
				cs_seal_note_commit(&scan->contents, info.lsn,
									info.commit_time);
			if (!track.in_txn)
			{
				note_safe_point(r, scan);
				scan->safe_contents = scan->contents;
			}
		}
	}
	scan->torn = cs_reader_finish(r, tail);
	scan->zero_tail = r->zero_tail;
	scan->position = track.position;
	scan->last_commit_lsn = track.last_commit_lsn;
	scan->transactions = track.transactions;
	scan->valid_end = r->valid_end;
	scan->safe_contents.end_lsn = track.position;
	cs_reader_close(r);
	return true;
}
