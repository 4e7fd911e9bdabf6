/*-------------------------------------------------------------------------
 *
 * restore.c
 *	  changestream.restore(): the state of archived tables as of a point
 *	  in the archive, in the caller's transaction (all or nothing).
 *
 *	  1. The newest snapshot whose LSN (time) is not after the target is
 *		 loaded through the server's COPY machinery: BeginCopyFrom() with
 *		 a data callback that feeds the decompressed table section, as the
 *		 table synchronization worker does (replication/logical/tablesync.c).
 *	  2. The archived transactions after it are applied in commit order,
 *		 through the decoder (decoder.c) and the executor
 *		 (restore_apply.c), up to the last transaction that committed at
 *		 or before the target.  A change whose Relation differs from the
 *		 one the target was matched to first alters the target to match
 *		 (added, dropped, renamed, retyped columns), and a table restore()
 *		 created to its replica identity (restore_key.c); TRUNCATE
 *		 truncates.
 *	  3. The sequences the restored targets' columns own are set past the
 *		 restored rows and the snapshot's values (restore_sequences.c).
 *
 *	  Everything runs under session_replication_role = replica and the
 *	  archive's pinned session settings (pinned_settings.h), in a GUC nest
 *	  level undone at the end.  Memory is per change (the decoder's and
 *	  the executor's contexts), so a transaction of any size is applied in
 *	  bounded memory.  Reading checks for interrupts; a NOTICE reports
 *	  progress every few seconds.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/copy.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_node.h"
#include "parser/parse_relation.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "archive/archive_layout.h"
#include "archive/generation_span.h"
#include "archive/reader_pins.h"
#include "archive/retention_horizon.h"
#include "archive/snapshot_reader.h"
#include "archive/storage.h"
#include "read/archived_tables.h"
#include "read/ddl_record.h"
#include "read/read_source.h"
#include "read/restore_apply.h"
#include "read/restore_columns.h"
#include "read/restore_definition.h"
#include "read/restore_filter.h"
#include "read/restore_key.h"
#include "read/restore_manifest.h"
#include "read/restore_progress.h"
#include "read/restore_dry_count.h"
#include "read/restore_row_filter.h"
#include "read/restore_sequences.h"
#include "base/compat.h"

PG_FUNCTION_INFO_V1(changestream_restore);

#define RESTORE_COLS		12
#define PROGRESS_INTERVAL_MS 3000

typedef struct RestoreState
{
	const char *directory;
	uint64		generation;
	CsIdentity	identity;		/* start: the horizon's, after retention */
	bool		retained;		/* retention removed older history */
	const char *target_schema;	/* NULL: each table's own */
	CsTableFilter filter;		/* the tables argument */
	bool		has_target_lsn;
	XLogRecPtr	target_lsn;
	bool		has_target_time;
	TimestampTz target_time;
	bool		skip_inexact;	/* skip refused tables with a WARNING */
	bool		dry_run;		/* read and count only (dry_run()) */
	const char *row_filter_text;	/* the row_filter argument, or NULL */
	Node	   *row_filter;		/* parsed (restore_row_filter.c), or NULL */
	List	   *dry_tables;		/* dry run: "schema.table" of each table
								 * first met in the stream and wanted */
	XLogRecPtr	next_snapshot_lsn;	/* the first snapshot after the target,
									 * or Invalid */
	char	   *snapshot_path;
	XLogRecPtr	snapshot_lsn;
	List	   *ddl_trusted;	/* OIDs of the schema history table */
	char	   *publication;	/* the generation's publication as its
								 * plugin options quote it, or NULL */
	MemoryContext cxt;			/* restore()'s own, for what lasts */
	bool		later_read;		/* later_types read (later_type_records()) */
	List	   *later_types;	/* CsLaterType *: type records after the
								 * target, the first per table */
	List	   *aliases;		/* CsAlias *: every name a table had from
								 * the snapshot to the target (a tables
								 * filter only) */
	List	   *tables;			/* CsRestoreTable *; relid 0 = not wanted */
	List	   *manifest;		/* CsManifestTable *: the first tables */
	List	   *future_definitions; /* CsFutureDefinition *: of tables not
									 * seen in the stream yet */
	int			restored_tables;
	int64		snapshot_rows;
	int64		transactions;
	int64		changes;
	XLogRecPtr	restored_lsn;
	TimestampTz restored_time;
	TimestampTz last_progress;
	const char *progress_table;
} RestoreState;

/* A record after the target of a type a table's columns use. */
typedef struct CsLaterType
{
	Oid			oid;			/* the table's, on the archived server */
	XLogRecPtr	lsn;			/* the record's commit LSN */
	CsDdlRecord *rec;
} CsLaterType;

/* The definition a record gave a table not seen in the stream yet. */
typedef struct CsFutureDefinition
{
	Oid			oid;			/* the table's, on the archived server */
	char	   *schema;			/* its schema, as the record names it */
	CsTableDefinition *def;
} CsFutureDefinition;

/* A name a table of the archived server had by the schema history. */
typedef struct CsAlias
{
	Oid			oid;
	char	   *schema;
	char	   *name;
} CsAlias;

/* The tables of the running restore, whose apply states DDL must close. */
static List **open_tables = NULL;

/* The snapshot section being fed to COPY (its callback takes no argument). */
static CsSnapshotReader *copy_reader = NULL;
static RestoreState *copy_state = NULL;

/* ---------- helpers ---------- */

static void
close_apply_states(void)
{
	ListCell   *lc;

	if (open_tables == NULL)
		return;
	foreach(lc, *open_tables)
		cs_apply_close(lfirst(lc));
}

/*
 * Run DDL (or a check): the tables' apply states are closed first.  The
 * caller's memory context stays current (SPI_execute() leaves SPI's
 * procedure context current, which SPI_finish() deletes: what restore()
 * keeps, a table first met in the stream, would be freed before the
 * result row reads it).
 */
static void
run_sql(const char *sql)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			rc;

	close_apply_states();
	rc = SPI_execute(sql, false, 0);
	MemoryContextSwitchTo(cxt);

	if (rc < 0)
		elog(ERROR, "SPI_execute failed (%d): %s", rc, sql);
}

static bool
progress_due(RestoreState *rs)
{
	TimestampTz now = GetCurrentTimestamp();

	if (!TimestampDifferenceExceeds(rs->last_progress, now, PROGRESS_INTERVAL_MS))
		return false;
	rs->last_progress = now;
	return true;
}

static bool
name_wanted(RestoreState *rs, const char *schema, const char *name)
{
	return cs_filter_wants(&rs->filter, schema, name);
}

/*
 * Is the table of remote OID oid, named schema.name, wanted?  By that
 * name, or by any name the schema history gives it between the snapshot
 * and the target: the tables filter may name a table as it is at the
 * target, or as it was before a rename.
 */
static bool
table_wanted(RestoreState *rs, Oid oid, const char *schema, const char *name)
{
	ListCell   *lc;

	if (name_wanted(rs, schema, name))
		return true;
	foreach(lc, rs->aliases)
	{
		CsAlias    *a = lfirst(lc);

		if (a->oid == oid && name_wanted(rs, a->schema, a->name))
			return true;
	}
	return false;
}

static char *
qualified_target(const CsRestoreTable *t)
{
	return quote_qualified_identifier(t->target_schema, t->name);
}

/* ---------- choosing the snapshot ---------- */

/* Does the target lie in gap (generation_span.c)? */
static bool
target_in_gap(RestoreState *rs, const CsGap *gap)
{
	if (rs->has_target_lsn)
		return (!gap->start_known || rs->target_lsn >= gap->start_lsn) &&
			rs->target_lsn < gap->end_lsn;
	return rs->has_target_time &&
		(!gap->start_known || rs->target_time > gap->start_time) &&
		rs->target_time < gap->end_time;
}

/* An LSN for a message: "unknown" when the gap's start could not be read. */
static char *
gap_lsn_text(bool known, XLogRecPtr lsn)
{
	return known ? psprintf(CS_LSN_FMT, LSN_FORMAT_ARGS(lsn)) :
		pstrdup("an unreadable end");
}

/*
 * A target that rs->generation does not hold: when it lies in the gap
 * before generation (rs->generation itself, or the generation after it),
 * raise 22023 naming the gap: both generations, its LSN range and time
 * range (docs/DESIGN.md section 6).  Returns otherwise.
 */
static void
refuse_in_gap(RestoreState *rs, uint64 generation, const char *what)
{
	CsGap		gap;

	if (!cs_generation_gap(rs->directory, cs_list_generations(rs->directory),
						   generation, &gap) ||
		!target_in_gap(rs, &gap))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("the target %s lies in the gap between generations %016llx and %016llx",
					what, (unsigned long long) gap.previous,
					(unsigned long long) generation),
			 errdetail("No generation holds the transactions that committed from %s (the end of generation %016llx, last commit %s) to before " CS_LSN_FMT " (the start of generation %016llx, its snapshot taken %s).",
					   gap_lsn_text(gap.start_known, gap.start_lsn),
					   (unsigned long long) gap.previous,
					   gap.start_known && gap.start_time != 0 ?
					   pstrdup(timestamptz_to_str(gap.start_time)) : "unknown",
					   LSN_FORMAT_ARGS(gap.end_lsn),
					   (unsigned long long) generation,
					   pstrdup(timestamptz_to_str(gap.end_time))),
			 errhint("Choose a target before the gap in generation %016llx or from the start of generation %016llx on; changestream.generations() shows each gap (gap_start_lsn to gap_end_lsn).",
					 (unsigned long long) gap.previous,
					 (unsigned long long) generation)));
}

/* The generation after rs->generation in the listing, or 0. */
static uint64
next_generation(RestoreState *rs)
{
	ListCell   *lc;

	foreach(lc, cs_list_generations(rs->directory))
	{
		uint64		g = *(uint64 *) lfirst(lc);

		if (g > rs->generation)
			return g;
	}
	return 0;
}

static void
not_archived(RestoreState *rs, const char *what)
{
	refuse_in_gap(rs, rs->generation, what);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("the target %s is not archived in generation %016llx", what,
					(unsigned long long) rs->generation),
			 rs->retained ?
			 errdetail("The generation is restorable from " CS_LSN_FMT " (%s) to its end; retention removed the history before.",
					   LSN_FORMAT_ARGS(rs->identity.start_lsn),
					   timestamptz_to_str(rs->identity.created_at)) :
			 errdetail("The generation holds the transactions that committed from " CS_LSN_FMT " (its start, %s) on.",
					   LSN_FORMAT_ARGS(rs->identity.start_lsn),
					   timestamptz_to_str(rs->identity.created_at)),
			 errhint("Call changestream.generations() for the range of each generation (restorable_from_lsn to end_lsn).")));
}

/*
 * Pin the generation against retention (docs/DESIGN.md section 11), then
 * take its restorable start: after retention, the retention horizon's
 * snapshot replaces the generation's start in rs->identity, so every
 * range restore() checks or names is the restorable one.
 */
static void
pin_and_find_start(RestoreState *rs)
{
	CsHorizon	horizon;

	cs_pin_read(rs->generation, InvalidXLogRecPtr);
	if (cs_read_horizon(rs->directory, rs->generation, &horizon) &&
		horizon.snapshot_lsn > rs->identity.start_lsn)
	{
		rs->identity.start_lsn = horizon.snapshot_lsn;
		rs->identity.created_at = horizon.snapshot_time;
		rs->retained = true;
	}
}

/*
 * The time the opening snapshot of rs->generation (taken at time taken)
 * stands for, for a time target: from the previous generation's last
 * commit on when this generation was handed off to (cs_handoff_time(),
 * docs/DESIGN.md section 6), else its own.
 */
static TimestampTz
opening_snapshot_time(RestoreState *rs, TimestampTz taken)
{
	uint64		previous;
	TimestampTz from;

	if (cs_handoff_time(rs->directory, cs_list_generations(rs->directory),
						rs->generation, &previous, &from) && from < taken)
		return from;
	return taken;
}

