/*-------------------------------------------------------------------------
 *
 * latch_wait.h
 *	  A background worker's wait on its latch (latch_wait.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_LATCH_WAIT_H
#define CS_LATCH_WAIT_H

extern void cs_latch_wait_ms(long ms, bool until_timeout);

#endif							/* CS_LATCH_WAIT_H */
