/*-------------------------------------------------------------------------
 *
 * restore_dry_count.c
 *	  restore()'s dry run: the rows of a snapshot's table section that the
 *	  real run would load (restore.c's copy_section(), COPY FROM with the
 *	  row filter as its WHERE), counted without a table.  Without a filter
 *	  each line of the section is a row (COPY text escapes the newlines of
 *	  values).  With one, each row is read as COPY FROM's text format reads
 *	  it (CopyReadAttributesText() in commands/copyfromparse.c: fields
 *	  separated by tabs, \N for NULL, the backslash escapes), converted
 *	  from the client encoding as COPY converts it, and the columns the
 *	  filter reads go through their types' input functions; the filter,
 *	  transformed against the archived columns and their types
 *	  (cs_row_filter_transform_desc()), is then asked of the row, a NULL
 *	  answer counting as no, as in WHERE.
 *
 *	  The section is untrusted input: a row whose field count is not the
 *	  manifest's column count is damage (XX001, naming the file and the
 *	  section's offset).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/sysattr.h"
#include "access/tupdesc.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "mb/pg_wchar.h"
#include "utils/lsyscache.h"

#include "archive/storage.h"
#include "base/compat.h"
#include "read/restore_dry_count.h"
#include "read/restore_progress.h"
#include "read/restore_row_filter.h"

#define READ_CHUNK	(64 * 1024)

/* The filter's state over one section. */
typedef struct DryFilter
{
	TupleDesc	desc;			/* the archived columns */
	EState	   *estate;
	ExprState  *qual;
	TupleTableSlot *slot;
	bool	   *needed;			/* per column: the filter reads it */
	FmgrInfo   *in_funcs;
	Oid		   *ioparams;
	const char *path;			/* for damage messages */
	int64		offset;			/* the section's, in the file */
	int			client_encoding;	/* COPY's file encoding */
} DryFilter;

/* The filter's state for a table of columns pairs (name, type SQL). */
static void
filter_begin(DryFilter *f, const char *name, List *pairs, Node *row_filter)
{
	ListCell   *lc;
	Node	   *expr;
	Bitmapset  *cols;
	bool		whole_row;

	f->desc = CreateTemplateTupleDesc(list_length(pairs));
	foreach(lc, pairs)
	{
		List	   *pair = lfirst(lc);
		Oid			typid;
		int32		typmod;

		/* resolved by cs_manifest_column_types(): it exists */
		if (!cs_parse_type_string(lsecond(pair), &typid, &typmod))
			elog(ERROR, "type %s of the manifest does not exist", (char *) lsecond(pair));
		TupleDescInitEntry(f->desc, foreach_current_index(lc) + 1,
						   linitial(pair), typid, typmod, 0);
	}
	expr = cs_row_filter_transform_desc(row_filter, name, f->desc);
	cols = cs_row_filter_columns(expr);
	whole_row = bms_is_member(InvalidAttrNumber - FirstLowInvalidHeapAttributeNumber,
							  cols);
	f->needed = palloc0(sizeof(bool) * f->desc->natts);
	f->in_funcs = palloc0(sizeof(FmgrInfo) * f->desc->natts);
	f->ioparams = palloc0(sizeof(Oid) * f->desc->natts);
	for (int i = 0; i < f->desc->natts; i++)
	{
		Oid			func;

		f->needed[i] = whole_row ||
			bms_is_member(i + 1 - FirstLowInvalidHeapAttributeNumber, cols);
		if (!f->needed[i])
			continue;
		getTypeInputInfo(TupleDescAttr(f->desc, i)->atttypid, &func,
						 &f->ioparams[i]);
		fmgr_info(func, &f->in_funcs[i]);
	}
	f->estate = CreateExecutorState();
	f->qual = ExecPrepareQual(list_make1(expr), f->estate);
	f->slot = MakeSingleTupleTableSlot(f->desc, &TTSOpsVirtual);
	f->client_encoding = pg_get_client_encoding();
}

static void
filter_end(DryFilter *f)
{
	ExecDropSingleTupleTableSlot(f->slot);
	FreeExecutorState(f->estate);
}

/*
 * The field at *p (up to a tab or end) de-escaped as COPY text into buf;
 * *p is moved past it and its tab, *more says whether a tab followed.
 * Returns false for \N (NULL).
 */
