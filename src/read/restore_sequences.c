/*-------------------------------------------------------------------------
 *
 * restore_sequences.c
 *	  After restore() applied the archive up to its target: the sequences
 *	  that columns of the restored target tables own in the target
 *	  database (serial and identity columns; pg_depend entries of type 'a'
 *	  and 'i') are set so that the next value they hand out collides with
 *	  no restored row, and repeats no value the source had handed out at
 *	  the snapshot the restore started from.  pgoutput streams no sequence
 *	  changes, so what the archive knows of a sequence is its value read
 *	  while the snapshot was taken (docs/FORMAT.md section 3.2: at least
 *	  its value at the snapshot's consistent point, possibly later).
 *
 *	  For an ascending sequence the value set (setval(..., true), so that
 *	  the next value is the one after it) is the greatest of the archived
 *	  last value (when the source's sequence had handed out one) and the
 *	  restored column's maximum, capped at the sequence's MAXVALUE (its
 *	  next nextval() then fails rather than collides).  A sequence whose
 *	  own next value is beyond that already is left as it is: a restore
 *	  never moves a sequence back, so values the target's sequence handed
 *	  out before (to another table, to rows rolled back) are not handed
 *	  out again.  A descending sequence mirrors this (least, column
 *	  minimum, MINVALUE).  Columns of other types than the integer ones
 *	  count with the archived value only.  A table restore() created owns
 *	  no sequence; a table created before (the disaster-recovery
 *	  walkthrough of the README, a schema from a dump) usually does, with
 *	  a fresh sequence.  Each sequence set is reported in a NOTICE.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"

#include "read/restore_sequences.h"

/* A sequence a column of a restored table owns in the target database. */
typedef struct OwnedSequence
{
	CsSequenceTarget *target;
	AttrNumber	attnum;
	char	   *sequence;		/* quoted, qualified */
	char	   *column;
	Oid			column_type;
	int64		increment;
	int64		minvalue;
	int64		maxvalue;
} OwnedSequence;

static void
run(const char *sql)
{
	int			rc = SPI_execute(sql, false, 0);

	if (rc < 0)
		elog(ERROR, "SPI_execute failed (%d): %s", rc, sql);
}

static int64
int8_at(int row, int col, bool *isnull)
{
	Datum		d = SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc,
								  col, isnull);

	return *isnull ? 0 : DatumGetInt64(d);
}

/* The sequences columns of targets own, from the catalog, in table order. */
static List *
owned_sequences(List *targets)
{
	StringInfoData oids;
	ListCell   *lc;
	List	   *owned = NIL;

	initStringInfo(&oids);
	foreach(lc, targets)
		appendStringInfo(&oids, "%s%u", oids.len ? "," : "",
						 ((CsSequenceTarget *) lfirst(lc))->relid);
	run(psprintf("SELECT d.refobjid::pg_catalog.int8, a.attnum::pg_catalog.int8, "
				 "  pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(s.relname), "
				 "  a.attname::pg_catalog.text, a.atttypid::pg_catalog.int8, "
				 "  q.seqincrement, q.seqmin, q.seqmax "
				 "FROM pg_catalog.pg_depend d "
				 "JOIN pg_catalog.pg_class s ON s.oid = d.objid AND s.relkind = 'S' "
				 "JOIN pg_catalog.pg_namespace n ON n.oid = s.relnamespace "
				 "JOIN pg_catalog.pg_sequence q ON q.seqrelid = s.oid "
				 "JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid "
				 "  AND a.attnum = d.refobjsubid AND NOT a.attisdropped "
				 "WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass "
				 "AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass "
				 "AND d.deptype IN ('a', 'i') "
				 "AND d.refobjid = ANY ('{%s}'::pg_catalog.oid[]) "
				 "ORDER BY 1, 2", oids.data));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		OwnedSequence *o = palloc0(sizeof(OwnedSequence));
		bool		isnull;
		Oid			relid = (Oid) int8_at(i, 1, &isnull);

		foreach(lc, targets)
			if (((CsSequenceTarget *) lfirst(lc))->relid == relid)
				o->target = lfirst(lc);
		o->attnum = (AttrNumber) int8_at(i, 2, &isnull);
		o->sequence = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3);
		o->column = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 4);
		o->column_type = (Oid) int8_at(i, 5, &isnull);
		o->increment = int8_at(i, 6, &isnull);
		o->minvalue = int8_at(i, 7, &isnull);
		o->maxvalue = int8_at(i, 8, &isnull);
		if (o->target != NULL)
			owned = lappend(owned, o);
	}
	return owned;
}

