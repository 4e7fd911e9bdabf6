/*-------------------------------------------------------------------------
 *
 * reader_pins.c
 *	  Readers' pins on the archive, in shared memory: a backend that reads
 *	  a generation (changes(), restore(), verify(), wal_records(),
 *	  snapshots(), generations() ...) registers (generation, oldest LSN it
 *	  may read) before it lists any file, and retention deletes nothing
 *	  such a pin needs (retention rule 5 of docs/DESIGN.md).
 *
 *	  A pin starts whole (the generation from its current horizon on)
 *	  while the reader lists files, and moves to the reader's position as
 *	  it reads (cs_pin_advance(): the start LSN of the segment it is at),
 *	  so that a reader holds back only what it is reading or may still
 *	  read.  The pins of a data reader (changes(), wal_records(),
 *	  restore()) last until the end of its transaction at the position it
 *	  reached; those of a call that only lists or reports (generations(),
 *	  generation_stats(), wal_segments(), snapshots(), verify()) end with
 *	  the call (cs_pin_call_begin(), cs_pin_call_end()).  A transaction
 *	  callback releases every pin at commit or abort, so an error never
 *	  leaves one behind, and a before_shmem_exit callback releases them
 *	  when the backend exits.
 *
 *	  One LWLock guards the pins.  Retention holds it exclusively while it
 *	  reads the pins and writes a generation's new horizon; a reader pins
 *	  under it and reads the horizon after, so it either is seen by
 *	  retention or sees the horizon retention wrote.  The retention
 *	  figures status() shows live here too, with what holds retention
 *	  back (since when, how many bytes, which backend).
 *
 * Sources: RegisterXactCallback() (access/xact.h) as contrib/postgres_fdw
 * releases its connections; RequestNamedLWLockTranche() as in
 * contrib/pg_stat_statements.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "archive/reader_pins.h"

#define CS_PINS_TRANCHE		"changestream pins"
#define PINS_PER_BACKEND	2

typedef struct CsPin
{
	pid_t		pid;			/* 0: free */
	uint64		generation;		/* CS_PIN_ALL_GENERATIONS: every one */
	XLogRecPtr	oldest_lsn;		/* InvalidXLogRecPtr: the whole generation */
} CsPin;

typedef struct CsPins
{
	LWLock	   *lock;
	TimestampTz last_retention_at;
	int64		retention_freed_bytes;
	TimestampTz held_since;		/* 0: retention is not held back */
	int64		held_bytes;		/* bytes the last run could not free */
	pid_t		held_pid;		/* the backend whose pin held it back */
	int			npins;
	CsPin		pins[FLEXIBLE_ARRAY_MEMBER];
} CsPins;

/* A pin of this backend, as saved by cs_pin_call_begin(). */
typedef struct SavedPin
{
	uint64		generation;
	XLogRecPtr	oldest_lsn;
} SavedPin;

static CsPins *cs_pins = NULL;
static int	my_pins = 0;		/* pins this backend holds */
static bool callbacks_registered = false;
static int	reads_in_progress = 0;	/* readers open in this backend */
static int	call_depth = 0;		/* cs_pin_call_begin() nesting */
static int	nsaved = 0;
static SavedPin saved[PINS_PER_BACKEND];

static int
pin_slots(void)
{
	return MaxBackends * PINS_PER_BACKEND;
}

/*
 * cs_pins_shmem_request
 *	  Reserve the shared memory of the pins (two per backend) and the
 *	  retention figures, and the pins' LWLock.  Runs from shmem_request_hook (PG15+:
 *	  MaxBackends is known), through changestream.c.
 */
void
cs_pins_shmem_request(void)
{
	RequestNamedLWLockTranche(CS_PINS_TRANCHE, 1);
	RequestAddinShmemSpace(MAXALIGN(add_size(offsetof(CsPins, pins),
											 mul_size(pin_slots(), sizeof(CsPin)))));
}

/*
 * cs_pins_shmem_init
 *	  Attach to (and on first use initialise) the pins.  Runs from
 *	  shmem_startup_hook, through changestream.c.
 */
