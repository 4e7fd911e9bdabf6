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
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "archive/archive_dir.h"
#include "archive/archive_layout.h"
#include "archive/generation.h"
#include "archive/generation_span.h"
#include "archive/reader_pins.h"
#include "archive/retention_horizon.h"
#include "archive/segment_format.h"
#include "archive/segment_reader.h"
#include "archive/snapshot_manifest.h"
#include "archive/snapshot_reader.h"
#include "base/shmem_status.h"
#include "read/generation_reader.h"
#include "read/read_source.h"
#include "base/compat.h"

PG_FUNCTION_INFO_V1(changestream_generations);
PG_FUNCTION_INFO_V1(changestream_generation_stats);
PG_FUNCTION_INFO_V1(changestream_wal_segments);
PG_FUNCTION_INFO_V1(changestream_wal_records);
PG_FUNCTION_INFO_V1(changestream_snapshots);

#define GENERATION_COLS 15
#define GENERATION_DAMAGE_COL 8	/* then restorable_from_lsn, _time */
#define GENERATION_GAP_COL 11	/* gap_start_lsn, _end_lsn, _start_time,
								 * _end_time */
#define SEGMENT_COLS	7
#define RECORD_COLS		4
#define SNAPSHOT_COLS	6

/*
 * Sum of file sizes and newest mtime below path (not through links:
 * nothing is opened).
 */
static void
du(const char *path, int64 *bytes, TimestampTz *newest, int *count_snapshots)
{
	int			err;
	List	   *entries = cs_storage_list_entries(path, &err);
	ListCell   *lc;

	foreach(lc, entries)
	{
		CsStorageEntry *e = lfirst(lc);

		if (e->info.type == CS_STORAGE_MISSING)
			continue;
		if (e->info.type == CS_STORAGE_DIR)
			du(cs_file_in(path, e->name), bytes, newest, count_snapshots);
		else
		{
			*bytes += e->info.size;
			*newest = Max(*newest, e->info.mtime);
			if (count_snapshots && cs_is_snapshot_file_name(e->name))
				(*count_snapshots)++;
		}
	}
	list_free_deep(entries);
}

static void
require_generation(const char *directory, uint64 generation, const char *text)
{
	char	   *path = cs_generation_path(directory, generation);
	CsStorageInfo info;

	if (cs_storage_stat(path, true, &info) != 0 ||
		info.type != CS_STORAGE_DIR)
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
	*directory = cs_reader_directory(CS_READ_AUTO, gen_text);
	require_generation(*directory, generation, gen_text);
	return generation;
}

/* The columns of a generations() row that only list and stat files. */
static void
generation_row_files(const char *directory, uint64 generation, Datum *values,
					 bool *nulls)
{
	int64		bytes = 0;
	TimestampTz newest = 0;
	int			snapshots = 0;

	du(cs_generation_path(directory, generation), &bytes, &newest, &snapshots);
	values[0] = CStringGetTextDatum(psprintf("%016llx", (unsigned long long) generation));
	nulls[0] = false;
	values[1] = Int32GetDatum(snapshots);
	nulls[1] = false;
	values[4] = TimestampTzGetDatum(newest);
	nulls[4] = (newest == 0);
	values[7] = Int64GetDatum(bytes);
	nulls[7] = false;
}

/*
 * restorable_from_lsn and restorable_from_time of a generations() row (gens:
 * the listing): the oldest snapshot kept at or after the generation's start
 * (its retention horizon's after retention), which is the earliest
 * restorable point.  The opening snapshot of a generation handed off to
 * stands from the previous generation's last commit on, as restore() takes
 * it (cs_handoff_time(), docs/DESIGN.md section 6).  NULL when the
 * generation has none.
 */
