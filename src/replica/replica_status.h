/*-------------------------------------------------------------------------
 *
 * replica_status.h
 *	  The uploader's status in shared memory, and the uploaded position
 *	  local retention honours (replica_status.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_REPLICA_STATUS_H
#define CS_REPLICA_STATUS_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"

typedef enum CsReplicaState
{
	CS_REPLICA_OFF = 0,			/* no uploader runs */
	CS_REPLICA_IDLE,			/* everything finished is up */
	CS_REPLICA_UPLOADING,
	CS_REPLICA_BACKOFF,			/* a retryable failure: waits, then again */
	CS_REPLICA_ERROR			/* a setting, the bucket or a conflict */
} CsReplicaState;

/* a copy of the uploader's status, as status() shows it */
typedef struct CsReplicaStatus
{
	pid_t		pid;			/* 0: no uploader */
	CsReplicaState state;
	XLogRecPtr	flushed_lsn;	/* end of the newest segment up in order */
	uint64		flushed_generation; /* the generation of flushed_lsn */
	int64		backlog_files;	/* finished files not up yet, -1 unknown */
	int64		backlog_bytes;
	TimestampTz last_upload_at;
	TimestampTz last_error_at;
	uint64		puts;			/* requests sent since the server started */
	uint64		gets;			/* GET and HEAD */
	uint64		lists;
	uint64		deletes;
	uint64		bytes_sent;		/* request bodies */
	uint64		failures;		/* failed passes (cs_replica_set_error()) */
	char		last_error[1024];
} CsReplicaStatus;

/* the archiver's durable position, for the uploader's tail sync */
typedef struct CsLocalDurable
{
	uint64		generation;
	int64		index;			/* the active segment */
	int64		bytes;			/* its durable bytes */
	XLogRecPtr	position;		/* the position of record they end at */
	TimestampTz at;				/* when noted; 0: never */
} CsLocalDurable;

/* which request a counter counts */
typedef enum CsReplicaRequest
{
	CS_REPLICA_PUT,
	CS_REPLICA_GET,
	CS_REPLICA_LIST,
	CS_REPLICA_DELETE
} CsReplicaRequest;

extern void cs_replica_shmem_request(void);
extern void cs_replica_shmem_startup(void);
extern const char *cs_replica_state_name(CsReplicaState state);
extern void cs_replica_status_copy(CsReplicaStatus *copy);
extern void cs_replica_status_started(void);
extern void cs_replica_status_exited(void);
extern void cs_replica_set_state(CsReplicaState state);
extern void cs_replica_set_error(CsReplicaState state, const char *message);
extern void cs_replica_count(CsReplicaRequest kind, uint64 bytes_sent);
extern void cs_replica_set_backlog(int64 files, int64 bytes);
extern void cs_replica_uploaded(uint64 bytes_left, bool one_file_less);
extern void cs_replica_set_flushed(uint64 generation, XLogRecPtr lsn);
extern void cs_replica_set_position(uint64 generation, int64 next_segment,
									XLogRecPtr snapshot_lsn);
extern void cs_replica_forget_position(void);
extern XLogRecPtr cs_replica_remote_durable(uint64 generation);
extern void cs_replica_note_local_durable(const CsLocalDurable *local);
extern bool cs_replica_local_durable(CsLocalDurable *local);
extern bool cs_replica_lag_seconds(TimestampTz now, double *lag);
extern bool cs_replica_backlog_exceeded(bool waiting);
/* for local retention (retention.c) */
extern bool cs_replica_configured(void);
extern bool cs_replica_generation_up(uint64 generation);
extern int64 cs_replica_first_segment_not_up(uint64 generation);
extern XLogRecPtr cs_replica_newest_snapshot_up(uint64 generation);

#endif							/* CS_REPLICA_STATUS_H */
