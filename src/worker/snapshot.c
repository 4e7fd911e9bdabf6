/*-------------------------------------------------------------------------
 *
 * snapshot.c
 *	  Snapshots: a consistent copy of every table of the publication, taken
 *	  in the snapshot a replication slot exports when it is created, so that
 *	  it lines up exactly with the slot's consistent point C: restore loads
 *	  the snapshot, then applies every archived transaction whose commit LSN
 *	  is >= C.
 *
 *	  The method is tablesync's (src/backend/replication/logical/
 *	  tablesync.c) and pg_dump's for parallel workers: on a replication
 *	  connection, CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export'); that
 *	  connection then stays idle, which keeps the exported snapshot valid,
 *	  while a second connection (the copy connection) copies the tables in
 *	  batches, each batch in its own transaction BEGIN READ ONLY ISOLATION
 *	  LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT '<exported>'; LOCK
 *	  the batch's tables; COPY (SELECT published columns FROM table [WHERE
 *	  row filter]) TO STDOUT per table; COMMIT.  A batch holds at most
 *	  max_locks_per_transaction / 4 tables (a table, its index and its
 *	  TOAST table and index may each take a lock), so a snapshot works for
 *	  any number of tables without "out of shared memory".  The slot is the
 *	  archiver's own slot when it is being created (the opening snapshot of
 *	  a generation), or a temporary slot otherwise.
 *
 *	  Encoding: the copy connection runs with client_encoding = UTF8, so
 *	  the server converts names and rows to UTF-8 as COPY does for any
 *	  client (a SQL_ASCII database is not converted: its client_encoding
 *	  is SQL_ASCII and its bytes pass through as stored).  The source
 *	  database's encoding is recorded in the manifest (docs/FORMAT.md,
 *	  sections 3.2 and 3.3).
 *
 *	  File: snapshots/<LSN as 16 hex digits>.snapshot.gz, one gzip stream
 *	  of two members: a manifest (SQL comment lines, one of them JSON), then
 *	  each table as "COPY ... FROM stdin;", its rows in COPY text format, and
 *	  "\.".  zcat file | psql loads it into a database with the same tables.
 *	  Rows stream from the socket to zlib: memory does not grow with table
 *	  size.  Written as tmp, fsync, rename, fsync of the directory.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>
#include <zlib.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "replication/walreceiver.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "archive/archive_dir.h"
#include "archive/archive_layout.h"
#include "archive/generation.h"
#include "archive/segment_format.h"
#include "archive/table_definition.h"
#include "base/archive_config.h"
#include "base/guc.h"
#include "base/shmem_status.h"
#include "worker/ri_monitor.h"
#include "worker/snapshot.h"
#include "worker/walsender_conn.h"
#include "worker/walsender_reap.h"
#include "base/compat.h"

typedef struct SnapTable
{
	char	   *oid;
	char	   *schema;
	char	   *name;
	char	   *relkind;
	char	   *replident;
	char	   *rowfilter;
	char	   *column_list;	/* quoted, comma separated */
	char	   *columns_json;
	char	   *key_json;		/* replica identity key columns, in index
								 * order ([] for FULL, NOTHING, no key) */
	char	   *sequences_json; /* owned sequences and their values */
	char	   *definition_json;	/* full definition, or NULL if unread */
	bool		lacks_identity;
	int64		rows;
} SnapTable;

/*
 * Files of the snapshot being written, so that cs_snapshot_cleanup() can
 * close and remove them after an error (plain descriptors are not closed
 * by transaction abort).
 */
static gzFile open_gz = NULL;
static int	open_fd = -1;
static WalReceiverConn *open_copy_conn = NULL;
static char open_data_path[MAXPGPATH];
static char open_tmp_path[MAXPGPATH];

/*
 * cs_snapshot_cleanup
 *	  After an error: close the files of the snapshot that was being
 *	  written and remove them, and close its copy connection.  Never
 *	  raises.
 */
void
cs_snapshot_cleanup(void)
{
	if (open_gz != NULL)
		gzclose(open_gz);
	open_gz = NULL;
	if (open_fd >= 0)
		close(open_fd);
	open_fd = -1;
	if (open_data_path[0])
		(void) cs_storage_unlink(open_data_path);
	if (open_tmp_path[0])
		(void) cs_storage_unlink(open_tmp_path);
	if (open_copy_conn != NULL)
		cs_disconnect(open_copy_conn);
	open_copy_conn = NULL;
	open_data_path[0] = open_tmp_path[0] = '\0';
}

