/*-------------------------------------------------------------------------
 *
 * archive_layout.c
 *	  The one owner of the archive directory's layout (docs/FORMAT.md,
 *	  section 3), as xlog_internal.h owns WAL file names: every path and
 *	  file name of the archive (generations, their identity, horizon and
 *	  schema history files, segments raw and compressed, snapshots,
 *	  temporary files, the spare segment, the locks) is made and parsed
 *	  here, and the listings of what is on disk that every reader and the
 *	  writer use.  Files are reached through the storage interface
 *	  (storage.h); what the retention horizon hides is left to
 *	  retention_horizon.c, above this file.
 *
 *	  Everything found on disk is untrusted.  A name that looks like an
 *	  archive file but is not a regular file (a FIFO, a socket, a device, a
 *	  directory, a symbolic link loop) is damage: it is reported as such
 *	  (XX001) instead of being opened.  Listing a generation is linear in
 *	  its number of segments: the names are sorted once and a raw segment
 *	  is paired with its .gz in one pass.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <sys/stat.h>

#include "access/xact.h"
#include "lib/stringinfo.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "archive/archive_layout.h"

#define GENERATIONS_DIR		"generations"
#define WAL_DIR				"wal"
#define SNAPSHOTS_DIR		"snapshots"
#define IDENTITY_FILE		"generation"
#define SCHEMA_HISTORY_FILE	"schema_history"
#define TIMELINES_FILE		"timelines"
#define RECAPTURE_FILE		"recapture"
#define LOCK_FILE			"changestream.lock"
/* an on-disk name: kept from before the worker was renamed */
#define MAINTENANCE_LOCK_FILE "changestream.compressor.lock"
#define SPARE_FILE			"spare.wal"
#define REPLICA_JOURNAL_FILE "replica.journal"
#define REPLICA_VERIFIED_FILE "replica.verified"
#define REPLICA_RETENTION_FILE "replica.retention"
#define SPARE_PART_FILE		"spare.wal.part"
#define DATABASES_DIR		"databases"
#define TMP_SUFFIX			".tmp"
#define GZ_SUFFIX			".gz"
#define COMPRESSOR_TMP_SUFFIX ".wal.gz.tmp"
#define SNAPSHOT_SUFFIX		".snapshot.gz"
#define SNAPSHOT_DATA_SUFFIX ".data.tmp"

/*
 * cs_parse_generation
 *	  True when text is exactly 16 lowercase hex digits (a generation name,
 *	  or the stem of a segment or snapshot name); stores the value.
 */
