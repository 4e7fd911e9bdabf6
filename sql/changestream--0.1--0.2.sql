/* changestream--0.1--0.2.sql: from 0.1 to 0.2, the schema history (ddl_history, its event triggers and the publication changestream_ddl) */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION changestream UPDATE TO '0.2'" to load this file. \quit

/*
 * Schema history (docs/DESIGN.md section 12).
 *
 * ddl_history: one row per DDL command that affects a table, written in
 * the command's own transaction by the event triggers below, and decoded
 * into the archive through the extension's own publication
 * changestream_ddl (the archiver adds it to pgoutput's publication_names
 * when it exists).  Only the SECURITY DEFINER trigger functions write it:
 * nobody else has any privilege on it, and a logical message, which any
 * role can emit, is never taken for a DDL record.
 *   event: ddl_command_end, sql_drop or table_rewrite.
 *   table_oid, schema_name, table_name: the table affected (for an index
 *     or constraint, its table), named as after the command.
 *   rewrite_reason: table_rewrite's reason bits (1 persistence, 2 default
 *     value, 4 column type, 8 access method); NULL for other events.
 *   columns: the columns whose existing values the command set without
 *     an archived change (ADD COLUMN with a default, ALTER COLUMN TYPE
 *     USING); NULL when none.
 *   rows_changed: the command changed existing rows of a non-empty table
 *     without sending changes (a rewrite for a volatile default, a
 *     default filled in without a rewrite, ALTER COLUMN TYPE ... USING):
 *     restore() refuses to replay the table across it.
 *   statement: current_query(): the query string the client sent, which
 *     holds every statement sent with the command (never executed by
 *     changestream).
 */
CREATE TABLE ddl_history (
	id bigserial PRIMARY KEY,
	event text NOT NULL,
	command_tag text NOT NULL,
	object_type text,
	object_identity text,
	table_oid oid NOT NULL,
	schema_name text NOT NULL,
	table_name text NOT NULL,
	rewrite_reason int,
	columns text[],
	rows_changed boolean NOT NULL,
	statement text
);
REVOKE ALL ON TABLE ddl_history FROM PUBLIC;
REVOKE ALL ON SEQUENCE ddl_history_id_seq FROM PUBLIC;
GRANT SELECT ON TABLE ddl_history TO pg_monitor;

/*
 * ddl_columns_set(command pg_ddl_command) -> setof (table_oid oid,
 *   column_name text)
 *   For an ALTER TABLE collected by ddl_command_end: the columns whose
 *   existing values the command set without a rewrite or with a
 *   conversion of its own: ADD COLUMN whose new column has a missing value
 *   (atthasmissing: a non-null, non-volatile default given to existing
 *   rows), and ALTER COLUMN TYPE ... USING; for the table and each of its
 *   inheritors (partitions).  No row for other commands.
 */
