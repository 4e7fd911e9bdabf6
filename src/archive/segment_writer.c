/*-------------------------------------------------------------------------
 *
 * segment_writer.c
 *	  The active changestream segment of the current generation:
 *	  appending framed entries, write + fdatasync (the only thing that
 *	  makes data durable), rotation at transaction boundaries, and the
 *	  schema preamble each change needs (segment_schema.c) (durability
 *	  rules 1 and 5 of docs/DESIGN.md).  Crash recovery of the newest
 *	  segment, which hands the writer the segment to continue, is
 *	  segment_recovery.c.
 *
 *	  Entries accumulate in one frame in memory; a frame is written when it
 *	  reaches CS_FRAME_TARGET bytes or when the archiver flushes, so memory
 *	  stays bounded however large a transaction is.
 *
 *	  All of the writer's state is one struct, CsWriterState, as
 *	  walreceiver.c keeps its LogstreamResult.  The writer only does I/O:
 *	  its callers (stream.c, archiver.c) publish the active segment in
 *	  shared memory (cs_writer_segment_index()) and wake the maintenance worker
 *	  after a segment is sealed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "archive/archive_dir.h"
#include "archive/archive_layout.h"
#include "archive/pgoutput_parse.h"
#include "archive/segment_format.h"
#include "archive/segment_reader.h"
#include "archive/segment_schema.h"
#include "archive/segment_spare.h"
#include "archive/segment_writer.h"
#include "base/guc.h"

#define CS_FRAME_TARGET (1024 * 1024)

typedef struct CsWriterState
{
	MemoryContext cxt;			/* the frame and the schema table */

	/* where segments go, and what their headers say */
	char		archive_dir[MAXPGPATH];
	char		wal_dir[MAXPGPATH];
	uint64		generation;
	uint64		system_identifier;
	uint32		timeline;

	/* the active segment */
	char		path[MAXPGPATH];
	int			fd;				/* -1: none */
	int64		index;			/* -1: none */
	int64		size;			/* bytes written to the file */
	int64		preamble;		/* bytes of preamble entries in it */
	int64		durable_size;	/* bytes known to be fsynced */
	TimestampTz opened_at;
	bool		has_data;
	bool		unsynced;
	CsSegmentSeal seal;			/* commits written to the active segment */

	/* the frame being built */
	StringInfoData frame;
	CsEntryCoder coder;
	int			frame_entries;

	/*
	 * Survives across sessions of one process (cs_writer_reset() keeps
	 * it): after a failed fsync the page cache cannot be trusted, so the
	 * next recovery cuts the file back to what was last known durable.
	 */
	char		failed_path[MAXPGPATH];
	int64		failed_durable_size;	/* -1: none */
} CsWriterState;

static CsWriterState wr = {.fd = -1,.index = -1,.failed_durable_size = -1};

static void write_frame(bool writeback);

/*
 * cs_writer_reset
 *	  Close the active segment (without flushing) and forget all state but
 *	  a failed fsync's.  Used at session start and on the error path.
 */
void
cs_writer_reset(void)
{
	MemoryContext old;

	if (wr.fd >= 0)
		close(wr.fd);
	wr.fd = -1;
	wr.index = -1;
	wr.unsynced = false;
	if (wr.cxt == NULL)
		wr.cxt = AllocSetContextCreate(TopMemoryContext,
									   "changestream writer",
									   ALLOCSET_DEFAULT_SIZES);
	else
		MemoryContextReset(wr.cxt);
	/* the reset freed the encoder's buffers too */
	memset(&wr.coder, 0, sizeof(wr.coder));
	cs_schema_reset(wr.cxt);
	old = MemoryContextSwitchTo(wr.cxt);
	initStringInfo(&wr.frame);
	MemoryContextSwitchTo(old);
	cs_frame_begin(&wr.frame, &wr.coder, CS_FORMAT_VERSION);
	wr.frame_entries = 0;
}

/*
 * cs_writer_note_schema
 *	  Remember a Relation or Type message (data, len bytes; info from
 *	  cs_parse_pgoutput()) as the one in force for its OID.  in_segment:
 *	  it is being written to the active segment (not skipped), so the
 *	  segment holds it from here on.
 */
void
cs_writer_note_schema(const char *data, uint32 len, const CsMessageInfo *info,
					  bool in_segment)
{
	cs_schema_note(data, len, info->type, info->oid, in_segment);
}

