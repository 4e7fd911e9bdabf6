/*-------------------------------------------------------------------------
 *
 * verify_record.c
 *	  verify()'s record of the replica's objects it has read and found
 *	  sound (docs/DESIGN.md section 16): for each object, its size and
 *	  ETag as listed when it was read, the CRC-32C of its body, when that
 *	  was found, and what it was found to be: a segment that decoded sound
 *	  in its generation's chain (with its header, so that the segments
 *	  around it can still be checked against it), or a snapshot read
 *	  sound.  An object the bucket's listing still shows with the same size
 *	  and ETag is taken as verified without a GET; any other is read again.
 *
 *	  The file is "replica.verified" in the archive directory, or
 *	  "changestream_replica.verified" in the data directory when
 *	  changestream.directory is empty.  Text, replaced whole and durably
 *	  (cs_write_file_durably()) at the end of a verify() call:
 *
 *		changestream verify record 1 <store, bucket and prefix>
 *		<kind> <size> <etag> <crc32c|-> <verified_at> [<header>] <name>
 *		...
 *		end <entries> <crc32c of every byte before this line>
 *
 *	  <header> (kind S only) is the segment header's thirteen numbers.
 *	  A record of another store, bucket or prefix is not used.  The file
 *	  is untrusted input: one that does not parse, is over
 *	  RECORD_MAX_BYTES, or whose count or CRC-32C does not match is
 *	  ignored with a NOTICE, and every object is read again: damage can
 *	  only cost downloads, never make an object count as verified.  Two
 *	  verify() calls at once each replace the file; the last one's wins,
 *	  which costs the other's objects a download at the next run.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "archive/archive_layout.h"
#include "archive/storage.h"
#include "read/verify_record.h"
#include "replica/s3_config.h"

#define RECORD_MAGIC		"changestream verify record 1 "
#define RECORD_DATADIR_FILE	"changestream_replica.verified"
#define RECORD_MAX_BYTES	(256 * 1024 * 1024)
#define HEADER_FIELDS		13

struct CsVerifyRecord
{
	MemoryContext cxt;			/* the table, as long as the call */
	char	   *path;			/* the record's file */
	char	   *dir;			/* the directory holding it */
	char	   *root;			/* the replica's root, "s3://bucket/prefix" */
	char	   *store;			/* the store, bucket and prefix it describes */
	bool		trusted;		/* false with full => true */
	HTAB	   *objects;		/* CsVerifiedObject by name */
};

