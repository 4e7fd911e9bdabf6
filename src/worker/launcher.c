/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  The launcher background worker: one archiver per database of
 *	  changestream.databases (or changestream.database alone), each a
 *	  dynamic background worker with the database's status entry index in
 *	  bgw_main_arg and its name in bgw_extra.  An archiver that stops is
 *	  started again after a delay that doubles from 1 s to 60 s (reset
 *	  once it has run for 5 minutes); one whose database leaves the list
 *	  on a reload is stopped.  None is started for a database being
 *	  dropped, nor for one dropped (dropdb_hook.c) until the next reload.  The worker, walsender and slot budgets are
 *	  checked at start and at each reload (docs/databases.md): databases
 *	  past what they allow are not started, in list order, and status()
 *	  and the log name the setting to raise.
 *
 * Sources: the launcher of src/backend/replication/logical/launcher.c
 * (dynamic workers with bgw_notify_pid, GetBackgroundWorkerPid()), and
 * contrib/worker_spi's dynamic registration.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "libpq/pqsignal.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/slot.h"
#include "replication/walsender.h"
#include "replication/walsender_private.h"
#include "storage/spin.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "base/archive_config.h"
#include "base/compat.h"
#include "base/guc.h"
#include "base/shmem_status.h"
#include "worker/launcher.h"
#include "worker/uploader.h"

#define BACKOFF_MIN_MS	1000
#define BACKOFF_MAX_MS	60000
#define HEALTHY_MS		(5 * 60 * 1000) /* a run this long resets backoff */
#define POLL_MS			1000

/* The launcher's view of one status entry's archiver. */
typedef struct Launched
{
	BackgroundWorkerHandle *handle; /* NULL: none started by us runs */
	TimestampTz started_at;
	TimestampTz next_start;		/* not before, after a stop */
	long		backoff_ms;
	bool		stopping;		/* we asked it to stop */
} Launched;

static Launched launched[CS_MAX_DATABASES];

/*
 * Is the slot name one of changestream's: changestream.slot_name, it
 * followed by "_<database OID>" (cs_archive_config_for(), the prefix
 * shortened to fit), or a snapshot worker's temporary
 * "changestream_snapshot_<pid>"?
 */
static bool
our_slot(const char *name)
{
	size_t		len = strlen(name);
	size_t		digits = 0;
	size_t		base;

	if (strncmp(name, "changestream_snapshot_", strlen("changestream_snapshot_")) == 0 ||
		strcmp(name, cs_slot_name) == 0)
		return true;
	while (digits < len && name[len - 1 - digits] >= '0' &&
		   name[len - 1 - digits] <= '9')
		digits++;
	if (digits == 0 || digits + 1 >= len || name[len - 1 - digits] != '_')
		return false;
	base = len - 1 - digits;
	/* the prefix is shortened only to fit NAMEDATALEN */
	return base <= strlen(cs_slot_name) &&
		strncmp(name, cs_slot_name, base) == 0 &&
		(base == strlen(cs_slot_name) || len == NAMEDATALEN - 1);
}

/*
 * What other software uses of the local server's replication slots (the
 * slots in use that are not ours, our_slot()) and WAL senders (those
 * running that serve none of our slots: physical standbys, other
 * subscriptions, pg_basebackup), into *slots and *senders: read from
 * shared memory, as pg_replication_slots and pg_stat_replication do.
 */
static void
count_others(int *slots, int *senders)
{
	pid_t		ours[CS_MAX_DATABASES * 2];
	int			nours = 0;

	*slots = 0;
	*senders = 0;
	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	for (int i = 0; i < max_replication_slots; i++)
	{
		ReplicationSlot *slot = &ReplicationSlotCtl->replication_slots[i];
		pid_t		active;

		if (!slot->in_use)
			continue;
		SpinLockAcquire(&slot->mutex);
		active = cs_slot_active_pid(slot);
		SpinLockRelease(&slot->mutex);
		if (!our_slot(NameStr(slot->data.name)))
			(*slots)++;
		else if (active != 0 && nours < lengthof(ours))
			ours[nours++] = active;
	}
	LWLockRelease(ReplicationSlotControlLock);
	for (int i = 0; WalSndCtl != NULL && i < max_wal_senders; i++)
	{
		WalSnd	   *walsnd = &WalSndCtl->walsnds[i];
		pid_t		pid;
		bool		mine = false;

		SpinLockAcquire(&walsnd->mutex);
		pid = walsnd->pid;
		SpinLockRelease(&walsnd->mutex);
		for (int j = 0; j < nours && !mine; j++)
			mine = ours[j] == pid;
		if (pid != 0 && !mine)
			(*senders)++;
	}
}

