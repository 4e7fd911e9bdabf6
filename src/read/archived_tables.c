/*-------------------------------------------------------------------------
 *
 * archived_tables.c
 *	  The tables a generation of the archive holds, by every name it
 *	  holds them under: the tables of its snapshots' manifests
 *	  (restore_manifest.c), the Relation messages and changes of its
 *	  segments (through the decoder, decoder.c), and the names the schema
 *	  history records (ddl_record.c, docs/DESIGN.md section 12).
 *
 *	  The archive keeps no index of its tables: a segment carries the
 *	  Relation messages of the relations it uses, and a table's later names
 *	  are only in the history.  So the catalog is built by reading the
 *	  manifests first and then the generation's segments in order; with
 *	  names to look for it stops as soon as every name has matched, so a
 *	  check of names found in a snapshot opens no segment.  Memory is per
 *	  name found (the decoder's per-message context is reset for each
 *	  message), not per change.
 *
 *	  changestream.tables() returns the catalog; cs_check_table_names()
 *	  refuses a name of restore()'s tables or changes()' relations that
 *	  matches no name of the whole generation (not only up to a target: a
 *	  list may name a table created after it), listing close names.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/pg_lsn.h"
#include "utils/tuplestore.h"
#include "utils/varlena.h"

#include "archive/archive_dir.h"
#include "archive/reader_pins.h"
#include "archive/retention_horizon.h"
#include "archive/snapshot_reader.h"
#include "read/archived_tables.h"
#include "read/ddl_record.h"
#include "read/decoder.h"
#include "read/restore_filter.h"
#include "read/restore_manifest.h"
#include "base/compat.h"

PG_FUNCTION_INFO_V1(changestream_tables);

#define TABLES_COLS		8
#define CLOSE_NAMES_MAX 5

/* One name of a table, with the Relation its columns come from. */
typedef struct Variant
{
	CsArchivedTable t;			/* first: a Variant * is a CsArchivedTable * */
	const LogicalRepRelation *rel;	/* the last one seen; the decoder's */
} Variant;

/* The names seen for one OID. */
typedef struct OidEntry
{
	Oid			oid;
	List	   *variants;		/* Variant * */
	const LogicalRepRelation *last_rel; /* the Relation of last_variant */
	Variant    *last_variant;
	bool		data;			/* in a manifest or a Relation message */
} OidEntry;

typedef struct Catalog
{
	HTAB	   *oids;
	List	   *all;			/* Variant *, in the order found */
	List	   *ddl_trusted;	/* OIDs of the schema history table */
	List	   *names;			/* the names looked for, or NIL */
	bool	   *matched;		/* per name */
	int			unmatched;
} Catalog;

/* Does the name given to restore() or changes() match table t? */
static bool
name_matches(const char *given, const CsArchivedTable *t)
{
	CsTableFilter filter;

	filter.names = list_make1(unconstify(char *, given));
	return cs_filter_wants(&filter, t->schema, t->name);
}

static void
sight(CsArchivedTable *t, XLogRecPtr lsn)
{
	if (XLogRecPtrIsInvalid(t->first_lsn) || lsn < t->first_lsn)
		t->first_lsn = lsn;
	if (lsn > t->last_lsn)
		t->last_lsn = lsn;
}

/* The names looked for that v matches are found. */
static void
match_names(Catalog *cat, Variant *v)
{
	for (int i = 0; i < list_length(cat->names); i++)
		if (!cat->matched[i] && name_matches(list_nth(cat->names, i), &v->t))
		{
			cat->matched[i] = true;
			cat->unmatched--;
		}
}

/*
 * The name schema.name of OID oid, found or added to the catalog.  data:
 * a manifest or a Relation message names it (a schema history record
 * alone names any table, published or not: its names count once the
 * archive holds the table's data).
 */