static void
restorable_from(const char *directory, List *gens, uint64 generation,
				int snapshots, const CsIdentity *identity, Datum *values,
				bool *nulls)
{
	List	   *names;
	ListCell   *lc;
	char	   *dir;
	TimestampTz taken;
	TimestampTz from;
	uint64		previous;

	/* snapshot_count 0: none, or snapshots/ cannot be listed (see du()) */
	if (snapshots == 0)
		return;
	names = cs_list_snapshots(directory, generation);
	dir = cs_snapshots_dir_path(directory, generation);

	foreach(lc, names)
	{
		XLogRecPtr	lsn;
		CsSnapshotReader *r;

		if (!cs_snapshot_name_lsn(lfirst(lc), &lsn) || lsn < identity->start_lsn)
			continue;
		r = cs_snapreader_open(cs_file_in(dir, (char *) lfirst(lc)));
		values[9] = LSNGetDatum(cs_snapreader_lsn(r));
		nulls[9] = false;
		taken = cs_snapreader_time(r);
		cs_snapreader_close(r);
		if (lsn == identity->start_lsn &&
			cs_handoff_time(directory, gens, generation, &previous, &from) &&
			from < taken)
			taken = from;
		values[10] = TimestampTzGetDatum(taken);
		nulls[10] = false;
		return;
	}
}

/*
 * gap_start_lsn, gap_end_lsn, gap_start_time and gap_end_time of a
 * generations() row (gens: the listing): the history missing between the
 * previous generation's end and this generation's start
 * (generation_span.c); NULL when it continues the previous one exactly,
 * or has none.  gap_start_* is NULL too when the previous generation's
 * end cannot be read.
 */
static void
gap_values(const char *directory, List *gens, uint64 generation,
		   Datum *values, bool *nulls)
{
	CsGap		gap;

	if (!cs_generation_gap(directory, gens, generation, &gap))
		return;
	if (gap.start_known)
	{
		values[GENERATION_GAP_COL] = LSNGetDatum(gap.start_lsn);
		nulls[GENERATION_GAP_COL] = false;
		values[GENERATION_GAP_COL + 2] = TimestampTzGetDatum(gap.start_time);
		nulls[GENERATION_GAP_COL + 2] = (gap.start_time == 0);
	}
	values[GENERATION_GAP_COL + 1] = LSNGetDatum(gap.end_lsn);
	nulls[GENERATION_GAP_COL + 1] = false;
	values[GENERATION_GAP_COL + 3] = TimestampTzGetDatum(gap.end_time);
	nulls[GENERATION_GAP_COL + 3] = false;
}

/* The columns of a generations() row that read the identity and segments. */
static void
generation_row_contents(const char *directory, List *gens, uint64 generation,
						int snapshots, Datum *values, bool *nulls)
{
	CsIdentity	identity;
	List	   *segments;

	cs_require_identity(directory, generation, &identity);
	segments = cs_list_segments(directory, generation);
	cs_check_segment_sequence(directory, generation, segments);
	values[2] = Int32GetDatum(list_length(segments));
	nulls[2] = false;
	values[3] = TimestampTzGetDatum(identity.created_at);
	nulls[3] = false;
	values[5] = LSNGetDatum(identity.start_lsn);
	nulls[5] = false;
	values[6] = LSNGetDatum(cs_generation_end(directory, generation, segments,
											  identity.start_lsn, NULL));
	nulls[6] = false;
	restorable_from(directory, gens, generation, snapshots, &identity, values,
					nulls);
	gap_values(directory, gens, generation, values, nulls);
}

/* What generation_row_contents() needs, for cs_catch_damage(). */
typedef struct RowContents
{
	const char *directory;
	List	   *gens;			/* the listing, oldest first */
	uint64		generation;
	int			snapshots;		/* snapshot_count, from du() */
	Datum		values[GENERATION_COLS];
	bool		nulls[GENERATION_COLS];
} RowContents;

static void
row_contents(void *arg)
{
	RowContents *rc = (RowContents *) arg;

	generation_row_contents(rc->directory, rc->gens, rc->generation,
							rc->snapshots, rc->values, rc->nulls);
}

/*
 * One generations() row.  Damage found reading the identity file or the
 * segments (XX001) goes into the damage column instead of failing the
 * whole listing (cs_catch_damage()); any other error is raised again.
 */
