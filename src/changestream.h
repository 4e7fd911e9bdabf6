/*-------------------------------------------------------------------------
 *
 * changestream.h
 *	  Declarations shared by changestream's source files: GUC variables,
 *	  the worker status kept in shared memory, and the entry points of each
 *	  file.  Each file's own header comment says what it is responsible for.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CHANGESTREAM_H
#define CHANGESTREAM_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "storage/latch.h"
#include "storage/spin.h"

#include "archive_layout.h"

/* ---------- guc.c ---------- */

extern char *cs_directory;
extern char *cs_database;
extern char *cs_slot_name;
extern char *cs_publication;
extern char *cs_conninfo;
extern int	cs_status_interval_ms;
extern int	cs_flush_interval_ms;
extern int	cs_segment_size_kb;
extern int	cs_segment_timeout_s;
extern int	cs_compression_level;
extern int	cs_snapshot_interval_s;

extern void cs_define_gucs(void);

/* ---------- shmem_status.c ---------- */

typedef enum CsWorkerState
{
	CS_STATE_NOT_RUNNING = 0,
	CS_STATE_DISABLED,
	CS_STATE_STARTING,
	CS_STATE_CONNECTING,
	CS_STATE_STREAMING,
	CS_STATE_ERROR,
	CS_STATE_STOPPING
} CsWorkerState;

#define CS_ERROR_LEN 1024

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
	uint64		messages;
	uint64		transactions;
	uint64		bytes;
	TimestampTz last_error_at;
	bool		snapshot_running;	/* a snapshot worker is active */
	XLogRecPtr	snapshot_result_lsn;	/* last snapshot worker's result */
	int			snapshot_result_code;	/* its SQLSTATE when it failed */
	TimestampTz last_snapshot_at;
	bool		new_generation_requested;	/* by new_generation() */
	Latch	   *archiver_latch;
	struct LWLock *lock;		/* guards what follows */

	/* text fields, under lock */
	char		database[NAMEDATALEN];
	char		slot[NAMEDATALEN];
	char		last_error[CS_ERROR_LEN];
	/* snapshot progress: [0] the archiver's, [1] the snapshot worker's */
	CsProgress	progress[2];
	char		no_replica_identity[512];	/* published tables lacking one */
	char		snapshot_result_error[CS_ERROR_LEN];
} CsStatus;

#define CS_STATUS_TEXT_START	offsetof(CsStatus, database)

/* What an archiving session has done so far, as status() shows it. */
typedef struct CsStreamCounters
{
	XLogRecPtr	received_lsn;
	XLogRecPtr	flushed_lsn;
	TimestampTz last_message_at;
	TimestampTz last_flush_at;
	uint64		messages;
	uint64		transactions;
	uint64		bytes;
} CsStreamCounters;

extern CsStatus *cs_status;

extern void cs_shmem_request(void);
extern void cs_shmem_startup(void);
extern const char *cs_state_name(CsWorkerState state);
extern void cs_status_copy(CsStatus *copy);
extern XLogRecPtr cs_status_flushed_lsn_of(uint64 generation);
/* the archiver */
extern void cs_status_archiver_started(Latch *latch, const char *database,
									   const char *slot);
extern void cs_status_archiver_startup_failed(const char *database);
extern void cs_status_archiver_exited(void);
extern void cs_status_set_state(CsWorkerState state);
extern void cs_status_set_error(const char *message);
extern void cs_status_set_slot(const char *slot);
extern void cs_status_set_generation(uint64 generation);
extern void cs_status_set_segment(int64 index);
extern void cs_status_publish_progress(const CsStreamCounters *counters);
extern bool cs_status_new_generation_requested(bool clear);
extern bool cs_status_request_new_generation(void);
/* snapshots */
extern TimestampTz cs_status_last_snapshot(bool *running);
extern void cs_status_set_last_snapshot(TimestampTz at);
extern bool cs_status_claim_snapshot(void);
extern void cs_status_snapshot_not_launched(void);
extern void cs_status_snapshot_done(XLogRecPtr lsn);
extern void cs_status_snapshot_failed(int sqlerrcode, const char *message);
extern void cs_status_snapshot_worker_exited(void);
extern XLogRecPtr cs_status_snapshot_result(int *sqlerrcode, char *error,
											bool worker_gone);
