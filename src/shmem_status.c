/*-------------------------------------------------------------------------
 *
 * shmem_status.c
 *	  The archiver's status in shared memory: written by the worker, read by
 *	  changestream.status().  A spinlock guards it; every critical section
 *	  is a few stores or a memcpy.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "changestream.h"

CsStatus   *cs_status = NULL;

/*
 * cs_shmem_request() -> void
 *	  Reserve space for CsStatus.  Runs from shmem_request_hook (PG15+),
 *	  as contrib/pg_stat_statements does.
 */
void
cs_shmem_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(CsStatus)));
}

/*
 * cs_shmem_startup() -> void
 *	  Attach to (and on first use initialise) CsStatus.  Runs from
 *	  shmem_startup_hook in the postmaster and every EXEC_BACKEND child.
 */
void
cs_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	cs_status = ShmemInitStruct("changestream status", sizeof(CsStatus), &found);
	if (!found)
	{
		memset(cs_status, 0, sizeof(CsStatus));
		SpinLockInit(&cs_status->mutex);
		cs_status->state = CS_STATE_NOT_RUNNING;
		cs_status->segment_index = -1;
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * cs_state_name(state) -> const char *
 *	  The name status() shows for a worker state.
 */
const char *
cs_state_name(CsWorkerState state)
{
	switch (state)
	{
		case CS_STATE_NOT_RUNNING:
			return "not running";
		case CS_STATE_DISABLED:
			return "disabled";
		case CS_STATE_STARTING:
			return "starting";
		case CS_STATE_CONNECTING:
			return "connecting";
		case CS_STATE_STREAMING:
			return "streaming";
		case CS_STATE_ERROR:
			return "error";
		case CS_STATE_STOPPING:
			return "stopping";
	}
	return "unknown";
}

/*
 * cs_status_set_state(state) -> void
 *	  Publish the worker's state.
 */
void
cs_status_set_state(CsWorkerState state)
{
	SpinLockAcquire(&cs_status->mutex);
	cs_status->state = state;
	SpinLockRelease(&cs_status->mutex);
}

/*
 * cs_status_set_error(message) -> void
 *	  Record the last error (truncated to CS_ERROR_LEN - 1 bytes) and when.
 *	  NULL clears nothing: errors stay visible until the next one.
 */
void
cs_status_set_error(const char *message)
{
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&cs_status->mutex);
	strlcpy(cs_status->last_error, message ? message : "", CS_ERROR_LEN);
	cs_status->last_error_at = now;
	cs_status->state = CS_STATE_ERROR;
	SpinLockRelease(&cs_status->mutex);
}
