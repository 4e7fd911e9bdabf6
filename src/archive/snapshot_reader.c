/*-------------------------------------------------------------------------
 *
 * snapshot_reader.c
 *	  Reads a snapshot file (docs/FORMAT.md section 3.2) as a stream: the
 *	  manifest lines, then one section per table, each a "COPY ... FROM
 *	  stdin;" line followed by COPY text rows up to the "\." line.
 *	  cs_snapreader_read() hands out a section's rows without the end
 *	  marker, as the data callback of COPY FROM wants them (restore.c), and
 *	  verify() counts them.
 *
 *	  The file is untrusted: it is opened without blocking and checked to
 *	  be a regular file; header lines are bounded; a gzip error, the file
 *	  ending inside a section, or a manifest line that is not a JSON object
 *	  is XX001 naming the file and the offset in the decompressed stream; a
 *	  format version above CS_SNAPSHOT_FORMAT_VERSION is refused.  The file and zlib's buffers are released
 *	  by a reset callback of the reader's memory context, on error too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <errno.h>
#include <unistd.h>
#include <zlib.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "archive/archive_layout.h"
#include "archive/snapshot_manifest.h"
#include "archive/snapshot_reader.h"

#define SNAP_BUF_SIZE	(256 * 1024)
#define SNAP_MAX_LINE	(64 * 1024 * 1024)	/* manifest and COPY lines */

struct CsSnapshotReader
{
	MemoryContext cxt;
	MemoryContextCallback cb;
	char	   *path;
	int			fd;
	gzFile		gz;
	bool		eof;
	char	   *buf;
	int			pos;
	int			len;
	int64		consumed;		/* decompressed bytes before buf[0] */
	bool		in_section;
	bool		line_start;
	XLogRecPtr	lsn;
	TimestampTz time;
	int64		rows;
	int			tables;
	int			format_version;
	char	   *manifest;
	int64		manifest_offset;	/* of the "-- manifest:" line */
};

static void
release(void *arg)
{
	CsSnapshotReader *r = arg;

	cs_close_counted_file(r->gz, r->fd);
	r->gz = NULL;
	r->fd = -1;
}

/* Refill the buffer keeping its unread bytes; false when nothing was added. */
static bool
refill(CsSnapshotReader *r)
{
	int			n;

	if (r->eof)
		return false;
	if (r->pos > 0)
	{
		memmove(r->buf, r->buf + r->pos, r->len - r->pos);
		r->consumed += r->pos;
		r->len -= r->pos;
		r->pos = 0;
	}
	if (r->len == SNAP_BUF_SIZE)
		return false;
	CHECK_FOR_INTERRUPTS();
	n = gzread(r->gz, r->buf + r->len, SNAP_BUF_SIZE - r->len);
	if (n < 0)
	{
		int			err;
		const char *msg = gzerror(r->gz, &err);

		cs_file_damage(r->path, r->consumed + r->len,
					   "The gzip stream cannot be decompressed: %s.", msg);
	}
	if (n == 0)
	{
		int			err;
		const char *msg = gzerror(r->gz, &err);

		if (err != Z_OK && err != Z_BUF_ERROR)
			cs_file_damage(r->path, r->consumed + r->len,
						   "The gzip stream cannot be decompressed: %s.", msg);
		/* zlib reports a truncated stream as Z_BUF_ERROR at the end */
		if (err == Z_BUF_ERROR)
			cs_file_damage(r->path, r->consumed + r->len,
						   "The gzip stream ends before its end marker.");
		r->eof = true;
		return false;
	}
	r->len += n;
	return true;
}

/* Read one line (without its newline) into out; false at a clean EOF. */
static bool
read_line(CsSnapshotReader *r, StringInfo out)
{
	resetStringInfo(out);
	for (;;)
	{
		char	   *nl;

		if (r->pos == r->len && !refill(r))
		{
			if (out->len > 0)
				cs_file_damage(r->path, r->consumed + r->pos,
							   "The file ends inside a line.");
			return false;
		}
		nl = memchr(r->buf + r->pos, '\n', r->len - r->pos);
		if (nl != NULL)
		{
			appendBinaryStringInfo(out, r->buf + r->pos, nl - (r->buf + r->pos));
			r->pos = nl - r->buf + 1;
			return true;
		}
		appendBinaryStringInfo(out, r->buf + r->pos, r->len - r->pos);
		r->pos = r->len;
		if (out->len > SNAP_MAX_LINE)
			cs_file_damage(r->path, r->consumed + r->pos,
						   "A header line is longer than %d bytes.", SNAP_MAX_LINE);
	}
}