/*
 * The newest snapshot not after the target; its path and LSN in rs, and
 * the LSN of the first one after the target (for refusals, which name it).
 */
static void
choose_snapshot(RestoreState *rs)
{
	List	   *names = cs_list_snapshots(rs->directory, rs->generation);
	char	   *dir = cs_snapshots_dir_path(rs->directory, rs->generation);
	ListCell   *lc;

	if (rs->has_target_lsn && rs->target_lsn < rs->identity.start_lsn)
		not_archived(rs, psprintf("LSN " CS_LSN_FMT, LSN_FORMAT_ARGS(rs->target_lsn)));
	foreach(lc, names)
	{
		char	   *path = cs_file_in(dir, (char *) lfirst(lc));
		CsSnapshotReader *r = cs_snapreader_open(path);
		XLogRecPtr	lsn = cs_snapreader_lsn(r);
		TimestampTz t = cs_snapreader_time(r);

		cs_snapreader_close(r);
		if (lsn < rs->identity.start_lsn)
			continue;
		if (rs->has_target_time && lsn == rs->identity.start_lsn &&
			!rs->retained)
			t = opening_snapshot_time(rs, t);
		if ((rs->has_target_lsn && lsn > rs->target_lsn) ||
			(rs->has_target_time && t > rs->target_time))
		{
			rs->next_snapshot_lsn = lsn;
			break;
		}
		rs->snapshot_path = path;
		rs->snapshot_lsn = lsn;
	}
	if (rs->snapshot_path == NULL)
	{
		if (rs->has_target_time)
			not_archived(rs, psprintf("time %s",
									  timestamptz_to_str(rs->target_time)));
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("generation %016llx has no snapshot at or after its start " CS_LSN_FMT,
						(unsigned long long) rs->generation,
						LSN_FORMAT_ARGS(rs->identity.start_lsn)),
				 errhint("Call changestream.verify() to check the archive.")));
	}
}

/* ---------- target tables ---------- */

/*
 * Read the manifest's tables into rs->tables (wanted ones get a target)
 * and rs->manifest.
 */
static void
read_manifest_tables(RestoreState *rs)
{
	CsSnapshotReader *r = cs_snapreader_open(rs->snapshot_path);
	ListCell   *lc;

	rs->manifest = cs_manifest_tables(r, rs->snapshot_path);
	foreach(lc, rs->manifest)
	{
		CsManifestTable *mt = lfirst(lc);
		CsRestoreTable *t = palloc0(sizeof(CsRestoreTable));
		ListCell   *lp;

		t->schema = mt->schema;
		t->name = mt->name;
		t->remote_oid = mt->oid;
		t->definition = mt->definition;
		foreach(lp, mt->columns)
			t->columns = lappend(t->columns, linitial(lfirst(lp)));

		/*
		 * An empty key under DEFAULT or USING INDEX: under USING INDEX, the
		 * index's columns are not all published (column lists); under
		 * DEFAULT, the same or no primary key.  With the schema history, a
		 * key added later has a record, after which a Relation's key
		 * columns are taken again; until then they may be a part of the
		 * key only (pgoutput marks the published key columns).
		 */
		t->key.unpublished = mt->has_key && mt->key == NIL &&
			(mt->identity == 'i' || (mt->identity == 'd' && rs->ddl_trusted != NIL));
		/* the extension's own table is schema history, never restored */
		if (table_wanted(rs, t->remote_oid, t->schema, t->name) &&
			!(cs_ddl_is_history_name(t->schema, t->name) &&
			  list_member_oid(rs->ddl_trusted, t->remote_oid)))
			t->target_schema = rs->target_schema ? pstrdup(rs->target_schema) : t->schema;
		rs->tables = lappend(rs->tables, t);
	}
	cs_snapreader_close(r);
}

/* Two archived tables must not go to one target. */
static void
check_distinct_targets(RestoreState *rs, CsRestoreTable *t)
{
	ListCell   *lc;

	foreach(lc, rs->tables)
	{
		CsRestoreTable *o = lfirst(lc);

		if (o == t || o->target_schema == NULL || !OidIsValid(o->relid))
			continue;
		if (strcmp(o->target_schema, t->target_schema) == 0 &&
			strcmp(o->name, t->name) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_TABLE),
					 errmsg("archived tables \"%s.%s\" and \"%s.%s\" would both be restored as \"%s.%s\"",
							o->schema, o->name, t->schema, t->name,
							t->target_schema, t->name),
					 errhint("Restore them in separate calls with the tables argument, or with target_schema NULL into their own schemas.")));
	}
}

/*
 * Check an existing target: privileges, no row level security that hides
 * rows, empty, has the archived columns; and note the columns that own a
 * sequence, whose archived values restore() tracks (see_values()).
 */
static void
check_existing(CsRestoreTable *t)
{
	ListCell   *lc;
	AclResult	acl;

	acl = pg_class_aclcheck(t->relid, GetUserId(),
							ACL_INSERT | ACL_UPDATE | ACL_DELETE | ACL_TRUNCATE);
	if (acl != ACLCHECK_OK)
		aclcheck_error(acl, OBJECT_TABLE, t->name);
	/* row level security must not hide a row from the checks */
	cs_require_all_rows(t->relid, qualified_target(t));
	run_sql(psprintf("SELECT 1 FROM ONLY %s LIMIT 1", qualified_target(t)));
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("target table \"%s.%s\" is not empty", t->target_schema, t->name),
				 errhint("Restore into an empty table, another target_schema, or let restore() create the table.")));
	foreach(lc, t->columns)
		if (get_attnum(t->relid, lfirst(lc)) == InvalidAttrNumber)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("target table \"%s.%s\" has no column \"%s\", which the archive has",
							t->target_schema, t->name, (char *) lfirst(lc))));
	t->seen_values = cs_sequence_columns(t->relid);
}

/*
 * CREATE TABLE from (name, type) pairs, the types as SQL that restore()
 * built (format_type_extended() or quoted names, never archive text as it
 * stands); its key and replica identity come later (match_key()).
 */
static void
create_target(CsRestoreTable *t, List *pairs)
{
	StringInfoData sql;
	ListCell   *lc;
	bool		first = true;

	if (!OidIsValid(get_namespace_oid(t->target_schema, true)))
		run_sql(psprintf("CREATE SCHEMA %s", quote_identifier(t->target_schema)));
	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE TABLE %s (", qualified_target(t));
	foreach(lc, pairs)
	{
		List	   *pair = lfirst(lc);

		appendStringInfo(&sql, "%s%s %s", first ? "" : ", ",
						 quote_identifier(linitial(pair)), (char *) lsecond(pair));
		first = false;
	}
	appendStringInfoChar(&sql, ')');
	run_sql(sql.data);
	t->relid = get_relname_relid(t->name, get_namespace_oid(t->target_schema, false));
	t->created = true;
}

/*
 * t, about to get a target, has the archived name of another table being
 * restored under another OID: the first was dropped (or renamed) and a
 * table created under its name while the schema history was not recorded
 * (a record of the drop or rename would have stopped or renamed the
 * first).  Which rows belong to the table of that name at the target
 * cannot be told: ERROR 0A000, or with skip_inexact a WARNING, and
 * neither is restored.  Returns whether t was refused.
 */
static void drop_target(RestoreState *rs, CsRestoreTable *t);
static bool refuse_later_type(RestoreState *rs, CsRestoreTable *t);

static bool
refuse_reused_name(RestoreState *rs, CsRestoreTable *t)
{
	ListCell   *lc;

	foreach(lc, rs->tables)
	{
		CsRestoreTable *o = lfirst(lc);

		if (o == t || o->target_schema == NULL || !OidIsValid(o->relid) ||
			o->remote_oid == t->remote_oid ||
			strcmp(o->target_schema, t->target_schema) != 0 ||
			strcmp(o->schema, t->schema) != 0 || strcmp(o->name, t->name) != 0)
			continue;
		ereport(rs->skip_inexact ? WARNING : ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("table \"%s.%s\" cannot be restored exactly: the archive holds two tables of that name (OIDs %u and %u) and no schema history record of the first one's drop or rename",
						t->schema, t->name, o->remote_oid, t->remote_oid),
				 errdetail("The first table was dropped or renamed and the second created under its name while the schema history was not recorded (the extension absent, or not created yet): which rows the table of that name held at the target cannot be told."),
				 errhint("Restore to a target before the second table's first archived change, or at or after a snapshot taken after it; skip_inexact => true restores the other tables without it.")));
		drop_target(rs, o);
		t->target_schema = NULL;
		return true;
	}
	return false;
}

/*
 * The columns of t, a table restore() created, that get a sequence from
 * the definition at the end (identity and serial columns of an integer
 * type, or a domain over one): the values the archived rows give them are
 * tracked, as for an existing target's (cs_sequence_columns()), so that
 * the sequence is set past the values of rows deleted before the target.
 */
static List *
definition_sequence_columns(const CsRestoreTable *t)
{
	List	   *seen = NIL;
	ListCell   *lc;

	if (t->definition == NULL)
		return NIL;
	foreach(lc, t->definition->columns)
	{
		CsDefColumn *col = lfirst(lc);
		AttrNumber	attnum = get_attnum(t->relid, col->name);
		Oid			base;
		CsSeenValues *v;

		if ((col->identity == '\0' && col->serial_sequence == NULL) ||
			attnum == InvalidAttrNumber)
			continue;
		base = getBaseType(get_atttype(t->relid, attnum));
		if (base != INT2OID && base != INT4OID && base != INT8OID)
			continue;
		v = palloc0(sizeof(CsSeenValues));
		v->attnum = attnum;
		seen = lappend(seen, v);
	}
	return seen;
}

/*
 * Find or create the target of a wanted table: with pairs (name, type SQL)
 * for a table first seen in the stream, or with the manifest table mt's
 * columns, whose types are resolved only when the target is created
 * (cs_manifest_column_types(): the manifest's text never reaches SQL).
 */
static void
prepare_target(RestoreState *rs, CsRestoreTable *t, List *pairs,
			   const CsManifestTable *mt)
{
	Oid			nsp;

	if (refuse_reused_name(rs, t))
		return;
	t->row_filter = rs->row_filter;
	nsp = get_namespace_oid(t->target_schema, true);
	t->relid = OidIsValid(nsp) ? get_relname_relid(t->name, nsp) : InvalidOid;
	if (OidIsValid(t->relid))
		check_existing(t);
	else
	{
		create_target(t, mt != NULL ? cs_manifest_column_types(mt) : pairs);
		t->seen_values = definition_sequence_columns(t);
	}
	check_distinct_targets(rs, t);
	rs->restored_tables++;
	(void) refuse_later_type(rs, t);
}

static void refuse_pending(RestoreState *rs, CsRestoreTable *t,
						   LogicalRepRelation *rel);
static bool past_target(RestoreState *rs, const CsChange *c);
static Oid	target_column_type(RestoreState *rs, const CsRestoreTable *t,
							   const char *name);

/* The definition a record gave table oid before it was seen, or NULL. */
static CsTableDefinition *
future_definition(RestoreState *rs, Oid oid)
{
	ListCell   *lc;

	foreach(lc, rs->future_definitions)
		if (((CsFutureDefinition *) lfirst(lc))->oid == oid)
			return ((CsFutureDefinition *) lfirst(lc))->def;
	return NULL;
}

