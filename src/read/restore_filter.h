/*-------------------------------------------------------------------------
 *
 * restore_filter.h
 *	  restore()'s tables argument (restore_filter.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RESTORE_FILTER_H
#define CS_RESTORE_FILTER_H

#include "nodes/pg_list.h"

typedef struct CsTableFilter
{
	List	   *names;			/* char *: "schema.table" or "table"; NIL: all */
} CsTableFilter;

extern bool cs_filter_wants(CsTableFilter *filter, const char *schema,
							const char *name);

#endif							/* CS_RESTORE_FILTER_H */
