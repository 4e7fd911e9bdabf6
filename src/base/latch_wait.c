/*-------------------------------------------------------------------------
 *
 * latch_wait.c
 *	  The wait the maintenance worker and the uploader share between their
 *	  passes and for their backoff: on the latch, with postmaster death and
 *	  interrupts checked (WaitLatch(), as contrib/worker_spi waits).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "base/latch_wait.h"

/*
 * cs_latch_wait_ms
 *	  Wait on the latch for ms milliseconds (-1: no timeout).  With
 *	  until_timeout (a backoff), the latch alone does not end the wait: only
 *	  the timeout, a reload or SIGTERM (CHECK_FOR_INTERRUPTS()) does.
 */
void
cs_latch_wait_ms(long ms, bool until_timeout)
{
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);

	for (;;)
	{
		int			rc;
		long		left = ms;

		if (until_timeout)
		{
			left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), until);
			if (left <= 0)
				return;
		}
		rc = WaitLatch(MyLatch,
					   WL_LATCH_SET | WL_EXIT_ON_PM_DEATH |
					   (ms >= 0 ? WL_TIMEOUT : 0),
					   left, PG_WAIT_EXTENSION);
		if (rc & WL_LATCH_SET)
			ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (!until_timeout || ConfigReloadPending)
			return;
	}
}
