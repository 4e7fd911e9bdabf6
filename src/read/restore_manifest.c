/*-------------------------------------------------------------------------
 *
 * restore_manifest.c
 *	  Reads the tables of a snapshot's manifest JSON (docs/FORMAT.md
 *	  section 3.2) for restore(): each table's schema, name, OID, replica
 *	  identity and columns, and from snapshot format 2 on its replica
 *	  identity key columns and the sequences its columns own, with their
 *	  values at the snapshot.  The file is untrusted: every member is
 *	  checked for its JSON type, strings for their length, numbers for
 *	  their range, key columns for being columns of the table, a sequence's
 *	  value for agreeing with its is_called; anything else is XX001 naming
 *	  the file and the offset of the manifest line, the table and the
 *	  member in the detail.  Members added by later formats are ignored.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>

#include "access/htup_details.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "archive/storage.h"
#include "read/restore_key.h"
#include "read/restore_manifest.h"

/* The longest quoted, schema-qualified sequence name a source can write. */
#define MAX_QUALIFIED_NAME	(2 * (2 * (NAMEDATALEN - 1) + 2) + 1)

/* Where damage is reported: the file and the manifest line's offset. */
typedef struct ManifestPlace
{
	const char *path;
	int64		offset;
	int			table;			/* 1-based, 0 before the tables */
} ManifestPlace;

#define manifest_damage(place, ...) \
	cs_file_damage((place)->path, (place)->offset, __VA_ARGS__)

static JsonbValue *
member(JsonbContainer *obj, const char *key)
{
	JsonbValue	k;

	k.type = jbvString;
	k.val.string.val = unconstify(char *, key);
	k.val.string.len = strlen(key);
	return findJsonbValueFromContainer(obj, JB_FOBJECT, &k);
}

/* A member that is an object or an array (a container), or NULL. */
static JsonbContainer *
container(JsonbContainer *obj, const char *key, bool array)
{
	JsonbValue *v = member(obj, key);

	if (v == NULL || v->type != jbvBinary ||
		(array ? !JsonContainerIsArray(v->val.binary.data) :
		 !JsonContainerIsObject(v->val.binary.data)))
		return NULL;
	return v->val.binary.data;
}

