/*-------------------------------------------------------------------------
 *
 * restore_key.h
 *	  The primary key and replica identity of a table restore() created,
 *	  matched to the archive's (restore_key.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RESTORE_KEY_H
#define CS_RESTORE_KEY_H

#include "nodes/pg_list.h"

/* What restore() knows of the key of a table it created (restore_key.c). */
typedef struct CsKeyState
{
	List	   *notnull;		/* int: attnums that restore() made NOT NULL
								 * with a primary key it added */
	bool		from_primary;	/* the primary key is the source's primary
								 * key (identity DEFAULT), not a USING INDEX
								 * index's columns */
	bool		unpublished;	/* the source's key is not wholly published
								 * (the manifest's key is empty): a
								 * Relation's key columns are not taken until
								 * a DDL record for the table */
} CsKeyState;

extern int	cs_name_index(List *names, const char *name);
extern List *cs_restore_key_ddl(Oid relid, const char *qualified,
								char identity, List *key, CsKeyState *ks);

#endif							/* CS_RESTORE_KEY_H */
