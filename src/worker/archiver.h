/*-------------------------------------------------------------------------
 *
 * archiver.h
 *	  Declarations of archiver.c: the archiver background worker.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_ARCHIVER_H
#define CS_ARCHIVER_H

#include "fmgr.h"

extern PGDLLEXPORT void changestream_archiver_main(Datum main_arg);

#endif							/* CS_ARCHIVER_H */
