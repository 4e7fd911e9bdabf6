/*-------------------------------------------------------------------------
 *
 * stream.c
 *	  The durability state machine of an archiving session: what arrives on
 *	  the replication stream (XLogData, primary keepalives) goes into the
 *	  active segment, becomes durable by group commit or flush_interval,
 *	  and only then is reported to the server as flushed (durability rules
 *	  1 to 3 of docs/DESIGN.md).  All of it is one struct, StreamState, as
 *	  walreceiver.c keeps LogstreamResult; archiver.c owns the session
 *	  around it (connection, generation, errors, backoff).
 *
 *	  The receive loop is cut as LogicalRepApplyLoop() cuts its own:
 *	  cs_stream_receive() takes a batch of messages, cs_stream_periodic()
 *	  does what is due after it (flush, rotation, status update, keepalive
 *	  position), and cs_stream_wait() computes the idle timeout and waits.
 *	  Sealed segments are compressed beside it by the compressor worker
 *	  (compressor.c).
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
 * Sources: the Streaming Replication Protocol chapter of the PostgreSQL
 * documentation (XLogData 'w', Primary keepalive 'k', Standby status
 * update 'r'); LogicalRepApplyLoop() and send_feedback() in
 * src/backend/replication/logical/worker.c; XLogWalRcvProcessMsg() in
 * src/backend/replication/walreceiver.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "libpq/pqformat.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "replication/walreceiver.h"
#include "replication/walsender.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/pmsignal.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "archiver.h"
#include "compressor.h"
#include "ddl_history.h"
#include "generation_reader.h"
#include "guc.h"
#include "message_filter.h"
#include "pgoutput_parse.h"
#include "ri_monitor.h"
#include "segment_format.h"
#include "segment_writer.h"
#include "shmem_status.h"
#include "stream.h"
#include "walsender_conn.h"
#include "compat.h"

#define CATCHUP_BYTES		(4 * 1024 * 1024)
#define MAX_BATCH_MESSAGES	10000
/* the group commit window: see group_commit_ms() */
#define GROUP_COMMIT_MS		5	/* the window of a quiet stream */
#define GROUP_COMMIT_BUSY_MS	20	/* the window of a busy one */
#define QUIET_COMMIT_RATE	1200	/* commits/s up to which it is quiet */
#define BUSY_COMMIT_RATE	3000	/* commits/s from which it is busy */
#define RATE_PERIOD_MS		100 /* the commit rate is measured over this */
#define PUBLISH_MS			100 /* status() is refreshed this often */
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

/* XLogData: 'w', dataStart, walEnd, sendTime, then the payload */
#define XLOGDATA_HEADER_LEN		(1 + 3 * sizeof(int64))
/* Primary keepalive: 'k', walEnd, sendTime, replyRequested */
#define KEEPALIVE_LEN			(1 + 2 * sizeof(int64) + 1)

typedef struct StreamState
{
	WalReceiverConn *conn;		/* set while START_REPLICATION runs */
	WaitEventSet *wait;			/* latch, postmaster, socket */
	bool		writer_open;	/* the active segment is open */

	XLogRecPtr	position;		/* durable position of record, reported */
	XLogRecPtr	pending_position;	/* position of record of data added */
	XLogRecPtr	skip_before;	/* commit LSNs below this are archived */
	XLogRecPtr	received_lsn;	/* highest LSN of XLogData received */
	XLogRecPtr	keepalive_lsn;	/* walEnd of the newest keepalive */
	XLogRecPtr	unrecorded_keepalive;	/* eligible, not yet recorded */
	bool		in_txn;
	bool		skipping;
	bool		made_durable;	/* a flush succeeded in this session */

	int			last_batch;		/* messages the last receive handled */
	int64		last_batch_bytes;	/* and their bytes */
	bool		napping;		/* batching while catching up */
	int			nap_us;			/* the current nap */
	int			empty_polls;	/* naps in a row that found nothing */
	bool		trailing;		/* nap after a batch: update_trailing() */
	int			trail_us;		/* the current trailing nap */
	bool		drained;		/* batching ended: the backlog is drained */
	bool		shared_catching_up; /* as the compressor was last told */
	bool		report_owed;	/* a durable position not yet reported */
	double		commit_rate;	/* commits/s archived: update_commit_rate() */
	uint64		rate_base;		/* counters.transactions at rate_since */
	TimestampTz rate_since;		/* start of the rate period; 0: none yet */

	TimestampTz last_status_sent;
	TimestampTz last_position_record;
	TimestampTz unsynced_since;
	TimestampTz last_published;

	CsStreamCounters counters;	/* what status() shows */
} StreamState;