/* which CsStatus.progress entry this process reports in */
static int	progress_slot = CS_PROGRESS_ARCHIVER;

static void
set_progress(const char *table, int64 rows, const char *waiting_for)
{
	cs_status_set_progress(progress_slot, table, rows, waiting_for);
}

/*
 * Before a slot is created: what it will wait for, for status() and the
 * log.  CREATE_REPLICATION_SLOT waits for every transaction running now
 * (SnapBuildWaitSnapshot()): those of backends, named by pid
 * (pg_stat_activity.backend_xid), and prepared transactions, which no
 * backend holds, named by gid (pg_prepared_xacts).
 */
static void
note_running_transactions(WalReceiverConn *conn)
{
	List	   *rows;
	char	  **row;
	StringInfoData msg;

	rows = cs_exec_rows(conn,
						"SELECT (SELECT count(*) FROM pg_catalog.pg_stat_activity "
						"        WHERE backend_xid IS NOT NULL "
						"        AND pid <> pg_catalog.pg_backend_pid())::text, "
						"  (SELECT min(pid) FROM pg_catalog.pg_stat_activity "
						"   WHERE backend_xid IS NOT NULL "
						"   AND pid <> pg_catalog.pg_backend_pid())::text, "
						"  (SELECT count(*) FROM pg_catalog.pg_prepared_xacts)::text, "
						"  (SELECT min(gid) FROM pg_catalog.pg_prepared_xacts)", 4);
	row = linitial(rows);

	initStringInfo(&msg);
	appendStringInfoString(&msg, "replication slot creation: waiting for ");
	if (row[0] != NULL && strcmp(row[0], "0") != 0)
		appendStringInfo(&msg, "%s running transaction(s) to finish (for example pid %s)",
						 row[0], row[1] ? row[1] : "?");
	if (row[2] != NULL && strcmp(row[2], "0") != 0)
	{
		if (row[0] != NULL && strcmp(row[0], "0") != 0)
			appendStringInfoString(&msg, " and ");
		appendStringInfo(&msg, "%s prepared transaction(s) to be committed or rolled back (for example gid ",
						 row[2]);
		appendStringInfoString(&msg, quote_literal_cstr(row[3] ? row[3] : "?"));
		appendStringInfoString(&msg, " in pg_prepared_xacts)");
	}
	if ((row[0] == NULL || strcmp(row[0], "0") == 0) &&
		(row[2] == NULL || strcmp(row[2], "0") == 0))
		appendStringInfoString(&msg, "a consistent point");
	set_progress(NULL, 0, msg.data);
	pfree(msg.data);
}

/*
 * The publication's tables as the snapshot copies them, in name order.  The
 * extension's own tables (changestream.ddl_history, which a FOR ALL TABLES
 * publication also lists) are left out: the schema history streams through
 * the changestream_ddl publication, and restore() never restores it.
 */
static List *
published_tables(const CsArchiveConfig *config, WalReceiverConn *conn)
{
	char	   *sql;
	List	   *rows;
	List	   *tables = NIL;
	ListCell   *lc;

	sql = psprintf(
				   "SELECT c.oid::text, pt.schemaname::text, pt.tablename::text, c.relkind::text, "
				   "  c.relreplident::text, pt.rowfilter, "
				   "  (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) "
				   "     FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 "
				   "     AND NOT a.attisdropped AND a.attgenerated = '' "
				   "     AND (pt.attnames IS NULL OR a.attname = ANY (pt.attnames))), "
				   "  (SELECT json_agg(json_build_object('name', a.attname, 'type', "
				   "          pg_catalog.format_type(a.atttypid, a.atttypmod)) ORDER BY a.attnum)::text "
				   "     FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 "
				   "     AND NOT a.attisdropped AND a.attgenerated = '' "
				   "     AND (pt.attnames IS NULL OR a.attname = ANY (pt.attnames))), "
				   "  ((p.pubupdate OR p.pubdelete) AND (c.relreplident = 'n' OR (c.relreplident = 'd' "
				   "     AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index i "
				   "                     WHERE i.indrelid = c.oid AND i.indisprimary))))::text, "
				   "  (SELECT CASE WHEN bool_and(a.attgenerated = '' AND (pt.attnames IS NULL "
				   "                                OR a.attname = ANY (pt.attnames))) "
				   "          THEN json_agg(a.attname ORDER BY k.ord)::text END "
				   "     FROM pg_catalog.pg_index i, "
				   "       unnest(i.indkey::pg_catalog.int2[]) WITH ORDINALITY k(attnum, ord), "
				   "       pg_catalog.pg_attribute a "
				   "     WHERE i.indrelid = c.oid AND a.attrelid = c.oid AND a.attnum = k.attnum "
				   "     AND k.ord <= i.indnkeyatts "
				   "     AND ((c.relreplident = 'd' AND i.indisprimary) "
				   "          OR (c.relreplident = 'i' AND i.indisreplident))) "
				   "FROM pg_catalog.pg_publication_tables pt "
				   "JOIN pg_catalog.pg_publication p ON p.pubname = pt.pubname "
				   "JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname "
				   "JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename "
				   "WHERE pt.pubname = %s "
				   "AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d "
				   "  JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid "
				   "  WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass "
				   "  AND d.objid = c.oid AND d.deptype = 'e' "
				   "  AND e.extname = 'changestream') "
				   "ORDER BY 2, 3",
				   quote_literal_cstr(config->publication));
	rows = cs_exec_rows(conn, sql, 10);
	foreach(lc, rows)
	{
		char	  **r = lfirst(lc);
		SnapTable  *t = palloc0(sizeof(SnapTable));

		t->oid = r[0];
		t->schema = r[1];
		t->name = r[2];
		t->relkind = r[3];
		t->replident = r[4];
		t->rowfilter = r[5];
		t->column_list = r[6] ? r[6] : pstrdup("");
		t->columns_json = r[7] ? r[7] : pstrdup("[]");
		t->lacks_identity = r[8] && strcmp(r[8], "true") == 0;
		t->key_json = r[9] ? r[9] : pstrdup("[]");
		t->sequences_json = pstrdup("[]");
		tables = lappend(tables, t);
	}
	return tables;
}

