/*-------------------------------------------------------------------------
 *
 * walsender_conn.c
 *	  The archiver's replication connection, through the server's own
 *	  walsender client, libpqwalreceiver: connect, IDENTIFY_SYSTEM, slot
 *	  inspection and creation, the publication check, START_REPLICATION and
 *	  standby status updates.
 *
 *	  libpqwalreceiver's walrcv_startstreaming() cannot ask pgoutput for
 *	  logical decoding messages ("messages 'true'"), so START_REPLICATION is
 *	  sent with walrcv_exec(), which returns WALRCV_OK_COPY_BOTH; from then
 *	  on walrcv_receive() and walrcv_send() work as they do for the apply
 *	  worker (src/backend/replication/logical/worker.c).
 *
 * Sources: "Streaming Replication Protocol" (protocol-replication) of the
 * PostgreSQL documentation for START_REPLICATION, the XLogData, keepalive
 * and standby status update messages; pgoutput's options in
 * src/backend/replication/pgoutput/pgoutput.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "libpq/pqformat.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "replication/walreceiver.h"
#include "utils/builtins.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "archive/schema_history.h"
#include "base/archive_config.h"
#include "base/conninfo_secret.h"
#include "worker/walsender_conn.h"
#include "base/compat.h"

/* session settings pinned so that text values never depend on them */
static const struct
{
	const char *name;
	const char *value;
}			pinned_settings[] = {
#define CS_PINNED_SETTING(name, value) {name, value},
#include "base/pinned_settings.h"
#undef CS_PINNED_SETTING
};

/*
 * cs_session_settings
 *	  The pinned walsender session settings as "name=value; ...", recorded
 *	  in each generation's identity.
 *	  Returns const char * (palloc'd).
 */
const char *
cs_session_settings(void)
{
	StringInfoData buf;
	int			i;

	initStringInfo(&buf);
	for (i = 0; i < lengthof(pinned_settings); i++)
		appendStringInfo(&buf, "%s%s=%s", i > 0 ? "; " : "",
						 pinned_settings[i].name, pinned_settings[i].value);
	return buf.data;
}

static void
append_conn_value(StringInfo buf, const char *key, const char *value)
{
	const char *p;

	appendStringInfo(buf, "%s%s='", buf->len > 0 ? " " : "", key);
	for (p = value; *p; p++)
	{
		if (*p == '\'' || *p == '\\')
			appendStringInfoChar(buf, '\\');
		appendStringInfoChar(buf, *p);
	}
	appendStringInfoChar(buf, '\'');
}

/*
 * The conninfo to use: the local server through the first Unix socket
 * directory as the bootstrap superuser, overridden by the keywords of
 * changestream.conninfo, in changestream.database.  A postgres:// URI is
 * used as given.
 */
static char *
build_conninfo(const CsArchiveConfig *config)
{
	StringInfoData buf;

	initStringInfo(&buf);
	if (strncmp(config->conninfo, "postgres://", 11) == 0 ||
		strncmp(config->conninfo, "postgresql://", 13) == 0)
		return pstrdup(config->conninfo);

	/*
	 * The local server's socket, port and bootstrap superuser first;
	 * changestream.conninfo's keywords override them (the last occurrence
	 * of a keyword wins); changestream.database always names the database.
	 */
	if (Unix_socket_directories != NULL && Unix_socket_directories[0] != '\0')
	{
		char	   *dirs = pstrdup(Unix_socket_directories);
		char	   *comma = strchr(dirs, ',');

		if (comma)
			*comma = '\0';
		append_conn_value(&buf, "host", dirs);
	}
	else
		append_conn_value(&buf, "host", "127.0.0.1");
	appendStringInfo(&buf, " port=%d", PostPortNumber);
	StartTransactionCommand();
	append_conn_value(&buf, "user", GetUserNameFromId(BOOTSTRAP_SUPERUSERID, false));
	CommitTransactionCommand();
	if (!cs_archive_config_local(config))
		appendStringInfo(&buf, " %s", config->conninfo);
	append_conn_value(&buf, "dbname", config->database);
	return buf.data;
}

