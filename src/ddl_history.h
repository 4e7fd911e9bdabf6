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

/*
 * generations/<gen>/schema_history: the OIDs the extension's ddl_history
 * had while the generation was written (FORMAT.md section 3.4).  Readers
 * take rows as schema history only from a relation of one of them.
 */

/* One archived DDL record, checked (ddl_history.c). */
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
} CsDdlRecord;

extern bool cs_ddl_is_history_name(const char *schema, const char *name);
extern bool cs_ddl_is_history(const LogicalRepRelation *rel,
							  const List *trusted);
extern List *cs_ddl_trusted_oids(const char *directory, uint64 generation);
extern void cs_ddl_trust_oid(const char *directory, uint64 generation,
							 Oid oid);
extern void cs_ddl_read(const CsChange *change, CsDdlRecord *record);

#endif							/* CS_DDL_HISTORY_H */