/* The OIDs of tables, comma-separated, for an IN list. */
static char *
oid_list(List *tables)
{
	StringInfoData oids;
	ListCell   *lc;

	initStringInfo(&oids);
	foreach(lc, tables)
		appendStringInfo(&oids, "%s%s", oids.len ? ", " : "",
						 ((SnapTable *) lfirst(lc))->oid);
	return oids.data;
}

/*
 * Rows (table OID, JSON text) of a per-table query: each JSON text into
 * the char * member of its table at offset field of SnapTable.
 */
static void
assign_per_table(List *tables, List *rows, size_t field)
{
	ListCell   *lc;
	ListCell   *lt;

	foreach(lc, rows)
	{
		char	  **r = lfirst(lc);

		foreach(lt, tables)
		{
			SnapTable  *t = lfirst(lt);

			if (r[0] != NULL && r[1] != NULL && strcmp(t->oid, r[0]) == 0)
			{
				*(char **) ((char *) t + field) = r[1];
				break;
			}
		}
	}
}

/*
 * The sequences that columns of tables own (serial and identity columns:
 * pg_depend entries of type 'a' and 'i') and each one's last value and
 * is_called, into each table's sequences_json (docs/FORMAT.md section
 * 3.2), on the copy connection, in the exported snapshot's transaction.
 * Which sequence a column owns is therefore the catalog's at the
 * consistent point; the values are not transactional and are the ones of
 * the moment of this query, right after the consistent point: at least
 * the values there (unless a setval() or ALTER SEQUENCE ... RESTART lowered
 * one in between), possibly later.  A sequence the connection's role may
 * not read (SELECT or USAGE) is recorded with null value and is_called.
 */
static void
read_sequences(WalReceiverConn *conn, List *tables)
{
	List	   *rows;

	if (tables == NIL)
		return;
	rows = cs_exec_rows(conn, psprintf(
									   "SELECT d.refobjid::text, json_agg(json_build_object("
									   "  'column', a.attname, "
									   "  'sequence', pg_catalog.quote_ident(n.nspname) || '.' || "
									   "              pg_catalog.quote_ident(s.relname), "
									   "  'last_value', v.last_value, "
									   "  'is_called', CASE WHEN v.readable THEN v.last_value IS NOT NULL END) "
									   "  ORDER BY a.attnum)::text "
									   "FROM pg_catalog.pg_depend d "
									   "JOIN pg_catalog.pg_class s ON s.oid = d.objid AND s.relkind = 'S' "
									   "JOIN pg_catalog.pg_namespace n ON n.oid = s.relnamespace "
									   "JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid "
									   "  AND a.attnum = d.refobjsubid AND NOT a.attisdropped "
									   "CROSS JOIN LATERAL (SELECT pg_catalog.has_sequence_privilege(s.oid, "
									   "  'SELECT,USAGE') AS readable) p "
									   "CROSS JOIN LATERAL (SELECT p.readable, CASE WHEN p.readable THEN "
									   "  pg_catalog.pg_sequence_last_value(s.oid::pg_catalog.regclass) END "
									   "  AS last_value) v "
									   "WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass "
									   "AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass "
									   "AND d.deptype IN ('a', 'i') AND d.refobjsubid > 0 "
									   "AND d.refobjid IN (%s) "
									   "GROUP BY d.refobjid", oid_list(tables)), 2);
	assign_per_table(tables, rows, offsetof(SnapTable, sequences_json));
}

