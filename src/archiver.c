/*-------------------------------------------------------------------------
 *
 * archiver.c
 *	  The archiver background worker: one session after another, each of
 *	  which locks the archive, connects, picks or opens a generation,
 *	  and streams the slot into the active segment under the durability
 *	  protocol of DESIGN.md:
 *
 *	  1. the flush LSN reported in a standby status update is only ever a
 *		 position that is fdatasync'ed in the archive;
 *	  2. it is the end LSN of the last durable COMMIT, or the walEnd of a
 *		 keepalive received with no transaction open, recorded durably as a
 *		 position entry before it is reported;
 *	  3. status updates go out every changestream.status_interval, at once
 *		 on a reply-requested keepalive, and during long work;
 *	  4. on start the archive, not the slot, is the position of record:
 *		 streaming restarts there and transactions whose commit LSN is
 *		 below it are skipped, so none is archived twice;
 *	  5. leftover *.tmp files go, and a lock keeps a second writer out;
 *	  6. SIGTERM is die(); the final flush and status update run in a
 *		 before_shmem_exit callback.
 *
 *	  After an ERROR the session is torn down, the error is logged once
 *	  (repeats of the same message are counted, not logged, for five
 *	  minutes) and shown in status(), and a new session starts after a
 *	  delay that doubles from 1 s to 30 s; the next success is logged with
 *	  the number of failed attempts.
 *
 * Sources: the Streaming Replication Protocol chapter of the PostgreSQL
 * documentation (XLogData 'w', Primary keepalive 'k', Standby status
 * update 'r'); the error recovery pattern of src/backend/postmaster/
 * bgwriter.c; LogicalRepApplyLoop() in replication/logical/worker.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "libpq/pqsignal.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/walreceiver.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "common/file_utils.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "changestream.h"
#include "compat.h"
#include "wire.h"

#define COMPRESS_SLICE		(256 * 1024)	/* bytes of input per step */
#define COMPRESS_BACKLOG	4	/* sealed raw segments tolerated while busy */
#define QUIET_MS			50	/* idle this long before compressing */
#define CATCHUP_BYTES		(4 * 1024 * 1024)
#define MAX_BATCH_MESSAGES	10000
#define ERROR_REPEAT_SECS	300
#define GROUP_COMMIT_MS		10	/* see group_commit_ms() */
#define SLOT_RELEASE_TRIES	30	/* 100 ms each */

/* session state */
static WalReceiverConn *conn = NULL;
static WalReceiverConn *snap_conn = NULL;	/* a new generation's snapshot */
static WaitEventSet *stream_wait = NULL;	/* latch, postmaster, socket */
static bool streaming = false;
static bool writer_open = false;
static int	lock_fd = -1;
static MemoryContext session_cxt = NULL;
static char pending_gendir[MAXPGPATH];	/* a new generation's .tmp dir */

static char *sess_directory = NULL;
static char *sess_slot = NULL;
static char *sess_publication = NULL;
static char *sess_conninfo = NULL;

static uint64 cur_generation;
static XLogRecPtr position;		/* durable position of record, reported */
static XLogRecPtr pending_position; /* position of record of data added */
static XLogRecPtr skip_before;	/* commit LSNs below this are archived */
static XLogRecPtr received_lsn;	/* highest LSN of XLogData received */
static XLogRecPtr keepalive_lsn; /* walEnd of the newest keepalive */
static XLogRecPtr unrecorded_keepalive; /* eligible, not yet recorded */
static bool in_txn;
static bool skipping;

static TimestampTz last_status_sent;
static TimestampTz last_position_record;
static TimestampTz unsynced_since;
static TimestampTz last_published;
static TimestampTz last_message_at;
static TimestampTz last_flush_at;
static uint64 n_messages;
static uint64 n_transactions;
static uint64 n_bytes;
static long compress_credit;
static TimestampTz next_snapshot_attempt;
static TimestampTz quiet_since;	/* when the stream last went idle */

/* error log rate limiting */
static char last_logged_error[CS_ERROR_LEN];
static TimestampTz last_logged_at;
static int	suppressed_repeats;
static bool logged_disabled = false;
static long backoff_ms = 1000;	/* static: it must survive the longjmp */
static bool last_session_failed = false;
static bool slot_undecodable = false;	/* see note_stream_error() */

static bool catching_up(void);
static void sleep_ms(long ms);
static bool new_generation_requested(bool clear);

/*
 * How long complete transactions may wait, once the stream is idle, for
 * more to share their fsync: 10 ms, or flush_interval if that is shorter.
 * At 1,000 tps this turns ~1,000 fsyncs and status updates a second into
 * ~100, for at most 10 ms of added commit-to-durable lag.  While catching
 * up with a backlog the lulls are the walsender decoding, not the end of
 * the stream: then flush_interval applies, and the walsender is spared a
 * status update every 10 ms.
 */
static inline long
group_commit_ms(void)
{
	if (catching_up())
		return cs_flush_interval_ms;
	return Min(cs_flush_interval_ms, GROUP_COMMIT_MS);
}

/*
 * Is the archiver more than CATCHUP_BYTES of WAL behind the local server?
 * Only known for the local server (changestream.conninfo empty).
 */