void
cs_pins_shmem_init(void)
{
	bool		found;
	Size		size = add_size(offsetof(CsPins, pins),
								mul_size(pin_slots(), sizeof(CsPin)));

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	cs_pins = ShmemInitStruct("changestream pins", size, &found);
	if (!found)
	{
		memset(cs_pins, 0, size);
		cs_pins->npins = pin_slots();
		cs_pins->lock = &(GetNamedLWLockTranche(CS_PINS_TRANCHE))->lock;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Release every pin this backend holds. */
static void
release_my_pins(void)
{
	if (my_pins == 0 || cs_pins == NULL)
		return;
	LWLockAcquire(cs_pins->lock, LW_EXCLUSIVE);
	for (int i = 0; i < cs_pins->npins; i++)
		if (cs_pins->pins[i].pid == MyProcPid)
			cs_pins->pins[i].pid = 0;
	LWLockRelease(cs_pins->lock);
	my_pins = 0;
}

/* Release every pin and forget the calls and readers in progress. */
static void
end_of_transaction(void)
{
	release_my_pins();
	reads_in_progress = 0;
	call_depth = 0;
	nsaved = 0;
}

static void
pins_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			end_of_transaction();
			break;
		default:
			break;
	}
}

static void
pins_exit_callback(int code, Datum arg)
{
	end_of_transaction();
}

static void
register_callbacks(void)
{
	if (callbacks_registered)
		return;
	RegisterXactCallback(pins_xact_callback, NULL);
	before_shmem_exit(pins_exit_callback, (Datum) 0);
	callbacks_registered = true;
}

/*
 * cs_pin_read
 *	  Pin what this backend is about to read: generation (a uint64 name,
 *	  or CS_PIN_ALL_GENERATIONS) from oldest_lsn on (InvalidXLogRecPtr: the
 *	  whole generation).  Call it before listing any file of it.  The pin
 *	  lasts until the end of the current transaction.  A backend keeps one
 *	  pin per generation (a second read widens it), and at most two pins:
 *	  past them, or when every slot is taken, one of its pins grows to
 *	  cover every generation, so one backend never starves the others.
 *	  Errors: 53400 (configuration_limit_exceeded) when every pin slot is
 *	  taken and this backend holds none (two slots per backend).
 */
void
cs_pin_read(uint64 generation, XLogRecPtr oldest_lsn)
{
	int			free_slot = -1;
	int			mine = -1;
	int			nmine = 0;

	/* not preloaded: no archiver, so no retention to pin against */
	if (cs_pins == NULL)
		return;
	register_callbacks();
	LWLockAcquire(cs_pins->lock, LW_EXCLUSIVE);
	for (int i = 0; i < cs_pins->npins; i++)
	{
		CsPin	   *p = &cs_pins->pins[i];

		if (p->pid == 0 && free_slot < 0)
			free_slot = i;
		if (p->pid != MyProcPid)
			continue;
		/* a pin of this backend that covers the generation: widen it */
		if (p->generation == CS_PIN_ALL_GENERATIONS || p->generation == generation)
		{
			if (p->generation == generation && oldest_lsn < p->oldest_lsn)
				p->oldest_lsn = oldest_lsn;
			LWLockRelease(cs_pins->lock);
			return;
		}
		mine = i;
		nmine++;
	}
	/* a backend takes at most its share, so it cannot starve the others */
	if (nmine >= PINS_PER_BACKEND)
		free_slot = -1;
	if (free_slot >= 0)
	{
		cs_pins->pins[free_slot].generation = generation;
		cs_pins->pins[free_slot].oldest_lsn = oldest_lsn;
		cs_pins->pins[free_slot].pid = MyProcPid;
		my_pins++;
	}
	else if (mine >= 0)
	{
		/* no slot left for it: one of its pins covers everything */
		cs_pins->pins[mine].generation = CS_PIN_ALL_GENERATIONS;
		cs_pins->pins[mine].oldest_lsn = InvalidXLogRecPtr;
		free_slot = mine;
	}
	LWLockRelease(cs_pins->lock);
	if (free_slot < 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many changestream readers at once"),
				 errdetail("Every one of the %d reader pins is taken.",
						   pin_slots()),
				 errhint("End transactions that read the archive.")));
}

