/*-------------------------------------------------------------------------
 *
 * guc_rejected.c
 *	  A changestream.* value set in the configuration file that its check
 *	  hook rejects while the library loads at server start
 *	  (shared_preload_libraries) is reported by PostgreSQL as a WARNING,
 *	  and the setting keeps its default: the archiver would then archive
 *	  the default database or publication without saying so.  The check
 *	  hooks report each result here; a rejection at start is remembered
 *	  (the archiver is forked from the postmaster and inherits it), and
 *	  the archiver refuses to start a session while it stands.  Accepting a
 *	  value for that setting from the configuration file later (a reload,
 *	  in the archiver's own process) clears it, except for
 *	  changestream.database, which needs a restart.
 *
 * Source: define_custom_variable() in src/backend/utils/misc/guc.c, which
 * applies a placeholder's value with elevel WARNING and keeps the default
 * when it fails.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"

#include "base/guc_rejected.h"

static char rejected_setting[64];
static char rejected_value[128];

/*
 * cs_guc_checked
 *	  Called by a check hook with its verdict (ok) for value of setting
 *	  from source; returns ok, so a hook can end with
 *	  "return cs_guc_checked(...)".  A good value of a restart_only
 *	  setting does not clear a rejection: it only applies at the next
 *	  start.  Never raises.
 */
bool
cs_guc_checked(const char *setting, bool ok, GucSource source,
			   const char *value, bool restart_only)
{
	if (source != PGC_S_FILE)
		return ok;
	if (!ok && process_shared_preload_libraries_in_progress &&
		rejected_setting[0] == '\0')
	{
		strlcpy(rejected_setting, setting, sizeof(rejected_setting));
		/* a replica_* value may hold a secret (user:password@ in a URL) */
		if (strncmp(setting, "changestream.replica_", 21) == 0)
			rejected_value[0] = '\0';
		else
			strlcpy(rejected_value, value ? value : "", sizeof(rejected_value));
	}
	else if (ok && !restart_only && strcmp(rejected_setting, setting) == 0)
		rejected_setting[0] = '\0';
	return ok;
}

/*
 * cs_guc_require_accepted
 *	  Raises config_file_error (class F0), naming the setting and the
 *	  value (not for changestream.replica_*, whose values may hold a
 *	  secret), if the configuration file set a changestream.* value that was
 *	  rejected at server start and not replaced since.
 */
void
cs_guc_require_accepted(void)
{
	if (rejected_setting[0] != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("%s was rejected at server start, so it has its default value",
						rejected_setting),
				 rejected_value[0] != '\0' ?
				 errdetail("The configuration file sets it to \"%s\"; the server log at start says why it was rejected.",
						   rejected_value) :
				 errdetail("The server log at start says why it was rejected (the values of changestream.replica_* settings are not repeated)."),
				 errhint("Fix %s in the configuration file, then reload the configuration (restart the server for changestream.database).",
						 rejected_setting)));
}
