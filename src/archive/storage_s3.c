/*-------------------------------------------------------------------------
 *
 * storage_s3.c
 *	  The replica's storage driver (storage.h): the archive as the objects
 *	  the uploader put in the bucket, read-only, for the readers
 *	  (docs/DESIGN.md section 16).  A path of this driver is
 *	  "s3://<bucket>/<key>", the key mirroring the local layout under the
 *	  replica's prefix, so the layout (archive_layout.c) makes its paths
 *	  from the root "s3://<bucket>/<prefix>" as from a directory, and every
 *	  error a reader raises names the object.
 *
 *	  One listing per statement: the first call of a statement lists the
 *	  prefix once (ListObjectsV2, start-after, while IsTruncated) into a
 *	  sorted array; list, stat and the directory entries are answered from
 *	  it, so the readers see one consistent view of the bucket and the
 *	  bucket is never polled.  Objects are immutable once listed (the
 *	  uploader puts each once; only the small schema history, timelines
 *	  and horizon files change, and they are read whole into memory).
 *
 *	  Opening an object downloads it whole, its body streamed to a file of
 *	  the server's temporary directory (base/pgsql_tmp, with the temporary
 *	  file prefix, so a crash's leftovers go at the next start): memory
 *	  stays bounded whatever the object's size, and the readers get a
 *	  descriptor of a regular file, so the same code (zlib, the frame
 *	  CRCs, continuity) reads the bucket and the local directory.  Those
 *	  files are a cache of at most CS_S3_CACHE_BYTES, the least recently
 *	  used removed first (a reader holding one open keeps its data); the
 *	  cache is emptied when the statement ends its use of the listing (the
 *	  next statement lists again) and when the backend exits.
 *
 *	  The active segment's tail: the listing holds the uploader's tail
 *	  objects ("tail/generations/<gen>/wal/<index>.wal.<start>-<end>");
 *	  each generation's tail (docs/FORMAT.md section 16) is added to it as
 *	  a raw segment "generations/<gen>/wal/<n>.wal" of the bytes its tail
 *	  objects cover from offset 0 (add_tails()), assembled from them into
 *	  one cache file right after the listing (fetch_tails(),
 *	  download_tail(): the uploader removes them once the segment is up
 *	  compressed), so the readers take it as the generation's newest,
 *	  unsealed segment.
 *
 *	  Prefetch: opening a segment object starts the downloads of the next
 *	  CS_S3_PREFETCH segment objects of its directory on the same client,
 *	  without waiting; they move on while the reader decodes (the segment
 *	  reader calls cs_storage_poll()) and whenever the client waits, and
 *	  opening one waits for the rest of it.  A prefetch that failed is
 *	  dropped and the object downloaded again, so what a failure raises
 *	  does not depend on prefetch.
 *
 *	  Everything from the bucket is untrusted: a body whose length is not
 *	  the listed size is damage (XX001) naming the object; a body over a
 *	  small file's bound likewise.  A request that fails is tried again up
 *	  to CS_S3_READ_TRIES times when the failure is retryable (the network,
 *	  5xx, 429, SlowDown; an expired token after reading the credentials
 *	  again), then raised naming the key: 08006 when the store could not
 *	  be reached, F0000 when a setting or the keys are wrong, 58P01 when a
 *	  listed object is gone (remote retention removed it: not damage),
 *	  58030 otherwise.  Requests run in the S3 client's wait loop, which
 *	  a cancel or SIGTERM interrupts within a second.  Each request is
 *	  counted in status()'s replica request counters, as the uploader's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "archive/archive_layout.h"
#include "archive/storage.h"
#include "base/compat.h"
#include "replica/replica_status.h"
#include "replica/s3_config.h"
#include "replica/s3_credentials.h"
#include "replica/s3_ops.h"

#define CS_S3_SCHEME		"s3://"
#define CS_S3_CACHE_BYTES	((int64) 512 * 1024 * 1024)
#define CS_S3_READ_TRIES	4
#define CS_S3_OBJECT_MAX	((size_t) 64 * 1024 * 1024 * 1024)
#define CS_S3_PREFETCH		2	/* segment objects downloaded ahead */
#define CS_S3_POLL_MS		5	/* cs_storage_s3_poll() at most this often */
#define CS_S3_TAIL_DIR		"tail/generations/"	/* tail objects' keys */
#define CS_S3_TAIL_CHUNK	65536	/* bytes merged at a time */

/* one object of the listing */
typedef struct Listed
{
	char	   *key;
	int64		size;
	char	   *etag;			/* NULL when the listing gave none */
	List	   *pieces;			/* TailPiece *: a segment made of tail
								 * objects; NIL for an object */
} Listed;

/* a tail object taking part in a virtual raw segment (FORMAT.md 16) */
typedef struct TailPiece
{
	char	   *key;
	int64		start;			/* bytes [start, end) of the segment */
	int64		end;
} TailPiece;

/* one downloaded object in the cache */
typedef struct Cached
{
	char	   *key;
	char		path[MAXPGPATH];
	int64		size;
	uint64		last_use;
} Cached;

/* a download started ahead of its reader: a cache entry once finished */
typedef struct Prefetch
{
	Cached	   *entry;			/* key, path and size */
	int			fd;				/* the file being written */
	CsS3Transfer *transfer;
} Prefetch;

/* the driver's state in this backend, for one statement */
typedef struct S3State
{
	MemoryContext cxt;			/* everything below, reset per statement */
	TimestampTz statement;		/* the statement it was made for */
	CsS3Config	config;
	CsS3Client *client;
	char	   *root;			/* "s3://bucket/prefix" */
	Listed	   *objects;		/* sorted by key */
	int			nobjects;
	bool		listed;
	List	   *cache;			/* Cached * */
	int64		cache_bytes;
	uint64		uses;
	List	   *prefetches;		/* Prefetch *, under way */
	int64		prefetch_bytes;
	TimestampTz last_poll;
} S3State;