/*
 * cs_writer_write_all
 *	  Write len bytes of buf to fd (path names it in errors), retrying
 *	  short writes and EINTR.  Errors: file access SQLSTATEs.
 */
void
cs_writer_write_all(int fd, const char *buf, size_t len, const char *path)
{
	while (len > 0)
	{
		ssize_t		n = write(fd, buf, len);

		if (n < 0)
		{
			if (errno == EINTR)
				continue;
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not write to file \"%s\": %m", path),
					 errhint("Check free space and permissions in changestream.directory; nothing is acknowledged until it is written.")));
		}
		buf += n;
		len -= n;
	}
}

/* The active segment's counters for a segment that starts out of size bytes. */
static void
start_active(int64 index, int64 size)
{
	wr.size = size;
	wr.durable_size = size;
	wr.index = index;
	wr.opened_at = GetCurrentTimestamp();
	wr.unsynced = false;
}

/*
 * cs_writer_create_segment
 *	  Create segment index of the writer's generation with header and
 *	  schema preamble as a .tmp, fsync, rename into place, fsync the
 *	  directory, and make it the active segment, starting at start_lsn.
 *	  Errors: file access SQLSTATEs.
 */
void
cs_writer_create_segment(int64 index, XLogRecPtr start_lsn)
{
	CsSegmentHeader hdr;
	char		buf[CS_SEGMENT_HEADER_V2];
	char		tmp[MAXPGPATH];
	char	   *name;

	name = cs_segment_file_name(index, false);
	strlcpy(wr.path, cs_file_in(wr.wal_dir, name), sizeof(wr.path));
	strlcpy(tmp, cs_tmp_path(wr.path), sizeof(tmp));
	pfree(name);

	memset(&hdr, 0, sizeof(hdr));
	hdr.system_identifier = wr.system_identifier;
	hdr.generation = wr.generation;
	hdr.segment_index = index;
	hdr.start_lsn = start_lsn;
	hdr.timeline = wr.timeline;
	cs_encode_segment_header(&hdr, buf);

	/* the maintenance worker's zero-filled spare, else an empty file */
	wr.fd = cs_spare_take(wr.archive_dir, tmp);
	if (wr.fd < 0)
		wr.fd = cs_storage_open_stream(tmp, CS_OPEN_WRITE | CS_OPEN_CREATE |
									   CS_OPEN_NOFOLLOW);
	if (wr.fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", tmp),
				 errhint("The server's operating system user must be able to write changestream.directory.")));
	cs_writer_write_all(wr.fd, buf, CS_SEGMENT_HEADER_V2, tmp);
	wr.preamble = 0;
	memset(&wr.seal, 0, sizeof(wr.seal));
	cs_schema_new_segment();
	cs_durable_rename(tmp, wr.path, wr.wal_dir);

	start_active(index, CS_SEGMENT_HEADER_V2);
	wr.has_data = false;
	cs_frame_begin(&wr.frame, &wr.coder, CS_FORMAT_VERSION);
	wr.frame_entries = 0;
}

/*
 * cs_writer_begin
 *	  Forget all state (cs_writer_reset()) and write generation of
 *	  directory from now on, with system_identifier and timeline in its
 *	  segment headers.  No segment is active until
 *	  cs_writer_create_segment() or cs_writer_resume_segment().
 */
void
cs_writer_begin(const char *directory, uint64 generation,
				uint64 system_identifier, uint32 timeline)
{
	char	   *p;

	cs_writer_reset();
	p = cs_wal_dir_path(directory, generation);
	strlcpy(wr.archive_dir, directory, sizeof(wr.archive_dir));
	strlcpy(wr.wal_dir, p, sizeof(wr.wal_dir));
	pfree(p);
	wr.generation = generation;
	wr.system_identifier = system_identifier;
	wr.timeline = timeline;
}

/*
 * cs_writer_open_first
 *	  Start segment 0 of a new generation, positioned at start_lsn.
 */
void
cs_writer_open_first(const char *directory, uint64 generation,
					 uint64 system_identifier, uint32 timeline,
					 XLogRecPtr start_lsn)
{
	cs_writer_begin(directory, generation, system_identifier, timeline);
	cs_writer_create_segment(0, start_lsn);
}

/*
 * cs_writer_resume_segment
 *	  Make the recovered newest raw segment (index, at path; scan is what
 *	  recovery found in it) the active one, appended to after its last
 *	  valid byte.  Not O_APPEND: the seal is written into its header with
 *	  pwrite().  Errors: file access SQLSTATEs.
 */