/* An empty table of CsVerifiedObject by name, in cxt. */
static HTAB *
new_objects_table(MemoryContext cxt)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = MAXPGPATH;
	ctl.entrysize = sizeof(CsVerifiedObject);
	ctl.hcxt = cxt;
	return hash_create("changestream verify record", 256, &ctl,
					   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/* The name of path under the root; NULL when elsewhere or too long. */
static const char *
name_of(CsVerifyRecord *record, const char *path)
{
	size_t		rlen = strlen(record->root);

	if (strncmp(path, record->root, rlen) != 0 || path[rlen] != '/' ||
		strlen(path + rlen + 1) >= MAXPGPATH ||
		strpbrk(path + rlen + 1, "\n\r") != NULL)
		return NULL;
	return path + rlen + 1;
}

/* The next space-separated field of *p, NUL-terminated; NULL at the end. */
static char *
next_field(char **p)
{
	char	   *f = *p;
	char	   *space;

	if (f == NULL || *f == '\0')
		return NULL;
	space = strchr(f, ' ');
	if (space == NULL)
		*p = NULL;
	else
	{
		*space = '\0';
		*p = space + 1;
	}
	return f;
}

/* A field as an unsigned decimal number; false when it is not one. */
static bool
field_u64(char **p, uint64 *out)
{
	char	   *f = next_field(p);
	char	   *end;

	if (f == NULL || f[0] < '0' || f[0] > '9')
		return false;
	errno = 0;
	*out = strtou64(f, &end, 10);
	return errno == 0 && *end == '\0';
}

/* The thirteen numbers of a segment header; false when malformed. */
static bool
parse_header(char **p, CsSegmentHeader *h)
{
	uint64		v[HEADER_FIELDS];

	for (int i = 0; i < HEADER_FIELDS; i++)
		if (!field_u64(p, &v[i]))
			return false;
	if (v[0] > PG_UINT32_MAX || v[1] > PG_UINT32_MAX || v[6] > PG_UINT32_MAX ||
		v[9] > PG_INT64_MAX || v[10] > PG_INT64_MAX)
		return false;
	memset(h, 0, sizeof(*h));
	h->format_version = (uint32) v[0];
	h->header_size = (uint32) v[1];
	h->system_identifier = v[2];
	h->generation = v[3];
	h->segment_index = v[4];
	h->start_lsn = v[5];
	h->timeline = (uint32) v[6];
	h->seal_state = CS_SEAL_VALID;
	h->seal.end_lsn = v[7];
	h->seal.first_commit_lsn = v[8];
	h->seal.min_commit_time = (TimestampTz) v[9];
	h->seal.max_commit_time = (TimestampTz) v[10];
	h->seal.last_commit_lsn = v[11];
	h->seal.transactions = v[12];
	return true;
}

/* One entry line (without its newline) into the table; false if malformed. */
static bool
parse_line(CsVerifyRecord *record, char *line)
{
	char	   *p = line;
	char	   *kind = next_field(&p);
	char	   *etag;
	char	   *crc;
	uint64		size;
	uint64		at;
	CsVerifiedObject o;
	CsVerifiedObject *e;
	bool		found;

	memset(&o, 0, sizeof(o));
	if (kind == NULL || strlen(kind) != 1 ||
		(kind[0] != CS_VERIFIED_NONE && kind[0] != CS_VERIFIED_SEGMENT &&
		 kind[0] != CS_VERIFIED_SNAPSHOT))
		return false;
	o.kind = (CsVerifiedKind) kind[0];
	if (!field_u64(&p, &size) || size > PG_INT64_MAX)
		return false;
	o.size = (int64) size;
	etag = next_field(&p);
	if (etag == NULL || strlen(etag) >= CS_VERIFY_ETAG_MAX)
		return false;
	strlcpy(o.etag, etag, CS_VERIFY_ETAG_MAX);
	crc = next_field(&p);
	if (crc == NULL)
		return false;
	if (strcmp(crc, "-") != 0)
	{
		char	   *end;

		if (strlen(crc) != 8 || strspn(crc, "0123456789abcdef") != 8)
			return false;
		o.crc = (pg_crc32c) strtoul(crc, &end, 16);
		o.has_crc = true;
	}
	if (!field_u64(&p, &at) || at > PG_INT64_MAX)
		return false;
	o.verified_at = (TimestampTz) at;
	if (o.kind == CS_VERIFIED_SEGMENT && !parse_header(&p, &o.header))
		return false;
	/* the name is the rest of the line */
	if (p == NULL || p[0] == '\0' || strlen(p) >= MAXPGPATH)
		return false;
	strlcpy(o.name, p, MAXPGPATH);
	e = hash_search(record->objects, o.name, HASH_ENTER, &found);
	if (found)
		return false;
	memcpy(e, &o, sizeof(o));
	return true;
}

/*
 * Fill the table from text (the file's content, NUL-terminated); NULL, or
 * what is wrong with it.  A record of another store leaves it empty.
 */
static const char *
parse_record(CsVerifyRecord *record, StringInfo text)
{
	char	   *nl = memchr(text->data, '\n', text->len);
	char	   *p;
	char	   *end_line;
	pg_crc32c	crc;
	uint64		count;
	uint64		stored;
	char	   *f;

	if (strlen(text->data) != (size_t) text->len)
		return "it holds a NUL byte";
	if (nl == NULL || strncmp(text->data, RECORD_MAGIC, strlen(RECORD_MAGIC)) != 0)
		return "its first line is not a verify record's";
	*nl = '\0';
	if (strcmp(text->data + strlen(RECORD_MAGIC), record->store) != 0)
		return NULL;
	*nl = '\n';
	if (text->len < 1 || text->data[text->len - 1] != '\n')
		return "it does not end with a complete line";
	text->data[text->len - 1] = '\0';
	end_line = strrchr(text->data, '\n');
	if (end_line == NULL || strncmp(end_line + 1, "end ", 4) != 0)
		return "its last line is not its end line";
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, text->data, end_line + 1 - text->data);
	FIN_CRC32C(crc);
	p = end_line + 5;
	if (!field_u64(&p, &count) || (f = next_field(&p)) == NULL || p != NULL ||
		strlen(f) != 8 || strspn(f, "0123456789abcdef") != 8)
		return "its end line is malformed";
	stored = strtoul(f, NULL, 16);
	if (stored != (uint64) crc)
		return psprintf("its CRC-32C is %08x, its end line says %08llx",
						crc, (unsigned long long) stored);
	*end_line = '\0';
	p = nl + 1;
	while (p < end_line)
	{
		char	   *line_end = strchr(p, '\n');

		if (line_end != NULL)
			*line_end = '\0';
		if (!parse_line(record, p))
			return psprintf("the line at offset %lld is malformed",
							(long long) (p - text->data));
		p = line_end ? line_end + 1 : end_line;
	}
	if ((uint64) hash_get_num_entries(record->objects) != count)
		return psprintf("it holds %ld entries, its end line says %llu",
						hash_get_num_entries(record->objects),
						(unsigned long long) count);
	return NULL;
}