/*
 * cs_pins_lock, cs_pins_unlock
 *	  Retention holds the pins' lock exclusively from reading the pins
 *	  (cs_pinned()) until the horizon it chose is durable.  cs_pins_unlock()
 *	  does nothing when the lock is not held (retention's error path).
 */
void
cs_pins_lock(void)
{
	LWLockAcquire(cs_pins->lock, LW_EXCLUSIVE);
}

void
cs_pins_unlock(void)
{
	if (LWLockHeldByMe(cs_pins->lock))
		LWLockRelease(cs_pins->lock);
}

/*
 * cs_pinned
 *	  Is generation pinned by a reader?  If so, *oldest_lsn is the oldest
 *	  LSN a pin needs (InvalidXLogRecPtr: all of it from the current
 *	  horizon on) and *pid the backend holding that pin.  Caller holds the
 *	  lock (cs_pins_lock()).  A pin of a process that no longer exists (it
 *	  cannot release, e.g. after a crash of the backend alone) is freed.
 */
bool
cs_pinned(uint64 generation, XLogRecPtr *oldest_lsn, pid_t *pid)
{
	bool		pinned = false;

	*oldest_lsn = InvalidXLogRecPtr;
	*pid = 0;
	for (int i = 0; i < cs_pins->npins; i++)
	{
		CsPin	   *p = &cs_pins->pins[i];

		if (p->pid == 0)
			continue;
		if (kill(p->pid, 0) != 0 && errno == ESRCH)
		{
			p->pid = 0;
			continue;
		}
		if (p->generation != generation &&
			p->generation != CS_PIN_ALL_GENERATIONS)
			continue;
		if (!pinned || p->oldest_lsn < *oldest_lsn)
		{
			*oldest_lsn = p->oldest_lsn;
			*pid = p->pid;
		}
		pinned = true;
	}
	return pinned;
}

/*
 * cs_pin_reader_begin, cs_pin_reader_end
 *	  A reader of segments (the generation reader) opens and closes in
 *	  this backend.  While more than one is open, cs_pin_advance() leaves
 *	  the pins alone: one reader's position says nothing of another's.
 *	  The count is reset at the end of the transaction, so a reader an
 *	  error left open only makes the pins more careful until then.
 */
void
cs_pin_reader_begin(void)
{
	reads_in_progress++;
}

void
cs_pin_reader_end(void)
{
	if (reads_in_progress > 0)
		reads_in_progress--;
}

/*
 * cs_pin_advance
 *	  The reader of generation has moved on to lsn (the start LSN of the
 *	  segment it is at, or the snapshot it reads): move this backend's pin
 *	  of that generation forward to it, so that retention may delete what
 *	  lies before.  Never moves a pin back, and does nothing while two
 *	  readers are open in this backend or inside a cs_pin_call_begin()
 *	  call, nor for a pin that covers every generation.
 */
void
cs_pin_advance(uint64 generation, XLogRecPtr lsn)
{
	if (cs_pins == NULL || my_pins == 0 || reads_in_progress > 1 ||
		call_depth > 0 || lsn == InvalidXLogRecPtr)
		return;
	LWLockAcquire(cs_pins->lock, LW_EXCLUSIVE);
	for (int i = 0; i < cs_pins->npins; i++)
	{
		CsPin	   *p = &cs_pins->pins[i];

		if (p->pid == MyProcPid && p->generation == generation &&
			p->generation != CS_PIN_ALL_GENERATIONS && lsn > p->oldest_lsn)
			p->oldest_lsn = lsn;
	}
	LWLockRelease(cs_pins->lock);
}

/*
 * cs_pin_call_begin, cs_pin_call_end
 *	  Bracket a call whose pins must not outlast it (a call that lists or
 *	  reports and keeps no file open after it returns: generations(),
 *	  generation_stats(), wal_segments(), snapshots(), verify()).
 *	  cs_pin_call_begin() remembers the pins this backend holds;
 *	  cs_pin_call_end() puts them back as they were, releasing those the
 *	  call took or widened.  Calls nest (only the outermost restores).  An
 *	  error between the two leaves the call's pins until the end of the
 *	  transaction, as any pin.
 */