void
cs_writer_resume_segment(int64 index, const char *path,
						 const CsSegmentScan *scan)
{
	CsStorageInfo info;
	int64		size;

	strlcpy(wr.path, path, sizeof(wr.path));
	wr.fd = cs_storage_open_stream(wr.path, CS_OPEN_WRITE);
	if (wr.fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", wr.path),
				 errhint("The server's operating system user must be able to write changestream.directory.")));
	if (cs_storage_fstat(wr.fd, &info) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", wr.path)));
	/* after a preallocated tail that was not cut, write over its zeros */
	size = scan->zero_tail ? Min(scan->valid_end, info.size) : info.size;
	if (lseek(wr.fd, size, SEEK_SET) != size)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not seek to end of file \"%s\": %m", wr.path)));
	wr.seal = scan->safe_contents;
	wr.preamble = 0;			/* not known: rotation counts it as data */
	start_active(index, size);
	wr.has_data = scan->transactions > 0;
}

/*
 * cs_writer_write_seal
 *	  Write the seal area of the segment at path (seal NULL: zeros, "not
 *	  sealed") and fdatasync it.  Only the 64 bytes at CS_SEAL_OFFSET
 *	  change; the header's first 64 bytes, which readers need to trust the
 *	  file, are never rewritten.  A crash in the middle leaves a seal area
 *	  whose CRC does not match in the newest raw segment, which readers
 *	  take as "not sealed" and recovery clears.  Errors: file access
 *	  SQLSTATEs.
 */
void
cs_writer_write_seal(const char *path, const CsSegmentSeal *seal)
{
	char		buf[CS_SEAL_SIZE];
	int			fd;

	if (seal != NULL)
		cs_encode_segment_seal(seal, buf);
	else
		memset(buf, 0, sizeof(buf));
	fd = cs_storage_open(path, CS_OPEN_WRITE);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	if (pwrite(fd, buf, CS_SEAL_SIZE, CS_SEAL_OFFSET) != CS_SEAL_SIZE)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write to file \"%s\": %m", path)));
	cs_fsync_fd(fd, path);
	cs_storage_close(fd);
}

/*
 * cs_writer_take_failed_size
 *	  After a failed fsync of path in this process: the bytes of path that
 *	  were durable before it; else -1.  Forgets the failure either way
 *	  (recovery acts on it once).
 */
int64
cs_writer_take_failed_size(const char *path)
{
	int64		size = -1;

	if (wr.failed_durable_size >= 0 && strcmp(wr.failed_path, path) == 0)
		size = wr.failed_durable_size;
	wr.failed_durable_size = -1;
	return size;
}

/* After a failed fsync or writeback: remember what was durable before it. */
static void
note_failed_sync(void)
{
	strlcpy(wr.failed_path, wr.path, sizeof(wr.failed_path));
	wr.failed_durable_size = wr.durable_size;
}

/*
 * cs_writer_generation, cs_writer_segment_index
 *	  The generation the writer writes (as given to cs_writer_begin()), and
 *	  the index of the active segment (-1: none), for the callers that
 *	  publish them.
 */
uint64
cs_writer_generation(void)
{
	return wr.generation;
}

int64
cs_writer_segment_index(void)
{
	return wr.index;
}

/*
 * A copy of a Relation or Type message the next change needs, as a
 * preamble entry; its bytes do not count towards segment_size.
 */
static void
add_preamble(const char *data, uint32 len, void *arg)
{
	int			before = cs_frame_pending_size(&wr.frame, &wr.coder);

	cs_append_entry(&wr.frame, &wr.coder, CS_ENTRY_PREAMBLE,
					InvalidXLogRecPtr, InvalidXLogRecPtr, 0, data, len, NULL);
	wr.frame_entries++;
	wr.preamble += cs_frame_pending_size(&wr.frame, &wr.coder) - before;
}

/*
 * cs_writer_add
 *	  Append one entry to the frame being built, preceded, for a change, by
 *	  the Relation and Type messages of its relations that the segment does
 *	  not hold yet (segment_schema.c); writes the frame (without fsync) once
 *	  it reaches CS_FRAME_TARGET bytes.  info is a message entry's
 *	  pgoutput message as cs_parse_pgoutput() read it (NULL for a position
 *	  entry): the seal and the encoder take its fields from there.
 */
