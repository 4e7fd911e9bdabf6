/*-------------------------------------------------------------------------
 *
 * definition_read.c
 *	  Reads a published table's definition as the archive records it:
 *	  the "definition" member of a snapshot manifest's table, and the
 *	  definition column of a changestream.ddl_history record (the table as
 *	  it was at the end of the command), both the JSON object of
 *	  docs/FORMAT.md section 3.2: columns (name, type, NOT NULL, default,
 *	  generated expression, identity, serial sequence), PRIMARY KEY,
 *	  UNIQUE, CHECK and EXCLUDE constraints, the indexes that back no
 *	  constraint, and the replica identity.  The JSON is untrusted: a
 *	  member of the wrong type, a name longer than a name can be, a kind
 *	  that is not one of the catalog's letters, or two columns, constraints
 *	  or indexes of one name make the definition unreadable (NULL, with the
 *	  reason in *why); the caller reports the damage with its file and
 *	  offset.  The texts (types, expressions, constraint and index
 *	  definitions) are kept as read: restore_definition.c never runs them
 *	  as they stand.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "archive/archive_layout.h"
#include "read/definition_read.h"
#include "read/json_member.h"

/* The longest expression or definition text taken (1 MB). */
#define MAX_DEFINITION_TEXT (1024 * 1024)
#define MAX_TYPE_TEXT		1024

/* A member that is a string of at most maxlen bytes, or JSON null. */
static bool
nullable_string(JsonbContainer *obj, const char *key, int maxlen, char **out)
{
	JsonbValue *v = cs_json_member(obj, key);

	*out = NULL;
	if (v != NULL && v->type == jbvNull)
		return true;
	*out = cs_json_string(v, maxlen);
	return *out != NULL;
}

/* A member that is a string of one of the letters allowed, or "". */
static bool
kind_letter(JsonbContainer *obj, const char *key, const char *allowed,
			bool empty_ok, char *out)
{
	char	   *s = cs_json_string(cs_json_member(obj, key), 1);

	*out = '\0';
	if (s == NULL)
		return false;
	if (s[0] == '\0')
		return empty_ok;
	*out = s[0];
	return strchr(allowed, s[0]) != NULL;
}

/* As nullable_string(), the member absent allowed too (NULL). */
static bool
optional_string(JsonbContainer *obj, const char *key, int maxlen, char **out)
{
	*out = NULL;
	return cs_json_member(obj, key) == NULL ||
		nullable_string(obj, key, maxlen, out);
}

static bool
bool_member(JsonbContainer *obj, const char *key, bool *out)
{
	JsonbValue *v = cs_json_member(obj, key);

	if (v == NULL || v->type != jbvBool)
		return false;
	*out = v->val.boolean;
	return true;
}

/*
 * The optional member "attnum": absent is 0 (a definition written before
 * it was recorded), else an integer from 1 to MaxHeapAttributeNumber.
 */
static bool
attnum_member(JsonbContainer *obj, int *out)
{
	JsonbValue *v = cs_json_member(obj, "attnum");
	int64		n;

	*out = 0;
	if (v == NULL)
		return true;
	if (!cs_json_int64(v, &n) || n < 1 || n > MaxHeapAttributeNumber)
		return false;
	*out = (int) n;
	return true;
}

static void *
read_column(JsonbContainer *obj)
{
	CsDefColumn *c = palloc0(sizeof(CsDefColumn));

	if (obj == NULL ||
		(c->name = cs_json_string(cs_json_member(obj, "name"), NAMEDATALEN - 1)) == NULL ||
		!attnum_member(obj, &c->attnum) ||
		(c->type = cs_json_string(cs_json_member(obj, "type"), MAX_TYPE_TEXT)) == NULL ||
		!optional_string(obj, "collation", MAX_TYPE_TEXT, &c->collation) ||
		!bool_member(obj, "not_null", &c->not_null) ||
		!nullable_string(obj, "default", MAX_DEFINITION_TEXT, &c->default_expr) ||
		!nullable_string(obj, "generated", MAX_DEFINITION_TEXT, &c->generated) ||
		!kind_letter(obj, "generated_kind", "sv", true, &c->generated_kind) ||
		!kind_letter(obj, "identity", "ad", true, &c->identity) ||
		!nullable_string(obj, "serial_sequence", NAMEDATALEN - 1, &c->serial_sequence) ||
		(c->generated != NULL) != (c->generated_kind != '\0'))
		return NULL;
	return c;
}

static void *
read_constraint(JsonbContainer *obj)
{
	CsDefConstraint *k = palloc0(sizeof(CsDefConstraint));

	if (obj == NULL ||
		(k->name = cs_json_string(cs_json_member(obj, "name"), NAMEDATALEN - 1)) == NULL ||
		!kind_letter(obj, "type", "pucx", false, &k->type) ||
		!nullable_string(obj, "definition", MAX_DEFINITION_TEXT, &k->definition))
		return NULL;
	return k;
}

static void *
read_index(JsonbContainer *obj)
{
	CsDefIndex *x = palloc0(sizeof(CsDefIndex));

	if (obj == NULL ||
		(x->name = cs_json_string(cs_json_member(obj, "name"), NAMEDATALEN - 1)) == NULL ||
		!bool_member(obj, "unique", &x->unique) ||
		!nullable_string(obj, "using", MAX_DEFINITION_TEXT, &x->using_clause))
		return NULL;
	return x;
}

/* Is name the name of an earlier element of list (each starting with it)? */
static bool
name_taken(List *list, const char *name)
{
	ListCell   *lc;

	foreach(lc, list)
		if (strcmp(*(char **) lfirst(lc), name) == 0)
			return true;
	return false;
}

