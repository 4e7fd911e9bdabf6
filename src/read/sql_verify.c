/*-------------------------------------------------------------------------
 *
 * sql_verify.c
 *	  changestream.verify(): reads generations without trusting anything
 *	  and returns one row per problem found.  Segments are read through
 *	  the decoder (decoder.c), so every frame CRC, every message, the
 *	  segments' continuity and order and the strict order of commit LSNs
 *	  are checked by the same code every reader uses; snapshots through
 *	  the snapshot reader (snapshot_reader.c): the whole gzip stream, the
 *	  manifest, and the rows and tables it announces against the COPY
 *	  rows and sections really there.
 *
 *	  Damage is raised as XX001 by those readers; each check runs in a
 *	  subtransaction, so the error becomes a row and the next file is
 *	  checked.  A damaged segment ends the reading of its generation's
 *	  segments: what follows it cannot be placed.
 *
 *	  Reading the replica's bucket, what an earlier call found sound is
 *	  not downloaded again while the listing shows the object unchanged
 *	  (verify_record.c): its recorded CRC-32C is compared with the local
 *	  file, a recorded segment's header takes its place in the chain of
 *	  segments (generation_reader.c), a recorded snapshot is passed over.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/pg_crc32c.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/tuplestore.h"

#include "archive/generation_timelines.h"
#include "archive/reader_pins.h"
#include "archive/retention_horizon.h"
#include "archive/snapshot_reader.h"
#include "read/decoder.h"
#include "read/read_source.h"
#include "read/verify_record.h"
#include "base/compat.h"

PG_FUNCTION_INFO_V1(changestream_verify);

#define VERIFY_COLS 4

typedef struct VerifyState
{
	ReturnSetInfo *rsinfo;
	const char *directory;
	const char *local;			/* with the replica: the local archive to
								 * compare it with, or NULL */
	uint64		generation;
	char	   *gen_path;		/* prefix stripped from file names */
	bool		local_has_generation;	/* the local archive holds it too */
	bool		has_horizon;	/* the generation's retention horizon */
	CsHorizon	horizon;
	CsVerifyRecord *record;		/* reading the bucket: what was found sound
								 * before; NULL for the local archive */
	CsSegmentMemory memory;		/* the record, for the decoder */
} VerifyState;

static void
add_problem(VerifyState *vs, const char *file, int64 offset,
			const char *problem)
{
	Datum		values[VERIFY_COLS];
	bool		nulls[VERIFY_COLS] = {false, false, false, false};
	size_t		plen = strlen(vs->gen_path);

	if (strncmp(file, vs->gen_path, plen) == 0 && file[plen] == '/')
		file += plen + 1;
	values[0] = CStringGetTextDatum(psprintf("%016llx",
											 (unsigned long long) vs->generation));
	values[1] = CStringGetTextDatum(file);
	values[2] = Int64GetDatum(offset);
	values[3] = CStringGetTextDatum(problem);
	tuplestore_putvalues(vs->rsinfo->setResult, vs->rsinfo->setDesc,
						 values, nulls);
}

/*
 * Turn a damage error into a problem row.  The readers' messages name the
 * file in double quotes and then "at offset N" (archive_layout.h); when
 * the message has another form the whole message is the problem.
 */
static void
add_error(VerifyState *vs, ErrorData *edata, const char *fallback_file)
{
	const char *q1 = strchr(edata->message, '"');
	const char *q2 = q1 ? strrchr(edata->message, '"') : NULL;
	const char *at = strstr(edata->message, " at offset ");
	char	   *file = pstrdup(fallback_file);
	long long	offset = 0;

	if (q1 && q2 > q1)
		file = pnstrdup(q1 + 1, q2 - q1 - 1);
	if (at)
		offset = strtoll(at + 11, NULL, 10);
	add_problem(vs, file, offset,
				edata->detail ? edata->detail : edata->message);
}

typedef void (*CheckFn) (VerifyState *vs, const char *file);

/* One check and its arguments, for cs_catch_damage(). */
typedef struct CheckCall
{
	CheckFn		fn;
	VerifyState *vs;
	const char *file;
} CheckCall;

static void
call_check(void *arg)
{
	CheckCall  *call = (CheckCall *) arg;

	call->fn(call->vs, call->file);
}

/*
 * Run one check in a subtransaction (cs_catch_damage()).  Data corruption
 * (XX001) becomes a problem row and false is returned; any other error is
 * raised again.
 */
