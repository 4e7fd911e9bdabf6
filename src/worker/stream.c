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
 *	  Sealed segments are compressed beside it by the maintenance worker
 *	  (maintenance.c).
 *
 *	  When it flushes, reports and waits is paced by stream_pacing.c
 *	  (batching while catching up, trailing naps, the group commit window,
 *	  the pace of status updates); the deadlines those give are one table
 *	  here (StreamWakeup), as walreceiver.c's wakeup[].  What is durable
 *	  and what may be reported is decided here alone: with
 *	  changestream.replica_durability = remote, no more than the replica's
 *	  bucket holds (confirmable()).
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

#include "libpq/pqformat.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "replication/walreceiver.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/pmsignal.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "archive/pgoutput_parse.h"
#include "archive/schema_history.h"
#include "archive/segment_format.h"
#include "archive/segment_writer.h"
#include "base/guc.h"
#include "base/shmem_status.h"
#include "replica/replica_status.h"
#include "worker/message_filter.h"
#include "worker/recapture.h"
#include "worker/ri_monitor.h"
#include "worker/stream.h"
#include "worker/stream_pacing.h"
#include "worker/walsender_conn.h"
#include "base/compat.h"

#define MAX_BATCH_MESSAGES	10000
#define PUBLISH_MS			100 /* status() is refreshed this often */

/* XLogData: 'w', dataStart, walEnd, sendTime, then the payload */
#define XLOGDATA_HEADER_LEN		(1 + 3 * sizeof(int64))
/* Primary keepalive: 'k', walEnd, sendTime, replyRequested */
#define KEEPALIVE_LEN			(1 + 2 * sizeof(int64) + 1)

typedef struct StreamState
{
	WalReceiverConn *conn;		/* set while START_REPLICATION runs */
	CsHistoryRelationHook on_history_relation;	/* the session owner's */
	CsHandoffHook on_handoff;	/* the session owner's */
	XLogRecPtr	handoff_lsn;	/* a new generation starts here: the
								 * hand-off (docs/DESIGN.md section 6);
								 * InvalidXLogRecPtr: none pending */
	WaitEventSet *wait;			/* latch, postmaster, socket */
	bool		writer_open;	/* the active segment is open */

	XLogRecPtr	position;		/* durable position of record, reported */
	XLogRecPtr	pending_position;	/* position of record of data added */
	TimestampTz pending_commit_time;	/* commit time of the newest
										 * transaction added */
	XLogRecPtr	skip_before;	/* commit LSNs below this are archived */
	XLogRecPtr	received_lsn;	/* highest LSN of XLogData received */
	XLogRecPtr	keepalive_lsn;	/* walEnd of the newest keepalive */
	XLogRecPtr	unrecorded_keepalive;	/* eligible, not yet recorded */
	bool		in_txn;
	bool		skipping;
	bool		made_durable;	/* a flush succeeded in this session */

	CsPacing	pacing;			/* when to flush, report, nap: stream_pacing.c */
	bool		report_owed;	/* a durable position not yet reported */
	XLogRecPtr	reported;		/* the flush LSN last reported */

	TimestampTz last_status_sent;
	TimestampTz last_position_record;
	TimestampTz unsynced_since;
	TimestampTz last_published;

	CsStreamCounters counters;	/* what status() shows */
} StreamState;

static StreamState st;

/*
 * The stream's deadlines, as walreceiver.c's wakeup[]: each is a time
 * computed from the session's state by wakeup_time(), and armed
 * (wakeup_armed()) while something waits for it.  The duties of
 * cs_stream_periodic() and batch_duties() run once their deadline has
 * passed; the idle stream waits until the earliest armed one
 * (idle_timeout()).
 */