static Variant *
variant(Catalog *cat, Oid oid, const char *schema, const char *name,
		bool data)
{
	OidEntry   *e;
	bool		found;
	ListCell   *lc;
	Variant    *v = NULL;

	e = hash_search(cat->oids, &oid, HASH_ENTER, &found);
	if (!found)
	{
		e->variants = NIL;
		e->last_rel = NULL;
		e->last_variant = NULL;
		e->data = false;
	}
	foreach(lc, e->variants)
	{
		Variant    *o = lfirst(lc);

		if (strcmp(o->t.schema, schema) == 0 && strcmp(o->t.name, name) == 0)
			v = o;
	}
	if (v == NULL)
	{
		v = palloc0(sizeof(Variant));
		v->t.oid = oid;
		v->t.schema = pstrdup(schema);
		v->t.name = pstrdup(name);
		e->variants = lappend(e->variants, v);
		if (e->data)
		{
			cat->all = lappend(cat->all, v);
			match_names(cat, v);
		}
	}
	if (data && !e->data)
	{
		e->data = true;
		foreach(lc, e->variants)
		{
			cat->all = lappend(cat->all, lfirst(lc));
			match_names(cat, lfirst(lc));
		}
	}
	return v;
}

/* The name a change's Relation rel gives its table (cached per OID). */
static Variant *
rel_variant(Catalog *cat, const LogicalRepRelation *rel)
{
	OidEntry   *e = hash_search(cat->oids, &rel->remoteid, HASH_FIND, NULL);
	Variant    *v;

	if (e != NULL && e->last_rel == rel)
		return e->last_variant;
	v = variant(cat, rel->remoteid, rel->nspname, rel->relname, true);
	v->rel = rel;
	e = hash_search(cat->oids, &rel->remoteid, HASH_FIND, NULL);
	e->last_rel = rel;
	e->last_variant = v;
	return v;
}

/* The tables of every snapshot's manifest. */
static void
read_manifests(Catalog *cat, const char *directory, uint64 generation)
{
	char	   *dir = cs_snapshots_dir_path(directory, generation);
	ListCell   *lc;

	foreach(lc, cs_list_snapshots(directory, generation))
	{
		char	   *path = cs_file_in(dir, (char *) lfirst(lc));
		CsSnapshotReader *r = cs_snapreader_open(path);
		XLogRecPtr	lsn = cs_snapreader_lsn(r);
		ListCell   *lt;

		foreach(lt, cs_manifest_tables(r, path))
		{
			CsManifestTable *mt = lfirst(lt);
			Variant    *v;
			ListCell   *lp;

			if (cs_ddl_is_history_name(mt->schema, mt->name) &&
				list_member_oid(cat->ddl_trusted, mt->oid))
				continue;
			v = variant(cat, mt->oid, mt->schema, mt->name, true);
			v->t.in_snapshot = true;
			sight(&v->t, lsn);
			if (v->t.columns == NIL)
				foreach(lp, mt->columns)
					v->t.columns = lappend(v->t.columns,
										   pstrdup(linitial(lfirst(lp))));
		}
		cs_snapreader_close(r);
	}
}

/* A change of the table rel, or a DDL record when rel is the history. */
static void
see_change(Catalog *cat, const CsChange *c, const LogicalRepRelation *rel)
{
	Variant    *v;

	if (cs_ddl_is_history(rel, cat->ddl_trusted))
	{
		CsDdlRecord rec;

		if (c->kind != CS_CHANGE_INSERT)
			return;
		cs_ddl_read(c, &rec);
		/* a dropped index's record names the index, not a table */
		if (cs_ddl_is_index_drop(&rec))
			return;
		v = variant(cat, rec.table_oid, rec.schema_name, rec.table_name, false);
		sight(&v->t, c->commit_lsn);
		return;
	}
	v = rel_variant(cat, rel);
	sight(&v->t, c->commit_lsn);
	if (c->kind != CS_CHANGE_RELATION)
		v->t.changes++;
}

/* The segments, in order, until every name looked for has matched. */
static void
read_segments(Catalog *cat, const char *directory, uint64 generation)
{
	CsDecoder  *d = cs_decoder_open(directory, generation, InvalidXLogRecPtr,
									InvalidXLogRecPtr);
	CsChange	c;
	ListCell   *lc;

	while ((cat->names == NIL || cat->unmatched > 0) && cs_decoder_next(d, &c))
	{
		switch (c.kind)
		{
			case CS_CHANGE_RELATION:
			case CS_CHANGE_INSERT:
			case CS_CHANGE_UPDATE:
			case CS_CHANGE_DELETE:
				if (c.rel != NULL)
					see_change(cat, &c, c.rel);
				break;
			case CS_CHANGE_TRUNCATE:
				foreach(lc, c.truncated)
					see_change(cat, &c, lfirst(lc));
				break;
			default:
				break;
		}
	}
	/* the columns of the last Relation, before the decoder frees it */
	foreach(lc, cat->all)
	{
		Variant    *v = lfirst(lc);

		if (v->rel == NULL)
			continue;
		list_free_deep(v->t.columns);
		v->t.columns = NIL;
		for (int i = 0; i < v->rel->natts; i++)
			v->t.columns = lappend(v->t.columns, pstrdup(v->rel->attnames[i]));
		v->rel = NULL;
	}
	cs_decoder_close(d);
}

