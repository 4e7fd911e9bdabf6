/*-------------------------------------------------------------------------
 *
 * sql_functions.c
 *	  The archive-reading SQL surface in schema changestream:
 *	  generations(), generation_stats(), wal_segments(), wal_records() and
 *	  snapshots().  They read the archive directory named by
 *	  changestream.directory (status() and the worker actions are in
 *	  sql_worker.c).  A generation argument must be
 *	  16 lowercase hex digits: no path ever comes from SQL.
 *
 *	  Set-returning functions use InitMaterializedSRF() (funcapi.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <sys/stat.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "replication/slot.h"
#include "storage/latch.h"
#include "storage/fd.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "changestream.h"

PG_FUNCTION_INFO_V1(changestream_generations);
PG_FUNCTION_INFO_V1(changestream_generation_stats);
PG_FUNCTION_INFO_V1(changestream_wal_segments);
PG_FUNCTION_INFO_V1(changestream_wal_records);
PG_FUNCTION_INFO_V1(changestream_snapshots);

#define GENERATION_COLS 8
#define SEGMENT_COLS	7
#define RECORD_COLS		4
#define SNAPSHOT_COLS	6

static int	cmp_name(const ListCell *a, const ListCell *b);

typedef struct SegmentFile
{
	int64		index;
	bool		compressed;
	char		path[MAXPGPATH];
	off_t		size;
	TimestampTz mtime;
} SegmentFile;

/* A file's modification time with its sub-second part. */
static TimestampTz
file_mtime(const struct stat *st)
{
	return time_t_to_timestamptz(st->st_mtim.tv_sec) +
		st->st_mtim.tv_nsec / 1000;
}

static int
cmp_segment(const ListCell *a, const ListCell *b)
{
	const SegmentFile *x = lfirst(a);
	const SegmentFile *y = lfirst(b);

	return x->index < y->index ? -1 : (x->index > y->index ? 1 : 0);
}

/*
 * The segment files of a generation, by index; where a raw file and its
 * .gz both exist (compression finishing), the .gz is listed.
 */
static List *
list_segments(const char *directory, uint64 generation)
{
	char	   *wal_dir = cs_wal_dir_path(directory, generation);
	DIR		   *dir;
	struct dirent *de;
	List	   *result = NIL;
	ListCell   *lc;

	dir = AllocateDir(wal_dir);
	if (dir == NULL)
	{
		if (errno == ENOENT)
			return NIL;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open directory \"%s\": %m", wal_dir)));
	}
	while ((de = ReadDir(dir, wal_dir)) != NULL)
	{
		int64		idx;
		bool		compressed;
		SegmentFile *sf = NULL;
		struct stat st;
		char		path[MAXPGPATH];

		if (!cs_parse_segment_file_name(de->d_name, &idx, &compressed))
			continue;
		snprintf(path, sizeof(path), "%s/%s", wal_dir, de->d_name);
		if (stat(path, &st) != 0)
			continue;			/* removed meanwhile */
		foreach(lc, result)
		{
			SegmentFile *o = lfirst(lc);

			if (o->index == idx)
				sf = o;
		}
		if (sf != NULL && !compressed)
			continue;
		if (sf == NULL)
		{
			sf = palloc(sizeof(SegmentFile));
			result = lappend(result, sf);
		}
		sf->index = idx;
		sf->compressed = compressed;
		strlcpy(sf->path, path, MAXPGPATH);
		sf->size = st.st_size;
		sf->mtime = file_mtime(&st);
	}
	FreeDir(dir);
	list_sort(result, cmp_segment);
	return result;
}

/*
 * Open a listed segment.  A raw segment may have been compressed and
 * removed since it was listed: then its .gz is opened (and listed).
 */
static CsSegmentReader *
open_segment(SegmentFile *sf)
{
	CsSegmentReader *r = cs_reader_open(sf->path, true);

	if (r == NULL && !sf->compressed)
	{
		strlcat(sf->path, ".gz", MAXPGPATH);
		sf->compressed = true;
		r = cs_reader_open(sf->path, true);
	}
	if (r == NULL)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("WAL segment \"%s\" disappeared while being read", sf->path)));
	return r;
}

