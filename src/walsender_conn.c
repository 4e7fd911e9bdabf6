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

#include "changestream.h"
#include "compat.h"

/* session settings pinned so that text values never depend on them */
static const struct
{
	const char *name;
	const char *value;
}			pinned_settings[] = {
	{"DateStyle", "ISO, YMD"},
	{"IntervalStyle", "postgres"},
	{"TimeZone", "UTC"},
	{"extra_float_digits", "3"},
	{"row_security", "off"},	/* a snapshot must see every row, or fail */
};

/*
 * cs_session_settings() -> const char * (palloc'd)
 *	  The pinned walsender session settings as "name=value; ...", recorded
 *	  in each generation's identity.
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
build_conninfo(void)
{
	StringInfoData buf;

	initStringInfo(&buf);
	if (cs_conninfo != NULL &&
		(strncmp(cs_conninfo, "postgres://", 11) == 0 ||
		 strncmp(cs_conninfo, "postgresql://", 13) == 0))
		return pstrdup(cs_conninfo);

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
	if (cs_conninfo != NULL && cs_conninfo[0] != '\0')
		appendStringInfo(&buf, " %s", cs_conninfo);
	append_conn_value(&buf, "dbname", cs_database);
	return buf.data;
}

static WalRcvExecResult *
exec_checked(WalReceiverConn *conn, const char *sql, int ntypes, const Oid *types,
			 WalRcvExecStatus expect)
{
	WalRcvExecResult *res = walrcv_exec(conn, sql, ntypes, types);

	if (res->status != expect)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_EXCEPTION),
				 errmsg("changestream: command failed on the replication connection: %s",
						res->err ? res->err : "unexpected result"),
				 errdetail("Command: %s", sql)));
	return res;
}

/*
 * cs_connect(*system_identifier, *timeline) -> WalReceiverConn *
 *	  Open the logical replication connection, run IDENTIFY_SYSTEM and pin
 *	  DateStyle, IntervalStyle, TimeZone and extra_float_digits for the
 *	  walsender session.  Raises 08006 (connection_failure) with a hint when
 *	  the server cannot be reached, 08000 when a command fails.
 */
WalReceiverConn *
cs_connect(uint64 *system_identifier, uint32 *timeline)
{
	char	   *conninfo = build_conninfo();
	char	   *err = NULL;
	WalReceiverConn *conn;
	char	   *sysid;
	TimeLineID	tli;
	int			i;

	conn = cs_walrcv_connect(conninfo, "changestream", &err);
	if (conn == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("changestream could not open a replication connection: %s",
						err ? err : "unknown error"),
				 errhint("Check changestream.conninfo, and that pg_hba.conf allows \"replication\" connections for the connecting user.")));

	sysid = cs_walrcv_identify_system(conn, &tli);
	*system_identifier = strtou64(sysid, NULL, 10);
	*timeline = tli;

	for (i = 0; i < lengthof(pinned_settings); i++)
		exec_checked(conn,
					 psprintf("SET %s = %s", pinned_settings[i].name,
							  quote_literal_cstr(pinned_settings[i].value)),
					 0, NULL, WALRCV_OK_COMMAND);
	return conn;
}

/*
 * cs_disconnect(conn) -> void
 *	  Close the connection (PQfinish; never raises).
 */
void
cs_disconnect(WalReceiverConn *conn)
{
	if (conn != NULL)
		walrcv_disconnect(conn);
}

/*
 * cs_get_slot(conn, *info) -> void
 *	  Look up changestream.slot_name in pg_replication_slots on the server.
 *	  Raises 42710 (duplicate_object) if a slot of that name exists but is
 *	  physical, or logical for another plugin or database.
 */
void
cs_get_slot(WalReceiverConn *conn, CsSlotInfo *info)
{
	Oid			types[6] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
	WalRcvExecResult *res;
	TupleTableSlot *slot;
	char	   *sql;

	memset(info, 0, sizeof(*info));
	StartTransactionCommand();
	sql = psprintf("SELECT slot_type, coalesce(plugin, ''), coalesce(database::text, ''), "
				   "coalesce(confirmed_flush_lsn::text, '0/0'), coalesce(wal_status, ''), active::text "
				   "FROM pg_catalog.pg_replication_slots WHERE slot_name = %s",
				   quote_literal_cstr(cs_slot_name));
	res = exec_checked(conn, sql, 6, types, WALRCV_OK_TUPLES);
	slot = MakeSingleTupleTableSlot(res->tupledesc, &TTSOpsMinimalTuple);
	if (tuplestore_gettupleslot(res->tuplestore, true, false, slot))
	{
		bool		isnull;
		char	   *slot_type = TextDatumGetCString(slot_getattr(slot, 1, &isnull));
		char	   *plugin = TextDatumGetCString(slot_getattr(slot, 2, &isnull));
		char	   *database = TextDatumGetCString(slot_getattr(slot, 3, &isnull));
		char	   *lsn = TextDatumGetCString(slot_getattr(slot, 4, &isnull));
		char	   *wal_status = TextDatumGetCString(slot_getattr(slot, 5, &isnull));
		char	   *active = TextDatumGetCString(slot_getattr(slot, 6, &isnull));

		if (strcmp(slot_type, "logical") != 0 || strcmp(plugin, "pgoutput") != 0 ||
			strcmp(database, cs_database) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_OBJECT),
					 errmsg("replication slot \"%s\" exists but is not a pgoutput slot of database \"%s\"",
							cs_slot_name, cs_database),
					 errdetail("It is a %s slot, plugin \"%s\", database \"%s\".",
							   slot_type, plugin, database),
					 errhint("Drop it, or set changestream.slot_name to another name.")));
		info->exists = true;
		info->lost = strcmp(wal_status, "lost") == 0;
		info->active = strcmp(active, "true") == 0;
		info->confirmed_flush = DatumGetLSN(DirectFunctionCall1(pg_lsn_in,
																CStringGetDatum(lsn)));
		strlcpy(info->plugin, plugin, NAMEDATALEN);
		strlcpy(info->database, database, NAMEDATALEN);
	}
	ExecDropSingleTupleTableSlot(slot);
	walrcv_clear_result(res);
	CommitTransactionCommand();
}

