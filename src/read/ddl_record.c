/*-------------------------------------------------------------------------
 *
 * ddl_record.c
 *	  Reading one row of changestream.ddl_history from the archived
 *	  stream, checked, for changes() and restore() (docs/DESIGN.md
 *	  section 12).  The archive is untrusted: a row that lacks a column or
 *	  holds a malformed value is damage (XX001, file and offset named).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "read/ddl_record.h"
#include "base/compat.h"

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
 * cs_ddl_is_index_drop
 *	  Is record the sql_drop record of an index dropped on its own (DROP
 *	  INDEX)?  Its table is gone from the catalog when sql_drop fires, so
 *	  the record has table_oid 0 and the index's schema and name in
 *	  schema_name and table_name; readers match it by those against the
 *	  definitions they hold.
 */
bool
cs_ddl_is_index_drop(const CsDdlRecord *record)
{
	return strcmp(record->event, "sql_drop") == 0 &&
		record->object_type != NULL &&
		strcmp(record->object_type, "index") == 0;
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
	record->definition = column_value(change, "definition", false);
	/* a dropped index's record has no table (DESIGN.md section 12) */
	if (errno != 0 || end == oid_text || *end != '\0' || oid > PG_UINT32_MAX ||
		(oid == InvalidOid && !cs_ddl_is_index_drop(record)))
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