/* The manifest's format version v (at offset at): 1 to ours, else refused. */
static void
check_format_version(CsSnapshotReader *r, int64 at, long long v)
{
	if (v < 1)
		cs_file_damage(r->path, at, "The manifest's format version %lld is not a version.", v);
	if (v > CS_SNAPSHOT_FORMAT_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("snapshot \"%s\" has format version %lld, newer than this changestream (%d)",
						r->path, v, CS_SNAPSHOT_FORMAT_VERSION),
				 errhint("Read the archive with a changestream at least as new as the one that wrote it.")));
	r->format_version = (int) v;
}

/*
 * A header line "<prefix><integer>": false when line lacks the prefix; else
 * the integer in *out, and XX001 naming the line's offset at unless the
 * rest of the line is exactly a decimal integer in [min, max] (strtoi64()
 * with an end-pointer and range check: no sscanf(), whose overflow is
 * undefined).
 */
static bool
header_int64(CsSnapshotReader *r, int64 at, const char *line,
			 const char *prefix, int64 min, int64 max, int64 *out)
{
	size_t		n = strlen(prefix);
	const char *digits = line + n;
	char	   *end;

	if (strncmp(line, prefix, n) != 0)
		return false;
	errno = 0;
	*out = strtoi64(digits, &end, 10);
	if (errno != 0 || end == digits || *end != '\0' ||
		!(isdigit((unsigned char) *digits) || *digits == '-') ||
		*out < min || *out > max)
		cs_file_damage(r->path, at,
					   "The manifest line \"%s\" does not end in an integer from " INT64_FORMAT " to " INT64_FORMAT ".",
					   prefix, min, max);
	return true;
}

/*
 * The "-- lsn: X/X" line (two hexadecimal halves of at most 32 bits): false
 * when line is not one; else the LSN in *out, and XX001 naming the line's
 * offset at unless both halves parse exactly.
 */
static bool
header_lsn(CsSnapshotReader *r, int64 at, const char *line, XLogRecPtr *out)
{
	const char *prefix = "-- lsn: ";
	const char *p = line + strlen(prefix);
	uint64		half[2];

	if (strncmp(line, prefix, strlen(prefix)) != 0)
		return false;
	for (int i = 0; i < 2; i++)
	{
		char	   *end;

		errno = 0;
		half[i] = isxdigit((unsigned char) *p) ? strtou64(p, &end, 16) : 0;
		if (!isxdigit((unsigned char) *p) || errno != 0 ||
			half[i] > PG_UINT32_MAX || *end != (i == 0 ? '/' : '\0'))
			cs_file_damage(r->path, at,
						   "The manifest line \"%s\" does not end in an LSN (two hexadecimal halves of at most 32 bits).",
						   prefix);
		p = end + 1;
	}
	*out = (half[0] << 32) | half[1];
	return true;
}

