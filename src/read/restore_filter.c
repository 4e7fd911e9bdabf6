/*-------------------------------------------------------------------------
 *
 * restore_filter.c
 *	  restore()'s tables argument: which archived tables a name wants
 *	  ("schema.table", or "table" in any schema)
 *	  (issue 35, section 3: a name matching no table of the whole archive
 *	  is to be an error; a table created after the target is not yet
 *	  known at the end of the restore's read, so that check is not built).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "read/restore_filter.h"

/*
 * cs_filter_wants
 *	  Does the filter want the table schema.name (every table when it has
 *	  no names)?
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
			wanted = true;
	}
	pfree(qualified);
	return wanted;
}
