/*-------------------------------------------------------------------------
 *
 * compressor.h
 *	  The changestream compressor: the background worker that compresses
 *	  sealed segments beside the archiver (compressor.c), the compression
 *	  of one segment (compress.c) and its status in shared memory (kept by
 *	  shmem_status.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_COMPRESSOR_H
#define CS_COMPRESSOR_H

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "storage/latch.h"

/* ---------- compressor.c ---------- */

extern void cs_register_compressor(void);
extern PGDLLEXPORT void changestream_compressor_main(Datum main_arg);

/* ---------- compress.c ---------- */

#define CS_COMPRESS_SLICE	(256 * 1024)	/* bytes of input per step */

typedef struct CsCompressJob CsCompressJob;

extern CsCompressJob *cs_compress_begin(const char *wal_dir, int64 index,
										int level);
extern bool cs_compress_step(CsCompressJob *job, long budget_bytes);
extern void cs_compress_abort(void);

/* ---------- shmem_status.c: the compressor's status ---------- */

/* A copy of the compressor's status, as status() shows it. */
typedef struct CsCompressorStatus
{
	pid_t		pid;			/* 0: not running */
	int64		raw_sealed_segments;	/* found at its last look, -1: unknown */
	uint64		segments_compressed;	/* since the server started */
	bool		deferring;		/* waits for the archiver to catch up */
	TimestampTz last_error_at;
	char		last_error[1024];
} CsCompressorStatus;

extern void cs_compressor_status_copy(CsCompressorStatus *copy);
extern void cs_compressor_status_started(Latch *latch);
extern void cs_compressor_status_exited(void);
extern void cs_compressor_status_set_backlog(int64 raw_sealed_segments);
extern void cs_compressor_status_compressed(void);
extern void cs_compressor_status_set_error(const char *message);
extern void cs_compressor_status_set_catching_up(bool catching_up);
extern bool cs_compressor_status_archiver_catching_up(void);
extern void cs_compressor_status_set_deferring(bool deferring);
extern void cs_compressor_wake(void);

#endif							/* CS_COMPRESSOR_H */