/* The target of an archived relation seen in the stream, or NULL. */
static CsRestoreTable *
table_for(RestoreState *rs, CsDecoder *d, LogicalRepRelation *rel)
{
	ListCell   *lc;
	CsRestoreTable *t;
	List	   *pairs = NIL;
	const int32 *typmods;

	foreach(lc, rs->tables)
	{
		t = lfirst(lc);
		if (t->remote_oid != rel->remoteid)
			continue;
		if (t->pending != NULL)
			refuse_pending(rs, t, rel);
		return OidIsValid(t->relid) ? t : NULL;
	}
	typmods = cs_decoder_typmods(d, rel);
	/* a table published after the snapshot */
	t = palloc0(sizeof(CsRestoreTable));
	t->remote_oid = rel->remoteid;
	t->schema = pstrdup(rel->nspname);
	t->name = pstrdup(rel->relname);
	t->definition = future_definition(rs, t->remote_oid);
	rs->tables = lappend(rs->tables, t);
	if (!table_wanted(rs, t->remote_oid, t->schema, t->name))
		return NULL;
	t->target_schema = rs->target_schema ? pstrdup(rs->target_schema) : t->schema;
	for (int i = 0; i < rel->natts; i++)
	{
		char	   *type = cs_decoder_type_name(d, rel->atttyps[i],
												typmods ? typmods[i] : -1);

		if (type == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("the archive names no type for OID %u of column \"%s\" of \"%s.%s\"",
							rel->atttyps[i], rel->attnames[i], t->schema, t->name)));
		t->columns = lappend(t->columns, pstrdup(rel->attnames[i]));
		pairs = lappend(pairs, list_make2(rel->attnames[i], type));
	}
	prepare_target(rs, t, pairs, NULL);
	return OidIsValid(t->relid) ? t : NULL;
}

/* ---------- following column changes ---------- */

static int
rel_index(LogicalRepRelation *rel, const char *name)
{
	for (int i = 0; i < rel->natts; i++)
		if (strcmp(rel->attnames[i], name) == 0)
			return i;
	return -1;
}

/* Does the target column have the archived column's type? */
static bool
same_type(CsDecoder *d, Oid relid, AttrNumber attnum, Oid remote_type,
		  int32 remote_typmod)
{
	Oid			typid;
	int32		typmod;
	Oid			collid;
	char	   *name;

	get_atttypetypmodcoll(relid, attnum, &typid, &typmod, &collid);
	if (remote_type < FirstNormalObjectId)
		return typid == remote_type && typmod == remote_typmod;
	name = cs_decoder_type_name(d, remote_type, remote_typmod);
	return name == NULL ||
		strcmp(name, format_type_extended(typid, -1, FORMAT_TYPE_FORCE_QUALIFY)) == 0;
}

/*
 * Give t, a table restore() created, the replica identity identity with
 * key columns key (restore_key.c).
 */
static void
match_key(CsRestoreTable *t, char identity, List *key)
{
	ListCell   *lc;

	foreach(lc, cs_restore_key_ddl(t->relid, qualified_target(t), identity, key,
								   &t->key))
		run_sql(lfirst(lc));
}

/* The replica identity key columns rel names (none under FULL). */
static List *
relation_key(LogicalRepRelation *rel)
{
	List	   *key = NIL;
	int			k = -1;

	if (rel->replident != 'd' && rel->replident != 'i')
		return NIL;
	while ((k = bms_next_member(rel->attkeys, k)) >= 0)
		key = lappend(key, rel->attnames[k]);
	return key;
}

/*
 * cs_restore_sync_table
 *	  Matches target table t to Relation rel, the one in force for the
 *	  change about to be applied: a column of the previous Relation missing
 *	  from rel at the same position as a new one is renamed, other missing
 *	  ones are dropped, new ones added, and columns of another type are
 *	  altered (USING the text form).  A table restore() created gets
 *	  rel's replica identity, with its key as primary key (restore_key.c).
 *	  Then t->attmap maps rel's columns to the target's.
 *	  Errors: those of the ALTER TABLE commands; XX001 when rel names a
 *	  type no Type message described.
 */
static void
cs_restore_sync_table(CsRestoreTable *t, CsDecoder *d, LogicalRepRelation *rel)
{
	const int32 *typmods;
	char	   *target;
	List	   *now = NIL;
	ListCell   *lc;

	/* the common case, checked before anything is allocated */
	if (t->synced == rel)
		return;
	typmods = cs_decoder_typmods(d, rel);
	target = qualified_target(t);
	/* renames and drops */
	foreach(lc, t->columns)
	{
		char	   *old = lfirst(lc);
		int			pos = foreach_current_index(lc);

		if (rel_index(rel, old) >= 0)
			continue;
		if (pos < rel->natts && cs_name_index(t->columns, rel->attnames[pos]) < 0)
			run_sql(psprintf("ALTER TABLE %s RENAME COLUMN %s TO %s", target,
							 quote_identifier(old),
							 quote_identifier(rel->attnames[pos])));
		else if (get_attnum(t->relid, old) != InvalidAttrNumber)
			run_sql(psprintf("ALTER TABLE %s DROP COLUMN %s", target,
							 quote_identifier(old)));
	}
	/* additions and type changes */
	for (int i = 0; i < rel->natts; i++)
	{
		AttrNumber	attnum = get_attnum(t->relid, rel->attnames[i]);
		int32		typmod = typmods ? typmods[i] : -1;
		char	   *type = cs_decoder_type_name(d, rel->atttyps[i], typmod);

		now = lappend(now, pstrdup(rel->attnames[i]));
		if (attnum != InvalidAttrNumber &&
			same_type(d, t->relid, attnum, rel->atttyps[i], typmod))
			continue;
		if (type == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("the archive names no type for OID %u of column \"%s\" of \"%s.%s\"",
							rel->atttyps[i], rel->attnames[i], t->schema, t->name)));
		if (attnum == InvalidAttrNumber)
			run_sql(psprintf("ALTER TABLE %s ADD COLUMN %s %s", target,
							 quote_identifier(rel->attnames[i]), type));
		else
			run_sql(psprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s USING %s::text::%s",
							 target, quote_identifier(rel->attnames[i]), type,
							 quote_identifier(rel->attnames[i]), type));
	}
	if (t->created)
		match_key(t, rel->replident, relation_key(rel));
	t->columns = now;
	t->attmap = palloc(sizeof(AttrNumber) * Max(rel->natts, 1));
	for (int i = 0; i < rel->natts; i++)
		t->attmap[i] = get_attnum(t->relid, rel->attnames[i]);
	t->synced = rel;
}

/* ---------- loading the snapshot ---------- */

static int
copy_data(void *outbuf, int minread, int maxread)
{
	int			n = cs_snapreader_read(copy_reader, outbuf, maxread);

	cs_progress_loading(copy_state->progress_table,
						cs_snapreader_file_offset(copy_reader));

	if (progress_due(copy_state))
		ereport(NOTICE,
				(errmsg("restoring snapshot: table %s, %lld bytes of the snapshot read",
						copy_state->progress_table,
						(long long) cs_snapreader_offset(copy_reader))));
	return n;
}

/*
 * Load one table section of the snapshot (the reader r is copy_reader)
 * into t's target: a walk_snapshot() step.
 */
static void
copy_section(RestoreState *rs, CsSnapshotReader *r, CsRestoreTable *t,
			 int section)
{
	Relation	rel = table_open(t->relid, RowExclusiveLock);
	ParseState *pstate = make_parsestate(NULL);
	List	   *attnames = NIL;
	ListCell   *lc;
	CopyFromState cstate;
	Node	   *where = NULL;

	/* as tablesync.c's copy_table(); the row filter as COPY FROM's WHERE */
	(void) addRangeTableEntryForRelation(pstate, rel, AccessShareLock, NULL,
										 false, false);
	if (rs->row_filter != NULL)
		where = (Node *) make_ands_implicit((Expr *) cs_row_filter_transform(rs->row_filter,
																			 rel));
	foreach(lc, t->columns)
		attnames = lappend(attnames, makeString(lfirst(lc)));
	rs->progress_table = psprintf("%s.%s", t->target_schema, t->name);
	cstate = BeginCopyFrom(pstate, rel, where, NULL, false, copy_data,
						   attnames, NIL);
	t->rows = CopyFrom(cstate);
	EndCopyFrom(cstate);
	free_parsestate(pstate);
	table_close(rel, NoLock);
	rs->snapshot_rows += t->rows;
	CommandCounterIncrement();
}

/* What walk_snapshot() does with the section of a restored table. */
typedef void (*SectionStep) (RestoreState *rs, CsSnapshotReader *r,
							 CsRestoreTable *t, int section);

/*
 * Walk the snapshot's table sections in the order of rs->tables (one per
 * section, as the manifest lists them): step for each table restored,
 * the others read past.  The file holding more or fewer sections than
 * its manifest is damage (XX001).
 */
static void
walk_snapshot(RestoreState *rs, SectionStep step)
{
	CsSnapshotReader *r = cs_snapreader_open(rs->snapshot_path);
	char	   *scratch = palloc(64 * 1024);
	ListCell   *lc = list_head(rs->tables);
	int			sections = 0;

	copy_reader = r;
	while (cs_snapreader_next_table(r) != NULL)
	{
		CsRestoreTable *t;

		if (lc == NULL)
			cs_file_damage(rs->snapshot_path, cs_snapreader_offset(r),
						   "The file holds more table sections than its manifest lists.");
		t = lfirst(lc);
		lc = lnext(rs->tables, lc);
		if (t->target_schema != NULL)
			step(rs, r, t, sections);
		else
			while (cs_snapreader_read(r, scratch, 64 * 1024) > 0)
				;
		sections++;
	}
	if (sections != list_length(rs->manifest))
		cs_file_damage(rs->snapshot_path, cs_snapreader_offset(r),
					   "The file holds %d table sections; its manifest lists %d.",
					   sections, list_length(rs->manifest));
	copy_reader = NULL;
	cs_snapreader_close(r);
	pfree(scratch);
}

static void
load_snapshot(RestoreState *rs)
{
	copy_state = rs;
	walk_snapshot(rs, copy_section);
	copy_state = NULL;
}

/* ---------- schema history (docs/DESIGN.md section 12) ---------- */

/* The archived table of remote OID oid, or NULL. */
static CsRestoreTable *
table_by_oid(RestoreState *rs, Oid oid)
{
	ListCell   *lc;

	foreach(lc, rs->tables)
	{
		CsRestoreTable *t = lfirst(lc);

		if (t->remote_oid == oid)
			return t;
	}
	return NULL;
}

/*
 * Stop restoring t: drop the target restore() created (an existing one
 * was empty and is emptied again), and never take t's changes again.
 * The dry run only stops counting it.
 */
static void
drop_target(RestoreState *rs, CsRestoreTable *t)
{
	if (rs->dry_run)
		;
	else if (t->created)
		run_sql(psprintf("DROP TABLE %s", qualified_target(t)));
	else
		run_sql(psprintf("TRUNCATE ONLY %s", qualified_target(t)));
	t->relid = InvalidOid;
	t->target_schema = NULL;
	t->synced = NULL;
	rs->restored_tables--;
}

/* A record of a change of a publication's tables (ALTER PUBLICATION ...)? */
static bool
is_publication_record(const CsDdlRecord *rec)
{
	return rec->object_type != NULL &&
		strncmp(rec->object_type, "publication", strlen("publication")) == 0;
}

/*
 * A record of a type the table's columns use, altered (ALTER TYPE of the
 * type or of one it is built on: ADD, DROP or RENAME ATTRIBUTE of a
 * composite type, RENAME VALUE of an enum; ALTER TABLE of a table whose
 * row type they use, recorded as its row type, a composite type)?  The
 * stored values read differently after it, and a restore's target
 * columns have the type as the restoring database has it.
 */
static bool
is_type_record(const CsDdlRecord *rec)
{
	return rec->object_type != NULL && rec->object_identity != NULL &&
		strcmp(rec->event, "ddl_command_end") == 0 &&
		(strcmp(rec->object_type, "type") == 0 ||
		 strncmp(rec->object_type, "composite type",
				 strlen("composite type")) == 0);
}

/*
 * Is rec the sql_drop record of a column of its table dropped by another
 * command than ALTER TABLE (DROP DOMAIN ... CASCADE, say), the table
 * staying?
 */