/*
 * cs_archived_tables
 *	  The tables generation holds in directory, as a List of
 *	  CsArchivedTable * (one per OID and name, for the tables whose data it
 *	  holds: in a snapshot or changed; the extension's schema history
 *	  table left out) in CurrentMemoryContext.  With names (char
 *	  *, as restore()'s tables), it stops reading once each matches a
 *	  table; without, it reads the whole generation (its segments from the
 *	  retention horizon on, decoded once).  first_lsn and last_lsn are
 *	  the first and last sighting: a snapshot's LSN, the commit LSN of a
 *	  transaction changing the table or carrying its Relation message or
 *	  a schema history record naming it.  Pins the generation for the
 *	  transaction (reader_pins.c).
 *	  Errors: as the decoder's and the snapshot reader's (XX001 naming
 *	  file and offset on damage); 57014 on cancel.
 */
List *
cs_archived_tables(const char *directory, uint64 generation, List *names)
{
	Catalog		cat;
	HASHCTL		ctl;

	cs_pin_read(generation, InvalidXLogRecPtr);
	memset(&cat, 0, sizeof(cat));
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(OidEntry);
	ctl.hcxt = CurrentMemoryContext;
	cat.oids = hash_create("changestream archived tables", 64, &ctl,
						   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	cat.ddl_trusted = cs_ddl_trusted_oids(directory, generation);
	cat.names = names;
	cat.unmatched = list_length(names);
	cat.matched = palloc0(sizeof(bool) * Max(cat.unmatched, 1));
	read_manifests(&cat, directory, generation);
	if (names == NIL || cat.unmatched > 0)
		read_segments(&cat, directory, generation);
	hash_destroy(cat.oids);
	return cat.all;
}

/*
 * Up to CLOSE_NAMES_MAX quoted qualified names close to given, or NULL:
 * those at the smallest edit distance found (at most a third of given's
 * length, at least 2), and those one edit further, nearest first.
 */
static char *
close_names(const char *given, List *tables)
{
	int			max_d = Max(2, (int) strlen(given) / 3);
	int			nearest = -1;	/* the distance of the first names found */
	List	   *found = NIL;
	StringInfoData out;
	ListCell   *lc;

	for (int d = 0; d <= max_d && list_length(found) < CLOSE_NAMES_MAX; d++)
	{
		if (found != NIL && nearest < 0)
			nearest = d - 1;
		if (nearest >= 0 && d > nearest + 1)
			break;
		foreach(lc, tables)
		{
			CsArchivedTable *t = lfirst(lc);
			char	   *q = psprintf("%s.%s", t->schema, t->name);
			int			dq = varstr_levenshtein_less_equal(given, strlen(given), q, strlen(q),
														   1, 1, 1, max_d, true);
			int			dn = varstr_levenshtein_less_equal(given, strlen(given), t->name,
														   strlen(t->name), 1, 1, 1, max_d, true);

			if (pg_strcasecmp(given, q) == 0 || pg_strcasecmp(given, t->name) == 0)
				dq = 0;
			if (Min(dq, dn) == d && !list_member(found, makeString(q)) &&
				list_length(found) < CLOSE_NAMES_MAX)
				found = lappend(found, makeString(q));
		}
	}
	if (found == NIL)
		return NULL;
	initStringInfo(&out);
	foreach(lc, found)
		appendStringInfo(&out, "%s\"%s\"", out.len > 0 ? ", " : "",
						 strVal(lfirst(lc)));
	return out.data;
}

/*
 * cs_check_table_names
 *	  Refuses a name of names (argument: "tables" or "relations", for the
 *	  message) that matches no table generation holds under any name,
 *	  anywhere in it (cs_archived_tables()): ERROR 42P01, the DETAIL
 *	  listing up to five close names the generation holds.  Returns when
 *	  every name matches, reading no segment when the snapshots' manifests
 *	  match them all.
 *	  Errors: 42P01 as above; those of cs_archived_tables().
 */
void
cs_check_table_names(const char *directory, uint64 generation, List *names,
					 const char *argument)
{
	List	   *tables;
	ListCell   *ln;

	if (names == NIL)
		return;
	tables = cs_archived_tables(directory, generation, names);
	foreach(ln, names)
	{
		const char *given = lfirst(ln);
		ListCell   *lt;
		char	   *close;

		foreach(lt, tables)
			if (name_matches(given, lfirst(lt)))
				break;
		if (lt != NULL)
			continue;
		close = close_names(given, tables);
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("table \"%s\" (in %s) matches no table archived in generation %016llx",
						given, argument, (unsigned long long) generation),
				 close != NULL ?
				 errdetail("Close names the generation holds: %s.", close) :
				 errdetail("None of the %d table names the generation holds is close to it.",
						   list_length(tables)),
				 errhint("A name is \"schema.table\" or \"table\", matched exactly; changestream.tables('%016llx') lists the tables the generation holds.",
						 (unsigned long long) generation)));
	}
}