/*
 * cs_exec
 *	  Run one command on a replication connection and check that it
 *	  returned expect (WALRCV_OK_COMMAND, WALRCV_OK_COPY_BOTH, ...); every
 *	  command changestream sends goes through here, as libpqrcv_exec()
 *	  is the one way libpqwalreceiver runs one.  Returns the result, which
 *	  the caller clears with walrcv_clear_result().  Raises class 08 when
 *	  the command fails.
 */
WalRcvExecResult *
cs_exec(WalReceiverConn *conn, const char *sql, int expect)
{
	WalRcvExecResult *res = walrcv_exec(conn, sql, 0, NULL);

	if (res->status != (WalRcvExecStatus) expect)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_EXCEPTION),
				 errmsg("could not run command on the replication connection: %s",
						res->err ? res->err : "unexpected result"),
				 errdetail("The command was: %s", sql)));
	return res;
}

/*
 * The rows of a query of ncols text columns on conn, in the current memory
 * context; the caller holds a transaction (libpqwalreceiver builds the
 * result's tuple descriptor from the catalogs).
 */
static List *
read_rows(WalReceiverConn *conn, const char *sql, int ncols)
{
	Oid		   *types = palloc(sizeof(Oid) * ncols);
	WalRcvExecResult *res;
	TupleTableSlot *slot;
	List	   *rows = NIL;
	int			i;

	for (i = 0; i < ncols; i++)
		types[i] = TEXTOID;
	res = walrcv_exec(conn, sql, ncols, types);
	if (res->status != WALRCV_OK_TUPLES)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_EXCEPTION),
				 errmsg("could not run command on the replication connection: %s",
						res->err ? res->err : "unexpected result"),
				 errdetail("The command was: %s", sql)));
	slot = MakeSingleTupleTableSlot(res->tupledesc, &TTSOpsMinimalTuple);
	while (tuplestore_gettupleslot(res->tuplestore, true, false, slot))
	{
		char	  **row = palloc(sizeof(char *) * ncols);

		for (i = 0; i < ncols; i++)
		{
			bool		isnull;
			Datum		d = slot_getattr(slot, i + 1, &isnull);

			row[i] = isnull ? NULL : TextDatumGetCString(d);
		}
		rows = lappend(rows, row);
	}
	ExecDropSingleTupleTableSlot(slot);
	walrcv_clear_result(res);
	pfree(types);
	return rows;
}

/*
 * cs_exec_rows
 *	  Run a query of ncols columns on a replication connection and return
 *	  its rows: a List of char *[ncols], every column as text (NULL for
 *	  SQL NULL), palloc'd in the caller's memory context.  The result
 *	  reader for every query changestream runs, as libpqrcv_processTuples()
 *	  is libpqwalreceiver's.  The caller holds no transaction: the catalog
 *	  lookups of the result's types run in a transaction of their own, as
 *	  get_subscription_list() in src/backend/replication/logical/launcher.c
 *	  reads the catalog and returns its result in the caller's context.
 *	  Raises as cs_exec().
 */
List *
cs_exec_rows(WalReceiverConn *conn, const char *sql, int ncols)
{
	MemoryContext caller_cxt = CurrentMemoryContext;
	List	   *rows;

	Assert(!IsTransactionState());
	StartTransactionCommand();
	MemoryContextSwitchTo(caller_cxt);
	rows = read_rows(conn, sql, ncols);
	CommitTransactionCommand();
	MemoryContextSwitchTo(caller_cxt);
	return rows;
}

/*
 * walrcv_connect(), with its own errors re-raised with any password of
 * changestream.conninfo masked: libpqwalreceiver raises some libpq errors
 * itself (with libpq's text, which may quote the connection string, in
 * errdetail) instead of returning them in *err.
 */
static WalReceiverConn *
connect_redacted(const CsArchiveConfig *config, const char *conninfo,
				 char **err)
{
	MemoryContext caller_cxt = CurrentMemoryContext;
	WalReceiverConn *conn = NULL;

	PG_TRY();
	{
		conn = cs_walrcv_connect(conninfo, "changestream", err);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(caller_cxt);
		edata = CopyErrorData();
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not open a replication connection: %s",
						cs_redact_password(edata->message, config->conninfo)),
				 edata->detail ?
				 errdetail_internal("%s", cs_redact_password(edata->detail, config->conninfo)) : 0,
				 errhint("Check changestream.conninfo, and that pg_hba.conf allows \"replication\" connections for the connecting user.")));
	}
	PG_END_TRY();
	return conn;
}