/* The snapshot's value of the source sequence of o's column, or NULL. */
static CsArchivedSequence *
archived_for(const OwnedSequence *o)
{
	ListCell   *lc;

	foreach(lc, o->target->archived)
	{
		CsArchivedSequence *a = lfirst(lc);

		if (a->attnum == o->attnum && a->known && a->is_called)
			return a;
	}
	return NULL;
}

/* The restored column's maximum (minimum when descending) into *v. */
static bool
column_extreme(const OwnedSequence *o, int64 *v)
{
	bool		isnull;

	if (o->column_type != INT2OID && o->column_type != INT4OID &&
		o->column_type != INT8OID)
		return false;
	run(psprintf("SELECT %s(%s)::pg_catalog.int8 FROM ONLY %s",
				 o->increment > 0 ? "pg_catalog.max" : "pg_catalog.min",
				 quote_identifier(o->column), o->target->qualified));
	*v = int8_at(0, 1, &isnull);
	return !isnull;
}

/* Is a beyond b in the sequence's direction? */
static bool
beyond(const OwnedSequence *o, int64 a, int64 b)
{
	return o->increment > 0 ? a > b : a < b;
}

/* Set one sequence if it must move (see the file header); true if set. */
static bool
set_sequence(const OwnedSequence *o)
{
	CsArchivedSequence *a = archived_for(o);
	int64		extreme = 0;
	bool		has_extreme = column_extreme(o, &extreme);
	int64		v;
	int64		own;
	bool		own_called;
	bool		isnull;

	if (a == NULL && !has_extreme)
		return false;
	v = a != NULL ? a->last_value : extreme;
	if (has_extreme && beyond(o, extreme, v))
		v = extreme;
	if (o->increment > 0 && v > o->maxvalue)
		v = o->maxvalue;
	if (o->increment < 0 && v < o->minvalue)
		v = o->minvalue;
	run(psprintf("SELECT last_value, is_called FROM %s", o->sequence));
	own = int8_at(0, 1, &isnull);
	own_called = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
											SPI_tuptable->tupdesc, 2, &isnull));
	/* its next value is past v already: never moved back */
	if (own_called ? !beyond(o, v, own) : beyond(o, own, v))
		return false;
	run(psprintf("SELECT pg_catalog.setval(%s::pg_catalog.regclass, " INT64_FORMAT ", true)",
				 quote_literal_cstr(o->sequence), v));
	ereport(NOTICE,
			(errmsg("sequence %s of column %s of %s set to " INT64_FORMAT,
					o->sequence, quote_identifier(o->column), o->target->qualified, v),
			 errdetail("The snapshot's value of the source's sequence %s: %s; the restored column's %s: %s; the sequence's own value before: " INT64_FORMAT "%s.",
					   a != NULL ? a->sequence : "(none)",
					   a != NULL ? psprintf(INT64_FORMAT, a->last_value) : "none",
					   o->increment > 0 ? "maximum" : "minimum",
					   has_extreme ? psprintf(INT64_FORMAT, extreme) : "none",
					   own, own_called ? "" : " (not yet handed out)")));
	return true;
}

/*
 * cs_restore_sequences
 *	  Sets the sequences that columns of the restored tables targets
 *	  (CsSequenceTarget *) own in the target database, as the file header
 *	  says, through SPI (the caller is connected), after the archive was
 *	  applied.  Returns how many were set; each is reported in a NOTICE.
 *	  Errors: 42501 when the caller may not read (SELECT) or set (UPDATE)
 *	  such a sequence, as PostgreSQL raises it.
 */
int
cs_restore_sequences(List *targets)
{
	ListCell   *lc;
	int			set = 0;

	if (targets == NIL)
		return 0;
	foreach(lc, owned_sequences(targets))
		if (set_sequence(lfirst(lc)))
			set++;
	return set;
}
