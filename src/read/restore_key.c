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
 *	  key moved to other columns, REPLICA IDENTITY USING INDEX, FULL,
 *	  NOTHING, a key dropped), the target follows: its primary key is
 *	  dropped, with the NOT NULL it set on columns that leave the key, and
 *	  the new one added.  Tables that existed before the restore are the
 *	  user's and are never altered here.
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
 * cs_restore_key_ddl
 *	  The ALTER TABLE statements (char *, in order) that give relid, a
 *	  table restore() created, named qualified (quoted), the source's
 *	  replica identity identity ('d', 'i', 'f' or 'n') with key columns
 *	  key (char *, the target's names; used for 'd' and 'i' only): for 'd'
 *	  and 'i' a primary key on key (none when key is NIL: the source has no
 *	  key) and REPLICA IDENTITY DEFAULT; for 'f' and 'n' no primary key and
 *	  REPLICA IDENTITY FULL or NOTHING.  A primary key on other columns is
 *	  dropped first, and the NOT NULL of its columns that are not in the
 *	  new key (a table restore() created has NOT NULL from its primary key
 *	  only).  NIL when the table matches already.
 */
List *
cs_restore_key_ddl(Oid relid, const char *qualified, char identity, List *key)
{
	Relation	rel = table_open(relid, AccessShareLock);
	char		current = rel->rd_rel->relreplident;
	char	   *conname;
	List	   *have = primary_key(rel, &conname);
	char		want_identity = (identity == 'f' || identity == 'n') ? identity : 'd';
	List	   *want = (want_identity == 'd') ? key : NIL;
	List	   *ddl = NIL;
	ListCell   *lc;

	table_close(rel, NoLock);
	if (have != NIL && !same_columns(have, want))
	{
		ddl = lappend(ddl, psprintf("ALTER TABLE %s DROP CONSTRAINT %s", qualified,
									quote_identifier(conname)));
		foreach(lc, have)
			if (cs_name_index(want, lfirst(lc)) < 0)
				ddl = lappend(ddl, psprintf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL",
											qualified, quote_identifier(lfirst(lc))));
		have = NIL;
	}
	if (want != NIL && have == NIL)
		ddl = lappend(ddl, psprintf("ALTER TABLE %s ADD PRIMARY KEY (%s)", qualified,
									column_list(want)));
	if (current != want_identity)
		ddl = lappend(ddl, psprintf("ALTER TABLE %s REPLICA IDENTITY %s", qualified,
									want_identity == 'f' ? "FULL" :
									want_identity == 'n' ? "NOTHING" : "DEFAULT"));
	return ddl;
}