static bool
is_column_drop(const CsDdlRecord *rec)
{
	return strcmp(rec->event, "sql_drop") == 0 && rec->object_type != NULL &&
		strcmp(rec->object_type, "table column") == 0;
}

/*
 * Is rec a record of a command that may have changed its table's columns:
 * an ALTER TABLE of it (not of a type its columns use), an ALTER TYPE ...
 * CASCADE of the composite type it is a typed table of (object type
 * "table"), or a column of it dropped by another command (sql_drop,
 * object type "table column")?
 */
static bool
alters_columns(const CsDdlRecord *rec)
{
	if (strcmp(rec->event, "sql_drop") == 0)
		return is_column_drop(rec);
	if (strcmp(rec->event, "ddl_command_end") != 0 || is_type_record(rec))
		return false;
	return strcmp(rec->command_tag, "ALTER TABLE") == 0 ||
		(strcmp(rec->command_tag, "ALTER TYPE") == 0 &&
		 rec->object_type != NULL && strcmp(rec->object_type, "table") == 0);
}

/*
 * What a record did to the table's rows, for a refusal's DETAIL.
 */
static char *
record_effect(const CsDdlRecord *rec)
{
	if (is_publication_record(rec))
		return psprintf("it changed the tables of publication \"%s\": changes made while the table was not published are not archived, nor are the rows it held when it was added",
						rec->publication ? rec->publication : "?");
	if (is_type_record(rec))
		return psprintf("it altered %s %s, which its columns %s use (directly, or through an array, a domain or a composite type): their stored values may read differently",
						rec->object_type, rec->object_identity,
						rec->columns ? rec->columns : "?");
	if (rec->rewrite_reason & 1)
		return pstrdup("it changed the table's persistence: changes made while it was unlogged are not archived");
	if (rec->columns != NULL)
		return psprintf("it set the values of columns %s of the existing rows", rec->columns);
	return pstrdup("it rewrote the existing rows with new values");
}

/*
 * A DDL record that changed rows of a wanted table without archived
 * changes (record rec, committed at lsn), between the snapshot and the
 * target: ERROR 0A000 naming the table, the command, its commit LSN and
 * the nearest exact points; with skip_inexact a WARNING, and the table is
 * not restored.
 */
static void
refuse_as(RestoreState *rs, CsRestoreTable *t, XLogRecPtr lsn,
		  const CsDdlRecord *rec, const char *did, const char *effect)
{
	char	   *hint;

	/*
	 * The command lies after the snapshot restored from, which is the
	 * newest not after the target: the next snapshot after the command is
	 * the first one after the target.
	 */
	XLogRecPtr	next_snapshot = rs->next_snapshot_lsn;

	if (next_snapshot != InvalidXLogRecPtr)
		hint = psprintf("Restore to a target before " CS_LSN_FMT ", or at or after " CS_LSN_FMT " (the next snapshot, from which the table is exact again); skip_inexact => true restores the other tables without it.",
						LSN_FORMAT_ARGS(lsn),
						LSN_FORMAT_ARGS(next_snapshot));
	else
		hint = psprintf("Restore to a target before " CS_LSN_FMT ", or at or after the next snapshot, not taken yet (the archiver takes one changestream.recapture_delay after a command that changed rows; changestream.take_snapshot() takes one now); skip_inexact => true restores the other tables without it.",
						LSN_FORMAT_ARGS(lsn));
	ereport(rs->skip_inexact ? WARNING : ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("table \"%s.%s\" cannot be restored exactly: %s %s at " CS_LSN_FMT " %s",
					t->schema, t->name, rec->command_tag,
					rec->object_identity ? rec->object_identity : rec->table_name,
					LSN_FORMAT_ARGS(lsn), did),
			 errdetail("The restore starts from the snapshot at " CS_LSN_FMT ", before the command, and %s (schema history event %s).",
					   LSN_FORMAT_ARGS(rs->snapshot_lsn), effect,
					   rec->event),
			 errhint("%s", hint)));
	if (OidIsValid(t->relid) || (rs->dry_run && t->target_schema != NULL))
		drop_target(rs, t);
	else
		t->target_schema = NULL;
}

/*
 * A DDL record that changed rows of a wanted table without archived
 * changes, between the snapshot and the target (refuse_as()).
 */
static void
refuse_table(RestoreState *rs, CsRestoreTable *t, XLogRecPtr lsn,
			 const CsDdlRecord *rec)
{
	refuse_as(rs, t, lsn, rec,
			  "changed its existing rows without archived changes",
			  record_effect(rec));
}

/*
 * t's definition at the target is not what the archive can give: an
 * ALTER TABLE of it (rec, at lsn) with no change of the table after it
 * up to the target (so no Relation message has its columns), or a RENAME
 * COLUMN whose old name the next Relation still has (a column added
 * under it: which column the old values belong to is not archived).
 */
static void
refuse_definition(RestoreState *rs, CsRestoreTable *t, XLogRecPtr lsn,
				  const CsDdlRecord *rec, bool renamed)
{
	refuse_as(rs, t, lsn, rec, "changed its definition, which the archive does not hold at the target",
			  renamed ?
			  "it renamed a column while the table still has a column of the old name, which the archive cannot tell from the renamed one" :
			  "no change of the table after the command, up to the target, archived its columns as they are after it");
}

/* The LSN of the first snapshot of the generation after lsn, or Invalid. */
static XLogRecPtr
first_snapshot_after(RestoreState *rs, XLogRecPtr lsn)
{
	List	   *names = cs_list_snapshots(rs->directory, rs->generation);
	char	   *dir = cs_snapshots_dir_path(rs->directory, rs->generation);
	ListCell   *lc;

	foreach(lc, names)
	{
		CsSnapshotReader *r = cs_snapreader_open(cs_file_in(dir, (char *) lfirst(lc)));
		XLogRecPtr	at = cs_snapreader_lsn(r);

		cs_snapreader_close(r);
		if (at > lsn)
			return at;
	}
	return InvalidXLogRecPtr;
}

/*
 * A record after the target (committed at lsn) changed a type t's
 * columns use (is_type_record()): the archived values are those of the
 * type before it, the target's columns (of the type as this database has
 * it) those after it.  ERROR 0A000, or with skip_inexact a WARNING, and
 * t is not restored (like refuse_table(), with the exact targets after).
 */
static void
refuse_later(RestoreState *rs, CsRestoreTable *t, XLogRecPtr lsn,
			 const CsDdlRecord *rec)
{
	XLogRecPtr	next_snapshot = first_snapshot_after(rs, lsn);
	char	   *hint;

	if (next_snapshot != InvalidXLogRecPtr)
		hint = psprintf("Restore to a target at or after " CS_LSN_FMT " (the first snapshot after the command, from which the table is exact again); skip_inexact => true restores the other tables without it.",
						LSN_FORMAT_ARGS(next_snapshot));
	else
		hint = psprintf("Restore to a target at or after the next snapshot, not taken yet (the archiver takes one changestream.recapture_delay after a command that changed rows; changestream.take_snapshot() takes one now); skip_inexact => true restores the other tables without it.");
	ereport(rs->skip_inexact ? WARNING : ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("table \"%s.%s\" cannot be restored exactly: %s %s at " CS_LSN_FMT ", after the target, changed a type its columns %s use",
					t->schema, t->name, rec->command_tag, rec->object_identity,
					LSN_FORMAT_ARGS(lsn), rec->columns ? rec->columns : "?"),
			 errdetail("The archived values up to the target are those of the type before the command, and the restored table's columns would have the type as this database has it, after the command (schema history event %s).",
					   rec->event),
			 errhint("%s", hint)));
	if (OidIsValid(t->relid))
		drop_target(rs, t);
	else
		t->target_schema = NULL;
}

/* The elements of a text[] (or oid[], elmtype) in its text form. */
static int
array_elements(const char *text, Oid elmtype, Datum **elems)
{
	ArrayType  *arr;
	bool	   *nulls;
	int			n;

	/* array_in caches in flinfo: called through OidInputFunctionCall() */
	arr = DatumGetArrayTypeP(OidInputFunctionCall(F_ARRAY_IN, unconstify(char *, text),
												  elmtype, -1));
	if (elmtype == OIDOID)
		deconstruct_array(arr, OIDOID, sizeof(Oid), true, TYPALIGN_INT,
						  elems, &nulls, &n);
	else
		deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT,
						  elems, &nulls, &n);
	for (int i = 0; i < n; i++)
		if (nulls[i])
			return -1;
	return n;
}

/*
 * Is a cast from type from to type to the same, whatever the session's
 * settings, as restore()'s replay (the archived text form read by the new
 * type's input function)?  Only built-in conversions known to be: integer
 * to integer, numeric, float8 or text; numeric to numeric, float8 or text
 * (numeric's output is the text float8's input reads); text and varchar
 * between themselves.  Not float to anything (its text form follows
 * extra_float_digits), nor bool (its cast to text is "true", its output
 * "t"), nor date/time types (DateStyle, TimeZone), nor anything else.
 */
static bool
cast_is_exact(Oid from, Oid to)
{
	switch (from)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
			return to == INT2OID || to == INT4OID || to == INT8OID ||
				to == NUMERICOID || to == FLOAT8OID || to == TEXTOID ||
				to == VARCHAROID;
		case NUMERICOID:
			return to == NUMERICOID || to == FLOAT8OID || to == TEXTOID ||
				to == VARCHAROID;
		case TEXTOID:
		case VARCHAROID:
			return to == TEXTOID || to == VARCHAROID;
		default:
			return false;
	}
}

/*
 * Did rec only retype columns of t without USING, each by a cast that
 * restore() replays exactly (cast_is_exact(), from the target column's
 * type now to the record's new type)?  Then t is not refused: the next
 * Relation message of t changes the target's column types.
 */
static bool
retype_is_exact(RestoreState *rs, const CsRestoreTable *t,
				const CsDdlRecord *rec)
{
	Datum	   *cols;
	Datum	   *names;
	Datum	   *types;
	int			ncols;
	int			n;

	if (rec->columns == NULL || rec->retyped == NULL ||
		rec->retyped_to == NULL || (!rs->dry_run && !OidIsValid(t->relid)))
		return false;
	ncols = array_elements(rec->columns, TEXTOID, &cols);
	n = array_elements(rec->retyped, TEXTOID, &names);
	if (n <= 0 || n != ncols || array_elements(rec->retyped_to, OIDOID, &types) != n)
		return false;
	for (int i = 0; i < n; i++)
	{
		char	   *name = TextDatumGetCString(names[i]);
		Oid			type = target_column_type(rs, t, name);

		if (!OidIsValid(type) ||
			!cast_is_exact(type, DatumGetObjectId(types[i])))
			return false;
	}
	return true;
}

/*
 * The type of t's target column name, or InvalidOid when it has none.  The
 * dry run has no target: the type restore() would give it, that of the
 * last Relation of t it counted a change under (t->synced), else the
 * snapshot manifest's.
 */
static Oid
target_column_type(RestoreState *rs, const CsRestoreTable *t, const char *name)
{
	ListCell   *lc1,
			   *lc2;
	AttrNumber	attnum;
	int			i;

	if (!rs->dry_run)
	{
		attnum = get_attnum(t->relid, name);
		return attnum == InvalidAttrNumber ? InvalidOid : get_atttype(t->relid, attnum);
	}
	if (t->synced != NULL)
	{
		i = rel_index(t->synced, name);
		return i < 0 ? InvalidOid : t->synced->atttyps[i];
	}
	forboth(lc1, rs->tables, lc2, rs->manifest)
	{
		ListCell   *lc;

		if (lfirst(lc1) != t)
			continue;
		foreach(lc, cs_manifest_column_types(lfirst(lc2)))
		{
			List	   *pair = lfirst(lc);
			Oid			typid;
			int32		typmod;

			if (strcmp(linitial(pair), name) == 0 &&
				cs_parse_type_string(lsecond(pair), &typid, &typmod))
				return typid;
		}
	}
	return InvalidOid;
}

