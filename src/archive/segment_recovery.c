/*-------------------------------------------------------------------------
 *
 * segment_recovery.c
 *	  Crash recovery of the newest segment of a generation at session
 *	  start (durability rule 4 and the damaged-archive rules 9 and 10 of
 *	  docs/DESIGN.md, sections 4 and 7): find the position of record and
 *	  the schema in force, cut a torn tail back to its last safe point
 *	  (never below the slot's confirmed_flush_lsn), trust only what was
 *	  durable before a failed fsync, upgrade a segment of an older format
 *	  by sealing it, and hand the segment to continue to the writer
 *	  (segment_writer.c).  Anything else that does not validate is damage:
 *	  nothing is changed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "nodes/pg_list.h"

#include "archive/archive_dir.h"
#include "archive/archive_layout.h"
#include "archive/generation.h"
#include "archive/pgoutput_parse.h"
#include "archive/retention_horizon.h"
#include "archive/segment_format.h"
#include "archive/segment_reader.h"
#include "archive/segment_recovery.h"
#include "archive/segment_writer.h"
#include "base/archive_config.h"
#include "base/compat.h"

/* The scan's Relation and Type messages: the schema in force. */
static void
schema_from_scan(const CsEntry *entry, const CsMessageInfo *info, void *arg)
{
	cs_writer_note_schema(entry->data, entry->len, info, true);
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
	{
		/* the scan checked every message: they parse */
		CsMessageInfo info;
		bool		parsed = e.kind == CS_ENTRY_MESSAGE &&
			cs_parse_pgoutput(e.data, e.len, &info);

		cs_append_entry(out, &outc, e.kind, e.data_start, e.wal_end,
						e.send_time, e.data, e.len, parsed ? &info : NULL);
	}
	cs_frame_finish(out, &outc);
	cs_coder_free(&outc);
	pfree(body);
}

/* Write the first keep bytes of fd, then tail, to a .tmp that replaces path. */
static void
rewrite_segment(int fd, const char *path, int64 keep, const StringInfo tail,
				const char *wal_dir)
{
	char		tmp[MAXPGPATH];
	int			out;
	char	   *buf = palloc(64 * 1024);
	int64		done = 0;

	strlcpy(tmp, cs_tmp_path(path), sizeof(tmp));
	out = cs_storage_open(tmp, CS_OPEN_WRITE | CS_OPEN_CREATE);
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
		cs_writer_write_all(out, buf, n, tmp);
		done += n;
	}
	cs_writer_write_all(out, tail->data, tail->len, tmp);
	cs_fsync_fd(out, tmp);
	cs_storage_close(out);
	cs_durable_rename(tmp, path, wal_dir);
	pfree(buf);
}

/*
 * Cut the newest raw segment (path, in wal_dir) back to its last safe
 * point: after a torn write, and after a transaction that was never
 * completed (both hold nothing acknowledged: see cs_writer_recover()).
 * At a frame boundary a single ftruncate() does it.  Inside a frame, the
 * frame's complete entries are re-framed: the kept bytes and the new
 * frame go to a .tmp copy that replaces the segment by rename, so a crash
 * during the repair leaves either the old file or the repaired one.
 */
