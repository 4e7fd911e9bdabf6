/*-------------------------------------------------------------------------
 *
 * restore_filter.c
 *	  restore()'s tables argument (issue 35, section 3): which archived
 *	  tables a name wants ("schema.table", or "table" in any schema), and,
 *	  once the archive has been read to the target, a name that matched no
 *	  archived table is an error listing the close names the archive holds,
 *	  instead of a restore of nothing that a DBA in a hurry reads as done.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/varlena.h"

#include "read/restore_filter.h"

#define CLOSE_NAMES_MAX		5	/* close names listed in the error */
#define CLOSE_DISTANCE		3	/* edits that still make a name close */

/*
 * cs_filter_wants
 *	  Does the filter want the table schema.name (every table when it has
 *	  no names)?  Records which names matched.
 */
bool
cs_filter_wants(CsTableFilter *filter, const char *schema, const char *name)
{
	char	   *qualified = psprintf("%s.%s", schema, name);
	ListCell   *lc;
	bool		wanted = false;

	if (filter->names == NIL)
		return true;
	foreach(lc, filter->names)
	{
		if (strcmp(lfirst(lc), qualified) == 0 || strcmp(lfirst(lc), name) == 0)
		{
			filter->matched = bms_add_member(filter->matched,
											 foreach_current_index(lc));
			wanted = true;
		}
	}
	pfree(qualified);
	return wanted;
}

/*
 * cs_filter_note_table
 *	  Remember an archived table's name for the error of a name that
 *	  matches nothing (only with names).
 */
void
cs_filter_note_table(CsTableFilter *filter, const char *schema,
					 const char *name)
{
	char	   *qualified;
	ListCell   *lc;

	if (filter->names == NIL)
		return;
	qualified = psprintf("%s.%s", schema, name);
	foreach(lc, filter->seen)
	{
		if (strcmp(lfirst(lc), qualified) == 0)
			return;
	}
	filter->seen = lappend(filter->seen, qualified);
}

/* The part of "schema.table" after the schema, or the whole name. */
static const char *
table_part(const char *qualified)
{
	const char *dot = strrchr(qualified, '.');

	return dot != NULL ? dot + 1 : qualified;
}

/* Up to CLOSE_NAMES_MAX archived names close to name, quoted, or "". */
static char *
close_names(const CsTableFilter *filter, const char *name)
{
	StringInfoData buf;
	const char *want = table_part(name);
	int			found = 0;
	ListCell   *lc;

	initStringInfo(&buf);
	foreach(lc, filter->seen)
	{
		const char *have = table_part(lfirst(lc));

		if (found < CLOSE_NAMES_MAX &&
			varstr_levenshtein_less_equal(want, strlen(want), have,
										  strlen(have), 1, 1, 1,
										  CLOSE_DISTANCE, true) <= CLOSE_DISTANCE)
		{
			appendStringInfo(&buf, "%s\"%s\"", found > 0 ? ", " : "",
							 (char *) lfirst(lc));
			found++;
		}
	}
	return buf.data;
}

/*
 * cs_filter_require_matched
 *	  Raise 42P01 (undefined_table) for the first name that matched no
 *	  archived table up to the target, naming the close names the archive
 *	  holds (edit distance of the table part at most CLOSE_DISTANCE).
 */
void
cs_filter_require_matched(const CsTableFilter *filter)
{
	ListCell   *lc;

	foreach(lc, filter->names)
	{
		char	   *close;

		if (bms_is_member(foreach_current_index(lc), filter->matched))
			continue;
		close = close_names(filter, lfirst(lc));
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("no archived table matches \"%s\"", (char *) lfirst(lc)),
				 close[0] != '\0' ?
				 errdetail("The archive holds %s, among %d tables up to the target.",
						   close, list_length(filter->seen)) :
				 errdetail("The archive holds %d tables up to the target, none with a close name.",
						   list_length(filter->seen)),
				 errhint("Name a table as schema.table or table, as it is at the target or was before a rename; changestream.changes() and the snapshots' manifests list the archived tables.")));
	}
}