/* A copy of rec in the current memory context. */
static CsDdlRecord *
copy_record(const CsDdlRecord *rec)
{
	CsDdlRecord *copy = palloc(sizeof(CsDdlRecord));

#define COPY_STRING(f) copy->f = rec->f ? pstrdup(rec->f) : NULL
	*copy = *rec;
	COPY_STRING(event);
	COPY_STRING(command_tag);
	COPY_STRING(object_type);
	COPY_STRING(object_identity);
	COPY_STRING(schema_name);
	COPY_STRING(table_name);
	COPY_STRING(publication);
	COPY_STRING(columns);
	COPY_STRING(retyped);
	COPY_STRING(retyped_to);
	COPY_STRING(definition);
#undef COPY_STRING
	return copy;
}

/*
 * t, not seen in the stream before a record refused it, appears as rel:
 * refused now if it is wanted (a table that never appears, such as one
 * never published, is never refused); never restored either way.
 */
static void
refuse_pending(RestoreState *rs, CsRestoreTable *t, LogicalRepRelation *rel)
{
	CsDdlRecord *rec = t->pending;

	t->pending = NULL;
	t->schema = pstrdup(rel->nspname);
	t->name = pstrdup(rel->relname);
	if (!table_wanted(rs, t->remote_oid, t->schema, t->name))
		return;
	refuse_table(rs, t, t->pending_lsn, rec);
}

/*
 * Does rec's publication (if any) matter: is it the generation's?  When
 * the generation's cannot be told, every publication counts.
 */
static bool
publication_concerns(RestoreState *rs, const CsDdlRecord *rec)
{
	return rec->publication == NULL || rs->publication == NULL ||
		strcmp(quote_identifier(rec->publication), rs->publication) == 0;
}

/*
 * The publication of the generation's plugin options ("publication_names
 * '<quoted name>'"), as quote_identifier() gives it, or NULL.
 */
static char *
identity_publication(const CsIdentity *identity)
{
	const char *key = "publication_names '";
	const char *p = strstr(identity->plugin_options, key);
	StringInfoData name;

	if (p == NULL)
		return NULL;
	initStringInfo(&name);
	for (p += strlen(key); *p != '\0'; p++)
	{
		if (*p == '\'' && p[1] == '\'')
			p++;
		else if (*p == '\'')
			return name.data;
		appendStringInfoChar(&name, *p);
	}
	return NULL;
}

/* Follow a rename or a move of t to the name the record gives it. */
static void
follow_name(RestoreState *rs, CsRestoreTable *t, const CsDdlRecord *rec)
{
	char	   *target = qualified_target(t);

	if (strcmp(t->name, rec->table_name) != 0)
	{
		if (!rs->dry_run)
			run_sql(psprintf("ALTER TABLE %s RENAME TO %s", target,
							 quote_identifier(rec->table_name)));
		t->name = pstrdup(rec->table_name);
	}
	if (strcmp(t->schema, rec->schema_name) != 0)
	{
		t->schema = pstrdup(rec->schema_name);
		if (rs->target_schema == NULL)
		{
			if (!rs->dry_run &&
				!OidIsValid(get_namespace_oid(t->schema, true)))
				run_sql(psprintf("CREATE SCHEMA %s", quote_identifier(t->schema)));
			if (!rs->dry_run)
				run_sql(psprintf("ALTER TABLE %s SET SCHEMA %s", qualified_target(t),
								 quote_identifier(t->schema)));
			t->target_schema = t->schema;
		}
	}
	if (!rs->dry_run)
		check_distinct_targets(rs, t);
}

/*
 * A DDL record for t, a table restore() created: its key may have changed
 * without a new Relation.  A Relation's key columns are taken again (the
 * key may have been added: t->key.unpublished no longer holds), and under
 * REPLICA IDENTITY FULL or NOTHING, where no later Relation would show the
 * source's primary key dropped, the one kept is dropped (restore_key.c).
 */
static void
forget_key(CsRestoreTable *t)
{
	Relation	rel = table_open(t->relid, AccessShareLock);
	char		identity = rel->rd_rel->relreplident;

	table_close(rel, AccessShareLock);
	t->key.unpublished = false;
	if ((identity == 'f' || identity == 'n') && t->key.from_primary)
	{
		t->key.from_primary = false;
		match_key(t, identity, NIL);
	}
}

/*
 * A record's definition of its table (the table as the command left it)
 * becomes the table's definition from here on; kept apart for a table not
 * seen in the stream yet.  An unreadable one is damage (XX001).  A table
 * not restored (not wanted, refused, dropped) needs none: its records'
 * definitions are not parsed.
 */
static void
note_definition(RestoreState *rs, const CsChange *c, const CsDdlRecord *rec)
{
	CsTableDefinition *def;
	CsRestoreTable *t;
	CsFutureDefinition *f;
	ListCell   *lc;
	char	   *why = NULL;

	t = table_by_oid(rs, rec->table_oid);
	if (rec->definition == NULL || (t != NULL && t->target_schema == NULL))
		return;
	def = cs_definition_from_text(rec->definition, &why);
	if (def == NULL)
		cs_segment_damage(c->path, c->frame_offset,
						  "The definition in a row of %s.%s cannot be read: %s.",
						  CS_DDL_SCHEMA, CS_DDL_TABLE, why);
	def->origin = psprintf("file \"%s\" at offset %lld", c->path,
						   (long long) c->frame_offset);
	if (t != NULL)
	{
		t->definition = def;
		return;
	}
	foreach(lc, rs->future_definitions)
	{
		f = lfirst(lc);
		if (f->oid != rec->table_oid)
			continue;
		f->def = def;
		f->schema = pstrdup(rec->schema_name);
		return;
	}
	f = palloc(sizeof(CsFutureDefinition));
	f->oid = rec->table_oid;
	f->schema = pstrdup(rec->schema_name);
	f->def = def;
	rs->future_definitions = lappend(rs->future_definitions, f);
}

/*
 * A DROP INDEX (its record names the index, not its table: see
 * cs_ddl_is_index_drop()): the index leaves the definition of the table
 * of that schema that has it.
 */
static void
forget_index(RestoreState *rs, const CsDdlRecord *rec)
{
	ListCell   *lc;

	foreach(lc, rs->tables)
	{
		CsRestoreTable *t = lfirst(lc);

		if (t->definition != NULL && strcmp(t->schema, rec->schema_name) == 0)
			t->definition = cs_definition_without_index(t->definition, rec->table_name);
	}
	foreach(lc, rs->future_definitions)
	{
		CsFutureDefinition *f = lfirst(lc);

		if (strcmp(f->schema, rec->schema_name) == 0)
			f->def = cs_definition_without_index(f->def, rec->table_name);
	}
}

/*
 * An ALTER TABLE of t (no rows changed, or columns retyped exactly) whose
 * definitions before and after name the columns by attnum: the target's
 * columns become the definition's after at once (restore_columns.c), and
 * the table's definition is known from here on.  False when that takes a
 * guess: the caller's rules then apply.
 */
static bool
replay_columns(RestoreState *rs, CsRestoreTable *t,
			   const CsTableDefinition *before)
{
	List	   *statements;
	List	   *now;
	ListCell   *lc;

	if (t->stale != NULL ||
		!cs_columns_replay(t->columns, rs->dry_run ? NULL : qualified_target(t),
						   before, t->definition, &statements, &now))
		return false;
	foreach(lc, statements)
		run_sql(lfirst(lc));
	if (statements != NIL)
	{
		CommandCounterIncrement();
		t->synced = NULL;		/* the next change matches the target again */
	}
	t->columns = now;
	return true;
}

/*
 * A row of changestream.ddl_history in a transaction being applied: a
 * table whose rows the command changed without changes, or whose changes
 * stop or start being archived (a change of the generation's publication's
 * tables), is refused; a dropped table is no longer restored (the target
 * restore() created is dropped); a renamed or moved one is renamed or
 * moved.  A record for a table not seen yet is kept, and refuses the table
 * only if it appears in the stream later (restored tables only matter).
 */
static void
apply_ddl(RestoreState *rs, const CsChange *c)
{
	CsDdlRecord rec;
	CsRestoreTable *t;
	CsTableDefinition *before;
	bool		publication;

	cs_ddl_read(c, &rec);
	if (cs_ddl_is_index_drop(&rec))
	{
		forget_index(rs, &rec);
		return;
	}
	t = table_by_oid(rs, rec.table_oid);
	before = t != NULL ? t->definition : NULL;
	note_definition(rs, c, &rec);
	publication = is_publication_record(&rec);
	if (publication && !publication_concerns(rs, &rec))
		return;
	t = table_by_oid(rs, rec.table_oid);
	if (t == NULL)
	{
		/* not seen yet: refused if it appears (first record kept) */
		if (!rec.rows_changed)
			return;
		t = palloc0(sizeof(CsRestoreTable));
		t->remote_oid = rec.table_oid;
		t->schema = pstrdup(rec.schema_name);
		t->name = pstrdup(rec.table_name);
		t->pending = copy_record(&rec);
		t->pending_lsn = c->commit_lsn;
		rs->tables = lappend(rs->tables, t);
		return;
	}
	/* the dry run: a wanted table has no target, and is not created */
	if (t->target_schema == NULL || (!rs->dry_run && !OidIsValid(t->relid)))
		return;
	if (t->created)
		forget_key(t);
	if (publication ||
		(rec.rows_changed && !retype_is_exact(rs, t, &rec)))
		refuse_table(rs, t, c->commit_lsn, &rec);
	else if (strcmp(rec.event, "sql_drop") == 0 && !is_column_drop(&rec))
		drop_target(rs, t);
	else if (strcmp(rec.event, "ddl_command_end") == 0 &&
			 (strcmp(t->name, rec.table_name) != 0 ||
			  strcmp(t->schema, rec.schema_name) != 0))
	{
		follow_name(rs, t, &rec);

		/*
		 * A record may name the table anew and change its columns too: an
		 * ALTER TABLE after ALTER SCHEMA ... RENAME, which records nothing.
		 */
		if (alters_columns(&rec))
			(void) replay_columns(rs, t, before);
	}
	else if (alters_columns(&rec) && replay_columns(rs, t, before))
		return;
	else if (alters_columns(&rec) && !rec.rows_changed)
	{
		/* until the table's next Relation (apply_archive()) */
		if (rec.object_type != NULL && !is_column_drop(&rec) &&
			strcmp(rec.object_type, "table column") == 0)
		{
			t->renamed = copy_record(&rec);
			t->renamed_lsn = c->commit_lsn;
		}
		t->stale = copy_record(&rec);
		t->stale_lsn = c->commit_lsn;
	}
}

/*
 * With a tables filter: every name the schema history gives a table from
 * the snapshot to the target, read before anything is restored (the
 * filter may name a table by its name at the target, or an earlier one).
 */
static void
collect_aliases(RestoreState *rs)
{
	CsDecoder  *d;
	CsChange	c;
	bool		skip = true;
	bool		reached = false;

	if (rs->filter.names == NIL || rs->ddl_trusted == NIL)
		return;
	d = cs_decoder_open(rs->directory, rs->generation, rs->snapshot_lsn,
						rs->has_target_lsn ? rs->target_lsn : InvalidXLogRecPtr);
	if (rs->has_target_time)
		cs_decoder_set_stop_time(d, rs->target_time);
	while (!reached && cs_decoder_next(d, &c))
	{
		CsDdlRecord rec;
		CsAlias    *a;

		if (c.kind == CS_CHANGE_BEGIN)
		{
			skip = c.commit_lsn < rs->snapshot_lsn;
			reached = !skip && past_target(rs, &c);
			continue;
		}
		if (skip || c.kind != CS_CHANGE_INSERT ||
			!cs_ddl_is_history(c.rel, rs->ddl_trusted))
			continue;
		cs_ddl_read(&c, &rec);
		a = palloc(sizeof(CsAlias));
		a->oid = rec.table_oid;
		a->schema = pstrdup(rec.schema_name);
		a->name = pstrdup(rec.table_name);
		rs->aliases = lappend(rs->aliases, a);
	}
	cs_decoder_close(d);
}