static S3State state;

/* the statement (its start) for which prefetch is off, 0: none */
static TimestampTz prefetch_off_statement = 0;

static Cached *download_to_cache(const char *path, const char *key,
								 int64 size);
static void download(const char *path, const char *key, int64 size, int fd);
static int	create_cache_file(char *path);
static Listed *find_object(const char *key);
static bool exit_callback_registered = false;
static uint32 cache_serial = 0;

/* Stop a prefetch and remove its file (never raises). */
static void
drop_prefetch(Prefetch *p)
{
	cs_s3_cancel(p->transfer);
	(void) close(p->fd);
	(void) unlink(p->entry->path);
}

/*
 * Remove the cached files and stop the prefetches (never raises: exit and
 * reset paths).
 */
static void
drop_cache(void)
{
	ListCell   *lc;

	foreach(lc, state.prefetches)
		drop_prefetch(lfirst(lc));
	state.prefetches = NIL;
	state.prefetch_bytes = 0;
	foreach(lc, state.cache)
		(void) unlink(((Cached *) lfirst(lc))->path);
	state.cache = NIL;
	state.cache_bytes = 0;
}

static void
exit_cleanup(int code, Datum arg)
{
	drop_cache();
}

/* A client for the current settings, with the credentials read now. */
static void
make_client(void)
{
	CsS3Credentials creds;
	MemoryContext old = MemoryContextSwitchTo(state.cxt);

	cs_s3_credentials_get(state.config.credentials, state.config.profile,
						  &creds);
	state.client = cs_s3_client_create(&state.config, &creds);
	cs_s3_credentials_wipe(&creds);
	MemoryContextSwitchTo(old);
}

/*
 * The state for this statement: a new statement drops the listing, the
 * cache and the client, and reads the settings again.  Raises 55000 when
 * no replica is configured.
 */
static void
begin_statement(void)
{
	TimestampTz now = GetCurrentStatementStartTimestamp();
	const char *problem;
	MemoryContext old;

	if (state.cxt != NULL && state.statement == now)
		return;
	if (!exit_callback_registered)
	{
		on_proc_exit(exit_cleanup, (Datum) 0);
		exit_callback_registered = true;
	}
	drop_cache();
	if (state.cxt == NULL)
		state.cxt = AllocSetContextCreate(TopMemoryContext,
										  "changestream replica reader",
										  ALLOCSET_DEFAULT_SIZES);
	else
		MemoryContextReset(state.cxt);
	state.statement = 0;
	state.client = NULL;
	state.objects = NULL;
	state.nobjects = 0;
	state.listed = false;
	state.uses = 0;
	state.last_poll = 0;
	old = MemoryContextSwitchTo(state.cxt);
	problem = cs_s3_config_current(&state.config);
	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the replica cannot be read: %s", problem),
				 errhint("Set changestream.replica_url (and changestream.replica_endpoint, changestream.replica_credentials for a store other than AWS with keys in the environment), then reload.")));
	state.root = state.config.prefix[0] ?
		psprintf(CS_S3_SCHEME "%s/%s", state.config.bucket, state.config.prefix) :
		psprintf(CS_S3_SCHEME "%s", state.config.bucket);
	MemoryContextSwitchTo(old);
	make_client();
	state.statement = now;
}

/*
 * cs_storage_s3_root
 *	  Returns the root path of the configured replica, palloc'd:
 *	  "s3://<bucket>/<prefix>" (or "s3://<bucket>"), which the layout
 *	  extends as it extends a directory; NULL, with *problem set, when no
 *	  replica is configured.  Never raises but on out-of-memory.
 */
char *
cs_storage_s3_root(const char **problem)
{
	CsS3Config config;

	*problem = cs_s3_config_current(&config);
	if (*problem != NULL)
		return NULL;
	return config.prefix[0] ?
		psprintf(CS_S3_SCHEME "%s/%s", config.bucket, config.prefix) :
		psprintf(CS_S3_SCHEME "%s", config.bucket);
}

/*
 * cs_storage_is_s3_path
 *	  Whether path is one of this driver's ("s3://...").
 */
bool
cs_storage_is_s3_path(const char *path)
{
	return strncmp(path, CS_S3_SCHEME, strlen(CS_S3_SCHEME)) == 0;
}

/* The object key of path ("" for the bucket's root); 22023 if elsewhere. */
static const char *
path_key(const char *path)
{
	size_t		blen;
	const char *p;

	begin_statement();
	p = path + strlen(CS_S3_SCHEME);
	blen = strlen(state.config.bucket);
	if (!cs_storage_is_s3_path(path) ||
		strncmp(p, state.config.bucket, blen) != 0 ||
		(p[blen] != '\0' && p[blen] != '/'))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%s\" is not in the configured replica %s", path,
						state.root),
				 errhint("Only the bucket named by changestream.replica_url can be read.")));
	return p[blen] == '/' ? p + blen + 1 : p + blen;
}

static int
cmp_listed(const void *a, const void *b)
{
	return strcmp(((const Listed *) a)->key, ((const Listed *) b)->key);
}

/* What a failed request means, raised: see the file header. */
static void
raise_failure(const char *path, const CsS3Response *resp,
			  const CsS3Failure *failure)
{
	int			code;

	if (resp->status == 404 && strstr(path, "/" CS_S3_TAIL_DIR) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FILE),
				 errmsg("object \"%s\" of the replica is gone: %s", path,
						failure->message),
				 errhint("The uploader removes a segment's tail objects once its compressed file is in the bucket: run the statement again.")));
	if (resp->status == 404)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FILE),
				 errmsg("object \"%s\" of the replica is gone: %s", path,
						failure->message),
				 errhint("Remote retention may have removed it since the bucket was listed: run the statement again.")));
	if (failure->class == CS_S3_CONFIG)
		code = ERRCODE_CONFIG_FILE_ERROR;
	else if (failure->class == CS_S3_RETRYABLE)
		code = ERRCODE_CONNECTION_FAILURE;
	else
		code = ERRCODE_IO_ERROR;
	ereport(ERROR,
			(errcode(code),
			 errmsg("could not read \"%s\" from the replica: %s", path,
					failure->message),
			 failure->hint ? errhint("%s", failure->hint) : 0));
}

