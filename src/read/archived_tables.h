/*-------------------------------------------------------------------------
 *
 * archived_tables.h
 *	  The tables a generation of the archive holds, by name, for
 *	  changestream.tables() and the name checks of restore()'s tables and
 *	  changes()' relations.  See archived_tables.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_ARCHIVED_TABLES_H
#define CS_ARCHIVED_TABLES_H

#include "access/xlogdefs.h"
#include "nodes/pg_list.h"

/* One name an archived table had (one OID may have several). */
typedef struct CsArchivedTable
{
	Oid			oid;			/* pg_class OID on the archived server */
	char	   *schema;
	char	   *name;
	bool		in_snapshot;	/* listed by a snapshot's manifest */
	XLogRecPtr	first_lsn;		/* first sighting (below) */
	XLogRecPtr	last_lsn;		/* last sighting */
	int64		changes;		/* archived changes under this name */
	List	   *columns;		/* char *: the last definition's columns */
} CsArchivedTable;

extern List *cs_archived_tables(const char *directory, uint64 generation,
								List *names);
extern void cs_check_table_names(const char *directory, uint64 generation,
								 List *names, const char *argument);

#endif							/* CS_ARCHIVED_TABLES_H */
