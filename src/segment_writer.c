/*-------------------------------------------------------------------------
 *
 * segment_writer.c
 *	  The active changestream segment of the current generation:
 *	  appending framed entries, write + fdatasync (the only thing that
 *	  makes data durable), rotation at transaction boundaries, the schema
 *	  preamble each change needs (segment_schema.c), and crash recovery of the newest segment
 *	  (durability rules 1, 4 and 5 of docs/DESIGN.md).
 *
 *	  Entries accumulate in one frame in memory; a frame is written when it
 *	  reaches CS_FRAME_TARGET bytes or when the archiver flushes, so memory
 *	  stays bounded however large a transaction is.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "storage/fd.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "archive_config.h"
#include "archive_dir.h"
#include "archive_layout.h"
#include "retention.h"
#include "compressor.h"
#include "generation.h"
#include "generation_reader.h"
#include "guc.h"
#include "pgoutput_parse.h"
#include "segment_format.h"
#include "segment_reader.h"
#include "segment_schema.h"
#include "segment_spare.h"
#include "segment_writer.h"
#include "shmem_status.h"
#include "wire.h"
#include "compat.h"

#define CS_FRAME_TARGET (1024 * 1024)

static MemoryContext writer_cxt = NULL;

static char archive_dir[MAXPGPATH];
static char wal_dir[MAXPGPATH];
static char seg_path[MAXPGPATH];
static uint64 cur_generation;
static uint64 cur_sysid;
static uint32 cur_tli;
static int	seg_fd = -1;
static int64 seg_index = -1;
static int64 seg_size;			/* bytes written to the file */
static int64 seg_preamble;		/* bytes of preamble entries in it */
static int64 durable_size;		/* bytes known to be fsynced */
static TimestampTz seg_opened_at;
static bool seg_has_data;
static bool unsynced;
static StringInfoData frame;
static CsEntryCoder frame_coder;
static int	frame_entries;
static CsSegmentSeal seg_seal;	/* commits written to the active segment */

static void write_frame(bool writeback);

/*
 * Survives across sessions of one process: after a failed fsync the page
 * cache cannot be trusted, so the next recovery cuts the file back to what
 * was last known durable.
 */
static char failed_path[MAXPGPATH];
static int64 failed_durable_size = -1;

/*
 * cs_writer_reset
 *	  Close the active segment (without flushing) and forget all state.
 *	  Used at session start and on the error path.
 */
void
cs_writer_reset(void)
{
	if (seg_fd >= 0)
		close(seg_fd);
	seg_fd = -1;
	seg_index = -1;
	unsynced = false;
	if (writer_cxt == NULL)
		writer_cxt = AllocSetContextCreate(TopMemoryContext,
										   "changestream writer",
										   ALLOCSET_DEFAULT_SIZES);
	else
		MemoryContextReset(writer_cxt);
	/* the reset freed the encoder's buffers too */
	memset(&frame_coder, 0, sizeof(frame_coder));
	cs_schema_reset(writer_cxt);
	{
		MemoryContext old = MemoryContextSwitchTo(writer_cxt);

		initStringInfo(&frame);
		MemoryContextSwitchTo(old);
	}
	cs_frame_begin(&frame, &frame_coder, CS_FORMAT_VERSION);
	frame_entries = 0;
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

static void
schema_from_scan(const CsEntry *entry, const CsMessageInfo *info, void *arg)
{
	cs_writer_note_schema(entry->data, entry->len, info, true);
}

static void
write_all(int fd, const char *buf, size_t len, const char *path)
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

/*
 * Create segment <index> with header and schema preamble as a .tmp,
 * fsync, rename into place, fsync the directory, and make it active.
 */
static void
create_segment(int64 index, XLogRecPtr start_lsn)
{
	CsSegmentHeader hdr;
	char		buf[CS_SEGMENT_HEADER_V2];
	char		tmp[MAXPGPATH];
	char	   *name;

	name = cs_segment_file_name(index, false);
	strlcpy(seg_path, cs_file_in(wal_dir, name), sizeof(seg_path));
	strlcpy(tmp, cs_tmp_path(seg_path), sizeof(tmp));
	pfree(name);

	memset(&hdr, 0, sizeof(hdr));
	hdr.system_identifier = cur_sysid;
	hdr.generation = cur_generation;
	hdr.segment_index = index;
	hdr.start_lsn = start_lsn;
	hdr.timeline = cur_tli;
	cs_encode_segment_header(&hdr, buf);

	/* the compressor's zero-filled spare, else an empty file */
	seg_fd = cs_spare_take(archive_dir, tmp);
	if (seg_fd < 0)
		seg_fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | PG_BINARY,
					  S_IRUSR | S_IWUSR);
	if (seg_fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", tmp),
				 errhint("The server's operating system user must be able to write changestream.directory.")));
	write_all(seg_fd, buf, CS_SEGMENT_HEADER_V2, tmp);
	seg_size = CS_SEGMENT_HEADER_V2;
	seg_preamble = 0;
	memset(&seg_seal, 0, sizeof(seg_seal));
	cs_schema_new_segment();
	cs_durable_rename(tmp, seg_path, wal_dir);

	durable_size = seg_size;
	seg_index = index;
	seg_opened_at = GetCurrentTimestamp();
	seg_has_data = false;
	unsynced = false;
	cs_frame_begin(&frame, &frame_coder, CS_FORMAT_VERSION);
	frame_entries = 0;

	cs_status_set_segment(index);
}