/*
 * Whether to try a failed request again (retryable, and tries left):
 * waits first, interruptibly; an expired token makes a new client.
 */
static bool
try_again(const CsS3Response *resp, const CsS3Failure *failure, int try)
{
	if (failure->class != CS_S3_RETRYABLE || try + 1 >= CS_S3_READ_TRIES)
		return false;
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 250L << try, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
	if (resp->error_code && strcmp(resp->error_code, "ExpiredToken") == 0)
		make_client();
	return true;
}

static void add_tails(const char *prefix);
static const char *cached_file(const char *path, const char *key, int64 size);

/*
 * Download the segments made of tail objects into the cache at once,
 * right after the listing: the uploader removes a segment's tail objects
 * once its compressed file is up, so fetching them now rather than when a
 * reader reaches the segment (at the end of a long statement) keeps the
 * window for a 58P01 to the moment after the listing.
 */
static void
fetch_tails(void)
{
	for (int i = 0; i < state.nobjects; i++)
	{
		Listed	   *o = &state.objects[i];

		if (o->pieces != NIL)
			(void) cached_file(psprintf(CS_S3_SCHEME "%s/%s",
										state.config.bucket, o->key),
							   o->key, o->size);
	}
}

/* The listing of the prefix, once per statement. */
static void
ensure_listed(void)
{
	MemoryContext old;
	char	   *prefix;
	List	   *objects = NIL;
	ListCell   *lc;
	int			n = 0;

	begin_statement();
	if (state.listed)
		return;
	old = MemoryContextSwitchTo(state.cxt);
	prefix = state.config.prefix[0] ? psprintf("%s/", state.config.prefix) :
		pstrdup("");
	for (int try = 0;; try++)
	{
		CsS3Response resp;
		CsS3Failure failure;
		char	   *bad;

		list_free_deep(objects);
		objects = NIL;
		cs_replica_count(CS_REPLICA_LIST, 0);
		if (cs_s3_list(state.client, prefix, NULL, 0, &objects, &resp, &bad))
			break;
		if (bad != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_PROTOCOL_VIOLATION),
					 errmsg("the listing of \"%s\" in the replica is malformed: %s",
							state.root, bad),
					 errhint("Check that changestream.replica_endpoint is an S3 API.")));
		cs_s3_classify(&resp, psprintf("listing of prefix \"%s\"", prefix),
					   &failure);
		if (!try_again(&resp, &failure, try))
			raise_failure(state.root, &resp, &failure);
	}
	state.objects = palloc(sizeof(Listed) * Max(list_length(objects), 1));
	foreach(lc, objects)
	{
		CsS3Object *o = lfirst(lc);

		if (o->size < 0)
			ereport(ERROR,
					(errcode(ERRCODE_PROTOCOL_VIOLATION),
					 errmsg("the listing of \"%s\" in the replica gives key \"%s\" a negative size",
							state.root, o->key)));
		state.objects[n].key = o->key;
		state.objects[n].size = o->size;
		state.objects[n].etag = o->etag;
		state.objects[n].pieces = NIL;
		n++;
	}
	qsort(state.objects, n, sizeof(Listed), cmp_listed);
	state.nobjects = n;
	add_tails(prefix);
	state.listed = true;
	MemoryContextSwitchTo(old);
	fetch_tails();
}

/* The index of the first listed key >= key. */
static int
lower_bound(const char *key)
{
	int			lo = 0;
	int			hi = state.nobjects;

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (strcmp(state.objects[mid].key, key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The listed object named key exactly, or NULL. */
static Listed *
find_object(const char *key)
{
	int			i = lower_bound(key);

	if (i < state.nobjects && strcmp(state.objects[i].key, key) == 0)
		return &state.objects[i];
	return NULL;
}

/* "key/" ("" for the root): the prefix of what is below key. */
static char *
dir_prefix(const char *key)
{
	return key[0] ? psprintf("%s/", key) : pstrdup("");
}

/* Whether some object lies below key (key is then a directory). */
static bool
is_dir(const char *key)
{
	char	   *prefix = dir_prefix(key);
	int			i = lower_bound(prefix);
	bool		found = i < state.nobjects &&
		strncmp(state.objects[i].key, prefix, strlen(prefix)) == 0;

	pfree(prefix);
	return found;
}

/* The entries directly below key, each once, with what they are. */
static List *
children(const char *key)
{
	char	   *prefix = dir_prefix(key);
	size_t		plen = strlen(prefix);
	List	   *entries = NIL;
	char	   *last = NULL;

	for (int i = lower_bound(prefix); i < state.nobjects; i++)
	{
		const char *rest = state.objects[i].key;
		const char *slash;
		CsStorageEntry *e;

		if (strncmp(rest, prefix, plen) != 0)
			break;
		rest += plen;
		slash = strchr(rest, '/');
		if (rest[0] == '\0' || slash == rest)
			continue;			/* "dir/" or "dir//x": no name */
		if (last && strncmp(last, rest, slash ? slash - rest : strlen(rest)) == 0 &&
			last[slash ? slash - rest : strlen(rest)] == '\0')
			continue;
		e = palloc0(sizeof(CsStorageEntry));
		e->name = slash ? pnstrdup(rest, slash - rest) : pstrdup(rest);
		e->info.type = slash ? CS_STORAGE_DIR : CS_STORAGE_FILE;
		e->info.size = slash ? 0 : state.objects[i].size;
		e->info.nlinks = 1;
		last = e->name;
		entries = lappend(entries, e);
	}
	pfree(prefix);
	return entries;
}

/* What key names: a file (listed), a directory (objects below), or missing. */
static void
key_info(const char *key, CsStorageInfo *info)
{
	Listed	   *o;

	memset(info, 0, sizeof(*info));
	ensure_listed();
	if ((o = find_object(key)) != NULL)
	{
		info->type = CS_STORAGE_FILE;
		info->size = o->size;
		info->nlinks = 1;
	}
	else if (is_dir(key))
	{
		info->type = CS_STORAGE_DIR;
		info->nlinks = 1;
	}
	else
		info->type = CS_STORAGE_MISSING;
}

static List *
s3_list(const char *path, bool missing_ok, bool *found)
{
	const char *key = path_key(path);
	CsStorageInfo info;
	List	   *names = NIL;
	List	   *entries;
	ListCell   *lc;

	key_info(key, &info);
	*found = info.type == CS_STORAGE_DIR;
	if (info.type == CS_STORAGE_FILE)
		cs_file_damage(path, 0, "It is not a directory.");
	if (info.type == CS_STORAGE_MISSING)
	{
		if (missing_ok)
			return NIL;
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FILE),
				 errmsg("could not open directory \"%s\": no object of the replica is below it",
						path)));
	}
	entries = children(key);
	foreach(lc, entries)
	{
		names = lappend(names, ((CsStorageEntry *) lfirst(lc))->name);
		pfree(lfirst(lc));
	}
	list_free(entries);
	return names;
}

