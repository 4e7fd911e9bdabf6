/*-------------------------------------------------------------------------
 *
 * guc.c
 *	  The changestream.* configuration parameters.
 *
 * Contexts: "database" needs a restart (the worker binds to its database
 * once, at start).  Everything else reloads with pg_reload_conf(): the
 * worker re-reads it on SIGHUP and, when the archive's identity changes
 * (directory, slot, publication, conninfo), ends its session cleanly and
 * starts a new one.  Bad values are rejected by the GUC machinery's own
 * range checks or by the check hooks below, at load and at reload.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/parallel.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "replication/slot.h"
#include "utils/guc.h"
#include "utils/varlena.h"

#include "base/guc.h"
#include "base/guc_rejected.h"
#include "base/replica_url.h"
#include "base/shmem_status.h"

char	   *cs_directory = NULL;
char	   *cs_database = NULL;
char	   *cs_databases = NULL;
char	   *cs_read_database = NULL;
char	   *cs_slot_name = NULL;
char	   *cs_publication = NULL;
char	   *cs_conninfo = NULL;
char	   *cs_message_prefixes = NULL;
int			cs_retention_s = 0;
int			cs_status_interval_ms = 10000;
int			cs_flush_interval_ms = 200;
bool		cs_synchronous = false;
int			cs_segment_size_kb = 16 * 1024;
int			cs_segment_timeout_s = 300;
int			cs_compression_level = 3;
int			cs_snapshot_interval_s = 0;
int			cs_recapture_delay_s = 10;
bool		cs_preallocate_segments = true;
char	   *cs_replica_url = NULL;
char	   *cs_replica_endpoint = NULL;
char	   *cs_replica_region = NULL;
int			cs_replica_uri_style = CS_URI_STYLE_AUTO;
char	   *cs_replica_credentials = NULL;
char	   *cs_replica_profile = NULL;
char	   *cs_replica_ca_file = NULL;
int			cs_replica_max_backlog_kb = 1024 * 1024;
int			cs_replica_sync_interval_ms = 10000;
int			cs_replica_retention_s = -1;
int			cs_replica_retention_grace_s = 600;
int			cs_replica_durability = CS_REPLICA_DURABILITY_LOCAL;

static const struct config_enum_entry uri_style_options[] = {
	{"auto", CS_URI_STYLE_AUTO, false},
	{"path", CS_URI_STYLE_PATH, false},
	{"host", CS_URI_STYLE_HOST, false},
	{NULL, 0, false}
};

static const struct config_enum_entry durability_options[] = {
	{"local", CS_REPLICA_DURABILITY_LOCAL, false},
	{"remote", CS_REPLICA_DURABILITY_REMOTE, false},
	{NULL, 0, false}
};

/*
 * Retention deletes nothing without scheduled snapshots (docs/DESIGN.md
 * section 11).  Where the DBA sets one of the two with ALTER SYSTEM (the
 * check runs in a transaction there; at load and at reload it does not,
 * where the maintenance worker warns in the log), a WARNING says so when
 * the value set and the other one in force leave retention without
 * effect.  The other one may still change before the next reload:
 * changestream.stat_archiver's retention_effective says what is in force.
 */
static void
warn_retention_without_snapshots(int retention_s, int snapshot_interval_s)
{
	/*
	 * Only a client backend's own statement: a parallel worker restores the
	 * leader's settings one by one inside a transaction, and would see the
	 * other setting still at its default.
	 */
	if (!IsTransactionState() || IsParallelWorker() ||
		MyBackendType != B_BACKEND)
		return;
	if (retention_s <= 0 || snapshot_interval_s > 0)
		return;
	ereport(WARNING,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("changestream.retention deletes nothing while changestream.snapshot_interval is 0"),
			 errdetail("Retention keeps the newest snapshot before its window and all history after it; without scheduled snapshots that is each generation's opening snapshot."),
			 errhint("Set changestream.snapshot_interval as well, e.g. to a day, then reload.")));
}

static bool
check_retention(int *newval, void **extra, GucSource source)
{
	warn_retention_without_snapshots(*newval, cs_snapshot_interval_s);
	return true;
}

