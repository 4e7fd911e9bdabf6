/*-------------------------------------------------------------------------
 *
 * stream_pacing.c
 *	  The pacing heuristics of the archiver's stream, apart from its
 *	  durability rules (stream.c): whether the archiver is catching up
 *	  with a backlog, batching with short naps while it does, the trailing
 *	  nap of a busy stream, the commit rate and the group commit window it
 *	  sizes, and the pace of status updates.  They decide when the stream
 *	  flushes, reports and waits, never what is durable or reported: a
 *	  report is always of a durable position (docs/DESIGN.md, durability
 *	  rules 1 to 3), whatever the pace.
 *
 *	  While catching up with a backlog the stream batches (issue 13): a
 *	  consumer that empties its socket and sleeps on it makes the
 *	  walsender wake it for every few messages, and those wakeups are
 *	  what the walsender's CPU follows.  So once the archiver is far
 *	  behind the server, an empty socket is met with a short nap on a
 *	  timer, sized to find a few dozen messages waiting, instead of a wait
 *	  on the socket; a few empty polls in a row end it.  The same state
 *	  stretches the group commit window to flush_interval and keeps status
 *	  updates to status_interval, and its end (the backlog is drained)
 *	  makes what arrived durable at once.  A busy stream that keeps up
 *	  naps too, up to 2 ms after each batch, so that the walsender does
 *	  not wake the worker for every transaction (update_trailing()).
 *
 * Sources: WalSndCheckTimeOut() and WalSndWaitForWal() in
 * src/backend/replication/walsender.c (why status updates are paced
 * within wal_sender_timeout); commit_delay and commit_siblings in
 * src/backend/access/transam/xlog.c (a flush delay only under load).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "replication/walsender.h"
#include "utils/timestamp.h"

#include "base/guc.h"
#include "base/shmem_status.h"
#include "worker/stream_pacing.h"

#define CATCHUP_BYTES		(4 * 1024 * 1024)
#define CATCHUP_QUIET_MS	1000	/* see cs_pacing_share_catching_up() */
/* the group commit window: see group_commit_ms() */
#define GROUP_COMMIT_MS		5	/* the window of a quiet stream */
#define GROUP_COMMIT_BUSY_MS	20	/* the window of a busy one */
#define QUIET_COMMIT_RATE	1200	/* commits/s up to which it is quiet */
#define BUSY_COMMIT_RATE	3000	/* commits/s from which it is busy */
#define RATE_PERIOD_MS		100 /* the commit rate is measured over this */
#define STATUS_PACE_MS		20	/* see report_flushed() */

/* batching while catching up: see update_batching() */
#define NAP_BEHIND_BYTES	(256 * 1024)
#define NAP_TARGET_MESSAGES	64
#define NAP_START_US		150
#define NAP_MIN_US			50
#define NAP_MAX_US			300 /* the walsender fills the socket in ~600 us */
#define NAP_EMPTY_POLLS		3

/* the trailing nap of a busy stream: see update_trailing() */
#define TRAIL_MAX_US		2000	/* 1 ms cost the worker 11% more CPU */
#define TRAIL_FULL_BYTES	(64 * 1024) /* a quarter of a socket buffer */

/*
 * Is the archiver, having seen WAL up to seen (keepalives cover WAL of
 * unpublished tables), more than bytes behind the local server's flush
 * position?  Only known for the local server (the session's conninfo
 * empty).
 */
static bool
behind_by(const CsPacing *p, XLogRecPtr seen, uint64 bytes)
{
	XLogRecPtr	head;

	if (!p->local_server || RecoveryInProgress())
		return false;
	head = GetFlushRecPtr(NULL);
	return head > seen && head - seen > bytes;
}

/*
 * cs_pacing_catching_up
 *	  Catching up with a backlog: more than CATCHUP_BYTES behind, or
 *	  batching (which ends only once the stream is quiet).
 */
bool
cs_pacing_catching_up(const CsPacing *p, XLogRecPtr seen)
{
	return p->napping || behind_by(p, seen, CATCHUP_BYTES);
}

