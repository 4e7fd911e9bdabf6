/*-------------------------------------------------------------------------
 *
 * remote_retention.c
 *	  Retention of the replica's bucket (changestream.replica_retention),
 *	  run by the uploader after each pass (docs/DESIGN.md section 15).  It
 *	  follows the local rules of retention.c: every point of the window
 *	  [now - replica_retention, now] stays restorable from the bucket; an
 *	  older generation goes whole once its last write is older than the
 *	  window's start; of the newest generation, the snapshot at or before
 *	  the window's start and everything after it stay.
 *
 *	  What the bucket holds comes from one listing of the prefix's
 *	  generations per run (at most one run a minute, or per grace period
 *	  when shorter), not from the local archive: local retention may have
 *	  removed the files already.  The times and LSNs the rules need (a
 *	  snapshot's time, a segment's start LSN and last write) are learned
 *	  from the local files while they exist, at each pass, and kept in
 *	  "replica.retention" in the archive directory with the decisions; an
 *	  object whose facts were never learned is kept (the rules only ever
 *	  delete what a known fact proves unneeded).
 *
 *	  Readers on other machines hold no local pins, so a decision is made
 *	  visible first and acted on after changestream.replica_retention_grace:
 *	  a generation's new horizon is put as its "retention" object (readers
 *	  ignore what lies below it), and an old generation loses its identity
 *	  object first (readers ignore a generation without it).  Only a grace
 *	  period later are the objects below deleted, oldest first.  The
 *	  decision is durable in the state file before any object is deleted,
 *	  so a crash anywhere resumes the deletions at the next run, and the
 *	  bucket is readable at every moment.  The uploader asks
 *	  cs_remote_retention_removed() before it puts a file, so what retention
 *	  decided to delete is never put again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "storage/fd.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "archive/archive_layout.h"
#include "archive/retention_horizon.h"
#include "archive/segment_reader.h"
#include "archive/snapshot_reader.h"
#include "archive/storage.h"
#include "base/guc.h"
#include "replica/remote_retention.h"
#include "replica/replica_status.h"
#include "replica/s3_ops.h"

#define STATE_HEADER	"changestream remote retention 1 "
#define STATE_MAX		(64 * 1024 * 1024)
#define RUN_GAP_MS		(60 * 1000)	/* a run at least this often */

/* a fact learned from a local file */
typedef struct FactKey
{
	uint64		generation;
	int64		kind;			/* 'S' snapshot, 'W' segment */
	int64		key;			/* the snapshot's LSN, the segment's index */
} FactKey;

typedef struct Fact
{
	FactKey		k;
	int64		a;				/* snapshot: time; segment: start LSN */
	int64		b;				/* segment: last write (mtime) */
} Fact;

/* the decisions about one generation */
typedef struct GenState
{
	uint64		generation;		/* hash key */
	bool		has_applied;	/* objects below applied may be deleted */
	CsHorizon	applied;
	bool		has_pending;	/* published, waiting for the grace */
	CsHorizon	pending;
	TimestampTz pending_at;
	bool		dropping;		/* deleted whole: identity gone first */
	TimestampTz drop_at;
} GenState;

/* one object of the listing */
typedef struct RemoteObj
{
	char	   *key;			/* full key */
	int64		order;			/* index, LSN; sorts within its kind */
} RemoteObj;

/* one generation of the listing */
typedef struct RemoteGen
{
	uint64		generation;
	char	   *identity;		/* its key, NULL when not listed */
	char	   *horizon;		/* its key, NULL when not listed */
	List	   *segments;		/* of RemoteObj, by index */
	List	   *snapshots;		/* of RemoteObj, by LSN */
	List	   *others;			/* of RemoteObj: schema history, ... */
} RemoteGen;

static MemoryContext rr_cxt = NULL;
static char *state_dir = NULL;	/* in rr_cxt: the state's directory */
static char *state_store = NULL;	/* and the store it describes */
static HTAB *facts = NULL;
static HTAB *gens = NULL;

/*
 * When each archive tree's retention last ran (the uploader serves the
 * trees of several databases in turns, issue 34): one clock per
 * directory, in TopMemoryContext, so that one tree's run does not put
 * off another's.
 */
typedef struct RunClock
{
	char	   *directory;
	TimestampTz last_run;		/* 0: none since the start */
	int			last_retention_s;	/* the settings of that run */
	int			last_grace_s;
} RunClock;

static List *clocks = NIL;

