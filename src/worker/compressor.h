/*-------------------------------------------------------------------------
 *
 * compressor.h
 *	  The changestream compressor: the background worker that compresses
 *	  sealed segments beside the archiver, keeps the spare segment ready
 *	  and runs retention (compressor.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_COMPRESSOR_H
#define CS_COMPRESSOR_H

#include "fmgr.h"

extern void cs_register_compressor(void);
extern PGDLLEXPORT void changestream_compressor_main(Datum main_arg);

#endif							/* CS_COMPRESSOR_H */
