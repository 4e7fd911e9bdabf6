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
 *	  value for agreeing with its is_called, a table's definition (written
 *	  since changestream 0.2's definition capture) by definition_read.c;
 *	  anything else is XX001 naming
 *	  the file and the offset of the manifest line, the table and the
 *	  member in the detail.  Members added by later formats are ignored.
 *	  A column's type is text that restore() puts into CREATE TABLE: it is
 *	  resolved to a type of this database first (cs_manifest_column_types())
 *	  and written back from the type's OID and modifier, never as read.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "archive/storage.h"
#include "read/json_member.h"
#include "read/restore_key.h"
#include "read/restore_manifest.h"
#include "base/compat.h"

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

/* The columns member: a List per column of (name, type). */
static List *
read_columns(const ManifestPlace *place, CsManifestTable *mt, JsonbContainer *cols)
{
	List	   *pairs = NIL;

	for (int j = 0; j < JsonContainerSize(cols); j++)
	{
		JsonbValue *cv = cs_json_element(cols, j);
		char	   *cname = NULL;
		char	   *ctype = NULL;

		if (cv != NULL && cv->type == jbvBinary &&
			JsonContainerIsObject(cv->val.binary.data))
		{
			cname = cs_json_string(cs_json_member(cv->val.binary.data, "name"), NAMEDATALEN - 1);
			ctype = cs_json_string(cs_json_member(cv->val.binary.data, "type"), 1024);
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
		char	   *name = cs_json_string(cs_json_element(key, j), NAMEDATALEN - 1);

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
	s->column = cs_json_string(cs_json_member(obj, "column"), NAMEDATALEN - 1);
	s->sequence = cs_json_string(cs_json_member(obj, "sequence"), MAX_QUALIFIED_NAME);
	called = cs_json_member(obj, "is_called");
	last = cs_json_member(obj, "last_value");
	valid = s->column != NULL && s->sequence != NULL &&
		called != NULL && last != NULL;
	if (valid && called->type == jbvBool)
	{
		s->known = true;
		s->is_called = called->val.boolean;
		if (s->is_called)
			valid = cs_json_int64(last, &s->last_value);
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
	JsonbContainer *key = cs_json_container(tv, "key", true);
	JsonbContainer *seqs = cs_json_container(tv, "sequences", true);

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
								read_sequence(place, mt, cs_json_element(seqs, j), j));
}

/* The optional definition member (absent before it was written). */
static void
read_definition(const ManifestPlace *place, CsManifestTable *mt,
				JsonbContainer *tv)
{
	JsonbValue *dv = cs_json_member(tv, "definition");
	JsonbContainer *obj = cs_json_object_value(dv);
	char	   *why = "it is not a JSON object";

	if (dv == NULL || dv->type == jbvNull)
		return;
	if (obj == NULL || (mt->definition = cs_definition_from_jsonb(obj, &why)) == NULL)
		manifest_damage(place,
						"The definition of table %d (\"%s.%s\") of the manifest cannot be read: %s.",
						place->table, mt->schema, mt->name, why);
	mt->definition->origin = psprintf("file \"%s\", the manifest line at offset %lld",
									  place->path, (long long) place->offset);
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
	mt->schema = cs_json_string(cs_json_member(obj, "schema"), NAMEDATALEN - 1);
	mt->name = cs_json_string(cs_json_member(obj, "name"), NAMEDATALEN - 1);
	cols = cs_json_container(obj, "columns", true);
	if (mt->schema == NULL || mt->name == NULL || cols == NULL ||
		!cs_json_int64(cs_json_member(obj, "oid"), &oid) || oid <= 0 || oid > PG_UINT32_MAX)
		manifest_damage(place,
						"Table %d of the manifest lacks schema, name, oid or columns.",
						place->table);
	mt->oid = (Oid) oid;
	mt->path = place->path;
	mt->offset = place->offset;
	mt->position = place->table;
	ident = cs_json_member(obj, "replica_identity");
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
	read_definition(place, mt, obj);
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
	arr = cs_json_container(&jb->root, "tables", true);
	if (arr == NULL)
		manifest_damage(&place, "The manifest has no tables array.");
	for (int i = 0; i < JsonContainerSize(arr); i++)
	{
		place.table = i + 1;
		tables = lappend(tables, read_table(&place, cs_json_element(arr, i),
											cs_snapreader_format_version(reader)));
	}
	return tables;
}

/*
 * cs_type_sql
 *	  The type text names, as the SQL of a column definition: resolved by
 *	  the parser (cs_parse_type_string()) in a subtransaction, so that text
 *	  that is not a type name is caught and not raised as the parser's
 *	  error, and written back by format_type_extended() from the OID and
 *	  modifier, schema qualified.  NULL, with the parser's message in *why,
 *	  when text names no type of this database.  Errors other than syntax
 *	  errors, undefined objects and invalid modifiers (classes 42 and 22)
 *	  are raised.
 */
char *
cs_type_sql(const char *text, char **why)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	Oid			typid = InvalidOid;
	int32		typmod = -1;
	volatile bool found = false;
	ErrorData  *volatile edata = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		found = cs_parse_type_string(text, &typid, &typmod);
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

		if (category != ERRCODE_SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION &&
			category != ERRCODE_DATA_EXCEPTION)
			ReThrowError(edata);
		*why = pstrdup(edata->message);
		return NULL;
	}
	if (!found)
	{
		*why = pstrdup("no such type exists in this database");
		return NULL;
	}
	return format_type_extended(typid, typmod,
								FORMAT_TYPE_TYPEMOD_GIVEN | FORMAT_TYPE_FORCE_QUALIFY);
}

/*
 * cs_manifest_column_types
 *	  The columns of manifest table mt as restore() creates them: per
 *	  column a List of (name, type), the type as the SQL of a column
 *	  definition, resolved from the manifest's text to a type of this
 *	  database and written back from its OID and modifier (type_sql()), so
 *	  that no text of the file reaches SQL as it stands.
 *	  Errors: XX001 naming the snapshot file and the manifest line's offset,
 *	  the table and the column, when a column's type is not the name of a
 *	  type that exists in this database (the manifest is damaged, or the
 *	  type must be created first: the hint says so).
 */
List *
cs_manifest_column_types(const CsManifestTable *mt)
{
	List	   *pairs = NIL;
	ListCell   *lc;

	foreach(lc, mt->columns)
	{
		List	   *pair = lfirst(lc);
		char	   *why = NULL;
		char	   *sql = cs_type_sql(lsecond(pair), &why);

		if (sql == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("changestream file \"%s\" is damaged at offset %lld",
							mt->path, (long long) mt->offset),
					 errdetail("The type of column %d (%s) of table %d (%s) of the manifest, %s, is not the name of a type of this database: %s.",
							   foreach_current_index(lc) + 1,
							   quote_identifier(linitial(pair)), mt->position,
							   quote_qualified_identifier(mt->schema, mt->name),
							   quote_literal_cstr(lsecond(pair)), why),
					 errhint("If the type exists on the archived server only, create it in this database first; else the archive is damaged: call changestream.verify().")));
		pairs = lappend(pairs, list_make2(linitial(pair), sql));
	}
	return pairs;
}
