/*-------------------------------------------------------------------------
 *
 * uploader.h
 *	  The uploader background worker (uploader.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_UPLOADER_H
#define CS_UPLOADER_H

#include "postgres.h"

extern bool cs_uploader_registered;

extern void cs_register_uploader(void);
extern PGDLLEXPORT void changestream_uploader_main(Datum main_arg);

#endif							/* CS_UPLOADER_H */
