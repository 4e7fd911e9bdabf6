/*-------------------------------------------------------------------------
 *
 * uploader.c
 *	  The "changestream uploader" background worker: it ships the finished,
 *	  immutable files of the local archive to the replica's bucket, each
 *	  once, in an order that keeps the bucket readable at every moment
 *	  (docs/DESIGN.md section 15).  Per generation, oldest first: its
 *	  opening snapshot, then its identity file (readers ignore a generation
 *	  without it), its schema history and timelines (after a promotion,
 *	  FORMAT.md 4.4), then each compressed segment in
 *	  index order, then each later snapshot; the next generation only once
 *	  every segment of this one is up.  What remote retention
 *	  (remote_retention.c, called after each pass) deleted is not put
 *	  again.  The object key of a file is its path relative to the archive directory
 *	  under "<prefix>/", so the bucket synced down is an archive directory.
 *	  The schema history and the timelines are the only files that change:
 *	  they are put again when their content changes.  The bucket's
 *	  "retention" object is remote retention's own horizon.
 *
 *	  It has no database connection, and reaches the bucket only through
 *	  the S3 client (replica/), whose wait loop checks interrupts: SIGTERM
 *	  acts at once, and a reload during a transfer cancels it (the
 *	  SIGHUP handler raises a query cancel while a transfer runs), so the
 *	  new settings act within a second.  The archiver, compression, the
 *	  spare segment and retention never wait for it; retention keeps what
 *	  is not up yet (replica_status.c).
 *
 *	  First, for each store (its endpoint, or AWS's region), bucket and
 *	  prefix: the marker object
 *	  "<prefix>/changestream.cluster", put with If-None-Match: *, names the
 *	  cluster (system identifier, database, slot); a marker naming another
 *	  cluster stops the uploader (state error).  Then the journal
 *	  (replica_journal.c) says what is up, and one listing of the prefix
 *	  says what else the bucket holds: such an object is adopted when its
 *	  size and ETag (an MD5, or the MD5 of the parts' MD5s for a multipart
 *	  upload) equal the local file's, and otherwise is an error naming the
 *	  key, never overwritten.  Immutable files are put with
 *	  If-None-Match: *, so a file is never put twice with other content.
 *
 *	  Between passes, the tail sync (tail_phase()): the active segment's
 *	  durable bytes, which the archiver publishes after each flush
 *	  (replica_status.c), go up as tail objects
 *	  "tail/generations/<gen>/wal/<index>.wal.<start>-<end>" every
 *	  changestream.replica_sync_interval, and at once when
 *	  changestream.replica_durability = remote makes commits wait for them;
 *	  the position they end at becomes the remote durable position, which
 *	  the archiver then may confirm.  A segment's tail objects are removed
 *	  once it is up compressed.  The backlog it counts (finished files not
 *	  up) is what changestream.replica_max_backlog compares.
 *
 *	  Several databases (docs/databases.md): every archive tree is
 *	  uploaded, the root under "<prefix>/" and databases/<name> under
 *	  "<prefix>/databases/<name>/", each with its own marker, journal,
 *	  uploaded position, tail sync and backoff (serve_tree(), Tree), in
 *	  turns of at most TURN_SEGMENTS segments, so that a busy tree does not
 *	  starve the others and a failing one does not stop them.
 *
 *	  Failures: a retryable one (the network, 5xx, 429, SlowDown, an
 *	  expired token) waits a jittered delay doubling from 1 s to 60 s and
 *	  tries again, forever; the credentials are read again at each try.  A
 *	  configuration error (403, NoSuchBucket, a missing key file) shows at
 *	  once in status() and in one log line with a hint (log_once.c), and is
 *	  tried again at the same pace.
 *
 * Sources: the error recovery pattern of src/backend/postmaster/
 * bgwriter.c, as in maintenance.c; the registration of contrib/worker_spi.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "access/xlog.h"
#include "common/cryptohash.h"
#include "common/md5.h"
#include "common/pg_prng.h"
#include "libpq/pqsignal.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "archive/archive_layout.h"
#include "archive/generation.h"
#include "archive/retention_horizon.h"
#include "archive/segment_reader.h"
#include "archive/storage.h"
#include "base/archive_config.h"
#include "base/guc.h"
#include "base/latch_wait.h"
#include "base/log_once.h"
#include "base/shmem_status.h"
#include "replica/remote_retention.h"
#include "replica/replica_journal.h"
#include "replica/replica_status.h"
#include "replica/s3_config.h"
#include "replica/s3_credentials.h"
#include "replica/s3_ops.h"
#include "worker/uploader.h"

#define RESCAN_MS		2000	/* a look at the local archive this often */
#define BACKOFF_MIN_MS	1000
#define BACKOFF_MAX_MS	60000
#define PART_BYTES		(8 * 1024 * 1024)	/* multipart above, parts of */
#define MARKER_NAME		"changestream.cluster"
#define TAIL_DIR		"tail/"	/* the active segment's synced bytes */
#define TAIL_GAP_MS		50		/* remote durability: a pass this soon */
#define TAIL_POLL_MS	100		/* the interval has passed: look this often */
#define TURN_SEGMENTS	8		/* segments put per tree per pass at most */

/* what a pass, or a step of it, came to */
typedef enum Outcome
{
	OUT_OK,						/* done: go on */
	OUT_WAIT,					/* nothing more now: look again later */
	OUT_RETRY,					/* a retryable failure */
	OUT_ERROR					/* a setting, the bucket, a conflict */
} Outcome;

/* one pass over the archive: the client and what went wrong */
typedef struct Pass
{
	CsS3Config	config;
	CsS3Client *client;
	char	   *directory;
	char	   *database;		/* the tree's */
	char	   *subtree;		/* "databases/<name>", NULL for the root */
	int			sqlerrcode;		/* of the failure, for log_once */
	char	   *message;
	char	   *detail;
	char	   *hint;
} Pass;

/* one file's content summary: its size and the ETag S3 would give it */
typedef struct FileSum
{
	int64		size;
	char		etag[CS_JOURNAL_ETAG_MAX];
} FileSum;

bool		cs_uploader_registered = false;

static MemoryContext pass_cxt = NULL;	/* one pass; the client lives here */
static ResourceOwner worker_owner = NULL;	/* the worker's, for its life */
static ResourceOwner pass_owner = NULL; /* one pass: digests, HMACs */
static MemoryContext bucket_cxt = NULL; /* journal and listing of the url */
static char *bucket_url = NULL;	/* in bucket_cxt: the store they describe */
static CsJournal *journal = NULL;
static MemoryContext listing_cxt = NULL;	/* in bucket_cxt: the listing */
static struct ListedObject *listed = NULL;	/* objects not journaled, by
											 * name */
static int	nlisted = 0;
static bool listing_done = false;	/* the bucket was listed (this store) */
static bool marker_ok = false;
static bool marker_created = false;	/* this process put the marker */
static CsLogOnce log_once;
static long backoff_ms = BACKOFF_MIN_MS;
static bool last_pass_failed = false;
static volatile sig_atomic_t in_transfer = false;

/* the uploaded position being published (replica_status.c) */
static uint64 pos_generation;
static int64 pos_next_segment;
static XLogRecPtr pos_snapshot;

/* the position published last (it only increases while pub_valid) */
static bool pub_valid = false;
static uint64 pub_generation;
static int64 pub_next_segment;
static XLogRecPtr pub_snapshot;

/*
 * The tail sync (docs/DESIGN.md section 15): the active segment's durable
 * bytes synced so far as tail objects, and the tail objects in the bucket
 * (in bucket_cxt), removed once their segment is up compressed.
 */
typedef struct TailObject
{
	uint64		generation;
	int64		index;
	int64		start;			/* the bytes [start, end) of the segment */
	int64		end;
	char	   *name;			/* relative to the prefix */
} TailObject;

static uint64 tail_generation;
static int64 tail_index = -1;	/* -1: nothing synced */
static int64 tail_synced;		/* bytes of it in the bucket */
static XLogRecPtr tail_published;	/* the position published for them */
static bool tail_gone;			/* its raw file is gone: the pass puts it */
static TimestampTz tail_synced_at;
static List *tail_objects = NIL;	/* of TailObject, in bucket_cxt */
static bool tail_ready = false;	/* tail_ready_generation exists remotely */
static uint64 tail_ready_generation;	/* its opening snapshot, identity
										 * and schema history are up */

/* an entry of the listing: a name relative to the prefix, and its size */
typedef struct ListedObject
{
	char	   *name;
	int64		size;
} ListedObject;