/* The clock of directory, made on first use. */
static RunClock *
clock_of(const char *directory)
{
	ListCell   *lc;
	RunClock   *c;
	MemoryContext old;

	foreach(lc, clocks)
	{
		c = lfirst(lc);
		if (strcmp(c->directory, directory) == 0)
			return c;
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	c = palloc0(sizeof(RunClock));
	c->directory = pstrdup(directory);
	c->last_retention_s = -1;
	c->last_grace_s = -1;
	clocks = lappend(clocks, c);
	MemoryContextSwitchTo(old);
	return c;
}

/*
 * cs_remote_retention_s() -> seconds
 *	  The retention of the bucket in force: changestream.replica_retention,
 *	  or changestream.retention when it is -1 (the default); 0 keeps all.
 */
int
cs_remote_retention_s(void)
{
	return cs_replica_retention_s < 0 ? cs_retention_s : cs_replica_retention_s;
}

/* Parse one line of the state file into the tables; false if malformed. */
static bool
parse_state_line(const char *line)
{
	unsigned long long g,
				x,
				y,
				z,
				w;
	long long	a,
				b;
	bool		found;

	if (sscanf(line, "S %llx %llx %lld", &g, &x, &a) == 3)
	{
		FactKey		k = {g, 'S', (int64) x};
		Fact	   *f = hash_search(facts, &k, HASH_ENTER, &found);

		f->a = a;
		return true;
	}
	if (sscanf(line, "W %llx %llx %llx %lld", &g, &x, &y, &b) == 4)
	{
		FactKey		k = {g, 'W', (int64) x};
		Fact	   *f = hash_search(facts, &k, HASH_ENTER, &found);

		f->a = (int64) y;
		f->b = b;
		return true;
	}
	if (sscanf(line, "A %llx %llx %llx %lld", &g, &x, &y, &a) == 4 ||
		sscanf(line, "P %llx %llx %llx %lld %lld", &g, &z, &w, &a, &b) == 5)
	{
		uint64		gen = g;
		GenState   *gs = hash_search(gens, &gen, HASH_ENTER, &found);

		if (!found)
			memset(((char *) gs) + sizeof(uint64), 0,
				   sizeof(GenState) - sizeof(uint64));
		if (line[0] == 'A')
		{
			gs->has_applied = true;
			gs->applied.first_segment = (int64) x;
			gs->applied.snapshot_lsn = (XLogRecPtr) y;
			gs->applied.snapshot_time = a;
		}
		else
		{
			gs->has_pending = true;
			gs->pending.first_segment = (int64) z;
			gs->pending.snapshot_lsn = (XLogRecPtr) w;
			gs->pending.snapshot_time = a;
			gs->pending_at = b;
		}
		return true;
	}
	if (sscanf(line, "G %llx %lld", &g, &a) == 2)
	{
		uint64		gen = g;
		GenState   *gs = hash_search(gens, &gen, HASH_ENTER, &found);

		if (!found)
			memset(((char *) gs) + sizeof(uint64), 0,
				   sizeof(GenState) - sizeof(uint64));
		gs->dropping = true;
		gs->drop_at = a;
		return true;
	}
	return false;
}

/*
 * Load the state of directory for store (once; again when either
 * changes).  A state of another store, bucket or prefix is not used.
 */
static void
load_state(const char *directory, const char *store)
{
	MemoryContext old;
	HASHCTL		ctl;
	StringInfoData text;
	char	   *path;
	char	   *line;
	char	   *next;

	if (state_dir != NULL && strcmp(state_dir, directory) == 0 &&
		strcmp(state_store, store) == 0)
		return;
	if (rr_cxt == NULL)
		rr_cxt = AllocSetContextCreate(TopMemoryContext,
									   "changestream remote retention",
									   ALLOCSET_DEFAULT_SIZES);
	MemoryContextReset(rr_cxt);
	state_dir = NULL;
	old = MemoryContextSwitchTo(rr_cxt);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(FactKey);
	ctl.entrysize = sizeof(Fact);
	ctl.hcxt = rr_cxt;
	facts = hash_create("changestream remote retention facts", 256, &ctl,
						HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(GenState);
	gens = hash_create("changestream remote retention generations", 16, &ctl,
					   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	path = cs_replica_retention_path(directory);
	initStringInfo(&text);
	if (cs_read_small_file(path, STATE_MAX, &text, true) &&
		strncmp(text.data, STATE_HEADER, strlen(STATE_HEADER)) == 0)
	{
		line = text.data;
		next = strchr(line, '\n');
		if (next != NULL &&
			(size_t) (next - line) == strlen(STATE_HEADER) + strlen(store) &&
			strncmp(line + strlen(STATE_HEADER), store, strlen(store)) == 0)
		{
			for (line = next + 1; *line != '\0'; line = next)
			{
				next = strchr(line, '\n');
				if (next == NULL)
					cs_file_damage(path, line - text.data,
								   "The last line has no end.");
				*next++ = '\0';
				if (!parse_state_line(line))
					cs_file_damage(path, line - text.data,
								   "The line does not parse.");
			}
		}
	}
	else if (text.len > 0)
		cs_file_damage(path, 0, "It does not begin with \"%s\".", STATE_HEADER);
	state_store = pstrdup(store);
	state_dir = pstrdup(directory);
	MemoryContextSwitchTo(old);
}

/* Write the state durably: the facts, then the decisions. */
static void
save_state(void)
{
	StringInfoData text;
	HASH_SEQ_STATUS seq;
	Fact	   *f;
	GenState   *gs;

	initStringInfo(&text);
	appendStringInfo(&text, STATE_HEADER "%s\n", state_store);
	hash_seq_init(&seq, facts);
	while ((f = hash_seq_search(&seq)) != NULL)
	{
		if (f->k.kind == 'S')
			appendStringInfo(&text, "S %llx %llx %lld\n",
							 (unsigned long long) f->k.generation,
							 (unsigned long long) f->k.key, (long long) f->a);
		else
			appendStringInfo(&text, "W %llx %llx %llx %lld\n",
							 (unsigned long long) f->k.generation,
							 (unsigned long long) f->k.key,
							 (unsigned long long) f->a, (long long) f->b);
	}
	hash_seq_init(&seq, gens);
	while ((gs = hash_seq_search(&seq)) != NULL)
	{
		if (gs->has_applied)
			appendStringInfo(&text, "A %llx %llx %llx %lld\n",
							 (unsigned long long) gs->generation,
							 (unsigned long long) gs->applied.first_segment,
							 (unsigned long long) gs->applied.snapshot_lsn,
							 (long long) gs->applied.snapshot_time);
		if (gs->has_pending)
			appendStringInfo(&text, "P %llx %llx %llx %lld %lld\n",
							 (unsigned long long) gs->generation,
							 (unsigned long long) gs->pending.first_segment,
							 (unsigned long long) gs->pending.snapshot_lsn,
							 (long long) gs->pending.snapshot_time,
							 (long long) gs->pending_at);
		if (gs->dropping)
			appendStringInfo(&text, "G %llx %lld\n",
							 (unsigned long long) gs->generation,
							 (long long) gs->drop_at);
	}
	cs_write_file_durably(cs_replica_retention_path(state_dir), state_dir, text.data,
						  text.len);
	pfree(text.data);
}

static Fact *
find_fact(uint64 generation, char kind, int64 key)
{
	FactKey		k;

	memset(&k, 0, sizeof(k));
	k.generation = generation;
	k.kind = kind;
	k.key = key;
	return hash_search(facts, &k, HASH_FIND, NULL);
}

static Fact *
add_fact(uint64 generation, char kind, int64 key)
{
	FactKey		k;
	bool		found;

	memset(&k, 0, sizeof(k));
	k.generation = generation;
	k.kind = kind;
	k.key = key;
	return hash_search(facts, &k, HASH_ENTER, &found);
}

static GenState *
find_gen(uint64 generation, bool create)
{
	bool		found;
	GenState   *gs = hash_search(gens, &generation,
								 create ? HASH_ENTER : HASH_FIND, &found);

	if (gs != NULL && create && !found)
		memset(((char *) gs) + sizeof(uint64), 0,
			   sizeof(GenState) - sizeof(uint64));
	return gs;
}

/* The horizon readers of the bucket see for gs, if any. */
static const CsHorizon *
visible_horizon(const GenState *gs)
{
	if (gs == NULL)
		return NULL;
	if (gs->has_pending)
		return &gs->pending;
	if (gs->has_applied)
		return &gs->applied;
	return NULL;
}

/* A palloc'd copy of a generation number, for a list. */
static uint64 *
copy_gen(uint64 generation)
{
	uint64	   *g = palloc(sizeof(uint64));

	*g = generation;
	return g;
}

/*
 * cs_remote_retention_forget(directory, store)
 *	  Forget every decision about store's bucket (durably): the uploader
 *	  found its prefix new or emptied, so what retention deleted there is to
 *	  be put again like the rest.  The learned facts stay true.
 */
void
cs_remote_retention_forget(const char *directory, const char *store)
{
	HASH_SEQ_STATUS seq;
	GenState   *gs;
	List	   *all = NIL;
	ListCell   *lc;

	load_state(directory, store);
	hash_seq_init(&seq, gens);
	while ((gs = hash_seq_search(&seq)) != NULL)
		all = lappend(all, copy_gen(gs->generation));
	foreach(lc, all)
		hash_search(gens, lfirst(lc), HASH_REMOVE, NULL);
	if (all != NIL)
		save_state();
	clock_of(directory)->last_run = 0;
}

/*
 * cs_remote_retention_removed(directory, store, name) -> bool
 *	  Has remote retention decided to delete the object name (relative to
 *	  the prefix) of store's bucket: a generation deleted whole, or a
 *	  segment or snapshot below the horizon published for its generation?
 *	  The uploader then never puts it (again).  Loads the state file of
 *	  directory the first time.
 */
bool
cs_remote_retention_removed(const char *directory, const char *store,
							const char *name)
{
	uint64		generation;
	CsGenerationFileKind kind;
	int64		order;
	GenState   *gs;
	const CsHorizon *h;

	if (store == NULL)
		return false;			/* no bucket yet: nothing decided */
	load_state(directory, store);
	if (!cs_parse_generation_file(name, &generation, &kind, &order))
		return false;
	gs = find_gen(generation, false);
	if (gs != NULL && gs->dropping)
		return true;
	h = visible_horizon(gs);
	if (h == NULL)
		return false;
	if (kind == CS_GENFILE_SEGMENT)
		return order < h->first_segment;
	if (kind == CS_GENFILE_SNAPSHOT)
		return order < (int64) h->snapshot_lsn;
	return false;
}

/*
 * Learn the fact of one local file (a segment when sf is set, else the
 * snapshot at path); returns false when the file is gone.  A damaged file
 * (XX001) is logged and learned as unknown for ever (kind's fact with
 * a = PG_INT64_MAX: never below a window, so never a horizon, and never
 * a start at or before one), so that it does not stop the uploader; the
 * files its reader held are closed (the uploader holds none meanwhile).
 */
static bool
learn_one(uint64 generation, CsSegmentFile *sf, const char *path,
		  XLogRecPtr lsn)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool gone = false;
	volatile int64 a = PG_INT64_MAX;
	volatile int64 b = 0;

	PG_TRY();
	{
		if (sf != NULL)
		{
			CsSegmentReader *r = cs_reader_open(sf->path, sf->compressed, true);

			if (r == NULL)
				gone = true;	/* compressed or deleted meanwhile */
			else
			{
				a = (int64) cs_reader_header(r)->start_lsn;
				b = sf->mtime;
				cs_reader_close(r);
			}
		}
		else
		{
			CsSnapshotReader *r = cs_snapreader_open(path);

			a = cs_snapreader_time(r);
			cs_snapreader_close(r);
		}
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_DATA_CORRUPTED)
			PG_RE_THROW();
		FlushErrorState();
		AtEOXact_Files(false);
		ereport(LOG,
				(errmsg("changestream uploader: remote retention keeps what depends on a damaged local file: %s",
						edata->message)));
		FreeErrorData(edata);
		a = PG_INT64_MAX;
		b = PG_INT64_MAX;
	}
	PG_END_TRY();
	if (gone)
		return false;
	if (sf != NULL)
	{
		Fact	   *f = add_fact(generation, 'W', sf->index);

		f->a = a;
		f->b = b;
	}
	else
		add_fact(generation, 'S', (int64) lsn)->a = a;
	return true;
}

/*
 * Learn the facts of the local files not learned yet: each snapshot's
 * time, each finished segment's start LSN and last write.  The active
 * segment (the newest generation's raw last one) changes: not learned.
 * Returns whether anything was learned.
 */
static bool
learn(const char *directory)
{
	List	   *local = cs_list_generations(directory);
	ListCell   *g;
	bool		learned = false;

	foreach(g, local)
	{
		uint64		gen = *(uint64 *) lfirst(g);
		bool		newest = lnext(local, g) == NULL;
		GenState   *gs = find_gen(gen, false);
		const CsHorizon *h = visible_horizon(gs);
		List	   *segments;
		List	   *names;
		char	   *snapdir;
		ListCell   *lc;

		if (gs != NULL && gs->dropping)
			continue;			/* gone from the bucket: nothing to learn */
		segments = cs_list_segments(directory, gen);
		names = cs_list_snapshots(directory, gen);
		snapdir = cs_snapshots_dir_path(directory, gen);
		foreach(lc, segments)
		{
			CsSegmentFile *sf = lfirst(lc);

			if ((!sf->compressed && newest) ||
				(h != NULL && sf->index < h->first_segment) ||
				find_fact(gen, 'W', sf->index) != NULL)
				continue;
			learned |= learn_one(gen, sf, NULL, InvalidXLogRecPtr);
		}
		foreach(lc, names)
		{
			XLogRecPtr	lsn;
			CsStorageInfo info;
			char	   *path = cs_file_in(snapdir, lfirst(lc));

			if (!cs_snapshot_name_lsn(lfirst(lc), &lsn) ||
				(h != NULL && lsn < h->snapshot_lsn) ||
				find_fact(gen, 'S', (int64) lsn) != NULL ||
				cs_storage_stat(path, false, &info) != 0 ||
				info.type != CS_STORAGE_FILE)
				continue;
			learned |= learn_one(gen, NULL, path, lsn);
		}
	}
	return learned;
}

/* Order RemoteObjs by their order field. */
static int
cmp_obj(const ListCell *a, const ListCell *b)
{
	int64		x = ((RemoteObj *) lfirst(a))->order;
	int64		y = ((RemoteObj *) lfirst(b))->order;

	return x < y ? -1 : x > y ? 1 : 0;
}

static RemoteObj *
make_obj(const char *key, int64 order)
{
	RemoteObj  *o = palloc(sizeof(RemoteObj));

	o->key = pstrdup(key);
	o->order = order;
	return o;
}

/* Sort the listing's objects into generations, oldest first. */
static List *
sort_listing(List *objects, size_t plen)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, objects)
	{
		CsS3Object *o = lfirst(lc);
		uint64		generation;
		CsGenerationFileKind kind;
		int64		order;
		RemoteGen  *rg = NULL;
		ListCell   *r;

		if (strlen(o->key) <= plen ||
			!cs_parse_generation_file(o->key + plen, &generation, &kind, &order))
			continue;
		foreach(r, result)
		{
			if (((RemoteGen *) lfirst(r))->generation == generation)
				rg = lfirst(r);
		}
		if (rg == NULL)
		{
			rg = palloc0(sizeof(RemoteGen));
			rg->generation = generation;
			result = lappend(result, rg);
		}
		if (kind == CS_GENFILE_IDENTITY)
			rg->identity = pstrdup(o->key);
		else if (kind == CS_GENFILE_HORIZON)
			rg->horizon = pstrdup(o->key);
		else if (kind == CS_GENFILE_SEGMENT)
			rg->segments = lappend(rg->segments, make_obj(o->key, order));
		else if (kind == CS_GENFILE_SNAPSHOT)
			rg->snapshots = lappend(rg->snapshots, make_obj(o->key, order));
		else
			rg->others = lappend(rg->others, make_obj(o->key, 0));
	}
	foreach(lc, result)
	{
		RemoteGen  *rg = lfirst(lc);

		list_sort(rg->segments, cmp_obj);
		list_sort(rg->snapshots, cmp_obj);
	}
	return result;
}