static void
set_target(const char *directory, uint64 generation, uint64 sysid, uint32 tli)
{
	char	   *p = cs_wal_dir_path(directory, generation);

	strlcpy(archive_dir, directory, sizeof(archive_dir));
	strlcpy(wal_dir, p, sizeof(wal_dir));
	pfree(p);
	cur_generation = generation;
	cur_sysid = sysid;
	cur_tli = tli;
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
	cs_writer_reset();
	set_target(directory, generation, system_identifier, timeline);
	create_segment(0, start_lsn);
}

/* Re-frame the complete entries before safe_entry_offset of the frame at keep. */
static void
reframe_safe_entries(int fd, const char *path, int64 keep,
					 const CsSegmentScan *scan, StringInfo out)
{
	char		fh[CS_FRAME_HEADER_SIZE];
	uint32		body_len;
	uint32		crc;
	uint32		off = 0;
	char	   *body;
	CsEntry		e;
	CsEntryCoder in;
	CsEntryCoder outc;

	memset(&outc, 0, sizeof(outc));

	if (pread(fd, fh, CS_FRAME_HEADER_SIZE, keep) != CS_FRAME_HEADER_SIZE ||
		!cs_frame_check_header(fh, &body_len, &crc))
		cs_segment_damage(path, keep, "The frame read a moment ago no longer validates.");
	body = palloc(body_len);
	if (pread(fd, body, body_len, keep + CS_FRAME_HEADER_SIZE) != (ssize_t) body_len)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not read file \"%s\": %m", path)));
	/* the same format version as the segment's other frames */
	cs_frame_begin(out, &outc, scan->header.format_version);
	cs_coder_init(&in, scan->header.format_version);
	while (off < scan->safe_entry_offset &&
		   cs_next_entry(&in, body, body_len, &off, &e))
		cs_append_entry(out, &outc, e.kind, e.data_start, e.wal_end,
						e.send_time, e.data, e.len);
	cs_frame_finish(out, &outc);
	cs_coder_free(&outc);
	pfree(body);
}

/* Write the first keep bytes of fd, then tail, to a .tmp that replaces path. */
static void
rewrite_segment(int fd, const char *path, int64 keep, const StringInfo tail)
{
	char		tmp[MAXPGPATH];
	int			out;
	char	   *buf = palloc(64 * 1024);
	int64		done = 0;

	strlcpy(tmp, cs_tmp_path(path), sizeof(tmp));
	out = OpenTransientFile(tmp, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	if (out < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", tmp)));
	while (done < keep)
	{
		ssize_t		n = pread(fd, buf, Min(64 * 1024, keep - done), done);

		if (n <= 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read file \"%s\": %m", path)));
		write_all(out, buf, n, tmp);
		done += n;
	}
	write_all(out, tail->data, tail->len, tmp);
	cs_fsync_fd(out, tmp);
	CloseTransientFile(out);
	cs_durable_rename(tmp, path, wal_dir);
	pfree(buf);
}

/*
 * Cut the newest raw segment back to its last safe point: after a torn
 * write, and after a transaction that was never completed (both hold
 * nothing acknowledged: see cs_writer_recover()).  At a frame boundary a
 * single ftruncate() does it.  Inside a frame, the frame's complete
 * entries are re-framed: the kept bytes and the new frame go to a .tmp
 * copy that replaces the segment by rename, so a crash during the repair
 * leaves either the old file or the repaired one.
 */
