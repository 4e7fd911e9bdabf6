/*-------------------------------------------------------------------------
 *
 * ddl_history.c
 *	  Schema history (docs/DESIGN.md section 12).
 *
 *	  Source side: changestream_ddl_columns_set(), which the ddl_command_end
 *	  event trigger of the extension calls to learn which columns an ALTER
 *	  TABLE filled without a change (ADD COLUMN with a missing value,
 *	  ALTER COLUMN TYPE ... USING): only the collected command's parse
 *	  tree says so, and SQL cannot read it; and
 *	  changestream_ddl_adds_enum_value(), which tells an ALTER TYPE ... ADD
 *	  VALUE (no stored value changes) from a RENAME VALUE; and
 *	  changestream_ddl_table_definition(), a table's full definition as
 *	  the trigger records it with each row (archive/table_definition.c);
 *	  and changestream_ddl_recorded_table(), whether a table's DDL is
 *	  recorded and under which name; and changestream_ddl_typed_tables(),
 *	  the tables of a composite type.  All of them read the catalog as it is
 *	  now, not on a REPEATABLE READ transaction's snapshot.
 *
 *	  The archive side is in archive/schema_history.c (which relation is
 *	  the history table) and read/ddl_record.c (reading one of its rows).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/genam.h"
#include "access/table.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "nodes/parsenodes.h"
#include "storage/fd.h"
#include "storage/lockdefs.h"
#include "tcop/deparse_utility.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"

#include "archive/table_definition.h"
#include "base/compat.h"

PG_FUNCTION_INFO_V1(changestream_ddl_columns_set);
PG_FUNCTION_INFO_V1(changestream_ddl_adds_enum_value);
PG_FUNCTION_INFO_V1(changestream_ddl_table_definition);
PG_FUNCTION_INFO_V1(changestream_ddl_recorded_table);
PG_FUNCTION_INFO_V1(changestream_ddl_typed_tables);

/* How an ALTER TABLE subcommand set a column's existing values. */
typedef enum CsColumnSet
{
	CS_COLUMN_ADDED,			/* ADD COLUMN with a default */
	CS_COLUMN_USING,			/* ALTER COLUMN TYPE ... USING */
	CS_COLUMN_RETYPED,			/* ALTER COLUMN TYPE, no USING: a cast */
	CS_COLUMN_KEPT				/* ALTER COLUMN DROP EXPRESSION: the
								 * computed values stay, as values no change
								 * carried (pgoutput leaves generated
								 * columns out) */
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
 *	  the same command filled it in), each column retyped, and each
 *	  generated column made an ordinary one (DROP EXPRESSION: its values,
 *	  never published, stay as the column's), on the
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
		else if (at->subtype == AT_DropExpression)
			emit_column(rsinfo, sub->address.objectId, column, CS_COLUMN_KEPT);
	}
	return (Datum) 0;
}

/*
 * changestream.ddl_adds_enum_value(command pg_ddl_command) -> boolean
 *	  Is the command collected at ddl_command_end an ALTER TYPE ... ADD
 *	  VALUE (which changes no stored value, unlike RENAME VALUE: both have
 *	  the tag ALTER TYPE, and only the parse tree tells them apart)?  The
 *	  command is the value pg_event_trigger_ddl_commands() returns.
 */
Datum
changestream_ddl_adds_enum_value(PG_FUNCTION_ARGS)
{
	CollectedCommand *cmd = (CollectedCommand *) PG_GETARG_POINTER(0);
	AlterEnumStmt *stmt;

	if (cmd == NULL || cmd->type != SCT_Simple || cmd->parsetree == NULL ||
		!IsA(cmd->parsetree, AlterEnumStmt))
		PG_RETURN_BOOL(false);
	stmt = (AlterEnumStmt *) cmd->parsetree;
	PG_RETURN_BOOL(stmt->oldVal == NULL);
}

/*
 * changestream.ddl_table_definition(relid oid) -> json
 *	  The full definition of the table relid as the catalog holds it now
 *	  (read on the latest snapshot, the caller's command included, whatever
 *	  the transaction's isolation level): the
 *	  JSON of docs/FORMAT.md section 3.2 ("definition"), read by the query
 *	  of archive/table_definition.c, the one the snapshot manifest uses.
 *	  NULL when relid is no relation, or not an ordinary or partitioned
 *	  table.
 */