/*
 * Each table's full definition (archive/table_definition.c) into its
 * definition_json, in one query on the copy connection, in the exported
 * snapshot's transaction.  Which columns, constraints and indexes the
 * table has is the catalog's at the consistent point; the deparsed texts
 * (pg_get_expr(), pg_get_constraintdef(), pg_get_indexdef(),
 * format_type()) read the current catalog (docs/FORMAT.md section 3.2).
 */
static void
read_definitions(WalReceiverConn *conn, List *tables)
{
	List	   *rows;

	if (tables == NIL)
		return;
	rows = cs_exec_rows(conn, cs_table_definition_query(oid_list(tables)), 2);
	assign_per_table(tables, rows, offsetof(SnapTable, definition_json));
}

/*
 * Publish in status() the published tables that lack a replica identity
 * (UPDATE and DELETE on them fail), and warn when that list changes
 * (ri_monitor.c).
 */
static void
report_replica_identity(const CsArchiveConfig *config, List *tables)
{
	StringInfoData missing;
	ListCell   *lc;

	initStringInfo(&missing);
	foreach(lc, tables)
	{
		SnapTable  *t = lfirst(lc);

		if (t->lacks_identity)
			appendStringInfo(&missing, "%s%s.%s", missing.len ? ", " : "",
							 t->schema, t->name);
	}
	cs_ri_report(config, missing.data);
	pfree(missing.data);
}

/*
 * cs_check_replica_identity
 *	  Look up the tables of config's publication on an idle replication
 *	  connection
 *	  and report those without a replica identity (status() and the log).
 *	  The caller holds no transaction.  Raises connection_exception if the
 *	  query fails.
 */
void
cs_check_replica_identity(const CsArchiveConfig *config, WalReceiverConn *conn)
{
	report_replica_identity(config, published_tables(config, conn));
}

/*
 * Lock every table IN ACCESS SHARE MODE, as pg_dump does, so that none is
 * rewritten while it waits for its COPY; then make sure none was rewritten
 * between the slot's snapshot and the lock: a rewritten table's new file
 * is invisible to the snapshot, which would see no rows at all.  The
 * catalog as the snapshot sees it (pg_class.relfilenode) must match the
 * relation cache, which the lock brought up to date
 * (pg_relation_filenode()).
 */
static void
lock_and_check_tables(WalReceiverConn *conn, List *tables)
{
	StringInfoData sql;
	StringInfoData oids;
	ListCell   *lc;
	List	   *rewritten;

	if (tables == NIL)
		return;
	initStringInfo(&sql);
	initStringInfo(&oids);
	appendStringInfoString(&sql, "LOCK TABLE ");
	foreach(lc, tables)
	{
		SnapTable  *t = lfirst(lc);

		appendStringInfo(&sql, "%s%s.%s", lc == list_head(tables) ? "" : ", ",
						 quote_identifier(t->schema), quote_identifier(t->name));
		appendStringInfo(&oids, "%s%s", oids.len ? ", " : "", t->oid);
	}
	appendStringInfoString(&sql, " IN ACCESS SHARE MODE");
	walrcv_clear_result(cs_exec(conn, sql.data, WALRCV_OK_COMMAND));

	resetStringInfo(&sql);
	appendStringInfo(&sql,
					 "SELECT c.oid::regclass::text FROM pg_catalog.pg_class c "
					 "WHERE c.oid IN (%s) AND c.relkind = 'r' "
					 "AND c.relfilenode IS DISTINCT FROM pg_catalog.pg_relation_filenode(c.oid)",
					 oids.data);
	rewritten = cs_exec_rows(conn, sql.data, 1);
	if (rewritten != NIL)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("table %s was rewritten while the snapshot was being taken",
						((char **) linitial(rewritten))[0]),
				 errdetail("Its rows are not visible in the snapshot of the slot's consistent point."),
				 errhint("changestream retries; avoid ALTER TABLE ... TYPE, TRUNCATE and VACUUM FULL on published tables while a generation opens.")));
}