static void
cut_torn_tail(const char *path, const CsSegmentScan *scan)
{
	int			fd;
	struct stat st;
	int64		keep;
	StringInfoData rewritten;

	if (stat(path, &st) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", path)));
	keep = scan->safe_entry_offset == 0 ? scan->safe_end : scan->safe_frame_offset;
	if (scan->safe_entry_offset == 0 && st.st_size == keep)
		return;

	fd = OpenTransientFile(path, O_RDWR | PG_BINARY);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	initStringInfo(&rewritten);
	if (scan->safe_entry_offset != 0)
		reframe_safe_entries(fd, path, keep, scan, &rewritten);

	if (scan->zero_tail && keep == scan->valid_end && rewritten.len == 0)
		ereport(DEBUG1,
				(errmsg_internal("removed the preallocated tail of changestream segment \"%s\" (%lld of %lld bytes kept)",
								 path, (long long) keep, (long long) st.st_size)));
	else
		ereport(LOG,
				(errmsg("cut changestream segment \"%s\" back to its last complete transaction at " CS_LSN_FMT,
						path, LSN_FORMAT_ARGS(scan->position)),
				 errdetail("Kept %lld of %lld bytes; the %s held no transaction the server counts as archived, so streaming resumes at " CS_LSN_FMT " and the server sends it again.",
						   (long long) (keep + rewritten.len), (long long) st.st_size,
						   scan->torn ? "interrupted write cut" : "incomplete transaction cut",
						   LSN_FORMAT_ARGS(scan->position))));

	if (rewritten.len == 0)
	{
		if (ftruncate(fd, keep) != 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not truncate file \"%s\": %m", path)));
		cs_fsync_fd(fd, path);
	}
	else
		rewrite_segment(fd, path, keep, &rewritten);
	CloseTransientFile(fd);
	pfree(rewritten.data);
}

/*
 * Open the recovered newest raw segment for appending as the active one.
 * Not O_APPEND: the seal is written into its header with pwrite().
 */
static void
open_active(int64 index, const CsSegmentScan *scan)
{
	struct stat st;

	seg_fd = open(seg_path, O_WRONLY | PG_BINARY, 0);
	if (seg_fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", seg_path),
				 errhint("The server's operating system user must be able to write changestream.directory.")));
	if (fstat(seg_fd, &st) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", seg_path)));
	/* after a preallocated tail that was not cut, write over its zeros */
	seg_size = scan->zero_tail ? Min(scan->valid_end, st.st_size) : st.st_size;
	if (lseek(seg_fd, seg_size, SEEK_SET) != seg_size)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not seek to end of file \"%s\": %m", seg_path)));
	seg_seal = scan->safe_contents;
	seg_preamble = 0;			/* not known: rotation counts it as data */
	durable_size = seg_size;
	seg_index = index;
	seg_opened_at = GetCurrentTimestamp();
	seg_has_data = scan->transactions > 0;
	unsynced = false;

	cs_status_set_segment(index);
}

/*
 * Write the seal area of the segment at path (seal NULL: zeros, "not
 * sealed") and fdatasync it.  Only the 64 bytes at CS_SEAL_OFFSET change;
 * the header's first 64 bytes, which readers need to trust the file, are
 * never rewritten.  A crash in the middle leaves a seal area whose CRC does
 * not match in the newest raw segment, which readers take as "not sealed"
 * and recovery clears.
 */
static void
write_seal(const char *path, const CsSegmentSeal *seal)
{
	char		buf[CS_SEAL_SIZE];
	int			fd;

	if (seal != NULL)
		cs_encode_segment_seal(seal, buf);
	else
		memset(buf, 0, sizeof(buf));
	fd = OpenTransientFile(path, O_WRONLY | PG_BINARY);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	if (pwrite(fd, buf, CS_SEAL_SIZE, CS_SEAL_OFFSET) != CS_SEAL_SIZE)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write to file \"%s\": %m", path)));
	cs_fsync_fd(fd, path);
	CloseTransientFile(fd);
}

/*
 * A torn tail may be cut only above what the server already counts as
 * archived: below the slot's confirmed_flush_lsn the cut transactions
 * could never be streamed again.  A torn write below it is damage.
 */
static void
check_cut_allowed(const char *path, const CsSegmentScan *scan,
				  XLogRecPtr confirmed_flush)
{
	if (scan->position >= confirmed_flush)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("changestream segment \"%s\" is damaged at offset %lld",
					path, (long long) scan->valid_end),
			 errdetail("Its last complete transaction ends at " CS_LSN_FMT ", but replication slot \"%s\" has confirmed " CS_LSN_FMT ": cutting the bytes that do not validate would lose transactions the server will not send again.",
					   LSN_FORMAT_ARGS(scan->position),
					   cs_archive_config_current()->slot_name,
					   LSN_FORMAT_ARGS(confirmed_flush)),
			 errhint(CS_DAMAGE_HINT)));
}

