/*-------------------------------------------------------------------------
 *
 * changestream.c
 *	  Module entry point: _PG_init() defines the GUCs, asks for shared
 *	  memory and registers the archiver background worker.  The library
 *	  must be in shared_preload_libraries; loaded any other way it does
 *	  nothing, and the SQL functions explain what is missing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"

#include "archive/reader_pins.h"
#include "base/guc.h"
#include "base/shmem_status.h"
#include "read/restore_progress.h"
#include "worker/archiver.h"
#include "worker/maintenance.h"
#include "worker/uploader.h"
#include "replica/replica_status.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
changestream_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	cs_shmem_request();
	cs_pins_shmem_request();
	cs_progress_shmem_request();
	cs_replica_shmem_request();
}

static void
changestream_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	cs_shmem_startup();
	cs_pins_shmem_init();
	cs_progress_shmem_init();
	cs_replica_shmem_startup();
}

/*
 * _PG_init() -> void
 *	  Called when the library is loaded.  Registers one archiver worker
 *	  (BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION, started
 *	  once recovery has finished, restarted 5 s after an unexpected exit)
 *	  the maintenance worker (maintenance.c) and, when changestream.replica_url
 *	  is set at server start, the uploader (uploader.c).  Mirrors the registration in
 *	  contrib/worker_spi.
 */
void
_PG_init(void)
{
	BackgroundWorker worker;

	/*
	 * Loaded any other way (CREATE EXTENSION, LOAD) the library defines
	 * nothing: changestream.database is PGC_POSTMASTER and cannot be
	 * defined after startup.  The SQL functions then raise
	 * object_not_in_prerequisite_state with a hint
	 * (cs_status_require_loaded()).
	 */
	if (!process_shared_preload_libraries_in_progress)
		return;

	cs_define_gucs();

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = changestream_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = changestream_shmem_startup;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	/*
	 * On a hot standby the archiver starts too, to show state "standby" and
	 * take over at promotion without a restart (archiver.c).
	 */
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "changestream");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "changestream_archiver_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "changestream archiver");
	snprintf(worker.bgw_type, BGW_MAXLEN, "changestream archiver");
	worker.bgw_notify_pid = 0;
	RegisterBackgroundWorker(&worker);

	cs_register_maintenance();
	cs_register_uploader();
}