static StreamState st;

/*
 * Is the archiver more than bytes of WAL behind the local server's flush
 * position?  Only known for the local server (changestream.conninfo
 * empty).
 */
static bool
behind_by(uint64 bytes)
{
	XLogRecPtr	head;
	XLogRecPtr	seen;

	if (cs_conninfo[0] != '\0' || RecoveryInProgress())
		return false;
	head = GetFlushRecPtr(NULL);
	seen = Max(st.received_lsn, st.keepalive_lsn);	/* keepalives cover WAL
													 * of unpublished tables */
	return head > seen && head - seen > bytes;
}

/*
 * Catching up with a backlog: more than CATCHUP_BYTES behind, or
 * batching (which ends only once the stream is quiet).
 */
static bool
catching_up(void)
{
	return st.napping || behind_by(CATCHUP_BYTES);
}

/*
 * Tell the compressor when catching_up() changes: while the archiver
 * catches up, compression waits, within a bound (compressor.c), so that
 * the walsender and the archiver have the CPUs.  When catching up ends,
 * the commit rate is measured afresh: the drain's is not a commit rate.
 */
static void
share_catching_up(void)
{
	bool		now = catching_up();

	if (now == st.shared_catching_up)
		return;
	st.shared_catching_up = now;
	cs_compressor_status_set_catching_up(now);
	if (!now)
	{
		st.commit_rate = 0;
		st.rate_since = 0;
	}
}

/*
 * Measure the rate, in commits a second, at which transactions are
 * archived: over the time since the last measurement, once that is at
 * least RATE_PERIOD_MS (a quiet stream's period ends at its next
 * cs_stream_periodic() call, at most status_interval later).  The first
 * period starts at 0 commits a second, after a session starts, after a
 * backlog is drained (the drain's rate is not the commit rate) and after
 * the clock went back.  group_commit_ms() sizes its window by it.
 */
static void
update_commit_rate(TimestampTz now)
{
	long		ms;

	if (st.rate_since == 0 || now < st.rate_since)
	{
		st.commit_rate = 0;
		st.rate_since = now;
		st.rate_base = st.counters.transactions;
		return;
	}
	ms = TimestampDifferenceMilliseconds(st.rate_since, now);
	if (ms < RATE_PERIOD_MS)
		return;
	st.commit_rate = (st.counters.transactions - st.rate_base) * 1000.0 / ms;
	st.rate_since = now;
	st.rate_base = st.counters.transactions;
}

/*
 * The group commit interval, in ms: the least time between two flushes of
 * complete transactions once the stream is idle.  It is counted from the
 * last flush, not from the first transaction waiting: a commit that
 * arrives after a quiet spell is made durable at once, and only commits
 * arriving within the interval after a flush wait for the next one,
 * sharing its fsync and status update.
 *
 * Its length follows the commit rate (update_commit_rate()), as
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
 */
static long
group_commit_ms(void)
{
	double		share;
	long		window;

	if (catching_up())
		return cs_flush_interval_ms;
	share = (st.commit_rate - QUIET_COMMIT_RATE) /
		(BUSY_COMMIT_RATE - QUIET_COMMIT_RATE);
	share = Max(0.0, Min(1.0, share));
	window = GROUP_COMMIT_MS +
		(long) (share * (GROUP_COMMIT_BUSY_MS - GROUP_COMMIT_MS));
	return Min(cs_flush_interval_ms, window);
}

