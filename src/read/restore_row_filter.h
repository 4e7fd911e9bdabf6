/*-------------------------------------------------------------------------
 *
 * restore_row_filter.h
 *	  restore()'s row_filter: one SQL expression over a restored table's
 *	  columns (restore_row_filter.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RESTORE_ROW_FILTER_H
#define CS_RESTORE_ROW_FILTER_H

#include "nodes/nodes.h"
#include "access/tupdesc.h"
#include "utils/relcache.h"

extern Node *cs_row_filter_parse(const char *text);
extern Node *cs_row_filter_transform(Node *raw, Relation rel);
extern Node *cs_row_filter_transform_desc(Node *raw, const char *name,
										  TupleDesc desc);
extern Bitmapset *cs_row_filter_columns(Node *expr);

#endif							/* CS_RESTORE_ROW_FILTER_H */