typedef enum StreamWakeup
{
	WAKEUP_STATUS,				/* a status update keeps the connection alive */
	WAKEUP_REPORT,				/* an owed report of a durable position */
	WAKEUP_KEEPALIVE_RECORD,	/* the next keepalive position record */
	WAKEUP_FLUSH,				/* flush_interval since the oldest unsynced
								 * data */
	WAKEUP_GROUP_COMMIT,		/* the group commit window after a flush */
	WAKEUP_COMMIT_RATE,			/* the end of a rate period with commits */
	NUM_STREAM_WAKEUPS
} StreamWakeup;

/* The highest WAL position seen: XLogData, or a keepalive's walEnd. */
static XLogRecPtr
seen_lsn(void)
{
	return Max(st.received_lsn, st.keepalive_lsn);
}

/* The group commit window, in ms (stream_pacing.c). */
static long
group_commit_ms(void)
{
	return cs_pacing_group_commit_ms(&st.pacing, seen_lsn());
}

/* The least time, in ms, between two reports (stream_pacing.c). */
static int
report_pace_ms(void)
{
	return cs_pacing_report_pace_ms(&st.pacing, seen_lsn());
}

/* The time of a deadline (see StreamWakeup). */
static TimestampTz
wakeup_time(StreamWakeup which)
{
	switch (which)
	{
		case WAKEUP_STATUS:
			return TimestampTzPlusMilliseconds(st.last_status_sent,
											   cs_pacing_alive_status_ms());
		case WAKEUP_REPORT:
			return TimestampTzPlusMilliseconds(st.last_status_sent,
											   report_pace_ms());
		case WAKEUP_KEEPALIVE_RECORD:
			/* synchronous: at once, it may release other databases' commits */
			return cs_synchronous ? st.last_position_record :
				TimestampTzPlusMilliseconds(st.last_position_record,
											cs_status_interval_ms);
		case WAKEUP_FLUSH:
			return TimestampTzPlusMilliseconds(st.unsynced_since,
											   cs_flush_interval_ms);
		case WAKEUP_GROUP_COMMIT:
			return TimestampTzPlusMilliseconds(st.counters.last_flush_at,
											   group_commit_ms());
		case WAKEUP_COMMIT_RATE:
			return cs_pacing_rate_period_end(&st.pacing);
		case NUM_STREAM_WAKEUPS:
			break;
	}
	return DT_NOEND;
}

/* Does something wait for a deadline (see StreamWakeup)? */
static bool
wakeup_armed(StreamWakeup which)
{
	switch (which)
	{
		case WAKEUP_STATUS:
			return true;
		case WAKEUP_REPORT:
			return st.report_owed;
		case WAKEUP_KEEPALIVE_RECORD:
			return st.unrecorded_keepalive > st.pending_position && !st.in_txn;
		case WAKEUP_FLUSH:
			return st.unsynced_since != 0;
		case WAKEUP_GROUP_COMMIT:
			return st.unsynced_since != 0 && !st.in_txn;
		case WAKEUP_COMMIT_RATE:
			return st.pacing.commit_rate > 0;
		case NUM_STREAM_WAKEUPS:
			break;
	}
	return false;
}

/*
 * What was added is durable: its newest commit's time becomes the last
 * archived commit's (status()'s last_commit_time), kept when it held none.
 */
static void
note_durable_commit(void)
{
	if (st.pending_commit_time != 0)
		st.counters.last_commit_time = st.pending_commit_time;
}

/*
 * With a replica, tell the uploader what is durable: the position of
 * record and the active segment's durable bytes (its tail sync reads
 * them), and remember the flush for replica_lag_seconds.
 */
static void
note_local_durable(void)
{
	CsLocalDurable local;

	if (!st.writer_open || !cs_replica_configured() ||
		cs_writer_durable_size() < 0)
		return;
	local.generation = cs_writer_generation();
	local.index = cs_writer_segment_index();
	local.bytes = cs_writer_durable_size();
	local.position = st.position;
	local.at = 0;
	cs_replica_note_local_durable(&local);
}