static void
read_manifest(CsSnapshotReader *r)
{
	StringInfoData line;
	int			seen = 0;

	initStringInfo(&line);
	r->format_version = 1;		/* files without the line are version 1 */
	for (;;)
	{
		int64		v;
		int64		at = cs_snapreader_offset(r);

		if (!read_line(r, &line))
			break;
		if (strcmp(line.data, "-- end of manifest") == 0)
		{
			if (seen != 15)
				break;
			return;
		}
		if (header_lsn(r, at, line.data, &r->lsn))
			seen |= 1;
		else if (header_int64(r, at, line.data, "-- tables: ", 0, PG_INT32_MAX, &v))
		{
			r->tables = (int) v;
			seen |= 2;
		}
		else if (header_int64(r, at, line.data, "-- rows: ", 0, PG_INT64_MAX, &v))
		{
			r->rows = v;
			seen |= 4;
		}
		else if (strncmp(line.data, "-- manifest: ", 13) == 0)
		{
			r->manifest = pstrdup(line.data + 13);
			r->manifest_offset = at;
			seen |= 8;
		}
		else if (header_int64(r, at, line.data, "-- format_version: ",
							  PG_INT64_MIN, PG_INT64_MAX, &v))
			check_format_version(r, at, v);
		else if (strncmp(line.data, "-- snapshot_time: ", 18) == 0)
		{
			char	   *t = pstrdup(line.data + 18);
			int			n = strlen(t);

			if (n > 0 && t[n - 1] == 'Z')
				t[n - 1] = '\0';
			r->time = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in,
															  CStringGetDatum(psprintf("%s+00", t)),
															  ObjectIdGetDatum(InvalidOid),
															  Int32GetDatum(-1)));
		}
		else if (strncmp(line.data, "--", 2) != 0)
			break;
	}
	cs_file_damage(r->path, 0,
				   "The snapshot does not begin with a valid manifest (lsn, tables, rows and manifest lines).");
}

/*
 * cs_snapreader_open
 *	  Opens a snapshot file and reads its manifest.  The reader lives in a
 *	  child of CurrentMemoryContext; deleting that closes the file.
 *	  Errors: XX001 naming the file for a non-regular file, a gzip error or
 *	  an invalid manifest; 53000 when fd.c allows no more files; file
 *	  access SQLSTATEs otherwise.
 */
CsSnapshotReader *
cs_snapreader_open(const char *path)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext,
											  "changestream snapshot reader",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	CsSnapshotReader *r = palloc0(sizeof(CsSnapshotReader));
	int			fd;

	r->cxt = cxt;
	r->fd = -1;
	r->path = pstrdup(path);
	r->buf = palloc(SNAP_BUF_SIZE);
	r->cb.func = release;
	r->cb.arg = r;
	MemoryContextRegisterResetCallback(cxt, &r->cb);
	fd = cs_open_counted_file(path, false);
	r->fd = fd;
	r->gz = gzdopen(fd, "rb");
	if (r->gz == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	gzbuffer(r->gz, 128 * 1024);
	read_manifest(r);
	MemoryContextSwitchTo(old);
	return r;
}

XLogRecPtr
cs_snapreader_lsn(CsSnapshotReader *r)
{
	return r->lsn;
}

TimestampTz
cs_snapreader_time(CsSnapshotReader *r)
{
	return r->time;
}

int64
cs_snapreader_rows(CsSnapshotReader *r)
{
	return r->rows;
}

int
cs_snapreader_tables(CsSnapshotReader *r)
{
	return r->tables;
}

const char *
cs_snapreader_manifest(CsSnapshotReader *r)
{
	return r->manifest;
}

/* The snapshot's format version (1 when the manifest has no such line). */
int
cs_snapreader_format_version(CsSnapshotReader *r)
{
	return r->format_version;
}

/* Offset of the "-- manifest:" line in the decompressed stream. */
int64
cs_snapreader_manifest_offset(CsSnapshotReader *r)
{
	return r->manifest_offset;
}

/*
 * cs_snapreader_manifest_json
 *	  The manifest's JSON line parsed (by jsonb_in, in a subtransaction, so
 *	  that text it rejects is damage and not an input syntax error),
 *	  palloc'd in the caller's context.
 *	  Errors: XX001 naming the file and the line's offset when the line is
 *	  not JSON (jsonb_in's message as detail), exceeds a limit of jsonb
 *	  (class 54: nesting beyond max_stack_depth, a string too long) or is
 *	  not a JSON object; errors of other classes (cancel, out of memory)
 *	  as raised.
 */
