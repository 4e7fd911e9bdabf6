/*-------------------------------------------------------------------------
 *
 * sql_changes.c
 *	  changestream.changes(): archived history as rows, one per change,
 *	  decoded by decoder.c.  Row values are the archived text form as JSON
 *	  strings (SQL NULL as JSON null), except json and jsonb columns, which
 *	  are embedded as JSON, so jsonb_populate_record() gives the typed row
 *	  back; a json value jsonb cannot hold is given back as a string of its
 *	  text, never failing the call.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "archive/reader_pins.h"
#include "read/archived_tables.h"
#include "read/ddl_record.h"
#include "read/decoder.h"
#include "read/read_source.h"
#include "base/compat.h"

PG_FUNCTION_INFO_V1(changestream_changes);

#define CHANGE_COLS 10

/* The bounds and filter of one changes() call, and its state. */
typedef struct ChangeFilter
{
	XLogRecPtr	start_lsn;
	XLogRecPtr	end_lsn;
	bool		has_start_time;
	TimestampTz start_time;
	bool		has_end_time;
	TimestampTz end_time;
	List	   *relations;		/* char *: "schema.table" or "table" */
	List	   *ddl_trusted;	/* OIDs of the schema history table */
	bool		json_warned;	/* a json value was given back as text in
								 * this call (push_value()) */
} ChangeFilter;

/*
 * A value's text as a JSON string (len bytes, stopping at a zero byte as
 * a C string would).  Raises 54000 past jsonb's string length limit
 * (checkStringLen() in jsonb.c): a longer length would spill into the
 * JEntry's type bits.
 */
static void
string_value(JsonbValue *v, const StringInfoData *value)
{
	v->type = jbvString;
	v->val.string.val = value->data;
	v->val.string.len = strnlen(value->data, value->len);
	if (v->val.string.len > JENTRY_OFFLENMASK)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("string too long to represent as jsonb string"),
				 errdetail("A column value of %d bytes exceeds jsonb's limit of %d bytes for a string.",
						   v->val.string.len, JENTRY_OFFLENMASK),
				 errhint("Read this change with wal_records(), which returns the pgoutput message as bytea.")));
}

/*
 * Push one column value as the value of the current key: json and jsonb
 * columns embedded (parsed by jsonb_in), any other type its text form as
 * a string.  A json value that jsonb cannot hold (valid json that jsonb
 * rejects: a \u0000 escape, a number beyond numeric's range) is given
 * back as a string holding its stored text, with a WARNING the first time
 * in a call (*warned), instead of failing the call.
 */
static void
push_value(CsJsonbBuild *state, const char *column, Oid typid,
		   const StringInfoData *value, bool *warned)
{
	JsonbValue	v;
	Datum		parsed;

	if ((typid == JSONOID || typid == JSONBOID) &&
		cs_jsonb_in_soft(value->data, &parsed))
	{
		Jsonb	   *jb = DatumGetJsonbP(parsed);

		if (JB_ROOT_IS_SCALAR(jb))
			JsonbExtractScalar(&jb->root, &v);
		else
		{
			v.type = jbvBinary;
			v.val.binary.data = &jb->root;
			v.val.binary.len = VARSIZE(jb) - VARHDRSZ;
		}
	}
	else
	{
		if ((typid == JSONOID || typid == JSONBOID) && !*warned)
		{
			ereport(WARNING,
					(errcode(ERRCODE_WARNING),
					 errmsg("a value of column \"%s\" cannot be held by jsonb and is given back as a string holding its json text",
							column),
					 errdetail("jsonb rejects a \\u0000 escape, and numbers beyond numeric's range, which json keeps."),
					 errhint("Read it with (new_row->>%s)::json; this warning is given once per call.",
							 quote_literal_cstr(column))));
			*warned = true;
		}
		string_value(&v, value);
	}
	cs_jsonb_push(state, WJB_VALUE, &v);
}

/* Push one object key of len bytes. */
static void
push_string(CsJsonbBuild *state, JsonbIteratorToken seq,
			const char *str, int len)
{
	JsonbValue	v;

	v.type = jbvString;
	v.val.string.val = (char *) str;
	v.val.string.len = len;
	cs_jsonb_push(state, seq, &v);
}

/*
 * A tuple as jsonb: {column: value}, built with pushJsonbValue() (no JSON
 * text is formed or parsed).  keys_only keeps only the replica identity
 * key's columns.  Unchanged TOASTed columns are left out and added to
 * *unchanged (column names).
 */