/*
 * The flush LSN the server may be told: the durable position of record;
 * with changestream.replica_durability = remote and a replica, no more
 * than the bucket's durable position in this generation (0, which the
 * server ignores for the slot, while the bucket has none of it).
 */
static XLogRecPtr
confirmable(void)
{
	if (cs_replica_durability != CS_REPLICA_DURABILITY_REMOTE ||
		!cs_replica_configured())
		return st.position;
	return Min(st.position, cs_replica_remote_durable(cs_writer_generation()));
}

/* Show the session's progress in status(). */
static void
publish(TimestampTz now)
{
	st.counters.received_lsn = Max(st.received_lsn, st.keepalive_lsn);
	st.counters.flushed_lsn = st.position;
	st.counters.commit_rate = st.pacing.commit_rate;
	st.counters.group_commit_ms = (int) group_commit_ms();
	cs_status_publish_progress(&st.counters);
	st.last_published = now;
	note_local_durable();
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
	st.reported = confirmable();
	cs_send_status_update(st.conn, Max(st.received_lsn, st.position),
						  st.reported, false);
	st.last_status_sent = now;
	st.report_owed = false;
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
	if (now >= wakeup_time(WAKEUP_REPORT))
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
	note_durable_commit();
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
	if (!wakeup_armed(WAKEUP_FLUSH) || now < wakeup_time(WAKEUP_FLUSH))
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
		cs_maintenance_wake();	/* it compresses the sealed segment */
		st.made_durable = true;
		st.position = st.pending_position;
		note_durable_commit();
		st.unsynced_since = 0;
		st.counters.last_flush_at = now;
		report_flushed(now);
		publish(now);
	}
}

/*
 * Has the stream reached the start of the generation waiting to follow
 * the active one?  lsn is a transaction's commit LSN (BEGIN's final LSN),
 * a non-transactional message's LSN, or the walEnd of a keepalive received
 * with no transaction open.  The boundary is the one logical decoding
 * itself draws for a slot started at that point
 * (SnapBuildXactNeedsSkip() on the commit record's start): a transaction
 * whose commit record starts before it is in the new generation's
 * snapshot, any other is not.
 */
static bool
handoff_due(XLogRecPtr lsn)
{
	return st.handoff_lsn != InvalidXLogRecPtr && lsn >= st.handoff_lsn;
}

/*
 * The hand-off: every transaction whose commit record starts before
 * handoff_lsn (C) is in the active generation, and no other is.  Record C
 * as its position of record (a position entry without a send time: it
 * extends the generation's LSN range, not its time range), make it
 * durable and report it, then have the session's owner end the generation
 * there and start the next at C (on_handoff).  Nothing is reported beyond
 * what is durable in one of them.
 */
static void
hand_off(TimestampTz now)
{
	XLogRecPtr	start = st.handoff_lsn;

	if (st.pending_position > start)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("the archive's position of record " CS_LSN_FMT " is past the new generation's start " CS_LSN_FMT,
						LSN_FORMAT_ARGS(st.pending_position),
						LSN_FORMAT_ARGS(start)),
				 errdetail("The next session takes the new generation's snapshot again.")));
	if (st.pending_position < start)
	{
		add_entry(CS_ENTRY_POSITION, InvalidXLogRecPtr, start, 0, NULL, 0,
				  NULL, now);
		st.pending_position = start;
	}
	flush_and_report(now);
	st.handoff_lsn = InvalidXLogRecPtr;
	st.on_handoff();
	st.made_durable = true;
	st.counters.last_flush_at = now;
	publish(now);
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
			if (handoff_due(info->lsn))
				hand_off(now);
			st.in_txn = true;
			st.skipping = info->lsn < st.skip_before;
			cs_recapture_begin();
			if (!st.skipping)
				add_entry(CS_ENTRY_MESSAGE, data_start, wal_end, send_time,
						  payload, plen, info, now);
			break;
		case 'C':
			if (!st.skipping)
			{
				cs_recapture_commit(info->end_lsn, now);
				add_entry(CS_ENTRY_MESSAGE, data_start, wal_end, send_time,
						  payload, plen, info, now);
				st.pending_position = Max(st.pending_position, info->end_lsn);
				st.pending_commit_time = info->commit_time;
				st.counters.received_commit_time = info->commit_time;
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
				if (handoff_due(info->lsn))
					hand_off(now);
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
			if (info->type == 'I')
				cs_recapture_insert(payload, plen);
			add_entry(CS_ENTRY_MESSAGE, data_start, wal_end, send_time,
					  payload, plen, info, now);
			break;
	}
}

