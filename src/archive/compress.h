/*-------------------------------------------------------------------------
 *
 * compress.h
 *	  Compressing one sealed segment to gzip in slices (compress.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_COMPRESS_H
#define CS_COMPRESS_H


#define CS_COMPRESS_SLICE	(256 * 1024)	/* bytes of input per step */

typedef struct CsCompressJob CsCompressJob;

extern CsCompressJob *cs_compress_begin(const char *wal_dir, int64 index,
										int level);
extern bool cs_compress_step(CsCompressJob *job, long budget_bytes);
extern void cs_compress_abort(void);

#endif							/* CS_COMPRESS_H */
