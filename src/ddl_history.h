/*-------------------------------------------------------------------------
 *
 * ddl_history.h
 *	  Schema history: the rows of changestream.ddl_history as they reach
 *	  the archive (inserts decoded through the extension's publication
 *	  changestream_ddl), and the helper its event trigger calls.  See
 *	  ddl_history.c and docs/DESIGN.md section 12.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_DDL_HISTORY_H
#define CS_DDL_HISTORY_H

#include "decoder.h"

/* The schema, table and publication the extension owns (0.2 on). */
#define CS_DDL_SCHEMA		"changestream"
#define CS_DDL_TABLE		"ddl_history"
#define CS_DDL_PUBLICATION	"changestream_ddl"

/* One archived DDL record, checked (ddl_history.c). */
typedef struct CsDdlRecord
{
	const char *event;			/* ddl_command_end, sql_drop, table_rewrite */
	const char *command_tag;
	const char *object_identity;	/* NULL when the row has none */
	Oid			table_oid;		/* on the archived server */
	const char *schema_name;	/* the table's, after the command */
	const char *table_name;
	const char *columns;		/* text form of the text[], or NULL */
	bool		rows_changed;
} CsDdlRecord;

extern bool cs_ddl_is_history(const LogicalRepRelation *rel);
extern void cs_ddl_read(const CsChange *change, CsDdlRecord *record);

#endif							/* CS_DDL_HISTORY_H */