/*
 * cs_create_slot(conn) -> XLogRecPtr (the slot's consistent point)
 *	  CREATE_REPLICATION_SLOT <slot_name> LOGICAL pgoutput, exporting no
 *	  snapshot.  The caller holds no transaction: slot creation waits for
 *	  every running transaction (DESIGN.md, "Process model").
 */
XLogRecPtr
cs_create_slot(WalReceiverConn *conn)
{
	XLogRecPtr	lsn = InvalidXLogRecPtr;

	Assert(!IsTransactionState());
	cs_walrcv_create_slot(conn, cs_slot_name, false, CRS_NOEXPORT_SNAPSHOT, &lsn);
	return lsn;
}

/*
 * cs_drop_slot(conn) -> void
 *	  DROP_REPLICATION_SLOT <slot_name>; used for an invalidated slot.
 */
void
cs_drop_slot(WalReceiverConn *conn)
{
	char	   *sql = psprintf("DROP_REPLICATION_SLOT %s", quote_identifier(cs_slot_name));

	exec_checked(conn, sql, 0, NULL, WALRCV_OK_COMMAND);
}

/*
 * cs_check_publication(conn) -> void
 *	  Raises 42704 (undefined_object), with the CREATE PUBLICATION to run,
 *	  when changestream.publication does not exist in the database.
 */
void
cs_check_publication(WalReceiverConn *conn)
{
	Oid			types[1] = {TEXTOID};
	WalRcvExecResult *res;
	TupleTableSlot *slot;
	bool		found;
	char	   *sql;

	StartTransactionCommand();
	sql = psprintf("SELECT pubname::text FROM pg_catalog.pg_publication WHERE pubname = %s",
				   quote_literal_cstr(cs_publication));
	res = exec_checked(conn, sql, 1, types, WALRCV_OK_TUPLES);
	slot = MakeSingleTupleTableSlot(res->tupledesc, &TTSOpsMinimalTuple);
	found = tuplestore_gettupleslot(res->tuplestore, true, false, slot);
	ExecDropSingleTupleTableSlot(slot);
	walrcv_clear_result(res);
	CommitTransactionCommand();
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("publication \"%s\" does not exist in database \"%s\"",
						cs_publication, cs_database),
				 errhint("Create it, for example: CREATE PUBLICATION %s FOR TABLE <table>, ...; changestream retries until it exists.",
						 quote_identifier(cs_publication))));
}

/*
 * cs_plugin_options() -> const char * (static)
 *	  The pgoutput options the archiver streams with, as they appear in
 *	  START_REPLICATION and in the generation identity.
 */
const char *
cs_plugin_options(void)
{
	static char buf[NAMEDATALEN * 2 + 128];
	char	   *pub = quote_literal_cstr(quote_identifier(cs_publication));

	snprintf(buf, sizeof(buf),
			 "proto_version '1', publication_names %s, messages 'true'", pub);
	return buf;
}

/*
 * cs_start_replication(conn, startpoint) -> void
 *	  START_REPLICATION SLOT <slot> LOGICAL <startpoint> with pgoutput
 *	  protocol version 1, text values and messages; the connection is in
 *	  COPY BOTH mode afterwards.  Raises 08000 if the server refuses (for
 *	  example when the slot is active in another process).
 */
void
cs_start_replication(WalReceiverConn *conn, XLogRecPtr startpoint)
{
	char	   *sql;

	sql = psprintf("START_REPLICATION SLOT %s LOGICAL %X/%X (%s)",
				   quote_identifier(cs_slot_name),
				   LSN_FORMAT_ARGS(startpoint), cs_plugin_options());
	exec_checked(conn, sql, 0, NULL, WALRCV_OK_COPY_BOTH);
}

/*
 * cs_send_status_update(conn, write_lsn, flush_lsn, reply_requested) -> void
 *	  Send a standby status update ('r'): written = write_lsn, flushed and
 *	  applied = flush_lsn, the clock now.  Only durable positions may be
 *	  passed as flush_lsn (DESIGN.md, durability rule 1).
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