/*
 * cs_pacing_share_catching_up
 *	  Tell the maintenance worker when catching up starts or ends: while the
 *	  archiver catches up, compression waits, within a bound
 *	  (maintenance.c), so that the walsender and the archiver have the
 *	  CPUs.  For the maintenance worker the archiver catches up only while
 *	  cs_pacing_catching_up() says so and a message arrived in the last
 *	  CATCHUP_QUIET_MS (last_message_at; now, both timestamps): a stream
 *	  that has gone quiet leaves no CPU to share, even when the server's
 *	  WAL is ahead of what the walsender has sent (WAL no message comes
 *	  from, such as a vacuum's, or a keepalive still to come), and without
 *	  this a quiet stream could hold compression back until its next
 *	  message.  When catching up ends, the commit rate is measured afresh:
 *	  the drain's is not a commit rate.
 */
void
cs_pacing_share_catching_up(CsPacing *p, XLogRecPtr seen, TimestampTz now,
							TimestampTz last_message_at)
{
	bool		catching_up = cs_pacing_catching_up(p, seen) &&
		!TimestampDifferenceExceeds(last_message_at, now, CATCHUP_QUIET_MS);

	if (catching_up == p->shared_catching_up)
		return;
	p->shared_catching_up = catching_up;
	cs_maintenance_status_set_catching_up(catching_up);
	if (!catching_up)
	{
		p->commit_rate = 0;
		p->rate_since = 0;
	}
}

/*
 * cs_pacing_update_commit_rate
 *	  Measure the rate, in commits a second, at which transactions are archived
 *	  (transactions: the count archived so far): over the time since the last
 *	  measurement, once that is at least RATE_PERIOD_MS (a period with commits
 *	  is a deadline of the stream, cs_pacing_rate_period_end(), so a stream
 *	  that goes quiet has its rate fall to 0 one period later).  The first
 *	  period starts at 0 commits a second, after a session starts, after a
 *	  backlog is drained (the drain's rate is not the commit rate) and after
 *	  the clock went back.  cs_pacing_group_commit_ms() sizes its window by
 *	  it.
 */
void
cs_pacing_update_commit_rate(CsPacing *p, TimestampTz now,
							 uint64 transactions)
{
	long		ms;

	if (p->rate_since == 0 || now < p->rate_since)
	{
		p->commit_rate = 0;
		p->rate_since = now;
		p->rate_base = transactions;
		return;
	}
	ms = TimestampDifferenceMilliseconds(p->rate_since, now);
	if (ms < RATE_PERIOD_MS)
		return;
	p->commit_rate = (transactions - p->rate_base) * 1000.0 / ms;
	p->rate_since = now;
	p->rate_base = transactions;
}

/*
 * cs_pacing_rate_period_end
 *	  When the current rate period ends, for a stream whose commit rate is
 *	  not 0: a stream that goes quiet then has its rate measured again (it
 *	  falls to what it is) instead of keeping a busy period's rate, and the
 *	  group commit window that follows from it, until its next message.
 *	  DT_NOEND while the rate is 0: there is nothing to correct.
 */
TimestampTz
cs_pacing_rate_period_end(const CsPacing *p)
{
	if (p->commit_rate <= 0 || p->rate_since == 0)
		return DT_NOEND;
	return TimestampTzPlusMilliseconds(p->rate_since, RATE_PERIOD_MS);
}

/*
 * cs_pacing_group_commit_ms
 *	  The group commit interval, in ms: the least time between two flushes of
 * complete transactions once the stream is idle.  It is counted from the
 * last flush, not from the first transaction waiting: a commit that
 * arrives after a quiet spell is made durable at once, and only commits
 * arriving within the interval after a flush wait for the next one,
 * sharing its fsync and status update.
 *
 * Its length follows the commit rate (cs_pacing_update_commit_rate()), as
 * PostgreSQL's commit_delay applies only once commit_siblings transactions
 * are active: GROUP_COMMIT_MS up to QUIET_COMMIT_RATE commits a second,
 * GROUP_COMMIT_BUSY_MS from BUSY_COMMIT_RATE on, linear in between, and
 * never more than flush_interval.  So the group commit fsyncs are at most
 * 200 a second on a quiet stream and 50 on a busy one, and a complete
 * transaction waits at most the window (5 to 20 ms) plus a trailing nap
 * (update_trailing(), at most TRAIL_MAX_US); the rate it follows is at
 * most one period (RATE_PERIOD_MS) old when it is busy.  Why: a busy primary
 * flushes its own WAL thousands of times a second on the same disk, and
 * the archive's fdatasyncs delay those flushes, and so its commits.
 * Measured on the benchmark machine (README, Benchmarks): each archive
 * fdatasync took 0.18 ms (median) at 1,000 tps but 0.56 ms under a
 * saturating pgbench, and a 20 ms window there raised the primary's TPS
 * by 13% (median of 4 interleaved rounds) over a 5 ms one.
 *
 * While catching up with a backlog the lulls are the walsender decoding,
 * not the end of the stream: then flush_interval applies, and the
 * walsender is spared a status update every few ms.
 *
 * With changestream.synchronous there is no window: commits waiting in
 * synchronous replication for the archiver wait for its flush, so it
 * flushes as soon as the socket is drained (commits that arrive during one
 * fdatasync share the next, as PostgreSQL's own WAL flush does).
 */