/* A failed request as the step's failure. */
static bool
request_failed(const CsS3Response *resp, const char *what,
			   CsRemoteFailure *failure)
{
	CsS3Failure f;
	CsS3ErrorClass class = cs_s3_explain(resp, what, &f);

	failure->retry = class == CS_S3_RETRYABLE;
	failure->sqlerrcode = cs_s3_class_sqlstate(class);
	failure->message = f.message;
	failure->hint = f.hint;
	return false;
}

/* DELETE one object (gone already is fine); false with *failure. */
static bool
delete_object(CsS3Client *client, const char *key, CsRemoteFailure *failure)
{
	CsS3Response resp;

	cs_s3_delete(client, key, &resp);
	cs_replica_count(CS_REPLICA_DELETE, 0);
	if ((resp.status == 204 || resp.status == 200 || resp.status == 404) &&
		!(resp.status != 404 && resp.error_code))
		return true;
	return request_failed(&resp, psprintf("DELETE of key \"%s\"", key),
						  failure);
}

/* DELETE the objects of list whose order is below limit, oldest first. */
static bool
delete_below(CsS3Client *client, List *objs, int64 limit,
			 CsRemoteFailure *failure)
{
	ListCell   *lc;

	foreach(lc, objs)
	{
		RemoteObj  *o = lfirst(lc);

		if (o->order >= limit)
			break;
		if (!delete_object(client, o->key, failure))
			return false;
	}
	return true;
}

