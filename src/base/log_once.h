/*-------------------------------------------------------------------------
 *
 * log_once.h
 *	  The log-once rule the archiver and the maintenance worker share: an error
 *	  that repeats the last one logged is counted, not logged, for five
 *	  minutes.  See log_once.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_LOG_ONCE_H
#define CS_LOG_ONCE_H

#include "datatype/timestamp.h"

/* The rule's memory: the last error logged and its repeats since. */
typedef struct CsLogOnce
{
	char		key[1024];		/* SQLSTATE and text up to the first quote */
	TimestampTz logged_at;
	int			suppressed;		/* repeats not logged since */
} CsLogOnce;

extern bool cs_log_once_should_log(CsLogOnce *state, int sqlerrcode,
								   const char *message);
extern int	cs_log_once_reset(CsLogOnce *state);

#endif							/* CS_LOG_ONCE_H */