/*
 * A Relation message (info: its OID, schema and name, cs_parse_pgoutput();
 * payload, plen bytes) of a table named changestream.ddl_history: the
 * archiver makes sure its OID is recorded as the schema history's before
 * the message is archived, if it is the extension's (the session owner's
 * on_history_relation), and re-capture (recapture.c) watches its rows if
 * it is.
 */
static void
note_relation(const CsMessageInfo *info, const char *payload, uint32 plen)
{
	if (info->nspname == NULL)
		return;
	if (cs_ddl_is_history_name(info->nspname, info->relname) &&
		st.on_history_relation != NULL)
		cs_recapture_relation(payload, plen,
							  st.on_history_relation(info->oid));
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
		note_relation(&info, payload, plen);
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
	if (!wakeup_armed(WAKEUP_KEEPALIVE_RECORD))
		return;
	if (!force && now < wakeup_time(WAKEUP_KEEPALIVE_RECORD))
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
 * asks for a reply, or with changestream.synchronous: then each keepalive
 * past the position of record is recorded, made durable and reported at
 * once, so that commits of other databases (which the archiver never
 * sees) waiting for it in synchronous replication are released.
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
	if (!st.in_txn && handoff_due(wal_end))
		hand_off(now);
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
 * informed.  Sealed segments are compressed by the maintenance worker.
 */
static void
batch_duties(TimestampTz now)
{
	flush_if_due(now);
	if (now >= wakeup_time(WAKEUP_STATUS))
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
	cs_maintenance_status_set_catching_up(false);
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
 * cs_stream_set_handoff
 *	  A new generation is to start at start_lsn (an LSN past the position
 *	  of record): the stream writes the active generation until it reaches
 *	  it, then calls on_handoff, which must end the active generation
 *	  there and make the new one the writer's (docs/DESIGN.md section 6).
 */
void
cs_stream_set_handoff(XLogRecPtr start_lsn, CsHandoffHook on_handoff)
{
	st.handoff_lsn = start_lsn;
	st.on_handoff = on_handoff;
}

/*
 * cs_stream_handoff_pending
 *	  Is a hand-off to a new generation still to come in this session?
 */
bool
cs_stream_handoff_pending(void)
{
	return st.handoff_lsn != InvalidXLogRecPtr;
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
 *	  START_REPLICATION succeeded on conn, a connection of config: from now
 *	  on status updates go to it, and a Relation message of the schema
 *	  history table is passed to on_history_relation before it is
 *	  archived.  Publishes the position and sends a first status update.
 */
void
cs_stream_started(const CsArchiveConfig *config, WalReceiverConn *conn,
				  CsHistoryRelationHook on_history_relation)
{
	TimestampTz now = GetCurrentTimestamp();

	st.conn = conn;
	st.on_history_relation = on_history_relation;
	st.pacing.local_server = cs_archive_config_local(config);
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

	st.pacing.last_batch_bytes = 0;
	for (;;)
	{
		char	   *buf;
		int			len = walrcv_receive(st.conn, &buf, fd);

		st.pacing.last_batch = n;
		if (len == 0)
			return true;
		if (len < 0)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("the server ended the replication stream"),
					 errdetail("The archiver reconnects and resumes from the archive's position of record.")));
		if ((++n & 31) == 0)
			now = GetCurrentTimestamp();
		st.pacing.last_batch_bytes += len;
		dispatch(buf, len, now);

		if ((n & 31) == 0)
		{
			batch_duties(now);
			CHECK_FOR_INTERRUPTS();
			if (n >= MAX_BATCH_MESSAGES || ConfigReloadPending)
			{
				st.pacing.last_batch = n;
				return false;
			}
		}
	}
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
	double		rate_before = st.pacing.commit_rate;

	cs_pacing_update_commit_rate(&st.pacing, now, st.counters.transactions);
	if (idle)
	{
		cs_pacing_after_idle_batch(&st.pacing, seen_lsn());
		/* before the drained backlog's flush */
		cs_pacing_share_catching_up(&st.pacing, seen_lsn(), now,
								st.counters.last_message_at);
	}
	if (idle && !st.in_txn && cs_writer_unsynced() &&
		(st.pacing.drained || now >= wakeup_time(WAKEUP_GROUP_COMMIT)))
		flush_and_report(now);
	else
		flush_if_due(now);
	if (st.report_owed && st.conn != NULL &&
		(st.pacing.drained || now >= wakeup_time(WAKEUP_REPORT)))
		send_status(now);		/* the last flush's report was paced */
	else if (st.conn != NULL &&
			 cs_replica_durability == CS_REPLICA_DURABILITY_REMOTE &&
			 confirmable() > st.reported)
		send_status(now);		/* the bucket caught up: remote durability */
	st.pacing.drained = false;
	maybe_rotate(now);
	if (now >= wakeup_time(WAKEUP_STATUS))
		send_status(now);
	record_keepalive_position(now, now, false);
	cs_pacing_share_catching_up(&st.pacing, seen_lsn(), now,
								st.counters.last_message_at);
	/* a new rate changes the group commit window status() shows */
	if (st.pacing.commit_rate != rate_before ||
		TimestampDifferenceExceeds(st.last_published, now, PUBLISH_MS))
		publish(now);
}

/*
 * How long the idle stream may wait (ms): until the earliest armed
 * deadline (an owed report of a durable position, the next keepalive
 * position record, the end of the flush window or of the group commit
 * window, the end of a rate period with commits), at least 1 ms, and
 * never longer than the longest time without a status update, counted
 * from now.
 */
static long
idle_timeout(TimestampTz now)
{
	long		timeout = cs_pacing_alive_status_ms();
	int			w;

	for (w = 0; w < NUM_STREAM_WAKEUPS; w++)
	{
		long		left;

		if (w == WAKEUP_STATUS || !wakeup_armed(w))
			continue;
		left = (long) ((wakeup_time(w) - now) / 1000);
		timeout = Min(timeout, Max(left, 1));
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

	if (cs_pacing_nap_us(&st.pacing) > 0)
	{
		nap(cs_pacing_nap_us(&st.pacing));
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
 * cs_stream_pause
 *	  The archiver does not read the stream (changestream.replica_max_backlog
 *	  is exceeded): wait on the latch only, up to 1 s or the earliest
 *	  deadline of the stream (a status update keeps the connection alive
 *	  meanwhile; the server keeps the WAL in the slot).
 */
void
cs_stream_pause(TimestampTz now)
{
	int			rc;

	rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
				   Min(idle_timeout(now), 1000), PG_WAIT_EXTENSION);
	if (rc & WL_LATCH_SET)
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
	st.pacing.shared_catching_up = false;
	cs_maintenance_status_set_catching_up(false);
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
	/* first: the flush may fail */
	cs_maintenance_status_set_catching_up(false);
	if (st.writer_open)
	{
		st.writer_open = false;
		cs_writer_flush();
		st.position = st.pending_position;
		note_durable_commit();
		if (st.conn != NULL)
		{
			WalReceiverConn *conn = st.conn;

			st.conn = NULL;
			cs_send_status_update(conn, Max(st.received_lsn, st.position),
								  confirmable(), false);
		}
		cs_writer_close();
	}
	publish(GetCurrentTimestamp());
}