/* Show the session's progress in status(). */
static void
publish(TimestampTz now)
{
	st.counters.received_lsn = Max(st.received_lsn, st.keepalive_lsn);
	st.counters.flushed_lsn = st.position;
	st.counters.commit_rate = st.commit_rate;
	st.counters.group_commit_ms = (int) group_commit_ms();
	cs_status_publish_progress(&st.counters);
	st.last_published = now;
}

/*
 * The write LSN reported is what arrived as XLogData, never a keepalive's
 * walEnd that is not yet recorded: PostgreSQL's walsender sends keepalives
 * only while the reported write LSN is behind what it sent
 * (WalSndWaitForWal()), and those keepalives are what lets an idle slot
 * advance.
 */
static void
send_status(TimestampTz now)
{
	cs_send_status_update(st.conn, Max(st.received_lsn, st.position),
						  st.position, false);
	st.last_status_sent = now;
	st.report_owed = false;
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

/* The longest time, in ms, without any status update. */
static int
alive_status_ms(void)
{
	return status_ms_within_timeout(2);
}

/*
 * The least time, in ms, between two reports of a new durable position:
 * STATUS_PACE_MS, or catchup_status_ms() while catching up.
 */
static int
report_pace_ms(void)
{
	if (catching_up())
		return catchup_status_ms();
	return STATUS_PACE_MS;
}

/*
 * Report a new durable position, at once if the last status update is at
 * least report_pace_ms() old, else when it is (report_owed, sent by
 * cs_stream_periodic()).  Each report costs the walsender a wakeup and may
 * make it save the slot to disk (when it moves confirmed_flush_lsn past a
 * new restart point), and a busy stream flushes up to 200 times a second:
 * so a lone commit is reported at once, and those of a busy stream at
 * most every STATUS_PACE_MS, in the report of the newest flush.  While
 * catching up the pace is catchup_status_ms(), and the end of the backlog
 * is reported at once.
 */
static void
report_flushed(TimestampTz now)
{
	if (TimestampDifferenceExceeds(st.last_status_sent, now, report_pace_ms()))
		send_status(now);
	else
		st.report_owed = true;
}

/*
 * Make everything added durable, advance the reported position to the
 * position of record of what was added, and tell the server.
 */
static void
flush_and_report(TimestampTz now)
{
	cs_writer_flush();
	st.made_durable = true;
	st.position = st.pending_position;
	st.unsynced_since = 0;
	st.counters.last_flush_at = now;
	if (st.conn != NULL)
		report_flushed(now);
	publish(now);
}

/*
 * Once data has waited flush_interval, make it durable: inside a large
 * transaction only to spread its writeback (nothing new is reportable),
 * otherwise with a status update.
 */
static void
flush_if_due(TimestampTz now)
{
	if (st.unsynced_since == 0 ||
		!TimestampDifferenceExceeds(st.unsynced_since, now, cs_flush_interval_ms))
		return;
	if (st.in_txn)
	{
		cs_writer_flush();
		st.unsynced_since = 0;
	}
	else
		flush_and_report(now);
}

static void
add_entry(char kind, XLogRecPtr data_start, XLogRecPtr wal_end,
		  TimestampTz send_time, const char *data, uint32 len,
		  const CsMessageInfo *info, TimestampTz now)
{
	if (st.unsynced_since == 0)
		st.unsynced_since = now;
	cs_writer_add(kind, data_start, wal_end, send_time, data, len, info);
}

/* At a transaction boundary, seal the segment if it is due. */
static void
maybe_rotate(TimestampTz now)
{
	if (!st.in_txn && cs_writer_should_rotate(now))
	{
		cs_writer_rotate(st.pending_position);
		cs_status_set_segment(cs_writer_segment_index());
		cs_compressor_wake();	/* it compresses the sealed segment */
		st.made_durable = true;
		st.position = st.pending_position;
		st.unsynced_since = 0;
		st.counters.last_flush_at = now;
		report_flushed(now);
		publish(now);
	}
}

/*
 * Archive one pgoutput message unless it belongs to a transaction already
 * archived (its commit LSN is below skip_before: durability rule 4).
 */
static void
archive_message(const CsMessageInfo *info, XLogRecPtr data_start,
				XLogRecPtr wal_end, TimestampTz send_time,
				const char *payload, uint32 plen, TimestampTz now)
{
	switch (info->type)
	{
		case 'B':
			st.in_txn = true;
			st.skipping = info->lsn < st.skip_before;
			if (!st.skipping)
				add_entry(CS_ENTRY_MESSAGE, data_start, wal_end, send_time,
						  payload, plen, info, now);
			break;
		case 'C':
			if (!st.skipping)
			{
				add_entry(CS_ENTRY_MESSAGE, data_start, wal_end, send_time,
						  payload, plen, info, now);
				st.pending_position = Max(st.pending_position, info->end_lsn);
				st.counters.transactions++;
			}
			st.in_txn = false;
			st.skipping = false;
			maybe_rotate(now);
			break;
		case 'M':
			if (!info->transactional && !st.in_txn)
			{
				/*
				 * A non-transactional message is sent as soon as it is
				 * decoded, after every transaction that committed before
				 * it, so once durable, its LSN + 1 is a position of record:
				 * a restart there neither loses nor repeats it.
				 */
				if (info->lsn < st.skip_before)
					break;
				add_entry(CS_ENTRY_MESSAGE, data_start, wal_end, send_time,
						  payload, plen, info, now);
				st.pending_position = Max(st.pending_position, info->lsn + 1);
				break;
			}
			if (st.skipping)
				break;
			add_entry(CS_ENTRY_MESSAGE, data_start, wal_end, send_time,
					  payload, plen, info, now);
			break;
		default:
			/* noted even when skipped: a later change may need it */
			if (info->type == 'R' || info->type == 'Y')
				cs_writer_note_schema(payload, plen, info, !st.skipping);
			if (st.skipping)
				break;
			add_entry(CS_ENTRY_MESSAGE, data_start, wal_end, send_time,
					  payload, plen, info, now);
			break;
	}
}

/*
 * A Relation message (info: its OID, schema and name, cs_parse_pgoutput())
 * of a table named changestream.ddl_history: the archiver makes sure its
 * OID is recorded as the schema history's before the message is archived,
 * if it is the extension's (cs_archiver_history_relation()).
 */
static void
note_relation(const CsMessageInfo *info)
{
	if (info->nspname == NULL)
		return;
	if (cs_ddl_is_history_name(info->nspname, info->relname))
		cs_archiver_history_relation(info->oid);
}

/* One XLogData message (its type byte already read). */
static void
handle_xlogdata(StringInfo msg, TimestampTz now)
{
	XLogRecPtr	data_start;
	XLogRecPtr	wal_end;
	TimestampTz send_time;
	const char *payload;
	uint32		plen;
	CsMessageInfo info;

	if (msg->len < XLOGDATA_HEADER_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg_internal("invalid XLogData message of %d bytes", msg->len)));
	data_start = pq_getmsgint64(msg);
	wal_end = pq_getmsgint64(msg);
	send_time = pq_getmsgint64(msg);
	payload = &msg->data[msg->cursor];
	plen = msg->len - msg->cursor;
	if (!cs_parse_pgoutput(payload, plen, &info))
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("invalid pgoutput message of type \"%c\" (%u bytes)",
						plen > 0 ? payload[0] : '?', plen)));

	st.received_lsn = Max(st.received_lsn, Max(data_start, wal_end));
	/* changestream.message_prefixes (message_filter.c): not archived */
	if (info.type == 'M' && !cs_message_archived(info.prefix))
		return;
	if (info.type == 'R')
	{
		cs_ri_signal();			/* a relation changed: ri_monitor.c */
		note_relation(&info);
	}
	st.counters.last_message_at = now;
	st.counters.messages++;
	st.counters.bytes += plen;
	archive_message(&info, data_start, wal_end, send_time, payload, plen, now);
}