Datum
changestream_ddl_table_definition(PG_FUNCTION_ARGS)
{
	/* the query's plan, kept for the session: a DDL may record many tables */
	static SPIPlanPtr plan = NULL;
	Datum		args[1];
	Datum		result = (Datum) 0;
	bool		isnull = true;
	int			ret;

	args[0] = PG_GETARG_DATUM(0);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (plan == NULL)
	{
		Oid			argtypes[1] = {OIDOID};
		SPIPlanPtr	prepared;

		prepared = SPI_prepare(cs_table_definition_query("$1"), 1, argtypes);
		if (prepared == NULL || SPI_keepplan(prepared) != 0)
			elog(ERROR, "preparing the table definition query failed: %s",
				 SPI_result_code_string(SPI_result));
		plan = prepared;
	}
	/*
	 * On the latest snapshot, not the transaction's: under REPEATABLE READ
	 * the transaction's snapshot predates column changes other sessions
	 * committed before this command, which the command itself (it reads
	 * the catalog as it is now) has gone by.
	 */
	ret = SPI_execute_snapshot(plan, args, NULL, GetLatestSnapshot(),
							   InvalidSnapshot, false, false, 1);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "reading a table definition failed: %s",
			 SPI_result_code_string(ret));
	if (SPI_processed > 0)
	{
		result = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
							   2, &isnull);
		if (!isnull)
			result = SPI_datumTransfer(result, false, -1);
	}
	SPI_finish();
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/* Is nspname a schema whose tables' DDL is never recorded? */
static bool
unrecorded_schema(const char *nspname)
{
	return strcmp(nspname, "pg_catalog") == 0 ||
		strcmp(nspname, "information_schema") == 0 ||
		strcmp(nspname, "pg_toast") == 0 ||
		strcmp(nspname, "changestream") == 0;	/* the control file's schema */
}

/*
 * changestream.ddl_recorded_table(relid oid, any_persistence boolean)
 *		-> (schema_name text, table_name text)
 *	  relid's schema and name when its DDL is recorded: an ordinary or
 *	  partitioned table, permanent (any_persistence: unlogged too), in no
 *	  system schema nor the extension's; NULLs for anything else.  Read
 *	  from the system caches, so on the catalog as it is now whatever the
 *	  transaction's isolation level (under REPEATABLE READ a query would
 *	  read the transaction's snapshot: a table another session renamed
 *	  since would be recorded by its old name, one it created not at all).
 */
Datum
changestream_ddl_recorded_table(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	bool		any_persistence = PG_GETARG_BOOL(1);
	TupleDesc	tupdesc;
	Datum		values[2] = {0};
	bool		nulls[2] = {true, true};
	HeapTuple	tup;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (HeapTupleIsValid(tup))
	{
		Form_pg_class c = (Form_pg_class) GETSTRUCT(tup);
		char	   *nspname = get_namespace_name(c->relnamespace);

		if ((c->relkind == RELKIND_RELATION ||
			 c->relkind == RELKIND_PARTITIONED_TABLE) &&
			(c->relpersistence == RELPERSISTENCE_PERMANENT ||
			 (any_persistence && c->relpersistence == RELPERSISTENCE_UNLOGGED)) &&
			nspname != NULL && !unrecorded_schema(nspname))
		{
			values[0] = CStringGetTextDatum(nspname);
			values[1] = CStringGetTextDatum(NameStr(c->relname));
			nulls[0] = nulls[1] = false;
		}
		ReleaseSysCache(tup);
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * changestream.ddl_typed_tables(typ oid) -> setof oid
 *	  The tables (of any kind; callers keep the recorded ones) made with
 *	  CREATE TABLE ... OF typ, read by a scan of pg_class on the catalog
 *	  snapshot, as ALTER TYPE ... CASCADE finds the tables it changes
 *	  (under REPEATABLE READ a query would miss a typed table another
 *	  session created since the transaction's snapshot).
 */
Datum
changestream_ddl_typed_tables(PG_FUNCTION_ARGS)
{
	Oid			typ = PG_GETARG_OID(0);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Relation	classrel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	classrel = table_open(RelationRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_class_reloftype, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(typ));
	scan = systable_beginscan(classrel, InvalidOid, false, NULL, 1, &key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Datum		value = ObjectIdGetDatum(((Form_pg_class) GETSTRUCT(tup))->oid);
		bool		isnull = false;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &isnull);
	}
	systable_endscan(scan);
	table_close(classrel, AccessShareLock);
	return (Datum) 0;
}
