/*-------------------------------------------------------------------------
 *
 * ri_monitor.c
 *	  The published tables on which UPDATE and DELETE fail because they
 *	  have no replica identity: status().tables_without_replica_identity
 *	  and a WARNING in the log whenever that list changes.
 *
 *	  The list is computed at session start and with every snapshot
 *	  (snapshot.c), and refreshed while the archiver streams: at once
 *	  after a Relation message (pgoutput sends one when a relation is
 *	  first used in a session and after its definition changed, e.g.
 *	  ALTER TABLE ... REPLICA IDENTITY), and otherwise every
 *	  changestream.status_interval, which catches ALTER PUBLICATION ... ADD
 *	  TABLE and SET (publish = ...) of tables not yet written to.  While
 *	  streaming, the replication connection is in COPY mode and cannot run
 *	  queries, so the refresh reads the local catalogs through SPI; it is
 *	  done only when the archived server is the local one
 *	  (changestream.conninfo empty, the archiver connected to
 *	  changestream.database).
 *
 * Source: the replica identity rule of CheckCmdReplicaIdentity()
 * (src/backend/executor/execReplication.c): UPDATE or DELETE on a table a
 * publication publishes them for fails without a replica identity index
 * (or FULL); a table with REPLICA IDENTITY DEFAULT and no primary key has
 * none.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "base/archive_config.h"
#include "base/guc.h"
#include "base/shmem_status.h"
#include "worker/ri_monitor.h"

/* tables lacking a replica identity, "schema.table, ..." or NULL */
#define LACKING_SQL \
	"SELECT string_agg(pt.schemaname || '.' || pt.tablename, ', ' " \
	"                  ORDER BY pt.schemaname, pt.tablename) " \
	"FROM pg_catalog.pg_publication_tables pt " \
	"JOIN pg_catalog.pg_publication p ON p.pubname = pt.pubname " \
	"JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname " \
	"JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename " \
	"WHERE pt.pubname = $1 AND (p.pubupdate OR p.pubdelete) " \
	"AND (c.relreplident = 'n' OR (c.relreplident = 'd' " \
	"     AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index i " \
	"                     WHERE i.indrelid = c.oid AND i.indisprimary)))"

static char last_warned[512];
static bool signalled = false;
static TimestampTz last_check = 0;

/*
 * cs_ri_report
 *	  Publish missing (tables of config's publication without a replica
 *	  identity, "schema.table, ..."; "" for none) in status(), and warn in the log
 *	  when the list is not empty and differs from the last one warned
 *	  about.  Raises nothing of its own.
 */
void
cs_ri_report(const CsArchiveConfig *config, const char *missing)
{
	cs_status_set_no_replica_identity(missing);
	if (missing[0] != '\0' &&
		strncmp(missing, last_warned, sizeof(last_warned) - 1) != 0)
		ereport(WARNING,
				(errmsg("published tables without a replica identity: %s",
						missing),
				 errdetail("UPDATE and DELETE on them fail while publication \"%s\" publishes those actions.",
						   config->publication),
				 errhint("Add a primary key, or set REPLICA IDENTITY FULL or USING INDEX.")));
	strlcpy(last_warned, missing, sizeof(last_warned));
}

/*
 * cs_ri_signal
 *	  A Relation message arrived: a relation may have changed; refresh at
 *	  the next cs_ri_tick().  Only sets a flag.
 */
void
cs_ri_signal(void)
{
	signalled = true;
}

/* the list from the local catalogs, through SPI, in its own transaction */
static void
refresh_local(const CsArchiveConfig *config)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1];
	char	   *missing = "";
	MemoryContext caller_cxt = CurrentMemoryContext;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	args[0] = CStringGetTextDatum(config->publication);
	if (SPI_execute_with_args(LACKING_SQL, 1, argtypes, args, NULL, true, 1) !=
		SPI_OK_SELECT)
		elog(ERROR, "could not list published tables without a replica identity");
	if (SPI_processed == 1)
	{
		char	   *v = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);

		if (v != NULL)
			missing = MemoryContextStrdup(caller_cxt, v);
	}
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(caller_cxt);
	cs_ri_report(config, missing);
}

/*
 * cs_ri_tick
 *	  Called from the archiver's stream loop with the session's
 *	  configuration (no transaction open): after
 *	  a Relation message (at most once a second), or when changestream.status_interval has passed
 *	  since the last refresh, re-read the list (local server only) and
 *	  report it.  Errors: those of the catalog query (class XX or 53),
 *	  which end the session like any other.
 */
void
cs_ri_tick(const CsArchiveConfig *config, TimestampTz now)
{
	/* after a Relation message, but at most once a second */
	if (!(signalled && TimestampDifferenceExceeds(last_check, now, 1000)) &&
		!TimestampDifferenceExceeds(last_check, now, cs_status_interval_ms))
		return;
	signalled = false;
	last_check = now;
	if (!cs_archive_config_local(config))
		return;					/* another server: its catalogs are not ours */
	pgstat_report_activity(STATE_RUNNING, "changestream: checking replica identities");
	refresh_local(config);
	pgstat_report_activity(STATE_IDLE, NULL);
}