static bool
run_check(VerifyState *vs, CheckFn fn, const char *file)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext,
											  "changestream verify",
											  ALLOCSET_DEFAULT_SIZES);
	CheckCall	call = {fn, vs, file};
	ErrorData  *damage = cs_catch_damage(call_check, &call, cxt);
	bool		sound = (damage == NULL);

	if (!sound)
	{
		add_error(vs, damage, file);
		FreeErrorData(damage);
	}
	MemoryContextDelete(cxt);
	return sound;
}

/*
 * The decoder asks whether a segment was found sound before and is
 * unchanged (CsSegmentMemory): then it takes the recorded header; else
 * it downloads the segment now.
 */
static bool
segment_known(void *arg, const CsSegmentFile *sf, CsSegmentHeader *header)
{
	VerifyState *vs = (VerifyState *) arg;
	CsVerifiedObject *o = cs_verify_record_known(vs->record, sf->path);

	if (o == NULL || o->kind != CS_VERIFIED_SEGMENT)
	{
		(void) cs_verify_record_reading(vs->record, sf->path);
		return false;
	}
	o->skipped_now = true;
	*header = o->header;
	return true;
}

/* The decoder read a segment whole and found it sound: record it. */
static void
segment_read(void *arg, const CsSegmentFile *sf, const CsSegmentHeader *header)
{
	VerifyState *vs = (VerifyState *) arg;
	CsVerifiedObject *o = cs_verify_record_reading(vs->record, sf->path);

	if (o == NULL)
		return;
	o->kind = CS_VERIFIED_SEGMENT;
	o->header = *header;
	cs_verify_record_found(o);
}

/* Every segment of the generation, through the decoder. */
static void
check_segments(VerifyState *vs, const char *file)
{
	CsDecoder  *d = cs_decoder_open(vs->directory, vs->generation,
									InvalidXLogRecPtr, InvalidXLogRecPtr);
	CsChange	c;

	if (vs->record != NULL)
		cs_decoder_set_memory(d, &vs->memory);

	while (cs_decoder_next(d, &c))
		;
	cs_decoder_close(d);
}

/* The row count of each table in the manifest JSON, summed; -1 if absent. */
static int64
manifest_rows(const char *json, int *tables)
{
	Jsonb	   *jb = DatumGetJsonbP(DirectFunctionCall1(jsonb_in,
														CStringGetDatum(json)));
	JsonbValue	key;
	JsonbValue *arr;
	int64		sum = 0;

	key.type = jbvString;
	key.val.string.val = "tables";
	key.val.string.len = 6;
	arr = findJsonbValueFromContainer(&jb->root, JB_FOBJECT, &key);
	if (arr == NULL || arr->type != jbvBinary ||
		!JsonContainerIsArray(arr->val.binary.data))
		return -1;
	*tables = JsonContainerSize(arr->val.binary.data);
	for (int i = 0; i < *tables; i++)
	{
		JsonbValue *t = getIthJsonbValueFromContainer(arr->val.binary.data, i);
		JsonbValue *rows;

		if (t == NULL || t->type != jbvBinary)
			return -1;
		key.val.string.val = "rows";
		key.val.string.len = 4;
		rows = findJsonbValueFromContainer(t->val.binary.data, JB_FOBJECT, &key);
		if (rows == NULL || rows->type != jbvNumeric)
			return -1;
		sum += DatumGetInt64(DirectFunctionCall1(numeric_int8,
												 NumericGetDatum(rows->val.numeric)));
	}
	return sum;
}

/* One snapshot: the whole gzip stream, manifest and row counts. */
static void
check_snapshot(VerifyState *vs, const char *path)
{
	CsSnapshotReader *r = cs_snapreader_open(path);
	char	   *buf = palloc(64 * 1024);
	int			sections = 0;
	int64		rows = 0;
	int			json_tables = 0;
	int64		json_rows;
	char	   *copy;
	const char *name = strrchr(path, '/') + 1;
	unsigned long name_lsn;

	json_rows = manifest_rows(cs_snapreader_manifest(r), &json_tables);
	while ((copy = cs_snapreader_next_table(r)) != NULL)
	{
		int			n;

		sections++;
		while ((n = cs_snapreader_read(r, buf, 64 * 1024)) > 0)
		{
			for (char *p = buf; (p = memchr(p, '\n', buf + n - p)) != NULL; p++)
				rows++;
		}
	}
	if (sscanf(name, "%16lX", &name_lsn) != 1 || name_lsn != cs_snapreader_lsn(r))
		cs_file_damage(path, 0, "The file name's LSN is not the manifest's LSN " CS_LSN_FMT ".",
					   LSN_FORMAT_ARGS(cs_snapreader_lsn(r)));
	if (sections != cs_snapreader_tables(r) || json_tables != sections)
		cs_file_damage(path, 0, "The manifest announces %d tables (JSON: %d), the file holds %d.",
					   cs_snapreader_tables(r), json_tables, sections);
	if (rows != cs_snapreader_rows(r) || json_rows != rows)
		cs_file_damage(path, 0, "The manifest announces " INT64_FORMAT " rows (JSON: " INT64_FORMAT "), the file holds " INT64_FORMAT ".",
					   cs_snapreader_rows(r), json_rows, rows);
}