/*
 * The array member key of obj, each element read by reader; NIL with
 * *ok false when the member is not an array, an element is unreadable or
 * a name repeats.
 */
static List *
read_list(JsonbContainer *obj, const char *key, void *(*reader) (JsonbContainer *),
		  bool *ok)
{
	JsonbContainer *arr = cs_json_container(obj, key, true);
	List	   *list = NIL;

	*ok = arr != NULL && JsonContainerSize(arr) <= MaxHeapAttributeNumber * 4;
	for (int i = 0; *ok && i < JsonContainerSize(arr); i++)
	{
		void	   *elem = reader(cs_json_object_value(cs_json_element(arr, i)));

		*ok = elem != NULL && !name_taken(list, *(char **) elem);
		list = lappend(list, elem);
	}
	return *ok ? list : NIL;
}

/*
 * Set def->attnums when every column has an attnum, the attnums
 * increasing in column order (the query's order); false when some have
 * one and others none, or they do not increase.
 */
static bool
read_attnums(CsTableDefinition *def)
{
	int			with = 0;
	int			last = 0;
	ListCell   *lc;

	foreach(lc, def->columns)
	{
		CsDefColumn *c = lfirst(lc);

		if (c->attnum == 0)
			continue;
		if (c->attnum <= last)
			return false;
		last = c->attnum;
		with++;
	}
	def->attnums = with > 0;
	return with == 0 || with == list_length(def->columns);
}

/*
 * cs_definition_from_jsonb
 *	  The definition object obj (docs/FORMAT.md section 3.2) as a
 *	  CsTableDefinition, or NULL with the reason in *why when a member is
 *	  missing, of the wrong type or out of range, or a name repeats.
 */
CsTableDefinition *
cs_definition_from_jsonb(JsonbContainer *obj, char **why)
{
	CsTableDefinition *def = palloc0(sizeof(CsTableDefinition));
	bool		ok;

	def->columns = read_list(obj, "columns", read_column, &ok);
	if (!ok || def->columns == NIL)
	{
		*why = pstrdup("its columns are missing, or a column lacks a name, a type, not_null, default, generated, generated_kind, identity or serial_sequence of the right JSON type, or has a collation that is not a string or null or an attnum that is not an integer from 1 to 1600, or two columns have one name");
		return NULL;
	}
	if (!read_attnums(def))
	{
		*why = pstrdup("some of its columns have an attnum and others have none, or the attnums do not increase in column order");
		return NULL;
	}
	def->constraints = read_list(obj, "constraints", read_constraint, &ok);
	if (!ok)
	{
		*why = pstrdup("its constraints are missing, or a constraint lacks a name, a type (p, u, c or x) or a definition (text or null), or two constraints have one name");
		return NULL;
	}
	def->indexes = read_list(obj, "indexes", read_index, &ok);
	if (!ok)
	{
		*why = pstrdup("its indexes are missing, or an index lacks a name, unique or using, or two indexes have one name");
		return NULL;
	}
	if (!kind_letter(obj, "replica_identity", "dnfi", false, &def->replica_identity) ||
		!nullable_string(obj, "replica_identity_index", NAMEDATALEN - 1,
						 &def->replica_identity_index))
	{
		*why = pstrdup("its replica_identity is not d, n, f or i, or its replica_identity_index is not a name or null");
		return NULL;
	}
	return def;
}

/* cs_definition_from_text()'s step run under cs_catch_error(). */
typedef struct TextParse
{
	const char *json;
	Jsonb	   *jb;
} TextParse;

static void
parse_jsonb(void *arg)
{
	TextParse  *p = arg;

	p->jb = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(p->json)));
}

/*
 * cs_definition_from_text
 *	  The definition in JSON text json (a schema history record's
 *	  definition column), or NULL with the reason in *why when the text is
 *	  not a JSON object or the object is not a definition
 *	  (cs_definition_from_jsonb()).  The JSON parser's error is caught
 *	  (in a subtransaction) and given as the reason.
 */
CsTableDefinition *
cs_definition_from_text(const char *json, char **why)
{
	TextParse	p = {json, NULL};
	ErrorData  *error = cs_catch_error(parse_jsonb, &p, CurrentMemoryContext);

	if (error != NULL)
	{
		if (error->sqlerrcode == ERRCODE_QUERY_CANCELED)
			ReThrowError(error);
		*why = psprintf("it is not JSON: %s", error->message);
		return NULL;
	}
	if (!JB_ROOT_IS_OBJECT(p.jb))
	{
		*why = pstrdup("it is not a JSON object");
		return NULL;
	}
	return cs_definition_from_jsonb(&p.jb->root, why);
}

/*
 * cs_definition_without_index
 *	  A copy of def without its index of name index (DROP INDEX), or def
 *	  itself when it has no index of that name.
 */
CsTableDefinition *
cs_definition_without_index(const CsTableDefinition *def, const char *index)
{
	CsTableDefinition *copy;
	ListCell   *lc;

	if (!name_taken(def->indexes, index))
		return unconstify(CsTableDefinition *, def);
	copy = palloc(sizeof(CsTableDefinition));
	*copy = *def;
	copy->indexes = NIL;
	foreach(lc, def->indexes)
		if (strcmp(((CsDefIndex *) lfirst(lc))->name, index) != 0)
			copy->indexes = lappend(copy->indexes, lfirst(lc));
	return copy;
}

/*
 * cs_definition_column
 *	  The column of def named name, or NULL.
 */
CsDefColumn *
cs_definition_column(const CsTableDefinition *def, const char *name)
{
	ListCell   *lc;

	foreach(lc, def->columns)
		if (strcmp(((CsDefColumn *) lfirst(lc))->name, name) == 0)
			return lfirst(lc);
	return NULL;
}