/*
 * Record the newest eligible keepalive walEnd as a position entry, make it
 * durable and report it, if status_interval has passed since the last one
 * (or the server asked for a reply).  Called on each keepalive and
 * periodically, so a skipped keepalive is recorded once the interval has
 * passed even if no other keepalive comes.
 */
static void
record_keepalive_position(TimestampTz now, TimestampTz send_time, bool force)
{
	if (st.in_txn || st.unrecorded_keepalive <= st.pending_position)
		return;
	if (!force &&
		!TimestampDifferenceExceeds(st.last_position_record, now,
									cs_status_interval_ms))
		return;
	add_entry(CS_ENTRY_POSITION, InvalidXLogRecPtr, st.unrecorded_keepalive,
			  send_time, NULL, 0, NULL, now);
	st.pending_position = st.unrecorded_keepalive;
	st.last_position_record = now;
	flush_and_report(now);
}

/*
 * A primary keepalive (its type byte already read).  With no transaction
 * open, its walEnd may become the position of record: it is written as a
 * position entry and made durable before it is reported (durability rule
 * 2).  At most one position entry per status_interval unless the server
 * asks for a reply.
 */
static void
handle_keepalive(StringInfo msg, TimestampTz now)
{
	XLogRecPtr	wal_end;
	TimestampTz send_time;
	bool		reply;

	if (msg->len < KEEPALIVE_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg_internal("invalid keepalive message of %d bytes", msg->len)));
	wal_end = pq_getmsgint64(msg);
	send_time = pq_getmsgint64(msg);
	reply = pq_getmsgbyte(msg) != 0;
	st.keepalive_lsn = Max(st.keepalive_lsn, wal_end);

	/*
	 * Reply before anything else: the walsender ends the connection when
	 * no reply reaches it within wal_sender_timeout, and an fdatasync can
	 * take seconds while the server writes heavily (t/005).
	 */
	if (reply)
		send_status(now);
	if (!st.in_txn && wal_end > st.pending_position)
	{
		st.unrecorded_keepalive = wal_end;
		record_keepalive_position(now, send_time, reply);
	}
}