static void
generation_row(const char *directory, List *gens, uint64 generation,
			   Datum *values, bool *nulls)
{
	MemoryContext read_cxt = AllocSetContextCreate(CurrentMemoryContext,
												   "changestream generation row",
												   ALLOCSET_DEFAULT_SIZES);
	RowContents rc;
	ErrorData  *damage;

	memset(nulls, true, sizeof(bool) * GENERATION_COLS);
	generation_row_files(directory, generation, values, nulls);
	rc.directory = directory;
	rc.gens = gens;
	rc.generation = generation;
	rc.snapshots = DatumGetInt32(values[1]);
	memset(rc.nulls, true, sizeof(rc.nulls));
	damage = cs_catch_damage(row_contents, &rc, read_cxt);
	if (damage != NULL)
	{
		values[GENERATION_DAMAGE_COL] =
			CStringGetTextDatum(damage->detail ?
								psprintf("%s: %s", damage->message, damage->detail) :
								damage->message);
		nulls[GENERATION_DAMAGE_COL] = false;
		FreeErrorData(damage);
	}

	/* copy what was read out of read_cxt: pg_lsn, timestamptz, int by value */
	for (int i = 2; i < GENERATION_COLS; i++)
	{
		if (i == 4 || i == 7 || i == GENERATION_DAMAGE_COL || rc.nulls[i])
			continue;
		values[i] = rc.values[i];
		nulls[i] = false;
	}
	MemoryContextDelete(read_cxt);
}

/*
 * changestream.generations()
 *	  Returns setof (generation text, snapshot_count int, wal_count int,
 *	  created_at timestamptz, updated_at timestamptz, start_lsn pg_lsn,
 *	  end_lsn pg_lsn, size_bytes bigint (bytes on disk), damage text,
 *	  restorable_from_lsn pg_lsn, restorable_from_time timestamptz,
 *	  gap_start_lsn pg_lsn, gap_end_lsn pg_lsn, gap_start_time timestamptz,
 *	  gap_end_time timestamptz): one row per generation, oldest first.
 *	  restorable_from_* is the oldest snapshot kept (docs/DESIGN.md section
 *	  11), the earliest point restore() can reach in the generation.
 *	  gap_*: the history no generation holds between the previous
 *	  generation's end (end_lsn, last commit time) and this generation's
 *	  start (start_lsn, opening snapshot's time); NULL when a generation
 *	  was handed off to and continues the previous one exactly
 *	  (docs/DESIGN.md section 6).  A generation whose identity file or
 *	  segments are damaged is listed with the reason in damage and NULL in
 *	  the columns that could not be read.
 *	  Errors: 55000 if changestream.directory is not set; file access
 *	  SQLSTATEs when generations/ cannot be read.
 */