/* Read the file into the table; a damaged one leaves it empty, noticed. */
static void
load(CsVerifyRecord *record)
{
	CsStorageInfo info;
	StringInfoData text;
	const char *problem;

	if (cs_storage_stat(record->path, false, &info) != 0 ||
		info.type == CS_STORAGE_MISSING)
		return;
	if (info.type != CS_STORAGE_FILE || info.size > RECORD_MAX_BYTES)
		problem = psprintf("it is not a regular file of at most %d bytes",
						   RECORD_MAX_BYTES);
	else
	{
		initStringInfo(&text);
		if (!cs_read_small_file(record->path, RECORD_MAX_BYTES, &text, true))
			return;
		problem = parse_record(record, &text);
		pfree(text.data);
	}
	if (problem == NULL)
		return;
	ereport(NOTICE,
			(errmsg("changestream verify record \"%s\" is damaged, and is not used: %s",
					record->path, problem),
			 errdetail("Every object of the replica is read again; the record is written anew at the end of this call.")));
	hash_destroy(record->objects);
	record->objects = new_objects_table(record->cxt);
}

/*
 * cs_verify_record_open(root, local, full) -> the record
 *	  The record of the replica whose root ("s3://bucket/prefix") verify()
 *	  reads, kept in the archive directory local (NULL: the data
 *	  directory), loaded now; it lives in CurrentMemoryContext.  With
 *	  full, nothing recorded counts as verified (every object is read),
 *	  but what is found is recorded.  A damaged file is a NOTICE and an
 *	  empty record (see the file header).
 *	  Errors: file access SQLSTATEs when the file cannot be read; 55000
 *	  when no replica is configured.
 */
CsVerifyRecord *
cs_verify_record_open(const char *root, const char *local, bool full)
{
	CsVerifyRecord *record = palloc0(sizeof(CsVerifyRecord));
	CsS3Config	config;
	const char *problem = cs_s3_config_current(&config);

	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the replica cannot be read: %s", problem)));
	record->cxt = CurrentMemoryContext;
	record->root = pstrdup(root);
	record->store = pstrdup(config.store);
	record->trusted = !full;
	record->dir = pstrdup(local ? local : ".");
	record->path = local ? cs_replica_verified_path(local) :
		pstrdup(RECORD_DATADIR_FILE);
	record->objects = new_objects_table(record->cxt);
	if (strpbrk(record->store, "\n\r") == NULL)
		load(record);
	return record;
}

