/*-------------------------------------------------------------------------
 *
 * slot_wal_watch.c
 *	  The maintenance worker's watch over the WAL the archiver's slot keeps
 *	  on the local server (issue 33, section 4): a stuck archive (a full
 *	  disk, an error it retries, archiving turned off) keeps the slot where
 *	  it is, which is right for durability, but the primary must hear of it
 *	  before pg_wal fills.  So, in the server log:
 *	  - once per start of the worker (and again after a reload that set it
 *	    and then reset it), a WARNING when max_slot_wal_keep_size is
 *	    unlimited, the server's default, while the slot exists;
 *	  - a WARNING each time the retained WAL passes a threshold: the first
 *	    at SLOT_WAL_WARN_BYTES, or half of max_slot_wal_keep_size when that
 *	    is smaller, then each doubling of the last one; once the retained
 *	    WAL falls below half of the last threshold passed, the thresholds
 *	    start over.
 *	  status() shows the same figures (slot_wal.c).  The slot's
 *	  invalidation by max_slot_wal_keep_size is the archiver's to handle: a
 *	  new generation whose reason says so (docs/DESIGN.md section 6).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "base/slot_wal.h"
#include "worker/slot_wal_watch.h"

#define SLOT_WAL_WARN_BYTES	((int64) 1024 * 1024 * 1024)

static bool warned_unlimited = false;
static int64 passed_threshold = 0;	/* the last threshold warned of; 0: none */

/* The first threshold: 1 GB, or half of max_slot_wal_keep_size. */
static int64
first_threshold(int64 limit)
{
	if (limit >= 0 && limit / 2 < SLOT_WAL_WARN_BYTES)
		return Max(limit / 2, 1);
	return SLOT_WAL_WARN_BYTES;
}

/*
 * cs_slot_wal_watch
 *	  Look at config's slot on the local server (nothing when the archiver
 *	  streams from another server or the slot does not exist) and warn as
 *	  the file header says.  Never raises above WARNING.
 */
void
cs_slot_wal_watch(const CsArchiveConfig *config)
{
	CsSlotWal	wal;
	int64		limit = cs_slot_wal_limit_bytes();
	int64		next;

	if (limit >= 0)
		warned_unlimited = false;
	if (!cs_archive_config_local(config) ||
		!cs_slot_wal(config->slot_name, &wal) ||
		strcmp(wal.wal_status, "lost") == 0)
		return;
	if (limit < 0 && !warned_unlimited)
	{
		ereport(WARNING,
				(errmsg("max_slot_wal_keep_size is unlimited: if the changestream archive gets stuck, replication slot \"%s\" keeps WAL until pg_wal is full",
						config->slot_name),
				 errhint("Set max_slot_wal_keep_size below the free space of pg_wal's volume: past it the server invalidates the slot, and the archive opens a new generation instead of the primary stopping.")));
		warned_unlimited = true;
	}
	if (passed_threshold > 0 && wal.retained_bytes < passed_threshold / 2)
		passed_threshold = 0;
	next = passed_threshold > 0 ? passed_threshold * 2 : first_threshold(limit);
	if (wal.retained_bytes < next)
		return;
	while (next * 2 <= wal.retained_bytes)
		next *= 2;
	passed_threshold = next;
	ereport(WARNING,
			(errmsg("replication slot \"%s\" keeps " INT64_FORMAT " MB of WAL for the changestream archive",
					config->slot_name, wal.retained_bytes / (1024 * 1024)),
			 errdetail("The archive is confirmed up to %X/%X; the server keeps WAL from %X/%X for the slot (wal_status %s).",
					   LSN_FORMAT_ARGS(wal.confirmed_flush),
					   LSN_FORMAT_ARGS(wal.restart_lsn), wal.wal_status),
			 limit < 0 ?
			 errhint("changestream.status() says why the archiver is behind (state, last_error). max_slot_wal_keep_size is unlimited, so nothing stops the slot from filling pg_wal.") :
			 errhint("changestream.status() says why the archiver is behind (state, last_error). Past max_slot_wal_keep_size (" INT64_FORMAT " MB) the server invalidates the slot and the archive opens a new generation.",
					 limit / (1024 * 1024))));
}