static Datum
tuple_jsonb(LogicalRepRelation *rel, LogicalRepTupleData *tup, bool keys_only,
			List **unchanged, bool *json_warned)
{
	CsJsonbBuild state;
	JsonbValue *result;
	JsonbValue	null_value;

	memset(&state, 0, sizeof(state));
	null_value.type = jbvNull;
	cs_jsonb_push(&state, WJB_BEGIN_OBJECT, NULL);
	for (int i = 0; i < tup->ncols; i++)
	{
		if (keys_only && !bms_is_member(i, rel->attkeys))
			continue;
		if (tup->colstatus[i] == LOGICALREP_COLUMN_UNCHANGED)
		{
			if (unchanged)
				*unchanged = lappend(*unchanged, rel->attnames[i]);
			continue;
		}
		push_string(&state, WJB_KEY, rel->attnames[i],
					strlen(rel->attnames[i]));
		if (tup->colstatus[i] == LOGICALREP_COLUMN_NULL)
			cs_jsonb_push(&state, WJB_VALUE, &null_value);
		else
			push_value(&state, rel->attnames[i], rel->atttyps[i],
					   &tup->colvalues[i], json_warned);
	}
	result = cs_jsonb_push(&state, WJB_END_OBJECT, NULL);
	return JsonbPGetDatum(JsonbValueToJsonb(result));
}

static Datum
names_array(List *names)
{
	ArrayBuildState *astate = NULL;
	ListCell   *lc;

	if (names == NIL)
		return PointerGetDatum(construct_empty_array(TEXTOID));
	foreach(lc, names)
		astate = accumArrayResult(astate, CStringGetTextDatum(lfirst(lc)),
								  false, TEXTOID, CurrentMemoryContext);
	return makeArrayResult(astate, CurrentMemoryContext);
}

/* A logical message as jsonb: prefix, transactional, content. */
static Datum
message_jsonb(const CsChange *c)
{
	StringInfoData buf;
	char	   *content;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"prefix\": ");
	escape_json(&buf, c->prefix);
	appendStringInfo(&buf, ", \"transactional\": %s, \"content\": ",
					 c->transactional ? "true" : "false");
	if (memchr(c->content, '\0', c->content_len) == NULL &&
		pg_verifymbstr(c->content, c->content_len, true))
		content = pnstrdup(c->content, c->content_len);
	else
	{
		bytea	   *b = palloc(VARHDRSZ + c->content_len);

		SET_VARSIZE(b, VARHDRSZ + c->content_len);
		memcpy(VARDATA(b), c->content, c->content_len);
		content = DatumGetCString(DirectFunctionCall1(byteaout,
													  PointerGetDatum(b)));
	}
	escape_json(&buf, content);
	appendStringInfoChar(&buf, '}');
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data));
}

static bool
name_wanted(const ChangeFilter *f, const char *nspname, const char *relname)
{
	ListCell   *lc;
	char	   *qualified;

	if (f->relations == NIL)
		return true;
	qualified = psprintf("%s.%s", nspname, relname);
	foreach(lc, f->relations)
	{
		const char *want = lfirst(lc);

		if (strcmp(want, qualified) == 0 || strcmp(want, relname) == 0)
			return true;
	}
	return false;
}

static void change_row(const CsChange *c, LogicalRepRelation *rel,
					   const char *action, int ordinal, Datum *values,
					   bool *nulls, bool *json_warned);

static bool
relation_wanted(const ChangeFilter *f, LogicalRepRelation *rel)
{
	return name_wanted(f, rel->nspname, rel->relname);
}

/*
 * A row of changestream.ddl_history: action 'ddl', named by the table the
 * command affected (the relations filter matches that name), new_row the
 * record's columns (event, command_tag, object_type, object_identity,
 * table_oid, schema_name, table_name, publication, rewrite_reason,
 * columns, retyped, retyped_to, rows_changed, id).
 */