/* Drop the facts of generation (all, or those below horizon h). */
static void
prune_facts(uint64 generation, const CsHorizon *h)
{
	HASH_SEQ_STATUS seq;
	Fact	   *f;
	List	   *drop = NIL;
	ListCell   *lc;

	hash_seq_init(&seq, facts);
	while ((f = hash_seq_search(&seq)) != NULL)
	{
		if (f->k.generation != generation)
			continue;
		if (h == NULL ||
			(f->k.kind == 'S' && f->k.key < (int64) h->snapshot_lsn) ||
			(f->k.kind == 'W' && f->k.key < h->first_segment))
			drop = lappend(drop, &f->k);
	}
	foreach(lc, drop)
	{
		FactKey		k = *(FactKey *) lfirst(lc);

		hash_search(facts, &k, HASH_REMOVE, NULL);
	}
}

/*
 * A generation decided to go whole: once the grace has passed since its
 * identity went, the rest goes, snapshots and segments oldest first, its
 * horizon last.  The decision is forgotten once neither the bucket nor
 * the local archive has the generation (forget_gone()).
 */
static bool
drop_generation(CsS3Client *client, RemoteGen *rg, GenState *gs,
				TimestampTz now, int grace_s, CsRemoteFailure *failure)
{
	ListCell   *lc;

	if (rg->identity != NULL &&
		!delete_object(client, rg->identity, failure))
		return false;
	if (now < gs->drop_at + (int64) grace_s * USECS_PER_SEC)
		return true;
	if (!delete_below(client, rg->snapshots, PG_INT64_MAX, failure) ||
		!delete_below(client, rg->segments, PG_INT64_MAX, failure))
		return false;
	foreach(lc, rg->others)
	{
		if (!delete_object(client, ((RemoteObj *) lfirst(lc))->key, failure))
			return false;
	}
	if (rg->horizon != NULL && !delete_object(client, rg->horizon, failure))
		return false;
	ereport(LOG,
			(errmsg("changestream uploader: remote retention deleted generation %016llx from the bucket",
					(unsigned long long) rg->generation)));
	/* the decision stays while the local archive has it: never put again */
	prune_facts(rg->generation, NULL);
	save_state();
	return true;
}

