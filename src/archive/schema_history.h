/*-------------------------------------------------------------------------
 *
 * schema_history.h
 *	  The extension's history table by name, and the OIDs a generation
 *	  trusts as that table (generations/<gen>/schema_history).  See
 *	  schema_history.c and docs/DESIGN.md section 12.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SCHEMA_HISTORY_H
#define CS_SCHEMA_HISTORY_H

#include "nodes/pg_list.h"
#include "replication/logicalproto.h"

/* The schema, table and publication the extension owns (0.2 on). */
#define CS_DDL_SCHEMA		"changestream"
#define CS_DDL_TABLE		"ddl_history"
#define CS_DDL_PUBLICATION	"changestream_ddl"

/*
 * generations/<gen>/schema_history: the OIDs the extension's ddl_history
 * had while the generation was written (FORMAT.md section 3.4).  Readers
 * take rows as schema history only from a relation of one of them.
 */

extern bool cs_ddl_is_history_name(const char *schema, const char *name);
extern bool cs_ddl_is_history(const LogicalRepRelation *rel,
							  const List *trusted);
extern List *cs_ddl_trusted_oids(const char *directory, uint64 generation);
extern void cs_ddl_trust_oid(const char *directory, uint64 generation,
							 Oid oid);

#endif							/* CS_SCHEMA_HISTORY_H */