/*
 * Several archive trees (docs/databases.md): one per status entry in use,
 * each with its own key prefix, marker, journal, listing, uploaded
 * position, tail sync and backoff.  While the uploader serves a tree
 * (enter_tree() .. leave_tree()) that state is in the static variables
 * above, which the rest of this file uses as with a single archive; the
 * tree's status entry is selected, so that replica_status.c publishes in
 * its row.
 */
#define TREE_STATE(X) \
	X(bucket_cxt) X(bucket_url) X(journal) X(listing_cxt) X(listed) \
	X(nlisted) X(listing_done) X(marker_ok) X(marker_created) X(log_once) \
	X(backoff_ms) X(last_pass_failed) X(pub_valid) X(pub_generation) \
	X(pub_next_segment) X(pub_snapshot) X(tail_generation) X(tail_index) \
	X(tail_synced) X(tail_published) X(tail_gone) X(tail_synced_at) \
	X(tail_objects) X(tail_ready) X(tail_ready_generation)

typedef struct Tree
{
	char		database[NAMEDATALEN];	/* "": the entry was never served */
	bool		live;			/* served in this round */
	TimestampTz next_try;		/* after a failure: not before */
	Pass		pass;			/* this round's */
	/* the state of the statics of the same names */
	MemoryContext bucket_cxt;
	char	   *bucket_url;
	CsJournal  *journal;
	MemoryContext listing_cxt;
	ListedObject *listed;
	int			nlisted;
	bool		listing_done;
	bool		marker_ok;
	bool		marker_created;
	CsLogOnce	log_once;
	long		backoff_ms;
	bool		last_pass_failed;
	bool		pub_valid;
	uint64		pub_generation;
	int64		pub_next_segment;
	XLogRecPtr	pub_snapshot;
	uint64		tail_generation;
	int64		tail_index;
	int64		tail_synced;
	XLogRecPtr	tail_published;
	bool		tail_gone;
	TimestampTz tail_synced_at;
	List	   *tail_objects;
	bool		tail_ready;
	uint64		tail_ready_generation;
} Tree;

static Tree trees[CS_MAX_DATABASES];
static int	current_tree = -1;	/* the one entered, -1: none */
static int	round_start = 0;	/* round robin: the tree served first */
static bool turn_cut = false;	/* a tree has segments left this round */

/*
 * Serve tree index: its state into the statics, its status entry selected.
 * A tree whose entry now serves another database (released and claimed
 * again) starts over.
 */
static void
enter_tree(int index, const char *database)
{
	Tree	   *t = &trees[index];

	if (strcmp(t->database, database) != 0)
	{
		if (t->bucket_cxt != NULL)
			MemoryContextDelete(t->bucket_cxt);
		memset(t, 0, sizeof(Tree));
		strlcpy(t->database, database, NAMEDATALEN);
		t->bucket_cxt = AllocSetContextCreate(TopMemoryContext,
											  "changestream uploader journal",
											  ALLOCSET_DEFAULT_SIZES);
		t->backoff_ms = BACKOFF_MIN_MS;
		t->tail_index = -1;
	}
#define LOAD(f) f = t->f;
	TREE_STATE(LOAD)
#undef LOAD
	current_tree = index;
	cs_status_select(index);
}

/* Leave the tree served: the statics back into its state. */
static void
leave_tree(void)
{
	Tree	   *t;

	if (current_tree < 0)
		return;
	t = &trees[current_tree];
#define SAVE(f) t->f = f;
	TREE_STATE(SAVE)
#undef SAVE
	current_tree = -1;
}

/*
 * SIGHUP: as SignalHandlerForConfigReload(), and while a transfer runs,
 * a query cancel that the client's wait loop acts on at once.
 */
static void
uploader_sighup(SIGNAL_ARGS)
{
	int			save_errno = errno;

	ConfigReloadPending = true;
	if (in_transfer)
	{
		QueryCancelPending = true;
		InterruptPending = true;
	}
	SetLatch(MyLatch);
	errno = save_errno;
}

/* Record a failure of the pass; returns its outcome. */
static Outcome
failed(Pass *pass, Outcome outcome, int sqlerrcode, char *message,
	   char *detail, char *hint)
{
	pass->sqlerrcode = sqlerrcode;
	pass->message = message;
	pass->detail = detail;
	pass->hint = hint;
	return outcome;
}

/* A failed request explained (cs_s3_explain()) as the pass's failure. */
static Outcome
request_failed(Pass *pass, const CsS3Response *resp, const char *what)
{
	CsS3Failure f;
	CsS3ErrorClass class = cs_s3_explain(resp, what, &f);

	return failed(pass, class == CS_S3_RETRYABLE ? OUT_RETRY : OUT_ERROR,
				  cs_s3_class_sqlstate(class), f.message, NULL, f.hint);
}

/* The transfer runs with a reload able to cancel it. */
static void
transfer_begin(void)
{
	in_transfer = true;
	if (ConfigReloadPending)
	{
		QueryCancelPending = true;
		InterruptPending = true;
	}
}

static void
transfer_end(void)
{
	in_transfer = false;
}

/* An ETag without its quotes. */
static char *
bare_etag(const char *etag)
{
	size_t		len = etag ? strlen(etag) : 0;

	if (len >= 2 && etag[0] == '"' && etag[len - 1] == '"')
		return pnstrdup(etag + 1, len - 2);
	return pstrdup(etag ? etag : "");
}

/* The MD5 of len bytes at data, into digest. */
static void
md5_of(const char *data, size_t len, uint8 *digest)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_MD5);

	if (ctx == NULL || pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) data, len) < 0 ||
		pg_cryptohash_final(ctx, digest, MD5_DIGEST_LENGTH) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not compute an MD5 digest: %s",
						ctx ? pg_cryptohash_error(ctx) : "out of memory")));
	pg_cryptohash_free(ctx);
}

static void
hex_of(const uint8 *digest, char *out)
{
	for (int i = 0; i < MD5_DIGEST_LENGTH; i++)
		sprintf(out + 2 * i, "%02x", digest[i]);
}

/*
 * Read len bytes at offset of the open file path into buf; a short read
 * means the file changed under the uploader: an error naming it.
 */
static void
read_at(int fd, const char *path, char *buf, size_t len, int64 offset)
{
	size_t		done = 0;

	while (done < len)
	{
		ssize_t		n = pread(fd, buf + done, len - done, offset + done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read file \"%s\": %m", path)));
		if (n == 0)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("changestream file \"%s\" is shorter than expected at offset %lld",
							path, (long long) (offset + done)),
					 errdetail("A finished archive file changed size while the uploader read it.")));
		done += n;
	}
}

/*
 * The size of the file at path and the ETag S3 gives it when uploaded
 * the uploader's way: the MD5 of the content up to PART_BYTES, else the
 * MD5 of the parts' MD5s, "-" and the number of parts.
 */
static void
file_sum(const char *path, FileSum *sum)
{
	CsStorageInfo info;
	int			fd;
	char	   *buf;
	uint8		digest[MD5_DIGEST_LENGTH];
	StringInfoData parts;
	int			nparts = 0;

	if (cs_storage_stat(path, false, &info) != 0 ||
		info.type != CS_STORAGE_FILE)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("changestream file \"%s\" is not a regular file", path)));
	sum->size = info.size;
	fd = cs_storage_open(path, CS_OPEN_READ | CS_OPEN_NOFOLLOW);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	buf = palloc(Min(sum->size, PART_BYTES) + 1);
	initStringInfo(&parts);
	for (int64 off = 0; off < sum->size || nparts == 0; off += PART_BYTES)
	{
		size_t		len = Min(sum->size - off, PART_BYTES);

		read_at(fd, path, buf, len, off);
		md5_of(buf, len, digest);
		appendBinaryStringInfo(&parts, (char *) digest, MD5_DIGEST_LENGTH);
		nparts++;
		CHECK_FOR_INTERRUPTS();
	}
	cs_storage_close(fd);
	pfree(buf);
	if (sum->size <= PART_BYTES)
		hex_of((uint8 *) parts.data, sum->etag);
	else
	{
		md5_of(parts.data, parts.len, digest);
		hex_of(digest, sum->etag);
		snprintf(sum->etag + 2 * MD5_DIGEST_LENGTH,
				 CS_JOURNAL_ETAG_MAX - 2 * MD5_DIGEST_LENGTH, "-%d", nparts);
	}
}