/*
 * The last write of an older generation in the bucket: the learned last
 * write of its newest segment there; false when not known.
 */
static bool
last_write(RemoteGen *rg, TimestampTz *when)
{
	Fact	   *f;

	if (rg->segments == NIL)
		return false;
	f = find_fact(rg->generation, 'W', ((RemoteObj *) llast(rg->segments))->order);
	if (f == NULL)
		return false;
	*when = f->b;
	return true;
}

/*
 * The horizon the window allows for the newest generation, from what the
 * bucket holds and the learned facts: the newest snapshot whose time is at
 * or before the window's start, and the newest segment known to start at or
 * before that snapshot's LSN (every segment before it ends before it).
 * False when no snapshot qualifies.
 */
static bool
choose(RemoteGen *rg, TimestampTz window_start, CsHorizon *h)
{
	ListCell   *lc;
	bool		found = false;

	foreach(lc, rg->snapshots)
	{
		RemoteObj  *o = lfirst(lc);
		Fact	   *f = find_fact(rg->generation, 'S', o->order);

		if (f == NULL || f->a == PG_INT64_MAX)
			continue;			/* unknown: a later known one may qualify */
		if (f->a > window_start)
			break;
		h->snapshot_lsn = (XLogRecPtr) o->order;
		h->snapshot_time = f->a;
		found = true;
	}
	if (!found || rg->segments == NIL)
		return false;
	h->first_segment = ((RemoteObj *) linitial(rg->segments))->order;
	foreach(lc, rg->segments)
	{
		RemoteObj  *o = lfirst(lc);
		Fact	   *f = find_fact(rg->generation, 'W', o->order);

		if (f != NULL && (XLogRecPtr) f->a <= h->snapshot_lsn)
			h->first_segment = o->order;
	}
	return true;
}