static bool
catching_up(void)
{
	XLogRecPtr	head;
	XLogRecPtr	seen;

	if (cs_conninfo[0] != '\0' || RecoveryInProgress())
		return false;
	head = GetFlushRecPtr(NULL);
	seen = Max(received_lsn, keepalive_lsn);	/* keepalives cover WAL of
												 * unpublished tables */
	return head > seen && head - seen > CATCHUP_BYTES;
}

static void
publish_status(void)
{
	SpinLockAcquire(&cs_status->mutex);
	cs_status->received_lsn = Max(received_lsn, keepalive_lsn);
	cs_status->flushed_lsn = position;
	cs_status->last_message_at = last_message_at;
	cs_status->last_flush_at = last_flush_at;
	cs_status->messages = n_messages;
	cs_status->transactions = n_transactions;
	cs_status->bytes = n_bytes;
	SpinLockRelease(&cs_status->mutex);
	last_published = GetCurrentTimestamp();
}

/*
 * The write LSN reported is what arrived as XLogData, never a keepalive's
 * walEnd that is not yet recorded: PostgreSQL's walsender sends keepalives
 * only while the reported write LSN is behind what it sent
 * (WalSndWaitForWal()), and those keepalives are what lets an idle slot
 * advance.
 */
static void
send_status(TimestampTz now, bool reply_requested)
{
	cs_send_status_update(conn, Max(received_lsn, position), position,
						  reply_requested);
	last_status_sent = now;
}

/*
 * Make everything added durable, advance the reported position to the
 * position of record of what was added, and tell the server.
 */
static void
flush_and_report(TimestampTz now)
{
	cs_writer_flush();
	position = pending_position;
	unsynced_since = 0;
	last_flush_at = now;
	if (streaming)
		send_status(now, false);
	publish_status();
}

/*
 * Once data has waited flush_interval, make it durable: inside a large
 * transaction only to spread its writeback (nothing new is reportable),
 * otherwise with a status update.
 */
static void
flush_if_due(TimestampTz now)
{
	if (unsynced_since == 0 ||
		!TimestampDifferenceExceeds(unsynced_since, now, cs_flush_interval_ms))
		return;
	if (in_txn)
	{
		cs_writer_flush();
		unsynced_since = 0;
	}
	else
		flush_and_report(now);
}

static void
add_entry(char kind, XLogRecPtr data_start, XLogRecPtr wal_end,
		  TimestampTz send_time, const char *data, uint32 len, TimestampTz now)
{
	if (unsynced_since == 0)
		unsynced_since = now;
	cs_writer_add(kind, data_start, wal_end, send_time, data, len);
}

static void
maybe_rotate(TimestampTz now)
{
	if (!in_txn && cs_writer_should_rotate(now))
	{
		cs_writer_rotate(pending_position);
		position = pending_position;
		unsynced_since = 0;
		last_flush_at = now;
		send_status(now, false);
		publish_status();
	}
}

/* One XLogData message: archive its pgoutput payload unless skipped. */
static void
handle_xlogdata(const char *buf, int len, TimestampTz now)
{
	XLogRecPtr	data_start;
	XLogRecPtr	wal_end;
	TimestampTz send_time;
	const char *payload;
	uint32		plen;
	CsMessageInfo info;

	if (len < 25)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg_internal("invalid XLogData message of %d bytes", len)));
	data_start = cs_get64(buf + 1);
	wal_end = cs_get64(buf + 9);
	send_time = (TimestampTz) cs_get64(buf + 17);
	payload = buf + 25;
	plen = len - 25;
	if (!cs_parse_pgoutput(payload, plen, &info))
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("invalid pgoutput message of type \"%c\" (%u bytes)",
						plen > 0 ? payload[0] : '?', plen)));

	received_lsn = Max(received_lsn, Max(data_start, wal_end));
	last_message_at = now;
	n_messages++;
	n_bytes += plen;
	compress_credit += CS_ENTRY_HEADER_SIZE + plen; /* bytes of segment */

	switch (info.type)
	{
		case 'B':
			in_txn = true;
			skipping = info.lsn < skip_before;
			if (!skipping)
				add_entry(CS_ENTRY_MESSAGE, data_start, wal_end, send_time,
						  payload, plen, now);
			break;
		case 'C':
			if (!skipping)
			{
				add_entry(CS_ENTRY_MESSAGE, data_start, wal_end, send_time,
						  payload, plen, now);
				pending_position = Max(pending_position, info.end_lsn);
				n_transactions++;
			}
			in_txn = false;
			skipping = false;
			maybe_rotate(now);
			break;
		case 'M':
			if (!info.transactional && !in_txn)
			{
				/*
				 * A non-transactional message is sent as soon as it is
				 * decoded, after every transaction that committed before
				 * it, so once durable, its LSN + 1 is a position of record:
				 * a restart there neither loses nor repeats it.
				 */
				if (info.lsn < skip_before)
					break;
				add_entry(CS_ENTRY_MESSAGE, data_start, wal_end, send_time,
						  payload, plen, now);
				pending_position = Max(pending_position, info.lsn + 1);
				break;
			}
			if (skipping)
				break;
			add_entry(CS_ENTRY_MESSAGE, data_start, wal_end, send_time,
					  payload, plen, now);
			break;
		default:
			if (skipping)
				break;
			if (info.type == 'R' || info.type == 'Y')
				cs_writer_note_schema(payload, plen, &info);
			add_entry(CS_ENTRY_MESSAGE, data_start, wal_end, send_time,
					  payload, plen, now);
			break;
	}
}

static void record_keepalive_position(TimestampTz now, TimestampTz send_time,
									  bool force);

