/*-------------------------------------------------------------------------
 *
 * walsender_reap.c
 *	  Ending the walsender behind a replication connection that a process
 *	  abandons in the middle of a command.
 *
 *	  A walsender waiting in CREATE_REPLICATION_SLOT for running
 *	  transactions (SnapBuildWaitSnapshot() -> XactLockTableWait()) sleeps
 *	  on a lock and does not notice that its client closed the connection:
 *	  it stays, holding a max_wal_senders slot and its temporary
 *	  replication slot (and so catalog_xmin), until those transactions end.
 *	  So before such a command the walsender's pid is remembered
 *	  (pg_backend_pid() on that connection), and a process that abandons
 *	  the connection terminates that walsender (SIGTERM, as
 *	  pg_terminate_backend() sends; the walsender's die() handler ends the
 *	  lock wait, and its exit drops its temporary slots,
 *	  ReplicationSlotCleanup()).
 *
 *	  On the local server (changestream.conninfo empty) the signal is sent
 *	  directly, while the connection is still open, so the pid is still
 *	  that walsender's.  On another server a second connection runs
 *	  pg_terminate_backend() for it.
 *
 * Sources: src/backend/replication/walsender.c (WalSndSignals(),
 * WalSndErrorCleanup()), src/backend/storage/ipc/signalfuncs.c
 * (pg_terminate_backend()).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "replication/walreceiver.h"
#include "storage/procarray.h"

#include "base/archive_config.h"
#include "worker/walsender_conn.h"
#include "worker/walsender_reap.h"

/* the remembered walsender: its pid, and whether it runs on this server */
static int	walsender_pid = 0;
static bool walsender_local = false;

/*
 * cs_walsender_remember
 *	  Remember the pid of conn's walsender (SELECT pg_backend_pid() on
 *	  that connection) before a command that may wait on the server for a
 *	  long time, and whether it runs on the local server (config).  The
 *	  caller holds no transaction.  Raises
 *	  connection_exception (class 08) if the query fails.
 */
void
cs_walsender_remember(const CsArchiveConfig *config, WalReceiverConn *conn)
{
	List	   *rows;

	rows = cs_exec_rows(conn, "SELECT pg_catalog.pg_backend_pid()::text", 1);
	walsender_pid = (int) strtol(((char **) linitial(rows))[0], NULL, 10);
	walsender_local = cs_archive_config_local(config);
}

/*
 * cs_walsender_forget
 *	  The command ended normally: closing the connection ends its
 *	  walsender, nothing is to be terminated.
 */
void
cs_walsender_forget(void)
{
	walsender_pid = 0;
}

/*
 * On another server: a second replication connection terminates the
 * walsender, if it still is one.  Reports failures as WARNING and never
 * raises (it runs on the way out of a failing process).
 */
static void
terminate_remote(const CsArchiveConfig *config, int pid)
{
	WalReceiverConn *volatile conn2 = NULL;
	uint64		sysid;
	uint32		tli;

	PG_TRY();
	{
		conn2 = cs_connect(config, &sysid, &tli);
		walrcv_clear_result(cs_exec(conn2,
									psprintf("DO $cs$BEGIN PERFORM pg_catalog.pg_terminate_backend(pid) "
											 "FROM pg_catalog.pg_stat_activity "
											 "WHERE pid = %d AND backend_type = 'walsender'; END$cs$",
											 pid),
									WALRCV_OK_COMMAND));
	}
	PG_CATCH();
	{
		EmitErrorReport();
		FlushErrorState();
		ereport(WARNING,
				(errmsg("could not terminate walsender process %d", pid),
				 errdetail("Its replication slot creation may wait until the transactions it waits for end.")));
	}
	PG_END_TRY();
	if (conn2 != NULL)
		cs_disconnect(conn2);
}

/*
 * cs_walsender_reap
 *	  Abandon conn (may be NULL: already closed): if a walsender was
 *	  remembered and not forgotten, terminate it (on another server through
 *	  a connection of config), then close conn.  Safe on
 *	  the way out of a process (before_shmem_exit): never raises.
 */
void
cs_walsender_reap(const CsArchiveConfig *config, WalReceiverConn *conn)
{
	int			pid = walsender_pid;

	walsender_pid = 0;
	if (pid != 0 && walsender_local)
	{
		/* still connected: the pid is our walsender's */
		if (BackendPidGetProc(pid) != NULL && kill(pid, SIGTERM) == 0)
			ereport(LOG,
					(errmsg("terminated walsender process %d of an abandoned replication connection",
							pid)));
	}
	if (conn != NULL)
		cs_disconnect(conn);
	if (pid != 0 && !walsender_local)
		terminate_remote(config, pid);
}