Datum
changestream_generations(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	const char *directory;
	List	   *gens;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	directory = cs_reader_directory(CS_READ_AUTO, NULL);
	cs_pin_call_begin();
	cs_pin_read(CS_PIN_ALL_GENERATIONS, InvalidXLogRecPtr);
	gens = cs_list_generations(directory);
	foreach(lc, gens)
	{
		Datum		values[GENERATION_COLS];
		bool		nulls[GENERATION_COLS];

		generation_row(directory, gens, *(uint64 *) lfirst(lc), values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	cs_pin_call_end();
	return (Datum) 0;
}

/*
 * changestream.generation_stats(generation text)
 *	  Returns the generations() row of one generation.
 *	  Errors: 22023 if generation is not 16 lowercase hex digits; 22004 if
 *	  NULL; 42704 if it does not exist; 55000 if changestream.directory is
 *	  not set.
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
	cs_pin_call_begin();
	cs_pin_read(generation, InvalidXLogRecPtr);
	generation_row(directory, cs_list_generations(directory), generation,
				   values, nulls);
	cs_pin_call_end();
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}

/*
 * changestream.wal_segments(generation text)
 *	  Returns setof (segment_index bigint, file_name text, start_lsn pg_lsn,
 *	  end_lsn pg_lsn, compressed bool, size_bytes bigint, modified_at
 *	  timestamptz).  start_lsn is the position of record when the segment
 *	  opened (its header); end_lsn the next segment's start_lsn or, for the
 *	  newest, the generation's end.  Only headers are read, and checked: no
 *	  gap in the indexes, each header naming its own index and generation,
 *	  start LSNs in order.
 *	  Errors: as generation_stats(); XX001 naming file and offset on damage.
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
	cs_pin_call_begin();
	cs_pin_read(generation, InvalidXLogRecPtr);

	cs_require_identity(directory, generation, &identity);
	segments = cs_list_segments(directory, generation);
	cs_check_segment_sequence(directory, generation, segments);
	n = list_length(segments);
	starts = palloc0(sizeof(XLogRecPtr) * (n + 1));
	foreach(lc, segments)
	{
		CsSegmentFile *sf = lfirst(lc);
		CsSegmentReader *r = cs_open_listed_segment(sf);
		const CsSegmentHeader *h = cs_reader_header(r);

		cs_check_segment_header(sf->path, h, sf->index, generation, &identity);
		if (i > 0 && h->start_lsn < starts[i - 1])
			cs_segment_damage(sf->path, 0,
							  "It starts at " CS_LSN_FMT ", before the previous segment's start " CS_LSN_FMT ".",
							  LSN_FORMAT_ARGS(h->start_lsn),
							  LSN_FORMAT_ARGS(starts[i - 1]));
		starts[i++] = h->start_lsn;
		cs_reader_close(r);
	}
	if (n > 0)
		starts[n] = cs_generation_end(directory, generation, segments,
									  identity.start_lsn, NULL);

	i = 0;
	foreach(lc, segments)
	{
		CsSegmentFile *sf = lfirst(lc);
		Datum		values[SEGMENT_COLS];
		bool		nulls[SEGMENT_COLS];

		memset(nulls, 0, sizeof(nulls));
		values[0] = Int64GetDatum(sf->index);
		values[1] = CStringGetTextDatum(cs_segment_file_name(sf->index, sf->compressed));
		values[2] = LSNGetDatum(starts[i]);
		values[3] = LSNGetDatum(starts[i + 1]);
		values[4] = BoolGetDatum(sf->compressed);
		values[5] = Int64GetDatum(sf->size);
		values[6] = TimestampTzGetDatum(sf->mtime);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		i++;
	}
	cs_pin_call_end();
	return (Datum) 0;
}

/* Is an LSN inside the optional bounds [start, end]? */
static inline bool
in_bounds(XLogRecPtr lsn, XLogRecPtr start, XLogRecPtr end)
{
	return (start == InvalidXLogRecPtr || lsn >= start) &&
		(end == InvalidXLogRecPtr || lsn <= end);
}

/*
 * changestream.wal_records(generation text, start_lsn pg_lsn DEFAULT NULL,
 *	  end_lsn pg_lsn DEFAULT NULL)
 *	  Returns setof (lsn pg_lsn, wal_end pg_lsn, sent_at timestamptz, data
 *	  bytea): the archived pgoutput messages of a generation in stream
 *	  order (the schema preamble of each segment is not repeated), read
 *	  through the generation reader, which checks continuity.  With bounds,
 *	  a transaction is returned when its commit LSN (BEGIN's final LSN) lies
 *	  in [start_lsn, end_lsn]; a message outside a transaction when its own
 *	  LSN does.  Of the newest raw segment only complete transactions are
 *	  returned.  sent_at is NULL where the segment keeps no send time
 *	  (formats 2 and 3 keep it on COMMIT and non-transactional messages;
 *	  docs/FORMAT.md section 8.2), and wal_end is then the lsn.
 *	  Errors: as generation_stats(); XX001 naming file and offset when a
 *	  segment is damaged or the segments do not follow each other.
 */
Datum
changestream_wal_records(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	uint64		generation;
	const char *directory;
	XLogRecPtr	start = PG_ARGISNULL(1) ? InvalidXLogRecPtr : PG_GETARG_LSN(1);
	XLogRecPtr	end = PG_ARGISNULL(2) ? InvalidXLogRecPtr : PG_GETARG_LSN(2);
	CsGenerationReader *gr;
	CsReadItem	item;
	MemoryContext row_cxt;
	bool		include = true;
	bool		in_txn = false;

	generation = generation_arg(fcinfo, &directory);
	cs_pin_read(generation, start);
	InitMaterializedSRF(fcinfo, 0);

	gr = cs_genreader_open(directory, generation, start, end);
	row_cxt = AllocSetContextCreate(CurrentMemoryContext, "wal_records row",
									ALLOCSET_DEFAULT_SIZES);
	while (cs_genreader_next(gr, &item))
	{
		const CsEntry *e = &item.entry;
		Datum		values[RECORD_COLS];
		bool		nulls[RECORD_COLS] = {false, false, false, false};
		bytea	   *data;
		MemoryContext old;

		if (e->kind != CS_ENTRY_MESSAGE)
			continue;
		if (item.info.type == 'B')
		{
			in_txn = true;
			include = in_bounds(item.info.lsn, start, end);
		}
		else if (!in_txn)
			include = item.info.type != 'M' || in_bounds(item.info.lsn, start, end);
		if (item.info.type == 'C')
			in_txn = false;
		if (!include)
			continue;

		old = MemoryContextSwitchTo(row_cxt);
		data = palloc(VARHDRSZ + e->len);
		SET_VARSIZE(data, VARHDRSZ + e->len);
		memcpy(VARDATA(data), e->data, e->len);
		values[0] = LSNGetDatum(e->data_start);
		values[1] = LSNGetDatum(e->wal_end);
		values[2] = TimestampTzGetDatum(e->send_time);
		nulls[2] = (e->send_time == 0);	/* formats 2, 3 keep few send times */
		values[3] = PointerGetDatum(data);
		MemoryContextSwitchTo(old);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		MemoryContextReset(row_cxt);
	}
	cs_genreader_close(gr);
	MemoryContextDelete(row_cxt);
	return (Datum) 0;
}

/*
 * changestream.snapshots(generation text)
 *	  Returns setof (lsn pg_lsn, file_name text, table_count int, row_count
 *	  bigint, size_bytes bigint, created_at timestamptz): the durable
 *	  snapshots of a generation in LSN order, from each file's manifest.
 *	  Errors: as generation_stats(); file access SQLSTATEs when snapshots/
 *	  cannot be read (never an empty result instead); XX001 naming the file
 *	  when a snapshot is not a regular file or has no valid manifest.
 */
Datum
changestream_snapshots(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	uint64		generation;
	const char *directory;
	char	   *dir;
	List	   *names;
	ListCell   *lc;

	generation = generation_arg(fcinfo, &directory);
	InitMaterializedSRF(fcinfo, 0);
	cs_pin_call_begin();
	cs_pin_read(generation, InvalidXLogRecPtr);

	dir = cs_snapshots_dir_path(directory, generation);
	names = cs_list_snapshots(directory, generation);
	foreach(lc, names)
	{
		char	   *name = lfirst(lc);
		char	   *path = cs_file_in(dir, name);
		struct stat st;
		XLogRecPtr	lsn;
		int			tables;
		int64		rows;
		Datum		values[SNAPSHOT_COLS];
		bool		nulls[SNAPSHOT_COLS] = {false, false, false, false, false, false};

		if (!cs_snapshot_read_manifest(path, &lsn, &tables, &rows, &st))
			continue;			/* removed since it was listed */
		values[0] = LSNGetDatum(lsn);
		values[1] = CStringGetTextDatum(name);
		values[2] = Int32GetDatum(tables);
		values[3] = Int64GetDatum(rows);
		values[4] = Int64GetDatum((int64) st.st_size);
		values[5] = TimestampTzGetDatum(cs_file_mtime(&st));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	cs_pin_call_end();
	return (Datum) 0;
}
