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

#include "base/archive_config.h"
#include "base/guc.h"

/* a setting's value, "" when it is unset */
static char *
setting_copy(const char *value)
{
	return pstrdup(value != NULL ? value : "");
}

/*
 * cs_archive_config_current
 *	  Returns a copy of the current settings, palloc'd in CurrentMemoryContext
 *	  (the caller owns it; nothing in it changes on a reload).  Raises
 *	  only out of memory.
 */
CsArchiveConfig *
cs_archive_config_current(void)
{
	CsArchiveConfig *config = palloc(sizeof(CsArchiveConfig));

	config->directory = setting_copy(cs_directory);
	config->database = setting_copy(cs_database);
	config->slot_name = setting_copy(cs_slot_name);
	config->publication = setting_copy(cs_publication);
	config->conninfo = setting_copy(cs_conninfo);
	return config;
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