static void
gz_write(gzFile gz, const char *data, int len, const char *path)
{
	if (len > 0 && gzwrite(gz, data, len) != len)
	{
		int			errnum;
		const char *msg = gzerror(gz, &errnum);

		if (errnum == Z_ERRNO)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not write file \"%s\": %m", path)));
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not write file \"%s\": zlib error: %s", path, msg)));
	}
}

/* COPY one table into the data stream; returns its row count. */
static int64
copy_table(WalReceiverConn *conn, SnapTable *t, gzFile gz, const char *path)
{
	char	   *qualified = psprintf("%s.%s", quote_identifier(t->schema),
									 quote_identifier(t->name));
	char	   *display = psprintf("%s.%s", t->schema, t->name);
	StringInfoData sql;
	int64		rows = 0;
	TimestampTz last_progress = 0;
	char	   *header;

	header = psprintf("COPY %s (%s) FROM stdin;\n", qualified, t->column_list);
	gz_write(gz, header, strlen(header), path);

	initStringInfo(&sql);
	appendStringInfo(&sql, "COPY (SELECT %s FROM %s%s",
					 t->column_list[0] ? t->column_list : "",
					 strcmp(t->relkind, "p") == 0 ? "" : "ONLY ", qualified);
	if (t->rowfilter != NULL && t->rowfilter[0] != '\0')
		appendStringInfo(&sql, " WHERE %s", t->rowfilter);
	appendStringInfoString(&sql, ") TO STDOUT");
	walrcv_clear_result(cs_exec(conn, sql.data, WALRCV_OK_COPY_OUT));

	set_progress(display, 0, "");
	for (;;)
	{
		char	   *buf;
		pgsocket	fd = PGINVALID_SOCKET;
		int			len = walrcv_receive(conn, &buf, &fd);

		if (len > 0)
		{
			const char *p = buf;
			const char *end = buf + len;

			while ((p = memchr(p, '\n', end - p)) != NULL)
			{
				rows++;
				p++;
			}
			gz_write(gz, buf, len, path);
			if ((rows & 4095) == 0)
			{
				TimestampTz now = GetCurrentTimestamp();

				if (TimestampDifferenceExceeds(last_progress, now, 100))
				{
					set_progress(display, rows, NULL);
					last_progress = now;
				}
				CHECK_FOR_INTERRUPTS();
			}
		}
		else if (len == 0)
		{
			int			rc = WaitLatchOrSocket(MyLatch,
											   WL_LATCH_SET | WL_SOCKET_READABLE |
											   WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
											   fd, 1000, PG_WAIT_EXTENSION);

			if (rc & WL_LATCH_SET)
				ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
		else
			break;
	}
	gz_write(gz, "\\.\n\n", 4, path);
	set_progress(display, rows, NULL);
	return rows;
}

static char *
build_manifest(uint64 generation, XLogRecPtr lsn, TimestampTz when,
			   List *tables, int64 total_rows, const char *source_encoding)
{
	/* the file's encoding: UTF-8, except a SQL_ASCII source's bytes */
	const char *file_encoding = strcmp(source_encoding, "SQL_ASCII") == 0 ?
		"SQL_ASCII" : "UTF8";
	StringInfoData m;
	StringInfoData json;
	ListCell   *lc;
	char		ts[64];
	char		lsn_text[32];
	bool		first = true;

	cs_format_utc(when, ts, sizeof(ts));
	snprintf(lsn_text, sizeof(lsn_text), "%X/%X", LSN_FORMAT_ARGS(lsn));

	initStringInfo(&json);
	appendStringInfo(&json,
					 "{\"format_version\": %d, \"generation\": \"%016llx\", "
					 "\"lsn\": \"%s\", \"snapshot_time\": \"%s\", "
					 "\"encoding\": \"%s\", \"source_encoding\": \"%s\", \"tables\": [",
					 CS_SNAPSHOT_FORMAT_VERSION, (unsigned long long) generation, lsn_text, ts,
					 file_encoding, source_encoding);
	foreach(lc, tables)
	{
		SnapTable  *t = lfirst(lc);

		appendStringInfoString(&json, first ? "" : ", ");
		first = false;
		appendStringInfoString(&json, "{\"schema\": ");
		escape_json(&json, t->schema);
		appendStringInfoString(&json, ", \"name\": ");
		escape_json(&json, t->name);
		appendStringInfo(&json, ", \"oid\": %s, \"replica_identity\": ", t->oid);
		escape_json(&json, t->replident);
		appendStringInfo(&json, ", \"columns\": %s, \"key\": %s, \"sequences\": %s, "
						 "\"rows\": " INT64_FORMAT,
						 t->columns_json, t->key_json, t->sequences_json, t->rows);
		if (t->definition_json != NULL)
			appendStringInfo(&json, ", \"definition\": %s", t->definition_json);
		appendStringInfoChar(&json, '}');
	}
	appendStringInfoString(&json, "]}");

	initStringInfo(&m);
	appendStringInfo(&m,
					 "-- changestream snapshot\n"
					 "-- format_version: %d\n"
					 "-- generation: %016llx\n"
					 "-- lsn: %s\n"
					 "-- snapshot_time: %s\n"
					 "-- encoding: %s\n"
					 "-- source_encoding: %s\n"
					 "-- tables: %d\n"
					 "-- rows: " INT64_FORMAT "\n"
					 "-- manifest: %s\n"
					 "-- end of manifest\n\n",
					 CS_SNAPSHOT_FORMAT_VERSION, (unsigned long long) generation, lsn_text,
					 ts, file_encoding, source_encoding, list_length(tables),
					 total_rows, json.data);
	return m.data;
}

/*
 * Copy the file in_path to the end of out.  in_path is a transient file of
 * fd.c, closed on error too, so that a failed write leaks no descriptor
 * however often the archiver retries.
 */
static void
append_file(int out, const char *out_path, const char *in_path)
{
	int			in = cs_storage_open(in_path, CS_OPEN_READ);
	char	   *buf = palloc(128 * 1024);
	ssize_t		n;

	if (in < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", in_path)));
	PG_TRY();
	{
		while ((n = read(in, buf, 128 * 1024)) > 0)
		{
			if (write(out, buf, n) != n)
				ereport(ERROR,
						(errcode_for_file_access(),
						 errmsg("could not write file \"%s\": %m", out_path)));
			CHECK_FOR_INTERRUPTS();
		}
		if (n < 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read file \"%s\": %m", in_path)));
	}
	PG_FINALLY();
	{
		cs_storage_close(in);
	}
	PG_END_TRY();
	pfree(buf);
}