bool
cs_parse_generation(const char *text, uint64 *generation)
{
	uint64		v = 0;
	int			i;

	if (text == NULL || strlen(text) != 16)
		return false;
	for (i = 0; i < 16; i++)
	{
		char		c = text[i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else
			return false;
	}
	*generation = v;
	return true;
}

/*
 * cs_generations_dir_path
 *	  Returns a palloc'd "<directory>/generations".
 */
char *
cs_generations_dir_path(const char *directory)
{
	return psprintf("%s/generations", directory);
}

/*
 * cs_generation_path
 *	  Returns a palloc'd "<directory>/generations/<16 hex digits>".
 */
char *
cs_generation_path(const char *directory, uint64 generation)
{
	return psprintf("%s/generations/%016llx", directory,
					(unsigned long long) generation);
}

/*
 * cs_generation_tmp_path
 *	  Returns a palloc'd "<directory>/generations/<generation>.tmp", where a
 *	  generation is built before it exists and moved before it is deleted.
 */
char *
cs_generation_tmp_path(const char *directory, uint64 generation)
{
	return psprintf("%s/generations/%016llx" TMP_SUFFIX, directory,
					(unsigned long long) generation);
}

/*
 * cs_wal_dir_path
 *	  Returns a palloc'd "<directory>/generations/<generation>/wal".
 */
char *
cs_wal_dir_path(const char *directory, uint64 generation)
{
	return psprintf("%s/generations/%016llx/wal", directory,
					(unsigned long long) generation);
}

/*
 * cs_snapshots_dir_path
 *	  Returns a palloc'd "<directory>/generations/<generation>/snapshots".
 */
char *
cs_snapshots_dir_path(const char *directory, uint64 generation)
{
	return psprintf("%s/generations/%016llx/snapshots", directory,
					(unsigned long long) generation);
}

/*
 * cs_gendir_wal_path
 *	  Returns a palloc'd "<gendir>/wal" for a generation directory gendir
 *	  (final, or its .tmp).
 */
char *
cs_gendir_wal_path(const char *gendir)
{
	return psprintf("%s/" WAL_DIR, gendir);
}

/*
 * cs_gendir_snapshots_path
 *	  Returns a palloc'd "<gendir>/snapshots" for a generation directory
 *	  gendir (final, or its .tmp).
 */
char *
cs_gendir_snapshots_path(const char *gendir)
{
	return psprintf("%s/" SNAPSHOTS_DIR, gendir);
}

/*
 * cs_is_snapshots_dir_name
 *	  True for "snapshots", the name of a generation's snapshot directory.
 */
bool
cs_is_snapshots_dir_name(const char *name)
{
	return strcmp(name, SNAPSHOTS_DIR) == 0;
}

/*
 * cs_identity_path
 *	  Returns a palloc'd "<gendir>/generation", the identity file of the
 *	  generation directory gendir (final, or its .tmp).
 */
char *
cs_identity_path(const char *gendir)
{
	return psprintf("%s/" IDENTITY_FILE, gendir);
}

/*
 * cs_horizon_path
 *	  Returns a palloc'd "<directory>/generations/<generation>/retention",
 *	  the generation's retention horizon (docs/FORMAT.md 4.3).
 */
char *
cs_horizon_path(const char *directory, uint64 generation)
{
	return psprintf("%s/generations/%016llx/" CS_HORIZON_FILE, directory,
					(unsigned long long) generation);
}

/*
 * cs_timelines_path
 *	  Returns a palloc'd "<directory>/generations/<generation>/timelines",
 *	  the promotions the generation was continued across (docs/FORMAT.md
 *	  4.4).
 */
char *
cs_timelines_path(const char *directory, uint64 generation)
{
	return psprintf("%s/generations/%016llx/" TIMELINES_FILE, directory,
					(unsigned long long) generation);
}

/*
 * cs_replica_journal_path
 *	  Returns a palloc'd "<directory>/replica.journal", the uploader's
 *	  journal of what is in the bucket (replica_journal.c).
 */
char *
cs_replica_journal_path(const char *directory)
{
	return psprintf("%s/" REPLICA_JOURNAL_FILE, directory);
}

/*
 * cs_replica_verified_path
 *	  Returns a palloc'd "<directory>/replica.verified", verify()'s record
 *	  of the replica's objects it found sound (verify_record.c).
 */
char *
cs_replica_verified_path(const char *directory)
{
	return psprintf("%s/" REPLICA_VERIFIED_FILE, directory);
}

/*
 * cs_replica_retention_path
 *	  Returns a palloc'd "<directory>/replica.retention", remote retention's
 *	  facts and decisions (remote_retention.c).
 */
char *
cs_replica_retention_path(const char *directory)
{
	return psprintf("%s/" REPLICA_RETENTION_FILE, directory);
}

/*
 * cs_parse_generation_file(name, &generation, &kind, &order) -> bool
 *	  Parses a name relative to the archive (an object's name under the
 *	  replica's prefix) of a file of a generation,
 *	  "generations/<gen>/<rest>": its generation, its kind (identity,
 *	  horizon, a segment, raw or .gz, with its index in *order, a complete
 *	  snapshot with its LSN in *order, or another file of the generation).
 *	  False for any name outside a generation directory.
 */
bool
cs_parse_generation_file(const char *name, uint64 *generation,
						 CsGenerationFileKind *kind, int64 *order)
{
	size_t		dlen = strlen(GENERATIONS_DIR "/");
	char		hex[17];
	const char *rest;
	bool		compressed;
	XLogRecPtr	lsn;

	*order = 0;
	if (strncmp(name, GENERATIONS_DIR "/", dlen) != 0 ||
		strlen(name) < dlen + 18 || name[dlen + 16] != '/')
		return false;
	memcpy(hex, name + dlen, 16);
	hex[16] = '\0';
	if (!cs_parse_generation(hex, generation))
		return false;
	rest = name + dlen + 17;
	*kind = CS_GENFILE_OTHER;
	if (strcmp(rest, IDENTITY_FILE) == 0)
		*kind = CS_GENFILE_IDENTITY;
	else if (strcmp(rest, CS_HORIZON_FILE) == 0)
		*kind = CS_GENFILE_HORIZON;
	else if (strncmp(rest, WAL_DIR "/", strlen(WAL_DIR "/")) == 0 &&
			 cs_parse_segment_file_name(rest + strlen(WAL_DIR "/"), order,
										&compressed))
		*kind = CS_GENFILE_SEGMENT;
	else if (strncmp(rest, SNAPSHOTS_DIR "/", strlen(SNAPSHOTS_DIR "/")) == 0 &&
			 cs_snapshot_name_lsn(rest + strlen(SNAPSHOTS_DIR "/"), &lsn))
	{
		*kind = CS_GENFILE_SNAPSHOT;
		*order = (int64) lsn;
	}
	return true;
}

/*
 * cs_archive_relative_name
 *	  Returns a palloc'd name of path relative to the archive directory
 *	  (what follows "<directory>/"), the object name the replica gives the
 *	  file; raises an internal error for a path outside the directory.
 */
char *
cs_archive_relative_name(const char *directory, const char *path)
{
	size_t		len = strlen(directory);

	if (strncmp(path, directory, len) != 0 || path[len] != '/' ||
		path[len + 1] == '\0')
		elog(ERROR, "\"%s\" is not a file of the archive \"%s\"", path,
			 directory);
	return pstrdup(path + len + 1);
}

/*
 * cs_schema_history_path
 *	  Returns a palloc'd
 *	  "<directory>/generations/<generation>/schema_history".
 */
char *
cs_schema_history_path(const char *directory, uint64 generation)
{
	return psprintf("%s/generations/%016llx/" SCHEMA_HISTORY_FILE, directory,
					(unsigned long long) generation);
}

/*
 * cs_recapture_path
 *	  Returns a palloc'd "<directory>/generations/<generation>/recapture",
 *	  the archiver's pending re-capture (docs/FORMAT.md 3.5).
 */
char *
cs_recapture_path(const char *directory, uint64 generation)
{
	return psprintf("%s/generations/%016llx/" RECAPTURE_FILE, directory,
					(unsigned long long) generation);
}

/*
 * cs_lock_file_path
 *	  Returns a palloc'd "<directory>/changestream.lock" (the archiver's lock)
 *	  or, for the maintenance worker,
 *	  "<directory>/changestream.compressor.lock".
 */
char *
cs_lock_file_path(const char *directory, bool maintenance)
{
	return psprintf("%s/%s", directory,
					maintenance ? MAINTENANCE_LOCK_FILE : LOCK_FILE);
}

/*
 * cs_spare_path
 *	  Returns a palloc'd "<directory>/spare.wal", the maintenance worker's
 *	  zero-filled spare segment.
 */
char *
cs_spare_path(const char *directory)
{
	return psprintf("%s/" SPARE_FILE, directory);
}

/*
 * cs_spare_part_path
 *	  Returns a palloc'd "<directory>/spare.wal.part", the spare segment
 *	  while it is zero-filled.
 */
char *
cs_spare_part_path(const char *directory)
{
	return psprintf("%s/" SPARE_PART_FILE, directory);
}

/*
 * cs_file_in
 *	  Returns a palloc'd "<dir>/<name>", for a name a listing of dir gave.
 */
char *
cs_file_in(const char *dir, const char *name)
{
	return psprintf("%s/%s", dir, name);
}

/*
 * cs_databases_dir_path
 *	  Returns a palloc'd "<root>/databases", the directory that holds the
 *	  archive tree of every database but changestream.database's
 *	  (docs/databases.md).
 */
char *
cs_databases_dir_path(const char *root)
{
	return psprintf("%s/" DATABASES_DIR, root);
}

/*
 * cs_database_tree_path
 *	  Returns a palloc'd "<root>/databases/<name>", the archive tree of
 *	  database (a whole archive: generations, locks, spare, journal).  The
 *	  name is the database's name with every byte other than a-z, 0-9, _
 *	  and - written as %XX (upper case hex), so that any database name
 *	  (dots, slashes, upper case on a case-insensitive file system, other
 *	  encodings) gives one name of at most 189 bytes, and no two names the
 *	  same.
 */
char *
cs_database_tree_path(const char *root, const char *database)
{
	StringInfoData buf;
	const unsigned char *p;

	initStringInfo(&buf);
	appendStringInfo(&buf, "%s/" DATABASES_DIR "/", root);
	for (p = (const unsigned char *) database; *p; p++)
	{
		if ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
			*p == '_' || *p == '-')
			appendStringInfoChar(&buf, (char) *p);
		else
			appendStringInfo(&buf, "%%%02X", (unsigned int) *p);
	}
	return buf.data;
}