/*
 * A file that changes (the schema history, the timelines, the horizon),
 * read once: its content, returned, and its sum from that content, so what
 * is hashed is what is put.  NULL (and *sum unset) above PART_BYTES: such a
 * file is summed and put as an immutable one is.
 */
static char *
read_mutable(const char *path, FileSum *sum)
{
	CsStorageInfo info;
	int			fd;
	char	   *buf;
	uint8		digest[MD5_DIGEST_LENGTH];

	if (cs_storage_stat(path, false, &info) != 0 ||
		info.type != CS_STORAGE_FILE)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("changestream file \"%s\" is not a regular file", path)));
	if (info.size > PART_BYTES)
		return NULL;
	fd = cs_storage_open(path, CS_OPEN_READ | CS_OPEN_NOFOLLOW);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	sum->size = info.size;
	buf = palloc(sum->size + 1);
	read_at(fd, path, buf, sum->size, 0);
	cs_storage_close(fd);
	md5_of(buf, sum->size, digest);
	hex_of(digest, sum->etag);
	return buf;
}

/*
 * PUT the file whole (content: its bytes already read, or NULL to read
 * them); its ETag into etag.
 */
static Outcome
put_whole(Pass *pass, const char *path, const char *key, const FileSum *sum,
		  const char *content, bool if_none_match, char **etag, bool *exists)
{
	char	   *buf = (char *) content;
	CsS3Response resp;

	if (buf == NULL)
	{
		int			fd = cs_storage_open(path, CS_OPEN_READ | CS_OPEN_NOFOLLOW);

		if (fd < 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not open file \"%s\": %m", path)));
		buf = palloc(sum->size + 1);
		read_at(fd, path, buf, sum->size, 0);
		cs_storage_close(fd);
	}
	transfer_begin();
	cs_s3_put(pass->client, key, buf, sum->size, if_none_match, &resp);
	transfer_end();
	cs_replica_count(CS_REPLICA_PUT, sum->size);
	if (buf != content)
		pfree(buf);
	if (if_none_match && resp.status == 412)
	{
		*exists = true;
		return OUT_OK;
	}
	if (resp.status != 200 || resp.error_code)
		return request_failed(pass, &resp, psprintf("PUT of key \"%s\"", key));
	*etag = bare_etag(resp.etag);
	return OUT_OK;
}

/*
 * The parts and the completion of the multipart upload upload_id; an
 * upload that fails is aborted.
 */
static Outcome
send_parts(Pass *pass, const char *path, const char *key,
		   const FileSum *sum, const char *upload_id, char **etag)
{
	CsS3Response resp;
	List	   *etags = NIL;
	int			fd;
	char	   *buf;
	int			part = 0;
	bool		ok = true;

	fd = cs_storage_open(path, CS_OPEN_READ | CS_OPEN_NOFOLLOW);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	buf = palloc(PART_BYTES);
	for (int64 off = 0; ok && off < sum->size; off += PART_BYTES)
	{
		size_t		len = Min(sum->size - off, PART_BYTES);
		char	   *part_etag;

		read_at(fd, path, buf, len, off);
		transfer_begin();
		ok = cs_s3_multipart_part(pass->client, key, upload_id, ++part, buf,
								  len, &part_etag, &resp);
		transfer_end();
		cs_replica_count(CS_REPLICA_PUT, len);
		if (ok)
			etags = lappend(etags, part_etag);
	}
	cs_storage_close(fd);
	pfree(buf);
	if (ok)
	{
		transfer_begin();
		ok = cs_s3_multipart_complete(pass->client, key, upload_id, etags,
									  &resp);
		transfer_end();
		cs_replica_count(CS_REPLICA_PUT, 0);
		if (ok)
		{
			/* the upload's ETag, as the store keeps it */
			transfer_begin();
			cs_s3_head(pass->client, key, &resp);
			transfer_end();
			cs_replica_count(CS_REPLICA_GET, 0);
			if (resp.status != 200)
				return request_failed(pass, &resp,
									  psprintf("HEAD of key \"%s\"", key));
			*etag = bare_etag(resp.etag);
			return OUT_OK;
		}
	}
	{
		Outcome		outcome = request_failed(pass, &resp,
											 psprintf("multipart upload of key \"%s\"", key));
		CsS3Response abort_resp;

		transfer_begin();
		cs_s3_multipart_abort(pass->client, key, upload_id, &abort_resp);
		transfer_end();
		cs_replica_count(CS_REPLICA_DELETE, 0);
		return outcome;
	}
}

/*
 * Upload the file in parts of PART_BYTES; an upload that fails is aborted,
 * also when an error (a local file that cannot be read, a reload
 * cancelling a transfer) is raised after its creation: the abort is sent,
 * not cancellable by the reload, and the error raised again.  Not on
 * SIGTERM: the bucket's lifecycle rule for incomplete uploads cleans up.
 */
