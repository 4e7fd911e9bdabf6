/*-------------------------------------------------------------------------
 *
 * slot_wal_watch.c
 *	  The maintenance worker's watch over the WAL each archiver's slot keeps
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
 *	  Each archived database's slot is watched on its own (its tree's
 *	  status entry, as the maintenance worker serves it in turn), with its
 *	  own thresholds; the unlimited setting is warned of once per slot.
 *	  status() shows the same figures (slot_wal.c).  The slot's
 *	  invalidation by max_slot_wal_keep_size is the archiver's to handle: a
 *	  new generation whose reason says so (docs/DESIGN.md section 6).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "base/shmem_status.h"
#include "base/slot_wal.h"
#include "worker/slot_wal_watch.h"

#define SLOT_WAL_WARN_BYTES	((int64) 1024 * 1024 * 1024)

/* what was warned of for one slot: one per status entry */
typedef struct Watched
{
	char		slot[NAMEDATALEN];
	bool		warned_unlimited;
	int64		passed_threshold;	/* the last threshold warned of; 0: none */
} Watched;

static Watched watched[CS_MAX_DATABASES + 1];

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
 *	  the file header says.  config's status entry is the one selected;
 *	  without a slot name in config (a database other than
 *	  changestream.database: its slot is named by an OID this process
 *	  without a database connection does not know), the slot its archiver
 *	  published there.  Never raises above WARNING.
 */
void
cs_slot_wal_watch(const CsArchiveConfig *config)
{
	CsSlotWal	wal;
	int64		limit = cs_slot_wal_limit_bytes();
	int64		next;
	char		slot[NAMEDATALEN];
	Watched    *w = &watched[cs_status_attached() ? cs_status_selected() : 0];

	if (limit >= 0)
		for (int i = 0; i <= CS_MAX_DATABASES; i++)
			watched[i].warned_unlimited = false;
	strlcpy(slot, config->slot_name, sizeof(slot));
	if (slot[0] == '\0' && cs_status_attached())
		cs_status_slot(slot);
	if (strcmp(w->slot, slot) != 0)
	{
		/* another slot in this entry: start over */
		memset(w, 0, sizeof(Watched));
		strlcpy(w->slot, slot, sizeof(w->slot));
	}
	if (slot[0] == '\0' || !cs_archive_config_local(config) ||
		!cs_slot_wal(slot, &wal) ||
		strcmp(wal.wal_status, "lost") == 0)
		return;
	if (limit < 0 && !w->warned_unlimited)
	{
		ereport(WARNING,
				(errmsg("max_slot_wal_keep_size is unlimited: if the changestream archive gets stuck, replication slot \"%s\" keeps WAL until pg_wal is full",
						slot),
				 errhint("Set max_slot_wal_keep_size below the free space of pg_wal's volume: past it the server invalidates the slot, and the archive opens a new generation instead of the primary stopping.")));
		w->warned_unlimited = true;
	}
	if (w->passed_threshold > 0 && wal.retained_bytes < w->passed_threshold / 2)
		w->passed_threshold = 0;
	next = w->passed_threshold > 0 ? w->passed_threshold * 2 : first_threshold(limit);
	if (wal.retained_bytes < next)
		return;
	while (next * 2 <= wal.retained_bytes)
		next *= 2;
	w->passed_threshold = next;
	ereport(WARNING,
			(errmsg("replication slot \"%s\" keeps " INT64_FORMAT " MB of WAL for the changestream archive",
					slot, wal.retained_bytes / (1024 * 1024)),
			 errdetail("The archive is confirmed up to %X/%X; the server keeps WAL from %X/%X for the slot (wal_status %s).",
					   LSN_FORMAT_ARGS(wal.confirmed_flush),
					   LSN_FORMAT_ARGS(wal.restart_lsn), wal.wal_status),
			 limit < 0 ?
			 errhint("changestream.status() says why the archiver is behind (state, last_error). max_slot_wal_keep_size is unlimited, so nothing stops the slot from filling pg_wal.") :
			 errhint("changestream.status() says why the archiver is behind (state, last_error). Past max_slot_wal_keep_size (" INT64_FORMAT " MB) the server invalidates the slot and the archive opens a new generation.",
					 limit / (1024 * 1024))));
}
