/*-------------------------------------------------------------------------
 *
 * snapshot_worker.h
 *	  Declarations of snapshot_worker.c: the snapshot background worker.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SNAPSHOT_WORKER_H
#define CS_SNAPSHOT_WORKER_H


struct BackgroundWorkerHandle;

typedef enum CsLaunchResult
{
	CS_LAUNCH_OK,
	CS_LAUNCH_BUSY,				/* a snapshot is already running */
	CS_LAUNCH_NO_WORKER,		/* no background worker slot */
	CS_LAUNCH_HANDOFF			/* a hand-off to a new generation is pending */
} CsLaunchResult;

extern CsLaunchResult cs_launch_snapshot_worker(uint64 generation, pid_t notify_pid,
												struct BackgroundWorkerHandle **handle);
extern PGDLLEXPORT void changestream_snapshot_main(Datum main_arg);

#endif							/* CS_SNAPSHOT_WORKER_H */