static bool
check_snapshot_interval(int *newval, void **extra, GucSource source)
{
	warn_retention_without_snapshots(cs_retention_s, *newval);
	return true;
}

/*
 * An archive directory must be absolute: a relative path would silently
 * depend on the server's working directory.
 */
static bool
check_directory(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	if (!is_absolute_path(*newval))
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errmsg("changestream.directory must be an absolute path");
		GUC_check_errhint("Set it to a directory the server's operating system user can write, for example '/var/lib/postgresql/changestream'.");
		return false;
	}
	if (strlen(*newval) > MAXPGPATH - 128)
	{
		GUC_check_errmsg("changestream.directory is too long");
		GUC_check_errdetail("It is %zu bytes; at most %d are allowed.",
							strlen(*newval), MAXPGPATH - 128);
		return false;
	}
	return true;
}

/* A slot name follows the rules of ReplicationSlotValidateName(). */
static bool
check_slot_name_value(char **newval)
{
	const char *p;

	if (*newval == NULL || (*newval)[0] == '\0' ||
		strlen(*newval) >= NAMEDATALEN)
	{
		GUC_check_errcode(ERRCODE_INVALID_NAME);
		GUC_check_errmsg("changestream.slot_name must be 1 to %d characters",
						 NAMEDATALEN - 1);
		GUC_check_errdetail("It is %zu characters.", *newval ? strlen(*newval) : 0);
		return false;
	}
	for (p = *newval; *p; p++)
	{
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
		{
			GUC_check_errcode(ERRCODE_INVALID_NAME);
			GUC_check_errmsg("changestream.slot_name \"%s\" contains invalid character", *newval);
			GUC_check_errhint("Replication slot names may only contain lower case letters, numbers, and the underscore character.");
			return false;
		}
	}
	return true;
}

static bool
check_slot_name(char **newval, void **extra, GucSource source)
{
	return cs_guc_checked("changestream.slot_name", check_slot_name_value(newval),
						  source, *newval, false);
}

/*
 * A publication or database name must fit in a NameData; the message
 * names the setting (GUC check hooks are not told which one they check).
 */
static bool
check_name(const char *setting, const char *value)
{
	if (value == NULL || value[0] == '\0' || strlen(value) >= NAMEDATALEN)
	{
		GUC_check_errcode(ERRCODE_INVALID_NAME);
		GUC_check_errmsg("%s must be 1 to %d characters", setting, NAMEDATALEN - 1);
		GUC_check_errdetail("It is %zu characters.", value ? strlen(value) : 0);
		return false;
	}
	return true;
}

static bool
check_database(char **newval, void **extra, GucSource source)
{
	return cs_guc_checked("changestream.database",
						  check_name("changestream.database", *newval),
						  source, *newval, true);
}

/*
 * databases_problem
 *	  Check a value for changestream.databases.  Returns NULL when it is a
 *	  valid list (empty, or 1 to CS_MAX_DATABASES distinct names of 1 to
 *	  NAMEDATALEN - 1 bytes), else a sentence saying what is wrong (for
 *	  GUC_check_errdetail).  Allocates in the current memory context.
 */
/*
 * Reject a list setting's value: errmsg names the setting, problem is the
 * sentence its parser gave, hint shows a valid list.  Returns false.
 */
static bool
list_rejected(const char *errmsg_text, const char *problem, const char *hint)
{
	GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
	GUC_check_errmsg("%s", errmsg_text);
	GUC_check_errdetail("%s", problem);
	GUC_check_errhint("%s", hint);
	return false;
}

static const char *
databases_problem(const char *value)
{
	char	   *copy;
	List	   *items = NIL;
	ListCell   *lc;

	if (value == NULL || value[0] == '\0')
		return NULL;
	copy = pstrdup(value);
	if (!SplitGUCList(copy, ',', &items))
		return "The list syntax is invalid (an unterminated double quote?).";
	if (list_length(items) > CS_MAX_DATABASES)
		return psprintf("It lists %d databases; at most %d can be archived.",
						list_length(items), CS_MAX_DATABASES);
	foreach(lc, items)
	{
		const char *item = lfirst(lc);
		ListCell   *other;

		if (item[0] == '\0' || strlen(item) >= NAMEDATALEN)
			return psprintf("A listed name is empty or longer than %d bytes.",
							NAMEDATALEN - 1);
		for_each_cell(other, items, lnext(items, lc))
			if (strcmp(item, (const char *) lfirst(other)) == 0)
				return psprintf("Database \"%s\" is listed twice.", item);
	}
	return NULL;
}