/*
 * cs_tmp_path
 *	  Returns a palloc'd "<path>.tmp", where path is written before it is
 *	  renamed into place.
 */
char *
cs_tmp_path(const char *path)
{
	return psprintf("%s" TMP_SUFFIX, path);
}

static bool
has_suffix(const char *name, const char *suffix)
{
	size_t		n = strlen(name);
	size_t		s = strlen(suffix);

	return n >= s && strcmp(name + n - s, suffix) == 0;
}

/*
 * cs_is_tmp_name
 *	  True for a name ending in ".tmp": a file or generation directory
 *	  being written, which a crash leaves behind.
 */
bool
cs_is_tmp_name(const char *name)
{
	return has_suffix(name, TMP_SUFFIX);
}

/*
 * cs_is_maintenance_tmp_name
 *	  True for "*.wal.gz.tmp", the maintenance worker's temporary file, which
 *	  the maintenance worker itself replaces.
 */
bool
cs_is_maintenance_tmp_name(const char *name)
{
	return has_suffix(name, COMPRESSOR_TMP_SUFFIX);
}

/*
 * cs_segment_file_name
 *	  Returns a palloc'd "<16 hex digits>.wal" or "<16 hex digits>.wal.gz".
 */
char *
cs_segment_file_name(int64 index, bool compressed)
{
	return psprintf("%016llx.wal%s", (unsigned long long) index,
					compressed ? GZ_SUFFIX : "");
}