/*
 * The newest generation: a pending horizon whose grace has passed becomes
 * the applied one; without a pending one, a horizon that moves is put as
 * the generation's "retention" object and becomes pending; the objects
 * below the applied horizon are deleted, snapshots then segments, oldest
 * first.
 */
static bool
trim_generation(CsS3Client *client, const CsS3Config *config,
				const char *directory, RemoteGen *rg, TimestampTz now,
				TimestampTz window_start, int grace_s,
				CsRemoteFailure *failure)
{
	GenState   *gs = find_gen(rg->generation, false);
	CsHorizon	h;

	if (gs != NULL && gs->has_pending &&
		now >= gs->pending_at + (int64) grace_s * USECS_PER_SEC)
	{
		gs->applied = gs->pending;
		gs->has_applied = true;
		gs->has_pending = false;
		save_state();
	}
	memset(&h, 0, sizeof(h));
	if ((gs == NULL || !gs->has_pending) &&
		choose(rg, window_start, &h))
	{
		const CsHorizon *v = visible_horizon(gs);
		bool		moves;

		if (v != NULL)
		{
			moves = h.first_segment > v->first_segment ||
				h.snapshot_lsn > v->snapshot_lsn;
			h.first_segment = Max(h.first_segment, v->first_segment);
			if (h.snapshot_lsn < v->snapshot_lsn)
			{
				h.snapshot_lsn = v->snapshot_lsn;
				h.snapshot_time = v->snapshot_time;
			}
		}
		else
			moves = (rg->segments != NIL &&
					 ((RemoteObj *) linitial(rg->segments))->order < h.first_segment) ||
				(rg->snapshots != NIL &&
				 ((RemoteObj *) linitial(rg->snapshots))->order < (int64) h.snapshot_lsn);
		if (moves)
		{
			char	   *text = cs_horizon_text(&h);
			char	   *key = cs_s3_object_key(config,
											   cs_archive_relative_name(directory,
																		cs_horizon_path(directory, rg->generation)));
			CsS3Response resp;

			cs_s3_put(client, key, text, strlen(text), false, &resp);
			cs_replica_count(CS_REPLICA_PUT, strlen(text));
			if (resp.status != 200 || resp.error_code)
				return request_failed(&resp, psprintf("PUT of key \"%s\"", key),
									  failure);
			gs = find_gen(rg->generation, true);
			gs->pending = h;
			gs->has_pending = true;
			gs->pending_at = now;
			save_state();
		}
	}
	if (gs == NULL || !gs->has_applied)
		return true;
	if (!delete_below(client, rg->snapshots, (int64) gs->applied.snapshot_lsn,
					  failure) ||
		!delete_below(client, rg->segments, gs->applied.first_segment,
					  failure))
		return false;
	prune_facts(rg->generation, &gs->applied);
	return true;
}