/*
 * Before anything is restored: the schema history from the snapshot to
 * the target, for records that changed a type a table's columns use
 * (is_type_record()).  The restored table's columns have the type as
 * this database has it now: after such a record, the snapshot's rows
 * (loaded before the stream reaches the record) and the archived values
 * are not those of that type.  Such a table is refused by the first such
 * record (refuse_table()): a table of the snapshot now, another one if
 * it appears in the stream.  Records after the target are read only for
 * a table with a column of a type that is not built in
 * (refuse_later_type()).
 */
static void
refuse_altered_types(RestoreState *rs)
{
	CsDecoder  *d;
	CsChange	c;
	bool		skip = true;
	bool		reached = false;

	if (rs->ddl_trusted == NIL)
		return;
	d = cs_decoder_open(rs->directory, rs->generation, rs->snapshot_lsn,
						rs->has_target_lsn ? rs->target_lsn : InvalidXLogRecPtr);
	if (rs->has_target_time)
		cs_decoder_set_stop_time(d, rs->target_time);
	while (!reached && cs_decoder_next(d, &c))
	{
		CsDdlRecord rec;
		CsRestoreTable *t;

		CHECK_FOR_INTERRUPTS();
		if (c.kind == CS_CHANGE_BEGIN)
		{
			skip = c.commit_lsn < rs->snapshot_lsn;
			reached = !skip && past_target(rs, &c);
			continue;
		}
		if (skip || c.kind != CS_CHANGE_INSERT ||
			!cs_ddl_is_history(c.rel, rs->ddl_trusted))
			continue;
		cs_ddl_read(&c, &rec);
		if (!is_type_record(&rec))
			continue;
		t = table_by_oid(rs, rec.table_oid);
		if (t != NULL)
		{
			if (t->target_schema != NULL && t->pending == NULL)
				refuse_table(rs, t, c.commit_lsn, &rec);
			continue;
		}
		t = palloc0(sizeof(CsRestoreTable));
		t->remote_oid = rec.table_oid;
		t->schema = pstrdup(rec.schema_name);
		t->name = pstrdup(rec.table_name);
		t->pending = copy_record(&rec);
		t->pending_lsn = c.commit_lsn;
		rs->tables = lappend(rs->tables, t);
	}
	cs_decoder_close(d);
}

/*
 * The type records after the target, the first per table, read once
 * (the segments after the target are opened only here).
 */
static void
later_type_records(RestoreState *rs)
{
	CsDecoder  *d;
	CsChange	c;
	bool		after = false;
	MemoryContext old;

	rs->later_read = true;
	if (rs->ddl_trusted == NIL || (!rs->has_target_lsn && !rs->has_target_time))
		return;
	old = MemoryContextSwitchTo(rs->cxt);
	d = cs_decoder_open(rs->directory, rs->generation,
						rs->has_target_lsn ? rs->target_lsn : rs->snapshot_lsn,
						InvalidXLogRecPtr);
	while (cs_decoder_next(d, &c))
	{
		CsDdlRecord rec;
		CsLaterType *l;
		ListCell   *lc;
		bool		known = false;

		CHECK_FOR_INTERRUPTS();
		if (c.kind == CS_CHANGE_BEGIN)
		{
			after = c.commit_lsn >= rs->snapshot_lsn && past_target(rs, &c);
			continue;
		}
		if (!after || c.kind != CS_CHANGE_INSERT ||
			!cs_ddl_is_history(c.rel, rs->ddl_trusted))
			continue;
		cs_ddl_read(&c, &rec);
		if (!is_type_record(&rec))
			continue;
		foreach(lc, rs->later_types)
			known = known || ((CsLaterType *) lfirst(lc))->oid == rec.table_oid;
		if (known)
			continue;
		l = palloc(sizeof(CsLaterType));
		l->oid = rec.table_oid;
		l->lsn = c.commit_lsn;
		l->rec = copy_record(&rec);
		rs->later_types = lappend(rs->later_types, l);
	}
	cs_decoder_close(d);
	MemoryContextSwitchTo(old);
}

/*
 * t's target exists: if a column of it has a type that is not built in
 * and a record after the target altered a type t's columns use, the
 * archived values up to the target are not values of the type as this
 * database has it: refused (refuse_later()).  Returns whether it was.
 */
static bool
refuse_later_type(RestoreState *rs, CsRestoreTable *t)
{
	Relation	rel = table_open(t->relid, AccessShareLock);
	TupleDesc	desc = RelationGetDescr(rel);
	bool		user_type = false;
	ListCell   *lc;

	for (int i = 0; i < desc->natts; i++)
		user_type = user_type ||
			(!TupleDescAttr(desc, i)->attisdropped &&
			 TupleDescAttr(desc, i)->atttypid >= FirstNormalObjectId);
	table_close(rel, AccessShareLock);
	if (!user_type)
		return false;
	if (!rs->later_read)
		later_type_records(rs);
	foreach(lc, rs->later_types)
	{
		CsLaterType *l = lfirst(lc);

		if (l->oid == t->remote_oid)
		{
			refuse_later(rs, t, l->lsn, l->rec);
			return true;
		}
	}
	return false;
}

/* ---------- applying the archived transactions ---------- */

static void
apply_truncate(RestoreState *rs, CsDecoder *d, const CsChange *c)
{
	ListCell   *lc;

	foreach(lc, c->truncated)
	{
		CsRestoreTable *t;

		if (cs_ddl_is_history(lfirst(lc), rs->ddl_trusted) ||
			(t = table_for(rs, d, lfirst(lc))) == NULL)
			continue;
		run_sql(psprintf("TRUNCATE ONLY %s", qualified_target(t)));
		rs->changes++;
	}
}

/*
 * Reading rs->generation to its end found no commit after the target time:
 * when the next generation (next) was handed off to and stands for the
 * archive from a time at or before the target (cs_handoff_time()), the
 * target is the next generation's to restore, and 22023 says so.  The
 * send time of this generation's last entries cannot prove its state
 * then: after the hand-off was requested it was streamed late, up to
 * where the next one starts, while transactions past that point committed
 * (docs/DESIGN.md section 6).  Returns otherwise.
 */
static void
refuse_past_handoff(RestoreState *rs, uint64 next)
{
	uint64		previous;
	TimestampTz from;

	if (!cs_handoff_time(rs->directory, cs_list_generations(rs->directory),
						 next, &previous, &from) ||
		previous != rs->generation || rs->target_time < from)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("the target time %s is past the end of generation %016llx",
					timestamptz_to_str(rs->target_time),
					(unsigned long long) rs->generation),
			 errdetail("Generation %016llx continues it without a gap and holds the history from %s on.",
					   (unsigned long long) next,
					   pstrdup(timestamptz_to_str(from))),
			 errhint("Restore from generation %016llx.",
					 (unsigned long long) next)));
}

/*
 * A target time after now is past the end of any archive: refused before
 * any work (22023), rather than after reading the whole history.
 */
static void
refuse_future_target(RestoreState *rs)
{
	TimestampTz now = GetCurrentTimestamp();

	if (!rs->has_target_time || rs->target_time <= now)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("the target time %s is in the future",
					timestamptz_to_str(rs->target_time)),
			 errdetail("It is now %s; the archive holds nothing later.",
					   pstrdup(timestamptz_to_str(now))),
			 errhint("Choose a time in the past, or omit target_time to restore to the end of the archive.")));
}

/* Has the archive been read far enough to prove the target's state? */
static void
check_reached(RestoreState *rs, CsDecoder *d)
{
	XLogRecPtr	position;
	TimestampTz send_time;

	cs_decoder_reached(d, &position, &send_time);
	if (((rs->has_target_lsn && position <= rs->target_lsn) ||
		 (rs->has_target_time && send_time < rs->target_time)) &&
		next_generation(rs) != 0)
		refuse_in_gap(rs, next_generation(rs), rs->has_target_lsn ?
					  psprintf("LSN " CS_LSN_FMT, LSN_FORMAT_ARGS(rs->target_lsn)) :
					  psprintf("time %s", timestamptz_to_str(rs->target_time)));
	if (rs->has_target_lsn && position <= rs->target_lsn)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the target LSN " CS_LSN_FMT " is beyond the end of generation %016llx",
						LSN_FORMAT_ARGS(rs->target_lsn),
						(unsigned long long) rs->generation),
				 errdetail("The generation holds the transactions that committed from " CS_LSN_FMT " to before " CS_LSN_FMT ".",
						   LSN_FORMAT_ARGS(rs->identity.start_lsn),
						   LSN_FORMAT_ARGS(position)),
				 errhint("Wait until the archiver has caught up, or choose an earlier target.")));
	if (rs->has_target_time && next_generation(rs) != 0)
		refuse_past_handoff(rs, next_generation(rs));
	if (rs->has_target_time && send_time < rs->target_time)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the target time %s is beyond the end of generation %016llx",
						timestamptz_to_str(rs->target_time),
						(unsigned long long) rs->generation),
				 send_time > rs->identity.created_at ?
				 errdetail("The generation holds what the server sent from %s to %s.",
						   pstrdup(timestamptz_to_str(rs->identity.created_at)),
						   timestamptz_to_str(send_time)) :
				 errdetail("The generation holds nothing the server sent after its start at %s.",
						   timestamptz_to_str(rs->identity.created_at)),
				 errhint("Wait until the archiver has caught up, or choose an earlier target.")));
}

static bool
past_target(RestoreState *rs, const CsChange *c)
{
	return (rs->has_target_lsn && c->commit_lsn > rs->target_lsn) ||
		(rs->has_target_time && c->commit_time > rs->target_time);
}

/*
 * The values an archived insert or update gives the target's columns that
 * own a sequence (restore_sequences.c sets the sequence past them, even
 * when the row is deleted before the target).
 */
static void
see_values(CsRestoreTable *t, const CsChange *c)
{
	const LogicalRepTupleData *tup = &c->newtup;

	for (int i = 0; i < tup->ncols && i < t->synced->natts; i++)
		if (tup->colstatus[i] == LOGICALREP_COLUMN_TEXT &&
			t->attmap[i] != InvalidAttrNumber)
			cs_see_value(t->seen_values, t->attmap[i], tup->colvalues[i].data);
}

/* The column names of relation rel, as CsRestoreTable.columns holds them. */
static List *
relation_columns(LogicalRepRelation *rel)
{
	List	   *names = NIL;

	for (int i = 0; i < rel->natts; i++)
		names = lappend(names, pstrdup(rel->attnames[i]));
	return names;
}

/*
 * A Relation message of an archived table (rel): its definition is
 * archived again as it is now.  A RENAME COLUMN since the last one is
 * ambiguous when rel still has every column name the target had (a
 * column added under the old name, or names swapped): refused.
 */
static void
see_relation(RestoreState *rs, LogicalRepRelation *rel)
{
	CsRestoreTable *t = table_by_oid(rs, rel->remoteid);
	ListCell   *lc;
	bool		every_name = true;

	if (t == NULL || t->target_schema == NULL ||
		(!rs->dry_run && !OidIsValid(t->relid)))
		return;
	if (t->renamed != NULL)
	{
		foreach(lc, t->columns)
		{
			bool		found = false;

			for (int i = 0; i < rel->natts && !found; i++)
				found = strcmp(rel->attnames[i], (char *) lfirst(lc)) == 0;
			every_name = every_name && found;
		}
		if (every_name)
			refuse_definition(rs, t, t->renamed_lsn, t->renamed, true);
	}
	t->renamed = NULL;
	t->stale = NULL;
	/* the dry run has no target to sync: its columns are rel's from now */
	if (rs->dry_run)
		t->columns = relation_columns(rel);
}