CREATE FUNCTION ddl_columns_set(command pg_ddl_command,
	OUT table_oid oid, OUT column_name text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'changestream_ddl_columns_set'
LANGUAGE C STRICT VOLATILE;
REVOKE ALL ON FUNCTION ddl_columns_set(pg_ddl_command) FROM PUBLIC;

/* a table whose DDL is recorded: permanent, ordinary or partitioned, not ours */
CREATE FUNCTION ddl_recorded_table(relid oid,
	OUT schema_name text, OUT table_name text)
RETURNS record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT n.nspname::text, c.relname::text
	  FROM pg_catalog.pg_class c
	  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	 WHERE c.oid = relid AND c.relkind IN ('r', 'p') AND c.relpersistence = 'p'
	   AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', '@extschema@')
$$;
REVOKE ALL ON FUNCTION ddl_recorded_table(oid) FROM PUBLIC;

/* Does the table hold a row (seen by the DDL's own transaction)? */
CREATE FUNCTION ddl_table_has_rows(relid oid)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	found boolean;
BEGIN
	EXECUTE format('SELECT EXISTS (SELECT FROM ONLY %s)', relid::regclass) INTO found;
	RETURN found;
END
$$;
REVOKE ALL ON FUNCTION ddl_table_has_rows(oid) FROM PUBLIC;

/* ddl_command_end: one row per command and table it affects */
CREATE FUNCTION ddl_command_end_trigger()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	cmd record;
	tbl record;
	relid oid;
	cols text[];
BEGIN
	FOR cmd IN SELECT * FROM pg_catalog.pg_event_trigger_ddl_commands()
	LOOP
		relid := CASE
			WHEN cmd.classid = 'pg_catalog.pg_class'::regclass THEN
				coalesce((SELECT i.indrelid FROM pg_catalog.pg_index i
						   WHERE i.indexrelid = cmd.objid), cmd.objid)
			WHEN cmd.classid = 'pg_catalog.pg_constraint'::regclass THEN
				(SELECT c.conrelid FROM pg_catalog.pg_constraint c WHERE c.oid = cmd.objid)
			WHEN cmd.classid = 'pg_catalog.pg_publication_rel'::regclass THEN
				(SELECT r.prrelid FROM pg_catalog.pg_publication_rel r WHERE r.oid = cmd.objid)
			END;
		CONTINUE WHEN relid IS NULL;
		SELECT * INTO tbl FROM @extschema@.ddl_recorded_table(relid);
		CONTINUE WHEN tbl.table_name IS NULL;
		-- the command's own table, then every other table whose rows it set
		FOR relid, cols IN
			SELECT r.table_oid, array_agg(r.column_name ORDER BY r.column_name)
				FILTER (WHERE r.column_name IS NOT NULL)
			  FROM (SELECT relid AS table_oid, NULL::text AS column_name
					UNION ALL
					SELECT s.table_oid, s.column_name
					  FROM @extschema@.ddl_columns_set(cmd.command) s) r
			 GROUP BY r.table_oid
			 ORDER BY r.table_oid <> relid, r.table_oid
		LOOP
			SELECT * INTO tbl FROM @extschema@.ddl_recorded_table(relid);
			CONTINUE WHEN tbl.table_name IS NULL;
			IF cols IS NOT NULL AND NOT @extschema@.ddl_table_has_rows(relid) THEN
				cols := NULL;
			END IF;
			INSERT INTO @extschema@.ddl_history (event, command_tag, object_type,
				object_identity, table_oid, schema_name, table_name, columns,
				rows_changed, statement)
			VALUES ('ddl_command_end', cmd.command_tag, cmd.object_type,
				cmd.object_identity, relid, tbl.schema_name, tbl.table_name, cols,
				cols IS NOT NULL, pg_catalog.current_query());
		END LOOP;
	END LOOP;
END
$$;

/* sql_drop: one row per table dropped */
CREATE FUNCTION ddl_sql_drop_trigger()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	obj record;
BEGIN
	FOR obj IN SELECT * FROM pg_catalog.pg_event_trigger_dropped_objects()
	LOOP
		CONTINUE WHEN obj.classid <> 'pg_catalog.pg_class'::regclass
			OR obj.objsubid <> 0 OR obj.object_type <> 'table'
			OR obj.is_temporary
			OR obj.schema_name IN ('pg_catalog', 'information_schema', 'pg_toast', '@extschema@');
		INSERT INTO @extschema@.ddl_history (event, command_tag, object_type,
			object_identity, table_oid, schema_name, table_name, rows_changed,
			statement)
		VALUES ('sql_drop', tg_tag, obj.object_type,
			obj.object_identity, obj.objid, obj.schema_name, obj.object_name,
			false, pg_catalog.current_query());
	END LOOP;
END
$$;

/* table_rewrite: one row per table rewritten */
CREATE FUNCTION ddl_table_rewrite_trigger()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	relid oid := pg_catalog.pg_event_trigger_table_rewrite_oid();
	reason int := pg_catalog.pg_event_trigger_table_rewrite_reason();
	tbl record;
BEGIN
	SELECT * INTO tbl FROM @extschema@.ddl_recorded_table(relid);
	IF tbl.table_name IS NULL THEN
		RETURN;
	END IF;
	INSERT INTO @extschema@.ddl_history (event, command_tag, object_type,
		object_identity, table_oid, schema_name, table_name, rewrite_reason,
		rows_changed, statement)
	VALUES ('table_rewrite', tg_tag, 'table',
		pg_catalog.quote_ident(tbl.schema_name) || '.' || pg_catalog.quote_ident(tbl.table_name),
		relid, tbl.schema_name, tbl.table_name, reason,
		(reason & 2) <> 0 AND @extschema@.ddl_table_has_rows(relid),
		pg_catalog.current_query());
END
$$;

REVOKE ALL ON FUNCTION ddl_command_end_trigger() FROM PUBLIC;
REVOKE ALL ON FUNCTION ddl_sql_drop_trigger() FROM PUBLIC;
REVOKE ALL ON FUNCTION ddl_table_rewrite_trigger() FROM PUBLIC;

CREATE EVENT TRIGGER changestream_ddl_command_end ON ddl_command_end
	EXECUTE FUNCTION ddl_command_end_trigger();
CREATE EVENT TRIGGER changestream_sql_drop ON sql_drop
	EXECUTE FUNCTION ddl_sql_drop_trigger();
CREATE EVENT TRIGGER changestream_table_rewrite ON table_rewrite
	EXECUTE FUNCTION ddl_table_rewrite_trigger();
-- also under session_replication_role = replica (tools that replay DDL)
ALTER EVENT TRIGGER changestream_ddl_command_end ENABLE ALWAYS;
ALTER EVENT TRIGGER changestream_sql_drop ENABLE ALWAYS;
ALTER EVENT TRIGGER changestream_table_rewrite ENABLE ALWAYS;

/*
 * The extension's publication: ddl_history's inserts only.  The archiver
 * streams it beside changestream.publication once it exists and publishes
 * this extension's ddl_history.  A publication cannot be a member of an
 * extension, so DROP EXTENSION leaves it behind, publishing nothing; such
 * a leftover is replaced here.  A publication of that name that publishes
 * anything is someone else's: 42710.
 */
DO $$
BEGIN
	IF EXISTS (SELECT FROM pg_catalog.pg_publication p
			    WHERE p.pubname = 'changestream_ddl'
				  AND (p.puballtables
					   OR EXISTS (SELECT FROM pg_catalog.pg_publication_rel r
								   WHERE r.prpubid = p.oid)
					   OR EXISTS (SELECT FROM pg_catalog.pg_publication_namespace n
								   WHERE n.pnpubid = p.oid))) THEN
		RAISE EXCEPTION 'publication "changestream_ddl" already exists and publishes tables'
			USING ERRCODE = '42710',
				  HINT = 'changestream owns a publication of that name: rename or drop this one.';
	END IF;
	DROP PUBLICATION IF EXISTS changestream_ddl;
END
$$;
CREATE PUBLICATION changestream_ddl FOR TABLE ddl_history WITH (publish = 'insert');

/* restore() gains skip_inexact (the 0.1 signature is replaced) */
DROP FUNCTION restore(text, text, pg_lsn, timestamptz, text[], text);

/*
 * restore(target_schema, generation, target_lsn, target_time, tables,
 *         archive_directory, skip_inexact) -> record
 *   Restores archived tables (tables: "schema.table" or "table"; NULL for
 *   all) as of the last transaction that committed at or before target_lsn
 *   or target_time (at most one; NULL: everything archived), into
 *   target_schema.<table> (NULL: each table's own schema), in the caller's
 *   transaction.  The newest snapshot not after the target is loaded with
 *   COPY, then the archived transactions after it are applied in commit
 *   order (session_replication_role = replica; column changes followed).
 *   Existing target tables must be empty and have the archived columns
 *   (and, for updates and deletes, the key as replica identity index or
 *   primary key); missing ones are created.  archive_directory (superuser only) reads a
 *   copy of an archive, for disaster recovery.  NOTICEs report progress.
 *   A table whose existing rows a DDL command changed without archived
 *   changes (ddl_history.rows_changed) between the snapshot and the
 *   target is refused (0A000, naming the command, its LSN and the nearest
 *   exact targets), or, with skip_inexact, left out with a WARNING.
 *   Tables renamed, moved or dropped by recorded DDL follow it.
 *   Errors: 0A000 a table cannot be restored exactly (above); 22023 target outside the generation (range in DETAIL), or both
 *           targets given; 42P07 two tables would share a target; 55000 a
 *           target table is not empty; 42703 a target lacks a column;
 *           42501 archive_directory without superuser; 42704 no such
 *           generation; XX001 damaged archive (file and offset named).
 */
CREATE FUNCTION restore(
	target_schema text,
	generation text DEFAULT NULL,
	target_lsn pg_lsn DEFAULT NULL,
	target_time timestamptz DEFAULT NULL,
	tables text[] DEFAULT NULL,
	archive_directory text DEFAULT NULL,
	skip_inexact boolean DEFAULT false,
	OUT generation text,
	OUT snapshot_lsn pg_lsn,
	OUT restored_lsn pg_lsn,
	OUT restored_commit_time timestamptz,
	OUT tables int,
	OUT snapshot_rows bigint,
	OUT transactions bigint,
	OUT changes bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'changestream_restore'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;

REVOKE ALL ON FUNCTION restore(text, text, pg_lsn, timestamptz, text[], text, boolean) FROM PUBLIC;