/*
 * cs_connect
 *	  Open the logical replication connection of config (its conninfo and
 *	  database: build_conninfo()), run IDENTIFY_SYSTEM and pin
 *	  DateStyle, IntervalStyle, TimeZone and extra_float_digits for the
 *	  walsender session.  Raises connection_failure with a hint when the
 *	  server cannot be reached, connection_exception when a command fails.
 *	  Returns WalReceiverConn *.
 */
WalReceiverConn *
cs_connect(const CsArchiveConfig *config, uint64 *system_identifier,
		   uint32 *timeline)
{
	char	   *conninfo = build_conninfo(config);
	char	   *err = NULL;
	WalReceiverConn *conn;
	char	   *sysid;
	TimeLineID	tli;
	int			i;

	conn = connect_redacted(config, conninfo, &err);
	if (conn == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not open a replication connection: %s",
						cs_redact_password(err ? err : "unknown error", config->conninfo)),
				 errhint("Check changestream.conninfo, and that pg_hba.conf allows \"replication\" connections for the connecting user.")));

	sysid = cs_walrcv_identify_system(conn, &tli);
	*system_identifier = strtou64(sysid, NULL, 10);
	*timeline = tli;

	for (i = 0; i < lengthof(pinned_settings); i++)
		walrcv_clear_result(cs_exec(conn,
									psprintf("SET %s = %s", pinned_settings[i].name,
											 quote_literal_cstr(pinned_settings[i].value)),
									WALRCV_OK_COMMAND));
	return conn;
}

/*
 * cs_disconnect
 *	  Close the connection (PQfinish; never raises).
 */
void
cs_disconnect(WalReceiverConn *conn)
{
	if (conn != NULL)
		walrcv_disconnect(conn);
}

/*
 * cs_get_slot
 *	  Look up config's slot in pg_replication_slots on the server.
 *	  Raises duplicate_object if a slot of that name exists but is
 *	  physical, or logical for another plugin or database.
 */
void
cs_get_slot(const CsArchiveConfig *config, WalReceiverConn *conn,
			CsSlotInfo *info)
{
	List	   *rows;
	char	  **row;

	memset(info, 0, sizeof(*info));
	rows = cs_exec_rows(conn,
						psprintf("SELECT slot_type, coalesce(plugin, ''), coalesce(database::text, ''), "
								 "coalesce(confirmed_flush_lsn::text, '0/0'), coalesce(wal_status, ''), "
								 "active::text, coalesce(active_pid, 0)::text "
								 "FROM pg_catalog.pg_replication_slots WHERE slot_name = %s",
								 quote_literal_cstr(config->slot_name)),
						7);
	if (rows != NIL)
	{
		row = linitial(rows);
		if (strcmp(row[0], "logical") != 0 || strcmp(row[1], "pgoutput") != 0 ||
			strcmp(row[2], config->database) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_OBJECT),
					 errmsg("replication slot \"%s\" exists but is not a pgoutput slot of database \"%s\"",
							config->slot_name, config->database),
					 errdetail("It is a %s slot, plugin \"%s\", database \"%s\".",
							   row[0], row[1], row[2]),
					 errhint("Drop it, or set changestream.slot_name to another name.")));
		info->exists = true;
		info->lost = strcmp(row[4], "lost") == 0;
		info->active = strcmp(row[5], "true") == 0;
		info->active_pid = (int) strtol(row[6], NULL, 10);
		info->confirmed_flush = DatumGetLSN(DirectFunctionCall1(pg_lsn_in,
																CStringGetDatum(row[3])));
	}
}

/*
 * cs_timeline_switch_lsn
 *	  Where timeline old_tli ended in the history of the server's timeline
 *	  tli, from TIMELINE_HISTORY (the command a walreceiver fetches it
 *	  with; lines "<timeline> <switch LSN> <reason>", as in the server's
 *	  pg_wal/<tli>.history): true with *switch_lsn set when old_tli is an
 *	  ancestor of tli, false when it is not.  The history comes from the
 *	  network: a line that does not parse, or timelines that do not
 *	  increase below tli, raise 08P01 (protocol_violation).
 */