extern bool cs_status_snapshot_running(void);
extern void cs_status_set_progress(int which, const char *table, int64 rows,
								   const char *waiting_for);
extern void cs_status_clear_progress(int which);
extern void cs_status_set_no_replica_identity(const char *tables);

/* ---------- archive_dir.c ---------- */

extern void cs_fsync_path(const char *path, bool isdir);
extern void cs_fsync_fd(int fd, const char *path);
extern void cs_make_dir(const char *path);
extern int	cs_lock_archive(const char *directory);
extern int	cs_lock_archive_compressor(const char *directory);
extern void cs_remove_tmp_files(const char *directory);
extern void cs_durable_rename(const char *from, const char *to,
							  const char *dir);
extern const char *cs_require_directory(void);

/* ---------- generation.c ---------- */

typedef struct CsIdentity
{
	uint32		format_version;
	uint64		generation;
	uint64		system_identifier;
	uint32		timeline;
	char		database[NAMEDATALEN];
	char		slot[NAMEDATALEN];
	char		plugin[NAMEDATALEN];
	char		plugin_options[256];
	XLogRecPtr	start_lsn;
	TimestampTz created_at;
	char		reason[512];
} CsIdentity;

extern void cs_format_utc(TimestampTz t, char *buf, size_t len);
extern void cs_validate_generation_arg(const char *text, uint64 *generation);
extern bool cs_read_identity(const char *directory, uint64 generation,
							 CsIdentity *identity);
extern char *cs_generation_prepare(const char *directory, CsIdentity *identity);
extern void cs_generation_commit(const char *directory, CsIdentity *identity,
								 const char *tmpdir);

/* ---------- segment_format.c ---------- */

#define CS_FORMAT_VERSION		1
#define CS_SEGMENT_MAGIC		"CSTRMWAL"
#define CS_SEGMENT_HEADER_SIZE	64
#define CS_FRAME_HEADER_SIZE	12
#define CS_ENTRY_HEADER_SIZE	29
#define CS_MAX_FRAME_BODY		(1024 * 1024 * 1024)

/* entry kinds inside a frame */
#define CS_ENTRY_MESSAGE	'w'		/* an XLogData message as streamed */
#define CS_ENTRY_PREAMBLE	's'		/* Relation/Type message repeated at
									 * segment start */
#define CS_ENTRY_POSITION	'k'		/* durable keepalive position */

typedef struct CsSegmentHeader
{
	uint32		format_version;
	uint64		system_identifier;
	uint64		generation;
	uint64		segment_index;
	XLogRecPtr	start_lsn;
	uint32		timeline;
} CsSegmentHeader;

typedef struct CsEntry
{
	char		kind;
	XLogRecPtr	data_start;
	XLogRecPtr	wal_end;
	TimestampTz send_time;
	uint32		len;
	const char *data;
} CsEntry;

extern void cs_encode_segment_header(const CsSegmentHeader *hdr, char *buf);
extern bool cs_decode_segment_header(const char *buf, CsSegmentHeader *hdr);
extern void cs_append_entry(StringInfo frame, char kind, XLogRecPtr data_start,
							XLogRecPtr wal_end, TimestampTz send_time,
							const char *data, uint32 len);
extern void cs_frame_begin(StringInfo frame);
extern void cs_frame_finish(StringInfo frame);
extern bool cs_frame_check_header(const char *hdr, uint32 *body_len,
								  uint32 *crc);
extern bool cs_frame_body_valid(const char *body, uint32 body_len, uint32 crc);
extern bool cs_next_entry(const char *body, uint32 body_len, uint32 *offset,
						  CsEntry *entry);

/* ---------- pgoutput_parse.c ---------- */

