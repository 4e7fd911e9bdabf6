/*-------------------------------------------------------------------------
 *
 * restore_columns.c
 *	  What an ALTER TABLE did to a table's columns, told from the table's
 *	  definitions before and after the command (schema history records,
 *	  the snapshot manifest; docs/FORMAT.md section 3.2) by attnum, which
 *	  names a column across renames: a column whose attnum is gone was
 *	  dropped, one under a new name was renamed, one of a new type was
 *	  retyped, a new attnum was added (as was a generated column made an
 *	  ordinary one).  restore() runs the same changes on
 *	  its target where the command's record lies in the stream
 *	  (docs/DESIGN.md section 12), so that the target's columns are the
 *	  source's at every point: a column dropped and added again under its
 *	  name gives NULL in the rows before, and the target is exact although
 *	  no change of the table followed the command.
 *
 *	  Only what needs no guess is replayed; anything else leaves the
 *	  caller's earlier rules in force (a definition without attnums, a
 *	  target column the definition before does not name, a type this
 *	  database lacks).  Columns are added only when the target has every
 *	  stored column of the definition before (no column list: a column
 *	  list never takes in a column added later), and generated columns are
 *	  never added here (restore_definition.c adds them with their
 *	  expression).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/attnum.h"
#include "utils/builtins.h"

#include "read/restore_columns.h"
#include "read/restore_key.h"
#include "read/restore_manifest.h"

/* The column of def with attnum, or NULL. */
static CsDefColumn *
column_by_attnum(const CsTableDefinition *def, int attnum)
{
	ListCell   *lc;

	foreach(lc, def->columns)
		if (((CsDefColumn *) lfirst(lc))->attnum == attnum)
			return lfirst(lc);
	return NULL;
}

/* Does the target have every stored column of def? */
static bool
has_every_stored(List *columns, const CsTableDefinition *def)
{
	ListCell   *lc;

	foreach(lc, def->columns)
	{
		CsDefColumn *c = lfirst(lc);

		if (c->generated == NULL && cs_name_index(columns, c->name) < 0)
			return false;
	}
	return true;
}

/*
 * A name for a column between its two names (a rename goes through it,
 * so that names swapped or shifted never meet), or NULL when it is taken.
 */
static char *
passing_name(List *columns, const CsTableDefinition *after, int attnum)
{
	char	   *name = psprintf("changestream_renaming_%d", attnum);

	if (cs_name_index(columns, name) >= 0 ||
		cs_definition_column(after, name) != NULL)
		return NULL;
	return name;
}

/*
 * cs_columns_replay
 *	  columns: the target's column names (archived names in force, in the
 *	  target's order); target: its qualified name, or NULL for the dry
 *	  run (no statements); before and after: the table's definitions
 *	  before and after one ALTER TABLE.  Returns false when the change
 *	  cannot be told without a guess (either definition lacks attnums, a
 *	  target column is not in before, a retyped or added column's type is
 *	  not one of this database, a passing name is taken); else true, with
 *	  *statements the ALTER TABLE commands that make the target's columns
 *	  after's (drops, renames through a passing name, retypes USING the
 *	  text form, additions (generated columns made ordinary included), in
 *	  that order) and *now the target's column
 *	  names afterwards.
 */
bool
cs_columns_replay(List *columns, const char *target,
				  const CsTableDefinition *before,
				  const CsTableDefinition *after,
				  List **statements, List **now)
{
	List	   *drops = NIL;
	List	   *passes = NIL;
	List	   *renames = NIL;
	List	   *retypes = NIL;
	List	   *adds = NIL;
	bool		add;
	ListCell   *lc;
	char	   *why = NULL;

	*statements = NIL;
	*now = NIL;
	if (before == NULL || after == NULL || !before->attnums || !after->attnums)
		return false;
	add = has_every_stored(columns, before);
	foreach(lc, columns)
	{
		CsDefColumn *b = cs_definition_column(before, lfirst(lc));
		CsDefColumn *a;
		const char *name;
		char	   *type;

		if (b == NULL)
			return false;
		name = quote_identifier(b->name);
		a = column_by_attnum(after, b->attnum);
		if (a == NULL)
		{
			drops = lappend(drops, psprintf("ALTER TABLE %s DROP COLUMN %s",
											target, name));
			continue;
		}
		*now = lappend(*now, pstrdup(a->name));
		if (strcmp(a->name, b->name) != 0)
		{
			char	   *passing = passing_name(columns, after, b->attnum);

			if (passing == NULL)
				return false;
			passes = lappend(passes, psprintf("ALTER TABLE %s RENAME COLUMN %s TO %s",
											  target, name, passing));
			renames = lappend(renames, psprintf("ALTER TABLE %s RENAME COLUMN %s TO %s",
												target, passing,
												quote_identifier(a->name)));
		}
		if (strcmp(a->type, b->type) == 0)
			continue;
		if ((type = cs_type_sql(a->type, &why)) == NULL)
			return false;
		retypes = lappend(retypes, psprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s USING %s::text::%s",
											target, quote_identifier(a->name),
											type, quote_identifier(a->name),
											type));
	}
	foreach(lc, after->columns)
	{
		CsDefColumn *a = lfirst(lc);
		CsDefColumn *b = column_by_attnum(before, a->attnum);
		char	   *type;

		/*
		 * New, or generated before (DROP EXPRESSION: the target, which
		 * gets generated columns at the end only, lacks it; where the table
		 * held rows the command set their values, and is refused above)
		 */
		if (!add || a->generated != NULL ||
			(b != NULL && (b->generated == NULL || cs_name_index(columns, b->name) >= 0)))
			continue;
		if ((type = cs_type_sql(a->type, &why)) == NULL)
			return false;
		adds = lappend(adds, psprintf("ALTER TABLE %s ADD COLUMN %s %s", target,
									  quote_identifier(a->name), type));
		*now = lappend(*now, pstrdup(a->name));
	}
	if (target != NULL)
		*statements = list_concat(list_concat(list_concat(list_concat(drops, passes),
														   renames),
											  retypes),
								   adds);
	return true;
}
