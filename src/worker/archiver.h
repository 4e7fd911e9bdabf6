/*-------------------------------------------------------------------------
 *
 * archiver.h
 *	  Declarations of archiver.c: the archiver background worker.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_ARCHIVER_H
#define CS_ARCHIVER_H


extern PGDLLEXPORT void changestream_archiver_main(Datum main_arg);
extern void cs_archiver_history_relation(Oid relid);

#endif							/* CS_ARCHIVER_H */