/*
 * A primary keepalive.  With no transaction open, its walEnd may become the
 * position of record: it is written as a position entry and made durable
 * before it is reported (durability rule 2).  At most one position entry
 * per status_interval unless the server asks for a reply.
 */
static void
handle_keepalive(const char *buf, int len, TimestampTz now)
{
	XLogRecPtr	wal_end;
	TimestampTz send_time;
	bool		reply;

	if (len < 18)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg_internal("invalid keepalive message of %d bytes", len)));
	wal_end = cs_get64(buf + 1);
	send_time = (TimestampTz) cs_get64(buf + 9);
	reply = buf[17] != 0;
	keepalive_lsn = Max(keepalive_lsn, wal_end);

	if (!in_txn && wal_end > pending_position)
	{
		unrecorded_keepalive = wal_end;
		record_keepalive_position(now, send_time, reply);
	}
	if (reply)
		send_status(now, false);
}

/*
 * Record the newest eligible keepalive walEnd as a position entry, make it
 * durable and report it, if status_interval has passed since the last one
 * (or the server asked for a reply).  Called on each keepalive and from
 * the stream loop, so a skipped keepalive is recorded once the interval
 * has passed even if no other keepalive comes.
 */
static void
record_keepalive_position(TimestampTz now, TimestampTz send_time, bool force)
{
	if (in_txn || unrecorded_keepalive <= pending_position)
		return;
	if (!force &&
		!TimestampDifferenceExceeds(last_position_record, now, cs_status_interval_ms))
		return;
	add_entry(CS_ENTRY_POSITION, InvalidXLogRecPtr, unrecorded_keepalive,
			  send_time, NULL, 0, now);
	pending_position = unrecorded_keepalive;
	last_position_record = now;
	flush_and_report(now);
}

static bool
new_generation_requested(bool clear)
{
	bool		requested;

	SpinLockAcquire(&cs_status->mutex);
	requested = cs_status->new_generation_requested;
	if (clear)
		cs_status->new_generation_requested = false;
	SpinLockRelease(&cs_status->mutex);
	return requested;
}

/*
 * Every changestream.snapshot_interval, start a snapshot worker for the
 * current generation (it runs beside this worker; see snapshot_worker.c).
 */
static void
maybe_schedule_snapshot(TimestampTz now)
{
	TimestampTz last;
	bool		running;
	BackgroundWorkerHandle *handle;

	if (cs_snapshot_interval_s <= 0 || now < next_snapshot_attempt)
		return;
	SpinLockAcquire(&cs_status->mutex);
	last = cs_status->last_snapshot_at;
	running = cs_status->snapshot_running;
	SpinLockRelease(&cs_status->mutex);
	if (running ||
		!TimestampDifferenceExceeds(last, now, cs_snapshot_interval_s * 1000))
		return;
	if (cs_launch_snapshot_worker(cur_generation, 0, &handle) != CS_LAUNCH_OK)
	{
		ereport(LOG,
				(errmsg("changestream: could not start a scheduled snapshot; retrying in a minute"),
				 errhint("Raise max_worker_processes if background worker slots are exhausted.")));
		next_snapshot_attempt = TimestampTzPlusMilliseconds(now, 60 * 1000);
		return;
	}
	SpinLockAcquire(&cs_status->mutex);
	cs_status->last_snapshot_at = now;
	SpinLockRelease(&cs_status->mutex);
}

static bool
config_changed(void)
{
	return strcmp(sess_directory, cs_directory) != 0 ||
		strcmp(sess_slot, cs_slot_name) != 0 ||
		strcmp(sess_publication, cs_publication) != 0 ||
		strcmp(sess_conninfo, cs_conninfo) != 0;
}

/*
 * Stream until the configuration asks for a new session.  Errors leave
 * through the worker's sigsetjmp.
 */
