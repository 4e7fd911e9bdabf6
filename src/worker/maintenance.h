/*-------------------------------------------------------------------------
 *
 * maintenance.h
 *	  The changestream maintenance worker: the background worker that
 *	  compresses sealed segments beside the archiver, keeps the spare segment
 *	  ready and runs retention (maintenance.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_MAINTENANCE_H
#define CS_MAINTENANCE_H

#include "fmgr.h"

extern void cs_register_maintenance(void);
extern PGDLLEXPORT void changestream_maintenance_main(Datum main_arg);

#endif							/* CS_MAINTENANCE_H */
