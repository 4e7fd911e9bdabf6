/*-------------------------------------------------------------------------
 *
 * slot_wal.c
 *	  The WAL a replication slot of the local server retains, read from
 *	  shared memory the way pg_get_replication_slots() (slotfuncs.c)
 *	  derives wal_status and safe_wal_size, so that status() and the
 *	  maintenance worker's warnings can say how close a stuck archive
 *	  brings the primary to a full pg_wal without a database connection
 *	  (issue 33, section 4).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogrecovery.h"
#include "replication/slot.h"
#include "storage/lwlock.h"
#include "storage/spin.h"

#include "base/slot_wal.h"

/* pg_replication_slots.wal_status's words for GetWALAvailability() */
static const char *
wal_status_name(WALAvailability avail)
{
	switch (avail)
	{
		case WALAVAIL_RESERVED:
			return "reserved";
		case WALAVAIL_EXTENDED:
			return "extended";
		case WALAVAIL_UNRESERVED:
			return "unreserved";
		case WALAVAIL_REMOVED:
		case WALAVAIL_INVALID_LSN:
			break;
	}
	return "lost";
}

/* The server's current WAL position: written, or replayed on a standby. */
static XLogRecPtr
current_lsn(void)
{
	return RecoveryInProgress() ? GetXLogReplayRecPtr(NULL) :
		GetXLogWriteRecPtr();
}

/*
 * cs_slot_wal
 *	  The WAL the local slot name retains, into *wal: its wal_status
 *	  ("reserved", "extended", "unreserved" or "lost": an invalidated slot
 *	  has no restart_lsn), the bytes from its restart_lsn to the server's
 *	  current position, and safe_wal_size, the bytes that may still be
 *	  written before the slot is lost (known only when
 *	  max_slot_wal_keep_size is set), as slotfuncs.c computes them.
 *	  Returns false when the server has no such slot.  Never raises.
 */
bool
cs_slot_wal(const char *name, CsSlotWal *wal)
{
	ReplicationSlot *slot;
	XLogRecPtr	now = current_lsn();

	memset(wal, 0, sizeof(*wal));
	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	slot = SearchNamedReplicationSlot(name, false);
	if (slot != NULL)
	{
		SpinLockAcquire(&slot->mutex);
		wal->restart_lsn = slot->data.restart_lsn;
		wal->confirmed_flush = slot->data.confirmed_flush;
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(ReplicationSlotControlLock);
	if (slot == NULL)
		return false;
	if (wal->restart_lsn == InvalidXLogRecPtr)
	{
		wal->wal_status = "lost";
		return true;
	}
	wal->wal_status = wal_status_name(GetWALAvailability(wal->restart_lsn));
	wal->retained_bytes = now > wal->restart_lsn ?
		(int64) (now - wal->restart_lsn) : 0;
	if (max_slot_wal_keep_size_mb >= 0 && strcmp(wal->wal_status, "lost") != 0)
	{
		XLogSegNo	target;
		XLogSegNo	fail;
		XLogRecPtr	fail_lsn;
		uint64		keep;

		XLByteToSeg(wal->restart_lsn, target, wal_segment_size);
		keep = Max(XLogMBVarToSegs(max_slot_wal_keep_size_mb, wal_segment_size),
				   XLogMBVarToSegs(wal_keep_size_mb, wal_segment_size));
		fail = target + keep + 1;
		XLogSegNoOffsetToRecPtr(fail, 0, wal_segment_size, fail_lsn);
		wal->safe_known = true;
		wal->safe_wal_size = (int64) fail_lsn - (int64) now;
	}
	return true;
}

/*
 * cs_slot_wal_limit_bytes
 *	  max_slot_wal_keep_size in bytes, or -1 when it is unlimited (the
 *	  server's default: a slot may then keep WAL until pg_wal is full).
 */
int64
cs_slot_wal_limit_bytes(void)
{
	if (max_slot_wal_keep_size_mb < 0)
		return -1;
	return (int64) max_slot_wal_keep_size_mb * 1024 * 1024;
}