static Outcome
put_multipart(Pass *pass, const char *path, const char *key,
			  const FileSum *sum, char **etag)
{
	char	   *upload_id;
	CsS3Response resp;
	MemoryContext cxt = CurrentMemoryContext;
	Outcome		outcome = OUT_OK;
	bool		ok;

	transfer_begin();
	ok = cs_s3_multipart_create(pass->client, key, &upload_id, &resp);
	transfer_end();
	cs_replica_count(CS_REPLICA_PUT, 0);
	if (!ok)
		return request_failed(pass, &resp,
							  psprintf("CreateMultipartUpload of key \"%s\"", key));
	PG_TRY();
	{
		outcome = send_parts(pass, path, key, sum, upload_id, etag);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		in_transfer = false;
		if (!ProcDiePending)
		{
			cs_s3_multipart_abort(pass->client, key, upload_id, &resp);
			cs_replica_count(CS_REPLICA_DELETE, 0);
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
	return outcome;
}

/*
 * Whether the bucket holds key now (a HEAD): *exists.  The check of an
 * immutable file before a multipart upload, which CompleteMultipartUpload
 * would not refuse to overwrite.
 */
static Outcome
object_exists(Pass *pass, const char *key, bool *exists)
{
	CsS3Response resp;

	transfer_begin();
	cs_s3_head(pass->client, key, &resp);
	transfer_end();
	cs_replica_count(CS_REPLICA_GET, 0);
	*exists = resp.status == 200;
	if (resp.status == 200 || resp.status == 404)
		return OUT_OK;
	return request_failed(pass, &resp, psprintf("HEAD of key \"%s\"", key));
}

/*
 * An object is in the bucket under name that the journal does not hold:
 * adopt it when its ETag (and its listed size, when listed_size >= 0)
 * equal the local file's; else an error naming the key, the object being
 * left as it is.
 */
static Outcome
adopt(Pass *pass, const char *name, const char *key, const FileSum *sum,
	  int64 listed_size)
{
	CsS3Response resp;
	char	   *etag;

	transfer_begin();
	cs_s3_head(pass->client, key, &resp);
	transfer_end();
	cs_replica_count(CS_REPLICA_GET, 0);
	if (resp.status != 200)
		return request_failed(pass, &resp, psprintf("HEAD of key \"%s\"", key));
	etag = bare_etag(resp.etag);
	if ((listed_size >= 0 && listed_size != sum->size) ||
		strcmp(etag, sum->etag) != 0)
		return failed(pass, OUT_ERROR, ERRCODE_DUPLICATE_OBJECT,
					  psprintf("object \"%s\" in the bucket differs from the local file \"%s\"",
							   key, name),
					  psprintf("The object has %lld bytes and ETag \"%s\"; the local file has %lld bytes and would have ETag \"%s\".",
							   (long long) listed_size, etag,
							   (long long) sum->size, sum->etag),
					  pstrdup("Another writer put this object. The uploader never overwrites it: point changestream.replica_url at a prefix of this cluster alone, or remove the object if it is not needed."));
	cs_journal_record(journal, name, sum->size, etag);
	ereport(LOG,
			(errmsg("changestream uploader adopted object \"%s\", already in the bucket with the local file's size and checksum",
					key)));
	return OUT_OK;
}

/* Order of the listing: by name. */
static int
listed_cmp(const void *a, const void *b)
{
	return strcmp(((const ListedObject *) a)->name,
				  ((const ListedObject *) b)->name);
}

/* The listed object not journaled under name, or NULL. */
static ListedObject *
find_listed(const char *name)
{
	ListedObject key;

	if (listed == NULL)
		return NULL;
	key.name = (char *) name;
	return bsearch(&key, listed, nlisted, sizeof(ListedObject), listed_cmp);
}

/* Free the listing: no local file is left that it could be needed for. */
static void
free_listing(void)
{
	if (listing_cxt != NULL)
		MemoryContextDelete(listing_cxt);
	listing_cxt = NULL;
	listed = NULL;
	nlisted = 0;
}

/*
 * An immutable file the journal says is up: its size must be the one
 * journaled, else an error naming the key (the local file changed after
 * its upload, or the journal is not this archive's).  A file gone meanwhile
 * (retention) is not checked.
 */
static Outcome
journaled_size_ok(Pass *pass, const char *path, const char *name,
				  const char *key, const CsJournalEntry *entry)
{
	CsStorageInfo info;

	if (cs_storage_stat(path, false, &info) != 0 ||
		info.type != CS_STORAGE_FILE || info.size == entry->size)
		return OUT_OK;
	return failed(pass, OUT_ERROR, ERRCODE_DATA_CORRUPTED,
				  psprintf("local file \"%s\" has %lld bytes, but the replica journal records object \"%s\" with %lld bytes",
						   name, (long long) info.size, key,
						   (long long) entry->size),
				  NULL,
				  pstrdup("A finished archive file changed after its upload, or replica.journal is not this archive's. Check the file; removing replica.journal makes the uploader compare every object with the local files again."));
}

/*
 * Put the file at path in the bucket unless the journal says it is there
 * (mutable: with the same content).  *uploaded tells whether it was sent
 * or adopted now.
 */
static Outcome
put_file(Pass *pass, const char *path, bool mutable, bool *uploaded)
{
	char	   *name = cs_archive_relative_name(pass->directory, path);
	char	   *key = cs_s3_object_key(&pass->config, name);
	CsJournalEntry *entry = cs_journal_find(journal, name);
	ListedObject *obj;
	FileSum		sum;
	char	   *etag = NULL;
	char	   *content;
	bool		exists = false;
	Outcome		outcome;

	*uploaded = false;
	if (cs_remote_retention_removed(pass->directory, bucket_url, name))
		return OUT_OK;			/* the bucket's retention deleted it */
	if (entry != NULL && !mutable)
		return journaled_size_ok(pass, path, name, key, entry);
	content = mutable ? read_mutable(path, &sum) : NULL;
	if (content == NULL)
		file_sum(path, &sum);
	if (entry != NULL && entry->size == sum.size &&
		strcmp(entry->etag, sum.etag) == 0)
		return OUT_OK;
	obj = find_listed(name);
	if (obj != NULL && entry == NULL && !mutable)
	{
		outcome = adopt(pass, name, key, &sum, obj->size);
		*uploaded = outcome == OUT_OK;
		if (*uploaded)
			cs_replica_uploaded(sum.size, true);
		return outcome;
	}
	cs_replica_set_state(CS_REPLICA_UPLOADING);
	if (sum.size > PART_BYTES)
	{
		/* a multipart upload has no If-None-Match: a HEAD comes first */
		outcome = mutable ? OUT_OK : object_exists(pass, key, &exists);
		if (outcome == OUT_OK && !exists)
			outcome = put_multipart(pass, path, key, &sum, &etag);
	}
	else
		outcome = put_whole(pass, path, key, &sum, content, !mutable,
							&etag, &exists);
	if (outcome != OUT_OK)
		return outcome;
	if (exists)
		outcome = adopt(pass, name, key, &sum, -1);
	else if (strcmp(etag, sum.etag) != 0)
		return failed(pass, OUT_RETRY, ERRCODE_DATA_CORRUPTED,
					  psprintf("the bucket answered the upload of key \"%s\" with ETag \"%s\", not the local file's MD5 \"%s\"",
							   key, etag, sum.etag),
					  NULL,
					  pstrdup("Something between the server and the store changes the data, or the store computes ETags another way (server-side encryption with KMS keys does)."));
	else
		cs_journal_record(journal, name, sum.size, etag);
	if (outcome == OUT_OK)
	{
		*uploaded = true;
		cs_replica_uploaded(sum.size, !mutable);
	}
	return outcome;
}

/*
 * The marker's content: who writes under this prefix.  The root tree's
 * names the slot as before; another tree's names its database alone (the
 * uploader has no database connection to learn the OID its slot is named
 * by, and the text must stay the same from run to run).
 */
static char *
marker_content(Pass *pass)
{
	/* not cs_archive_config_current(): it would select another entry */
	CsArchiveConfig *config = cs_archive_config_for(pass->database,
													InvalidOid);

	if (pass->subtree != NULL)
		return psprintf("changestream cluster\nsystem_identifier %llu\ndatabase %s\ntree %s\n",
						(unsigned long long) GetSystemIdentifier(),
						pass->database, pass->subtree);
	return psprintf("changestream cluster\nsystem_identifier %llu\ndatabase %s\nslot %s\n",
					(unsigned long long) GetSystemIdentifier(),
					config->database, config->slot_name);
}

/*
 * Create the marker, or check that the one there names this cluster.
 * Another cluster's marker is an error: nothing is uploaded.
 */
static Outcome
check_marker(Pass *pass)
{
	char	   *key = cs_s3_object_key(&pass->config, MARKER_NAME);
	char	   *mine = marker_content(pass);
	CsS3Response resp;

	transfer_begin();
	cs_s3_put(pass->client, key, mine, strlen(mine), true, &resp);
	transfer_end();
	cs_replica_count(CS_REPLICA_PUT, strlen(mine));
	if (resp.status == 200 && resp.error_code == NULL)
	{
		/* the prefix had no marker: it is new, or was emptied */
		marker_created = true;
		return OUT_OK;
	}
	if (resp.status != 412)
		return request_failed(pass, &resp, psprintf("PUT of key \"%s\"", key));
	transfer_begin();
	cs_s3_get(pass->client, key, 64 * 1024, &resp);
	transfer_end();
	cs_replica_count(CS_REPLICA_GET, 0);
	if (resp.status != 200 || resp.error_code)
		return request_failed(pass, &resp, psprintf("GET of key \"%s\"", key));
	if (resp.body_len == strlen(mine) && memcmp(resp.body, mine, resp.body_len) == 0)
		return OUT_OK;
	return failed(pass, OUT_ERROR, ERRCODE_DUPLICATE_OBJECT,
				  psprintf("the replica prefix \"%s\" of bucket \"%s\" belongs to another cluster",
						   pass->config.prefix, pass->config.bucket),
				  psprintf("Its marker object \"%s\" says: %s", key,
						   pnstrdup(resp.body, Min(resp.body_len, 512))),
				  pstrdup("Give each cluster its own prefix in changestream.replica_url; the uploader uploads nothing here."));
}

/*
 * Log the journal entries dropped because the bucket lacks them (why):
 * their files are uploaded again (or adopted, when listed).
 */
static void
forget_missing(List *names, const char *why)
{
	if (names == NIL)
		return;
	ereport(LOG,
			(errmsg_plural("changestream uploader: %d object of the journal is not in the bucket; it is uploaded again",
						   "changestream uploader: %d objects of the journal are not in the bucket; they are uploaded again",
						   list_length(names), list_length(names)),
			 errdetail("The first is \"%s\"; %s.", (char *) linitial(names), why)));
}

/*
 * The name of the tail object holding bytes [start, end) of segment index
 * of generation, relative to the prefix (docs/FORMAT.md, tail objects):
 * "tail/generations/<generation>/wal/<index>.wal.<start>-<end>", the three
 * numbers in 16 hex digits.
 */
static char *
tail_object_name(uint64 generation, int64 index, int64 start, int64 end)
{
	return psprintf(TAIL_DIR "generations/%016llx/wal/%016llx.wal.%016llx-%016llx",
					(unsigned long long) generation,
					(unsigned long long) index,
					(unsigned long long) start, (unsigned long long) end);
}

/* Remember a tail object of the bucket (in bucket_cxt). */
static void
remember_tail(uint64 generation, int64 index, int64 start, int64 end,
			  const char *name)
{
	MemoryContext old = MemoryContextSwitchTo(bucket_cxt);
	TailObject *t = palloc(sizeof(TailObject));

	t->generation = generation;
	t->index = index;
	t->start = start;
	t->end = end;
	t->name = pstrdup(name);
	tail_objects = lappend(tail_objects, t);
	MemoryContextSwitchTo(old);
}

/*
 * A listed name (relative to the prefix) that is a tail object is
 * remembered, to be removed once its segment is up, and, when its listed
 * size is the one its name gives, to resume the sync after it; returns
 * whether it was one.
 */
static bool
note_tail_object(const char *name, int64 size)
{
	unsigned long long g,
				i,
				a,
				b;
	char		check[MAXPGPATH];

	if (strncmp(name, TAIL_DIR, strlen(TAIL_DIR)) != 0)
		return false;
	if (sscanf(name, TAIL_DIR "generations/%16llx/wal/%16llx.wal.%16llx-%16llx",
			   &g, &i, &a, &b) == 4)
	{
		snprintf(check, sizeof(check), "%s",
				 tail_object_name(g, (int64) i, (int64) a, (int64) b));
		if (strcmp(check, name) == 0 && b > a && size == (int64) (b - a))
			remember_tail(g, (int64) i, (int64) a, (int64) b, name);
		else if (strcmp(check, name) == 0)
			remember_tail(g, (int64) i, 0, 0, name);	/* removed, not used */
	}
	return true;
}

/*
 * Remove the tail objects of the segments now up compressed (before the
 * uploaded position); a failed DELETE leaves the object for a later pass.
 */
static Outcome
remove_tails(Pass *pass)
{
	List	   *keep = NIL;
	ListCell   *lc;
	Outcome		outcome = OUT_OK;

	if (!pub_valid)
		return OUT_OK;
	foreach(lc, tail_objects)
	{
		TailObject *t = lfirst(lc);
		CsS3Response resp;
		MemoryContext old;

		if (outcome == OUT_OK &&
			(t->generation < pub_generation ||
			 (t->generation == pub_generation && t->index < pub_next_segment)))
		{
			char	   *key = cs_s3_object_key(&pass->config, t->name);

			transfer_begin();
			cs_s3_delete(pass->client, key, &resp);
			transfer_end();
			cs_replica_count(CS_REPLICA_DELETE, 0);
			if (resp.status == 204 || resp.status == 200 || resp.status == 404)
				continue;
			outcome = request_failed(pass, &resp,
									 psprintf("DELETE of key \"%s\"", key));
		}
		old = MemoryContextSwitchTo(bucket_cxt);
		keep = lappend(keep, t);
		MemoryContextSwitchTo(old);
	}
	tail_objects = keep;
	return outcome;
}

/*
 * The bytes of segment index of generation that the tail objects known to
 * be in the bucket hold from its start on (after a restart, those the
 * listing showed), with no gap: the sync goes on after them.
 */
static int64
tail_in_bucket(uint64 generation, int64 index)
{
	int64		end = 0;
	bool		grew = true;

	while (grew)
	{
		ListCell   *lc;

		grew = false;
		foreach(lc, tail_objects)
		{
			TailObject *t = lfirst(lc);

			if (t->generation == generation && t->index == index &&
				t->start <= end && t->end > end)
			{
				end = t->end;
				grew = true;
			}
		}
	}
	return end;
}

/*
 * Put bytes [start, end) of the raw segment at path as a tail object; the
 * seal area, which the archiver writes when it seals the segment, goes up
 * as zeros ("not sealed"), so an object's name always stands for the same
 * bytes.  *gone: the file is gone (sealed and compressed meanwhile).
 */
static Outcome
put_tail_object(Pass *pass, const CsLocalDurable *local, const char *path,
				int64 start, int64 end, bool *gone)
{
	char	   *name = tail_object_name(local->generation, local->index,
										start, end);
	char	   *key = cs_s3_object_key(&pass->config, name);
	char	   *buf;
	int			fd;
	CsS3Response resp;

	*gone = false;
	fd = cs_storage_open(path, CS_OPEN_READ | CS_OPEN_NOFOLLOW);
	if (fd < 0 && errno == ENOENT)
	{
		*gone = true;
		return OUT_OK;
	}
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	buf = palloc(end - start + 1);
	read_at(fd, path, buf, end - start, start);
	cs_storage_close(fd);
	for (int64 off = Max(start, CS_SEAL_OFFSET);
		 off < Min(end, CS_SEAL_OFFSET + CS_SEAL_SIZE); off++)
		buf[off - start] = 0;
	cs_replica_set_state(CS_REPLICA_UPLOADING);
	transfer_begin();
	cs_s3_put(pass->client, key, buf, end - start, true, &resp);
	transfer_end();
	cs_replica_count(CS_REPLICA_PUT, end - start);
	pfree(buf);
	/* 412: put before (the uploader restarted): the same bytes */
	if (resp.status != 412 && (resp.status != 200 || resp.error_code))
		return request_failed(pass, &resp, psprintf("PUT of key \"%s\"", key));
	remember_tail(local->generation, local->index, start, end, name);
	cs_replica_uploaded(end - start, false);
	return OUT_OK;
}

/*
 * Is a tail sync due: the bucket has every segment before the active one
 * (*gap otherwise: a sealed segment waits for compression), and the
 * active segment has durable bytes the bucket lacks, which a commit waits
 * for (replica_durability = remote) or which changestream.
 * replica_sync_interval has passed for.
 */
static bool
tail_due(const CsLocalDurable *local, TimestampTz now, bool *gap)
{
	bool		remote = cs_replica_durability == CS_REPLICA_DURABILITY_REMOTE;

	*gap = false;
	if (!remote && cs_replica_sync_interval_ms == 0)
		return false;
	if (!pub_valid || pub_generation != local->generation ||
		!tail_ready || tail_ready_generation != local->generation)
		return false;
	if (pub_next_segment != local->index)
	{
		*gap = pub_next_segment < local->index;
		return false;
	}
	/* all of it up already (put before a restart): only to publish */
	if (tail_index == local->index && tail_generation == local->generation &&
		(tail_gone || tail_synced >= local->bytes))
		return !tail_gone && tail_published < local->position;
	return remote || TimestampDifferenceExceeds(tail_synced_at, now,
												cs_replica_sync_interval_ms);
}

/*
 * Sync the active segment's new durable bytes (local: what the archiver
 * published), in objects of at most PART_BYTES, and publish the remote
 * durable position they end at.
 */
static Outcome
sync_tail(Pass *pass, const CsLocalDurable *local)
{
	char	   *wal_dir = cs_wal_dir_path(pass->directory, local->generation);
	char	   *path = cs_file_in(wal_dir, cs_segment_file_name(local->index, false));

	if (tail_index != local->index || tail_generation != local->generation)
	{
		tail_generation = local->generation;
		tail_index = local->index;
		tail_synced = tail_in_bucket(local->generation, local->index);
		tail_published = InvalidXLogRecPtr;
		tail_gone = false;
	}
	while (tail_synced < local->bytes)
	{
		int64		end = Min(local->bytes, tail_synced + PART_BYTES);
		bool		gone;
		Outcome		outcome = put_tail_object(pass, local, path, tail_synced,
											  end, &gone);

		if (outcome != OUT_OK)
			return outcome;
		if (gone)
		{
			/* sealed and compressed meanwhile: it goes up as a whole */
			tail_gone = true;
			return OUT_OK;
		}
		tail_synced = end;
	}
	tail_synced_at = GetCurrentTimestamp();
	cs_replica_set_flushed(local->generation, local->position);
	tail_published = local->position;
	return OUT_OK;
}

static void report(Pass *pass, Outcome outcome);
static long next_backoff(void);

/*
 * The tree entered (index) failed: the failure is published and logged
 * once (report()), and the tree is tried again after its backoff delay;
 * the other trees go on meanwhile.
 */
static void
tree_failed(int index, Outcome outcome)
{
	Tree	   *t = &trees[index];

	last_pass_failed = true;
	report(&t->pass, outcome);
	t->next_try = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											  next_backoff());
	t->live = false;
}

/*
 * One look at tree index for the tail sync: sync its active segment's tail
 * when it is due (tail_due()).  *synced: it was; *gap: a commit waits for a
 * sealed segment still to go up; *wait_ms lowered to when its interval
 * ends.  A failure is the tree's (tree_failed()).
 */
static void
tail_look(int index, TimestampTz now, bool *synced, bool *gap, long *wait_ms)
{
	Tree	   *t = &trees[index];
	CsLocalDurable local;
	bool		tree_gap = false;

	enter_tree(index, t->database);
	if (cs_replica_local_durable(&local) && tail_due(&local, now, &tree_gap))
	{
		Outcome		outcome = sync_tail(&t->pass, &local);

		if (outcome != OUT_OK)
			tree_failed(index, outcome);
		else
		{
			cs_replica_set_state(CS_REPLICA_IDLE);
			*synced = true;
		}
	}
	else if (tree_gap && cs_replica_durability == CS_REPLICA_DURABILITY_REMOTE)
		*gap = true;
	else if (cs_replica_sync_interval_ms > 0)
	{
		TimestampTz due = TimestampTzPlusMilliseconds(tail_synced_at,
													  cs_replica_sync_interval_ms);

		/* until the interval ends; past it, look for new bytes often */
		*wait_ms = Min(*wait_ms, due > now ?
					   TimestampDifferenceMilliseconds(now, due) :
					   TAIL_POLL_MS);
	}
	leave_tree();
}

/*
 * Between passes (RESCAN_MS, none when a tree has segments left: turn_cut):
 * sync each live tree's active segment's tail when it is due, waiting on
 * the latch, which an archiver sets after each flush with
 * replica_durability = remote.  Returns early, for a pass, when a commit
 * waits for a sealed segment still to go up, when a tree's backoff delay
 * is over, or on a reload.
 */
static void
tail_phase(void)
{
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													turn_cut ? 0 : RESCAN_MS);

	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();
		bool		synced = false;
		bool		gap = false;
		long		wait_ms = TimestampDifferenceMilliseconds(now, until);

		if (ConfigReloadPending)
			return;
		for (int i = 0; i < CS_MAX_DATABASES; i++)
		{
			if (trees[i].live)
				tail_look(i, now, &synced, &gap, &wait_ms);
			else if (trees[i].next_try != 0 && trees[i].next_try <= now)
				return;			/* a tree's backoff delay is over */
			else if (trees[i].next_try != 0)
				wait_ms = Min(wait_ms, TimestampDifferenceMilliseconds(now, trees[i].next_try));
		}
		if (synced)
			continue;
		if (gap)
		{
			cs_latch_wait_ms(TAIL_GAP_MS, true);
			return;
		}
		if (now >= until)
			return;
		cs_latch_wait_ms(Max(wait_ms, 1), false);
	}
}