static void
stream_loop(void)
{
	MemoryContext loop_cxt = AllocSetContextCreate(CurrentMemoryContext,
												   "changestream stream loop",
												   ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(loop_cxt);

	for (;;)
	{
		pgsocket	fd = PGINVALID_SOCKET;
		TimestampTz now;
		long		timeout;
		int			rc;
		WaitEvent	event;
		int			n = 0;
		bool		idle = false;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			if (config_changed())
			{
				ereport(LOG,
						(errmsg("changestream: configuration changed, starting a new archiving session")));
				break;
			}
		}
		if (new_generation_requested(false))
		{
			ereport(LOG,
					(errmsg("changestream: a new generation was requested, starting a new archiving session")));
			break;
		}

		now = GetCurrentTimestamp();
		for (;;)
		{
			char	   *buf;
			int			len = walrcv_receive(conn, &buf, &fd);

			if (len == 0)
			{
				idle = true;
				break;
			}
			if (len < 0)
				ereport(ERROR,
						(errcode(ERRCODE_CONNECTION_FAILURE),
						 errmsg("changestream: the server ended the replication stream"),
						 errhint("The archiver reconnects and resumes from the archive's position of record.")));
			quiet_since = 0;
			if ((++n & 31) == 0)
				now = GetCurrentTimestamp();
			if (buf[0] == 'w')
				handle_xlogdata(buf, len, now);
			else if (buf[0] == 'k')
				handle_keepalive(buf, len, now);
			else
				ereport(ERROR,
						(errcode(ERRCODE_PROTOCOL_VIOLATION),
						 errmsg("changestream: unexpected message type \"%c\" in the replication stream",
								buf[0])));

			if ((n & 31) == 0)
			{
				flush_if_due(now);
				if (TimestampDifferenceExceeds(last_status_sent, now, cs_status_interval_ms))
					send_status(now, false);
				/*
				 * While the stream is busy, compression waits for idle
				 * time, unless sealed segments pile up: then it keeps pace
				 * with what arrives, so raw segments stay bounded.
				 */
				if (compress_credit >= COMPRESS_SLICE)
				{
					/* twice what arrived, so that a backlog shrinks */
					if (cs_compress_backlog() > COMPRESS_BACKLOG)
						cs_compress_step(2 * compress_credit);
					compress_credit = 0;
				}
				if (TimestampDifferenceExceeds(last_published, now, 100))
					publish_status();
				CHECK_FOR_INTERRUPTS();
				if (n >= MAX_BATCH_MESSAGES || ConfigReloadPending)
					break;
			}
		}

		now = GetCurrentTimestamp();
		/*
		 * The stream went idle with complete transactions pending: make them
		 * durable once the group commit window has passed since the first of
		 * them arrived, so that a burst shares one fsync and one status
		 * update instead of paying one per transaction.
		 */
		if (idle && !in_txn && cs_writer_unsynced() &&
			TimestampDifferenceExceeds(unsynced_since, now, group_commit_ms()))
			flush_and_report(now);
		else
			flush_if_due(now);
		maybe_rotate(now);
		if (TimestampDifferenceExceeds(last_status_sent, now, cs_status_interval_ms))
			send_status(now, false);
		if (TimestampDifferenceExceeds(last_published, now, 100))
			publish_status();
		maybe_schedule_snapshot(now);
		record_keepalive_position(now, now, false);
		MemoryContextReset(loop_cxt);

		if (!idle)
			continue;

		/*
		 * Idle.  Compress only once the stream has been quiet for
		 * QUIET_MS: a momentary lull while the walsender decodes is not
		 * idle time, and compressing then would stall it on a full socket
		 * buffer.  One slice at a time, checking the socket in between.
		 */
		if (quiet_since == 0)
			quiet_since = now;
		timeout = cs_status_interval_ms;
		if (unrecorded_keepalive > pending_position && !in_txn)
		{
			long		left = cs_status_interval_ms -
				TimestampDifferenceMilliseconds(last_position_record, now);

			timeout = Min(timeout, Max(left, 1));
		}
		if (unsynced_since != 0)
		{
			long		window = in_txn ? cs_flush_interval_ms : group_commit_ms();
			long		elapsed = TimestampDifferenceMilliseconds(unsynced_since, now);

			timeout = Min(timeout, Max(window - elapsed, 1));
		}
		if (cs_compress_pending())
		{
			compress_credit = 0;
			if (!TimestampDifferenceExceeds(quiet_since, now, QUIET_MS))
				timeout = Min(timeout, QUIET_MS);
			else if (cs_compress_step(COMPRESS_SLICE))
				timeout = 0;
		}
		/*
		 * One wait event set for the whole session: WaitLatchOrSocket()
		 * would build and tear down an epoll set at every wait, and the
		 * stream waits thousands of times a second while catching up.
		 */
		if (stream_wait == NULL)
		{
			stream_wait = cs_create_wait_event_set(3);
			AddWaitEventToSet(stream_wait, WL_LATCH_SET, PGINVALID_SOCKET,
							  MyLatch, NULL);
			AddWaitEventToSet(stream_wait, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET,
							  NULL, NULL);
			AddWaitEventToSet(stream_wait, WL_SOCKET_READABLE, fd, NULL, NULL);
		}
		rc = WaitEventSetWait(stream_wait, timeout, &event, 1, PG_WAIT_EXTENSION);
		if (rc > 0 && (event.events & WL_LATCH_SET))
			ResetLatch(MyLatch);
	}
	MemoryContextSwitchTo(old);
	MemoryContextDelete(loop_cxt);
}

static void
session_cleanup(void)
{
	streaming = false;
	writer_open = false;
	if (conn != NULL)
		cs_disconnect(conn);
	conn = NULL;
	if (snap_conn != NULL)
		cs_disconnect(snap_conn);
	snap_conn = NULL;
	if (stream_wait != NULL)
		FreeWaitEventSet(stream_wait);
	stream_wait = NULL;
	cs_snapshot_cleanup();
	SpinLockAcquire(&cs_status->mutex);
	memset(&cs_status->progress[CS_PROGRESS_ARCHIVER], 0, sizeof(CsProgress));
	SpinLockRelease(&cs_status->mutex);
	cs_writer_reset();
	cs_compress_reset();
	/* a generation that failed to open leaves nothing behind */
	if (pending_gendir[0] != '\0')
	{
		struct stat st;

		if (stat(pending_gendir, &st) == 0 && !rmtree(pending_gendir, true))
			ereport(WARNING,
					(errmsg("could not remove directory \"%s\"", pending_gendir)));
		pending_gendir[0] = '\0';
	}
	if (lock_fd >= 0)
		close(lock_fd);
	lock_fd = -1;
}

/*
 * Why the newest generation's identity file cannot be used, or NULL when it
 * reads (then *identity holds it).  A missing file, XX001 or a data
 * exception from one of its fields is damage; other errors (I/O, a newer
 * format) propagate.
 */