/*
 * Does t's definition (the one of its last record) have the columns the
 * target has, by name and type, the generated ones aside?  Then an ALTER
 * TABLE after the table's last Relation message changed no column (it
 * added a constraint, an index, a default, NOT NULL...), and what it did
 * is in the definition.  The dry run, which has no target, compares the
 * names.
 */
static bool
definition_has_columns(const CsRestoreTable *t)
{
	int			n = 0;
	ListCell   *lc;

	foreach(lc, t->definition->columns)
	{
		CsDefColumn *col = lfirst(lc);
		char	   *why = NULL;
		char	   *type;
		Oid			typid;
		int32		typmod;
		Oid			collid;
		AttrNumber	attnum;

		if (col->generated != NULL)
			continue;
		n++;
		if (cs_name_index(t->columns, col->name) < 0)
			return false;
		if (!OidIsValid(t->relid))
			continue;
		attnum = get_attnum(t->relid, col->name);
		if (attnum == InvalidAttrNumber ||
			(type = cs_type_sql(col->type, &why)) == NULL)
			return false;
		get_atttypetypmodcoll(t->relid, attnum, &typid, &typmod, &collid);
		if (strcmp(type, format_type_extended(typid, typmod,
											  FORMAT_TYPE_TYPEMOD_GIVEN |
											  FORMAT_TYPE_FORCE_QUALIFY)) != 0)
			return false;
	}
	return n == list_length(t->columns);
}

/*
 * The target reached: a table altered after its last Relation message
 * has a definition at the target the archive does not hold: refused,
 * unless the command's own record holds the definition and it has the
 * target's columns (definition_has_columns()).
 */
static void
refuse_stale(RestoreState *rs)
{
	ListCell   *lc;

	foreach(lc, rs->tables)
	{
		CsRestoreTable *t = lfirst(lc);

		if (t->stale != NULL && t->target_schema != NULL &&
			(rs->dry_run || OidIsValid(t->relid)) &&
			!(t->renamed == NULL && t->stale->definition != NULL &&
			  t->definition != NULL && definition_has_columns(t)))
			refuse_definition(rs, t, t->stale_lsn, t->stale, false);
	}
}

static void
apply_archive(RestoreState *rs)
{
	CsDecoder  *d = cs_decoder_open(rs->directory, rs->generation,
									rs->snapshot_lsn,
									rs->has_target_lsn ? rs->target_lsn : InvalidXLogRecPtr);
	CsChange	c;
	bool		skip = true;
	bool		reached = false;

	/* sealed segments all committed after the target are not opened */
	if (rs->has_target_time)
		cs_decoder_set_stop_time(d, rs->target_time);
	while (!reached && cs_decoder_next(d, &c))
	{
		CsRestoreTable *t;

		if (progress_due(rs))
			ereport(NOTICE,
					(errmsg("restoring: %lld transactions, %lld changes applied, at LSN " CS_LSN_FMT,
							(long long) rs->transactions, (long long) rs->changes,
							LSN_FORMAT_ARGS(c.commit_lsn))));
		switch (c.kind)
		{
			case CS_CHANGE_BEGIN:
				skip = c.commit_lsn < rs->snapshot_lsn;
				reached = !skip && past_target(rs, &c);
				break;
			case CS_CHANGE_COMMIT:
				if (skip)
					break;
				rs->transactions++;
				rs->restored_lsn = c.commit_lsn;
				rs->restored_time = c.commit_time;
				cs_progress_applied(c.commit_lsn, rs->transactions,
									rs->changes, rs->restored_tables);
				break;
			case CS_CHANGE_INSERT:
			case CS_CHANGE_UPDATE:
			case CS_CHANGE_DELETE:
				if (!skip && cs_ddl_is_history(c.rel, rs->ddl_trusted))
				{
					if (c.kind == CS_CHANGE_INSERT)
						apply_ddl(rs, &c);
					break;
				}
				if (skip || (t = table_for(rs, d, c.rel)) == NULL)
					break;
				cs_restore_sync_table(t, d, c.rel);
				if (t->seen_values != NIL && c.kind != CS_CHANGE_DELETE)
					see_values(t, &c);
				cs_apply_change(t, &c);
				rs->changes++;
				break;
			case CS_CHANGE_TRUNCATE:
				if (!skip)
					apply_truncate(rs, d, &c);
				break;
			case CS_CHANGE_RELATION:
				if (!skip && c.rel != NULL)
					see_relation(rs, c.rel);
				break;
			default:
				break;
		}
	}
	if (!reached && !cs_decoder_stopped(d))
		check_reached(rs, d);
	cs_decoder_close(d);
	close_apply_states();
	refuse_stale(rs);
}

/* ---------- the dry run ---------- */

/*
 * Dry run: the rows the snapshot's sections of the wanted tables hold, of
 * those that satisfy the row filter with one (restore_dry_count.c), as
 * load_snapshot() would load them, into rs->snapshot_rows.
 */
static void
dry_count_section(RestoreState *rs, CsSnapshotReader *r, CsRestoreTable *t,
				  int section)
{
	if (section >= list_length(rs->manifest))
		cs_file_damage(rs->snapshot_path, cs_snapreader_offset(r),
					   "The file holds more table sections than its manifest lists.");
	rs->snapshot_rows +=
		cs_dry_count_section(r, rs->snapshot_path, t->name,
							 psprintf("%s.%s", t->target_schema, t->name),
							 rs->row_filter == NULL ? NIL :
							 cs_manifest_column_types(list_nth(rs->manifest, section)),
							 rs->row_filter);
}

static void
dry_count_snapshot(RestoreState *rs)
{
	walk_snapshot(rs, dry_count_section);
}

/*
 * Dry run: the archived table of relation rel if it is restored, else
 * NULL.  A table first met in the stream is noted once, as table_for()
 * would create its target; one the schema history refused before it was
 * seen is refused now, as table_for() refuses it.
 */
static CsRestoreTable *
dry_wanted(RestoreState *rs, LogicalRepRelation *rel)
{
	CsRestoreTable *t;

	if (cs_ddl_is_history(rel, rs->ddl_trusted))
		return NULL;
	t = table_by_oid(rs, rel->remoteid);
	if (t != NULL && t->pending != NULL)
	{
		refuse_pending(rs, t, rel);
		return NULL;
	}
	if (t != NULL)
		return t->target_schema != NULL ? t : NULL;
	t = palloc0(sizeof(CsRestoreTable));
	t->remote_oid = rel->remoteid;
	t->schema = pstrdup(rel->nspname);
	t->name = pstrdup(rel->relname);
	t->definition = future_definition(rs, t->remote_oid);
	t->columns = relation_columns(rel);
	rs->tables = lappend(rs->tables, t);
	if (!table_wanted(rs, t->remote_oid, t->schema, t->name))
		return NULL;
	t->target_schema = rs->target_schema ? pstrdup(rs->target_schema) : t->schema;
	rs->restored_tables++;
	return t;
}

/*
 * dry_run => true: the archive is read as apply_archive() reads it, from
 * the chosen snapshot to the target (checked as it checks it), and the
 * transactions and the changes of the wanted tables it would apply are
 * counted; nothing is created, loaded or changed.  The schema history is
 * followed as apply_archive() follows it, without the SQL: a table it
 * drops is counted up to the drop and is not in restored_tables, a
 * rename or move gives the table its new name, and a table it refuses is
 * refused (0A000, or a WARNING and left out under skip_inexact).  Where
 * an existing target's column types differ from the archived ones, a
 * retyped column is judged with the archived types (the real run judges
 * with the target's).
 */
static pg_noinline void
dry_run(RestoreState *rs)
{
	CsDecoder  *d = cs_decoder_open(rs->directory, rs->generation,
									rs->snapshot_lsn,
									rs->has_target_lsn ? rs->target_lsn : InvalidXLogRecPtr);
	CsChange	c;
	bool		skip = true;
	bool		reached = false;
	ListCell   *lc;
	CsRestoreTable *t;

	foreach(lc, rs->tables)
		if (((CsRestoreTable *) lfirst(lc))->target_schema != NULL)
			rs->restored_tables++;
	if (rs->has_target_time)
		cs_decoder_set_stop_time(d, rs->target_time);
	while (!reached && cs_decoder_next(d, &c))
	{
		CHECK_FOR_INTERRUPTS();
		switch (c.kind)
		{
			case CS_CHANGE_BEGIN:
				skip = c.commit_lsn < rs->snapshot_lsn;
				reached = !skip && past_target(rs, &c);
				break;
			case CS_CHANGE_COMMIT:
				if (skip)
					break;
				rs->transactions++;
				rs->restored_lsn = c.commit_lsn;
				rs->restored_time = c.commit_time;
				cs_progress_applied(c.commit_lsn, rs->transactions,
									rs->changes, rs->restored_tables);
				break;
			case CS_CHANGE_INSERT:
			case CS_CHANGE_UPDATE:
			case CS_CHANGE_DELETE:
				if (skip || c.rel == NULL)
					break;
				if (cs_ddl_is_history(c.rel, rs->ddl_trusted))
				{
					if (c.kind == CS_CHANGE_INSERT)
						apply_ddl(rs, &c);
					break;
				}
				if ((t = dry_wanted(rs, c.rel)) == NULL)
					break;
				t->synced = c.rel;
				rs->changes++;
				break;
			case CS_CHANGE_TRUNCATE:
				if (skip)
					break;
				foreach(lc, c.truncated)
					if (dry_wanted(rs, lfirst(lc)) != NULL)
						rs->changes++;
				break;
			case CS_CHANGE_RELATION:
				if (!skip && c.rel != NULL)
					see_relation(rs, c.rel);
				break;
			default:
				break;
		}
	}
	if (!reached && !cs_decoder_stopped(d))
		check_reached(rs, d);
	cs_decoder_close(d);
	refuse_stale(rs);
}

/* ---------- keys and sequences from the manifest ---------- */

/*
 * The target column of each sequence the manifest lists for a restored
 * table, by its name at the snapshot (before any rename: attnums stay).
 */
static void
resolve_sequences(RestoreState *rs)
{
	ListCell   *lc1,
			   *lc2;

	forboth(lc1, rs->tables, lc2, rs->manifest)
	{
		CsRestoreTable *t = lfirst(lc1);
		ListCell   *ls;

		if (t->target_schema == NULL || !OidIsValid(t->relid))
			continue;
		foreach(ls, ((CsManifestTable *) lfirst(lc2))->sequences)
		{
			CsArchivedSequence *a = lfirst(ls);

			a->attnum = get_attnum(t->relid, a->column);
		}
	}
}

/*
 * After the snapshot is loaded (a primary key is cheaper to build after
 * COPY than to maintain during it): each table restore() created from the
 * manifest gets the replica identity the manifest gives it.  From format
 * 2 on the manifest names the key; format 1 names FULL and NOTHING, and
 * the key only the first change's Relation gives.
 */
static void
match_manifest_keys(RestoreState *rs)
{
	ListCell   *lc1,
			   *lc2;

	forboth(lc1, rs->tables, lc2, rs->manifest)
	{
		CsRestoreTable *t = lfirst(lc1);
		CsManifestTable *mt = lfirst(lc2);

		if (t->target_schema == NULL || !t->created)
			continue;
		if (mt->has_key || mt->identity == 'f' || mt->identity == 'n')
			match_key(t, mt->identity, mt->key);
	}
}

/*
 * After the archive is applied: each table restore() created gets the
 * source's definition as of the target, where the archive has one
 * (restore_definition.c); before the sequences are set, so that those of
 * identity and serial columns it creates are set too.
 */
static void
apply_definitions(RestoreState *rs)
{
	ListCell   *lc;

	foreach(lc, rs->tables)
	{
		CsRestoreTable *t = lfirst(lc);

		if (t->target_schema == NULL || !OidIsValid(t->relid) || !t->created ||
			t->definition == NULL)
			continue;
		close_apply_states();
		cs_restore_definition(t->relid, t->definition);
	}
}