/* A text[] of the column names. */
static Datum
columns_array(List *columns)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(list_length(columns), 1));
	ListCell   *lc;

	foreach(lc, columns)
		elems[foreach_current_index(lc)] = CStringGetTextDatum(lfirst(lc));
	return PointerGetDatum(construct_array(elems, list_length(columns), TEXTOID,
										   -1, false, TYPALIGN_INT));
}

static int
table_cmp(const ListCell *a, const ListCell *b)
{
	const CsArchivedTable *x = lfirst(a);
	const CsArchivedTable *y = lfirst(b);
	int			r = strcmp(x->schema, y->schema);

	if (r == 0)
		r = strcmp(x->name, y->name);
	if (r == 0)
		r = (x->first_lsn > y->first_lsn) - (x->first_lsn < y->first_lsn);
	return r;
}

/*
 * changestream.tables(generation text DEFAULT NULL)
 *	  Returns setof (schema_name text, table_name text, relid oid,
 *	  in_snapshot boolean, first_lsn pg_lsn, last_lsn pg_lsn, changes
 *	  bigint, columns text[]): each name a table of the generation (NULL:
 *	  the newest) had, with its OID on the archived server (a renamed
 *	  table has a row per name, one OID), whether a snapshot lists it, its
 *	  first and last sighting (cs_archived_tables()), the archived
 *	  changes made under that name (inserts, updates, deletes, truncates),
 *	  and its columns as last archived.  Reads the manifests and the whole
 *	  generation (the archive keeps no index of tables).  Ordered by
 *	  schema, name and first sighting.
 *	  Errors: 22023 for a malformed generation, 42704 when it does not
 *	  exist, 55000 when changestream.directory is not set; XX001 naming
 *	  file and offset on damage.
 */
Datum
changestream_tables(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	const char *directory = cs_require_directory();
	uint64		generation;
	List	   *tables;
	ListCell   *lc;

	generation = cs_resolve_generation(directory, PG_ARGISNULL(0) ? NULL :
									   text_to_cstring(PG_GETARG_TEXT_PP(0)));
	InitMaterializedSRF(fcinfo, 0);
	tables = cs_archived_tables(directory, generation, NIL);
	list_sort(tables, table_cmp);
	foreach(lc, tables)
	{
		CsArchivedTable *t = lfirst(lc);
		Datum		values[TABLES_COLS];
		bool		nulls[TABLES_COLS];

		memset(nulls, 0, sizeof(nulls));
		values[0] = CStringGetTextDatum(t->schema);
		values[1] = CStringGetTextDatum(t->name);
		values[2] = ObjectIdGetDatum(t->oid);
		values[3] = BoolGetDatum(t->in_snapshot);
		values[4] = LSNGetDatum(t->first_lsn);
		values[5] = LSNGetDatum(t->last_lsn);
		values[6] = Int64GetDatum(t->changes);
		values[7] = columns_array(t->columns);
		nulls[7] = (t->columns == NIL);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