static int
s3_stat(const char *path, bool follow, CsStorageInfo *info)
{
	key_info(path_key(path), info);
	return 0;
}

static List *
s3_list_entries(const char *path, int *err)
{
	const char *key = path_key(path);
	CsStorageInfo info;

	key_info(key, &info);
	*err = info.type == CS_STORAGE_DIR ? 0 :
		info.type == CS_STORAGE_MISSING ? ENOENT : ENOTDIR;
	return *err ? NIL : children(key);
}

/* Make room for size more bytes in the cache, oldest use first. */
static void
evict_for(int64 size)
{
	while (state.cache != NIL && state.cache_bytes + size > CS_S3_CACHE_BYTES)
	{
		ListCell   *lc;
		Cached	   *oldest = NULL;

		foreach(lc, state.cache)
		{
			Cached	   *c = lfirst(lc);

			if (oldest == NULL || c->last_use < oldest->last_use)
				oldest = c;
		}
		(void) unlink(oldest->path);
		state.cache_bytes -= oldest->size;
		state.cache = list_delete_ptr(state.cache, oldest);
	}
}

/*
 * A new file of the temporary directory for a download, open for reading
 * and writing (a segment made of tail objects is checked against itself).
 */
static int
create_cache_file(char *path)
{
	int			fd;

	snprintf(path, MAXPGPATH, "base/%s/%s_cs_replica.%d.%u", PG_TEMP_FILES_DIR,
			 PG_TEMP_FILE_PREFIX, MyProcPid, ++cache_serial);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | PG_BINARY,
			  S_IRUSR | S_IWUSR);
	if (fd < 0 && errno == ENOENT)
	{
		/* fd.c makes the temporary directory on demand; so do we */
		(void) MakePGDirectory(psprintf("base/%s", PG_TEMP_FILES_DIR));
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | PG_BINARY,
				  S_IRUSR | S_IWUSR);
	}
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create temporary file \"%s\": %m", path)));
	return fd;
}

/*
 * Download the object of path (listed with size bytes) into the file fd:
 * streamed, tried again while the failure is retryable; XX001 when the
 * body is not the listed size.
 */
static void
download(const char *path, const char *key, int64 size, int fd)
{
	for (int try = 0;; try++)
	{
		CsS3Response resp;
		CsS3Failure failure;

		if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not reset a temporary file for \"%s\": %m", path)));
		cs_s3_get_to_file(state.client, key, fd,
						  Min((size_t) size + 1, CS_S3_OBJECT_MAX), &resp);
		cs_replica_count(CS_REPLICA_GET, 0);
		if (cs_s3_classify(&resp, psprintf("GET of key \"%s\"", key),
						   &failure) == CS_S3_OK)
		{
			if ((int64) resp.file_bytes != size)
				cs_file_damage(path, (int64) resp.file_bytes,
							   "The object's body holds %zu bytes where the bucket's listing says %lld.",
							   resp.file_bytes, (long long) size);
			return;
		}
		if (resp.too_large)
			cs_file_damage(path, size,
						   "The object's body is longer than the %lld bytes the bucket's listing says.",
						   (long long) size);
		if (!try_again(&resp, &failure, try))
			raise_failure(path, &resp, &failure);
	}
}

/* Put the downloaded file of entry in the cache. */
static void
cache_add(Cached *entry)
{
	MemoryContext old = MemoryContextSwitchTo(state.cxt);

	entry->last_use = ++state.uses;
	state.cache = lappend(state.cache, entry);
	MemoryContextSwitchTo(old);
	state.cache_bytes += entry->size;
}

/* The cached file of key, marked used, or NULL. */
static Cached *
cache_lookup(const char *key)
{
	ListCell   *lc;

	foreach(lc, state.cache)
	{
		Cached	   *c = lfirst(lc);

		if (strcmp(c->key, key) == 0)
		{
			c->last_use = ++state.uses;
			return c;
		}
	}
	return NULL;
}

/* The prefetch of key under way, or NULL. */
static Prefetch *
prefetch_lookup(const char *key)
{
	ListCell   *lc;

	foreach(lc, state.prefetches)
	{
		Prefetch   *p = lfirst(lc);

		if (strcmp(p->entry->key, key) == 0)
			return p;
	}
	return NULL;
}