static const char *
identity_damage(uint64 generation, CsIdentity *identity)
{
	MemoryContext cxt = CurrentMemoryContext;
	const char *volatile damage = NULL;

	PG_TRY();
	{
		if (!cs_read_identity(sess_directory, generation, identity))
			damage = psprintf("identity file \"%s/generation\" is missing",
							  cs_generation_path(sess_directory, generation));
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_DATA_CORRUPTED &&
			ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_DATA_EXCEPTION)
			PG_RE_THROW();
		FlushErrorState();
		damage = edata->message;
	}
	PG_END_TRY();
	return damage;
}

/*
 * Does a generation hold data that was acknowledged to the server?  Yes
 * when it has a sealed segment (segments are sealed only after data), when
 * its first segment holds a complete transaction or a position past its
 * start, or when the slot has confirmed a position past that start.  A
 * first segment that cannot be read raises XX001: the generation is then
 * kept as it is, for the operator (contract item 12 in docs/DESIGN.md).
 */
static bool
holds_acknowledged_data(uint64 generation, const CsSlotInfo *slot)
{
	char	   *wal_dir = cs_wal_dir_path(sess_directory, generation);
	DIR		   *dir;
	struct dirent *de;
	bool		first_raw = false;
	bool		sealed = false;
	CsSegmentScan scan;

	dir = AllocateDir(wal_dir);
	if (dir == NULL && errno == ENOENT)
		return false;
	if (dir == NULL)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open directory \"%s\": %m", wal_dir)));
	while ((de = ReadDir(dir, wal_dir)) != NULL)
	{
		int64		idx;
		bool		compressed;

		if (!cs_parse_segment_file_name(de->d_name, &idx, &compressed))
			continue;
		if (idx > 0 || compressed)
			sealed = true;
		else
			first_raw = true;
	}
	FreeDir(dir);
	if (sealed)
		return true;
	if (!first_raw ||
		!cs_scan_segment(psprintf("%s/%s", wal_dir, cs_segment_file_name(0, false)),
						 &scan, NULL, NULL))
		return false;
	return scan.transactions > 0 ||
		scan.position > scan.header.start_lsn ||
		(slot->exists && slot->confirmed_flush > scan.header.start_lsn);
}

/*
 * Decide whether the archive's newest generation continues, or a new one
 * must open; returns the reason for a new one, or NULL.  Only true reasons
 * count: a new slot, an operator's request, a changed identity, or a
 * damaged identity file in a generation that holds no acknowledged data.
 * A damaged generation that holds acknowledged data raises XX001 and is
 * left as it is.
 */
static const char *
new_generation_reason(List *gens, uint64 sysid, uint32 tli,
					  const CsSlotInfo *slot, const char *slot_event,
					  CsIdentity *identity)
{
	uint64		newest;
	const char *damage;

	if (gens == NIL)
		return "first start: the archive holds no generation";
	if (slot_event)
		return slot_event;
	if (new_generation_requested(false))
		return "requested by changestream.new_generation()";
	newest = *(uint64 *) llast(gens);
	damage = identity_damage(newest, identity);
	if (damage != NULL)
	{
		if (holds_acknowledged_data(newest, slot))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("cannot continue generation %016llx", (unsigned long long) newest),
					 errdetail("%s; the generation holds acknowledged data and is left as it is.", damage),
					 errhint("Restore the identity file, or call changestream.new_generation() to start a new generation.")));
		return psprintf("the newest generation %016llx holds no acknowledged data and its %s",
						(unsigned long long) newest, damage);
	}
	if (identity->system_identifier != sysid)
		return psprintf("the system identifier changed from " UINT64_FORMAT " to " UINT64_FORMAT,
						identity->system_identifier, sysid);
	if (identity->timeline != tli)
		return psprintf("the timeline changed from %u to %u",
						identity->timeline, tli);
	if (strcmp(identity->slot, cs_slot_name) != 0 ||
		strcmp(identity->database, cs_database) != 0)
		return psprintf("the slot or database changed (was slot \"%s\" of database \"%s\")",
						identity->slot, identity->database);
	if (strcmp(identity->plugin_options, cs_plugin_options()) != 0)
		return psprintf("the plugin options changed (were %s)",
						identity->plugin_options);
	return NULL;
}

/*
 * A slot that another process streams from cannot be ours: fail the
 * session before any generation decision (issue 9, item 3).  Our own
 * walsender of a session that just ended may still be releasing it, so
 * wait for it a little first.
 */
static void
require_slot_free(WalReceiverConn *c, CsSlotInfo *slot)
{
	int			i;

	for (i = 0; slot->exists && slot->active && i < SLOT_RELEASE_TRIES; i++)
	{
		sleep_ms(100);
		cs_get_slot(c, slot);
	}
	if (slot->exists && slot->active)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("replication slot \"%s\" is active for PID %d",
						cs_slot_name, slot->active_pid),
				 errdetail("Another process is streaming from the slot."),
				 errhint("Stop the other consumer of the slot, or set changestream.slot_name to a slot that only changestream uses.")));
}

