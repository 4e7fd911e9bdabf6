/*-------------------------------------------------------------------------
 *
 * archive_config.c
 *	  An archive's configuration (CsArchiveConfig): the one place, beside
 *	  guc.c, that reads changestream.directory, database, slot_name,
 *	  publication and conninfo.
 *
 *	  The archiver takes a copy at the start of each session and passes it down
 *	  to everything the session runs (the connection, the generation policy,
 *	  snapshots, the stream), so that a reload changes nothing under a running
 *	  session: it is compared with a fresh copy on SIGHUP and the session ends
 *	  when they differ.  The maintenance worker and snapshot workers and the
 *	  backends running the SQL functions take their own copy of the current
 *	  settings the same way.
 *
 * Source: the "parameter values that are passed down" of
 * src/backend/replication/walreceiver.c, and MySubscription in
 * src/backend/replication/logical/worker.c, re-read and compared on
 * reload (maybe_reread_subscription()).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/varlena.h"

#include "archive/archive_layout.h"
#include "base/archive_config.h"
#include "base/guc.h"
#include "base/shmem_status.h"

/*
 * The database this process archives (an archiver or a snapshot worker:
 * cs_archive_config_serve()); "" in every other process.
 */
static char served_database[NAMEDATALEN] = "";

/* a setting's value, "" when it is unset */
static char *
setting_copy(const char *value)
{
	return pstrdup(value != NULL ? value : "");
}

/*
 * cs_archived_databases
 *	  Returns the names of the databases to archive, in the order listed,
 *	  as a List of palloc'd strings: changestream.databases, or when it is
 *	  empty a list of one, changestream.database (docs/databases.md).
 *	  The check hook has validated the list; raises only out of memory.
 */
List *
cs_archived_databases(void)
{
	List	   *names = NIL;
	List	   *items = NIL;
	ListCell   *lc;
	char	   *copy;

	if (cs_databases == NULL || cs_databases[0] == '\0')
		return list_make1(setting_copy(cs_database));
	copy = pstrdup(cs_databases);
	if (!SplitGUCList(copy, ',', &items))
		return list_make1(setting_copy(cs_database));
	foreach(lc, items)
		names = lappend(names, pstrdup((char *) lfirst(lc)));
	list_free(items);
	return names;
}

/*
 * cs_archive_config_is_archived
 *	  Is database (a name) in the list cs_archived_databases() returns?
 */
bool
cs_archive_config_is_archived(const char *database)
{
	List	   *names = cs_archived_databases();
	ListCell   *lc;

	foreach(lc, names)
		if (strcmp((char *) lfirst(lc), database) == 0)
			return true;
	return false;
}

/*
 * cs_archive_config_for
 *	  Returns the configuration of database's archive from the current
 *	  settings, palloc'd in CurrentMemoryContext (nothing in it changes on
 *	  a reload).  changestream.database's archive is the directory root
 *	  and uses changestream.slot_name, as with a single database; any
 *	  other database's is <directory>/databases/<name>
 *	  (cs_database_tree_path()) and uses changestream.slot_name followed
 *	  by _<database OID> (dboid; an empty slot name when it is
 *	  InvalidOid: a process without a database connection does not need
 *	  it).  Raises only out of memory.
 */
CsArchiveConfig *
cs_archive_config_for(const char *database, Oid dboid)
{
	CsArchiveConfig *config = palloc(sizeof(CsArchiveConfig));
	bool		root = strcmp(database, cs_database ? cs_database : "") == 0;

	config->database = pstrdup(database);
	config->root = setting_copy(cs_directory);
	config->publication = setting_copy(cs_publication);
	config->conninfo = setting_copy(cs_conninfo);
	if (root || cs_directory == NULL || cs_directory[0] == '\0')
		config->directory = setting_copy(cs_directory);
	else
		config->directory = cs_database_tree_path(cs_directory, database);
	if (root)
		config->slot_name = setting_copy(cs_slot_name);
	else if (!OidIsValid(dboid))
		config->slot_name = pstrdup("");
	else
	{
		char		suffix[16];
		int			keep;

		snprintf(suffix, sizeof(suffix), "_%u", dboid);
		keep = Min((int) strlen(cs_slot_name),
				   NAMEDATALEN - 1 - (int) strlen(suffix));
		config->slot_name = psprintf("%.*s%s", keep, cs_slot_name, suffix);
	}
	return config;
}