/* Dispatch one message of the replication stream, as apply_dispatch(). */
static void
dispatch(char *buf, int len, TimestampTz now)
{
	StringInfoData msg;
	char		type;

	msg.data = buf;
	msg.len = len;
	msg.maxlen = -1;
	msg.cursor = 0;
	type = pq_getmsgbyte(&msg);
	if (type == 'w')
		handle_xlogdata(&msg, now);
	else if (type == 'k')
		handle_keepalive(&msg, now);
	else
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("unexpected message type \"%c\" in the replication stream",
						type)));
}

/*
 * Duties inside a long batch: flush what is due and keep the server
 * informed.  Sealed segments are compressed by the compressor worker.
 */
static void
batch_duties(TimestampTz now)
{
	flush_if_due(now);
	if (TimestampDifferenceExceeds(st.last_status_sent, now, alive_status_ms()))
		send_status(now);
	if (TimestampDifferenceExceeds(st.last_published, now, PUBLISH_MS))
		publish(now);
}

/*
 * cs_stream_reset
 *	  Forget the previous session: no connection, no open writer.  Called
 *	  at the start of a session and on its error path.
 */
void
cs_stream_reset(void)
{
	CsStreamCounters counters = st.counters;	/* they count across sessions */

	if (st.wait != NULL)
		FreeWaitEventSet(st.wait);
	cs_compressor_status_set_catching_up(false);
	memset(&st, 0, sizeof(st));
	st.counters = counters;
}

/*
 * cs_stream_writer_opened
 *	  The active segment is open and the archive's position of record is
 *	  position (an XLogRecPtr): streaming resumes there and transactions
 *	  committed below it are skipped (durability rule 4).
 */
void
cs_stream_writer_opened(XLogRecPtr position)
{
	st.writer_open = true;
	st.position = position;
	st.pending_position = position;
	st.skip_before = position;
	st.received_lsn = position;
}