/*
 * On the copy connection: open a transaction in the exported snapshot.
 * Its first statements are BEGIN ... REPEATABLE READ and SET TRANSACTION
 * SNAPSHOT, as pg_dump's parallel workers do (SET TRANSACTION SNAPSHOT
 * must come before any query).
 */
static void
begin_in_snapshot(WalReceiverConn *copy_conn, const char *snapshot_name)
{
	walrcv_clear_result(cs_exec(copy_conn,
								"BEGIN READ ONLY ISOLATION LEVEL REPEATABLE READ",
								WALRCV_OK_COMMAND));
	walrcv_clear_result(cs_exec(copy_conn,
								psprintf("SET TRANSACTION SNAPSHOT %s",
										 quote_literal_cstr(snapshot_name)),
								WALRCV_OK_COMMAND));
}

/*
 * The source database's encoding into encoding[NAMEDATALEN], and the copy
 * connection's client_encoding set to UTF8, so that the server converts
 * what it sends as COPY does for a UTF-8 client; a SQL_ASCII database
 * cannot be converted (the server would only check that its bytes are
 * valid UTF-8), so its client_encoding is SQL_ASCII and its bytes pass
 * through as stored.
 */
static void
set_copy_encoding(WalReceiverConn *copy_conn, char *encoding)
{
	char	  **row;

	row = linitial(cs_exec_rows(copy_conn,
								"SELECT pg_catalog.getdatabaseencoding()::text", 1));
	strlcpy(encoding, row[0] ? row[0] : "", NAMEDATALEN);
	walrcv_clear_result(cs_exec(copy_conn,
								strcmp(encoding, "SQL_ASCII") == 0 ?
								"SET client_encoding = 'SQL_ASCII'" :
								"SET client_encoding = 'UTF8'",
								WALRCV_OK_COMMAND));
}

/*
 * In the exported snapshot: the published tables (as the snapshot sees the
 * catalog) with their owned sequences' values and their definitions, and
 * how many tables a batch may lock.
 */
static List *
list_in_snapshot(const CsArchiveConfig *config, WalReceiverConn *copy_conn,
				 const char *snapshot_name, int *batch_size)
{
	List	   *tables;
	char	  **row;
	int			max_locks;

	begin_in_snapshot(copy_conn, snapshot_name);
	tables = published_tables(config, copy_conn);
	read_sequences(copy_conn, tables);
	read_definitions(copy_conn, tables);
	row = linitial(cs_exec_rows(copy_conn,
								"SELECT pg_catalog.current_setting('max_locks_per_transaction')", 1));
	walrcv_clear_result(cs_exec(copy_conn, "COMMIT", WALRCV_OK_COMMAND));

	max_locks = row[0] ? atoi(row[0]) : 64;
	*batch_size = Max(1, max_locks / 4);
	return tables;
}