/* mtime of the newest snapshot of a generation, or its creation time */
static TimestampTz
newest_snapshot_time(uint64 generation)
{
	char	   *dir = psprintf("%s/snapshots", cs_generation_path(sess_directory, generation));
	DIR		   *d = AllocateDir(dir);
	struct dirent *de;
	TimestampTz newest = 0;
	CsIdentity	identity;

	if (d != NULL)
	{
		while ((de = ReadDir(d, dir)) != NULL)
		{
			struct stat st;
			char	   *path;

			if (strstr(de->d_name, ".snapshot.gz") == NULL ||
				strstr(de->d_name, ".tmp") != NULL)
				continue;
			path = psprintf("%s/%s", dir, de->d_name);
			if (stat(path, &st) == 0)
				newest = Max(newest, time_t_to_timestamptz(st.st_mtime));
		}
		FreeDir(d);
	}
	if (newest == 0 && cs_read_identity(sess_directory, generation, &identity))
		newest = identity.created_at;
	return newest;
}

/*
 * Open a new generation with its opening snapshot.  With a new slot the
 * snapshot is the slot's own (created here, SNAPSHOT 'use'); otherwise a
 * temporary slot on a second connection gives a snapshot at its consistent
 * point C, and the archiver's slot is streamed from C: transactions that
 * commit before C are in the snapshot, the others in the WAL segments.
 */
static void
open_generation(bool create_slot, uint64 sysid, uint32 tli, const char *reason)
{
	CsIdentity	identity;
	CsSnapshotResult result;
	char	   *tmpdir;
	char	   *snapdir;

	memset(&identity, 0, sizeof(identity));
	identity.system_identifier = sysid;
	identity.timeline = tli;
	strlcpy(identity.database, cs_database, NAMEDATALEN);
	strlcpy(identity.slot, cs_slot_name, NAMEDATALEN);
	strlcpy(identity.plugin, "pgoutput", NAMEDATALEN);
	strlcpy(identity.plugin_options, cs_plugin_options(),
			sizeof(identity.plugin_options));
	strlcpy(identity.reason, reason, sizeof(identity.reason));
	tmpdir = cs_generation_prepare(sess_directory, &identity);
	strlcpy(pending_gendir, tmpdir, sizeof(pending_gendir));
	snapdir = psprintf("%s/snapshots", tmpdir);

	if (create_slot)
	{
		cs_snapshot_take(conn, cs_slot_name, false, snapdir,
						 identity.generation, CS_PROGRESS_ARCHIVER, &result);
		ereport(LOG,
				(errmsg("changestream: created replication slot \"%s\" at %X/%X",
						cs_slot_name, LSN_FORMAT_ARGS(result.lsn))));
	}
	else
	{
		uint64		sysid2;
		uint32		tli2;
		char		slot_name[NAMEDATALEN];

		snprintf(slot_name, sizeof(slot_name), "changestream_snapshot_%d", MyProcPid);
		snap_conn = cs_connect(&sysid2, &tli2);
		cs_snapshot_take(snap_conn, slot_name, true, snapdir,
						 identity.generation, CS_PROGRESS_ARCHIVER, &result);
		cs_disconnect(snap_conn);
		snap_conn = NULL;
	}
	identity.start_lsn = result.lsn;
	cs_generation_commit(sess_directory, &identity, tmpdir);
	pending_gendir[0] = '\0';
	cur_generation = identity.generation;
	cs_writer_open_first(sess_directory, cur_generation, sysid, tli,
						 identity.start_lsn);
	writer_open = true;
	position = identity.start_lsn;
	SpinLockAcquire(&cs_status->mutex);
	cs_status->last_snapshot_at = GetCurrentTimestamp();
	SpinLockRelease(&cs_status->mutex);
}