void
cs_pin_call_begin(void)
{
	if (cs_pins == NULL || call_depth++ > 0)
		return;
	register_callbacks();
	nsaved = 0;
	if (my_pins == 0)
		return;
	LWLockAcquire(cs_pins->lock, LW_SHARED);
	for (int i = 0; i < cs_pins->npins && nsaved < PINS_PER_BACKEND; i++)
	{
		CsPin	   *p = &cs_pins->pins[i];

		if (p->pid == MyProcPid)
		{
			saved[nsaved].generation = p->generation;
			saved[nsaved].oldest_lsn = p->oldest_lsn;
			nsaved++;
		}
	}
	LWLockRelease(cs_pins->lock);
}

void
cs_pin_call_end(void)
{
	int			n = 0;

	if (cs_pins == NULL || call_depth == 0 || --call_depth > 0)
		return;
	LWLockAcquire(cs_pins->lock, LW_EXCLUSIVE);
	for (int i = 0; i < cs_pins->npins; i++)
	{
		CsPin	   *p = &cs_pins->pins[i];

		if (p->pid == MyProcPid)
			p->pid = 0;
	}
	/* the slots just freed are enough for the pins saved */
	for (int i = 0; i < cs_pins->npins && n < nsaved; i++)
	{
		CsPin	   *p = &cs_pins->pins[i];

		if (p->pid != 0)
			continue;
		p->generation = saved[n].generation;
		p->oldest_lsn = saved[n].oldest_lsn;
		p->pid = MyProcPid;
		n++;
	}
	LWLockRelease(cs_pins->lock);
	my_pins = n;
	nsaved = 0;
}

/*
 * cs_retention_status_set
 *	  Record a retention run that freed freed_bytes (bytes on disk) at
 *	  time at; status() adds them up in retention_freed_bytes.
 */
void
cs_retention_status_set(TimestampTz at, int64 freed_bytes)
{
	LWLockAcquire(cs_pins->lock, LW_EXCLUSIVE);
	cs_pins->last_retention_at = at;
	cs_pins->retention_freed_bytes += freed_bytes;
	LWLockRelease(cs_pins->lock);
}

/*
 * cs_retention_status_get
 *	  The last retention run's time (0: none since the server started) and
 *	  the bytes retention freed since the server started.
 */
TimestampTz
cs_retention_status_get(int64 *freed_bytes)
{
	TimestampTz at;

	LWLockAcquire(cs_pins->lock, LW_SHARED);
	at = cs_pins->last_retention_at;
	*freed_bytes = cs_pins->retention_freed_bytes;
	LWLockRelease(cs_pins->lock);
	return at;
}

/*
 * cs_retention_held_set
 *	  Record what held back the retention run planned at now: pid, the
 *	  backend whose pin kept the most (0: nothing held it back, which
 *	  clears the record), and bytes, what the run could not free (bytes on
 *	  disk).  The time the hold began is kept while runs stay held.
 */
void
cs_retention_held_set(TimestampTz now, pid_t pid, int64 bytes)
{
	LWLockAcquire(cs_pins->lock, LW_EXCLUSIVE);
	if (pid == 0)
	{
		cs_pins->held_since = 0;
		cs_pins->held_bytes = 0;
	}
	else
	{
		if (cs_pins->held_since == 0)
			cs_pins->held_since = now;
		cs_pins->held_bytes = bytes;
	}
	cs_pins->held_pid = pid;
	LWLockRelease(cs_pins->lock);
}

/*
 * cs_retention_held_get
 *	  Since when retention has been held back by readers' pins (0: it is
 *	  not), *pid the backend holding it at the last run and *bytes what
 *	  that run could not free (bytes on disk).
 */
TimestampTz
cs_retention_held_get(pid_t *pid, int64 *bytes)
{
	TimestampTz since;

	LWLockAcquire(cs_pins->lock, LW_SHARED);
	since = cs_pins->held_since;
	*pid = cs_pins->held_pid;
	*bytes = cs_pins->held_bytes;
	LWLockRelease(cs_pins->lock);
	return since;
}