/*
 * Wait for the prefetch p to end and put its file in the cache; false
 * (its file removed) when it failed in any way, for the caller to
 * download the object again, which raises what the failure means.
 * Raises only on interrupts and what cs_s3_finish() raises.
 */
static bool
prefetch_finish(Prefetch *p)
{
	CsS3Response resp;
	CsS3Failure failure;
	bool		ok;

	state.prefetches = list_delete_ptr(state.prefetches, p);
	state.prefetch_bytes -= p->entry->size;
	PG_TRY();
	{
		cs_s3_finish(p->transfer, &resp);
	}
	PG_CATCH();
	{
		(void) close(p->fd);
		(void) unlink(p->entry->path);
		PG_RE_THROW();
	}
	PG_END_TRY();
	ok = cs_s3_classify(&resp, "prefetch", &failure) == CS_S3_OK &&
		!resp.too_large && (int64) resp.file_bytes == p->entry->size;
	if (close(p->fd) != 0)
		ok = false;
	if (!ok)
	{
		(void) unlink(p->entry->path);
		return false;
	}
	cache_add(p->entry);
	return true;
}

/* Whether key names a segment object: ".../wal/<index>.wal.gz". */
static bool
is_segment_key(const char *key)
{
	size_t		len = strlen(key);
	const char *slash = strrchr(key, '/');

	return len > 7 && strcmp(key + len - 7, ".wal.gz") == 0 &&
		slash != NULL && slash - key >= 3 && strncmp(slash - 3, "wal/", 4) == 0 &&
		(slash - key == 3 || slash[-4] == '/');
}

/* Start downloading the listed object o into a new cache file. */
static void
prefetch_start(Listed *o)
{
	MemoryContext old = MemoryContextSwitchTo(state.cxt);
	Prefetch   *p = palloc0(sizeof(Prefetch));

	p->entry = palloc0(sizeof(Cached));
	p->entry->key = pstrdup(o->key);
	p->entry->size = o->size;
	MemoryContextSwitchTo(old);
	evict_for(state.prefetch_bytes + o->size);
	p->fd = create_cache_file(p->entry->path);
	PG_TRY();
	{
		p->transfer = cs_s3_get_to_file_start(state.client, o->key, p->fd,
											  Min((size_t) o->size + 1,
												  CS_S3_OBJECT_MAX));
		cs_replica_count(CS_REPLICA_GET, 0);
	}
	PG_CATCH();
	{
		(void) close(p->fd);
		(void) unlink(p->entry->path);
		PG_RE_THROW();
	}
	PG_END_TRY();
	old = MemoryContextSwitchTo(state.cxt);
	state.prefetches = lappend(state.prefetches, p);
	MemoryContextSwitchTo(old);
	state.prefetch_bytes += o->size;
}

/*
 * After a reader opened the segment object key: start downloading the
 * next CS_S3_PREFETCH segment objects of its directory that are neither
 * cached nor under way, within the cache's bound, and let them send
 * their requests (they move on whenever the client waits, and in
 * cs_storage_s3_poll() while the reader decodes).
 */
static void
prefetch_after(const char *key)
{
	Listed	   *o = find_object(key);
	size_t		dirlen = strrchr(key, '/') - key + 1;
	int			ahead = 0;
	bool		started = false;

	if (o == NULL || !is_segment_key(key) ||
		prefetch_off_statement == GetCurrentStatementStartTimestamp())
		return;
	for (int i = (o - state.objects) + 1;
		 i < state.nobjects && ahead < CS_S3_PREFETCH; i++)
	{
		Listed	   *next = &state.objects[i];

		if (strncmp(next->key, key, dirlen) != 0 ||
			strchr(next->key + dirlen, '/') != NULL)
			break;
		if (!is_segment_key(next->key))
			continue;
		ahead++;
		if (cache_lookup(next->key) != NULL || prefetch_lookup(next->key) != NULL)
			continue;
		if (state.prefetch_bytes + next->size > CS_S3_CACHE_BYTES / 4)
			break;				/* the cache's bound holds what is read too */
		prefetch_start(next);
		started = true;
	}
	if (started)
		cs_s3_progress(state.client, 0);
}

/*
 * cs_storage_s3_poll
 *	  Let this backend's prefetches of segment objects move on, without
 *	  waiting (at most every CS_S3_POLL_MS); the segment reader calls it
 *	  (through cs_storage_poll()) as it reads, so the next objects download
 *	  while one is decoded.  Does nothing when none is under way.  Runs
 *	  CHECK_FOR_INTERRUPTS(); raises only on interrupts and out-of-memory.
 */
void
cs_storage_s3_poll(void)
{
	TimestampTz now;

	if (state.prefetches == NIL || state.client == NULL ||
		state.statement != GetCurrentStatementStartTimestamp())
		return;
	now = GetCurrentTimestamp();
	if (!TimestampDifferenceExceeds(state.last_poll, now, CS_S3_POLL_MS))
		return;
	state.last_poll = now;
	cs_s3_progress(state.client, 0);
}

/*
 * The local file holding the object of path (listed, size bytes), from
 * the cache, from its prefetch, or downloaded into the cache now; then
 * the next segment objects are prefetched.
 */
static const char *
cached_file(const char *path, const char *key, int64 size)
{
	Cached	   *hit = cache_lookup(key);
	Prefetch   *p;

	if (hit == NULL && (p = prefetch_lookup(key)) != NULL &&
		prefetch_finish(p))
		hit = p->entry;
	if (hit == NULL)
		hit = download_to_cache(path, key, size);
	prefetch_after(key);
	return hit->path;
}

/*
 * Parses 16 lowercase hex digits at s into *v; false for anything else.
 */