/* Sum of file sizes and newest mtime below path. */
static void
du(const char *path, int64 *bytes, TimestampTz *newest, int *count_suffix,
   const char *suffix)
{
	DIR		   *dir = AllocateDir(path);
	struct dirent *de;

	if (dir == NULL)
		return;
	while ((de = ReadDir(dir, path)) != NULL)
	{
		char		child[MAXPGPATH];
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(child, sizeof(child), "%s/%s", path, de->d_name);
		if (lstat(child, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode))
			du(child, bytes, newest, count_suffix, suffix);
		else
		{
			size_t		n = strlen(de->d_name);
			size_t		s = strlen(suffix);

			*bytes += st.st_size;
			if (file_mtime(&st) > *newest)
				*newest = file_mtime(&st);
			if (count_suffix && n > s && strcmp(de->d_name + n - s, suffix) == 0)
				(*count_suffix)++;
		}
	}
	FreeDir(dir);
}

/*
 * The archive's position of record at the end of a generation: the worker's
 * durable position when the generation is the one it writes, else found by
 * scanning the newest segment.
 */
static XLogRecPtr
generation_end(const char *directory, uint64 generation, List *segments,
			   XLogRecPtr start_lsn)
{
	SegmentFile *last;
	CsSegmentScan scan;

	if (cs_status != NULL)
	{
		bool		current;
		XLogRecPtr	flushed;

		SpinLockAcquire(&cs_status->mutex);
		current = cs_status->pid != 0 && cs_status->has_generation &&
			cs_status->generation == generation &&
			cs_status->state == CS_STATE_STREAMING;
		flushed = cs_status->flushed_lsn;
		SpinLockRelease(&cs_status->mutex);
		if (current && flushed != InvalidXLogRecPtr)
			return flushed;
	}
	if (segments == NIL)
		return start_lsn;
	last = llast(segments);
	if (!cs_scan_segment(last->path, &scan, NULL, NULL))
		return start_lsn;
	return scan.position;
}

static void
require_generation(const char *directory, uint64 generation, const char *text)
{
	char	   *path = cs_generation_path(directory, generation);
	struct stat st;

	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("generation \"%s\" does not exist", text),
				 errhint("Call changestream.generations() to list the generations.")));
}

/*
 * The generation named by argument 0 of an SQL function: validated (16
 * lowercase hex digits, 22023), existing (42704) in the configured
 * directory (55000 if unset), which is returned in *directory.
 */
static uint64
generation_arg(FunctionCallInfo fcinfo, const char **directory)
{
	char	   *gen_text;
	uint64		generation;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("generation must not be NULL"),
				 errhint("Call changestream.generations() to list the generations.")));
	gen_text = text_to_cstring(PG_GETARG_TEXT_PP(0));
	cs_validate_generation_arg(gen_text, &generation);
	*directory = cs_require_directory();
	require_generation(*directory, generation, gen_text);
	return generation;
}

static void
generation_row(const char *directory, uint64 generation, Datum *values,
			   bool *nulls)
{
	CsIdentity identity;
	List	   *segments;
	char	   *gendir = cs_generation_path(directory, generation);
	char		path[MAXPGPATH];
	int64		bytes = 0;
	TimestampTz newest = 0;
	int			snapshots = 0;
	bool		have_identity;

	memset(nulls, 0, sizeof(bool) * GENERATION_COLS);
	have_identity = cs_read_identity(directory, generation, &identity);
	segments = list_segments(directory, generation);
	du(gendir, &bytes, &newest, NULL, "");
	snprintf(path, sizeof(path), "%s/snapshots", gendir);
	{
		int64		b = 0;
		TimestampTz t = 0;

		du(path, &b, &t, &snapshots, ".snapshot.gz");
	}

	values[0] = CStringGetTextDatum(psprintf("%016llx", (unsigned long long) generation));
	values[1] = Int32GetDatum(snapshots);
	values[2] = Int32GetDatum(list_length(segments));
	if (have_identity)
	{
		values[3] = TimestampTzGetDatum(identity.created_at);
		values[5] = LSNGetDatum(identity.start_lsn);
		values[6] = LSNGetDatum(generation_end(directory, generation, segments,
											   identity.start_lsn));
	}
	else
		nulls[3] = nulls[5] = nulls[6] = true;
	if (newest > 0)
		values[4] = TimestampTzGetDatum(newest);
	else
		nulls[4] = true;
	values[7] = Int64GetDatum(bytes);
}