/*
 * The budget's verdict for n databases: how many of them (in list order)
 * can be archived, beside what other software uses of the local server's
 * WAL senders and replication slots (count_others()), logging one message for each setting that is too small
 * when log is set, and putting the first in *message (palloc'd, NULL when
 * the budget suffices).
 */
static int
budget_allowed(int n, bool log, char **message)
{
	int			static_workers = 2 + (cs_uploader_registered ? 1 : 0);
	bool		local = cs_conninfo == NULL || cs_conninfo[0] == '\0';
	struct
	{
		const char *setting;
		int			value;
		int			reserved;	/* beside one per database */
		const char *what;
	}			checks[3] = {
		{"max_worker_processes", max_worker_processes, static_workers + 1,
		"background worker processes (one archiver per database, one snapshot worker, the launcher, the maintenance worker and the uploader when it runs)"},
		{"max_wal_senders", max_wal_senders, 1,
		"WAL senders (one per database and one for a snapshot)"},
		{"max_replication_slots", max_replication_slots, 1,
		"replication slots (one per database and one for a snapshot)"},
	};
	int			allowed = n;
	int			others[3] = {0, 0, 0};
	int			i;

	*message = NULL;
	if (local)
		count_others(&others[2], &others[1]);
	for (i = 0; i < 3; i++)
	{
		int			need = n + checks[i].reserved;
		int			fit = checks[i].value - checks[i].reserved - others[i];
		char	   *used = others[i] == 0 ? pstrdup("") :
			psprintf(" and other software uses %d", others[i]);

		if (i > 0 && !local)
			break;				/* walsenders and slots are on the other server */
		if (need + others[i] <= checks[i].value)
			continue;
		allowed = Min(allowed, Max(fit, 0));
		if (*message == NULL)
			*message = psprintf("changestream.databases lists %d databases, which need %d %s, but %s is %d%s: raise %s to at least %d and restart the server",
								n, need, checks[i].what,
								checks[i].setting, checks[i].value, used,
								checks[i].setting, need + others[i]);
		if (log)
			ereport(WARNING,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("changestream.databases lists %d databases, which need %d %s, but %s is %d%s",
							n, need, checks[i].what,
							checks[i].setting, checks[i].value, used),
					 errdetail("Only the first %d databases of the list are archived.",
							   Max(fit, 0)),
					 errhint("Raise %s to at least %d and restart the server.",
							 checks[i].setting, need + others[i])));
	}
	return allowed;
}

/* Register the archiver of entry index for database; false when refused. */
static bool
start_archiver(int index, const char *database, TimestampTz now)
{
	BackgroundWorker worker;
	Launched   *l = &launched[index];
	MemoryContext old;
	bool		registered;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	/* on a hot standby too: it shows state "standby" (archiver.c) */
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "changestream");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "changestream_archiver_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "changestream archiver %s", database);
	snprintf(worker.bgw_type, BGW_MAXLEN, "changestream archiver");
	worker.bgw_main_arg = Int32GetDatum(index);
	strlcpy(worker.bgw_extra, database, Min(BGW_EXTRALEN, NAMEDATALEN));
	worker.bgw_notify_pid = MyProcPid;
	l->stopping = false;
	/* the handle outlives reconcile()'s context */
	old = MemoryContextSwitchTo(TopMemoryContext);
	registered = RegisterDynamicBackgroundWorker(&worker, &l->handle);
	MemoryContextSwitchTo(old);
	if (!registered)
	{
		l->handle = NULL;
		l->next_start = TimestampTzPlusMilliseconds(now, l->backoff_ms);
		l->backoff_ms = Min(l->backoff_ms * 2, BACKOFF_MAX_MS);
		cs_status_select(index);
		cs_status_set_launch_error("no background worker slot was free for the archiver: raise max_worker_processes and restart the server");
		return false;
	}
	l->started_at = now;
	return true;
}

/*
 * Is entry index's archiver (started by us) still there?  Notes a stop:
 * the next start waits the backoff delay, unless we asked for the stop.
 */
static bool
archiver_running(int index, TimestampTz now)
{
	Launched   *l = &launched[index];
	pid_t		pid;

	if (l->handle == NULL)
		return false;
	if (GetBackgroundWorkerPid(l->handle, &pid) != BGWH_STOPPED)
		return true;
	pfree(l->handle);
	l->handle = NULL;
	if (l->stopping)
		l->backoff_ms = BACKOFF_MIN_MS;
	else
	{
		if (TimestampDifferenceExceeds(l->started_at, now, HEALTHY_MS))
			l->backoff_ms = BACKOFF_MIN_MS;
		l->next_start = TimestampTzPlusMilliseconds(now, l->backoff_ms);
		l->backoff_ms = Min(l->backoff_ms * 2, BACKOFF_MAX_MS);
	}
	l->stopping = false;
	return false;
}