bool
cs_timeline_switch_lsn(WalReceiverConn *conn, uint32 tli, uint32 old_tli,
					   XLogRecPtr *switch_lsn)
{
	char	   *filename;
	char	   *content;
	int			size;
	char	   *line;
	char	   *next;
	uint32		prev = 0;
	bool		found = false;

	walrcv_readtimelinehistoryfile(conn, tli, &filename, &content, &size);
	for (line = pnstrdup(content, size); line != NULL; line = next)
	{
		uint32		t,
					hi,
					lo;

		next = strchr(line, '\n');
		if (next != NULL)
			*next++ = '\0';
		line += strspn(line, " \t\r");
		if (*line == '\0' || *line == '#')
			continue;
		if (sscanf(line, "%u %X/%X", &t, &hi, &lo) != 3 || t <= prev || t >= tli)
			ereport(ERROR,
					(errcode(ERRCODE_PROTOCOL_VIOLATION),
					 errmsg("the server's history of timeline %u is malformed",
							tli),
					 errdetail("File \"%s\", line \"%s\".", filename, line)));
		if (t == old_tli)
		{
			*switch_lsn = ((uint64) hi << 32) | lo;
			found = true;
		}
		prev = t;
	}
	return found;
}

/*
 * cs_drop_slot
 *	  DROP_REPLICATION_SLOT <config's slot>; used for an invalidated slot.
 */
void
cs_drop_slot(const CsArchiveConfig *config, WalReceiverConn *conn)
{
	char	   *sql = psprintf("DROP_REPLICATION_SLOT %s",
							   quote_identifier(config->slot_name));

	walrcv_clear_result(cs_exec(conn, sql, WALRCV_OK_COMMAND));
}

/*
 * cs_check_publication
 *	  Raises undefined_object, with the CREATE PUBLICATION to run,
 *	  when config's publication does not exist in its database.
 */
void
cs_check_publication(const CsArchiveConfig *config, WalReceiverConn *conn)
{
	bool		found;

	found = cs_exec_rows(conn,
						 psprintf("SELECT pubname::text FROM pg_catalog.pg_publication WHERE pubname = %s",
								  quote_literal_cstr(config->publication)),
						 1) != NIL;
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("publication \"%s\" does not exist in database \"%s\"",
						config->publication, config->database),
				 errhint("Create it, for example: CREATE PUBLICATION %s FOR TABLE <table>, ...; changestream retries until it exists.",
						 quote_identifier(config->publication))));
}

/*
 * cs_plugin_options
 *	  The pgoutput options the archiver streams config's publication with,
 *	  as they appear in START_REPLICATION and in the generation identity.
 *	  Returns const char * (static).
 */
const char *
cs_plugin_options(const CsArchiveConfig *config)
{
	static char buf[NAMEDATALEN * 2 + 128];
	char	   *pub = quote_literal_cstr(quote_identifier(config->publication));

	snprintf(buf, sizeof(buf),
			 "proto_version '1', publication_names %s, messages 'true'", pub);
	return buf;
}

/*
 * The query telling whether the extension's publication changestream_ddl
 * exists and publishes the extension's own ddl_history table (a
 * publication or table of those names made by anyone else is not taken):
 * one row of the table's OID (NULL when not) and the server's WAL position
 * now, both as text.  Shared by the check on the replication connection
 * and the one through SPI (archiver.c).
 */
const char *
cs_ddl_publication_sql(void)
{
	return "SELECT (SELECT pr.prrelid FROM pg_catalog.pg_publication p"
		" JOIN pg_catalog.pg_publication_rel pr ON pr.prpubid = p.oid"
		" JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass"
		" AND d.objid = pr.prrelid AND d.deptype = 'e'"
		" JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'changestream'"
		" JOIN pg_catalog.pg_class c ON c.oid = pr.prrelid AND c.relname = '" CS_DDL_TABLE "'"
		" AND c.relnamespace = e.extnamespace"
		" WHERE p.pubname = '" CS_DDL_PUBLICATION "' LIMIT 1)::pg_catalog.text,"
		" (CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()"
		" ELSE pg_catalog.pg_current_wal_lsn() END)::pg_catalog.text";
}