/*
 * cs_writer_recover
 *	  Makes the newest segment of a generation the active one after a
 *	  restart: rebuilds the schema in force, and returns
 *	  in *position the archive's position of record (docs/DESIGN.md,
 *	  durability rule 4).  A torn tail of the newest raw segment (its last
 *	  write, with no valid frame after it) is cut back to the last safe
 *	  point, but never below confirmed_flush (the slot's
 *	  confirmed_flush_lsn).  Anything else that does not validate is damage:
 *	  nothing is changed and XX001 names the file and offset.  A generation
 *	  without any segment gets segment 0 at its identity's start LSN.
 *	  Errors: XX001 as said, or for a gap in the segments or a missing or
 *	  damaged identity file; file access SQLSTATEs on I/O failures.
 */
void
cs_writer_recover(const char *directory, uint64 generation,
				  XLogRecPtr confirmed_flush, XLogRecPtr *position)
{
	CsIdentity	identity;
	List	   *segments;
	CsSegmentFile *newest;
	CsSegmentScan scan;

	cs_require_identity(directory, generation, &identity);
	cs_writer_reset();
	set_target(directory, generation, identity.system_identifier,
			   identity.timeline);

	segments = cs_list_segments(directory, generation);
	cs_check_segment_sequence(directory, generation, segments);
	if (segments == NIL)
	{
		create_segment(0, identity.start_lsn);
		*position = identity.start_lsn;
		return;
	}
	newest = llast(segments);

	if (failed_durable_size >= 0 && strcmp(failed_path, newest->path) == 0)
	{
		/* a failed fsync: trust only what was durable before it */
		if (truncate(newest->path, failed_durable_size) != 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not truncate file \"%s\": %m", newest->path)));
		cs_fsync_path(newest->path, false);
	}
	failed_durable_size = -1;

	cs_scan_segment(newest->path, newest->compressed,
					newest->compressed ? CS_TAIL_SEALED : CS_TAIL_RECOVERY,
					&scan, schema_from_scan, NULL);
	cs_check_segment_header(newest->path, &scan.header, newest->index,
							generation, &identity);
	if (scan.torn)
		check_cut_allowed(newest->path, &scan, confirmed_flush);

	*position = scan.position;
	if (newest->compressed)
	{
		/* the newest segment is sealed: continue in a fresh one */
		create_segment(newest->index + 1, scan.position);
		return;
	}
	strlcpy(seg_path, newest->path, sizeof(seg_path));
	/*
	 * Below confirmed_flush the archive is behind the slot (an older copy
	 * of the archive, say): the caller opens a new generation and this one
	 * is left exactly as it is.
	 */
	if (scan.position < confirmed_flush)
	{
		open_active(newest->index, &scan);
		return;
	}
	cut_torn_tail(seg_path, &scan);
	if (scan.header.format_version < CS_FORMAT_VERSION)
	{
		/*
		 * Upgrade in place: a segment of an older format is not appended
		 * to; it becomes a sealed segment of its generation as it is (one
		 * of a format with a seal gets it, as at a rotation), and the
		 * stream continues in a new segment of the current format.
		 */
		if (scan.header.header_size > CS_SEAL_OFFSET)
			write_seal(seg_path, &scan.safe_contents);
		ereport(LOG,
				(errmsg("changestream segment \"%s\" is of format version %u: continuing in a new segment of format version %d",
						seg_path, scan.header.format_version, CS_FORMAT_VERSION)));
		create_segment(newest->index + 1, scan.position);
		cs_compressor_wake();
		return;
	}
	if (scan.header.seal_state != CS_SEAL_NONE)
		write_seal(seg_path, NULL);
	open_active(newest->index, &scan);
}

/*
 * A copy of a Relation or Type message the next change needs, as a
 * preamble entry; its bytes do not count towards segment_size.
 */
static void
add_preamble(const char *data, uint32 len, void *arg)
{
	int			before = cs_frame_pending_size(&frame, &frame_coder);

	cs_append_entry(&frame, &frame_coder, CS_ENTRY_PREAMBLE,
					InvalidXLogRecPtr, InvalidXLogRecPtr, 0, data, len);
	frame_entries++;
	seg_preamble += cs_frame_pending_size(&frame, &frame_coder) - before;
}