static bool
check_databases_value(char **newval)
{
	const char *problem = databases_problem(*newval);

	if (problem != NULL)
		return list_rejected("changestream.databases is not a valid list of databases",
							 problem,
							 "List database names separated by commas, for example 'app, billing'; double-quote a name with a comma or upper case letters in it.");
	return true;
}

static bool
check_databases(char **newval, void **extra, GucSource source)
{
	return cs_guc_checked("changestream.databases",
						  check_databases_value(newval), source, *newval,
						  false);
}

/* changestream.read_database: empty, or a database name */
static bool
check_read_database(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	return check_name("changestream.read_database", *newval);
}

static bool
check_publication(char **newval, void **extra, GucSource source)
{
	return cs_guc_checked("changestream.publication",
						  check_name("changestream.publication", *newval),
						  source, *newval, false);
}

/*
 * message_prefixes_problem
 *	  Check a value for changestream.message_prefixes.  Returns NULL when
 *	  it is a valid list, else a sentence saying what is wrong (for
 *	  GUC_check_errdetail).  Allocates in the current memory context; never
 *	  raises.
 */
static const char *
message_prefixes_problem(const char *value)
{
	char	   *copy;
	List	   *items = NIL;
	ListCell   *lc;

	if (value == NULL || value[0] == '\0')
		return NULL;
	copy = pstrdup(value);
	if (!SplitGUCList(copy, ',', &items))
		return "The list syntax is invalid (an unterminated double quote?).";
	foreach(lc, items)
	{
		const char *item = lfirst(lc);

		if (item[0] == '\0')
			return "A listed prefix is empty.";
	}
	return NULL;
}

/*
 * changestream.message_prefixes: a comma-separated list of prefixes
 * (message_filter.c applies it).
 */
static bool
check_message_prefixes_value(char **newval)
{
	const char *problem = message_prefixes_problem(*newval);

	if (problem != NULL)
		return list_rejected("changestream.message_prefixes is not a valid list of prefixes",
							 problem,
							 "List prefixes separated by commas, for example 'audit, app.'; '*' archives every message, an empty list none.");
	return true;
}

static bool
check_message_prefixes(char **newval, void **extra, GucSource source)
{
	return cs_guc_checked("changestream.message_prefixes",
						  check_message_prefixes_value(newval), source, *newval,
						  false);
}

/*
 * The replica's settings (replica_url.c parses them; docs/DESIGN.md
 * section 14).  Each hook reports a bad value with the sentence the parser
 * gives, naming the setting.
 */
static bool
replica_rejected(const char *setting, const char *problem, const char *hint)
{
	GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
	GUC_check_errmsg("invalid value for %s", setting);
	GUC_check_errdetail("%s", problem);
	GUC_check_errhint("%s", hint);
	return false;
}

static bool
check_replica_url_value(const char *value)
{
	CsReplicaUrl url;
	const char *problem;

	if (value == NULL || value[0] == '\0')
		return true;
	problem = cs_replica_url_parse(value, &url);
	if (problem != NULL)
		return replica_rejected("changestream.replica_url", problem,
								"Write s3://bucket or s3://bucket/prefix, for example 's3://backups/db1'; empty means no replica.");
	return true;
}

static bool
check_replica_url(char **newval, void **extra, GucSource source)
{
	return cs_guc_checked("changestream.replica_url",
						  check_replica_url_value(*newval), source, *newval,
						  false);
}

static bool
check_replica_endpoint_value(const char *value)
{
	CsReplicaEndpoint endpoint;
	const char *problem;

	if (value == NULL || value[0] == '\0')
		return true;
	problem = cs_replica_endpoint_parse(value, &endpoint);
	if (problem != NULL)
		return replica_rejected("changestream.replica_endpoint", problem,
								"Write the object store's address as http://host:port or https://host, for example 'http://127.0.0.1:7480'; empty means AWS for the region.");
	return true;
}

