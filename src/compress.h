/*-------------------------------------------------------------------------
 *
 * compress.h
 *	  Declarations of compress.c: gzip compression of sealed segments.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_COMPRESS_H
#define CS_COMPRESS_H


extern void cs_compress_reset(void);
extern void cs_compress_enqueue(const char *wal_dir, int64 index);
extern bool cs_compress_step(long budget_bytes);
extern bool cs_compress_pending(void);
extern int	cs_compress_backlog(void);

#endif							/* CS_COMPRESS_H */