void
cs_writer_add(char kind, XLogRecPtr data_start, XLogRecPtr wal_end,
			  TimestampTz send_time, const char *data, uint32 len,
			  const CsMessageInfo *info)
{
	if (kind == CS_ENTRY_MESSAGE)
		cs_schema_require(data, len, add_preamble, NULL);
	cs_append_entry(&wr.frame, &wr.coder, kind, data_start, wal_end,
					send_time, data, len, info);
	wr.frame_entries++;
	if (kind == CS_ENTRY_MESSAGE)
		wr.has_data = true;
	if (kind == CS_ENTRY_MESSAGE && info != NULL && info->type == 'C')
		cs_seal_note_commit(&wr.seal, info->lsn, info->commit_time);
	if (cs_frame_pending_size(&wr.frame, &wr.coder) >= CS_FRAME_TARGET)
		write_frame(true);
}

/*
 * Start writeback of the len bytes just written at offset, as PostgreSQL's
 * pg_flush_data() does (sync_file_range() with SYNC_FILE_RANGE_WRITE), so
 * that the fdatasync() of the next flush finds them on their way to disk
 * and stalls the receive loop less.  Not pg_flush_data() itself: unless
 * data_sync_retry is on it raises a failure to PANIC (data_sync_elevel()),
 * and an I/O error on the archive's disk must not take the server down.
 * A failure is treated as a failed fdatasync (the page cache cannot be
 * trusted any more); skipped with fsync off, as pg_flush_data() is.
 */
static void
start_writeback(off_t offset, off_t len)
{
#ifdef HAVE_SYNC_FILE_RANGE
	static bool not_implemented = false;

	if (!enableFsync || not_implemented)
		return;
	if (sync_file_range(wr.fd, offset, len, SYNC_FILE_RANGE_WRITE) == 0)
		return;
	if (errno == ENOSYS)
	{
		not_implemented = true;
		return;
	}
	note_failed_sync();
	ereport(ERROR,
			(errcode_for_file_access(),
			 errmsg("could not flush dirty data in file \"%s\": %m", wr.path),
			 errdetail("Nothing after the last durable commit was acknowledged.")));
#endif
}

/*
 * Write the frame being built to the segment (no fsync).  With writeback,
 * its writeback starts now: for a full frame (CS_FRAME_TARGET) of a large
 * transaction or a backlog, whose fdatasync comes later.  A frame written
 * for a flush gets none: the fdatasync that follows at once writes it
 * anyway, and a separate sync_file_range() before it only doubled the
 * system calls and the I/O requests of every group commit (strace of the
 * worker under pgbench: 135 us per call, about as long as the fdatasync).
 */
static void
write_frame(bool writeback)
{
	if (wr.frame_entries == 0)
		return;
	cs_frame_finish(&wr.frame, &wr.coder);
	cs_writer_write_all(wr.fd, wr.frame.data, wr.frame.len, wr.path);
	if (writeback)
		start_writeback(wr.size, wr.frame.len);
	wr.size += wr.frame.len;
	wr.unsynced = true;
	cs_frame_begin(&wr.frame, &wr.coder, CS_FORMAT_VERSION);
	wr.frame_entries = 0;
	/* a frame of a huge message must not keep its memory */
	if (wr.frame.maxlen > 4 * CS_FRAME_TARGET)
	{
		MemoryContext old = MemoryContextSwitchTo(wr.cxt);

		pfree(wr.frame.data);
		initStringInfo(&wr.frame);
		cs_frame_begin(&wr.frame, &wr.coder, CS_FORMAT_VERSION);
		MemoryContextSwitchTo(old);
	}
}

/*
 * cs_writer_flush
 *	  Write the pending frame and fdatasync the segment: after this returns
 *	  everything added so far is durable.  Raises on failure, after which the
 *	  next recovery trusts only the bytes durable before this call.
 */
void
cs_writer_flush(void)
{
	write_frame(false);
	if (!wr.unsynced)
		return;
	if (fdatasync(wr.fd) != 0)
	{
		note_failed_sync();
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not fsync file \"%s\": %m", wr.path),
				 errdetail("Nothing after the last durable commit was acknowledged.")));
	}
	wr.durable_size = wr.size;
	wr.unsynced = false;
}

/*
 * cs_writer_durable_size
 *	  The bytes of the active segment known to be fsynced (an int64; -1:
 *	  no segment is active).  The uploader's tail sync reads that many.
 */
int64
cs_writer_durable_size(void)
{
	return wr.fd < 0 ? -1 : wr.durable_size;
}

/* cs_writer_unsynced: is anything added not yet durable? (returns bool) */
bool
cs_writer_unsynced(void)
{
	return wr.frame_entries > 0 || wr.unsynced;
}

