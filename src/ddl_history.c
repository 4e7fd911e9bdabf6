/*-------------------------------------------------------------------------
 *
 * ddl_history.c
 *	  Schema history (docs/DESIGN.md section 12).
 *
 *	  Source side: changestream_ddl_columns_set(), which the ddl_command_end
 *	  event trigger of the extension calls to learn which columns an ALTER
 *	  TABLE filled without a change (ADD COLUMN with a missing value,
 *	  ALTER COLUMN TYPE ... USING): only the collected command's parse
 *	  tree says so, and SQL cannot read it.
 *
 *	  Read side: recognising changestream.ddl_history in the archived
 *	  stream and reading one of its rows, checked, for changes() and
 *	  restore().  The archive is untrusted: a row that lacks a column or
 *	  holds a malformed value is damage (XX001, file and offset named).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "nodes/parsenodes.h"
#include "storage/fd.h"
#include "storage/lockdefs.h"
#include "tcop/deparse_utility.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"

#include "archive_dir.h"
#include "archive_layout.h"
#include "compat.h"
#include "ddl_history.h"

PG_FUNCTION_INFO_V1(changestream_ddl_columns_set);

/* How an ALTER TABLE subcommand set a column's existing values. */
typedef enum CsColumnSet
{
	CS_COLUMN_ADDED,			/* ADD COLUMN with a default */
	CS_COLUMN_USING,			/* ALTER COLUMN TYPE ... USING */
	CS_COLUMN_RETYPED			/* ALTER COLUMN TYPE, no USING: a cast */
} CsColumnSet;

/*
 * Emit (relid, column, new_type) for relid and each inheritor having the
 * column: for CS_COLUMN_ADDED only where the added column gives existing
 * rows a value (a default of its own, a missing value, or a domain's);
 * new_type (the OID of the column's type now) only for CS_COLUMN_RETYPED.
 */