/*
 * After the archive is applied: the sequences the restored targets' columns
 * own are set (restore_sequences.c), with the manifest's values for the
 * tables of the snapshot.
 */
static void
set_sequences(RestoreState *rs)
{
	List	   *targets = NIL;
	ListCell   *lc;

	foreach(lc, rs->tables)
	{
		CsRestoreTable *t = lfirst(lc);
		CsSequenceTarget *st;
		int			i = foreach_current_index(lc);

		if (t->target_schema == NULL || !OidIsValid(t->relid))
			continue;
		st = palloc0(sizeof(CsSequenceTarget));
		st->relid = t->relid;
		st->qualified = qualified_target(t);
		st->seen = t->seen_values;
		if (i < list_length(rs->manifest))
			st->archived = ((CsManifestTable *) list_nth(rs->manifest, i))->sequences;
		targets = lappend(targets, st);
	}
	(void) cs_restore_sequences(targets);
}

/* ---------- the SQL function ---------- */

/* Pin the archive's session settings and the replica role, in a nest level. */
static int
pin_settings(void)
{
	int			nest = NewGUCNestLevel();

#define CS_PINNED_SETTING(name, value) \
	(void) set_config_option((name), (value), PGC_SUSET, PGC_S_SESSION, \
							 GUC_ACTION_SAVE, true, 0, false);
#include "base/pinned_settings.h"
#undef CS_PINNED_SETTING
	(void) set_config_option("session_replication_role", "replica", PGC_SUSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	return nest;
}

static void
read_args(FunctionCallInfo fcinfo, RestoreState *rs)
{
	char	   *gen_text;

	rs->target_schema = PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0));
	rs->has_target_lsn = !PG_ARGISNULL(2);
	rs->target_lsn = rs->has_target_lsn ? PG_GETARG_LSN(2) : InvalidXLogRecPtr;
	rs->has_target_time = !PG_ARGISNULL(3);
	rs->target_time = rs->has_target_time ? PG_GETARG_TIMESTAMPTZ(3) : 0;
	rs->skip_inexact = PG_NARGS() > 6 && !PG_ARGISNULL(6) && PG_GETARG_BOOL(6);
	rs->dry_run = PG_NARGS() > 7 && !PG_ARGISNULL(7) && PG_GETARG_BOOL(7);
	if (PG_NARGS() > 8 && !PG_ARGISNULL(8))
	{
		rs->row_filter_text = text_to_cstring(PG_GETARG_TEXT_PP(8));
		if (PG_ARGISNULL(4))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("row_filter needs the tables argument"),
					 errhint("Name the table (or tables) the filter is over, for example tables => '{public.accounts}'.")));
		rs->row_filter = cs_row_filter_parse(rs->row_filter_text);
	}
	if (rs->has_target_lsn && rs->has_target_time)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("target_lsn and target_time cannot both be given")));
	if (!PG_ARGISNULL(4))
		rs->filter.names = cs_relation_names(PG_GETARG_ARRAYTYPE_P(4));
	gen_text = PG_ARGISNULL(1) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (!PG_ARGISNULL(5) &&
		strcmp(text_to_cstring(PG_GETARG_TEXT_PP(5)), "replica") == 0)
		rs->directory = cs_reader_directory(CS_READ_REPLICA, gen_text);
	else if (!PG_ARGISNULL(5))
	{
		if (!superuser())
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied to restore from archive_directory"),
					 errdetail("Only superusers may read an archive from a directory of their choice.")));
		rs->directory = text_to_cstring(PG_GETARG_TEXT_PP(5));
		if (!is_absolute_path(rs->directory))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("archive_directory must be an absolute path"),
					 errhint("Give an absolute path, or 'replica' for the bucket of changestream.replica_url.")));
	}
	else
		rs->directory = cs_reader_directory(CS_READ_AUTO, gen_text);
	rs->generation = cs_resolve_generation(rs->directory, PG_ARGISNULL(1) ? NULL :
										   text_to_cstring(PG_GETARG_TEXT_PP(1)));
	if (!cs_read_identity(rs->directory, rs->generation, &rs->identity))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("generation %016llx has no identity file",
						(unsigned long long) rs->generation)));
	rs->ddl_trusted = cs_ddl_trusted_oids(rs->directory, rs->generation);
	rs->publication = identity_publication(&rs->identity);
}

/* "schema.table" (archived names) of the tables restored, as text[]. */
static Datum
restored_names(RestoreState *rs)
{
	List	   *names = NIL;
	Datum	   *elems;
	ListCell   *lc;
	int			n = 0;

	foreach(lc, rs->tables)
	{
		CsRestoreTable *t = lfirst(lc);

		if (t->target_schema != NULL && (rs->dry_run || OidIsValid(t->relid)))
			names = lappend(names, psprintf("%s.%s", t->schema, t->name));
	}
	elems = palloc(sizeof(Datum) * Max(list_length(names), 1));
	foreach(lc, names)
		elems[n++] = CStringGetTextDatum(lfirst(lc));
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false,
										   TYPALIGN_INT));
}

/* The chosen snapshot and its file's size, for restore_progress. */
static void
progress_snapshot(RestoreState *rs)
{
	CsStorageInfo info;

	cs_progress_snapshot(rs->snapshot_lsn,
						 cs_storage_stat(rs->snapshot_path, true, &info) == 0 &&
						 info.type == CS_STORAGE_FILE ? info.size : 0);
}

/* restore()'s result row. */
static Datum
result_row(RestoreState *rs, TupleDesc tupdesc)
{
	Datum		values[RESTORE_COLS];
	bool		nulls[RESTORE_COLS];
	XLogRecPtr	restored = rs->transactions > 0 ? rs->restored_lsn : rs->snapshot_lsn;
	CsStorageInfo info;

	memset(nulls, 0, sizeof(nulls));
	values[0] = CStringGetTextDatum(psprintf("%016llx", (unsigned long long) rs->generation));
	values[1] = LSNGetDatum(rs->snapshot_lsn);
	values[2] = LSNGetDatum(restored);
	values[3] = TimestampTzGetDatum(rs->restored_time);
	nulls[3] = (rs->transactions == 0);
	values[4] = Int32GetDatum(rs->restored_tables);
	values[5] = Int64GetDatum(rs->snapshot_rows);
	values[6] = Int64GetDatum(rs->transactions);
	values[7] = Int64GetDatum(rs->changes);
	values[8] = BoolGetDatum(rs->dry_run);
	nulls[9] = cs_storage_stat(rs->snapshot_path, true, &info) != 0 ||
		info.type != CS_STORAGE_FILE;
	values[9] = Int64GetDatum(nulls[9] ? 0 : info.size);
	values[10] = Int64GetDatum((int64) (restored - rs->snapshot_lsn));
	values[11] = restored_names(rs);
	return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls));
}

/*
 * changestream.restore(target_schema text, generation text DEFAULT NULL,
 *	  target_lsn pg_lsn DEFAULT NULL, target_time timestamptz DEFAULT NULL,
 *	  tables text[] DEFAULT NULL, archive_directory text DEFAULT NULL,
 *	  skip_inexact boolean DEFAULT false)
 *	  Restores the archived tables (tables: "schema.table" or "table", by
 *	  any name the schema history gives the table from the snapshot to the
 *	  target; NULL for all) as of the last transaction that committed at or before
 *	  target_lsn or target_time (at most one; NULL: all archived) into
 *	  target_schema.<table> (NULL: each table's own schema), in the
 *	  caller's transaction.  Existing targets must be empty and have the
 *	  archived columns; missing ones are created, with the archive's
 *	  replica identity (restore_key.c).  After the changes, the sequences
 *	  the targets' columns own are set (restore_sequences.c; a NOTICE
 *	  each).  archive_directory
 *	  (superuser only) reads a copied archive instead of
 *	  changestream.directory.  A table the schema history shows changed
 *	  without archived changes (docs/DESIGN.md section 12) is refused
 *	  (0A000), or left out with a WARNING under skip_inexact.
 *	  Returns one row (generation text, snapshot_lsn pg_lsn, restored_lsn
 *	  pg_lsn (commit LSN of the last transaction applied, or the snapshot's
 *	  LSN), restored_commit_time timestamptz (NULL when none was applied),
 *	  tables int, snapshot_rows bigint, transactions bigint, changes
 *	  bigint).
 *	  Errors: 0A000 for a table that cannot be restored exactly; 22023
 *	  for a target outside the generation (the range is in errdetail; a
 *	  target in a gap between two generations names the gap) or both
 *	  targets; 42P07 when two tables would share a
 *	  target; 55000 for a non-empty target, or changestream.directory
 *	  unset; 42703 for a target lacking a column; 42501 for
 *	  archive_directory without superuser, missing table privileges, or
 *	  a target whose row level security would hide rows from the caller;
 *	  42704 for a missing generation; XX001 naming file and offset for a
 *	  damaged archive (a snapshot manifest's column type that is not the
 *	  name of a type of this database included); 57014 on cancel.
 */
Datum
changestream_restore(PG_FUNCTION_ARGS)
{
	RestoreState rs;
	TupleDesc	tupdesc;
	MemoryContext cxt = CurrentMemoryContext;
	int			nest;
	Datum		result;
	ListCell   *lc1,
			   *lc2;

	/* it creates and fills tables: not on a standby (25006, as DDL) */
	PreventCommandDuringRecovery("changestream.restore()");
	memset(&rs, 0, sizeof(rs));
	rs.cxt = cxt;
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	read_args(fcinfo, &rs);
	cs_progress_begin(rs.generation, rs.dry_run, rs.has_target_lsn ? rs.target_lsn : InvalidXLogRecPtr,
					  rs.has_target_time ? rs.target_time : 0);
	refuse_future_target(&rs);
	pin_and_find_start(&rs);
	/* a name the whole generation does not hold is refused before any work */
	cs_check_table_names(rs.directory, rs.generation, rs.filter.names, "tables");
	rs.last_progress = GetCurrentTimestamp();
	choose_snapshot(&rs);
	/* older snapshots and segments are not read: retention may take them */
	cs_pin_advance(rs.generation, rs.snapshot_lsn);
	progress_snapshot(&rs);
	collect_aliases(&rs);
	read_manifest_tables(&rs);
	refuse_altered_types(&rs);
	if (rs.dry_run)
	{
		cs_progress_phase(CS_RESTORE_DRY_RUN);
		dry_count_snapshot(&rs);
		dry_run(&rs);
		cs_progress_end();
		PG_RETURN_DATUM(result_row(&rs, tupdesc));
	}

	nest = pin_settings();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	MemoryContextSwitchTo(cxt);
	forboth(lc1, rs.tables, lc2, rs.manifest)
	{
		CsRestoreTable *t = lfirst(lc1);

		if (t->target_schema != NULL)
			prepare_target(&rs, t, NIL, lfirst(lc2));
	}
	resolve_sequences(&rs);
	cs_progress_phase(CS_RESTORE_LOADING);
	load_snapshot(&rs);
	match_manifest_keys(&rs);
	open_tables = &rs.tables;
	PG_TRY();
	{
		cs_progress_phase(CS_RESTORE_APPLYING);
		cs_progress_applied(InvalidXLogRecPtr, 0, 0, rs.restored_tables);
		apply_archive(&rs);
		close_apply_states();
		apply_definitions(&rs);
		cs_progress_phase(CS_RESTORE_SEQUENCES);
		set_sequences(&rs);
	}
	PG_FINALLY();
	{
		open_tables = NULL;
	}
	PG_END_TRY();
	/* the row before SPI_finish(), which frees what SPI's context holds */
	MemoryContextSwitchTo(cxt);
	result = result_row(&rs, tupdesc);
	SPI_finish();
	MemoryContextSwitchTo(cxt);
	AtEOXact_GUC(true, nest);
	cs_progress_end();
	PG_RETURN_DATUM(result);
}