/*
 * cs_segment_path
 *	  Returns a palloc'd "<wal_dir>/<16 hex digits>.wal[.gz]".
 */
char *
cs_segment_path(const char *wal_dir, int64 index, bool compressed)
{
	return psprintf("%s/%016llx.wal%s", wal_dir, (unsigned long long) index,
					compressed ? GZ_SUFFIX : "");
}

/*
 * cs_compressed_path
 *	  Returns a palloc'd "<raw_path>.gz", the compressed twin of a raw
 *	  segment.
 */
char *
cs_compressed_path(const char *raw_path)
{
	return psprintf("%s" GZ_SUFFIX, raw_path);
}

/*
 * cs_compressed_tmp_path
 *	  Returns a palloc'd "<raw_path>.gz.tmp", where the maintenance worker
 *	  writes a raw segment's .gz.
 */
char *
cs_compressed_tmp_path(const char *raw_path)
{
	return psprintf("%s" GZ_SUFFIX TMP_SUFFIX, raw_path);
}

/*
 * cs_parse_segment_file_name
 *	  Recognises a segment file name, storing its index and whether it is
 *	  compressed; false for anything else (temporary files included).
 */
bool
cs_parse_segment_file_name(const char *name, int64 *index, bool *compressed)
{
	uint64		v;
	char		hex[17];

	if (strlen(name) < 20)
		return false;
	memcpy(hex, name, 16);
	hex[16] = '\0';
	if (!cs_parse_generation(hex, &v) || v > (uint64) PG_INT64_MAX)
		return false;
	if (strcmp(name + 16, ".wal") == 0)
		*compressed = false;
	else if (strcmp(name + 16, ".wal" GZ_SUFFIX) == 0)
		*compressed = true;
	else
		return false;
	*index = (int64) v;
	return true;
}

/*
 * cs_snapshot_file_name
 *	  Returns a palloc'd "<16 uppercase hex digits>.snapshot.gz", the name
 *	  of the durable snapshot at lsn (names sort in LSN order).
 */
char *
cs_snapshot_file_name(XLogRecPtr lsn)
{
	return psprintf("%016llX" SNAPSHOT_SUFFIX, (unsigned long long) lsn);
}

/*
 * cs_snapshot_path
 *	  Returns a palloc'd "<snapshots_dir>/<LSN>.snapshot.gz".
 */
char *
cs_snapshot_path(const char *snapshots_dir, XLogRecPtr lsn)
{
	return psprintf("%s/%016llX" SNAPSHOT_SUFFIX, snapshots_dir,
					(unsigned long long) lsn);
}

/*
 * cs_snapshot_tmp_path
 *	  Returns a palloc'd "<snapshots_dir>/<LSN>.snapshot.gz.tmp", where the
 *	  snapshot at lsn is written before it is renamed into place.
 */
char *
cs_snapshot_tmp_path(const char *snapshots_dir, XLogRecPtr lsn)
{
	return psprintf("%s/%016llX" SNAPSHOT_SUFFIX TMP_SUFFIX, snapshots_dir,
					(unsigned long long) lsn);
}