/* Ask entry index's archiver to stop (SIGTERM: it makes its data durable). */
static void
stop_archiver(int index)
{
	Launched   *l = &launched[index];

	if (l->handle != NULL && !l->stopping)
	{
		TerminateBackgroundWorker(l->handle);
		l->stopping = true;
	}
}

/*
 * The selected entry's archiver waits in state "disabled" although
 * changestream.directory is set: the reload's SIGHUP reached it before it
 * installed its handler (PostgreSQL's background worker start ignores
 * SIGHUP until then, and Linux drops a pending signal set to be ignored),
 * so it would wait for the next reload.  Send it again.
 */
static void
resend_reload(void)
{
	pid_t		pid;

	if (cs_directory == NULL || cs_directory[0] == '\0')
		return;
	pid = cs_status_archiver_disabled();
	if (pid != 0)
		(void) kill(pid, SIGHUP);
}

/*
 * Bring the archivers in line with the list: stop those whose database
 * left it (their entry is released once they are gone) or is past the
 * budget, start the missing ones whose delay is over.
 */
static void
reconcile(bool log_budget)
{
	TimestampTz now = GetCurrentTimestamp();
	List	   *names = cs_archived_databases();
	char	   *budget_message;
	int			allowed = budget_allowed(list_length(names), log_budget,
										 &budget_message);
	int			i;
	ListCell   *lc;
	char		database[NAMEDATALEN];

	/* entries of databases that left the list */
	for (i = 0; i < CS_MAX_DATABASES; i++)
	{
		if (!cs_status_in_use(i, database) ||
			cs_archive_config_is_archived(database))
			continue;
		if (archiver_running(i, now))
			stop_archiver(i);
		else
		{
			pid_t		pid;

			cs_status_select(i);
			pid = cs_status_archiver_pid();
			if (pid != 0)
				(void) kill(pid, SIGTERM);	/* started before our restart */
			else
			{
				cs_status_release(i);
				launched[i].backoff_ms = BACKOFF_MIN_MS;
				launched[i].next_start = 0;
				ereport(LOG,
						(errmsg("changestream: database \"%s\" is no longer archived",
								database)));
			}
		}
	}

	i = 0;
	foreach(lc, names)
	{
		const char *name = lfirst(lc);
		int			index = cs_status_claim(name);
		int			position = i++;

		if (index < 0)
			continue;			/* the check hook allows no more */
		cs_status_select(index);
		if (position >= allowed)
		{
			if (archiver_running(index, now))
				stop_archiver(index);
			cs_status_set_launch_error(budget_message);
			continue;
		}
		if (archiver_running(index, now))
		{
			resend_reload();
			continue;
		}
		if (now < launched[index].next_start || cs_status_dropping())
			continue;
		/* one left running by a launcher before a restart of ours */
		if (cs_status_archiver_pid() != 0)
			continue;
		start_archiver(index, name, now);
	}
	list_free_deep(names);
}

/*
 * changestream_launcher_main
 *	  Entry point of the "changestream launcher" background worker
 *	  (main_arg is unused, no database connection): starts, restarts and
 *	  stops the archivers until SIGTERM; never returns.
 */
void
changestream_launcher_main(Datum main_arg)
{
	MemoryContext cxt;
	bool		log_budget = true;
	int			i;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	for (i = 0; i < CS_MAX_DATABASES; i++)
		launched[i].backoff_ms = BACKOFF_MIN_MS;
	cxt = AllocSetContextCreate(TopMemoryContext, "changestream launcher",
								ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		MemoryContext old;
		int			rc;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			log_budget = true;
			/* a dropped database may exist again: try it */
			for (i = 0; i < CS_MAX_DATABASES; i++)
			{
				cs_status_select(i);
				cs_status_forget_dropped();
			}
		}
		old = MemoryContextSwitchTo(cxt);
		reconcile(log_budget);
		MemoryContextSwitchTo(old);
		MemoryContextReset(cxt);
		log_budget = false;

		rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					   POLL_MS, PG_WAIT_EXTENSION);
		if (rc & WL_LATCH_SET)
			ResetLatch(MyLatch);
	}
}

/*
 * cs_register_launcher
 *	  Register the launcher at _PG_init(): BGWORKER_SHMEM_ACCESS only,
 *	  started once the server is consistent (so archivers show "standby" on
 *	  a hot standby), restarted 5 s after an unexpected exit.
 */
void
cs_register_launcher(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "changestream");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "changestream_launcher_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "changestream launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "changestream launcher");
	worker.bgw_notify_pid = 0;
	RegisterBackgroundWorker(&worker);
}
