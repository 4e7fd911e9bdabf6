/*-------------------------------------------------------------------------
 *
 * snapshot_worker.c
 *	  Snapshots taken while a generation is being streamed: on demand
 *	  (changestream.take_snapshot()) or every changestream.snapshot_interval.
 *	  They run in a dynamic background worker, "changestream snapshot",
 *	  with its own replication connection and a temporary slot, so that the
 *	  archiver keeps consuming and acknowledging its slot meanwhile: slot
 *	  creation may wait for long-running transactions, and copying a large
 *	  table takes time.  One snapshot runs at a time.
 *
 * Source: dynamic background workers, src/include/postmaster/bgworker.h;
 * the launch-and-wait pattern of contrib/worker_spi.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "replication/walreceiver.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "archive/archive_dir.h"
#include "archive/archive_layout.h"
#include "base/archive_config.h"
#include "base/shmem_status.h"
#include "worker/snapshot.h"
#include "worker/snapshot_worker.h"
#include "worker/walsender_conn.h"
#include "worker/walsender_reap.h"

/*
 * cs_launch_snapshot_worker
 *	  Claim the snapshot slot of the selected database's status entry
 *	  (cs_status_select()) and register a "changestream snapshot" worker
 *	  for generation of that database's archive.  CS_LAUNCH_BUSY when a
 *	  snapshot is already running, CS_LAUNCH_HANDOFF when a hand-off to a
 *	  new generation is pending (docs/DESIGN.md section 6),
 *	  CS_LAUNCH_NO_WORKER when no background worker slot is free (the claim
 *	  is released).
 *	  Returns CsLaunchResult.
 */
CsLaunchResult
cs_launch_snapshot_worker(uint64 generation, pid_t notify_pid,
						  BackgroundWorkerHandle **handle)
{
	BackgroundWorker worker;
	bool		handoff_pending;

	if (!cs_status_claim_snapshot(&handoff_pending))
		return handoff_pending ? CS_LAUNCH_HANDOFF : CS_LAUNCH_BUSY;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "changestream");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "changestream_snapshot_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "changestream snapshot");
	snprintf(worker.bgw_type, BGW_MAXLEN, "changestream snapshot");
	memcpy(worker.bgw_extra, &generation, sizeof(generation));
	/* the database whose archive it serves, and its status entry */
	cs_status_selected_database(worker.bgw_extra + sizeof(generation));
	worker.bgw_main_arg = Int32GetDatum(cs_status_selected());
	worker.bgw_notify_pid = notify_pid;
	if (!RegisterDynamicBackgroundWorker(&worker, handle))
	{
		cs_status_snapshot_not_launched();
		return CS_LAUNCH_NO_WORKER;
	}
	return CS_LAUNCH_OK;
}

static void
snapshot_exit(int code, Datum arg)
{
	cs_status_snapshot_worker_exited();
	cs_maintenance_wake();		/* retention runs after each snapshot */
}

/* the worker's replication connection, for snapshot_abandon() */
static struct WalReceiverConn *snapshot_conn = NULL;

/* the archive's configuration, taken at the worker's start */
static CsArchiveConfig *config = NULL;

/*
 * On the way out after an error, or after SIGTERM (a cancelled
 * take_snapshot()), whose FATAL does not pass through PG_CATCH: end the
 * walsender that may still wait in CREATE_REPLICATION_SLOT, so that it
 * frees its max_wal_senders slot and drops its temporary slot now rather
 * than when the transactions it waits for end.  Registered after the
 * database connection, so it runs before its shutdown callback.
 */
static void
snapshot_abandon(int code, Datum arg)
{
	struct WalReceiverConn *conn = snapshot_conn;

	snapshot_conn = NULL;
	cs_walsender_reap(config, conn);
}

/*
 * changestream_snapshot_main
 *	  Entry point of a "changestream snapshot" worker: takes one snapshot
 *	  with a temporary slot into generations/<gen>/snapshots/ (the generation
 *	  and the database are in bgw_extra, the database's status entry index
 *	  in main_arg) and publishes its LSN or its error in shared memory.
 */
void
changestream_snapshot_main(Datum main_arg)
{
	uint64		generation;
	char	   *volatile snapshots_dir = NULL;
	char		slot_name[NAMEDATALEN];
	CsSnapshotResult result;
	struct WalReceiverConn *conn;
	uint64		sysid;
	uint32		tli;
	MemoryContext old;

	memcpy(&generation, MyBgworkerEntry->bgw_extra, sizeof(generation));
	cs_status_select(DatumGetInt32(main_arg));
	cs_archive_config_serve(MyBgworkerEntry->bgw_extra + sizeof(generation));
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	before_shmem_exit(snapshot_exit, (Datum) 0);
	cs_status_snapshot_worker_started();

	old = MemoryContextSwitchTo(TopMemoryContext);
	config = cs_archive_config_current();
	MemoryContextSwitchTo(old);
	BackgroundWorkerInitializeConnection(config->database, NULL, 0);
	/* now that the database's OID is known: its slot name */
	old = MemoryContextSwitchTo(TopMemoryContext);
	config = cs_archive_config_current();
	MemoryContextSwitchTo(old);
	load_file("libpqwalreceiver", false);
	before_shmem_exit(snapshot_abandon, (Datum) 0);

	PG_TRY();
	{
		snapshots_dir = cs_snapshots_dir_path(cs_require_directory(), generation);
		snprintf(slot_name, sizeof(slot_name), "changestream_snapshot_%d", MyProcPid);
		conn = snapshot_conn = cs_connect(config, &sysid, &tli);
		cs_check_publication(config, conn);
		cs_snapshot_take(config, conn, slot_name, true, snapshots_dir, generation,
						 CS_PROGRESS_SNAPSHOT, &result);
		snapshot_conn = NULL;
		cs_disconnect(conn);
		cs_status_snapshot_done(result.lsn);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(TopMemoryContext);
		edata = CopyErrorData();
		cs_status_snapshot_failed(edata->sqlerrcode, edata->message);
		cs_snapshot_cleanup();
		PG_RE_THROW();
	}
	PG_END_TRY();
	proc_exit(0);
}
