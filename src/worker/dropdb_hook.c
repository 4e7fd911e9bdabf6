/*-------------------------------------------------------------------------
 *
 * dropdb_hook.c
 *	  DROP DATABASE of an archived database (and CREATE DATABASE with one
 *	  as its TEMPLATE): the archiver holds a
 *	  connection to the database and its walsender holds the slot active,
 *	  and DROP DATABASE refuses both.  Before the command runs, a
 *	  ProcessUtility hook marks the database's status entry "dropping"
 *	  (the launcher starts no archiver for it), ends its archiver (SIGTERM:
 *	  it makes what it received durable, as at any stop) and its snapshot
 *	  worker, if one runs (the snapshot is abandoned: its temporary slot
 *	  goes with its walsender), and waits, at most DROP_WAIT_MS, until both
 *	  are gone and no slot of the database is active.  DROP DATABASE then drops the inactive slot
 *	  itself.  When the command fails the mark is cleared and the launcher
 *	  starts the archiver again; when it succeeds the entry stays
 *	  "dropped" until the database leaves changestream.databases.  The
 *	  archive stays where it is, readable (docs/databases.md).
 *
 *	  CREATE DATABASE ... TEMPLATE of an archived database needs the
 *	  template without connections too: its archiver is let go the same
 *	  way for the copy, and started again after it.
 *
 *	  Only the database's owner (or a superuser) stops the archiver this
 *	  way: for anyone else DROP DATABASE fails on its own check.
 *
 * Source: the ProcessUtility_hook chaining of
 * contrib/pg_stat_statements; dropdb() in src/backend/commands/dbcommands.c
 * (its checks of active slots and of other backends).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "replication/slot.h"
#include "storage/latch.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "base/compat.h"
#include "base/shmem_status.h"
#include "worker/dropdb_hook.h"

#define DROP_WAIT_MS	30000

static ProcessUtility_hook_type prev_process_utility = NULL;

/*
 * End the archiver and the snapshot worker of status entry index (its
 * database dboid is about to be dropped) and wait until they and the
 * database's active slots are gone, or DROP_WAIT_MS have passed (DROP
 * DATABASE then says what is still there).  Cancellable.
 */
static void
release_database(int index, Oid dboid)
{
	TimestampTz start = GetCurrentTimestamp();

	cs_status_select(index);
	cs_status_set_dropping(true, false);
	for (;;)
	{
		pid_t		pid = cs_status_archiver_pid();
		pid_t		snapshot_pid = cs_status_snapshot_pid();
		int			nslots = 0;
		int			nactive = 0;

		/* a snapshot worker holds a connection and a slot too */
		if (snapshot_pid != 0)
			(void) kill(snapshot_pid, SIGTERM);
		if (pid != 0)
			(void) kill(pid, SIGTERM);
		else if (snapshot_pid == 0)
		{
			(void) ReplicationSlotsCountDBSlots(dboid, &nslots, &nactive);
			if (nactive == 0)
				return;
		}
		if (TimestampDifferenceExceeds(start, GetCurrentTimestamp(),
									   DROP_WAIT_MS))
			return;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 100, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* The template of CREATE DATABASE stmt, NULL when it names none. */
static const char *
create_template(CreatedbStmt *stmt)
{
	ListCell   *lc;

	foreach(lc, stmt->options)
	{
		DefElem    *defel = lfirst(lc);

		if (strcmp(defel->defname, "template") == 0 && defel->arg != NULL)
			return defGetString(defel);
	}
	return NULL;
}

/*
 * The archived database DROP DATABASE drops, or CREATE DATABASE copies
 * (its TEMPLATE), when its owner (or a superuser) runs the command and it
 * is not the current database: its status entry index, -1 otherwise.
 * *dboid: its OID.
 */
static int
archived_target(Node *parsetree, Oid *dboid, bool *drop)
{
	const char *name = NULL;

	*drop = IsA(parsetree, DropdbStmt);
	if (*drop)
		name = ((DropdbStmt *) parsetree)->dbname;
	else if (IsA(parsetree, CreatedbStmt))
		name = create_template((CreatedbStmt *) parsetree);
	if (name == NULL || !cs_status_attached())
		return -1;
	*dboid = get_database_oid(name, true);
	if (!OidIsValid(*dboid) || *dboid == MyDatabaseId ||
		!cs_database_ownercheck(*dboid))
		return -1;
	return cs_status_index_of(name);
}

/*
 * The ProcessUtility hook: around DROP DATABASE of an archived database,
 * or CREATE DATABASE with an archived database as its TEMPLATE (which
 * must have no connection either), release_database() first.  After a
 * successful drop the entry stays marked dropped; after a copy, or after
 * a failure, it is unmarked and the launcher starts the archiver again.
 */
static void
cs_process_utility(PlannedStmt *pstmt, const char *queryString,
				   bool readOnlyTree, ProcessUtilityContext context,
				   ParamListInfo params, QueryEnvironment *queryEnv,
				   DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	Oid			dboid = InvalidOid;
	bool		drop = false;
	volatile int index = archived_target(parsetree, &dboid, &drop);

	if (index >= 0)
		release_database(index, dboid);
	PG_TRY();
	{
		if (prev_process_utility)
			prev_process_utility(pstmt, queryString, readOnlyTree, context,
								 params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
	}
	PG_CATCH();
	{
		if (index >= 0)
		{
			cs_status_select(index);
			cs_status_set_dropping(false, false);
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (index < 0)
		return;
	cs_status_select(index);
	cs_status_set_dropping(false, drop);
	if (drop)
		ereport(LOG,
				(errmsg("changestream: archived database \"%s\" was dropped; its archive stays readable",
						((DropdbStmt *) parsetree)->dbname),
				 errhint("Remove it from changestream.databases and reload.")));
}

/*
 * cs_install_dropdb_hook
 *	  Chain cs_process_utility() into ProcessUtility_hook, from _PG_init().
 */
void
cs_install_dropdb_hook(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = cs_process_utility;
}
