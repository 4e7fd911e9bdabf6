/*-------------------------------------------------------------------------
 *
 * table_definition.h
 *	  The query that reads a table's full definition (columns, constraints,
 *	  indexes, replica identity) as JSON, shared by the snapshot (libpq)
 *	  and changestream.ddl_table_definition() (SPI).  See
 *	  table_definition.c and docs/FORMAT.md section 3.2.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_TABLE_DEFINITION_H
#define CS_TABLE_DEFINITION_H

extern char *cs_table_definition_query(const char *oid_list_sql);

#endif							/* CS_TABLE_DEFINITION_H */