/* Does the listing (remote) or the local archive hold generation? */
static bool
held(uint64 generation, List *remote, List *local)
{
	ListCell   *lc;

	foreach(lc, remote)
	{
		if (((RemoteGen *) lfirst(lc))->generation == generation)
			return true;
	}
	foreach(lc, local)
	{
		if (*(uint64 *) lfirst(lc) == generation)
			return true;
	}
	return false;
}

/*
 * Forget the facts and decisions of the generations that neither the
 * bucket's listing (remote) nor the local archive holds any more.
 */
static void
forget_gone(const char *directory, List *remote)
{
	List	   *local = cs_list_generations(directory);
	HASH_SEQ_STATUS seq;
	GenState   *gs;
	Fact	   *f;
	List	   *gone = NIL;
	ListCell   *lc;

	hash_seq_init(&seq, gens);
	while ((gs = hash_seq_search(&seq)) != NULL)
	{
		if (!held(gs->generation, remote, local))
			gone = lappend(gone, copy_gen(gs->generation));
	}
	hash_seq_init(&seq, facts);
	while ((f = hash_seq_search(&seq)) != NULL)
	{
		bool		listed = false;

		foreach(lc, gone)
			listed |= *(uint64 *) lfirst(lc) == f->k.generation;
		if (!listed && !held(f->k.generation, remote, local))
			gone = lappend(gone, copy_gen(f->k.generation));
	}
	foreach(lc, gone)
	{
		uint64		g = *(uint64 *) lfirst(lc);

		prune_facts(g, NULL);
		hash_search(gens, &g, HASH_REMOVE, NULL);
	}
	if (gone != NIL)
		save_state();
}