/*
 * cs_ddl_oid_in
 *	  The OID text of cs_ddl_publication_sql()'s first column (NULL:
 *	  InvalidOid).  Errors: 08P01 (protocol_violation) when
 *	  the server answered something else.
 */
Oid
cs_ddl_oid_in(const char *text)
{
	char	   *end;
	unsigned long oid;

	if (text == NULL)
		return InvalidOid;
	errno = 0;
	oid = strtoul(text, &end, 10);
	if (errno != 0 || end == text || *end != '\0' || oid > PG_UINT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("the check of publication \"%s\" returned \"%s\", not an OID",
						CS_DDL_PUBLICATION, text)));
	return (Oid) oid;
}

/*
 * cs_ddl_publication_exists
 *	  Runs cs_ddl_publication_sql() on conn (idle, before START_REPLICATION):
 *	  returns whether the extension's publication is there, and sets
 *	  *history_oid to the OID of its ddl_history table (InvalidOid when
 *	  not) and *server_lsn to the server's WAL position read with it.
 *	  Raises as cs_exec(); 08P01 when the server answers other than one
 *	  row.
 */
bool
cs_ddl_publication_exists(WalReceiverConn *conn, XLogRecPtr *server_lsn,
						  Oid *history_oid)
{
	List	   *rows;
	char	  **row;

	rows = cs_exec_rows(conn, cs_ddl_publication_sql(), 2);
	if (list_length(rows) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("the check of publication \"%s\" returned %d rows, not one",
						CS_DDL_PUBLICATION, list_length(rows))));
	row = linitial(rows);
	*history_oid = cs_ddl_oid_in(row[0]);
	*server_lsn = row[1] == NULL ? InvalidXLogRecPtr :
		DatumGetLSN(DirectFunctionCall1(pg_lsn_in, CStringGetDatum(row[1])));
	return OidIsValid(*history_oid);
}

/*
 * cs_start_replication
 *	  START_REPLICATION SLOT <config's slot> LOGICAL <startpoint> with
 *	  pgoutput protocol version 1, text values and messages; with_ddl adds the
 *	  extension's publication changestream_ddl to publication_names (the
 *	  generation identity keeps cs_plugin_options(), without it: the rows
 *	  of the published tables are the same either way).  The connection is
 *	  in COPY BOTH mode afterwards.  Raises connection_exception if the
 *	  server refuses (for example when the slot is active in another
 *	  process).
 */
void
cs_start_replication(const CsArchiveConfig *config, WalReceiverConn *conn,
					 XLogRecPtr startpoint, bool with_ddl)
{
	char	   *sql;
	char	   *options;

	if (with_ddl)
		options = psprintf("proto_version '1', publication_names %s, messages 'true'",
						   quote_literal_cstr(psprintf("%s,%s",
													   quote_identifier(config->publication),
													   CS_DDL_PUBLICATION)));
	else
		options = pstrdup(cs_plugin_options(config));
	sql = psprintf("START_REPLICATION SLOT %s LOGICAL %X/%X (%s)",
				   quote_identifier(config->slot_name),
				   LSN_FORMAT_ARGS(startpoint), options);
	walrcv_clear_result(cs_exec(conn, sql, WALRCV_OK_COPY_BOTH));
}

/*
 * cs_send_status_update
 *	  Send a standby status update ('r'): written = write_lsn, flushed and
 *	  applied = flush_lsn, the clock now.  Only durable positions may be
 *	  passed as flush_lsn (docs/DESIGN.md, durability rule 1).
 */
void
cs_send_status_update(WalReceiverConn *conn, XLogRecPtr write_lsn,
					  XLogRecPtr flush_lsn, bool reply_requested)
{
	StringInfoData buf;

	initStringInfo(&buf);
	pq_sendbyte(&buf, 'r');
	pq_sendint64(&buf, write_lsn);
	pq_sendint64(&buf, flush_lsn);
	pq_sendint64(&buf, flush_lsn);
	pq_sendint64(&buf, GetCurrentTimestamp());
	pq_sendbyte(&buf, reply_requested ? 1 : 0);
	walrcv_send(conn, buf.data, buf.len);
	pfree(buf.data);
}