/*
 * cs_writer_should_rotate
 *	  At a transaction boundary: is the segment past changestream.segment_size
 *	  (not counting its preamble entries) or, holding data, older than
 *	  changestream.segment_timeout?
 *	  Returns bool.
 */
bool
cs_writer_should_rotate(TimestampTz now)
{
	if (!wr.has_data)
		return false;
	if (wr.size + cs_frame_pending_size(&wr.frame, &wr.coder) - wr.preamble >=
		(int64) cs_segment_size_kb * 1024)
		return true;
	if (cs_segment_timeout_s > 0 &&
		TimestampDifferenceExceeds(wr.opened_at, now, cs_segment_timeout_s * 1000))
		return true;
	return false;
}

/*
 * Cut the active segment back to the bytes written, when it was
 * preallocated (segment_spare.c) and is longer: a sealed segment, and one
 * left by a clean shutdown, never carries the zeros of its spare.  The
 * caller's next fdatasync makes the new size durable.  Returns whether
 * anything was cut.
 */
static bool
trim_preallocation(void)
{
	CsStorageInfo info;

	if (cs_storage_fstat(wr.fd, &info) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", wr.path)));
	if (info.size <= wr.size)
		return false;
	if (ftruncate(wr.fd, wr.size) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not truncate file \"%s\": %m", wr.path)));
	return true;
}

/*
 * End the active segment at end_lsn (an LSN already in it): flush, cut the
 * preallocation, write its seal and fdatasync, close.  wr.index still names
 * the segment sealed.
 */
static void
seal_and_close(XLogRecPtr end_lsn)
{
	cs_writer_flush();
	trim_preallocation();
	wr.seal.end_lsn = end_lsn;
	cs_writer_write_seal(wr.path, &wr.seal);
	close(wr.fd);
	wr.fd = -1;
}

/*
 * cs_writer_rotate
 *	  Seal the active segment (flush; write its commit range and position, the
 *	  current position of record, into its header and fdatasync; close) and
 *	  start the next one at position.  The seal is durable before the next
 *	  segment exists, so a segment with a successor always has its seal.  The
 *	  caller publishes the new segment and wakes the maintenance worker, which
 *	  compresses the sealed one.  Errors: file access SQLSTATEs.
 */
void
cs_writer_rotate(XLogRecPtr position)
{
	seal_and_close(position);
	cs_writer_create_segment(wr.index + 1, position);
}

/*
 * cs_writer_end_generation
 *	  The last segment of the writer's generation ends at end_lsn (the
 *	  position of record, an LSN, which must already be in it): flush, cut
 *	  the preallocation, write its seal (end_lsn) and fdatasync, close.  No
 *	  segment is active afterwards; the schema in force is kept for
 *	  cs_writer_next_generation().  Used at the hand-off to a new
 *	  generation (docs/DESIGN.md section 6).  Errors: file access SQLSTATEs.
 */
void
cs_writer_end_generation(XLogRecPtr end_lsn)
{
	seal_and_close(end_lsn);
	wr.index = -1;
}

/*
 * cs_writer_next_generation
 *	  After cs_writer_end_generation(): write generation of directory
 *	  (system_identifier, timeline in its headers) from now on, starting
 *	  with its segment 0 at start_lsn.  Unlike cs_writer_open_first(), the
 *	  Relation and Type messages in force are kept: the stream goes on, and
 *	  pgoutput does not send them again, so segment 0 gets each in its
 *	  preamble before its first use.  Errors: file access SQLSTATEs.
 */
void
cs_writer_next_generation(const char *directory, uint64 generation,
						  uint64 system_identifier, uint32 timeline,
						  XLogRecPtr start_lsn)
{
	char	   *p = cs_wal_dir_path(directory, generation);

	Assert(wr.fd < 0);
	strlcpy(wr.archive_dir, directory, sizeof(wr.archive_dir));
	strlcpy(wr.wal_dir, p, sizeof(wr.wal_dir));
	pfree(p);
	wr.generation = generation;
	wr.system_identifier = system_identifier;
	wr.timeline = timeline;
	cs_writer_create_segment(0, start_lsn);
}

/*
 * cs_writer_close
 *	  Flush and close the active segment (clean shutdown).
 */
void
cs_writer_close(void)
{
	if (wr.fd < 0)
		return;
	cs_writer_flush();
	if (trim_preallocation())
		cs_fsync_fd(wr.fd, wr.path);
	close(wr.fd);
	wr.fd = -1;
}