/* Whether the local archive holds the generation too. */
static void
check_local_generation(VerifyState *vs, const char *file)
{
	CsStorageInfo info;

	vs->local_has_generation =
		cs_storage_stat(cs_identity_path(cs_generation_path(vs->local, vs->generation)),
						true, &info) == 0 && info.type == CS_STORAGE_FILE;
}

/* The retention horizon: read first, as every listing depends on it. */
static void
check_horizon(VerifyState *vs, const char *file)
{
	vs->has_horizon = cs_read_horizon(vs->directory, vs->generation,
									  &vs->horizon);
}

/*
 * The timelines file, after a promotion (FORMAT.md 4.4): its lines parse
 * and follow the identity's timeline and start.
 */
static void
check_timelines(VerifyState *vs, const char *file)
{
	CsIdentity	identity;

	if (cs_read_identity(vs->directory, vs->generation, &identity))
		(void) cs_generation_timeline(vs->directory, &identity);
}

/*
 * The files of a generation the uploader puts once and never changes
 * (docs/DESIGN.md section 15), relative to the generation's directory:
 * the identity file, compressed segments, snapshots.  The schema history,
 * timelines and horizon change, and may lawfully differ while an upload
 * is pending; raw segments are not uploaded.
 */
static List *
immutable_files(const char *gen_path)
{
	List	   *names = NIL;
	CsStorageInfo info;
	int			err;
	List	   *entries;
	ListCell   *lc;
	static const char *const dirs[] = {"wal", "snapshots"};

	if (cs_storage_stat(cs_identity_path(gen_path), true, &info) == 0 &&
		info.type == CS_STORAGE_FILE)
		names = lappend(names, pstrdup("generation"));
	for (int d = 0; d < lengthof(dirs); d++)
	{
		entries = cs_storage_list_entries(cs_file_in(gen_path, dirs[d]), &err);
		foreach(lc, entries)
		{
			CsStorageEntry *e = lfirst(lc);
			int64		index;
			bool		compressed;

			if (e->info.type != CS_STORAGE_FILE)
				continue;
			if (d == 0 ? (cs_parse_segment_file_name(e->name, &index, &compressed) &&
						  compressed) :
				cs_is_snapshot_file_name(e->name))
				names = lappend(names, psprintf("%s/%s", dirs[d], e->name));
		}
	}
	return names;
}