/*
 * One listing of the prefix: the journal entries it holds with their size
 * are marked seen, the others dropped (uploaded again); the objects the
 * journal lacks go to the listed table, by name, for adoption.
 */
static Outcome
list_bucket(Pass *pass)
{
	char	   *prefix = cs_s3_object_key(&pass->config, "");
	size_t		plen = strlen(prefix);
	List	   *objects = NIL;
	CsS3Response resp;
	char	   *bad = NULL;
	List	   *missing = NIL;
	ListCell   *lc;
	bool		ok;

	transfer_begin();
	ok = cs_s3_list(pass->client, prefix, NULL, 0, &objects, &resp, &bad);
	transfer_end();
	cs_replica_count(CS_REPLICA_LIST, 0);
	if (!ok && bad != NULL)
		return failed(pass, OUT_RETRY, ERRCODE_PROTOCOL_VIOLATION, bad, NULL, NULL);
	if (!ok)
		return request_failed(pass, &resp,
							  psprintf("listing of prefix \"%s\"", prefix));
	free_listing();
	listing_cxt = AllocSetContextCreate(bucket_cxt,
										"changestream uploader listing",
										ALLOCSET_DEFAULT_SIZES);
	listed = MemoryContextAlloc(listing_cxt,
								sizeof(ListedObject) * Max(list_length(objects), 1));
	foreach(lc, objects)
	{
		CsS3Object *o = lfirst(lc);
		CsJournalEntry *entry;

		if (strlen(o->key) <= plen || strlen(o->key) - plen >= MAXPGPATH)
			continue;
		if (note_tail_object(o->key + plen, o->size))
			continue;
		/* the root's prefix holds the other trees' prefixes */
		if (pass->subtree == NULL &&
			strncmp(o->key + plen, "databases/", strlen("databases/")) == 0)
			continue;
		entry = cs_journal_find(journal, o->key + plen);
		if (entry != NULL && entry->size == o->size)
		{
			entry->seen = true; /* the journal is right about it */
			continue;
		}
		listed[nlisted].name = MemoryContextStrdup(listing_cxt, o->key + plen);
		listed[nlisted].size = o->size;
		nlisted++;
	}
	qsort(listed, nlisted, sizeof(ListedObject), listed_cmp);
	listing_done = true;
	foreach(lc, cs_journal_forget(journal, true))
	{
		/* what the bucket's retention deleted is not put again */
		if (!cs_remote_retention_removed(pass->directory, bucket_url, lfirst(lc)))
			missing = lappend(missing, lfirst(lc));
	}
	forget_missing(missing,
				   "they are not in the bucket's listing, or not with the journaled size");
	return OUT_OK;
}