/*
 * cs_writer_add
 *	  Append one entry to the frame being built, preceded, for a change, by
 *	  the Relation and Type messages of its relations that the segment does
 *	  not hold yet (segment_schema.c); writes the frame (without fsync) once
 *	  it reaches CS_FRAME_TARGET bytes.
 */
void
cs_writer_add(char kind, XLogRecPtr data_start, XLogRecPtr wal_end,
			  TimestampTz send_time, const char *data, uint32 len)
{
	if (kind == CS_ENTRY_MESSAGE)
		cs_schema_require(data, len, add_preamble, NULL);
	cs_append_entry(&frame, &frame_coder, kind, data_start, wal_end,
					send_time, data, len);
	frame_entries++;
	if (kind == CS_ENTRY_MESSAGE)
		seg_has_data = true;
	if (kind == CS_ENTRY_MESSAGE && len >= 26 && data[0] == 'C')
		cs_seal_note_commit(&seg_seal, cs_get64(data + 2),
							(TimestampTz) cs_get64(data + 18));
	if (cs_frame_pending_size(&frame, &frame_coder) >= CS_FRAME_TARGET)
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
	if (sync_file_range(seg_fd, offset, len, SYNC_FILE_RANGE_WRITE) == 0)
		return;
	if (errno == ENOSYS)
	{
		not_implemented = true;
		return;
	}
	strlcpy(failed_path, seg_path, sizeof(failed_path));
	failed_durable_size = durable_size;
	ereport(ERROR,
			(errcode_for_file_access(),
			 errmsg("could not flush dirty data in file \"%s\": %m", seg_path),
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
	if (frame_entries == 0)
		return;
	cs_frame_finish(&frame, &frame_coder);
	write_all(seg_fd, frame.data, frame.len, seg_path);
	if (writeback)
		start_writeback(seg_size, frame.len);
	seg_size += frame.len;
	unsynced = true;
	cs_frame_begin(&frame, &frame_coder, CS_FORMAT_VERSION);
	frame_entries = 0;
	/* a frame of a huge message must not keep its memory */
	if (frame.maxlen > 4 * CS_FRAME_TARGET)
	{
		MemoryContext old = MemoryContextSwitchTo(writer_cxt);

		pfree(frame.data);
		initStringInfo(&frame);
		cs_frame_begin(&frame, &frame_coder, CS_FORMAT_VERSION);
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
	if (!unsynced)
		return;
	if (fdatasync(seg_fd) != 0)
	{
		strlcpy(failed_path, seg_path, sizeof(failed_path));
		failed_durable_size = durable_size;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not fsync file \"%s\": %m", seg_path),
				 errdetail("Nothing after the last durable commit was acknowledged.")));
	}
	durable_size = seg_size;
	unsynced = false;
}

/* cs_writer_unsynced: is anything added not yet durable? (returns bool) */
bool
cs_writer_unsynced(void)
{
	return frame_entries > 0 || unsynced;
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
	if (!seg_has_data)
		return false;
	if (seg_size + cs_frame_pending_size(&frame, &frame_coder) - seg_preamble >=
		(int64) cs_segment_size_kb * 1024)
		return true;
	if (cs_segment_timeout_s > 0 &&
		TimestampDifferenceExceeds(seg_opened_at, now, cs_segment_timeout_s * 1000))
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
	struct stat st;

	if (fstat(seg_fd, &st) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", seg_path)));
	if (st.st_size <= seg_size)
		return false;
	if (ftruncate(seg_fd, seg_size) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not truncate file \"%s\": %m", seg_path)));
	return true;
}

/*
 * cs_writer_rotate
 *	  Seal the active segment (flush; write its commit range and position,
 *	  the current position of record, into its header and fdatasync; close),
 *	  start the next one at position, and wake the compressor, which
 *	  compresses the sealed one.  The seal is durable before the next
 *	  segment exists, so a segment with a successor always has its seal.
 *	  Errors: file access SQLSTATEs.
 */
void
cs_writer_rotate(XLogRecPtr position)
{
	int64		sealed = seg_index;

	cs_writer_flush();
	trim_preallocation();
	seg_seal.end_lsn = position;
	write_seal(seg_path, &seg_seal);
	close(seg_fd);
	seg_fd = -1;
	create_segment(sealed + 1, position);
	cs_compressor_wake();
}

/*
 * cs_writer_close
 *	  Flush and close the active segment (clean shutdown).
 */
void
cs_writer_close(void)
{
	if (seg_fd < 0)
		return;
	cs_writer_flush();
	if (trim_preallocation())
		cs_fsync_fd(seg_fd, seg_path);
	close(seg_fd);
	seg_fd = -1;
}