/*
 * Copy tables[first .. first + count - 1] in one transaction of the
 * exported snapshot: lock them, check none was rewritten, COPY each.
 * Returns the rows copied.
 */
static int64
copy_batch(WalReceiverConn *copy_conn, const char *snapshot_name,
		   List *tables, int first, int count, gzFile gz, const char *path)
{
	List	   *batch = NIL;
	int64		rows = 0;
	int			i;

	for (i = first; i < first + count; i++)
		batch = lappend(batch, list_nth(tables, i));
	begin_in_snapshot(copy_conn, snapshot_name);
	lock_and_check_tables(copy_conn, batch);
	for (i = 0; i < count; i++)
	{
		SnapTable  *t = list_nth(batch, i);

		t->rows = copy_table(copy_conn, t, gz, path);
		rows += t->rows;
	}
	walrcv_clear_result(cs_exec(copy_conn, "COMMIT", WALRCV_OK_COMMAND));
	list_free(batch);
	return rows;
}

/*
 * Create slot_name on conn with SNAPSHOT 'export' (what it waits for is
 * published first, and its walsender remembered: slot creation may wait,
 * see walsender_reap.c).  Returns the exported snapshot's name; *lsn is
 * the slot's consistent point.
 */
static char *
create_export_slot(const CsArchiveConfig *config, WalReceiverConn *conn,
				   const char *slot_name, bool temporary, XLogRecPtr *lsn)
{
	char	   *snapshot_name;

	note_running_transactions(conn);
	cs_walsender_remember(config, conn);
	snapshot_name = cs_walrcv_create_slot(conn, slot_name, temporary,
										  CRS_EXPORT_SNAPSHOT, lsn);
	if (snapshot_name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("replication slot \"%s\" was created without an exported snapshot",
						slot_name)));
	set_progress(NULL, 0, "");
	return snapshot_name;
}

/* What copy_tables() copied, for the manifest and the log. */
typedef struct SnapCopy
{
	List	   *tables;			/* SnapTable *, with their row counts */
	int64		rows;			/* rows of all tables */
	int			batch_size;		/* tables per transaction */
	char		encoding[NAMEDATALEN];	/* source database's encoding */
} SnapCopy;

/*
 * Copy every published table in the exported snapshot, over a copy
 * connection of config, in batches, as COPY sections into the gzip file
 * data_path.  Fills *copy.
 */
static void
copy_tables(const CsArchiveConfig *config, const char *snapshot_name,
			const char *data_path, SnapCopy *copy)
{
	WalReceiverConn *copy_conn;
	uint64		sysid;
	uint32		tli;
	gzFile		gz;
	int			fd;
	int			ntables;
	int			i;

	copy_conn = open_copy_conn = cs_connect(config, &sysid, &tli);
	set_copy_encoding(copy_conn, copy->encoding);
	copy->tables = list_in_snapshot(config, copy_conn, snapshot_name,
									&copy->batch_size);
	ntables = list_length(copy->tables);

	report_replica_identity(config, copy->tables);

	strlcpy(open_data_path, data_path, MAXPGPATH);
	fd = cs_storage_open_stream(data_path, CS_OPEN_WRITE | CS_OPEN_CREATE);
	gz = open_gz = (fd < 0) ? NULL : gzdopen(fd, "wb");
	if (gz == NULL)
	{
		int			save_errno = errno;

		if (fd >= 0)
			close(fd);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", data_path)));
	}
	gzbuffer(gz, 256 * 1024);
	gzsetparams(gz, cs_compression_level, Z_DEFAULT_STRATEGY);
	copy->rows = 0;
	for (i = 0; i < ntables; i += copy->batch_size)
		copy->rows += copy_batch(copy_conn, snapshot_name, copy->tables, i,
								 Min(copy->batch_size, ntables - i), gz,
								 data_path);
	open_gz = NULL;
	if (gzclose(gz) != Z_OK)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", data_path)));
	open_copy_conn = NULL;
	cs_disconnect(copy_conn);
}

/*
 * Write the snapshot file final_path durably: the manifest member, then
 * the table data member (data_path, removed afterwards), as one file
 * written as tmp_path and renamed in snapshots_dir.
 */
