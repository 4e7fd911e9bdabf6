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

extern int	cs_name_index(List *names, const char *name);
extern List *cs_restore_key_ddl(Oid relid, const char *qualified,
								char identity, List *key);

#endif							/* CS_RESTORE_KEY_H */
