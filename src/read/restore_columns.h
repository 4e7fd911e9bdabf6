/*-------------------------------------------------------------------------
 *
 * restore_columns.h
 *	  The column changes of an ALTER TABLE, told from the table's
 *	  definitions before and after the command by attnum, as ALTER TABLE
 *	  statements for restore()'s target (restore_columns.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RESTORE_COLUMNS_H
#define CS_RESTORE_COLUMNS_H

#include "nodes/pg_list.h"

#include "read/definition_read.h"

extern bool cs_columns_replay(List *columns, const char *target,
							  const CsTableDefinition *before,
							  const CsTableDefinition *after,
							  List **statements, List **now);

#endif							/* CS_RESTORE_COLUMNS_H */