/*
 * Publish the uploaded position (for local retention), only when it
 * increases: a pass walks a generation from its start again, and what an
 * earlier pass published stays up.
 */
static void
publish_position(void)
{
	if (pub_valid && pos_generation < pub_generation)
		return;
	if (pub_valid && pos_generation == pub_generation)
	{
		if (pos_next_segment <= pub_next_segment && pos_snapshot <= pub_snapshot)
			return;
		pub_next_segment = Max(pub_next_segment, pos_next_segment);
		pub_snapshot = Max(pub_snapshot, pos_snapshot);
	}
	else
	{
		pub_next_segment = pos_next_segment;
		pub_snapshot = pos_snapshot;
	}
	pub_generation = pos_generation;
	pub_valid = true;
	cs_replica_set_position(pub_generation, pub_next_segment, pub_snapshot);
}

/* The end LSN of the segments up to index: the start of the next one. */
static void
publish_flushed(uint64 generation, List *segments, int64 next_index)
{
	ListCell   *lc;

	foreach(lc, segments)
	{
		CsSegmentFile *sf = lfirst(lc);

		if (sf->index == next_index)
		{
			CsSegmentReader *r = cs_reader_open(sf->path, sf->compressed, true);

			/*
			 * A raw segment compressed since it was listed: the maintenance
			 * worker writes the .gz before it removes the raw file.
			 */
			if (r == NULL && !sf->compressed)
				r = cs_reader_open(cs_compressed_path(sf->path), true, true);
			if (r == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_UNDEFINED_FILE),
						 errmsg("changestream segment \"%s\" disappeared while the uploader read it",
								sf->path)));
			cs_replica_set_flushed(generation, cs_reader_header(r)->start_lsn);
			cs_reader_close(r);
			return;
		}
	}
}

/*
 * Put an optional file (the schema history, the timelines, the horizon) if
 * it exists.
 */
static Outcome
put_if_exists(Pass *pass, const char *path, bool *uploaded)
{
	CsStorageInfo info;

	*uploaded = false;
	if (cs_storage_stat(path, false, &info) != 0 ||
		info.type == CS_STORAGE_MISSING)
		return OUT_OK;
	return put_file(pass, path, true, uploaded);
}

/*
 * The segments of a generation, in index order, up to the first that is
 * not finished: a raw segment waits for compression, but the last one of
 * a generation no longer written, not sealed, stays raw for ever and goes
 * up as it is.  *complete: every segment is up and the generation is no
 * longer written.
 */
/*
 * Is the raw last segment of a generation no longer written one that stays
 * raw for ever (not sealed: an abandoned generation's)?  A sealed one is
 * compressed (the hand-off sealed it), maybe since it was listed: then it
 * is gone or about to go, and its .gz goes up at a later pass.
 */
static bool
abandoned_raw(const char *path)
{
	CsStorageInfo info;

	if (cs_storage_stat(path, false, &info) != 0 ||
		info.type != CS_STORAGE_FILE)
		return false;
	return !cs_segment_sealed(path);
}

static Outcome
put_segments(Pass *pass, uint64 generation, bool newest, bool *complete)
{
	List	   *segments = cs_list_segments(pass->directory, generation);
	ListCell   *lc;
	Outcome		outcome = OUT_OK;
	bool		up;
	int			put = 0;

	*complete = !newest;
	tail_ready = true;			/* the generation is readable remotely */
	tail_ready_generation = generation;
	foreach(lc, segments)
	{
		CsSegmentFile *sf = lfirst(lc);
		bool		last = lnext(segments, lc) == NULL;

		if (!sf->compressed && (!last || newest || !abandoned_raw(sf->path)))
		{
			*complete = false;	/* compression, or the archiver, comes first */
			break;
		}
		if (put == TURN_SEGMENTS)
		{
			/* the other trees' turn: this one goes on at the next pass */
			*complete = false;
			turn_cut = true;
			outcome = OUT_WAIT;
			break;
		}
		outcome = put_file(pass, sf->path, false, &up);
		if (outcome != OUT_OK)
		{
			*complete = false;
			break;
		}
		if (up)
			put++;
		pos_next_segment = sf->index + 1;
		publish_position();
	}
	publish_flushed(generation, segments, pos_next_segment);
	return outcome;
}