long
cs_pacing_group_commit_ms(const CsPacing *p, XLogRecPtr seen)
{
	double		share;
	long		window;

	if (cs_synchronous)
		return 0;				/* flush once the socket is drained */
	if (cs_pacing_catching_up(p, seen))
		return cs_flush_interval_ms;
	share = (p->commit_rate - QUIET_COMMIT_RATE) /
		(BUSY_COMMIT_RATE - QUIET_COMMIT_RATE);
	share = Max(0.0, Min(1.0, share));
	window = GROUP_COMMIT_MS +
		(long) (share * (GROUP_COMMIT_BUSY_MS - GROUP_COMMIT_MS));
	return Min(cs_flush_interval_ms, window);
}

/*
 * status_interval, in ms, but at most wal_sender_timeout / parts.  Without
 * a reply within that timeout the walsender ends the connection
 * (WalSndCheckTimeOut() in walsender.c), and its keepalive asking for a
 * reply may sit behind megabytes of data in the socket, so the worker's
 * own reports must keep the connection alive.  The timeout is this
 * process's own setting: the local server's.
 */
static int
status_ms_within_timeout(int parts)
{
	if (wal_sender_timeout > 0)
		return Min(cs_status_interval_ms, wal_sender_timeout / parts);
	return cs_status_interval_ms;
}

/*
 * How often, in ms, flushes are reported while catching up: at least four
 * times per wal_sender_timeout.  Catching up is only detected against the
 * local server (behind_by()).
 */
static int
catchup_status_ms(void)
{
	return status_ms_within_timeout(4);
}

/*
 * cs_pacing_alive_status_ms
 *	  The longest time, in ms, without any status update.
 */
int
cs_pacing_alive_status_ms(void)
{
	return status_ms_within_timeout(2);
}

/*
 * cs_pacing_report_pace_ms
 *	  The least time, in ms, between two reports of a new durable
 *	  position: STATUS_PACE_MS, or catchup_status_ms() while catching up
 *	  (stream.c's report_flushed()); 0 with changestream.synchronous, where
 *	  a commit waiting for the archiver waits for this report.
 */
int
cs_pacing_report_pace_ms(const CsPacing *p, XLogRecPtr seen)
{
	if (cs_synchronous)
		return 0;				/* report each flush at once */
	if (cs_pacing_catching_up(p, seen))
		return catchup_status_ms();
	return STATUS_PACE_MS;
}

/*
 * The next nap, in us, after one of us: a quarter shorter (at least
 * NAP_MIN_US) when the poll found too much, a quarter longer (at most
 * max_us) when it found too little, else the same.  Serves both naps,
 * update_batching()'s and update_trailing()'s.
 */
static int
adapt_nap(int us, bool too_full, bool too_empty, int max_us)
{
	if (too_full)
		return Max(us - us / 4, NAP_MIN_US);
	if (too_empty)
		return Min(us + us / 4, max_us);
	return us;
}