/*
 * cs_stream_is_streaming
 *	  Has START_REPLICATION succeeded in this session?
 */
bool
cs_stream_is_streaming(void)
{
	return st.conn != NULL;
}

/*
 * cs_stream_position
 *	  The session's durable position of record (what status updates
 *	  report as flushed).
 */
XLogRecPtr
cs_stream_position(void)
{
	return st.position;
}

/*
 * cs_stream_in_transaction
 *	  Is a transaction being received (between its BEGIN and COMMIT)?
 */
bool
cs_stream_in_transaction(void)
{
	return st.in_txn;
}

/*
 * cs_stream_made_durable
 *	  Has this session made anything durable (a flush or a rotation
 *	  succeeded)?  Until then it has not proved that it can archive.
 */
bool
cs_stream_made_durable(void)
{
	return st.made_durable;
}

/*
 * cs_stream_started
 *	  START_REPLICATION succeeded on conn: from now on status updates go to
 *	  it.  Publishes the position and sends a first status update.
 */
void
cs_stream_started(WalReceiverConn *conn)
{
	TimestampTz now = GetCurrentTimestamp();

	st.conn = conn;
	publish(now);
	send_status(now);
	st.last_position_record = now;
}

/*
 * cs_stream_receive
 *	  Receive and archive messages until none is waiting (returns true:
 *	  idle), or MAX_BATCH_MESSAGES have been handled or a reload is pending
 *	  (returns false).  *fd is set to the connection's socket.  Raises
 *	  connection_failure when the server ends the stream,
 *	  protocol_violation on a malformed message,
 *	  and what the writer raises.
 */
bool
cs_stream_receive(pgsocket *fd)
{
	TimestampTz now = GetCurrentTimestamp();
	int			n = 0;

	st.last_batch_bytes = 0;
	for (;;)
	{
		char	   *buf;
		int			len = walrcv_receive(st.conn, &buf, fd);

		st.last_batch = n;
		if (len == 0)
			return true;
		if (len < 0)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("the server ended the replication stream"),
					 errhint("The archiver reconnects and resumes from the archive's position of record.")));
		if ((++n & 31) == 0)
			now = GetCurrentTimestamp();
		st.last_batch_bytes += len;
		dispatch(buf, len, now);

		if ((n & 31) == 0)
		{
			batch_duties(now);
			CHECK_FOR_INTERRUPTS();
			if (n >= MAX_BATCH_MESSAGES || ConfigReloadPending)
			{
				st.last_batch = n;
				return false;
			}
		}
	}
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
 * st.drained), or when
 * polls find few messages and the archiver is no longer behind (a steady
 * stream it keeps up with).
 */
static void
update_batching(void)
{
	int			n = st.last_batch;

	if (!st.napping)
	{
		if (n > 0 && behind_by(NAP_BEHIND_BYTES))
		{
			st.napping = true;
			st.nap_us = NAP_START_US;
			st.empty_polls = 0;
		}
		return;
	}
	if (n == 0)
	{
		if (++st.empty_polls >= NAP_EMPTY_POLLS)
		{
			/* a lull of the walsender is not the end of the backlog */
			st.napping = false;
			st.drained = !behind_by(NAP_BEHIND_BYTES);
		}
		return;
	}
	st.empty_polls = 0;
	if (n < NAP_TARGET_MESSAGES / 4 && !behind_by(NAP_BEHIND_BYTES))
		st.napping = false;
	else
		st.nap_us = adapt_nap(st.nap_us, n > NAP_TARGET_MESSAGES * 2,
							  n < NAP_TARGET_MESSAGES / 2, NAP_MAX_US);
}