static bool
parse_hex16(const char *s, uint64 *v)
{
	*v = 0;
	for (int i = 0; i < 16; i++)
	{
		int			d;

		if (s[i] >= '0' && s[i] <= '9')
			d = s[i] - '0';
		else if (s[i] >= 'a' && s[i] <= 'f')
			d = s[i] - 'a' + 10;
		else
			return false;
		*v = (*v << 4) | (uint64) d;
	}
	return true;
}

/*
 * Parses the rest of a tail object's key after "<prefix>tail/generations/":
 * "<gen>/wal/<index>.wal.<start>-<end>" (docs/FORMAT.md section 16); false
 * for any other name, which readers ignore.
 */
static bool
parse_tail_key(const char *rest, uint64 *gen, uint64 *index, int64 *start,
			   int64 *end)
{
	uint64		s;
	uint64		e;

	if (strlen(rest) != 16 + 5 + 16 + 5 + 16 + 1 + 16 ||
		!parse_hex16(rest, gen) || strncmp(rest + 16, "/wal/", 5) != 0 ||
		!parse_hex16(rest + 21, index) ||
		strncmp(rest + 37, ".wal.", 5) != 0 ||
		!parse_hex16(rest + 42, &s) || rest[58] != '-' ||
		!parse_hex16(rest + 59, &e) || *index > (uint64) PG_INT64_MAX ||
		e > (uint64) PG_INT64_MAX)
		return false;
	*start = (int64) s;
	*end = (int64) e;
	return true;
}

/*
 * The first segment index of generation gen missing among the listed
 * compressed segments "<prefix>generations/<gen>/wal/<index>.wal.gz"
 * (counting from the lowest listed, or 0 when none is); *raw_listed tells
 * whether a raw "<index>.wal" object of that index is listed too.
 */
static int64
first_missing_segment(const char *prefix, uint64 gen, bool *raw_listed)
{
	char	   *wal = psprintf("%sgenerations/%016llx/wal/", prefix,
							   (unsigned long long) gen);
	size_t		wlen = strlen(wal);
	int64		next = -1;
	char	   *raw;

	for (int i = lower_bound(wal); i < state.nobjects; i++)
	{
		const char *key = state.objects[i].key;
		int64		index;
		bool		compressed;

		if (strncmp(key, wal, wlen) != 0)
			break;
		if (!cs_parse_segment_file_name(key + wlen, &index, &compressed) ||
			!compressed)
			continue;
		if (next < 0 || index == next)
			next = index + 1;
		else if (index > next)
			break;
	}
	if (next < 0)
		next = 0;
	raw = psprintf("%s%016llx.wal", wal, (unsigned long long) next);
	*raw_listed = find_object(raw) != NULL;
	pfree(raw);
	pfree(wal);
	return next;
}

/*
 * The contiguous prefix [0, L) of segment index of generation gen that its
 * tail objects in listing positions [lo, hi) (sorted by start: the keys'
 * hex fields are fixed-width) cover, per docs/FORMAT.md section 16 step 2:
 * the pieces taking part appended to *pieces, L returned (0: none).  A
 * tail object whose listed size is not end - start, or with end <= start,
 * is damage (XX001) naming it.
 */
static int64
tail_prefix(const char *tprefix, int lo, int hi, uint64 gen, uint64 index,
			List **pieces)
{
	int64		covered = 0;

	for (int i = lo; i < hi; i++)
	{
		Listed	   *o = &state.objects[i];
		uint64		g;
		uint64		x;
		int64		start;
		int64		end;
		TailPiece  *piece;

		if (!parse_tail_key(o->key + strlen(tprefix), &g, &x, &start, &end) ||
			g != gen || x != index)
			continue;
		if (end <= start || o->size != end - start)
			cs_file_damage(psprintf(CS_S3_SCHEME "%s/%s", state.config.bucket,
									o->key), 0,
						   "The tail object holds %lld bytes where its name says bytes %lld to %lld of the segment.",
						   (long long) o->size, (long long) start,
						   (long long) end);
		if (start > covered)
			break;				/* a gap: the rest is not usable */
		if (end <= covered)
			continue;
		piece = palloc(sizeof(TailPiece));
		piece->key = o->key;
		piece->start = start;
		piece->end = end;
		*pieces = lappend(*pieces, piece);
		covered = end;
	}
	return covered;
}

/*
 * Adds to the sorted listing, for each generation with tail objects under
 * "<prefix>tail/generations/", the raw segment they hold (docs/FORMAT.md
 * section 16): "<prefix>generations/<gen>/wal/<n>.wal", n the first
 * segment index missing among the generation's compressed segments, of
 * the length its tail objects cover from offset 0, made of them when
 * opened (download_tail()).  Tail objects of other indexes are leftovers
 * and ignored; so are the tail objects of n when a raw object of that
 * name is listed.  Call in the state's context.
 */
static void
add_tails(const char *prefix)
{
	char	   *tprefix = psprintf("%s" CS_S3_TAIL_DIR, prefix);
	size_t		tlen = strlen(tprefix);
	int			first = lower_bound(tprefix);
	int			end = first;
	List	   *added = NIL;
	ListCell   *lc;
	int			n;

	while (end < state.nobjects &&
		   strncmp(state.objects[end].key, tprefix, tlen) == 0)
		end++;
	for (int i = first; i < end;)
	{
		uint64		gen;
		uint64		index;
		int64		start;
		int64		stop;
		int			next = i;
		bool		raw_listed;
		int64		segment;
		List	   *pieces = NIL;
		int64		length;

		if (!parse_tail_key(state.objects[i].key + tlen, &gen, &index,
							&start, &stop))
		{
			i++;
			continue;
		}
		/* the keys of this generation: "<gen>/" after the tail prefix */
		while (next < end &&
			   strncmp(state.objects[next].key + tlen,
					   state.objects[i].key + tlen, 17) == 0)
			next++;
		segment = first_missing_segment(prefix, gen, &raw_listed);
		length = raw_listed ? 0 :
			tail_prefix(tprefix, i, next, gen, (uint64) segment, &pieces);
		if (length > 0)
		{
			Listed	   *v = palloc0(sizeof(Listed));

			v->key = psprintf("%sgenerations/%016llx/wal/%016llx.wal", prefix,
							  (unsigned long long) gen,
							  (unsigned long long) segment);
			v->size = length;
			v->pieces = pieces;
			added = lappend(added, v);
		}
		i = next;
	}
	if (added == NIL)
		return;
	n = state.nobjects;
	state.objects = repalloc(state.objects,
							 sizeof(Listed) * (n + list_length(added)));
	foreach(lc, added)
		state.objects[n++] = *(Listed *) lfirst(lc);
	qsort(state.objects, n, sizeof(Listed), cmp_listed);
	state.nobjects = n;
}