/* A string value of at most maxlen bytes, without NUL, or NULL. */
static char *
string_value(JsonbValue *v, int maxlen)
{
	if (v == NULL || v->type != jbvString || v->val.string.len > maxlen ||
		memchr(v->val.string.val, '\0', v->val.string.len) != NULL)
		return NULL;
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* A number that is an integer in int64's range, into *out. */
static bool
int64_value(JsonbValue *v, int64 *out)
{
	char	   *text;
	char	   *end;

	if (v == NULL || v->type != jbvNumeric)
		return false;
	text = DatumGetCString(DirectFunctionCall1(numeric_out,
											   NumericGetDatum(v->val.numeric)));
	errno = 0;
	*out = strtoi64(text, &end, 10);
	return errno == 0 && end != text && *end == '\0';
}

static JsonbValue *
element(JsonbContainer *arr, int i)
{
	return getIthJsonbValueFromContainer(arr, i);
}

/* The columns member: a List per column of (name, type). */
static List *
read_columns(const ManifestPlace *place, CsManifestTable *mt, JsonbContainer *cols)
{
	List	   *pairs = NIL;

	for (int j = 0; j < JsonContainerSize(cols); j++)
	{
		JsonbValue *cv = element(cols, j);
		char	   *cname = NULL;
		char	   *ctype = NULL;

		if (cv != NULL && cv->type == jbvBinary &&
			JsonContainerIsObject(cv->val.binary.data))
		{
			cname = string_value(member(cv->val.binary.data, "name"), NAMEDATALEN - 1);
			ctype = string_value(member(cv->val.binary.data, "type"), 1024);
		}
		if (cname == NULL || ctype == NULL)
			manifest_damage(place,
							"Column %d of table %d (\"%s.%s\") of the manifest lacks a name or type.",
							j + 1, place->table, mt->schema, mt->name);
		pairs = lappend(pairs, list_make2(cname, ctype));
	}
	return pairs;
}

static bool
is_column(const CsManifestTable *mt, const char *name)
{
	ListCell   *lc;

	foreach(lc, mt->columns)
		if (strcmp(linitial(lfirst(lc)), name) == 0)
			return true;
	return false;
}

/* The key member: names of columns of the table, at most INDEX_MAX_KEYS. */
static void
read_key(const ManifestPlace *place, CsManifestTable *mt, JsonbContainer *key)
{
	int			n = JsonContainerSize(key);

	if (n > INDEX_MAX_KEYS)
		manifest_damage(place,
						"The key of table %d (\"%s.%s\") of the manifest has %d columns; an index has at most %d.",
						place->table, mt->schema, mt->name, n, INDEX_MAX_KEYS);
	for (int j = 0; j < n; j++)
	{
		char	   *name = string_value(element(key, j), NAMEDATALEN - 1);

		if (name == NULL || !is_column(mt, name) || cs_name_index(mt->key, name) >= 0)
			manifest_damage(place,
							"Key column %d of table %d (\"%s.%s\") of the manifest is not a column of the table, or is named twice.",
							j + 1, place->table, mt->schema, mt->name);
		mt->key = lappend(mt->key, name);
	}
	mt->has_key = true;
}

/* One member of sequences: column, sequence, last_value, is_called. */
static CsArchivedSequence *
read_sequence(const ManifestPlace *place, CsManifestTable *mt, JsonbValue *sv,
			  int j)
{
	CsArchivedSequence *s = palloc0(sizeof(CsArchivedSequence));
	JsonbContainer *obj;
	JsonbValue *called;
	JsonbValue *last;
	bool		valid;

	if (sv == NULL || sv->type != jbvBinary || !JsonContainerIsObject(sv->val.binary.data))
		manifest_damage(place,
						"Sequence %d of table %d (\"%s.%s\") of the manifest is not an object.",
						j + 1, place->table, mt->schema, mt->name);
	obj = sv->val.binary.data;
	s->column = string_value(member(obj, "column"), NAMEDATALEN - 1);
	s->sequence = string_value(member(obj, "sequence"), MAX_QUALIFIED_NAME);
	called = member(obj, "is_called");
	last = member(obj, "last_value");
	valid = s->column != NULL && s->sequence != NULL &&
		called != NULL && last != NULL;
	if (valid && called->type == jbvBool)
	{
		s->known = true;
		s->is_called = called->val.boolean;
		if (s->is_called)
			valid = int64_value(last, &s->last_value);
		else
			valid = (last->type == jbvNull);
	}
	else if (valid)
		valid = (called->type == jbvNull && last->type == jbvNull);
	if (!valid)
		manifest_damage(place,
						"Sequence %d of table %d (\"%s.%s\") of the manifest lacks a column or sequence name, or its last_value (an integer when is_called is true, else null) does not agree with is_called (true, false or null).",
						j + 1, place->table, mt->schema, mt->name);
	return s;
}

/* Format 2's members of a table: replica_identity, key and sequences. */
static void
read_format2(const ManifestPlace *place, CsManifestTable *mt, JsonbContainer *tv)
{
	JsonbContainer *key = container(tv, "key", true);
	JsonbContainer *seqs = container(tv, "sequences", true);

	if (mt->identity == '\0' || key == NULL || seqs == NULL)
		manifest_damage(place,
						"Table %d (\"%s.%s\") of the manifest lacks replica_identity, key or sequences.",
						place->table, mt->schema, mt->name);
	read_key(place, mt, key);
	if (JsonContainerSize(seqs) > MaxHeapAttributeNumber)
		manifest_damage(place,
						"Table %d (\"%s.%s\") of the manifest lists %d sequences, more than a table has columns.",
						place->table, mt->schema, mt->name, JsonContainerSize(seqs));
	for (int j = 0; j < JsonContainerSize(seqs); j++)
		mt->sequences = lappend(mt->sequences,
								read_sequence(place, mt, element(seqs, j), j));
}

static CsManifestTable *
read_table(const ManifestPlace *place, JsonbValue *tv, int version)
{
	CsManifestTable *mt = palloc0(sizeof(CsManifestTable));
	JsonbContainer *obj;
	JsonbContainer *cols;
	JsonbValue *ident;
	int64		oid;

	if (tv == NULL || tv->type != jbvBinary || !JsonContainerIsObject(tv->val.binary.data))
		manifest_damage(place, "Table %d of the manifest is not an object.", place->table);
	obj = tv->val.binary.data;
	mt->schema = string_value(member(obj, "schema"), NAMEDATALEN - 1);
	mt->name = string_value(member(obj, "name"), NAMEDATALEN - 1);
	cols = container(obj, "columns", true);
	if (mt->schema == NULL || mt->name == NULL || cols == NULL ||
		!int64_value(member(obj, "oid"), &oid) || oid <= 0 || oid > PG_UINT32_MAX)
		manifest_damage(place,
						"Table %d of the manifest lacks schema, name, oid or columns.",
						place->table);
	mt->oid = (Oid) oid;
	ident = member(obj, "replica_identity");
	if (ident != NULL)
	{
		if (ident->type != jbvString || ident->val.string.len != 1 ||
			strchr("dnfi", ident->val.string.val[0]) == NULL)
			manifest_damage(place,
							"The replica_identity of table %d (\"%s.%s\") of the manifest is not d, n, f or i.",
							place->table, mt->schema, mt->name);
		mt->identity = ident->val.string.val[0];
	}
	mt->columns = read_columns(place, mt, cols);
	if (version >= 2)
		read_format2(place, mt, obj);
	return mt;
}

/*
 * cs_manifest_tables
 *	  The tables of the manifest of the snapshot reader has open (path, for
 *	  messages), as CsManifestTable *, in the manifest's order (the order
 *	  of the file's table sections).
 *	  Errors: XX001 naming the file and the manifest line's offset for
 *	  anything the format does not allow (see the file header); 0A000 for
 *	  a format newer than this changestream's (cs_snapreader_open()).
 */
List *
cs_manifest_tables(CsSnapshotReader *reader, const char *path)
{
	Jsonb	   *jb = cs_snapreader_manifest_json(reader);
	ManifestPlace place;
	JsonbContainer *arr;
	List	   *tables = NIL;

	place.path = path;
	place.offset = cs_snapreader_manifest_offset(reader);
	place.table = 0;
	arr = container(&jb->root, "tables", true);
	if (arr == NULL)
		manifest_damage(&place, "The manifest has no tables array.");
	for (int i = 0; i < JsonContainerSize(arr); i++)
	{
		place.table = i + 1;
		tables = lappend(tables, read_table(&place, element(arr, i),
											cs_snapreader_format_version(reader)));
	}
	return tables;
}
