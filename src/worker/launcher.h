/*-------------------------------------------------------------------------
 *
 * launcher.h
 *	  Declarations of launcher.c: the worker that starts one archiver per
 *	  archived database.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_LAUNCHER_H
#define CS_LAUNCHER_H

#include "fmgr.h"

extern PGDLLEXPORT void changestream_launcher_main(Datum main_arg);
extern void cs_register_launcher(void);

#endif							/* CS_LAUNCHER_H */