/*
 * Check (where bytes are in fd already) or write the bytes of the tail
 * object downloaded into the file pfd, bytes [piece->start, piece->end) of
 * the segment, into fd, which holds the segment's first *have bytes:
 * overlapping bytes that differ are damage (XX001) naming the object.
 */
static void
merge_piece(const char *ppath, int pfd, const TailPiece *piece, int fd,
			int64 *have)
{
	char	   *buf = palloc(CS_S3_TAIL_CHUNK);
	char	   *old = palloc(CS_S3_TAIL_CHUNK);

	for (int64 pos = piece->start; pos < piece->end;)
	{
		size_t		len = Min(piece->end - pos, CS_S3_TAIL_CHUNK);

		CHECK_FOR_INTERRUPTS();
		if (pos < *have)
			len = Min((int64) len, *have - pos);
		if (pg_pread(pfd, buf, len, pos - piece->start) != (ssize_t) len)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read the temporary file holding \"%s\": %m",
							ppath)));
		if (pos < *have)
		{
			if (pg_pread(fd, old, len, pos) != (ssize_t) len)
				ereport(ERROR,
						(errcode_for_file_access(),
						 errmsg("could not read the temporary file assembling \"%s\": %m",
								ppath)));
			for (size_t k = 0; k < len; k++)
				if (buf[k] != old[k])
					cs_file_damage(ppath, pos + (int64) k - piece->start,
								   "Its byte at segment offset %lld differs from that of an overlapping tail object of the same segment.",
								   (long long) (pos + (int64) k));
		}
		else if (pg_pwrite(fd, buf, len, pos) != (ssize_t) len)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not write the temporary file assembling \"%s\": %m",
							ppath)));
		pos += len;
	}
	*have = Max(*have, piece->end);
	pfree(buf);
	pfree(old);
}

/*
 * Make the segment o of path, listed as made of tail objects, in the file
 * fd: each piece downloaded (as any object: tried again, its length
 * checked, 58P01 when the uploader removed it since the listing) into a
 * temporary file of its own, then merged (merge_piece()).
 */
static void
download_tail(const char *path, Listed *o, int fd)
{
	int64	   *have = palloc0(sizeof(int64));	/* bytes in fd */
	ListCell   *lc;

	if (ftruncate(fd, 0) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not reset a temporary file for \"%s\": %m", path)));
	foreach(lc, o->pieces)
	{
		TailPiece  *piece = lfirst(lc);
		char	   *ppath = psprintf(CS_S3_SCHEME "%s/%s", state.config.bucket,
									 piece->key);
		char		local[MAXPGPATH];
		volatile int pfd;

		evict_for(state.prefetch_bytes + o->size + (piece->end - piece->start));
		pfd = create_cache_file(local);
		PG_TRY();
		{
			download(ppath, piece->key, piece->end - piece->start, pfd);
			merge_piece(ppath, pfd, piece, fd, have);
		}
		PG_CATCH();
		{
			(void) close(pfd);
			(void) unlink(local);
			PG_RE_THROW();
		}
		PG_END_TRY();
		(void) close(pfd);
		(void) unlink(local);
		pfree(ppath);
	}
	if (*have != o->size)
		cs_file_damage(path, *have, "The tail objects hold %lld bytes where the bucket's listing says %lld.",
					   (long long) *have, (long long) o->size);
	pfree(have);
}

/*
 * Download the object of path (listed, size bytes) into a cache file; a
 * segment made of tail objects is assembled from them.
 */
static Cached *
download_to_cache(const char *path, const char *key, int64 size)
{
	Cached	   *fresh;
	volatile int fd;
	MemoryContext old;

	evict_for(state.prefetch_bytes + size);
	old = MemoryContextSwitchTo(state.cxt);
	fresh = palloc0(sizeof(Cached));
	fresh->key = pstrdup(key);
	MemoryContextSwitchTo(old);
	fd = create_cache_file(fresh->path);
	PG_TRY();
	{
		Listed	   *o = find_object(key);

		if (o != NULL && o->pieces != NIL)
			download_tail(path, o, fd);
		else
			download(path, key, size, fd);
		if (close(fd) != 0)
		{
			fd = -1;
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not close temporary file \"%s\": %m",
							fresh->path)));
		}
		fd = -1;
	}
	PG_CATCH();
	{
		if (fd >= 0)
			close(fd);
		(void) unlink(fresh->path);
		PG_RE_THROW();
	}
	PG_END_TRY();
	fresh->size = size;
	cache_add(fresh);
	return fresh;
}

/* The listed object of path, or NULL (raising unless missing_ok). */
static Listed *
listed_file(const char *path, const char *key, bool missing_ok)
{
	CsStorageInfo info;

	key_info(key, &info);
	if (info.type == CS_STORAGE_DIR)
		cs_file_damage(path, 0, "It is not a regular file.");
	if (info.type == CS_STORAGE_MISSING)
	{
		if (missing_ok)
			return NULL;
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FILE),
				 errmsg("could not open file \"%s\": the replica has no such object",
						path)));
	}
	return find_object(key);
}