static void
run_session(void)
{
	uint64		sysid;
	uint32		tli;
	CsSlotInfo	slot;
	List	   *gens;
	CsIdentity	identity;
	const char *reason;
	const char *slot_event = NULL;
	TimestampTz now;

	next_snapshot_attempt = 0;
	MemoryContextReset(session_cxt);
	MemoryContextSwitchTo(session_cxt);
	sess_directory = pstrdup(cs_directory);
	sess_slot = pstrdup(cs_slot_name);
	sess_publication = pstrdup(cs_publication);
	sess_conninfo = pstrdup(cs_conninfo);

	cs_status_set_state(CS_STATE_CONNECTING);
	SpinLockAcquire(&cs_status->mutex);
	strlcpy(cs_status->slot, cs_slot_name, NAMEDATALEN);
	SpinLockRelease(&cs_status->mutex);

	cs_writer_reset();
	cs_compress_reset();
	if (path_is_prefix_of_path(DataDir, sess_directory))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("changestream.directory \"%s\" is inside the data directory",
						sess_directory),
				 errhint("Put the archive outside the data directory: base backups would copy it and it would share the cluster's fate.")));
	lock_fd = cs_lock_archive(sess_directory);
	cs_remove_tmp_files(sess_directory);

	conn = cs_connect(&sysid, &tli);
	cs_check_publication(conn);
	cs_check_replica_identity(conn);
	cs_get_slot(conn, &slot);
	require_slot_free(conn, &slot);
	if (slot.exists && slot_undecodable)
	{
		cs_drop_slot(conn);
		slot.exists = false;
		slot_event = psprintf("replication slot \"%s\" could not decode past a point where publication \"%s\" did not exist (it was dropped and created again) and is recreated",
							  cs_slot_name, cs_publication);
	}
	slot_undecodable = false;
	if (slot.exists && slot.lost)
	{
		cs_drop_slot(conn);
		slot.exists = false;
		slot_event = psprintf("replication slot \"%s\" was invalidated (wal_status lost) and is recreated",
							  cs_slot_name);
	}
	if (!slot.exists && slot_event == NULL)
		slot_event = psprintf("replication slot \"%s\" did not exist and is created",
							  cs_slot_name);

	gens = cs_list_generations(sess_directory);
	reason = new_generation_reason(gens, sysid, tli, &slot, slot_event, &identity);
	if (reason == NULL)
	{
		cur_generation = *(uint64 *) llast(gens);
		cs_writer_recover(sess_directory, cur_generation, &position);
		writer_open = true;
		if (slot.confirmed_flush > position)
		{
			reason = psprintf("replication slot \"%s\" is ahead of the archive: its confirmed_flush_lsn %X/%X is past the archived position %X/%X",
							  cs_slot_name, LSN_FORMAT_ARGS(slot.confirmed_flush),
							  LSN_FORMAT_ARGS(position));
			writer_open = false;
		}
	}
	if (reason != NULL)
	{
		open_generation(!slot.exists, sysid, tli, reason);
		new_generation_requested(true); /* satisfied by this one */
		ereport(LOG,
				(errmsg("changestream: started generation %016llx at %X/%X",
						(unsigned long long) cur_generation,
						LSN_FORMAT_ARGS(position)),
				 errdetail("Reason: %s.", reason)));
	}
	else
	{
		ereport(last_session_failed ? DEBUG1 : LOG,
				(errmsg("changestream: resuming generation %016llx at %X/%X",
						(unsigned long long) cur_generation,
						LSN_FORMAT_ARGS(position))));
		SpinLockAcquire(&cs_status->mutex);
		cs_status->last_snapshot_at = newest_snapshot_time(cur_generation);
		SpinLockRelease(&cs_status->mutex);
	}

	pending_position = position;
	skip_before = position;
	received_lsn = position;
	keepalive_lsn = InvalidXLogRecPtr;
	unrecorded_keepalive = InvalidXLogRecPtr;
	in_txn = false;
	skipping = false;
	unsynced_since = 0;
	compress_credit = 0;

	SpinLockAcquire(&cs_status->mutex);
	cs_status->has_generation = true;
	cs_status->generation = cur_generation;
	SpinLockRelease(&cs_status->mutex);
	publish_status();

	cs_start_replication(conn, position);
	streaming = true;
	cs_status_set_state(CS_STATE_STREAMING);
	if (last_session_failed)
	{
		ereport(LOG,
				(errmsg("changestream: streaming again at %X/%X after %d failed attempt(s)",
						LSN_FORMAT_ARGS(position), suppressed_repeats + 1)));
		suppressed_repeats = 0;
		last_logged_error[0] = '\0';
	}
	last_session_failed = false;
	backoff_ms = 1000;
	now = GetCurrentTimestamp();
	send_status(now, false);
	last_position_record = now;

	stream_loop();

	/* a clean end of session: make everything durable and say so */
	cs_status_set_state(CS_STATE_STOPPING);
	flush_and_report(GetCurrentTimestamp());
	cs_writer_close();
	session_cleanup();
}

/*
 * before_shmem_exit callback: on SIGTERM (die -> FATAL) and any other
 * FATAL, make what was received durable and send a last status update
 * (durability rule 6).
 */
static void
archiver_exit(int code, Datum arg)
{
	if (cs_status != NULL)
		cs_status_set_state(CS_STATE_STOPPING);
	if (writer_open)
	{
		writer_open = false;
		cs_writer_flush();
		position = pending_position;
		if (streaming && conn != NULL)
		{
			streaming = false;
			cs_send_status_update(conn, Max(received_lsn, position), position,
								  false);
		}
		cs_writer_close();
	}
	if (conn != NULL)
		cs_disconnect(conn);
	conn = NULL;
	if (cs_status != NULL)
	{
		publish_status();
		SpinLockAcquire(&cs_status->mutex);
		cs_status->pid = 0;
		cs_status->archiver_latch = NULL;
		cs_status->state = CS_STATE_NOT_RUNNING;
		SpinLockRelease(&cs_status->mutex);
	}
}

/*
 * Whether to log an error: not when it repeats the last one logged (same
 * SQLSTATE and the same text up to the first quoted name, so that a fresh
 * temporary file name does not make it new) within ERROR_REPEAT_SECS.
 */
/*
 * before_shmem_exit callback for a worker that dies before it is connected
 * (typically: changestream.database does not exist): say so in status().
 */
static void
startup_exit(int code, Datum arg)
{
	SpinLockAcquire(&cs_status->mutex);
	if (cs_status->pid == MyProcPid && cs_status->state == CS_STATE_STARTING)
	{
		snprintf(cs_status->last_error, CS_ERROR_LEN,
				 "the archiver could not connect to database \"%s\" (changestream.database); see the server log",
				 cs_database);
		cs_status->last_error_at = GetCurrentTimestamp();
		cs_status->state = CS_STATE_NOT_RUNNING;
		cs_status->pid = 0;
	}
	SpinLockRelease(&cs_status->mutex);
}

