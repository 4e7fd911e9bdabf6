/*-------------------------------------------------------------------------
 *
 * dropdb_hook.h
 *	  Declarations of dropdb_hook.c: DROP DATABASE of an archived database.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_DROPDB_HOOK_H
#define CS_DROPDB_HOOK_H

extern void cs_install_dropdb_hook(void);

#endif							/* CS_DROPDB_HOOK_H */
