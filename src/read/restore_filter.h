/*-------------------------------------------------------------------------
 *
 * restore_filter.h
 *	  restore()'s tables argument, and the names it did not match
 *	  (restore_filter.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RESTORE_FILTER_H
#define CS_RESTORE_FILTER_H

#include "nodes/bitmapset.h"
#include "nodes/pg_list.h"

typedef struct CsTableFilter
{
	List	   *names;			/* char *: "schema.table" or "table"; NIL: all */
	Bitmapset  *matched;		/* indexes of names that matched a table */
	List	   *seen;			/* char *: every archived "schema.table" met */
} CsTableFilter;

extern bool cs_filter_wants(CsTableFilter *filter, const char *schema,
							const char *name);
extern void cs_filter_note_table(CsTableFilter *filter, const char *schema,
								 const char *name);
extern void cs_filter_require_matched(const CsTableFilter *filter);

#endif							/* CS_RESTORE_FILTER_H */