static bool
should_log_error(int sqlerrcode, const char *message)
{
	TimestampTz now = GetCurrentTimestamp();
	char		key[CS_ERROR_LEN];
	char	   *quote;

	snprintf(key, sizeof(key), "%d:%s", sqlerrcode, message);
	quote = strchr(key, '"');
	if (quote)
		quote[1] = '\0';
	message = key;

	if (strncmp(message, last_logged_error, CS_ERROR_LEN - 1) == 0 &&
		!TimestampDifferenceExceeds(last_logged_at, now, ERROR_REPEAT_SECS * 1000))
	{
		suppressed_repeats++;
		return false;
	}
	if (suppressed_repeats > 0)
		ereport(LOG,
				(errmsg("changestream: the previous error repeated %d more times",
						suppressed_repeats)));
	suppressed_repeats = 0;
	strlcpy(last_logged_error, message, CS_ERROR_LEN);
	last_logged_at = now;
	return true;
}

/*
 * pgoutput decodes with the catalog as of each change: once a publication
 * is dropped, the slot cannot decode the changes made before it is created
 * again, and every restart of the stream fails at the same change.  When
 * the stream failed that way although the publication existed when the
 * session began, the next session recreates the slot and opens a new
 * generation (with its snapshot), instead of failing forever.  The match
 * is on the server's English message text.
 */
static void
note_stream_error(const char *message)
{
	char	   *needle;

	if (!streaming || message == NULL)
		return;
	needle = psprintf("publication \"%s\" does not exist", cs_publication);
	if (strstr(message, needle) != NULL && strstr(message, "WAL stream") != NULL)
	{
		slot_undecodable = true;
		ereport(LOG,
				(errmsg("changestream: replication slot \"%s\" cannot decode past a change made while publication \"%s\" did not exist",
						cs_slot_name, cs_publication),
				 errdetail("The next session recreates the slot and opens a new generation once the publication exists.")));
	}
	pfree(needle);
}

static void
sleep_ms(long ms)
{
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);
	bool		requested = new_generation_requested(false);

	for (;;)
	{
		long		left;
		int			rc;

		CHECK_FOR_INTERRUPTS();
		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), until);
		if (left <= 0)
			break;
		rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					   left, PG_WAIT_EXTENSION);
		if (rc & WL_LATCH_SET)
			ResetLatch(MyLatch);
		/* a reload, or a new request for a new generation, ends the wait */
		if (ConfigReloadPending ||
			(!requested && new_generation_requested(false)))
			break;
	}
}

/*
 * changestream_archiver_main(main_arg) -> void (never returns)
 *	  Entry point of the "changestream archiver" background worker,
 *	  registered by _PG_init().  Connects to changestream.database and runs
 *	  archiving sessions until SIGTERM.
 */
void
changestream_archiver_main(Datum main_arg)
{
	sigjmp_buf	local_sigjmp_buf;


	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	SpinLockAcquire(&cs_status->mutex);
	cs_status->pid = MyProcPid;
	cs_status->archiver_latch = MyLatch;
	cs_status->state = CS_STATE_STARTING;
	strlcpy(cs_status->database, cs_database, NAMEDATALEN);
	strlcpy(cs_status->slot, cs_slot_name, NAMEDATALEN);
	SpinLockRelease(&cs_status->mutex);

	before_shmem_exit(startup_exit, (Datum) 0);
	BackgroundWorkerInitializeConnection(cs_database, NULL, 0);
	cs_status_set_state(CS_STATE_CONNECTING);
	load_file("libpqwalreceiver", false);
	before_shmem_exit(archiver_exit, (Datum) 0);

	session_cxt = AllocSetContextCreate(TopMemoryContext, "changestream session",
										ALLOCSET_DEFAULT_SIZES);

	if (sigsetjmp(local_sigjmp_buf, 1) != 0)
	{
		ErrorData  *edata;

		error_context_stack = NULL;
		HOLD_INTERRUPTS();
		MemoryContextSwitchTo(TopMemoryContext);
		edata = CopyErrorData();
		note_stream_error(edata->message);
		if (should_log_error(edata->sqlerrcode, edata->message))
			EmitErrorReport();
		FlushErrorState();

		/*
		 * Release what the failed session held, as bgwriter.c does after an
		 * error: wait events, LWLocks, the transaction if one was open,
		 * and every file and directory fd.c tracks (AllocateDir,
		 * OpenTransientFile), which outside a transaction nothing else
		 * would close.  The long-lived files (active segment, compression,
		 * lock file) are closed by session_cleanup().
		 */
		pgstat_report_wait_end();
		LWLockReleaseAll();
		AbortOutOfAnyTransaction();
		AtEOXact_Files(false);
		session_cleanup();
		MemoryContextReset(session_cxt);
		sess_directory = sess_slot = sess_publication = sess_conninfo = NULL;
		cs_status_set_error(edata->message);
		FreeErrorData(edata);
		MemoryContextSwitchTo(TopMemoryContext);
		RESUME_INTERRUPTS();

		sleep_ms(backoff_ms);
		backoff_ms = Min(backoff_ms * 2, 30000);
		last_session_failed = true;
	}
	PG_exception_stack = &local_sigjmp_buf;

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (cs_directory == NULL || cs_directory[0] == '\0')
		{
			int			rc;

			cs_status_set_state(CS_STATE_DISABLED);
			if (!logged_disabled)
				ereport(LOG,
						(errmsg("changestream: archiving is disabled because changestream.directory is not set"),
						 errhint("Set changestream.directory in postgresql.conf and reload the configuration.")));
			logged_disabled = true;
			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_EXIT_ON_PM_DEATH, -1,
						   PG_WAIT_EXTENSION);
			if (rc & WL_LATCH_SET)
				ResetLatch(MyLatch);
			continue;
		}
		logged_disabled = false;
		run_session();
	}
}