static void
emit_ddl(ReturnSetInfo *rsinfo, ChangeFilter *f, const CsChange *c)
{
	Datum		values[CHANGE_COLS];
	bool		nulls[CHANGE_COLS];
	CsDdlRecord rec;

	cs_ddl_read(c, &rec);
	if (!name_wanted(f, rec.schema_name, rec.table_name))
		return;
	change_row(c, c->rel, "ddl", c->ordinal, values, nulls, &f->json_warned);
	values[5] = CStringGetTextDatum(rec.schema_name);
	values[6] = CStringGetTextDatum(rec.table_name);
	nulls[9] = true;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

static bool
time_wanted(const ChangeFilter *f, TimestampTz t)
{
	return (!f->has_start_time || t >= f->start_time) &&
		(!f->has_end_time || t <= f->end_time);
}

static bool
lsn_wanted(const ChangeFilter *f, XLogRecPtr lsn)
{
	return (f->start_lsn == InvalidXLogRecPtr || lsn >= f->start_lsn) &&
		(f->end_lsn == InvalidXLogRecPtr || lsn <= f->end_lsn);
}

/* Fill one row's values for a change (not TRUNCATE). */
static void
change_row(const CsChange *c, LogicalRepRelation *rel, const char *action,
		   int ordinal, Datum *values, bool *nulls, bool *json_warned)
{
	List	   *unchanged = NIL;

	memset(nulls, true, sizeof(bool) * CHANGE_COLS);
	values[0] = LSNGetDatum(c->commit_lsn);
	nulls[0] = false;
	if (c->in_txn)
	{
		values[1] = TimestampTzGetDatum(c->commit_time);
		nulls[1] = false;
		values[2] = TransactionIdGetDatum(c->xid);
		nulls[2] = false;
	}
	values[3] = Int32GetDatum(ordinal);
	nulls[3] = false;
	values[4] = CStringGetTextDatum(action);
	nulls[4] = false;
	if (rel != NULL)
	{
		values[5] = CStringGetTextDatum(rel->nspname);
		values[6] = CStringGetTextDatum(rel->relname);
		nulls[5] = nulls[6] = false;
	}
	if (c->kind == CS_CHANGE_MESSAGE)
	{
		values[8] = message_jsonb(c);
		nulls[8] = false;
		return;
	}
	if (c->kind == CS_CHANGE_UPDATE || c->kind == CS_CHANGE_DELETE)
	{
		if (c->old_kind != 0)
			values[7] = tuple_jsonb(rel, (LogicalRepTupleData *) &c->oldtup,
									c->old_kind == 'K', NULL, json_warned);
		else
			values[7] = tuple_jsonb(rel, (LogicalRepTupleData *) &c->newtup,
									true, NULL, json_warned);
		nulls[7] = false;
	}
	if (c->kind == CS_CHANGE_INSERT || c->kind == CS_CHANGE_UPDATE)
	{
		values[8] = tuple_jsonb(rel, (LogicalRepTupleData *) &c->newtup,
								false, &unchanged, json_warned);
		nulls[8] = false;
		values[9] = names_array(unchanged);
		nulls[9] = false;
	}
}

/* Emit the rows of one decoded change that passes the filter. */
static void
emit_change(ReturnSetInfo *rsinfo, ChangeFilter *f, const CsChange *c)
{
	Datum		values[CHANGE_COLS];
	bool		nulls[CHANGE_COLS];
	const char *action;

	/* the schema history: inserts are DDL records, nothing else is shown */
	if ((c->kind == CS_CHANGE_INSERT || c->kind == CS_CHANGE_UPDATE ||
		 c->kind == CS_CHANGE_DELETE) && cs_ddl_is_history(c->rel, f->ddl_trusted))
	{
		if (c->kind == CS_CHANGE_INSERT)
			emit_ddl(rsinfo, f, c);
		return;
	}
	switch (c->kind)
	{
		case CS_CHANGE_INSERT:
			action = "insert";
			break;
		case CS_CHANGE_UPDATE:
			action = "update";
			break;
		case CS_CHANGE_DELETE:
			action = "delete";
			break;
		case CS_CHANGE_TRUNCATE:
			{
				ListCell   *lc;
				int			ordinal = c->ordinal;

				foreach(lc, c->truncated)
				{
					LogicalRepRelation *rel = lfirst(lc);

					if (relation_wanted(f, rel) && !cs_ddl_is_history(rel, f->ddl_trusted))
					{
						change_row(c, rel, "truncate", ordinal, values, nulls, &f->json_warned);
						tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
											 values, nulls);
					}
					ordinal++;
				}
				return;
			}
		case CS_CHANGE_MESSAGE:
			if (f->relations != NIL)
				return;
			change_row(c, NULL, "message", c->ordinal, values, nulls, &f->json_warned);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
			return;
		default:
			return;
	}
	if (!relation_wanted(f, c->rel))
		return;
	change_row(c, c->rel, action, c->ordinal, values, nulls, &f->json_warned);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * changestream.changes(generation text DEFAULT NULL, start_lsn pg_lsn,
 *	  end_lsn pg_lsn, start_time timestamptz, end_time timestamptz,
 *	  relations text[]) (all DEFAULT NULL)
 *	  Returns setof (commit_lsn pg_lsn, commit_time timestamptz, xid xid,
 *	  ordinal int, action text, schema_name text, table_name text, old_row
 *	  jsonb, new_row jsonb, unchanged_columns text[]): the archived changes
 *	  of a generation (NULL: the newest) in commit order, decoded with the
 *	  Relation in force at each one.  A transaction is returned when its
 *	  commit LSN lies in [start_lsn, end_lsn] and its commit time in
 *	  [start_time, end_time]; a message outside a transaction by its own
 *	  LSN (commit_time and xid NULL).  relations keeps changes to the
 *	  tables named "schema.table" or "table" (logical messages then drop
 *	  out).  action: insert, update, delete, truncate (one row per table)
 *	  or message (new_row {prefix, transactional, content}).  old_row is
 *	  the old key (the whole old row under REPLICA IDENTITY FULL; the new
 *	  row's key when the key did not change).  Unchanged TOASTed columns
 *	  are left out of new_row and listed in unchanged_columns.  With time
 *	  bounds, messages outside a transaction are not returned, and sealed
 *	  segments none of whose transactions committed in the bounds are
 *	  skipped by their header's seal (docs/FORMAT.md section 6.2) without
 *	  reading their bodies.
 *	  Errors: 22023 for a malformed generation, 42704 when it does not
 *	  exist, 55000 when changestream.directory is not set; 54000 for a
 *	  column value longer than a jsonb string may be; XX001 naming
 *	  file and offset on damage (decoder.c).
 */
Datum
changestream_changes(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	const char *directory;
	uint64		generation;
	ChangeFilter f;
	CsDecoder  *d;
	CsChange	c;
	MemoryContext row_cxt;
	bool		wanted = true;

	memset(&f, 0, sizeof(f));
	directory = cs_reader_directory(CS_READ_AUTO, PG_ARGISNULL(0) ? NULL :
									text_to_cstring(PG_GETARG_TEXT_PP(0)));
	generation = cs_resolve_generation(directory, PG_ARGISNULL(0) ? NULL :
									   text_to_cstring(PG_GETARG_TEXT_PP(0)));
	f.start_lsn = PG_ARGISNULL(1) ? InvalidXLogRecPtr : PG_GETARG_LSN(1);
	f.end_lsn = PG_ARGISNULL(2) ? InvalidXLogRecPtr : PG_GETARG_LSN(2);
	f.has_start_time = !PG_ARGISNULL(3);
	f.start_time = f.has_start_time ? PG_GETARG_TIMESTAMPTZ(3) : 0;
	f.has_end_time = !PG_ARGISNULL(4);
	f.end_time = f.has_end_time ? PG_GETARG_TIMESTAMPTZ(4) : 0;
	if (!PG_ARGISNULL(5))
		f.relations = cs_relation_names(PG_GETARG_ARRAYTYPE_P(5));
	cs_pin_read(generation, f.start_lsn);
	cs_check_table_names(directory, generation, f.relations, "relations");
	InitMaterializedSRF(fcinfo, 0);

	f.ddl_trusted = cs_ddl_trusted_oids(directory, generation);
	d = cs_decoder_open(directory, generation, f.start_lsn, f.end_lsn);
	if (f.has_start_time || f.has_end_time)
		cs_decoder_set_time_bounds(d, f.has_start_time, f.start_time,
								   f.has_end_time, f.end_time);
	row_cxt = AllocSetContextCreate(CurrentMemoryContext, "changes row",
									ALLOCSET_DEFAULT_SIZES);
	while (cs_decoder_next(d, &c))
	{
		MemoryContext old;

		if (c.kind == CS_CHANGE_BEGIN)
			wanted = lsn_wanted(&f, c.commit_lsn) && time_wanted(&f, c.commit_time);
		else if (!c.in_txn)
			wanted = lsn_wanted(&f, c.commit_lsn) &&
				!f.has_start_time && !f.has_end_time;
		if (!wanted)
			continue;
		old = MemoryContextSwitchTo(row_cxt);
		emit_change(rsinfo, &f, &c);
		MemoryContextSwitchTo(old);
		MemoryContextReset(row_cxt);
	}
	cs_decoder_close(d);
	MemoryContextDelete(row_cxt);
	return (Datum) 0;
}