/* The size and CRC-32C of a whole file of either driver. */
static void
file_crc(const char *path, int64 *size, pg_crc32c *crc)
{
	int			fd = cs_open_counted_file(path, false);
	char	   *buf = palloc(64 * 1024);

	*size = 0;
	INIT_CRC32C(*crc);
	PG_TRY();
	{
		for (;;)
		{
			ssize_t		n = read(fd, buf, 64 * 1024);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				ereport(ERROR,
						(errcode_for_file_access(),
						 errmsg("could not read file \"%s\": %m", path)));
			if (n == 0)
				break;
			COMP_CRC32C(*crc, buf, n);
			*size += n;
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_FINALLY();
	{
		cs_close_counted_file(NULL, fd);
	}
	PG_END_TRY();
	FIN_CRC32C(*crc);
	pfree(buf);
}

/*
 * The size and CRC-32C of the bucket's object at path: recorded by an
 * earlier call if the listing shows it unchanged, else read now (and
 * recorded).
 */
static void
remote_crc(VerifyState *vs, const char *path, int64 *size, pg_crc32c *crc)
{
	CsVerifiedObject *o = NULL;

	if (vs->record == NULL)
	{
		file_crc(path, size, crc);
		return;
	}
	o = cs_verify_record_known(vs->record, path);
	if (o != NULL && o->has_crc)
	{
		o->skipped_now = true;
		*size = o->size;
		*crc = o->crc;
		return;
	}
	o = cs_verify_record_reading(vs->record, path);
	file_crc(path, size, crc);
	if (o != NULL && *size == o->size)
	{
		o->has_crc = true;
		o->crc = *crc;
		cs_verify_record_found(o);
	}
}

/* Whether names holds name. */
static bool
has_name(List *names, const char *name)
{
	ListCell   *lc;

	foreach(lc, names)
	{
		if (strcmp(lfirst(lc), name) == 0)
			return true;
	}
	return false;
}

/* Whether name sorts between the first and last of names (a hole). */
static bool
inside(List *names, const char *name, const char *dir)
{
	char	   *lo = NULL;
	char	   *hi = NULL;
	ListCell   *lc;
	size_t		dlen = strlen(dir);

	foreach(lc, names)
	{
		char	   *n = lfirst(lc);

		if (strncmp(n, dir, dlen) != 0)
			continue;
		if (lo == NULL || strcmp(n, lo) < 0)
			lo = n;
		if (hi == NULL || strcmp(n, hi) > 0)
			hi = n;
	}
	return lo != NULL && strcmp(lo, name) < 0 && strcmp(name, hi) < 0;
}

/*
 * The bucket against the local archive, for one generation both hold:
 * every immutable file in both has the same size and CRC-32C, and no such
 * local file is missing from the bucket between files the bucket has (the
 * uploader puts them in order: a hole is a loss; what is newer than the
 * bucket's newest is still to go up, what is older than its oldest was
 * removed by remote retention).
 */
static void
check_against_local(VerifyState *vs, const char *file)
{
	char	   *local_gen = cs_generation_path(vs->local, vs->generation);
	List	   *remote = immutable_files(vs->gen_path);
	List	   *local = immutable_files(local_gen);
	ListCell   *lc;

	foreach(lc, local)
	{
		char	   *name = lfirst(lc);
		int64		rsize,
					lsize;
		pg_crc32c	rcrc,
					lcrc;

		if (!has_name(remote, name))
		{
			if (inside(remote, name, strncmp(name, "wal/", 4) == 0 ? "wal/" : "snapshots/"))
				add_problem(vs, name, 0,
							"The local file is missing from the bucket, which holds files before and after it.");
			continue;
		}
		file_crc(cs_file_in(local_gen, name), &lsize, &lcrc);
		remote_crc(vs, cs_file_in(vs->gen_path, name), &rsize, &rcrc);
		if (rsize != lsize || rcrc != lcrc)
			add_problem(vs, name, 0,
						psprintf("The bucket's object \"%s\" (%lld bytes, CRC-32C %08x) differs from the local file (%lld bytes, CRC-32C %08x).",
								 cs_file_in(vs->gen_path, name), (long long) rsize, rcrc,
								 (long long) lsize, lcrc));
	}
}

static void
verify_generation(VerifyState *vs)
{
	CsIdentity	identity;
	List	   *names;
	ListCell   *lc;
	char	   *dir = cs_snapshots_dir_path(vs->directory, vs->generation);
	bool		opening = false;

	vs->gen_path = cs_generation_path(vs->directory, vs->generation);
	/* the bucket's files against the local ones: downloads them once */
	if (vs->local != NULL && run_check(vs, check_local_generation, "generation") &&
		vs->local_has_generation)
		(void) run_check(vs, check_against_local, "generation");
	/* a damaged horizon: nothing of the generation can be listed */
	if (!run_check(vs, check_horizon, CS_HORIZON_FILE))
		return;
	(void) run_check(vs, check_timelines, "timelines");
	(void) run_check(vs, check_segments, "wal");	/* a row says where */
	names = cs_list_snapshots(vs->directory, vs->generation);
	foreach(lc, names)
	{
		char	   *path = cs_file_in(dir, (char *) lfirst(lc));
		CsVerifiedObject *o = NULL;

		if (vs->record != NULL)
		{
			o = cs_verify_record_known(vs->record, path);
			if (o != NULL && o->kind == CS_VERIFIED_SNAPSHOT)
			{
				o->skipped_now = true;
				continue;
			}
			o = cs_verify_record_reading(vs->record, path);
		}
		if (run_check(vs, check_snapshot, path) && o != NULL)
		{
			o->kind = CS_VERIFIED_SNAPSHOT;
			cs_verify_record_found(o);
		}
	}
	if (cs_read_identity(vs->directory, vs->generation, &identity))
	{
		XLogRecPtr	start = identity.start_lsn;

		/* after retention, the oldest snapshot kept opens the generation */
		if (vs->has_horizon)
			start = vs->horizon.snapshot_lsn;
		foreach(lc, names)
		{
			unsigned long lsn;

			if (sscanf(lfirst(lc), "%16lX", &lsn) == 1 && lsn == start)
				opening = true;
		}
		if (!opening)
			add_problem(vs, "snapshots", 0,
						psprintf(start == identity.start_lsn ?
								 "No snapshot is at the generation's start " CS_LSN_FMT "." :
								 "No snapshot is at the generation's retention horizon " CS_LSN_FMT ".",
								 LSN_FORMAT_ARGS(start)));
	}
}

/* The record's NOTICE: what this call read of the bucket, what not. */
static void
report_record(VerifyState *vs)
{
	int64		read;
	int64		skipped;

	cs_verify_record_counts(vs->record, &read, &skipped);
	ereport(NOTICE,
			(errmsg("changestream verify read " INT64_FORMAT " objects of the replica, and took " INT64_FORMAT " as verified by an earlier call",
					read, skipped),
			 skipped > 0 ?
			 errdetail("An object is taken as verified while the bucket's listing shows it with the size and ETag it had when it was found sound.") : 0,
			 skipped > 0 ?
			 errhint("Call verify(full => true) to read every object again.") : 0));
}

/*
 * changestream.verify(generation text DEFAULT NULL, source text DEFAULT
 *					   NULL, full boolean DEFAULT false)
 *	  Returns setof (generation text, file_name text, byte_offset bigint,
 *	  problem text): one row per problem found reading the generation (NULL:
 *	  every generation) without trusting anything; no row for a sound
 *	  archive.  file_name is relative to the generation's directory;
 *	  byte_offset is in the uncompressed stream.  A torn tail of the newest
 *	  raw segment is not a problem (docs/FORMAT.md section 11.3).  source
 *	  chooses the archive (read_source.c).  Reading the replica's bucket,
 *	  objects found sound by an earlier call and unchanged since are not
 *	  downloaded again unless full (verify_record.c; a NOTICE counts them),
 *	  and the record is written at the end.
 *	  Errors: 22023 for a malformed generation or source, 42704 when it
 *	  does not exist, 55000 when the archive chosen is not configured;
 *	  file access SQLSTATEs for errors other than damage.
 */
Datum
changestream_verify(PG_FUNCTION_ARGS)
{
	VerifyState vs;
	List	   *gens;
	ListCell   *lc;
	char	   *gen_text = PG_ARGISNULL(0) ? NULL :
		text_to_cstring(PG_GETARG_TEXT_PP(0));
	CsReadSource source = cs_parse_read_source(PG_NARGS() > 1 && !PG_ARGISNULL(1) ?
											   text_to_cstring(PG_GETARG_TEXT_PP(1)) :
											   NULL);

	memset(&vs, 0, sizeof(vs));
	vs.directory = cs_reader_directory(source, gen_text);
	if (source == CS_READ_REPLICA)
		vs.local = cs_local_directory();
	if (cs_storage_is_s3_path(vs.directory))
	{
		vs.record = cs_verify_record_open(vs.directory, cs_local_directory(),
										  PG_NARGS() > 2 && !PG_ARGISNULL(2) &&
										  PG_GETARG_BOOL(2));
		vs.memory.known = segment_known;
		vs.memory.read = segment_read;
		vs.memory.arg = &vs;
		/*
		 * Fetch only what is read: segments the record holds are passed
		 * over, and each GET is one the caller can count (status()).
		 */
		cs_storage_s3_prefetch_off();
	}
	vs.rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	cs_pin_call_begin();
	if (gen_text == NULL)
	{
		cs_pin_read(CS_PIN_ALL_GENERATIONS, InvalidXLogRecPtr);
		gens = cs_list_generations(vs.directory);
	}
	else
	{
		uint64	   *g = palloc(sizeof(uint64));

		*g = cs_resolve_generation(vs.directory, gen_text);
		cs_pin_read(*g, InvalidXLogRecPtr);
		gens = list_make1(g);
	}
	InitMaterializedSRF(fcinfo, 0);
	foreach(lc, gens)
	{
		vs.generation = *(uint64 *) lfirst(lc);
		verify_generation(&vs);
	}
	cs_pin_call_end();
	if (vs.record != NULL)
	{
		cs_verify_record_save(vs.record);
		report_record(&vs);
	}
	return (Datum) 0;
}