static bool
check_replica_endpoint(char **newval, void **extra, GucSource source)
{
	return cs_guc_checked("changestream.replica_endpoint",
						  check_replica_endpoint_value(*newval), source,
						  *newval, false);
}

static bool
check_replica_region_value(const char *value)
{
	const char *problem = cs_replica_region_problem(value ? value : "");

	if (problem != NULL)
		return replica_rejected("changestream.replica_region", problem,
								"Use the bucket's region, for example 'us-east-1' or 'eu-central-1'.");
	return true;
}

static bool
check_replica_region(char **newval, void **extra, GucSource source)
{
	return cs_guc_checked("changestream.replica_region",
						  check_replica_region_value(*newval), source,
						  *newval, false);
}

/* A credentials file path is absolute, or the word env. */
static bool
check_replica_credentials_value(const char *value)
{
	if (value == NULL || value[0] == '\0' || strcmp(value, "env") == 0)
		return true;
	if (!is_absolute_path(value) || strlen(value) >= MAXPGPATH)
		return replica_rejected("changestream.replica_credentials",
								"It is neither \"env\" nor an absolute path shorter than MAXPGPATH.",
								"Name a file in the AWS shared credentials format by its absolute path (mode 0600, owned by the server's user), or write 'env' to use the server's AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.");
	return true;
}

static bool
check_replica_credentials(char **newval, void **extra, GucSource source)
{
	return cs_guc_checked("changestream.replica_credentials",
						  check_replica_credentials_value(*newval), source,
						  *newval, false);
}

/* A profile is the name in a credentials file's [section] header. */
static bool
check_replica_profile_value(const char *value)
{
	const char *p;

	if (value == NULL || value[0] == '\0' || strlen(value) > 128)
		return replica_rejected("changestream.replica_profile",
								"It must be 1 to 128 characters.",
								"Name a [profile] section of the credentials file; the default is 'default'.");
	for (p = value; *p; p++)
		if ((unsigned char) *p < 0x20 || *p == ']' || *p == '[' || *p == 0x7f)
			return replica_rejected("changestream.replica_profile",
									"It holds a control character or a bracket.",
									"Name a [profile] section of the credentials file; the default is 'default'.");
	return true;
}

static bool
check_replica_profile(char **newval, void **extra, GucSource source)
{
	return cs_guc_checked("changestream.replica_profile",
						  check_replica_profile_value(*newval), source,
						  *newval, false);
}

static bool
check_replica_ca_file_value(const char *value)
{
	if (value == NULL || value[0] == '\0')
		return true;
	if (!is_absolute_path(value) || strlen(value) >= MAXPGPATH)
		return replica_rejected("changestream.replica_ca_file",
								"It is not an absolute path shorter than MAXPGPATH.",
								"Name a PEM file of certificate authorities by its absolute path, or leave it empty to use the system's.");
	return true;
}

static bool
check_replica_ca_file(char **newval, void **extra, GucSource source)
{
	return cs_guc_checked("changestream.replica_ca_file",
						  check_replica_ca_file_value(*newval), source,
						  *newval, false);
}

/*
 * cs_define_gucs
 *	  Define every changestream.* parameter and reserve the prefix, so a
 *	  misspelt changestream.* setting is reported instead of ignored.
 *	  Called from _PG_init(); mirrors contrib/pg_stat_statements.
 */
