/*-------------------------------------------------------------------------
 *
 * shmem_status.h
 *	  Declarations of shmem_status.c: the workers' status in shared memory
 *	  and its accessors.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SHMEM_STATUS_H
#define CS_SHMEM_STATUS_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "storage/latch.h"
#include "storage/spin.h"

typedef enum CsWorkerState
{
	CS_STATE_NOT_RUNNING = 0,
	CS_STATE_DISABLED,
	CS_STATE_STARTING,
	CS_STATE_CONNECTING,
	CS_STATE_STREAMING,
	CS_STATE_ERROR,
	CS_STATE_STOPPING,
	CS_STATE_STANDBY,			/* the server is a standby: waits for promotion */
	CS_STATE_WAITING_FOR_REPLICA	/* replica_max_backlog: the slot waits */
} CsWorkerState;

#define CS_ERROR_LEN 1024
#define CS_MAX_DATABASES 64		/* entries: archived databases at most */

typedef struct CsProgress
{
	char		table[2 * NAMEDATALEN + 2]; /* being copied */
	int64		rows;			/* rows copied of it so far */
	char		waiting_for[256];	/* what slot creation waits for */
} CsProgress;

#define CS_PROGRESS_ARCHIVER	0
#define CS_PROGRESS_SNAPSHOT	1

/*
 * The workers' status in shared memory.  Only shmem_status.c touches it,
 * through the accessors below.  The scalars (up to text_start) are guarded
 * by the spinlock, a few stores at a time; the text fields after it by the
 * LWLock "changestream status".
 */
typedef struct CsStatus
{
	slock_t		mutex;
	pid_t		pid;
	CsWorkerState state;
	bool		has_generation;
	uint64		generation;
	int64		segment_index;
	XLogRecPtr	received_lsn;
	XLogRecPtr	flushed_lsn;
	TimestampTz last_message_at;
	TimestampTz last_flush_at;
	TimestampTz last_commit_time;	/* see CsStreamCounters */
	TimestampTz received_commit_time;	/* see CsStreamCounters */
	uint64		messages;
	uint64		transactions;
	uint64		bytes;
	double		commit_rate;	/* commits/s, see CsStreamCounters */
	int			group_commit_ms;	/* 0: no session has published */
	TimestampTz last_error_at;
	bool		snapshot_running;	/* a snapshot worker is active */
	pid_t		snapshot_pid;	/* its PID once it runs, else 0 */
	XLogRecPtr	snapshot_result_lsn;	/* last snapshot worker's result */
	int			snapshot_result_code;	/* its SQLSTATE when it failed */
	TimestampTz last_snapshot_at;
	bool		new_generation_requested;	/* by new_generation() */
	bool		handoff_pending;	/* a new generation's snapshot is taken
									 * and waits for the stream to reach
									 * its start (docs/DESIGN.md section 6) */
	uint64		handoff_generation; /* that generation, when pending */
	XLogRecPtr	handoff_lsn;	/* its start C, when pending */
	Latch	   *archiver_latch;
	bool		dropping;		/* DROP DATABASE of it runs */
	bool		dropped;		/* DROP DATABASE of it succeeded */
	bool		in_use;			/* claimed for database (under lock) */
	/* failure counters, since failures_since (shared memory initialised) */
	uint64		archiver_failures;	/* sessions ended in an error */
	uint64		snapshot_failures;	/* snapshot workers without a result */
	TimestampTz failures_since;
	/* the maintenance worker's work in this archive's tree */
	int64		maint_raw_sealed;	/* found at its last look, -1: unknown */
	uint64		maint_compressed;	/* segments, since the server started */
	TimestampTz maint_error_at;
	struct LWLock *lock;		/* guards what follows */

	/* text fields, under lock */
	char		database[NAMEDATALEN];
	char		slot[NAMEDATALEN];
	char		last_error[CS_ERROR_LEN];
	/* snapshot progress: [0] the archiver's, [1] the snapshot worker's */
	CsProgress	progress[2];
	char		no_replica_identity[512];	/* published tables lacking one */
	char		snapshot_result_error[CS_ERROR_LEN];
	char		maint_error[CS_ERROR_LEN];	/* maintenance, in this tree */
} CsStatus;

#define CS_STATUS_TEXT_START	offsetof(CsStatus, database)

/* What an archiving session has done so far, as status() shows it. */
typedef struct CsStreamCounters
{
	XLogRecPtr	received_lsn;
	XLogRecPtr	flushed_lsn;
	TimestampTz last_message_at;
	TimestampTz last_flush_at;
	TimestampTz last_commit_time;	/* commit time of the newest durable
									 * transaction, 0: none yet */
	TimestampTz received_commit_time;	/* of the newest transaction
										 * received, 0: none yet */
	uint64		messages;
	uint64		transactions;
	uint64		bytes;
	double		commit_rate;	/* commits/s archived, last period */
	int			group_commit_ms;	/* the group commit window now, ms */
} CsStreamCounters;