static void
emit_column(ReturnSetInfo *rsinfo, Oid relid, const char *column,
			CsColumnSet how)
{
	List	   *rels = find_all_inheritors(relid, NoLock, NULL);
	ListCell   *lc;

	foreach(lc, rels)
	{
		Oid			child = lfirst_oid(lc);
		HeapTuple	tup = SearchSysCacheAttName(child, column);
		Form_pg_attribute att;
		Datum		values[3];
		bool		nulls[3] = {false, false, true};

		if (!HeapTupleIsValid(tup))
			continue;
		att = (Form_pg_attribute) GETSTRUCT(tup);
		if (how != CS_COLUMN_ADDED || att->atthasmissing || att->atthasdef ||
			get_typtype(att->atttypid) == TYPTYPE_DOMAIN)
		{
			values[0] = ObjectIdGetDatum(child);
			values[1] = CStringGetTextDatum(column);
			if (how == CS_COLUMN_RETYPED)
			{
				values[2] = ObjectIdGetDatum(att->atttypid);
				nulls[2] = false;
			}
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
		ReleaseSysCache(tup);
	}
}

/*
 * changestream.ddl_columns_set(command pg_ddl_command) -> setof (table_oid
 *	  oid, column_name text, new_type oid)
 *	  For an ALTER TABLE collected at ddl_command_end: each column added
 *	  with a default (its own, a missing value, or its domain's: existing
 *	  rows read a value that no change carried, also when a rewrite in
 *	  the same command filled it in) and each column retyped, on the
 *	  altered table and each of its inheritors (partitions) that has the
 *	  column; new_type is the type now of a column retyped without USING
 *	  (restore() replays a cast it knows to be independent of the session,
 *	  see restore.c), NULL otherwise.  No row for any other command.  The
 *	  command is the value pg_event_trigger_ddl_commands() returns; no
 *	  other source of a pg_ddl_command exists (its input function raises
 *	  an error).
 */
Datum
changestream_ddl_columns_set(PG_FUNCTION_ARGS)
{
	CollectedCommand *cmd = (CollectedCommand *) PG_GETARG_POINTER(0);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	if (cmd == NULL || cmd->type != SCT_AlterTable ||
		cmd->d.alterTable.classId != RelationRelationId)
		return (Datum) 0;
	foreach(lc, cmd->d.alterTable.subcmds)
	{
		CollectedATSubcmd *sub = lfirst(lc);
		AlterTableCmd *at = (AlterTableCmd *) sub->parsetree;
		char	   *column;

		if (at == NULL || !IsA(at, AlterTableCmd) ||
			sub->address.classId != RelationRelationId ||
			sub->address.objectSubId <= 0)
			continue;
		column = get_attname(sub->address.objectId,
							 (AttrNumber) sub->address.objectSubId, true);
		if (column == NULL)
			continue;			/* dropped again by a later subcommand */
		if (cs_is_add_column(at->subtype))
			emit_column(rsinfo, sub->address.objectId, column, CS_COLUMN_ADDED);
		else if (at->subtype == AT_AlterColumnType)
			emit_column(rsinfo, sub->address.objectId, column,
						(at->def != NULL && IsA(at->def, ColumnDef) &&
						 ((ColumnDef *) at->def)->raw_default != NULL) ?
						CS_COLUMN_USING : CS_COLUMN_RETYPED);
	}
	return (Datum) 0;
}

/* ---------- read side ---------- */

/*
 * cs_ddl_is_history_name
 *	  Is schema.name the name of the extension's history table?  A name
 *	  alone proves nothing (see cs_ddl_is_history()); this is for the
 *	  places that leave the table out by name, such as restore()'s
 *	  tables from a snapshot manifest.
 */
bool
cs_ddl_is_history_name(const char *schema, const char *name)
{
	return schema != NULL && name != NULL &&
		strcmp(schema, CS_DDL_SCHEMA) == 0 && strcmp(name, CS_DDL_TABLE) == 0;
}

/*
 * cs_ddl_is_history
 *	  Is rel (a Relation message of the archive) the extension's
 *	  changestream.ddl_history?  Its name and one of the OIDs trusted
 *	  (cs_ddl_trusted_oids()) must both match: a table of that name made
 *	  by anyone else (after DROP EXTENSION, say) is ordinary data.
 */
bool
cs_ddl_is_history(const LogicalRepRelation *rel, const List *trusted)
{
	return rel != NULL && cs_ddl_is_history_name(rel->nspname, rel->relname) &&
		list_member_oid(trusted, rel->remoteid);
}

/*
 * cs_ddl_trusted_oids
 *	  The OIDs of generations/<gen>/schema_history (NIL when there is no
 *	  such file: then no relation is schema history).  Errors: XX001
 *	  naming the file when a line is not an OID; file access errors as
 *	  cs_read_small_file().
 */
List *
cs_ddl_trusted_oids(const char *directory, uint64 generation)
{
	char	   *path = cs_schema_history_path(directory, generation);
	StringInfoData text;
	char	   *line;
	char	   *next;
	List	   *oids = NIL;

	initStringInfo(&text);
	if (!cs_read_small_file(path, 65536, &text, true))
		return NIL;
	for (line = text.data; line != NULL && *line != '\0'; line = next)
	{
		char	   *end;
		unsigned long oid;

		next = strchr(line, '\n');
		if (next != NULL)
			*next++ = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		errno = 0;
		oid = strtoul(line, &end, 10);
		if (errno != 0 || end == line || *end != '\0' || oid > PG_UINT32_MAX ||
			oid == InvalidOid)
			cs_file_damage(path, line - text.data, "\"%s\" is not an OID.", line);
		oids = list_append_unique_oid(oids, (Oid) oid);
	}
	return oids;
}

/*
 * cs_ddl_trust_oid
 *	  The archiver, before it streams the extension's publication: adds oid
 *	  (the extension's ddl_history on the archived server, from pg_depend)
 *	  to generations/<gen>/schema_history unless it is there, durably
 *	  (schema_history.tmp, fsync, rename, fsync of the directory), so that
 *	  every row of that table the generation holds comes after it.
 *	  Errors: as cs_ddl_trusted_oids(); file access errors (class 58).
 */
void
cs_ddl_trust_oid(const char *directory, uint64 generation, Oid oid)
{
	List	   *oids = cs_ddl_trusted_oids(directory, generation);
	char	   *gendir = cs_generation_path(directory, generation);
	char	   *path = cs_schema_history_path(directory, generation);
	StringInfoData content;
	ListCell   *lc;

	if (list_member_oid(oids, oid))
		return;
	oids = lappend_oid(oids, oid);
	initStringInfo(&content);
	appendStringInfoString(&content,
						   "# changestream schema history: OIDs of the extension's table "
						   CS_DDL_SCHEMA "." CS_DDL_TABLE "\n");
	foreach(lc, oids)
		appendStringInfo(&content, "%u\n", lfirst_oid(lc));
	cs_write_file_durably(path, gendir, content.data, content.len);
}

/* The text value of column name in the new tuple; NULL for SQL NULL. */
static const char *
column_value(const CsChange *c, const char *name, bool required)
{
	const LogicalRepRelation *rel = c->rel;

	for (int i = 0; i < rel->natts && i < c->newtup.ncols; i++)
	{
		if (strcmp(rel->attnames[i], name) != 0)
			continue;
		if (c->newtup.colstatus[i] == LOGICALREP_COLUMN_TEXT)
			return c->newtup.colvalues[i].data;
		if (c->newtup.colstatus[i] == LOGICALREP_COLUMN_NULL && !required)
			return NULL;
		break;
	}
	if (required)
		cs_segment_damage(c->path, c->frame_offset,
						  "A row of %s.%s has no value of column \"%s\".",
						  CS_DDL_SCHEMA, CS_DDL_TABLE, name);
	return NULL;
}

/*
 * cs_ddl_read
 *	  Reads the ddl_history row of change (an INSERT into the relation
 *	  cs_ddl_is_history() accepts) into *record; the strings point into
 *	  the change and live as long as it does.
 *	  Errors: XX001 naming the segment and offset when a required column
 *	  is missing or NULL, or table_oid or rows_changed is malformed.
 */
void
cs_ddl_read(const CsChange *change, CsDdlRecord *record)
{
	const char *oid_text;
	const char *changed;
	const char *reason;
	char	   *end;
	unsigned long oid;

	memset(record, 0, sizeof(*record));
	record->event = column_value(change, "event", true);
	record->command_tag = column_value(change, "command_tag", true);
	record->object_type = column_value(change, "object_type", false);
	record->object_identity = column_value(change, "object_identity", false);
	record->publication = column_value(change, "publication", false);
	record->schema_name = column_value(change, "schema_name", true);
	record->table_name = column_value(change, "table_name", true);
	record->columns = column_value(change, "columns", false);
	record->retyped = column_value(change, "retyped", false);
	record->retyped_to = column_value(change, "retyped_to", false);
	oid_text = column_value(change, "table_oid", true);
	changed = column_value(change, "rows_changed", true);
	errno = 0;
	oid = strtoul(oid_text, &end, 10);
	if (errno != 0 || end == oid_text || *end != '\0' || oid > PG_UINT32_MAX ||
		oid == InvalidOid)
		cs_segment_damage(change->path, change->frame_offset,
						  "A row of %s.%s has table_oid \"%s\", not an OID.",
						  CS_DDL_SCHEMA, CS_DDL_TABLE, oid_text);
	record->table_oid = (Oid) oid;
	if (strcmp(changed, "t") != 0 && strcmp(changed, "f") != 0)
		cs_segment_damage(change->path, change->frame_offset,
						  "A row of %s.%s has rows_changed \"%s\", not a boolean.",
						  CS_DDL_SCHEMA, CS_DDL_TABLE, changed);
	record->rows_changed = (changed[0] == 't');
	reason = column_value(change, "rewrite_reason", false);
	if (reason != NULL)
	{
		long		bits;

		errno = 0;
		bits = strtol(reason, &end, 10);
		if (errno != 0 || end == reason || *end != '\0' || bits < 0 ||
			bits > PG_INT32_MAX)
			cs_segment_damage(change->path, change->frame_offset,
							  "A row of %s.%s has rewrite_reason \"%s\", not a number.",
							  CS_DDL_SCHEMA, CS_DDL_TABLE, reason);
		record->rewrite_reason = (int) bits;
	}
}