typedef struct CsMessageInfo
{
	char		type;			/* pgoutput message type byte */
	XLogRecPtr	lsn;			/* B: final (commit) LSN; C: commit LSN; M:
								 * message LSN */
	XLogRecPtr	end_lsn;		/* C: end LSN */
	bool		transactional;	/* M: flag */
	Oid			oid;			/* R: relation OID; Y: type OID */
} CsMessageInfo;

extern bool cs_parse_pgoutput(const char *data, uint32 len,
							  CsMessageInfo *info);

/* ---------- segment_reader.c ---------- */

typedef struct CsSegmentReader CsSegmentReader;

extern CsSegmentReader *cs_reader_open(const char *path, bool compressed,
									   bool missing_ok);
extern const CsSegmentHeader *cs_reader_header(CsSegmentReader *reader);
extern const char *cs_reader_path(CsSegmentReader *reader);
extern bool cs_reader_next_frame(CsSegmentReader *reader);
extern bool cs_reader_next_entry(CsSegmentReader *reader, CsEntry *entry);
extern bool cs_reader_finish(CsSegmentReader *reader, bool may_be_torn);
extern int64 cs_reader_frame_offset(CsSegmentReader *reader);
extern int64 cs_reader_valid_end(CsSegmentReader *reader);
extern uint32 cs_reader_entry_offset(CsSegmentReader *reader);
extern bool cs_reader_frame_done(CsSegmentReader *reader);
extern void cs_reader_close(CsSegmentReader *reader);

/*
 * The position of record of a stream of entries, advanced entry by entry
 * (cs_track_entry()), with what is needed to check the stream's order.
 */
typedef struct CsPositionTracker
{
	XLogRecPtr	position;		/* position of record so far */
	bool		in_txn;			/* between a BEGIN and its COMMIT */
	XLogRecPtr	begin_lsn;		/* final LSN of the open transaction */
	XLogRecPtr	last_commit_lsn;	/* commit LSN of the last COMMIT */
	uint64		transactions;	/* COMMITs seen */
} CsPositionTracker;

extern const char *cs_track_entry(CsPositionTracker *tracker,
								  const CsEntry *entry,
								  const CsMessageInfo *info);

/*
 * Positions found by scanning a segment: what recovery and the SQL
 * functions need to know about its end.
 */
typedef struct CsSegmentScan
{
	CsSegmentHeader header;
	XLogRecPtr	position;		/* position of record at the safe end:
								 * greatest of start LSN, commit end LSNs,
								 * keepalive positions, non-tx message
								 * LSN + 1 */
	XLogRecPtr	last_commit_lsn;	/* commit LSN of last complete txn */
	int64		safe_frame_offset;	/* offset of frame holding safe end */
	uint32		safe_entry_offset;	/* end of safe entries in that frame;
									 * 0 = whole frame is safe */
	int64		safe_end;		/* file offset after last safe frame */
	int64		valid_end;		/* file offset after last valid frame */
	bool		torn;			/* ends in a torn tail */
	uint64		transactions;
} CsSegmentScan;

typedef void (*CsSchemaCallback) (const CsEntry *entry,
								  const CsMessageInfo *info, void *arg);

extern bool cs_scan_segment(const char *path, bool compressed,
							bool may_be_torn, CsSegmentScan *scan,
							CsSchemaCallback schema_cb, void *arg);


/* ---------- segment_writer.c ---------- */

extern void cs_writer_reset(void);
extern void cs_writer_recover(const char *directory, uint64 generation,
							  XLogRecPtr confirmed_flush,
							  XLogRecPtr *position);
extern void cs_writer_open_first(const char *directory, uint64 generation,
								 uint64 system_identifier, uint32 timeline,
								 XLogRecPtr start_lsn);
extern void cs_writer_add(char kind, XLogRecPtr data_start, XLogRecPtr wal_end,
						  TimestampTz send_time, const char *data, uint32 len);
extern void cs_writer_note_schema(const char *data, uint32 len,
								  const CsMessageInfo *info, bool in_segment);
extern void cs_writer_flush(void);
extern bool cs_writer_unsynced(void);
extern bool cs_writer_should_rotate(TimestampTz now);
extern void cs_writer_rotate(XLogRecPtr position);
extern void cs_writer_close(void);

