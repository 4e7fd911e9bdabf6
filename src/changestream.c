/*-------------------------------------------------------------------------
 *
 * changestream.c
 *	  Module entry point: _PG_init() defines the GUCs, asks for shared
 *	  memory, registers the launcher (which starts one archiver per
 *	  archived database), the maintenance worker and the uploader, and
 *	  installs the DROP DATABASE hook.  The library
 *	  must be in shared_preload_libraries; loaded any other way it does
 *	  nothing, and the SQL functions explain what is missing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"

#include "archive/reader_pins.h"
#include "base/guc.h"
#include "base/shmem_status.h"
#include "read/restore_progress.h"
#include "worker/archiver.h"
#include "worker/dropdb_hook.h"
#include "worker/launcher.h"
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
 *	  Called when the library is loaded.  Registers the launcher
 *	  (launcher.c: it starts one archiver per archived database as a
 *	  dynamic background worker), the maintenance worker (maintenance.c)
 *	  and, when changestream.replica_url is set at server start, the
 *	  uploader (uploader.c); installs the DROP DATABASE hook
 *	  (dropdb_hook.c).  Mirrors the registration in contrib/worker_spi.
 */
void
_PG_init(void)
{
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

	cs_register_launcher();
	cs_register_maintenance();
	cs_register_uploader();
	cs_install_dropdb_hook();
}