Jsonb *
cs_snapreader_manifest_json(CsSnapshotReader *r)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	Jsonb	   *volatile jb = NULL;
	ErrorData  *volatile edata = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		jb = DatumGetJsonbP(DirectFunctionCall1(jsonb_in,
												CStringGetDatum(r->manifest)));
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	if (edata != NULL)
	{
		int			category = ERRCODE_TO_CATEGORY(edata->sqlerrcode);

		/* a limit the file's text exceeds (class 54) is damage too */
		if (category != ERRCODE_DATA_EXCEPTION &&
			category != ERRCODE_PROGRAM_LIMIT_EXCEEDED)
			ReThrowError(edata);
		cs_file_damage(r->path, r->manifest_offset,
					   "The manifest line is not JSON that this server can read: %s",
					   edata->message);
	}
	if (!JB_ROOT_IS_OBJECT(jb))
		cs_file_damage(r->path, r->manifest_offset,
					   "The manifest line is not a JSON object.");
	return jb;
}

/* Offset of the next unread byte in the decompressed stream. */
int64
cs_snapreader_offset(CsSnapshotReader *r)
{
	return r->consumed + r->pos;
}

/* Bytes of the compressed file read so far (zlib's gzoffset()). */
int64
cs_snapreader_file_offset(CsSnapshotReader *r)
{
	z_off_t		off = gzoffset(r->gz);

	return off < 0 ? 0 : (int64) off;
}

/*
 * cs_snapreader_next_table
 *	  Moves to the next table section and returns its "COPY ... FROM
 *	  stdin;" line (palloc'd in the caller's context), or NULL at the end
 *	  of the file.  The rows of the previous section must have been read.
 *	  Errors: XX001 for anything but empty lines and a COPY line.
 */
char *
cs_snapreader_next_table(CsSnapshotReader *r)
{
	StringInfoData line;

	Assert(!r->in_section);
	initStringInfo(&line);
	for (;;)
	{
		int64		at = cs_snapreader_offset(r);

		if (!read_line(r, &line))
			return NULL;
		if (line.len == 0)
			continue;
		if (strncmp(line.data, "COPY ", 5) != 0 ||
			line.len < 17 || strcmp(line.data + line.len - 12, " FROM stdin;") != 0)
			cs_file_damage(r->path, at,
						   "A table section does not start with a COPY line.");
		r->in_section = true;
		r->line_start = true;
		return line.data;
	}
}

/*
 * cs_snapreader_read
 *	  Copies up to maxread bytes of the current section's rows (COPY text)
 *	  into buf, in large chunks: a chunk ends before the "\." line, and a
 *	  chunk that empties the buffer ends at a line end, so that the end
 *	  marker is always seen whole at the start of a line.  Returns 0 at the
 *	  section's "\." line, which it consumes.
 *	  Errors: XX001 when the file ends inside the section.
 */
int
cs_snapreader_read(CsSnapshotReader *r, char *buf, int maxread)
{
	int			copied = 0;

	if (!r->in_section)
		return 0;
	while (copied < maxread)
	{
		int			avail;
		int			chunk;
		int			window;
		char	   *at = r->buf + r->pos;
		char	   *m;
		int			n;

		if (r->len - r->pos < SNAP_BUF_SIZE / 4 && !r->eof)
			(void) refill(r);
		at = r->buf + r->pos;
		avail = r->len - r->pos;
		if (r->line_start && avail >= 3 && memcmp(at, "\\.\n", 3) == 0)
		{
			r->pos += 3;
			r->in_section = false;
			break;
		}
		if (avail == 0 || (r->eof && r->line_start && avail < 3))
			cs_file_damage(r->path, cs_snapreader_offset(r),
						   "The file ends inside a table section (no \"\\.\" line).");
		chunk = Min(avail, maxread - copied);
		window = Min(avail, chunk + 3);
		m = memmem(at, window, "\n\\.\n", 4);
		if (m != NULL)
			n = m - at + 1;
		else if (chunk == avail && !r->eof)
		{
			char	   *nl = memrchr(at, '\n', chunk);

			n = nl != NULL ? nl - at + 1 : chunk;
		}
		else
			n = chunk;
		memcpy(buf + copied, at, n);
		r->pos += n;
		copied += n;
		r->line_start = (at[n - 1] == '\n');
		if (m != NULL)
			break;				/* the marker is next */
	}
	return copied;
}

/*
 * cs_snapreader_close
 *	  Closes the file and frees the reader.
 */
void
cs_snapreader_close(CsSnapshotReader *r)
{
	MemoryContextDelete(r->cxt);
}