/* ---------- walsender_conn.c ---------- */

struct WalReceiverConn;
struct WalRcvExecResult;

typedef struct CsSlotInfo
{
	bool		exists;
	bool		lost;
	XLogRecPtr	confirmed_flush;
	bool		active;			/* a walsender is streaming from it */
	int			active_pid;		/* that walsender's PID, on the server */
} CsSlotInfo;

extern struct WalReceiverConn *cs_connect(uint64 *system_identifier,
										  uint32 *timeline);
extern void cs_disconnect(struct WalReceiverConn *conn);
extern void cs_get_slot(struct WalReceiverConn *conn, CsSlotInfo *info);
extern void cs_drop_slot(struct WalReceiverConn *conn);
extern void cs_check_publication(struct WalReceiverConn *conn);
extern void cs_start_replication(struct WalReceiverConn *conn,
								 XLogRecPtr startpoint);
extern void cs_send_status_update(struct WalReceiverConn *conn,
								  XLogRecPtr write_lsn, XLogRecPtr flush_lsn,
								  bool reply_requested);
extern struct WalRcvExecResult *cs_exec(struct WalReceiverConn *conn,
										const char *sql, int expect);
extern List *cs_exec_rows(struct WalReceiverConn *conn, const char *sql,
						  int ncols);
extern const char *cs_plugin_options(void);
extern const char *cs_session_settings(void);

/* ---------- snapshot.c ---------- */

typedef struct CsSnapshotResult
{
	XLogRecPtr	lsn;
	int			tables;
	int64		rows;
} CsSnapshotResult;

extern XLogRecPtr cs_snapshot_take(struct WalReceiverConn *conn,
								   const char *slot_name, bool temporary,
								   const char *snapshots_dir, uint64 generation,
								   int progress_slot, CsSnapshotResult *result);
extern void cs_snapshot_cleanup(void);
extern void cs_check_replica_identity(struct WalReceiverConn *conn);

/* ---------- snapshot_manifest.c ---------- */

struct stat;
extern bool cs_snapshot_read_manifest(const char *path, XLogRecPtr *lsn,
									  int *tables, int64 *rows,
									  struct stat *st);

/* ---------- snapshot_worker.c ---------- */

struct BackgroundWorkerHandle;

typedef enum CsLaunchResult
{
	CS_LAUNCH_OK,
	CS_LAUNCH_BUSY,				/* a snapshot is already running */
	CS_LAUNCH_NO_WORKER			/* no background worker slot */
} CsLaunchResult;

extern CsLaunchResult cs_launch_snapshot_worker(uint64 generation, pid_t notify_pid,
												struct BackgroundWorkerHandle **handle);
extern PGDLLEXPORT void changestream_snapshot_main(Datum main_arg);

/* ---------- stream.c ---------- */

extern void cs_stream_reset(void);
extern void cs_stream_writer_opened(XLogRecPtr position);
extern void cs_stream_started(struct WalReceiverConn *conn);
extern bool cs_stream_is_streaming(void);
extern bool cs_stream_made_durable(void);
extern bool cs_stream_receive(pgsocket *fd);
extern void cs_stream_periodic(TimestampTz now, bool idle);
extern void cs_stream_wait(pgsocket fd, TimestampTz now);
extern void cs_stream_finish(void);
extern void cs_stream_exit(void);

/* ---------- generation_policy.c ---------- */

extern const char *cs_new_generation_reason(const char *directory, List *gens,
											uint64 sysid, uint32 tli,
											const CsSlotInfo *slot,
											const char *slot_event,
											bool requested,
											CsIdentity *identity);
extern TimestampTz cs_newest_snapshot_time(const char *directory,
										   uint64 generation);
extern uint64 cs_open_generation(const char *directory,
								 struct WalReceiverConn *conn,
								 bool create_slot, uint64 sysid, uint32 tli,
								 const char *reason, XLogRecPtr *start_lsn);

/* ---------- archiver.c ---------- */

extern PGDLLEXPORT void changestream_archiver_main(Datum main_arg);

#endif							/* CHANGESTREAM_H */