static int
s3_open_read(const char *path, bool missing_ok)
{
	const char *key = path_key(path);
	Listed	   *o = listed_file(path, key, missing_ok);
	const char *local;
	int			fd;

	if (o == NULL)
		return -1;
	local = cached_file(path, key, o->size);
	fd = open(local, O_RDONLY | O_CLOEXEC | PG_BINARY, 0);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open temporary file \"%s\" holding \"%s\": %m",
						local, path)));
	return fd;
}

/*
 * cs_storage_s3_prefetch_off
 *	  No segment object is prefetched for the rest of the current
 *	  statement: for a reader that passes over most segments unopened
 *	  (verify() with its record of objects found sound, verify_record.c),
 *	  where a prefetch would download bodies nobody reads.
 */
void
cs_storage_s3_prefetch_off(void)
{
	prefetch_off_statement = GetCurrentStatementStartTimestamp();
}

/*
 * cs_storage_s3_listed(path, size, etag) -> bool
 *	  Whether the statement's listing of the replica holds an object at
 *	  path (an "s3://" path of the configured replica); if so its size
 *	  (bytes) into *size and its ETag (quotes removed, NULL when the
 *	  listing gave none; valid until the statement ends) into *etag.  No
 *	  request but the statement's one listing.  Errors: as the listing
 *	  (see the file header); 22023 for a path outside the replica.
 */
bool
cs_storage_s3_listed(const char *path, int64 *size, const char **etag)
{
	const char *key = path_key(path);
	Listed	   *o;

	ensure_listed();
	o = find_object(key);
	if (o == NULL)
		return false;
	*size = o->size;
	*etag = o->etag;
	return true;
}

/* A whole small object into out, from memory; never cached. */
static bool
s3_read_small(const char *path, Size max_bytes, StringInfo out,
			  bool missing_ok)
{
	const char *key = path_key(path);
	Listed	   *o = listed_file(path, key, missing_ok);

	if (o == NULL)
		return false;
	if ((Size) o->size > max_bytes)
		cs_file_damage(path, 0, "It is %lld bytes long, more than the %zu bytes such a file can hold.",
					   (long long) o->size, max_bytes);
	for (int try = 0;; try++)
	{
		CsS3Response resp;
		CsS3Failure failure;

		cs_s3_get(state.client, key, max_bytes, &resp);
		cs_replica_count(CS_REPLICA_GET, 0);
		if (cs_s3_classify(&resp, psprintf("GET of key \"%s\"", key),
						   &failure) == CS_S3_OK)
		{
			resetStringInfo(out);
			appendBinaryStringInfo(out, resp.body, resp.body_len);
			return true;
		}
		if (resp.too_large)
			cs_file_damage(path, 0, "It grew past the %zu bytes such a file can hold.",
						   max_bytes);
		if (resp.status == 404 && missing_ok)
			return false;
		if (!try_again(&resp, &failure, try))
			raise_failure(path, &resp, &failure);
	}
}

/* CS_OPEN_READ only: the cached file as a transient file; -1 with errno. */
static int
s3_open(const char *path, int flags)
{
	const char *key;
	Listed	   *o;

	if ((flags & (CS_OPEN_WRITE | CS_OPEN_UPDATE | CS_OPEN_CREATE |
				  CS_OPEN_EXCL)) != 0)
	{
		errno = EROFS;
		return -1;
	}
	key = path_key(path);
	o = listed_file(path, key, true);
	if (o == NULL)
	{
		errno = ENOENT;
		return -1;
	}
	return OpenTransientFile(cached_file(path, key, o->size),
							 O_RDONLY | PG_BINARY);
}

/* Anything that would change the replica: refused. */
static void
read_only(const char *path)
{
	ereport(ERROR,
			(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
			 errmsg("\"%s\" is in the replica, which readers cannot change", path),
			 errhint("Only the uploader writes to the bucket.")));
}

static void
s3_write(const char *path, const char *dir, const char *data, size_t len)
{
	read_only(path);
}

static void
s3_rename(const char *from, const char *to, const char *dir)
{
	read_only(from);
}

static bool
s3_remove(const char *path, const char *dir)
{
	read_only(path);
	return false;
}

static void
s3_remove_tree(const char *path)
{
	read_only(path);
}

static void
s3_make_dir(const char *path)
{
	read_only(path);
}

static void
s3_sync(const char *path, bool isdir)
{
	read_only(path);
}

static int
s3_lock(const char *path, const char *content, StringInfo holder)
{
	read_only(path);
	return -1;
}

static int
s3_open_stream(const char *path, int flags)
{
	errno = EROFS;
	return -1;
}

static int
s3_rename_plain(const char *from, const char *to)
{
	return EROFS;
}

static int
s3_errno_path(const char *path)
{
	return EROFS;
}

static int
s3_truncate(const char *path, int64 size)
{
	return EROFS;
}

static bool
s3_try_remove_tree(const char *path)
{
	errno = EROFS;
	return false;
}

const CsStorageDriver cs_storage_s3 = {
	.name = "s3",
	.list = s3_list,
	.stat = s3_stat,
	.open_read = s3_open_read,
	.read_small = s3_read_small,
	.write = s3_write,
	.rename = s3_rename,
	.remove = s3_remove,
	.remove_tree = s3_remove_tree,
	.make_dir = s3_make_dir,
	.sync = s3_sync,
	.lock = s3_lock,
	.list_entries = s3_list_entries,
	.fstat = NULL,				/* descriptors are local files: posix's */
	.open = s3_open,
	.close = NULL,				/* likewise */
	.open_stream = s3_open_stream,
	.rename_plain = s3_rename_plain,
	.unlink = s3_errno_path,
	.truncate = s3_truncate,
	.remove_dir = s3_errno_path,
	.try_remove_tree = s3_try_remove_tree,
};
