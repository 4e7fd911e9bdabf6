/*-------------------------------------------------------------------------
 *
 * restore_key.c
 *	  The primary key and replica identity of a table restore() created,
 *	  matched to the source's replica identity as the archive gives it: a
 *	  Relation message's replica identity and key columns (attkeys), or a
 *	  snapshot manifest's replica_identity and key (docs/FORMAT.md section
 *	  3.2).  The README promises such tables the replica identity key as
 *	  their primary key, and a target database with a publication that
 *	  publishes updates and deletes needs one to apply them.  Whenever the
 *	  archive names another identity (ADD PRIMARY KEY after a bulk load, a
 *	  key moved to other columns, REPLICA IDENTITY USING INDEX, NOTHING,
 *	  a key dropped), the target follows: its primary key is dropped, with
 *	  the NOT NULL restore() set for it (tracked by attnum, so that a key
 *	  that vanished with a dropped column also gives them up), and the new
 *	  one added.  REPLICA IDENTITY FULL or NOTHING says nothing of the
 *	  source's primary key: a primary key that is the source's (taken
 *	  under identity DEFAULT) is kept.  The archive holds no NOT NULL of
 *	  the source, so the target has only those its key needs.  Tables that
 *	  existed before the restore are the user's and are never altered
 *	  here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "access/tupdesc.h"

#include "read/restore_key.h"
#include "base/compat.h"

/*
 * cs_name_index
 *	  The 0-based position of name in names (a List of C strings, such as
 *	  a table's column names), or -1 when it is not there.
 */
int
cs_name_index(List *names, const char *name)
{
	ListCell   *lc;

	foreach(lc, names)
		if (strcmp(lfirst(lc), name) == 0)
			return foreach_current_index(lc);
	return -1;
}

/* Do two lists of column names hold the same names (in any order)? */
static bool
same_columns(List *a, List *b)
{
	ListCell   *lc;

	if (list_length(a) != list_length(b))
		return false;
	foreach(lc, a)
		if (cs_name_index(b, lfirst(lc)) < 0)
			return false;
	return true;
}

/*
 * The target's primary key: its key columns' names (NIL when it has none)
 * and its constraint's name into *conname.
 */
static List *
primary_key(Relation rel, char **conname)
{
	Oid			pk = cs_relation_primary_key(rel);
	Relation	idx;
	List	   *names = NIL;

	*conname = NULL;
	if (!OidIsValid(pk))
		return NIL;
	idx = index_open(pk, AccessShareLock);
	for (int k = 0; k < IndexRelationGetNumberOfKeyAttributes(idx); k++)
		names = lappend(names, get_attname(RelationGetRelid(rel),
										   idx->rd_index->indkey.values[k],
										   false));
	index_close(idx, AccessShareLock);
	*conname = get_constraint_name(get_index_constraint(pk));
	return names;
}

static char *
column_list(List *names)
{
	StringInfoData buf;
	ListCell   *lc;

	initStringInfo(&buf);
	foreach(lc, names)
		appendStringInfo(&buf, "%s%s", buf.len ? ", " : "",
						 quote_identifier(lfirst(lc)));
	return buf.data;
}

/*
 * Drop the NOT NULL restore() set on columns (ks->notnull) that are not in
 * want, forgetting them (and dropped columns, and ones nullable already).
 */
static List *
drop_our_not_null(Relation rel, const char *qualified, List *want,
				  CsKeyState *ks, List *ddl)
{
	List	   *keep = NIL;
	ListCell   *lc;

	foreach(lc, ks->notnull)
	{
		AttrNumber	attnum = (AttrNumber) lfirst_int(lc);
		Form_pg_attribute att;
		char	   *name;

		if (attnum > RelationGetNumberOfAttributes(rel))
			continue;
		att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
		if (att->attisdropped || !att->attnotnull)
			continue;
		name = NameStr(att->attname);
		if (cs_name_index(want, name) >= 0)
			keep = lappend_int(keep, attnum);
		else
			ddl = lappend(ddl, psprintf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL",
										qualified, quote_identifier(name)));
	}
	ks->notnull = keep;
	return ddl;
}

/* Note the columns of want that the primary key about to be added makes NOT NULL. */
static void
note_not_null(Relation rel, List *want, CsKeyState *ks)
{
	ListCell   *lc;

	foreach(lc, want)
	{
		AttrNumber	attnum = get_attnum(RelationGetRelid(rel), lfirst(lc));

		if (attnum != InvalidAttrNumber &&
			!TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attnotnull &&
			!list_member_int(ks->notnull, attnum))
			ks->notnull = lappend_int(ks->notnull, attnum);
	}
}

/*
 * cs_restore_key_ddl
 *	  The ALTER TABLE statements (char *, in order) that give relid, a
 *	  table restore() created, named qualified (quoted), the source's
 *	  replica identity identity ('d', 'i', 'f' or 'n') with key columns
 *	  key (char *, the target's names; used for 'd' and 'i' only): for 'd'
 *	  and 'i' a primary key on key (none when key is NIL: the source has no
 *	  key, or ks->unpublished: not all of it is published) and REPLICA
 *	  IDENTITY DEFAULT; for 'f' and 'n' REPLICA IDENTITY FULL or NOTHING,
 *	  and the primary key the target has kept when it is the source's
 *	  (ks->from_primary), else none.  A primary key on other columns is
 *	  dropped first, and the NOT NULL restore() set for it on columns not
 *	  in the new key (ks->notnull, updated, as ks->from_primary is).  NIL
 *	  when the table matches already.
 */
List *
cs_restore_key_ddl(Oid relid, const char *qualified, char identity, List *key,
				   CsKeyState *ks)
{
	Relation	rel = table_open(relid, AccessShareLock);
	char		current = rel->rd_rel->relreplident;
	char	   *conname;
	List	   *have = primary_key(rel, &conname);
	char		want_identity = (identity == 'f' || identity == 'n') ? identity : 'd';
	List	   *want;
	List	   *ddl = NIL;

	if (want_identity != 'd')
		want = ks->from_primary ? have : NIL;
	else
		want = ks->unpublished ? NIL : key;
	if (have != NIL && !same_columns(have, want))
	{
		ddl = lappend(ddl, psprintf("ALTER TABLE %s DROP CONSTRAINT %s", qualified,
									quote_identifier(conname)));
		have = NIL;
	}
	ddl = drop_our_not_null(rel, qualified, want, ks, ddl);
	if (want != NIL && have == NIL)
	{
		note_not_null(rel, want, ks);
		ddl = lappend(ddl, psprintf("ALTER TABLE %s ADD PRIMARY KEY (%s)", qualified,
									column_list(want)));
	}
	if (want_identity == 'd')
		ks->from_primary = (identity == 'd' && want != NIL);
	else if (want == NIL)
		ks->from_primary = false;
	table_close(rel, NoLock);
	if (current != want_identity)
		ddl = lappend(ddl, psprintf("ALTER TABLE %s REPLICA IDENTITY %s", qualified,
									want_identity == 'f' ? "FULL" :
									want_identity == 'n' ? "NOTHING" : "DEFAULT"));
	return ddl;
}
