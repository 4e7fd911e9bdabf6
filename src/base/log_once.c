/*-------------------------------------------------------------------------
 *
 * log_once.c
 *	  The log-once rule of the workers' error paths (docs/DESIGN.md,
 *	  "Sessions, errors and retries"): an error is logged unless it repeats
 *	  the last one logged (same SQLSTATE and the same text up to its first
 *	  quoted name, so that a fresh temporary file name does not make it
 *	  new) within five minutes; repeats are counted and the count is logged
 *	  with the next error that is logged.  Each worker keeps its own
 *	  CsLogOnce.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "base/log_once.h"

#define ERROR_REPEAT_SECS	300

/*
 * cs_log_once_should_log
 *	  Whether to log an error of SQLSTATE sqlerrcode (an int as in
 *	  ErrorData) and text message: false when it repeats state's last
 *	  logged error within five minutes (the repeat is then counted).  When
 *	  it returns true after repeats, it first logs (LOG) how many there
 *	  were.  Never raises.
 */
bool
cs_log_once_should_log(CsLogOnce *state, int sqlerrcode, const char *message)
{
	TimestampTz now = GetCurrentTimestamp();
	char		key[sizeof(state->key)];
	char	   *quote;

	snprintf(key, sizeof(key), "%d:%s", sqlerrcode, message ? message : "");
	quote = strchr(key, '"');
	if (quote)
		quote[1] = '\0';

	if (strcmp(key, state->key) == 0 &&
		!TimestampDifferenceExceeds(state->logged_at, now, ERROR_REPEAT_SECS * 1000))
	{
		state->suppressed++;
		return false;
	}
	if (state->suppressed > 0)
		ereport(LOG,
				(errmsg("the previous error repeated %d more times",
						state->suppressed)));
	state->suppressed = 0;
	strlcpy(state->key, key, sizeof(state->key));
	state->logged_at = now;
	return true;
}

/*
 * cs_log_once_reset
 *	  The failing operation succeeded: forget the last error, so that the
 *	  next one is logged.  Returns the number of repeats that were not
 *	  logged (an int), for the caller's "again after N failed attempts".
 */
int
cs_log_once_reset(CsLogOnce *state)
{
	int			suppressed = state->suppressed;

	state->key[0] = '\0';
	state->suppressed = 0;
	return suppressed;
}