/*
 * cs_archive_config_serve
 *	  Make database the one this process archives (the archiver and the
 *	  snapshot worker, at their start): cs_archive_config_current() then
 *	  returns its configuration.
 */
void
cs_archive_config_serve(const char *database)
{
	strlcpy(served_database, database, NAMEDATALEN);
}

/*
 * changestream.read_database names another database's archive: allowed to
 * superusers and members of pg_monitor, as reading the archive of a
 * database one cannot connect to.  42501 otherwise.
 */
static void
require_read_other(const char *database)
{
	if (!superuser() && !has_privs_of_role(GetUserId(), ROLE_PG_MONITOR))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to read the archive of database \"%s\"",
						database),
				 errdetail("changestream.read_database names a database other than the current one."),
				 errhint("Only superusers and members of pg_monitor may read another database's archive; connect to that database instead, or reset changestream.read_database.")));
}

/*
 * The database whose archive this process works on: the one it serves
 * (an archiver or a snapshot worker).  In a backend inside a transaction:
 * changestream.read_database when set; else the current database when it
 * is archived, or when changestream.databases is set (a database removed
 * from the list still reads its own tree); else, with a single database
 * configured, changestream.database, as before there were several.  In
 * any other process changestream.database.  *dboid: its OID when known.
 */
static char *
current_database(Oid *dboid)
{
	char	   *name;

	*dboid = InvalidOid;
	if (served_database[0] != '\0')
	{
		*dboid = MyDatabaseId;
		return pstrdup(served_database);
	}
	if (OidIsValid(MyDatabaseId) && IsTransactionState() &&
		(name = get_database_name(MyDatabaseId)) != NULL)
	{
		if (cs_read_database != NULL && cs_read_database[0] != '\0' &&
			strcmp(cs_read_database, name) != 0)
		{
			require_read_other(cs_read_database);
			*dboid = get_database_oid(cs_read_database, true);
			return pstrdup(cs_read_database);
		}
		if (cs_archive_config_is_archived(name) ||
			(cs_databases != NULL && cs_databases[0] != '\0'))
		{
			*dboid = MyDatabaseId;
			return name;
		}
	}
	name = setting_copy(cs_database);
	if (IsTransactionState())
		*dboid = get_database_oid(name, true);
	return name;
}

/*
 * cs_archive_config_current
 *	  Returns the configuration of the archive this process works on (the
 *	  database it archives; in a backend the current database when it is
 *	  archived, else changestream.database: docs/databases.md), palloc'd
 *	  in CurrentMemoryContext (the caller owns it; nothing in it changes
 *	  on a reload).  Selects that database's status entry, if any
 *	  (cs_status_select()).  Raises only out of memory.
 */
CsArchiveConfig *
cs_archive_config_current(void)
{
	Oid			dboid;
	char	   *database = current_database(&dboid);

	return cs_archive_config_select(database, dboid);
}

/*
 * cs_archive_config_select
 *	  cs_archive_config_for(database, dboid), and database's status entry
 *	  selected (cs_status_select()), or when it has none the entry of no
 *	  archived database (cs_status_select_none(): "not running"), so that
 *	  nothing acts on another database's archiver.
 */
CsArchiveConfig *
cs_archive_config_select(const char *database, Oid dboid)
{
	if (cs_status_attached())
	{
		int			index = cs_status_index_of(database);

		if (index >= 0)
			cs_status_select(index);
		else
			cs_status_select_none();
	}
	return cs_archive_config_for(database, dboid);
}

/*
 * cs_archive_config_session_equal
 *	  Can a session of configuration a go on under configuration b?  True
 *	  when the settings that reload (directory, slot, publication,
 *	  conninfo) are the same; database needs a restart and is not
 *	  compared.
 */
bool
cs_archive_config_session_equal(const CsArchiveConfig *a,
								const CsArchiveConfig *b)
{
	return strcmp(a->directory, b->directory) == 0 &&
		strcmp(a->slot_name, b->slot_name) == 0 &&
		strcmp(a->publication, b->publication) == 0 &&
		strcmp(a->conninfo, b->conninfo) == 0;
}
