/*-------------------------------------------------------------------------
 *
 * ddl_record.h
 *	  One row of changestream.ddl_history as the archive holds it, read
 *	  and checked for changes() and restore().  See ddl_record.c and
 *	  docs/DESIGN.md section 12.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_DDL_RECORD_H
#define CS_DDL_RECORD_H

#include "archive/schema_history.h"
#include "read/decoder.h"

/* One archived DDL record, checked (ddl_record.c). */
typedef struct CsDdlRecord
{
	const char *event;			/* ddl_command_end, sql_drop, table_rewrite */
	const char *command_tag;
	const char *object_type;	/* NULL when the row has none */
	const char *object_identity;	/* NULL when the row has none */
	Oid			table_oid;		/* on the archived server */
	const char *schema_name;	/* the table's, after the command */
	const char *table_name;
	const char *publication;	/* a change of a publication's tables, or
								 * NULL */
	int			rewrite_reason; /* table_rewrite's reason bits, or 0 */
	const char *columns;		/* text form of the text[], or NULL */
	const char *retyped;		/* columns retyped without USING (text[]) */
	const char *retyped_to;		/* their new types (text[]), or NULL */
	bool		rows_changed;
	const char *definition;		/* the table's definition after the
								 * command (JSON text), or NULL */
} CsDdlRecord;

extern void cs_ddl_read(const CsChange *change, CsDdlRecord *record);
extern bool cs_ddl_is_index_drop(const CsDdlRecord *record);

#endif							/* CS_DDL_RECORD_H */