/*
 * cs_snapshot_data_path
 *	  Returns a palloc'd "<snapshots_dir>/<LSN>.data.tmp", the snapshot's
 *	  table data before its manifest is written in front of it.
 */
char *
cs_snapshot_data_path(const char *snapshots_dir, XLogRecPtr lsn)
{
	return psprintf("%s/%016llX" SNAPSHOT_DATA_SUFFIX, snapshots_dir,
					(unsigned long long) lsn);
}

/*
 * cs_is_snapshot_file_name
 *	  True for "<16 hex digits>.snapshot.gz", the name of a durable snapshot
 *	  (its LSN in uppercase hex, so names sort in LSN order); false for
 *	  temporary files and anything else.
 */
bool
cs_is_snapshot_file_name(const char *name)
{
	int			i;

	if (strlen(name) != 16 + strlen(SNAPSHOT_SUFFIX) ||
		strcmp(name + 16, SNAPSHOT_SUFFIX) != 0)
		return false;
	for (i = 0; i < 16; i++)
		if (!isxdigit((unsigned char) name[i]))
			return false;
	return true;
}

/*
 * cs_snapshot_name_lsn
 *	  The LSN in a snapshot file name ("<16 hex digits>.snapshot.gz").
 *	  Returns false for any other name.
 */
bool
cs_snapshot_name_lsn(const char *name, XLogRecPtr *lsn)
{
	char	   *end;

	if (!cs_is_snapshot_file_name(name))
		return false;
	*lsn = (XLogRecPtr) strtou64(name, &end, 16);
	return end == name + 16;
}

/*
 * cs_file_mtime
 *	  A file's modification time as a timestamptz, with microseconds.
 */
TimestampTz
cs_file_mtime(const struct stat *st)
{
	return time_t_to_timestamptz(st->st_mtim.tv_sec) +
		st->st_mtim.tv_nsec / 1000;
}

static int
cmp_uint64(const ListCell *a, const ListCell *b)
{
	uint64		x = *(uint64 *) lfirst(a);
	uint64		y = *(uint64 *) lfirst(b);

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * cs_list_generations
 *	  Returns the generations present as a List of palloc'd uint64, in
 *	  ascending (creation) order: directories named with 16 hex digits that
 *	  hold an entry named "generation" (the identity file, which readers
 *	  then check).  Anything else (a half-made "<gen>.tmp", a stray file or
 *	  an empty directory) is ignored; a missing generations/ gives NIL.
 *	  Errors: file access SQLSTATEs when generations/ cannot be read.
 */
List *
cs_list_generations(const char *directory)
{
	char	   *path = cs_generations_dir_path(directory);
	bool		found;
	List	   *names = cs_storage_list(path, true, &found);
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, names)
	{
		uint64		g;
		CsStorageInfo info;

		if (!cs_parse_generation(lfirst(lc), &g))
			continue;
		if (cs_storage_stat(cs_identity_path(cs_generation_path(directory, g)),
							false, &info) == 0 &&
			info.type != CS_STORAGE_MISSING)
		{
			uint64	   *p = palloc(sizeof(uint64));

			*p = g;
			result = lappend(result, p);
		}
	}
	list_free_deep(names);
	list_sort(result, cmp_uint64);
	return result;
}

/*
 * stat() an entry named like an archive file; false when it vanished
 * (compression removes raw segments), XX001 when it is not a regular file.
 */
static bool
stat_regular(const char *path, CsStorageInfo *info)
{
	if (cs_storage_stat(path, true, info) != 0)
	{
		if (errno == ELOOP)
			cs_file_damage(path, 0, "It is a symbolic link loop, not a regular file.");
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", path)));
	}
	if (info->type == CS_STORAGE_MISSING)
		return false;
	if (info->type != CS_STORAGE_FILE)
		cs_file_damage(path, 0, "It is not a regular file.");
	return true;
}

/* Segment files by index, the raw one before its .gz. */
static int
cmp_segment(const void *a, const void *b)
{
	const CsSegmentFile *x = a;
	const CsSegmentFile *y = b;

	if (x->index != y->index)
		return x->index < y->index ? -1 : 1;
	return (int) x->compressed - (int) y->compressed;
}

/*
 * cs_list_all_segments
 *	  Returns the segment files of a generation as a List of palloc'd
 *	  CsSegmentFile, by index, all that are on disk (the retention horizon
 *	  is applied by cs_list_segments(), above).  Where a raw segment and its
 *	  .gz both exist (compression finishing: the .gz is renamed into place
 *	  only once it is durable) the .gz is listed, with raw_twin set.  A
 *	  generation without wal/ gives NIL.  Linear in the number of files
 *	  after one sort.
 *	  Errors: XX001 for an entry named like a segment that is not a regular
 *	  file; file access SQLSTATEs when wal/ cannot be read.
 */