/* Whether the listing shows the object of path as o records it. */
static bool
unchanged(const char *path, const CsVerifiedObject *o)
{
	int64		size;
	const char *etag;

	return o->etag[0] != '\0' && cs_storage_s3_listed(path, &size, &etag) &&
		etag != NULL && size == o->size && strcmp(etag, o->etag) == 0;
}

/*
 * cs_verify_record_known(record, path) -> the object's entry, or NULL
 *	  What was found of the replica's object at path when it was read
 *	  before, if the statement's listing still shows it with the same size
 *	  and ETag (and the call is not full); NULL otherwise.  The caller
 *	  uses what it needs of it (has_crc, kind) and sets skipped_now when it
 *	  does not read the object for it.
 */
CsVerifiedObject *
cs_verify_record_known(CsVerifyRecord *record, const char *path)
{
	const char *name = name_of(record, path);
	CsVerifiedObject *o;

	if (!record->trusted || name == NULL)
		return NULL;
	o = hash_search(record->objects, name, HASH_FIND, NULL);
	if (o == NULL || !unchanged(path, o))
		return NULL;
	return o;
}

/*
 * cs_verify_record_reading(record, path) -> the object's entry, or NULL
 *	  The entry of the replica's object at path, which the caller reads now
 *	  (read_now set): what was recorded is kept if the listing shows the
 *	  object unchanged, else forgotten, the entry then taking the listed
 *	  size and ETag.  The caller sets what it finds and calls
 *	  cs_verify_record_found().  NULL when the object cannot be recorded
 *	  (not listed, no ETag, a name too long).
 */
CsVerifiedObject *
cs_verify_record_reading(CsVerifyRecord *record, const char *path)
{
	const char *name = name_of(record, path);
	CsVerifiedObject *o;
	int64		size;
	const char *etag;
	bool		found;

	if (name == NULL || !cs_storage_s3_listed(path, &size, &etag) ||
		etag == NULL || strlen(etag) >= CS_VERIFY_ETAG_MAX)
		return NULL;
	o = hash_search(record->objects, name, HASH_ENTER, &found);
	if (!found || !unchanged(path, o))
	{
		memset(o, 0, sizeof(*o));
		strlcpy(o->name, name, MAXPGPATH);
		o->size = size;
		strlcpy(o->etag, etag, CS_VERIFY_ETAG_MAX);
		o->kind = CS_VERIFIED_NONE;
	}
	o->read_now = true;
	return o;
}

/*
 * cs_verify_record_found(object)
 *	  The caller has set what it found of object (has_crc and crc, kind and
 *	  header): stamp it with the time.
 */
void
cs_verify_record_found(CsVerifiedObject *object)
{
	object->verified_at = GetCurrentTimestamp();
}

/*
 * cs_verify_record_counts(record, read, skipped)
 *	  The objects this call downloaded (*read), and those it took from the
 *	  record without downloading them (*skipped).
 */
void
cs_verify_record_counts(CsVerifyRecord *record, int64 *read, int64 *skipped)
{
	HASH_SEQ_STATUS seq;
	CsVerifiedObject *o;

	*read = 0;
	*skipped = 0;
	hash_seq_init(&seq, record->objects);
	while ((o = hash_seq_search(&seq)) != NULL)
	{
		if (o->read_now)
			(*read)++;
		else if (o->skipped_now)
			(*skipped)++;
	}
}

static int
cmp_objects(const void *a, const void *b)
{
	return strcmp((*(CsVerifiedObject *const *) a)->name,
				  (*(CsVerifiedObject *const *) b)->name);
}

