/*-------------------------------------------------------------------------
 *
 * stream_pacing.h
 *	  Declarations of stream_pacing.c: the pacing heuristics of the
 *	  archiver's stream (batching while catching up, trailing naps, the
 *	  group commit window, the pace of status updates).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_STREAM_PACING_H
#define CS_STREAM_PACING_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"

/*
 * The pacing state of a session.  "seen" arguments are the highest WAL
 * position the stream has seen (XLogData or keepalive walEnd).
 */
typedef struct CsPacing
{
	bool		local_server;	/* the archived server is this one */
	int			last_batch;		/* messages the last receive handled */
	int64		last_batch_bytes;	/* and their bytes */
	bool		napping;		/* batching while catching up */
	int			nap_us;			/* the current nap */
	int			empty_polls;	/* naps in a row that found nothing */
	bool		trailing;		/* nap after a batch: update_trailing() */
	int			trail_us;		/* the current trailing nap */
	bool		drained;		/* batching ended: the backlog is drained */
	bool		shared_catching_up; /* as the maintenance worker knows it */
	double		commit_rate;	/* commits/s archived */
	uint64		rate_base;		/* transactions at rate_since */
	TimestampTz rate_since;		/* start of the rate period; 0: none yet */
} CsPacing;

extern bool cs_pacing_catching_up(const CsPacing *p, XLogRecPtr seen);
extern void cs_pacing_share_catching_up(CsPacing *p, XLogRecPtr seen,
										TimestampTz now,
										TimestampTz last_message_at);
extern void cs_pacing_update_commit_rate(CsPacing *p, TimestampTz now,
										 uint64 transactions);
extern TimestampTz cs_pacing_rate_period_end(const CsPacing *p);
extern long cs_pacing_group_commit_ms(const CsPacing *p, XLogRecPtr seen);
extern int	cs_pacing_alive_status_ms(void);
extern int	cs_pacing_report_pace_ms(const CsPacing *p, XLogRecPtr seen);
extern void cs_pacing_after_idle_batch(CsPacing *p, XLogRecPtr seen);
extern int	cs_pacing_nap_us(const CsPacing *p);

#endif							/* CS_STREAM_PACING_H */