static bool
read_field(char **p, StringInfo buf, bool *more)
{
	char	   *s = *p;

	resetStringInfo(buf);
	if (s[0] == '\\' && s[1] == 'N' && (s[2] == '\t' || s[2] == '\0'))
	{
		*more = s[2] == '\t';
		*p = *more ? s + 3 : s + 2;
		return false;
	}
	while (*s != '\0' && *s != '\t')
	{
		char		c = *s++;

		if (c == '\\' && *s != '\0')
		{
			c = *s++;
			if (c >= '0' && c <= '7')
			{
				int			val = c - '0';

				for (int n = 1; n < 3 && *s >= '0' && *s <= '7'; n++)
					val = (val << 3) + (*s++ - '0');
				c = (char) (val & 0377);
			}
			else if (c == 'x' && isxdigit((unsigned char) *s))
			{
				int			val = 0;

				for (int n = 0; n < 2 && isxdigit((unsigned char) *s); n++, s++)
					val = (val << 4) + (isdigit((unsigned char) *s) ? *s - '0' :
										(pg_ascii_tolower((unsigned char) *s) - 'a' + 10));
				c = (char) (val & 0xff);
			}
			else if (c == 'b')
				c = '\b';
			else if (c == 'f')
				c = '\f';
			else if (c == 'n')
				c = '\n';
			else if (c == 'r')
				c = '\r';
			else if (c == 't')
				c = '\t';
			else if (c == 'v')
				c = '\v';
		}
		appendStringInfoChar(buf, c);
	}
	*more = *s == '\t';
	*p = *more ? s + 1 : s;
	return true;
}

/* Does the row line (COPY text, no newline) pass the filter? */
static bool
row_passes(DryFilter *f, const char *line, int len)
{
	ExprContext *econtext = GetPerTupleExprContext(f->estate);
	MemoryContext old = MemoryContextSwitchTo(econtext->ecxt_per_tuple_memory);
	char	   *p = pg_any_to_server(line, len, f->client_encoding);
	StringInfoData field;
	TupleTableSlot *slot = f->slot;
	bool		more;
	bool		pass;
	int			i;

	initStringInfo(&field);
	ExecClearTuple(slot);
	more = f->desc->natts > 0 || len > 0;
	for (i = 0; i < f->desc->natts && more; i++)
	{
		bool		present = read_field(&p, &field, &more);

		slot->tts_isnull[i] = !present;
		slot->tts_values[i] = (Datum) 0;
		if (f->needed[i])
			slot->tts_values[i] =
				InputFunctionCall(&f->in_funcs[i], present ? field.data : NULL,
								  f->ioparams[i], TupleDescAttr(f->desc, i)->atttypmod);
	}
	if (i < f->desc->natts || more)
		cs_file_damage(f->path, f->offset,
					   "A row of a table section has not the %d columns its manifest lists.",
					   f->desc->natts);
	ExecStoreVirtualTuple(slot);
	econtext->ecxt_scantuple = slot;
	pass = ExecQual(f->qual, econtext);
	MemoryContextSwitchTo(old);
	ResetPerTupleExprContext(f->estate);
	return pass;
}

/*
 * cs_dry_count_section
 *	  Reads the current table section of reader (of the snapshot file path)
 *	  to its end and returns its rows; with row_filter (raw,
 *	  restore_row_filter.c) only those that satisfy it, over the archived
 *	  columns pairs (cs_manifest_column_types(): per column a List of
 *	  (name, type SQL), in the section's order) of the table name.
 *	  progress_table names the table in restore_progress.
 *	  Errors: XX001 for a row of another column count; the filter's
 *	  errors; input function errors (22xxx) for a value its type rejects.
 */
int64
cs_dry_count_section(CsSnapshotReader *reader, const char *path,
					 const char *name, const char *progress_table,
					 List *pairs, Node *row_filter)
{
	char	   *chunk = palloc(READ_CHUNK);
	StringInfoData line;
	DryFilter	f;
	int64		rows = 0;
	int			n;

	memset(&f, 0, sizeof(f));
	f.path = path;
	f.offset = cs_snapreader_file_offset(reader);
	if (row_filter != NULL)
		filter_begin(&f, name, pairs, row_filter);
	initStringInfo(&line);
	while ((n = cs_snapreader_read(reader, chunk, READ_CHUNK)) > 0)
	{
		char	   *p = chunk;
		char	   *end = chunk + n;

		CHECK_FOR_INTERRUPTS();
		cs_progress_loading(progress_table, cs_snapreader_file_offset(reader));
		while (p < end)
		{
			char	   *nl = memchr(p, '\n', end - p);

			if (nl == NULL)
			{
				appendBinaryStringInfo(&line, p, end - p);
				break;
			}
			appendBinaryStringInfo(&line, p, nl - p);
			p = nl + 1;
			if (row_filter == NULL || row_passes(&f, line.data, line.len))
				rows++;
			resetStringInfo(&line);
		}
	}
	if (line.len > 0)
		cs_file_damage(path, f.offset,
					   "A table section's last row has no newline.");
	if (row_filter != NULL)
		filter_end(&f);
	pfree(chunk);
	pfree(line.data);
	return rows;
}