List *
cs_list_all_segments(const char *directory, uint64 generation)
{
	char	   *wal_dir = cs_wal_dir_path(directory, generation);
	bool		found;
	List	   *names = cs_storage_list(wal_dir, true, &found);
	CsSegmentFile *files;
	int			n = 0;
	List	   *result = NIL;
	ListCell   *lc;

	files = palloc(sizeof(CsSegmentFile) * Max(list_length(names), 1));
	foreach(lc, names)
	{
		CsSegmentFile *sf = &files[n];
		CsStorageInfo info;

		if (!cs_parse_segment_file_name(lfirst(lc), &sf->index, &sf->compressed))
			continue;
		snprintf(sf->path, MAXPGPATH, "%s/%s", wal_dir, (char *) lfirst(lc));
		if (!stat_regular(sf->path, &info))
			continue;
		sf->raw_twin = false;
		sf->size = info.size;
		sf->mtime = info.mtime;
		n++;
	}
	list_free_deep(names);
	qsort(files, n, sizeof(CsSegmentFile), cmp_segment);
	for (int i = 0; i < n; i++)
	{
		CsSegmentFile *sf;

		/* a raw segment followed by its .gz: the .gz is listed */
		if (i + 1 < n && files[i + 1].index == files[i].index)
			continue;
		sf = palloc(sizeof(CsSegmentFile));
		*sf = files[i];
		sf->raw_twin = (i > 0 && files[i - 1].index == sf->index);
		result = lappend(result, sf);
	}
	pfree(files);
	return result;
}

static int
cmp_name(const ListCell *a, const ListCell *b)
{
	return strcmp(lfirst(a), lfirst(b));
}

/*
 * cs_list_all_snapshots
 *	  Returns the names of a generation's durable snapshot files as a List
 *	  of palloc'd strings in LSN order (their names are their LSNs in hex),
 *	  all that are on disk (the retention horizon is applied by
 *	  cs_list_snapshots(), above).
 *	  Errors: file access SQLSTATEs when snapshots/ cannot be read (a
 *	  generation always has it), never an empty result instead.
 */
List *
cs_list_all_snapshots(const char *directory, uint64 generation)
{
	bool		found;
	List	   *names = cs_storage_list(cs_snapshots_dir_path(directory, generation),
										false, &found);
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, names)
	{
		if (cs_is_snapshot_file_name(lfirst(lc)))
			result = lappend(result, lfirst(lc));
	}
	list_free(names);
	list_sort(result, cmp_name);
	return result;
}

/*
 * cs_catch_error(fn, arg, cxt) -> NULL, or the error fn raised
 *	  Runs fn(arg) in a subtransaction with cxt as CurrentMemoryContext, the
 *	  way PL/pgSQL runs an exception block.  Returns NULL when fn returns,
 *	  or, when fn raised any error, that error copied into the caller's
 *	  memory context, after the subtransaction is rolled back (which
 *	  releases what fn held in its resource owner).  The caller decides
 *	  which errors to raise again (ReThrowError).
 */
ErrorData *
cs_catch_error(void (*fn) (void *arg), void *arg, MemoryContext cxt)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	ErrorData  *volatile error = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		fn(arg);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		error = edata;
	}
	PG_END_TRY();
	return error;
}

/*
 * cs_catch_damage
 *	  Runs fn(arg) in a subtransaction with cxt as CurrentMemoryContext
 *	  (cs_catch_error()).  Returns NULL when fn returns, or the error,
 *	  copied into the caller's memory context, when fn raised XX001
 *	  (data_corrupted): the subtransaction is then rolled back and cxt
 *	  reset, which closes the files fn's readers held in it.  Any other
 *	  error is raised again (after the same reset).  For readers that report
 *	  damage as a value (generations()' damage column, verify()'s rows)
 *	  instead of failing.
 */
ErrorData *
cs_catch_damage(void (*fn) (void *arg), void *arg, MemoryContext cxt)
{
	ErrorData  *damage = cs_catch_error(fn, arg, cxt);

	if (damage != NULL)
	{
		MemoryContextReset(cxt);
		if (damage->sqlerrcode != ERRCODE_DATA_CORRUPTED)
			ReThrowError(damage);
	}
	return damage;
}