/*
 * Batching while catching up, decided after each batch that emptied the
 * socket from what that batch held.  It starts when a batch found
 * messages and the archiver is more than NAP_BEHIND_BYTES behind the
 * server (never at a steady 1,000 tps, which keeps it a few kB behind).
 * The nap is adapted, within NAP_MIN_US and NAP_MAX_US, so that a poll
 * finds about NAP_TARGET_MESSAGES.  Batching ends after NAP_EMPTY_POLLS
 * empty polls in a row (if no longer behind, the backlog is drained:
 * p->drained), or when
 * polls find few messages and the archiver is no longer behind (a steady
 * stream it keeps up with).
 */
static void
update_batching(CsPacing *p, XLogRecPtr seen)
{
	int			n = p->last_batch;

	if (!p->napping)
	{
		if (n > 0 && behind_by(p, seen, NAP_BEHIND_BYTES))
		{
			p->napping = true;
			p->nap_us = NAP_START_US;
			p->empty_polls = 0;
		}
		return;
	}
	if (n == 0)
	{
		if (++p->empty_polls >= NAP_EMPTY_POLLS)
		{
			/* a lull of the walsender is not the end of the backlog */
			p->napping = false;
			p->drained = !behind_by(p, seen, NAP_BEHIND_BYTES);
		}
		return;
	}
	p->empty_polls = 0;
	if (n < NAP_TARGET_MESSAGES / 4 && !behind_by(p, seen, NAP_BEHIND_BYTES))
		p->napping = false;
	else
		p->nap_us = adapt_nap(p->nap_us, n > NAP_TARGET_MESSAGES * 2,
							  n < NAP_TARGET_MESSAGES / 2, NAP_MAX_US);
}

/*
 * The trailing nap of a busy stream, decided after each batch that emptied the
 * socket, outside batching while catching up.  A batch that found messages is
 * followed by a nap of p->trail_us, at most TRAIL_MAX_US, and a poll, instead
 * of a wait on the socket; a poll that finds nothing ends it.  A consumer
 * asleep on its socket is woken by the walsender's send() of the first message
 * of every transaction, at a cost to both processes (about 1.3 wakeups per
 * transaction at 3,000 tps); one that naps is not on the socket's wait queue,
 * and wakes on its timer at most once per TRAIL_MAX_US to take what has
 * arrived.  The nap starts at NAP_MAX_US; it is made shorter when a poll finds
 * more than 2 * NAP_TARGET_MESSAGES or TRAIL_FULL_BYTES (the socket must not
 * fill: large rows fill it with few messages, and with a remote conninfo,
 * where catching up is never detected, this nap is the only one), and longer,
 * up to TRAIL_MAX_US, when it finds fewer than NAP_TARGET_MESSAGES / 2 and
 * less than TRAIL_FULL_BYTES / 4.  What is due (a group commit's flush, a
 * status update) is done before the nap, so a commit's durability waits for
 * the nap only when it arrives during one: at most TRAIL_MAX_US more.  With
 * changestream.synchronous there is no trailing nap: the commits waiting for
 * the archiver would wait for it too.
 */
static void
update_trailing(CsPacing *p)
{
	int			n = p->last_batch;
	int64		bytes = p->last_batch_bytes;

	if (p->napping || n == 0 || cs_synchronous)
	{
		p->trailing = false;
		return;
	}
	if (p->trail_us == 0)
		p->trail_us = NAP_MAX_US;
	else if (p->trailing)
		p->trail_us = adapt_nap(p->trail_us,
								n > NAP_TARGET_MESSAGES * 2 || bytes > TRAIL_FULL_BYTES,
								n < NAP_TARGET_MESSAGES / 2 && bytes < TRAIL_FULL_BYTES / 4,
								TRAIL_MAX_US);
	p->trailing = true;
}

/*
 * cs_pacing_after_idle_batch
 *	  After a batch that emptied the socket (its size in p->last_batch and
 *	  p->last_batch_bytes): decide batching and the trailing nap.
 */
void
cs_pacing_after_idle_batch(CsPacing *p, XLogRecPtr seen)
{
	update_batching(p, seen);
	update_trailing(p);
}

/*
 * cs_pacing_nap_us
 *	  The nap, in us, the idle stream takes instead of waiting on its
 *	  socket: the batching nap, the trailing nap, or 0 for none.
 */
int
cs_pacing_nap_us(const CsPacing *p)
{
	if (p->napping)
		return p->nap_us;
	if (p->trailing)
		return p->trail_us;
	return 0;
}