void
cs_define_gucs(void)
{
	DefineCustomStringVariable("changestream.directory",
							   "Directory the change stream is archived in.",
							   "Empty disables archiving.",
							   &cs_directory, "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   check_directory, NULL, NULL);
	DefineCustomStringVariable("changestream.database",
							   "Database archived at the root of changestream.directory.",
							   "Archived alone when changestream.databases is empty.",
							   &cs_database, "postgres",
							   PGC_POSTMASTER, 0,
							   check_database, NULL, NULL);
	DefineCustomStringVariable("changestream.databases",
							   "Databases whose changes are archived, each in its own archive tree.",
							   "A comma-separated list; empty archives changestream.database alone.  Databases other than changestream.database are archived in changestream.directory/databases/<name>.",
							   &cs_databases, "",
							   PGC_SIGHUP, GUC_LIST_INPUT,
							   check_databases, NULL, NULL);
	DefineCustomStringVariable("changestream.read_database",
							   "Database whose archive the archive functions read in this session.",
							   "Empty reads the current database's archive.  Another database's needs superuser or pg_monitor.",
							   &cs_read_database, "",
							   PGC_USERSET, 0,
							   check_read_database, NULL, NULL);
	DefineCustomStringVariable("changestream.slot_name",
							   "Logical replication slot the archiver consumes.",
							   "Created by the archiver when it does not exist.",
							   &cs_slot_name, "changestream",
							   PGC_SIGHUP, 0,
							   check_slot_name, NULL, NULL);
	DefineCustomStringVariable("changestream.publication",
							   "Publication whose tables are archived.",
							   "Create it with CREATE PUBLICATION.",
							   &cs_publication, "changestream",
							   PGC_SIGHUP, 0,
							   check_publication, NULL, NULL);
	DefineCustomStringVariable("changestream.conninfo",
							   "Connection string of the server to archive.",
							   "Empty means the local server over its Unix socket.",
							   &cs_conninfo, "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("changestream.message_prefixes",
							   "Prefixes of the logical decoding messages (pg_logical_emit_message()) that are archived.",
							   "A comma-separated list; empty archives none, '*' archives all.",
							   &cs_message_prefixes, "",
							   PGC_SIGHUP, GUC_LIST_INPUT,
							   check_message_prefixes, NULL, NULL);
	DefineCustomIntVariable("changestream.status_interval",
							"Maximum time between standby status updates.",
							NULL,
							&cs_status_interval_ms, 10000, 100, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("changestream.flush_interval",
							"Maximum time received data waits before it is fsynced and acknowledged.",
							"Once the stream is idle it flushes after a group commit window of 5 to 20 ms, which follows the commit rate, and never longer than this.",
							&cs_flush_interval_ms, 200, 1, 60 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("changestream.synchronous",
							 "Make each commit durable and acknowledge it at once, for synchronous_standby_names.",
							 "Off: commits share a group commit window of 5 to 20 ms and acknowledgements are paced.  On: the archiver fdatasyncs as soon as a commit has arrived and the socket is drained, reports right after, and records keepalive positions at once, so that commits waiting for it are released as soon as they are durable.",
							 &cs_synchronous, false,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("changestream.segment_size",
							"Size at which a changestream segment is sealed and a new one started.",
							"Segments rotate only at transaction boundaries.",
							&cs_segment_size_kb, 16 * 1024, 64, 1024 * 1024,
							PGC_SIGHUP, GUC_UNIT_KB,
							NULL, NULL, NULL);
	DefineCustomIntVariable("changestream.segment_timeout",
							"Age at which a changestream segment holding data is sealed.",
							"0 disables time-based rotation.",
							&cs_segment_timeout_s, 300, 0, 7 * 24 * 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("changestream.compression_level",
							"zlib level for sealed changestream segments and snapshots (0 stores them uncompressed in gzip framing).",
							"The default, 3, costs about 40% of level 6's CPU for about 12% more bytes: the maintenance worker runs on the primary, beside its workload.",
							&cs_compression_level, 3, 0, 9,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("changestream.preallocate_segments",
							 "Zero-fill each new changestream segment ahead of time, as PostgreSQL does its WAL segments.",
							 "The group commit fdatasync then overwrites blocks instead of growing the file.  Turn it off on copy-on-write file systems.",
							 &cs_preallocate_segments, true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("changestream.snapshot_interval",
							"Time between scheduled snapshots of the published tables.",
							"0 disables scheduled snapshots; every generation still opens with one.",
							&cs_snapshot_interval_s, 0, 0, 365 * 24 * 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							check_snapshot_interval, NULL, NULL);

	DefineCustomIntVariable("changestream.recapture_delay",
							"Quiet time after a schema change that changed rows without archived changes before a snapshot re-captures the tables.",
							"A snapshot starts once no such command has come for this long, or six times this long after the first; -1 disables the automatic snapshot.",
							&cs_recapture_delay_s, 10, -1, 24 * 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("changestream.retention",
							"How long archived history stays restorable; older files are deleted.",
							"0 keeps everything.  Needs changestream.snapshot_interval to free anything.",
							&cs_retention_s, 0, 0, 10 * 365 * 24 * 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							check_retention, NULL, NULL);

	DefineCustomStringVariable("changestream.replica_url",
							   "Bucket and prefix of the archive's replica, as s3://bucket/prefix.",
							   "Empty means no replica.",
							   &cs_replica_url, "",
							   PGC_SIGHUP, 0,
							   check_replica_url, NULL, NULL);
	DefineCustomStringVariable("changestream.replica_endpoint",
							   "Address of the S3-compatible object store, as http[s]://host[:port].",
							   "Empty means AWS S3 for changestream.replica_region.",
							   &cs_replica_endpoint, "",
							   PGC_SIGHUP, 0,
							   check_replica_endpoint, NULL, NULL);
	DefineCustomStringVariable("changestream.replica_region",
							   "Region of the replica's bucket, used in request signatures.",
							   NULL,
							   &cs_replica_region, "us-east-1",
							   PGC_SIGHUP, 0,
							   check_replica_region, NULL, NULL);
	DefineCustomEnumVariable("changestream.replica_uri_style",
							 "How requests name the bucket: in the path or in the host name.",
							 "auto uses the path for an IP address, localhost or an endpoint with an explicit port, else the host name.",
							 &cs_replica_uri_style, CS_URI_STYLE_AUTO,
							 uri_style_options,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);
	DefineCustomStringVariable("changestream.replica_credentials",
							   "Path of the replica's AWS shared credentials file, or env for the server's AWS_* environment variables.",
							   "The file must have mode 0600 or stricter and belong to the server's user; it is re-read when it changes.",
							   &cs_replica_credentials, "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   check_replica_credentials, NULL, NULL);
	DefineCustomStringVariable("changestream.replica_profile",
							   "Profile of the credentials file to use.",
							   NULL,
							   &cs_replica_profile, "default",
							   PGC_SIGHUP, 0,
							   check_replica_profile, NULL, NULL);
	DefineCustomStringVariable("changestream.replica_ca_file",
							   "PEM file of the certificate authorities trusted for the object store.",
							   "Empty uses the system's.",
							   &cs_replica_ca_file, "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   check_replica_ca_file, NULL, NULL);
	DefineCustomIntVariable("changestream.replica_max_backlog",
							"Bytes of finished archive files not yet in the replica's bucket past which the archiver stops consuming the slot.",
							"It goes on once the uploader has brought the backlog under the limit; meanwhile the server keeps the WAL in the slot (max_slot_wal_keep_size bounds it).  0 means no limit.",
							&cs_replica_max_backlog_kb, 1024 * 1024, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_KB,
							NULL, NULL, NULL);
	DefineCustomIntVariable("changestream.replica_sync_interval",
							"Time between uploads of the active segment's new durable bytes to the replica's bucket.",
							"0 uploads sealed segments only.  With changestream.replica_durability = remote the bytes a commit waits for go up at once.",
							&cs_replica_sync_interval_ms, 10000, 0, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("changestream.replica_retention",
							"How long the history in the replica's bucket stays restorable; older objects are deleted.",
							"-1 (the default) means the same as changestream.retention; 0 keeps everything.",
							&cs_replica_retention_s, -1, -1, 10 * 365 * 24 * 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("changestream.replica_retention_grace",
							"Time between the replica's retention publishing a new horizon and deleting the objects below it.",
							"Readers of the bucket on other machines that listed it before have this long to finish.",
							&cs_replica_retention_grace_s, 600, 1, 7 * 24 * 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomEnumVariable("changestream.replica_durability",
							 "Where a change must be before the archiver confirms it to the server: local (the archive's fsync) or remote (also in the replica's bucket).",
							 "remote confirms the lesser of the local and the bucket's durable positions, so with synchronous_standby_names naming the archiver a commit returns once its change is in the bucket.",
							 &cs_replica_durability, CS_REPLICA_DURABILITY_LOCAL,
							 durability_options,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	MarkGUCPrefixReserved("changestream");
}