/*
 * The trailing nap of a busy stream, decided after each batch that
 * emptied the socket, outside batching while catching up.  A batch that
 * found messages is followed by a nap of st.trail_us, at most
 * TRAIL_MAX_US, and a poll, instead of a wait on the socket; a poll that
 * finds nothing ends it.  A consumer asleep on its socket is woken by the
 * walsender's send() of the first message of every transaction, at a cost
 * to both processes (about 1.3 wakeups per transaction at 3,000 tps); one
 * that naps is not on the socket's wait queue, and wakes on its timer at
 * most once per TRAIL_MAX_US to take what has arrived.  The nap starts at
 * NAP_MAX_US; it is made shorter when a poll finds more than
 * 2 * NAP_TARGET_MESSAGES or TRAIL_FULL_BYTES (the socket must not fill:
 * large rows fill it with few messages, and with a remote conninfo, where
 * catching up is never detected, this nap is the only one), and longer, up
 * to TRAIL_MAX_US, when it finds fewer than NAP_TARGET_MESSAGES / 2 and
 * less than TRAIL_FULL_BYTES / 4.  What is due (a group commit's flush, a status
 * update) is done before the nap, so a commit's durability waits for the
 * nap only when it arrives during one: at most TRAIL_MAX_US more.
 */
static void
update_trailing(void)
{
	int			n = st.last_batch;
	int64		bytes = st.last_batch_bytes;

	if (st.napping || n == 0)
	{
		st.trailing = false;
		return;
	}
	if (st.trail_us == 0)
		st.trail_us = NAP_MAX_US;
	else if (st.trailing)
		st.trail_us = adapt_nap(st.trail_us,
								n > NAP_TARGET_MESSAGES * 2 || bytes > TRAIL_FULL_BYTES,
								n < NAP_TARGET_MESSAGES / 2 && bytes < TRAIL_FULL_BYTES / 4,
								TRAIL_MAX_US);
	st.trailing = true;
}

/*
 * cs_stream_periodic
 *	  What is due after a batch (idle: the stream has nothing waiting).
 *	  Once the stream is idle with complete transactions pending, they are
 *	  made durable as soon as the group commit interval (group_commit_ms())
 *	  has passed since the last flush, so that the transactions of a burst
 *	  share one fsync and one status update instead of paying one each;
 *	  at once when a drained backlog ends batching (update_batching()), as
 *	  there is nothing left to share the fsync with.
 */
void
cs_stream_periodic(TimestampTz now, bool idle)
{
	update_commit_rate(now);
	if (idle)
	{
		update_batching();
		update_trailing();
		share_catching_up();	/* before the drained backlog's flush */
	}
	if (idle && !st.in_txn && cs_writer_unsynced() &&
		(st.drained ||
		 TimestampDifferenceExceeds(st.counters.last_flush_at, now,
									group_commit_ms())))
		flush_and_report(now);
	else
		flush_if_due(now);
	if (st.report_owed && st.conn != NULL &&
		(st.drained ||
		 TimestampDifferenceExceeds(st.last_status_sent, now, report_pace_ms())))
		send_status(now);		/* the last flush's report was paced */
	st.drained = false;
	maybe_rotate(now);
	if (TimestampDifferenceExceeds(st.last_status_sent, now, alive_status_ms()))
		send_status(now);
	if (TimestampDifferenceExceeds(st.last_published, now, PUBLISH_MS))
		publish(now);
	record_keepalive_position(now, now, false);
	share_catching_up();
}

/*
 * How long the idle stream may wait (ms): until status_interval, an owed
 * report of a durable position (report_flushed()), the next keepalive
 * position record or the end of the flush window.
 */
static long
idle_timeout(TimestampTz now)
{
	long		timeout = alive_status_ms();

	if (st.report_owed)
	{
		long		left = report_pace_ms() -
			TimestampDifferenceMilliseconds(st.last_status_sent, now);

		timeout = Min(timeout, Max(left, 1));
	}

	if (st.unrecorded_keepalive > st.pending_position && !st.in_txn)
	{
		long		left = cs_status_interval_ms -
			TimestampDifferenceMilliseconds(st.last_position_record, now);

		timeout = Min(timeout, Max(left, 1));
	}
	if (st.unsynced_since != 0)
	{
		long		window;
		long		elapsed;

		if (st.in_txn)
		{
			window = cs_flush_interval_ms;
			elapsed = TimestampDifferenceMilliseconds(st.unsynced_since, now);
		}
		else
		{
			window = group_commit_ms();
			elapsed = TimestampDifferenceMilliseconds(st.counters.last_flush_at,
													  now);
		}
		timeout = Min(timeout, Max(window - elapsed, 1));
	}
	return timeout;
}

