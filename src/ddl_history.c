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
#include "fmgr.h"
#include "funcapi.h"
#include "nodes/parsenodes.h"
#include "storage/lockdefs.h"
#include "tcop/deparse_utility.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"

#include "compat.h"
#include "ddl_history.h"

PG_FUNCTION_INFO_V1(changestream_ddl_columns_set);

/* Emit (relid, column) for relid and each inheritor having the column. */
static void
emit_column(ReturnSetInfo *rsinfo, Oid relid, const char *column,
			bool missing_only)
{
	List	   *rels = find_all_inheritors(relid, NoLock, NULL);
	ListCell   *lc;

	foreach(lc, rels)
	{
		Oid			child = lfirst_oid(lc);
		HeapTuple	tup = SearchSysCacheAttName(child, column);
		Form_pg_attribute att;
		Datum		values[2];
		bool		nulls[2] = {false, false};

		if (!HeapTupleIsValid(tup))
			continue;
		att = (Form_pg_attribute) GETSTRUCT(tup);
		if (!missing_only || att->atthasmissing)
		{
			values[0] = ObjectIdGetDatum(child);
			values[1] = CStringGetTextDatum(column);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
		ReleaseSysCache(tup);
	}
}

/*
 * changestream.ddl_columns_set(command pg_ddl_command) -> setof (table_oid
 *	  oid, column_name text)
 *	  For an ALTER TABLE collected at ddl_command_end: each column added
 *	  with a missing value (atthasmissing: existing rows read a default
 *	  that no change carried) and each column retyped with USING, on the
 *	  altered table and each of its inheritors (partitions) that has the
 *	  column.  No row for any other command.  The command is the value
 *	  pg_event_trigger_ddl_commands() returns; no other source of a
 *	  pg_ddl_command exists (its input function raises an error).
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
			emit_column(rsinfo, sub->address.objectId, column, true);
		else if (at->subtype == AT_AlterColumnType && at->def != NULL &&
				 IsA(at->def, ColumnDef) &&
				 ((ColumnDef *) at->def)->raw_default != NULL)
			emit_column(rsinfo, sub->address.objectId, column, false);
	}
	return (Datum) 0;
}

/* ---------- read side ---------- */

/*
 * cs_ddl_is_history
 *	  Is rel (a Relation message of the archive) changestream.ddl_history?
 *	  Only the extension can create a table of that name in its schema.
 */
bool
cs_ddl_is_history(const LogicalRepRelation *rel)
{
	return rel != NULL && rel->nspname != NULL && rel->relname != NULL &&
		strcmp(rel->nspname, CS_DDL_SCHEMA) == 0 &&
		strcmp(rel->relname, CS_DDL_TABLE) == 0;
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
	char	   *end;
	unsigned long oid;

	memset(record, 0, sizeof(*record));
	record->event = column_value(change, "event", true);
	record->command_tag = column_value(change, "command_tag", true);
	record->object_identity = column_value(change, "object_identity", false);
	record->schema_name = column_value(change, "schema_name", true);
	record->table_name = column_value(change, "table_name", true);
	record->columns = column_value(change, "columns", false);
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
}
