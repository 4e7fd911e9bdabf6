/*-------------------------------------------------------------------------
 *
 * segment_spare.h
 *	  The zero-filled spare segment the maintenance worker prepares and the
 *	  archiver renames into place (segment_spare.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SEGMENT_SPARE_H
#define CS_SEGMENT_SPARE_H

extern bool cs_spare_step(const char *directory, int64 budget);
extern void cs_spare_abort(void);
extern void cs_spare_forget(void);
extern void cs_spare_discard(const char *directory);
extern int	cs_spare_take(const char *directory, const char *dest);

#endif							/* CS_SEGMENT_SPARE_H */