/* One entry's line. */
static void
append_line(StringInfo out, const CsVerifiedObject *o)
{
	const CsSegmentHeader *h = &o->header;

	appendStringInfo(out, "%c %lld %s ", (char) o->kind, (long long) o->size,
					 o->etag);
	if (o->has_crc)
		appendStringInfo(out, "%08x ", o->crc);
	else
		appendStringInfoString(out, "- ");
	appendStringInfo(out, "%lld ", (long long) o->verified_at);
	if (o->kind == CS_VERIFIED_SEGMENT)
		appendStringInfo(out, "%u %u %llu %llu %llu %llu %u %llu %llu %lld %lld %llu %llu ",
						 h->format_version, h->header_size,
						 (unsigned long long) h->system_identifier,
						 (unsigned long long) h->generation,
						 (unsigned long long) h->segment_index,
						 (unsigned long long) h->start_lsn, h->timeline,
						 (unsigned long long) h->seal.end_lsn,
						 (unsigned long long) h->seal.first_commit_lsn,
						 (long long) h->seal.min_commit_time,
						 (long long) h->seal.max_commit_time,
						 (unsigned long long) h->seal.last_commit_lsn,
						 (unsigned long long) h->seal.transactions);
	appendStringInfo(out, "%s\n", o->name);
}

/* The file's content: the entries the listing still shows unchanged. */
static void
record_text(CsVerifyRecord *record, StringInfo out)
{
	HASH_SEQ_STATUS seq;
	CsVerifiedObject *o;
	CsVerifiedObject **keep;
	int			n = 0;
	pg_crc32c	crc;

	keep = palloc(sizeof(CsVerifiedObject *) *
				  Max(hash_get_num_entries(record->objects), 1));
	hash_seq_init(&seq, record->objects);
	while ((o = hash_seq_search(&seq)) != NULL)
	{
		char	   *path = psprintf("%s/%s", record->root, o->name);

		if ((o->has_crc || o->kind != CS_VERIFIED_NONE) &&
			o->verified_at != 0 && unchanged(path, o))
			keep[n++] = o;
		pfree(path);
	}
	qsort(keep, n, sizeof(CsVerifiedObject *), cmp_objects);
	appendStringInfo(out, RECORD_MAGIC "%s\n", record->store);
	for (int i = 0; i < n; i++)
		append_line(out, keep[i]);
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, out->data, out->len);
	FIN_CRC32C(crc);
	appendStringInfo(out, "end %d %08x\n", n, crc);
	pfree(keep);
}

/* What write_record() writes, for cs_catch_error(). */
typedef struct WriteArgs
{
	CsVerifyRecord *record;
	StringInfo	text;
} WriteArgs;

/* Replace the record's file, durably, with the text. */
static void
write_record(void *arg)
{
	WriteArgs  *args = arg;

	cs_write_file_durably(args->record->path, args->record->dir,
						  args->text->data, args->text->len);
}

/*
 * cs_verify_record_save(record)
 *	  Replace the file, durably, with what is recorded now of the objects
 *	  the statement's listing still shows unchanged (objects removed or
 *	  replaced since are left out).  A failure to write is a WARNING, not
 *	  an error: verify()'s verdict stands, and the next run reads more.
 *	  Errors: only a cancel or shutdown met while writing.
 */
void
cs_verify_record_save(CsVerifyRecord *record)
{
	StringInfoData text;
	WriteArgs	args;
	ErrorData  *edata;

	if (strpbrk(record->store, "\n\r") != NULL)
		return;
	initStringInfo(&text);
	record_text(record, &text);
	args.record = record;
	args.text = &text;
	edata = cs_catch_error(write_record, &args, CurrentMemoryContext);
	if (edata != NULL)
	{
		if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED ||
			edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN)
			ReThrowError(edata);
		ereport(WARNING,
				(errcode(edata->sqlerrcode),
				 errmsg("could not write changestream verify record \"%s\": %s",
						record->path, edata->message),
				 errdetail("The next verify() reads again the objects this one found sound.")));
		FreeErrorData(edata);
	}
	pfree(text.data);
}