static void
cut_torn_tail(const char *path, const char *wal_dir, const CsSegmentScan *scan)
{
	int			fd;
	CsStorageInfo st;
	int64		keep;
	StringInfoData rewritten;

	/* errno is ENOENT when it is missing */
	if (cs_storage_stat(path, true, &st) != 0 ||
		st.type == CS_STORAGE_MISSING)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", path)));
	keep = scan->safe_entry_offset == 0 ? scan->safe_end : scan->safe_frame_offset;
	if (scan->safe_entry_offset == 0 && st.size == keep)
		return;

	fd = cs_storage_open(path, CS_OPEN_UPDATE);
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
								 path, (long long) keep, (long long) st.size)));
	else
		ereport(LOG,
				(errmsg("cut changestream segment \"%s\" back to its last complete transaction at " CS_LSN_FMT,
						path, LSN_FORMAT_ARGS(scan->position)),
				 errdetail("Kept %lld of %lld bytes; the %s held no transaction the server counts as archived, so streaming resumes at " CS_LSN_FMT " and the server sends it again.",
						   (long long) (keep + rewritten.len), (long long) st.size,
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
		rewrite_segment(fd, path, keep, &rewritten, wal_dir);
	cs_storage_close(fd);
	pfree(rewritten.data);
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

/* After a failed fsync in this process: trust only what was durable before it. */
static void
cut_to_durable(const char *path)
{
	int64		durable = cs_writer_take_failed_size(path);

	if (durable < 0)
		return;
	if (cs_storage_truncate(path, durable) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not truncate file \"%s\": %m", path)));
	cs_fsync_path(path, false);
}

/*
 * A newest raw segment of an older format is not appended to: it becomes
 * a sealed segment of its generation as it is (one of a format with a
 * seal gets it, as at a rotation), and the stream continues in a new
 * segment of the current format.
 */
static void
upgrade_in_place(const CsSegmentFile *newest, const CsSegmentScan *scan)
{
	if (scan->header.header_size > CS_SEAL_OFFSET)
		cs_writer_write_seal(newest->path, &scan->safe_contents);
	ereport(LOG,
			(errmsg("changestream segment \"%s\" is of format version %u: continuing in a new segment of format version %d",
					newest->path, scan->header.format_version, CS_FORMAT_VERSION)));
	cs_writer_create_segment(newest->index + 1, scan->position);
}

/*
 * cs_writer_recover
 *	  Makes the newest segment of a generation the writer's active one
 *	  after a restart (segment_writer.c): rebuilds the schema in force, and
 *	  returns in *position the archive's position of record (docs/DESIGN.md,
 *	  durability rule 4).  A torn tail of the newest raw segment (its last
 *	  write, with no valid frame after it) is cut back to the last safe
 *	  point, but never below confirmed_flush (the slot's
 *	  confirmed_flush_lsn).  Anything else that does not validate is damage:
 *	  nothing is changed and XX001 names the file and offset (docs/DESIGN.md
 *	  section 7, rules 9 and 10).  A generation without any segment gets
 *	  segment 0 at its identity's start LSN.  Returns true when it sealed
 *	  the newest segment (one of an older format version), which the
 *	  caller then has the maintenance worker compress.
 *	  Errors: XX001 as said, or for a gap in the segments or a missing or
 *	  damaged identity file; file access SQLSTATEs on I/O failures.
 */
bool
cs_writer_recover(const char *directory, uint64 generation,
				  XLogRecPtr confirmed_flush, XLogRecPtr *position)
{
	CsIdentity	identity;
	List	   *segments;
	CsSegmentFile *newest;
	CsSegmentScan scan;
	char	   *wal_dir;

	cs_require_identity(directory, generation, &identity);
	cs_writer_begin(directory, generation, identity.system_identifier,
					identity.timeline);

	segments = cs_list_segments(directory, generation);
	cs_check_segment_sequence(directory, generation, segments);
	if (segments == NIL)
	{
		cs_writer_create_segment(0, identity.start_lsn);
		*position = identity.start_lsn;
		return false;
	}
	newest = llast(segments);
	cut_to_durable(newest->path);

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
		cs_writer_create_segment(newest->index + 1, scan.position);
		return false;
	}

	/*
	 * Below confirmed_flush the archive is behind the slot (an older copy
	 * of the archive, say): the caller opens a new generation and this one
	 * is left exactly as it is.
	 */
	if (scan.position < confirmed_flush)
	{
		cs_writer_resume_segment(newest->index, newest->path, &scan);
		return false;
	}
	wal_dir = cs_wal_dir_path(directory, generation);
	cut_torn_tail(newest->path, wal_dir, &scan);
	pfree(wal_dir);
	if (scan.header.format_version < CS_FORMAT_VERSION)
	{
		upgrade_in_place(newest, &scan);
		return true;
	}
	if (scan.header.seal_state != CS_SEAL_NONE)
		cs_writer_write_seal(newest->path, NULL);
	cs_writer_resume_segment(newest->index, newest->path, &scan);
	return false;
}