static void
write_snapshot_file(const char *manifest, const char *data_path,
					const char *tmp_path, const char *final_path,
					const char *snapshots_dir)
{
	int			out;
	gzFile		gz;

	strlcpy(open_tmp_path, tmp_path, MAXPGPATH);
	out = open_fd = cs_storage_open_stream(tmp_path,
										   CS_OPEN_WRITE | CS_OPEN_CREATE);
	if (out < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", tmp_path)));
	gz = open_gz = gzdopen(dup(out), "wb");
	if (gz == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not start gzip stream for \"%s\"", tmp_path)));
	gz_write(gz, manifest, strlen(manifest), tmp_path);
	open_gz = NULL;
	if (gzclose(gz) != Z_OK)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", tmp_path)));
	if (lseek(out, 0, SEEK_END) < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not seek in file \"%s\": %m", tmp_path)));
	append_file(out, tmp_path, data_path);
	close(out);
	open_fd = -1;
	cs_durable_rename(tmp_path, final_path, snapshots_dir);
	open_tmp_path[0] = '\0';
	(void) cs_storage_unlink(data_path);
	open_data_path[0] = '\0';
}

/*
 * cs_snapshot_take
 *	  Create slot_name (temporary or the archiver's permanent slot) on conn
 *	  with SNAPSHOT 'export', copy every table of config's publication
 *	  in that snapshot over a second connection of config, in batches of
 *	  max_locks_per_transaction / 4 tables each in its own transaction
 *	  (SET TRANSACTION SNAPSHOT), and write
 *	  <snapshots_dir>/<C>.snapshot.gz durably, in UTF-8.  conn must be idle
 *	  (not streaming) and stays idle until this returns; the caller must
 *	  hold no transaction.  Fills *result (consistent point, counts, the
 *	  source database's encoding) and returns the consistent point C (an
 *	  XLogRecPtr).
 *	  Raises connection_exception if a command fails on the server,
 *	  errcode_for_file_access() codes on I/O errors,
 *	  serialization_failure if a table was rewritten (ALTER TABLE, TRUNCATE, VACUUM FULL)
 *	  between the slot's snapshot and the lock this function takes on it:
 *	  its rows would be invisible to the snapshot.  Progress (table, rows,
 *	  what slot creation waits for) is published in status() in
 *	  CsStatus.progress[progress].
 */
XLogRecPtr
cs_snapshot_take(const CsArchiveConfig *config, WalReceiverConn *conn,
				 const char *slot_name, bool temporary,
				 const char *snapshots_dir, uint64 generation,
				 int progress, CsSnapshotResult *result)
{
	XLogRecPtr	lsn = InvalidXLogRecPtr;
	char		data_path[MAXPGPATH];
	char		tmp_path[MAXPGPATH];
	char		final_path[MAXPGPATH];
	TimestampTz when;
	char	   *snapshot_name;
	SnapCopy	copy;
	int			ntables;

	Assert(!IsTransactionState());
	progress_slot = progress;
	snapshot_name = create_export_slot(config, conn, slot_name, temporary,
									   &lsn);
	when = GetCurrentTimestamp();

	/* conn now stays idle: its next command would end the export */
	strlcpy(data_path, cs_snapshot_data_path(snapshots_dir, lsn), MAXPGPATH);
	strlcpy(tmp_path, cs_snapshot_tmp_path(snapshots_dir, lsn), MAXPGPATH);
	strlcpy(final_path, cs_snapshot_path(snapshots_dir, lsn), MAXPGPATH);
	memset(&copy, 0, sizeof(copy));
	copy_tables(config, snapshot_name, data_path, &copy);
	cs_walsender_forget();
	ntables = list_length(copy.tables);

	write_snapshot_file(build_manifest(generation, lsn, when, copy.tables,
									   copy.rows, copy.encoding),
						data_path, tmp_path, final_path, snapshots_dir);

	set_progress(NULL, 0, "");
	if (result)
	{
		result->lsn = lsn;
		result->tables = ntables;
		result->rows = copy.rows;
		strlcpy(result->encoding, copy.encoding, sizeof(result->encoding));
	}
	ereport(LOG,
			(errmsg("snapshot at " CS_LSN_FMT " written: %d tables, " INT64_FORMAT " rows in %d transactions, %ld ms after the slot's consistent point",
					LSN_FORMAT_ARGS(lsn), ntables, copy.rows,
					ntables == 0 ? 0 : (ntables + copy.batch_size - 1) / copy.batch_size,
					(long) ((GetCurrentTimestamp() - when) / 1000)),
			 errdetail("File snapshots/%s of generation %016llx.",
					   cs_snapshot_file_name(lsn), (unsigned long long) generation)));
	return lsn;
}