/*
 * Everything finished of one generation, in the order of the file header.
 * *complete: the generation is up whole and no longer written.
 */
static Outcome
put_generation(Pass *pass, uint64 generation, bool newest, bool *complete)
{
	char	   *gendir = cs_generation_path(pass->directory, generation);
	char	   *snapdir = cs_snapshots_dir_path(pass->directory, generation);
	List	   *snapshots = cs_list_snapshots(pass->directory, generation);
	ListCell   *lc;
	Outcome		outcome;
	bool		up;
	bool		first = true;

	*complete = false;
	if (snapshots == NIL)
		return OUT_WAIT;		/* the opening snapshot comes first */
	pos_generation = generation;
	pos_next_segment = 0;
	pos_snapshot = InvalidXLogRecPtr;
	publish_position();
	foreach(lc, snapshots)
	{
		XLogRecPtr	lsn;

		if (!cs_snapshot_name_lsn(lfirst(lc), &lsn))
			continue;
		outcome = put_file(pass, cs_file_in(snapdir, lfirst(lc)), false, &up);
		if (outcome != OUT_OK)
			return outcome;
		pos_snapshot = lsn;
		publish_position();
		if (first)
		{
			/* the generation exists remotely from its identity file on */
			first = false;
			outcome = put_file(pass, cs_identity_path(gendir), false, &up);
			if (outcome == OUT_OK)
				outcome = put_if_exists(pass, cs_schema_history_path(pass->directory, generation), &up);
			/* before the segments a promotion's timeline is recorded for */
			if (outcome == OUT_OK)
				outcome = put_if_exists(pass, cs_timelines_path(pass->directory, generation), &up);
			if (outcome == OUT_OK)
				outcome = put_segments(pass, generation, newest, complete);
			if (outcome != OUT_OK)
				return outcome;
		}
	}
	/* the bucket's "retention" object is remote retention's own */
	return OUT_OK;
}

/*
 * The finished files not in the journal, and their bytes: the backlog
 * status() shows (raw sealed segments count, as they will go up).
 * Returns the number of files.
 */
static int64
count_backlog(Pass *pass, List *gens)
{
	int64		files = 0;
	int64		bytes = 0;
	ListCell   *g;

	foreach(g, gens)
	{
		uint64		gen = *(uint64 *) lfirst(g);
		List	   *segments = cs_list_segments(pass->directory, gen);
		List	   *snapshots = cs_list_snapshots(pass->directory, gen);
		char	   *snapdir = cs_snapshots_dir_path(pass->directory, gen);
		char	   *name;
		ListCell   *lc;

		foreach(lc, segments)
		{
			CsSegmentFile *sf = lfirst(lc);

			if (lnext(segments, lc) == NULL && lnext(gens, g) == NULL)
				break;			/* the active segment */
			name = cs_archive_relative_name(pass->directory, sf->path);
			if (cs_journal_find(journal, name) == NULL &&
				!cs_remote_retention_removed(pass->directory, bucket_url, name))
			{
				files++;
				bytes += sf->size;
			}
		}
		foreach(lc, snapshots)
		{
			char	   *path = cs_file_in(snapdir, lfirst(lc));
			CsStorageInfo info;

			name = cs_archive_relative_name(pass->directory, path);
			if (cs_journal_find(journal, name) == NULL &&
				!cs_remote_retention_removed(pass->directory, bucket_url, name) &&
				cs_storage_stat(path, false, &info) == 0 &&
				info.type == CS_STORAGE_FILE)
			{
				files++;
				bytes += info.size;
			}
		}
	}
	cs_replica_set_backlog(files, bytes);
	return files;
}

/* Take the settings and the keys, and make the client for this pass. */
static Outcome
begin_pass(Pass *pass)
{
	const char *problem = cs_s3_config_current(&pass->config);
	CsS3Credentials creds;
	CsS3CredentialsProblem cp;
	char	   *url;

	if (problem != NULL)
		return failed(pass, OUT_ERROR, ERRCODE_CONFIG_FILE_ERROR,
					  pstrdup(problem), NULL,
					  pstrdup("Set changestream.replica_url (s3://bucket/prefix), and for a store other than AWS changestream.replica_endpoint, then reload."));
	if (pass->subtree != NULL)
		cs_s3_config_under(&pass->config, pass->subtree);
	if (!cs_s3_credentials_load(pass->config.credentials, pass->config.profile,
								&creds, &cp))
		return failed(pass, OUT_ERROR, ERRCODE_CONFIG_FILE_ERROR,
					  cp.message, cp.detail, cp.hint);
	pass->client = cs_s3_client_create(&pass->config, &creds);
	cs_s3_credentials_wipe(&creds);
	url = pass->config.store;
	if (bucket_url == NULL || strcmp(url, bucket_url) != 0)
	{
		/* another store, bucket or prefix: start over */
		MemoryContextReset(bucket_cxt);
		bucket_url = MemoryContextStrdup(bucket_cxt, url);
		journal = NULL;
		listing_cxt = NULL;		/* deleted with bucket_cxt's children */
		listed = NULL;
		nlisted = 0;
		listing_done = false;
		marker_ok = false;
		marker_created = false;
		pub_valid = false;
		tail_index = -1;
		tail_objects = NIL;
		tail_ready = false;
		cs_replica_forget_position();
	}
	return OUT_OK;
}

/*
 * The bucket's retention (remote_retention.c), after a pass that reached
 * the bucket.
 */
static Outcome
remote_retention(Pass *pass)
{
	CsRemoteFailure f;
	bool		ok;

	memset(&f, 0, sizeof(f));
	transfer_begin();
	ok = cs_remote_retention_step(pass->client, &pass->config,
								  pass->directory, &f);
	transfer_end();
	if (ok)
		return OUT_OK;
	return failed(pass, f.retry ? OUT_RETRY : OUT_ERROR, f.sqlerrcode,
				  f.message, NULL, f.hint);
}

/* One pass: the marker, the journal, the listing, then every generation. */
static Outcome
run_pass(Pass *pass)
{
	Outcome		outcome = begin_pass(pass);
	List	   *gens;
	ListCell   *g;
	bool		complete = false;

	if (outcome != OUT_OK)
		return outcome;
	if (!marker_ok)
	{
		outcome = check_marker(pass);
		if (outcome != OUT_OK)
			return outcome;
		marker_ok = true;
	}
	if (journal == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(bucket_cxt);

		journal = cs_journal_load(pass->directory, bucket_url);
		MemoryContextSwitchTo(old);
		if (marker_created)
		{
			forget_missing(cs_journal_forget(journal, false),
						   "the prefix had no marker object, so it was new or emptied");
			cs_remote_retention_forget(pass->directory, bucket_url);
		}
	}
	if (!listing_done)
	{
		outcome = list_bucket(pass);
		if (outcome != OUT_OK)
			return outcome;
	}
	gens = cs_list_generations(pass->directory);
	count_backlog(pass, gens);
	foreach(g, gens)
	{
		uint64		gen = *(uint64 *) lfirst(g);

		outcome = put_generation(pass, gen, lnext(gens, g) == NULL, &complete);
		if (outcome != OUT_OK || !complete)
			break;
		/* every file of gen is up: local retention may delete it whole */
		pos_generation = gen + 1;
		pos_next_segment = 0;
		pos_snapshot = InvalidXLogRecPtr;
		publish_position();
	}
	if (outcome == OUT_OK || outcome == OUT_WAIT)
	{
		Outcome		removed = remove_tails(pass);

		if (removed != OUT_OK)
			return removed;
		removed = remote_retention(pass);
		if (removed != OUT_OK)
			return removed;
	}
	/* no unjournaled local file left: the listing is not needed again */
	if ((outcome == OUT_OK || outcome == OUT_WAIT) &&
		count_backlog(pass, gens) == 0)
		free_listing();
	return outcome == OUT_WAIT ? OUT_OK : outcome;
}

/* The backoff delay: backoff_ms with up to a quarter of jitter, doubled. */
static long
next_backoff(void)
{
	long		ms = backoff_ms - (long) (pg_prng_double(&pg_global_prng_state) * backoff_ms / 4);

	backoff_ms = Min(backoff_ms * 2, BACKOFF_MAX_MS);
	return ms;
}