extern void cs_shmem_request(void);
extern void cs_shmem_startup(void);
extern const char *cs_state_name(CsWorkerState state);
extern bool cs_status_attached(void);
extern void cs_status_require_loaded(void);
extern void cs_status_copy(CsStatus *copy);
extern XLogRecPtr cs_status_flushed_lsn_of(uint64 generation);
/* one entry per archived database */
extern void cs_status_select(int index);
extern void cs_status_select_none(void);
extern int	cs_status_selected(void);
extern void cs_status_selected_database(char *database);
extern int	cs_status_index_of(const char *database);
extern int	cs_status_claim(const char *database);
extern void cs_status_release(int index);
extern bool cs_status_in_use(int index, char *database);
extern void cs_status_set_dropping(bool dropping, bool dropped);
extern bool cs_status_dropping(void);
extern void cs_status_forget_dropped(void);
extern pid_t cs_status_archiver_pid(void);
extern pid_t cs_status_archiver_disabled(void);
extern void cs_status_set_launch_error(const char *message);
/* the archiver */
extern void cs_status_archiver_started(Latch *latch, const char *database,
									   const char *slot);
extern void cs_status_archiver_startup_failed(const char *database);
extern void cs_status_archiver_exited(void);
extern void cs_status_set_state(CsWorkerState state);
extern void cs_status_set_error(const char *message);
extern void cs_status_set_slot(const char *slot);
extern void cs_status_slot(char *slot);
extern void cs_status_set_generation(uint64 generation);
extern void cs_status_set_segment(int64 index);
extern void cs_status_publish_progress(const CsStreamCounters *counters);
extern bool cs_status_new_generation_requested(bool clear);
/* What cs_status_request_new_generation() found. */
typedef enum CsRequestResult
{
	CS_REQUEST_MADE,			/* the archiver is asked and woken */
	CS_REQUEST_NO_ARCHIVER,		/* no archiver runs */
	CS_REQUEST_HANDOFF_PENDING	/* a hand-off is pending: nothing asked */
} CsRequestResult;

extern CsRequestResult cs_status_request_new_generation(void);
extern void cs_status_set_handoff(bool pending, uint64 generation,
								  XLogRecPtr start_lsn);
/* snapshots */
extern TimestampTz cs_status_last_snapshot(bool *running);
extern void cs_status_set_last_snapshot(TimestampTz at);
extern bool cs_status_claim_snapshot(bool *handoff_pending);
extern void cs_status_snapshot_not_launched(void);
extern void cs_status_snapshot_done(XLogRecPtr lsn);
extern void cs_status_snapshot_failed(int sqlerrcode, const char *message);
extern void cs_status_snapshot_worker_exited(void);
extern XLogRecPtr cs_status_snapshot_result(int *sqlerrcode, char *error,
											bool worker_gone);
extern bool cs_status_snapshot_running(void);
extern void cs_status_snapshot_worker_started(void);
extern pid_t cs_status_snapshot_pid(void);
extern void cs_status_set_progress(int which, const char *table, int64 rows,
								   const char *waiting_for);
extern void cs_status_clear_progress(int which);
extern void cs_status_set_no_replica_identity(const char *tables);

/* The maintenance worker's status */

/* A copy of the maintenance worker's status, as status() shows it. */
typedef struct CsMaintenanceStatus
{
	pid_t		pid;			/* 0: not running */
	int64		raw_sealed_segments;	/* found at its last look, -1: unknown */
	uint64		segments_compressed;	/* since the server started */
	bool		deferring;		/* waits for the archiver to catch up */
	TimestampTz last_error_at;
	char		last_error[1024];
} CsMaintenanceStatus;

extern void cs_maintenance_status_copy(CsMaintenanceStatus *copy);
extern void cs_maintenance_status_started(Latch *latch);
extern void cs_maintenance_status_exited(void);
extern void cs_maintenance_status_set_backlog(int64 raw_sealed_segments);
extern void cs_maintenance_status_compressed(void);
extern void cs_maintenance_status_set_error(const char *message);
extern void cs_maintenance_status_set_catching_up(bool catching_up);
extern bool cs_maintenance_status_archiver_catching_up(void);
extern void cs_maintenance_status_set_deferring(bool deferring);
extern void cs_maintenance_wake(void);

#endif							/* CS_SHMEM_STATUS_H */