/* One run over the bucket's listing; false with *failure. */
static bool
run(CsS3Client *client, const CsS3Config *config, const char *directory,
	TimestampTz now, int retention_s, CsRemoteFailure *failure)
{
	char	   *root = cs_s3_object_key(config, "");
	char	   *prefix = cs_s3_object_key(config,
										  psprintf("%s/", cs_archive_relative_name(directory,
																				   cs_generations_dir_path(directory))));
	List	   *objects = NIL;
	List	   *remote;
	CsS3Response resp;
	char	   *bad = NULL;
	ListCell   *lc;
	uint64		current = 0;
	bool		any = false;
	int			grace_s = cs_replica_retention_grace_s;
	TimestampTz window_start = now - (int64) retention_s * USECS_PER_SEC;

	if (!cs_s3_list(client, prefix, NULL, 0, &objects, &resp, &bad))
	{
		cs_replica_count(CS_REPLICA_LIST, 0);
		if (bad != NULL)
		{
			failure->retry = true;
			failure->sqlerrcode = ERRCODE_PROTOCOL_VIOLATION;
			failure->message = bad;
			failure->hint = NULL;
			return false;
		}
		return request_failed(&resp, psprintf("listing of prefix \"%s\"", prefix),
							  failure);
	}
	cs_replica_count(CS_REPLICA_LIST, 0);
	remote = sort_listing(objects, strlen(root));
	forget_gone(directory, remote);
	foreach(lc, remote)
	{
		RemoteGen  *rg = lfirst(lc);
		GenState   *gs = find_gen(rg->generation, false);

		if (rg->identity != NULL && (gs == NULL || !gs->dropping) &&
			(!any || rg->generation > current))
		{
			current = rg->generation;
			any = true;
		}
	}
	if (!any)
		return true;
	foreach(lc, remote)
	{
		RemoteGen  *rg = lfirst(lc);
		GenState   *gs = find_gen(rg->generation, false);
		TimestampTz last;

		if (gs != NULL && gs->dropping)
		{
			if (!drop_generation(client, rg, gs, now, grace_s, failure))
				return false;
		}
		else if (rg->generation < current && rg->identity != NULL)
		{
			/* up whole (its last segment too), and written before the window */
			if (!cs_replica_generation_up(rg->generation) ||
				!last_write(rg, &last) || last >= window_start)
				continue;
			/* durable first: a crash then resumes the deletion */
			gs = find_gen(rg->generation, true);
			gs->dropping = true;
			gs->drop_at = now;
			save_state();
			if (!drop_generation(client, rg, gs, now, grace_s, failure))
				return false;
		}
		else if (rg->generation == current)
		{
			if (!trim_generation(client, config, directory, rg, now,
								 window_start, grace_s, failure))
				return false;
		}
	}
	return true;
}

/*
 * cs_remote_retention_step(client, config, directory, failure) -> bool
 *	  The uploader's call after each pass that reached the bucket: learns
 *	  the facts of directory's new local files, and at most once a minute
 *	  (or per changestream.replica_retention_grace when shorter) applies
 *	  the bucket's retention through client (section 15).  Returns false
 *	  with *failure filled when a request failed (the uploader backs off
 *	  and calls again); what a run did before it is durable.  Raises an
 *	  error when a local file cannot be read or the state file is damaged.
 */
bool
cs_remote_retention_step(CsS3Client *client, const CsS3Config *config,
						 const char *directory, CsRemoteFailure *failure)
{
	int			retention_s = cs_remote_retention_s();
	TimestampTz now = GetCurrentTimestamp();
	RunClock   *c = clock_of(directory);
	bool		ok;

	load_state(directory, config->store);
	if (retention_s <= 0)
		return true;
	if (learn(directory))
		save_state();
	/* a reload that changes the settings acts at once */
	if (c->last_run != 0 && retention_s == c->last_retention_s &&
		cs_replica_retention_grace_s == c->last_grace_s &&
		now < TimestampTzPlusMilliseconds(c->last_run,
										  Min(RUN_GAP_MS, cs_replica_retention_grace_s * 1000)))
		return true;
	ok = run(client, config, directory, now, retention_s, failure);
	c->last_run = ok ? now : 0;
	c->last_retention_s = retention_s;
	c->last_grace_s = cs_replica_retention_grace_s;
	return ok;
}