/*
 * changestream.generations() -> setof (generation text, snapshot_count int,
 *	  wal_count int, created_at timestamptz, updated_at timestamptz,
 *	  start_lsn pg_lsn, end_lsn pg_lsn, size_bytes bigint)
 *	  One row per generation, oldest first; size_bytes in bytes on disk.
 *	  Errors: 55000 if changestream.directory is not set; 58030 on I/O.
 */
Datum
changestream_generations(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	const char *directory;
	List	   *gens;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	directory = cs_require_directory();
	gens = cs_list_generations(directory);
	foreach(lc, gens)
	{
		Datum		values[GENERATION_COLS];
		bool		nulls[GENERATION_COLS];

		generation_row(directory, *(uint64 *) lfirst(lc), values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * changestream.generation_stats(generation text) -> record (the
 *	  generations() row of one generation)
 *	  Errors: 22023 if generation is not 16 lowercase hex digits; 42704 if
 *	  it does not exist; 55000 if changestream.directory is not set.
 */
Datum
changestream_generation_stats(PG_FUNCTION_ARGS)
{
	uint64		generation;
	const char *directory;
	TupleDesc	tupdesc;
	Datum		values[GENERATION_COLS];
	bool		nulls[GENERATION_COLS];

	generation = generation_arg(fcinfo, &directory);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	generation_row(directory, generation, values, nulls);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}

/*
 * changestream.wal_segments(generation text) -> setof (segment_index
 *	  bigint, file_name text, start_lsn pg_lsn, end_lsn pg_lsn, compressed
 *	  bool, size_bytes bigint, modified_at timestamptz)
 *	  start_lsn is the position of record when the segment opened (its
 *	  header); end_lsn the next segment's start_lsn or, for the newest, the
 *	  generation's end.  Errors: as generation_stats(); XX001 when a segment
 *	  header is damaged.
 */
Datum
changestream_wal_segments(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	uint64		generation;
	const char *directory;
	List	   *segments;
	ListCell   *lc;
	XLogRecPtr *starts;
	int			i = 0;
	int			n;
	CsIdentity	identity;

	generation = generation_arg(fcinfo, &directory);
	InitMaterializedSRF(fcinfo, 0);

	segments = list_segments(directory, generation);
	n = list_length(segments);
	starts = palloc0(sizeof(XLogRecPtr) * (n + 1));
	foreach(lc, segments)
	{
		SegmentFile *sf = lfirst(lc);
		CsSegmentReader *r = open_segment(sf);

		starts[i++] = cs_reader_header(r)->start_lsn;
		cs_reader_close(r);
	}
	if (n > 0)
	{
		if (!cs_read_identity(directory, generation, &identity))
			identity.start_lsn = starts[0];
		starts[n] = generation_end(directory, generation, segments,
								   identity.start_lsn);
	}

	i = 0;
	foreach(lc, segments)
	{
		SegmentFile *sf = lfirst(lc);
		Datum		values[SEGMENT_COLS];
		bool		nulls[SEGMENT_COLS];

		memset(nulls, 0, sizeof(nulls));
		values[0] = Int64GetDatum(sf->index);
		values[1] = CStringGetTextDatum(cs_segment_file_name(sf->index, sf->compressed));
		values[2] = LSNGetDatum(starts[i]);
		values[3] = LSNGetDatum(starts[i + 1]);
		values[4] = BoolGetDatum(sf->compressed);
		values[5] = Int64GetDatum((int64) sf->size);
		values[6] = TimestampTzGetDatum(sf->mtime);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		i++;
	}
	return (Datum) 0;
}

/*
 * changestream.wal_records(generation text, start_lsn pg_lsn DEFAULT NULL,
 *	  end_lsn pg_lsn DEFAULT NULL) -> setof (lsn pg_lsn, wal_end pg_lsn,
 *	  sent_at timestamptz, data bytea)
 *	  The archived pgoutput messages of a generation in stream order (the
 *	  schema preamble of each segment is not repeated).  With bounds, a
 *	  transaction is returned when its commit LSN (BEGIN's final LSN) lies
 *	  in [start_lsn, end_lsn]; a message outside a transaction when its own
 *	  LSN does.  Errors: as generation_stats(); XX001 when a sealed segment
 *	  does not validate (the newest segment may end in a write in progress).
 */
Datum
changestream_wal_records(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	uint64		generation;
	const char *directory;
	bool		has_start = !PG_ARGISNULL(1);
	bool		has_end = !PG_ARGISNULL(2);
	XLogRecPtr	start = has_start ? PG_GETARG_LSN(1) : InvalidXLogRecPtr;
	XLogRecPtr	end = has_end ? PG_GETARG_LSN(2) : InvalidXLogRecPtr;
	List	   *segments;
	ListCell   *lc;
	MemoryContext row_cxt;
	bool		include = true;
	bool		in_txn = false;
	int			i = 0;
	CsSegmentScan scan;

	generation = generation_arg(fcinfo, &directory);
	InitMaterializedSRF(fcinfo, 0);

	segments = list_segments(directory, generation);
	row_cxt = AllocSetContextCreate(CurrentMemoryContext, "wal_records row",
									ALLOCSET_DEFAULT_SIZES);
	foreach(lc, segments)
	{
		SegmentFile *sf = lfirst(lc);
		bool		newest = (i == list_length(segments) - 1);
		CsSegmentReader *r;
		int64		limit_frame = -1;
		uint32		limit_entry = 0;

		i++;
		/* segments that end before start hold nothing wanted */
		if (has_start && !newest)
		{
			SegmentFile *next = list_nth(segments, i);
			CsSegmentReader *nr = open_segment(next);
			bool		before = cs_reader_header(nr)->start_lsn <= start;

			cs_reader_close(nr);
			if (before)
				continue;
		}
		if (newest && !sf->compressed)
		{
			/* only complete transactions are of record */
			if (!cs_scan_segment(sf->path, &scan, NULL, NULL))
				ereport(ERROR,
						(errcode_for_file_access(),
						 errmsg("WAL segment \"%s\" disappeared while being read", sf->path)));
			limit_frame = scan.safe_entry_offset == 0 ? scan.safe_end : scan.safe_frame_offset;
			limit_entry = scan.safe_entry_offset;
		}
		r = open_segment(sf);
		if (has_end && cs_reader_header(r)->start_lsn > end)
		{
			cs_reader_close(r);
			break;
		}
		while (cs_reader_next_frame(r))
		{
			CsEntry		e;

			CHECK_FOR_INTERRUPTS();
			if (limit_frame >= 0 && cs_reader_frame_offset(r) >= limit_frame &&
				!(cs_reader_frame_offset(r) == limit_frame && limit_entry > 0))
				break;
			while (cs_reader_next_entry(r, &e))
			{
				CsMessageInfo info;
				Datum		values[RECORD_COLS];
				bool		nulls[RECORD_COLS] = {false, false, false, false};
				bytea	   *data;
				MemoryContext old;

				if (limit_frame >= 0 && cs_reader_frame_offset(r) == limit_frame &&
					limit_entry > 0 && cs_reader_entry_offset(r) > limit_entry)
					break;

				if (e.kind != CS_ENTRY_MESSAGE)
					continue;
				if (!cs_parse_pgoutput(e.data, e.len, &info))
					ereport(ERROR,
							(errcode(ERRCODE_DATA_CORRUPTED),
							 errmsg("malformed pgoutput message in \"%s\"", sf->path)));
				if (info.type == 'B')
				{
					in_txn = true;
					include = (!has_start || info.lsn >= start) &&
						(!has_end || info.lsn <= end);
				}
				else if (!in_txn)
					include = info.type != 'M' ||
						((!has_start || info.lsn >= start) &&
						 (!has_end || info.lsn <= end));
				if (info.type == 'C')
					in_txn = false;
				if (!include)
					continue;

				old = MemoryContextSwitchTo(row_cxt);
				data = palloc(VARHDRSZ + e.len);
				SET_VARSIZE(data, VARHDRSZ + e.len);
				memcpy(VARDATA(data), e.data, e.len);
				values[0] = LSNGetDatum(e.data_start);
				values[1] = LSNGetDatum(e.wal_end);
				values[2] = TimestampTzGetDatum(e.send_time);
				values[3] = PointerGetDatum(data);
				MemoryContextSwitchTo(old);
				tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
				MemoryContextReset(row_cxt);
			}
		}
		if (cs_reader_torn(r) && !newest)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("WAL segment \"%s\" is damaged at offset " INT64_FORMAT,
							sf->path, cs_reader_valid_end(r)),
					 errdetail("A frame after that offset does not validate (magic, length or CRC-32C).")));
		cs_reader_close(r);
	}
	MemoryContextDelete(row_cxt);
	return (Datum) 0;
}

/*
 * changestream.snapshots(generation text) -> setof (lsn pg_lsn, file_name
 *	  text, table_count int, row_count bigint, size_bytes bigint, created_at
 *	  timestamptz)
 *	  The durable snapshots of a generation in LSN order, from each file's
 *	  manifest.  Errors: as generation_stats().
 */
Datum
changestream_snapshots(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	uint64		generation;
	const char *directory;
	char	   *dir;
	DIR		   *d;
	struct dirent *de;
	List	   *names = NIL;
	ListCell   *lc;

	generation = generation_arg(fcinfo, &directory);
	InitMaterializedSRF(fcinfo, 0);

	dir = psprintf("%s/snapshots", cs_generation_path(directory, generation));
	d = AllocateDir(dir);
	if (d == NULL)
		return (Datum) 0;
	while ((de = ReadDir(d, dir)) != NULL)
	{
		size_t		n = strlen(de->d_name);

		if (n == 16 + strlen(".snapshot.gz") &&
			strcmp(de->d_name + 16, ".snapshot.gz") == 0)
			names = lappend(names, pstrdup(de->d_name));
	}
	FreeDir(d);
	list_sort(names, cmp_name);

	foreach(lc, names)
	{
		char	   *name = lfirst(lc);
		char	   *path = psprintf("%s/%s", dir, name);
		struct stat st;
		XLogRecPtr	lsn;
		int			tables;
		int64		rows;
		Datum		values[SNAPSHOT_COLS];
		bool		nulls[SNAPSHOT_COLS] = {false, false, false, false, false, false};

		if (stat(path, &st) != 0)
			continue;
		if (!cs_snapshot_read_manifest(path, &lsn, &tables, &rows))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("snapshot \"%s\" has no valid manifest", path)));
		values[0] = LSNGetDatum(lsn);
		values[1] = CStringGetTextDatum(name);
		values[2] = Int32GetDatum(tables);
		values[3] = Int64GetDatum(rows);
		values[4] = Int64GetDatum((int64) st.st_size);
		values[5] = TimestampTzGetDatum(file_mtime(&st));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}


static int
cmp_name(const ListCell *a, const ListCell *b)
{
	return strcmp(lfirst(a), lfirst(b));
}