/*
 * Sleep us microseconds instead of waiting on the socket: st.nap_us while
 * batching, st.trail_us for a trailing nap.  pg_usleep(), not
 * WaitEventSetWait(): the latter's timeout is in milliseconds, and while
 * catching up a 1 ms nap lets the walsender fill the socket and block (the
 * wakeup this avoids, on its other side).  The nap delays nothing that
 * matters: a signal (SIGTERM, SIGHUP) interrupts it and the loop checks
 * for interrupts, reloads and requests right after.  Nothing depends on
 * the wait on the latch returning: the loop polls every request it serves
 * (session_should_end(), the snapshot schedule), and a latch set during
 * naps stays set for the next wait, which it merely shortens.  Keepalives
 * are answered within TRAIL_MAX_US.
 * Postmaster death is checked after each nap, as
 * WL_EXIT_ON_PM_DEATH would.
 */
static void
nap(int us)
{
	pgstat_report_wait_start(PG_WAIT_EXTENSION);
	pg_usleep(us);
	pgstat_report_wait_end();
	if (!PostmasterIsAlive())
		proc_exit(1);
}

/*
 * cs_stream_wait
 *	  The stream is idle: wait for the socket fd, the latch or the idle
 *	  timeout; while batching (update_batching()) or after a batch of a
 *	  busy stream (update_trailing()), nap instead.  One wait
 *	  event set for the whole session: WaitLatchOrSocket() would build and
 *	  tear down an epoll set at every wait.
 */
void
cs_stream_wait(pgsocket fd, TimestampTz now)
{
	long		timeout;
	WaitEvent	event;
	int			rc;

	if (st.napping || st.trailing)
	{
		nap(st.napping ? st.nap_us : st.trail_us);
		return;
	}
	timeout = idle_timeout(now);

	if (st.wait == NULL)
	{
		st.wait = cs_create_wait_event_set(3);
		AddWaitEventToSet(st.wait, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(st.wait, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET,
						  NULL, NULL);
		AddWaitEventToSet(st.wait, WL_SOCKET_READABLE, fd, NULL, NULL);
	}
	rc = WaitEventSetWait(st.wait, timeout, &event, 1, PG_WAIT_EXTENSION);
	if (rc > 0 && (event.events & WL_LATCH_SET))
		ResetLatch(MyLatch);
}

/*
 * cs_stream_finish
 *	  A clean end of session: make everything durable, report it, and close
 *	  the active segment.
 */
void
cs_stream_finish(void)
{
	TimestampTz now = GetCurrentTimestamp();

	flush_and_report(now);
	if (st.report_owed && st.conn != NULL)
		send_status(now);		/* not paced: the session ends */
	cs_writer_close();
	st.writer_open = false;
	st.shared_catching_up = false;
	cs_compressor_status_set_catching_up(false);
}

/*
 * cs_stream_exit
 *	  On SIGTERM or another FATAL (before_shmem_exit): make what was
 *	  received durable and send a last status update (durability rule 6).
 *	  Returns with the connection untouched; the caller closes it.
 */
void
cs_stream_exit(void)
{
	cs_compressor_status_set_catching_up(false);	/* first: the flush may fail */
	if (st.writer_open)
	{
		st.writer_open = false;
		cs_writer_flush();
		st.position = st.pending_position;
		if (st.conn != NULL)
		{
			WalReceiverConn *conn = st.conn;

			st.conn = NULL;
			cs_send_status_update(conn, Max(st.received_lsn, st.position),
								  st.position, false);
		}
		cs_writer_close();
	}
	publish(GetCurrentTimestamp());
}