/* Log a failure once (log_once.c) and publish it. */
static void
report(Pass *pass, Outcome outcome)
{
	CsReplicaState state = outcome == OUT_RETRY ? CS_REPLICA_BACKOFF :
		CS_REPLICA_ERROR;

	if (cs_log_once_should_log(&log_once, pass->sqlerrcode, pass->message))
		ereport(LOG,
				(errcode(pass->sqlerrcode),
				 errmsg("changestream uploader: %s", pass->message),
				 pass->detail ? errdetail_internal("%s", pass->detail) : 0,
				 pass->hint ? errhint("%s", pass->hint) : 0));
	cs_replica_set_error(state, pass->detail ?
						 psprintf("%s: %s", pass->message, pass->detail) :
						 pass->message);
}

/*
 * Give the pass its own resource owner, a child of the worker's: the
 * digests and HMACs (cryptohash.h) of the pass belong to it.
 */
static void
pass_owner_begin(void)
{
	if (pass_owner == NULL)
		pass_owner = ResourceOwnerCreate(worker_owner,
										 "changestream uploader pass");
	CurrentResourceOwner = pass_owner;
}

/*
 * Release and delete the pass's resource owner (isCommit: the pass ended
 * normally, so a resource still held is a leak reported as a warning).
 * From PostgreSQL 17 on a released owner takes no new resources, so the
 * next pass gets a new one (pass_owner_begin()).
 */
static void
pass_owner_end(bool isCommit)
{
	CurrentResourceOwner = worker_owner;
	if (pass_owner == NULL)
		return;
	ResourceOwnerRelease(pass_owner, RESOURCE_RELEASE_BEFORE_LOCKS,
						 isCommit, false);
	ResourceOwnerRelease(pass_owner, RESOURCE_RELEASE_LOCKS,
						 isCommit, false);
	ResourceOwnerRelease(pass_owner, RESOURCE_RELEASE_AFTER_LOCKS,
						 isCommit, false);
	ResourceOwnerDelete(pass_owner);
	pass_owner = NULL;
}

/*
 * The error path, entered through sigsetjmp: a local file could not be
 * read, or a reload cancelled a transfer.  Releases what the pass held
 * and waits the backoff delay (not after a reload).
 */
static void
pass_failed(void)
{
	ErrorData  *edata;
	bool		reload;
	int			tree = current_tree;

	error_context_stack = NULL;
	HOLD_INTERRUPTS();
	in_transfer = false;
	QueryCancelPending = false;
	MemoryContextSwitchTo(TopMemoryContext);
	edata = CopyErrorData();
	reload = edata->sqlerrcode == ERRCODE_QUERY_CANCELED;
	if (!reload && cs_log_once_should_log(&log_once, edata->sqlerrcode, edata->message))
		EmitErrorReport();
	FlushErrorState();
	pgstat_report_wait_end();
	LWLockReleaseAll();
	/* the digests' contexts (cryptohash.h) belong to the pass's owner */
	pass_owner_end(false);
	AtEOXact_Files(false);
	MemoryContextReset(pass_cxt);
	if (!reload && tree >= 0)
	{
		/* the tree's failure: the others go on meanwhile */
		cs_replica_set_error(CS_REPLICA_ERROR, edata->message);
		last_pass_failed = true;
		trees[tree].next_try =
			TimestampTzPlusMilliseconds(GetCurrentTimestamp(), next_backoff());
	}
	leave_tree();
	FreeErrorData(edata);
	RESUME_INTERRUPTS();
	if (!reload && tree < 0)
		cs_latch_wait_ms(RESCAN_MS, true);	/* no tree's: not in a loop */
}

/* before_shmem_exit callback: the uploader is gone from status(). */
static void
uploader_exit(int code, Datum arg)
{
	cs_replica_status_exited();
}

/*
 * One pass over the tree of status entry index, when it serves a database
 * (its archive's configuration, cs_archive_config_for(): the directory
 * root for changestream.database, databases/<name> under it, and under
 * the replica's prefix, for the others).  A tree in its backoff delay
 * only has its backlog counted, which its archiver's back-pressure
 * (changestream.replica_max_backlog) follows during an outage.
 */
static void
serve_tree(int index)
{
	Tree	   *t = &trees[index];
	char		database[NAMEDATALEN];
	CsArchiveConfig *config;
	Outcome		outcome;

	t->live = false;
	if (!cs_status_in_use(index, database))
	{
		t->next_try = 0;
		return;
	}
	config = cs_archive_config_for(database, InvalidOid);
	enter_tree(index, database);
	memset(&t->pass, 0, sizeof(Pass));
	t->pass.directory = config->directory;
	t->pass.database = config->database;
	if (strcmp(config->directory, config->root) != 0)
		t->pass.subtree = cs_archive_relative_name(config->root,
												   config->directory);
	if (GetCurrentTimestamp() < t->next_try)
	{
		if (journal != NULL)
			count_backlog(&t->pass, cs_list_generations(t->pass.directory));
		leave_tree();
		return;
	}
	outcome = run_pass(&t->pass);
	if (outcome != OUT_OK)
		tree_failed(index, outcome);
	else
	{
		if (last_pass_failed)
		{
			int			n = cs_log_once_reset(&log_once) + 1;

			ereport(LOG,
					(errmsg_plural("changestream uploader reaches the bucket again after %d failed attempt",
								   "changestream uploader reaches the bucket again after %d failed attempts",
								   n, n)));
			last_pass_failed = false;
		}
		backoff_ms = BACKOFF_MIN_MS;
		cs_replica_set_state(CS_REPLICA_IDLE);
		t->live = true;
		t->next_try = 0;
	}
	leave_tree();
}

/*
 * changestream_uploader_main(main_arg)
 *	  Entry point of the "changestream uploader" background worker
 *	  (main_arg unused).  Needs no database connection.  Uploads the
 *	  archive of changestream.directory to changestream.replica_url until
 *	  SIGTERM; never returns.
 */
void
changestream_uploader_main(Datum main_arg)
{
	sigjmp_buf	local_sigjmp_buf;

	pqsignal(SIGHUP, uploader_sighup);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/*
	 * pg_cryptohash_create() (the signer, MD5s) needs a resource owner: each
	 * pass has its own, a child of this one (pass_owner_begin()).
	 */
	worker_owner = ResourceOwnerCreate(NULL, "changestream uploader");
	CurrentResourceOwner = worker_owner;
	cs_replica_status_started();
	before_shmem_exit(uploader_exit, (Datum) 0);
	pass_cxt = AllocSetContextCreate(TopMemoryContext,
									 "changestream uploader pass",
									 ALLOCSET_DEFAULT_SIZES);

	if (sigsetjmp(local_sigjmp_buf, 1) != 0)
		pass_failed();
	PG_exception_stack = &local_sigjmp_buf;

	for (;;)
	{
		CsArchiveConfig *config;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			for (int i = 0; i < CS_MAX_DATABASES; i++)
			{
				trees[i].backoff_ms = BACKOFF_MIN_MS;
				trees[i].next_try = 0;
			}
		}
		MemoryContextReset(pass_cxt);
		MemoryContextSwitchTo(pass_cxt);
		config = cs_archive_config_current();
		if (!cs_archive_config_enabled(config) || cs_replica_url[0] == '\0')
		{
			cs_replica_set_state(CS_REPLICA_IDLE);
			cs_latch_wait_ms(RESCAN_MS * 5, false);
			continue;
		}
		/* one pass per tree, the first one served in turn, then the tails */
		pass_owner_begin();
		turn_cut = false;
		for (int k = 0; k < CS_MAX_DATABASES; k++)
			serve_tree((round_start + k) % CS_MAX_DATABASES);
		round_start = (round_start + 1) % CS_MAX_DATABASES;
		tail_phase();
		pass_owner_end(true);
		MemoryContextSwitchTo(TopMemoryContext);
	}
}

/*
 * cs_register_uploader()
 *	  Register the uploader at _PG_init() when changestream.replica_url is
 *	  set at server start (it is a SIGHUP setting: set later, it takes a
 *	  restart to start the uploader; a reload that changes the bucket or
 *	  prefix of a running one is taken at its next pass).
 *	  BGWORKER_SHMEM_ACCESS only, started once recovery has finished,
 *	  restarted 5 s after an unexpected exit.  Mirrors contrib/worker_spi.
 */
void
cs_register_uploader(void)
{
	BackgroundWorker worker;

	if (cs_replica_url == NULL || cs_replica_url[0] == '\0')
		return;
	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "changestream");
	snprintf(worker.bgw_function_name, BGW_MAXLEN,
			 "changestream_uploader_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "changestream uploader");
	snprintf(worker.bgw_type, BGW_MAXLEN, "changestream uploader");
	worker.bgw_notify_pid = 0;
	RegisterBackgroundWorker(&worker);
	cs_uploader_registered = true;
}
