/*-------------------------------------------------------------------------
 *
 * restore_apply.c
 *	  Applies one archived change to a restore's target table through the
 *	  executor, the way the built-in apply worker does
 *	  (replication/logical/worker.c: apply_handle_insert_internal,
 *	  apply_handle_update_internal, apply_handle_delete_internal, over
 *	  executor/execReplication.c): a short-lived EState with the target as
 *	  its result relation, text values through each column's input
 *	  function, the old row found by the replica identity index (or the
 *	  primary key), with a sequential scan when there is none (REPLICA
 *	  IDENTITY FULL: binary images first, then equality operators where a
 *	  type has one, see find_full_row()), and
 *	  ExecSimpleRelationInsert/Update/Delete, which
 *	  maintain indexes.  Unchanged TOASTed columns keep the old row's
 *	  value.  Unlike the apply worker, which builds the EState for each
 *	  change, the state of a table stays open across its changes (until
 *	  cs_apply_close(), which restore.c calls before any DDL or TRUNCATE
 *	  and at the end), with a per-change memory context.  Triggers and
 *	  foreign keys do not fire because the caller runs under
 *	  session_replication_role = replica.
 *
 *	  Row cache.  The apply worker commits each transaction, so the old
 *	  versions of a row updated again and again are pruned as it goes.  A
 *	  restore runs in one transaction, where nothing it wrote can be pruned:
 *	  the n-th update of a row would walk the index entries and HOT chain
 *	  of all n-1 versions before it, quadratic in the updates of one row
 *	  (pgbench updates 10 branch rows 2,000 times each in 20,000
 *	  transactions).  So each table keeps, for the rows it updated last,
 *	  the key (a hash of the archived text of its index columns) and the
 *	  TID of the version it wrote.  An UPDATE or DELETE of that key fetches
 *	  that TID directly; the tuple is used only if it is still visible (no
 *	  later change replaced it) and its index columns are image-equal to
 *	  the ones searched for, else the index is searched as above.  A tuple
 *	  this transaction wrote cannot be changed or locked by another one
 *	  before it commits, so no row lock is taken for it.  The cache holds
 *	  at most ROW_CACHE_ENTRIES keys per table (it starts over when full)
 *	  and goes away with the table's state, before any DDL or TRUNCATE,
 *	  which could move rows.
 *
 *	  Row filter.  With restore()'s row_filter the target holds only the
 *	  rows of the full restore that satisfy it, and each change keeps it
 *	  so: an INSERT is made when its row satisfies the filter; an UPDATE
 *	  or DELETE whose row is not in the target (it did not satisfy the
 *	  filter) finds none, which is no damage then; an UPDATE of a row in
 *	  the target updates it and deletes it when the new row no longer
 *	  satisfies the filter; an UPDATE of a row not in the target inserts
 *	  the new row when it satisfies the filter (moved in).  Moved in with
 *	  an unchanged TOASTed column (not in the archive), or with the filter
 *	  reading such a column, the row cannot be known: refused (0A000).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "parser/parse_relation.h"
#include "utils/datum.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
#include "utils/typcache.h"

#include "read/restore_apply.h"
#include "read/restore_row_filter.h"
#include "base/compat.h"

/* Keys the row cache holds per table before it starts over. */
#define ROW_CACHE_ENTRIES	65536

/* A row cache entry: the TID of the version of a key this restore wrote. */
typedef struct RowCacheEntry
{
	uint64		key;			/* hash key: row_key() of the index columns */
	ItemPointerData tid;
} RowCacheEntry;

typedef struct CsApplyState
{
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *remoteslot;
	TupleTableSlot *searchslot;
	TupleTableSlot *localslot;
	MemoryContext change_cxt;	/* reset after each change */
	Oid			idxoid;			/* index rows are found by, or InvalidOid */
	int			nkeys;			/* its key columns (target attnums) */
	AttrNumber	keys[INDEX_MAX_KEYS];
	HTAB	   *rows;			/* RowCacheEntry, NULL when no index */
	ExprState  *filter;			/* the row filter, or NULL */
	Bitmapset  *filter_cols;	/* the columns it reads (pull_varattnos()) */
} ApplyState;

/* The index to find rows by: the replica identity's, else the primary key. */
static Oid
lookup_index(Relation rel)
{
	Oid			idx = RelationGetReplicaIndex(rel);

	return OidIsValid(idx) ? idx : cs_relation_primary_key(rel);
}

/* An empty row cache for the state's table, beside the state. */
static void
create_row_cache(ApplyState *as)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(RowCacheEntry);
	ctl.hcxt = GetMemoryChunkContext(as);
	as->rows = hash_create("changestream restore rows", 1024, &ctl,
						   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/* Which index finds rows, its key columns, and a row cache if there is one. */
static void
begin_lookup(ApplyState *as)
{
	Relation	idxrel;

	as->idxoid = lookup_index(as->rel);
	if (!OidIsValid(as->idxoid))
		return;
	idxrel = index_open(as->idxoid, AccessShareLock);
	as->nkeys = IndexRelationGetNumberOfKeyAttributes(idxrel);
	for (int k = 0; k < as->nkeys; k++)
		as->keys[k] = idxrel->rd_index->indkey.values[k];
	index_close(idxrel, NoLock);
	for (int k = 0; k < as->nkeys; k++)
		if (as->keys[k] <= 0)
			return;				/* an expression index: no row cache */
	create_row_cache(as);
}

/* The apply worker's create_edata_for_relation(), for one target table. */
static void
begin_apply(ApplyState *as, const CsRestoreTable *t)
{
	RangeTblEntry *rte;
	Oid			relid = t->relid;

	as->rel = table_open(relid, RowExclusiveLock);
	as->estate = CreateExecutorState();
	rte = makeNode(RangeTblEntry);
	rte->rtekind = RTE_RELATION;
	rte->relid = relid;
	rte->relkind = as->rel->rd_rel->relkind;
	rte->rellockmode = AccessShareLock;
	cs_exec_init_range_table(as->estate, rte);
	as->rri = makeNode(ResultRelInfo);
	InitResultRelInfo(as->rri, as->rel, 1, NULL, 0);
	as->estate->es_opened_result_relations =
		lappend(as->estate->es_opened_result_relations, as->rri);
	as->estate->es_output_cid = GetCurrentCommandId(true);
	AfterTriggerBeginQuery();
	ExecOpenIndices(as->rri, false);
	as->remoteslot = ExecInitExtraTupleSlot(as->estate, RelationGetDescr(as->rel),
											&TTSOpsVirtual);
	as->searchslot = ExecInitExtraTupleSlot(as->estate, RelationGetDescr(as->rel),
											&TTSOpsVirtual);
	as->localslot = table_slot_create(as->rel, &as->estate->es_tupleTable);
	as->change_cxt = AllocSetContextCreate(CurrentMemoryContext,
										   "changestream restore change",
										   ALLOCSET_DEFAULT_SIZES);
	begin_lookup(as);
	/* transformed again each time: the table's columns may have changed */
	if (t->row_filter != NULL)
	{
		Node	   *expr = cs_row_filter_transform(t->row_filter, as->rel);

		as->filter = ExecPrepareQual(list_make1(expr), as->estate);
		as->filter_cols = cs_row_filter_columns(expr);
	}
}

/* Does slot's row satisfy the row filter (NULL counts as no, as in WHERE)? */
static bool
row_passes(ApplyState *as, TupleTableSlot *slot)
{
	ExprContext *econtext = GetPerTupleExprContext(as->estate);

	econtext->ecxt_scantuple = slot;
	return ExecQual(as->filter, econtext);
}

/*
 * cs_apply_close
 *	  Closes the apply state of target table t, if open (indexes, after
 *	  trigger query, executor state, relation; its lock is kept).
 */
void
cs_apply_close(CsRestoreTable *t)
{
	ApplyState *as = t->apply;

	if (as == NULL)
		return;
	ExecCloseIndices(as->rri);
	AfterTriggerEndQuery(as->estate);
	ExecResetTupleTable(as->estate->es_tupleTable, false);
	FreeExecutorState(as->estate);
	table_close(as->rel, NoLock);
	MemoryContextDelete(as->change_cxt);
	if (as->rows != NULL)
		hash_destroy(as->rows);
	pfree(as);
	t->apply = NULL;
	CommandCounterIncrement();
}

/*
 * Fill slot from an archived tuple (the apply worker's slot_store_data
 * and slot_modify_data): start from src's values when given (else all
 * NULL), then put each archived column that was sent into the target
 * column it maps to.
 */
static void
fill_slot(TupleTableSlot *slot, TupleTableSlot *src, const CsRestoreTable *t,
		  const LogicalRepTupleData *tup)
{
	TupleDesc	desc = slot->tts_tupleDescriptor;
	int			natts = desc->natts;

	ExecClearTuple(slot);
	if (src != NULL)
	{
		slot_getallattrs(src);
		memcpy(slot->tts_values, src->tts_values, sizeof(Datum) * natts);
		memcpy(slot->tts_isnull, src->tts_isnull, sizeof(bool) * natts);
	}
	else
		memset(slot->tts_isnull, true, sizeof(bool) * natts);
	for (int i = 0; i < tup->ncols; i++)
	{
		AttrNumber	attnum = t->attmap[i];
		Form_pg_attribute att;
		Oid			typinput;
		Oid			typioparam;

		if (attnum <= 0 || tup->colstatus[i] == LOGICALREP_COLUMN_UNCHANGED)
			continue;
		if (tup->colstatus[i] == LOGICALREP_COLUMN_NULL)
		{
			slot->tts_values[attnum - 1] = (Datum) 0;
			slot->tts_isnull[attnum - 1] = true;
			continue;
		}
		att = TupleDescAttr(desc, attnum - 1);
		getTypeInputInfo(att->atttypid, &typinput, &typioparam);
		slot->tts_values[attnum - 1] =
			OidInputFunctionCall(typinput, tup->colvalues[i].data, typioparam,
								 att->atttypmod);
		slot->tts_isnull[attnum - 1] = false;
	}
	ExecStoreVirtualTuple(slot);
}

/*
 * The row cache key of an archived tuple: a hash of the archived text of
 * the columns that map to the index's key columns, in index order.  False
 * when one of them is not in the tuple as text (NULL, unchanged TOAST, not
 * archived).
 */
static bool
row_key(const ApplyState *as, const CsRestoreTable *t,
		const LogicalRepTupleData *tup, uint64 *key)
{
	uint64		h = 0;

	for (int k = 0; k < as->nkeys; k++)
	{
		int			i;

		for (i = 0; i < tup->ncols; i++)
			if (t->attmap[i] == as->keys[k])
				break;
		if (i == tup->ncols || tup->colstatus[i] != LOGICALREP_COLUMN_TEXT)
			return false;
		h = hash_combine64(h, hash_bytes_extended((const unsigned char *) tup->colvalues[i].data,
												  tup->colvalues[i].len, k));
	}
	*key = h;
	return true;
}

/*
 * The row cache's tuple for the key of searchslot's archived tuple, into
 * localslot: true when the cached TID holds a tuple visible now whose
 * index columns are image-equal to searchslot's (see the file header).
 */
static bool
find_cached_row(ApplyState *as, const CsRestoreTable *t,
				const LogicalRepTupleData *tup, TupleTableSlot *searchslot,
				TupleTableSlot *localslot)
{
	uint64		key;
	RowCacheEntry *e;
	TupleDesc	desc = RelationGetDescr(as->rel);

	if (as->rows == NULL || !row_key(as, t, tup, &key))
		return false;
	e = hash_search(as->rows, &key, HASH_FIND, NULL);
	if (e == NULL ||
		!table_tuple_fetch_row_version(as->rel, &e->tid, GetLatestSnapshot(),
									   localslot))
		return false;
	slot_getallattrs(localslot);
	slot_getallattrs(searchslot);
	for (int k = 0; k < as->nkeys; k++)
	{
		int			a = as->keys[k] - 1;
		Form_pg_attribute att = TupleDescAttr(desc, a);

		if (localslot->tts_isnull[a] || searchslot->tts_isnull[a] ||
			!datum_image_eq(localslot->tts_values[a], searchslot->tts_values[a],
							att->attbyval, att->attlen))
		{
			ExecClearTuple(localslot);
			return false;
		}
	}
	return true;
}

/*
 * Remember the TID of the version an UPDATE just wrote.  An update a
 * BEFORE ROW trigger (one enabled ALWAYS or REPLICA) skipped wrote nothing
 * and left no valid TID: the key is forgotten instead.
 */
static void
remember_row(ApplyState *as, const CsRestoreTable *t,
			 const LogicalRepTupleData *tup, ItemPointer tid)
{
	uint64		key;
	RowCacheEntry *e;

	if (as->rows == NULL || !row_key(as, t, tup, &key))
		return;
	if (!ItemPointerIsValid(tid))
	{
		hash_search(as->rows, &key, HASH_REMOVE, NULL);
		return;
	}
	if (hash_get_num_entries(as->rows) >= ROW_CACHE_ENTRIES)
	{
		hash_destroy(as->rows);
		create_row_cache(as);
	}
	e = hash_search(as->rows, &key, HASH_ENTER, NULL);
	e->tid = *tid;
}

/*
 * Does localslot's row hold searchslot's values in every target column
 * the archived tuple tup carries (as text or NULL; unchanged TOAST and
 * unmapped columns are not compared)?  by_image compares binary images
 * (datum_image_eq(), detoasting); otherwise a column whose type has an
 * equality operator is compared with it, as the apply worker's
 * tuples_equal() does (executor/execReplication.c), and one without (point,
 * box, polygon, json, xml) by image.
 */
static bool
full_row_matches(const CsRestoreTable *t, const LogicalRepTupleData *tup,
				 TupleTableSlot *searchslot, TupleTableSlot *localslot,
				 bool by_image)
{
	TupleDesc	desc = localslot->tts_tupleDescriptor;

	slot_getallattrs(localslot);
	for (int i = 0; i < tup->ncols; i++)
	{
		int			a = t->attmap[i] - 1;
		Form_pg_attribute att;
		TypeCacheEntry *tc = NULL;
		Datum		v1;
		Datum		v2;

		if (a < 0 || tup->colstatus[i] == LOGICALREP_COLUMN_UNCHANGED)
			continue;
		if (localslot->tts_isnull[a] != searchslot->tts_isnull[a])
			return false;
		if (localslot->tts_isnull[a])
			continue;
		att = TupleDescAttr(desc, a);
		v1 = localslot->tts_values[a];
		v2 = searchslot->tts_values[a];
		if (!by_image)
			tc = lookup_type_cache(att->atttypid, TYPECACHE_EQ_OPR_FINFO);
		if (tc != NULL && OidIsValid(tc->eq_opr_finfo.fn_oid))
		{
			if (!DatumGetBool(FunctionCall2Coll(&tc->eq_opr_finfo,
												att->attcollation, v1, v2)))
				return false;
		}
		else if (!datum_image_eq(v1, v2, att->attbyval, att->attlen))
			return false;
	}
	return true;
}

/*
 * Scan the target for the first visible row full_row_matches() accepts,
 * into localslot, and lock it as RelationFindReplTupleSeq() does.
 */
static bool
scan_full_row(ApplyState *as, const CsRestoreTable *t,
			  const LogicalRepTupleData *tup, TupleTableSlot *searchslot,
			  TupleTableSlot *localslot, bool by_image)
{
	Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
	TableScanDesc scan = cs_table_beginscan(as->rel, snap);
	TupleTableSlot *scanslot = table_slot_create(as->rel, NULL);
	bool		found = false;

	while (table_scan_getnextslot(scan, ForwardScanDirection, scanslot))
	{
		if (full_row_matches(t, tup, searchslot, scanslot, by_image))
		{
			ExecCopySlot(localslot, scanslot);
			found = true;
			break;
		}
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(scanslot);
	UnregisterSnapshot(snap);
	if (found)
	{
		TM_FailureData tmfd;
		TM_Result	res;

		res = table_tuple_lock(as->rel, &localslot->tts_tid,
							   GetLatestSnapshot(), localslot,
							   GetCurrentCommandId(false), LockTupleExclusive,
							   LockWaitBlock, 0, &tmfd);
		if (res != TM_Ok)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("a row of \"%s.%s\" was changed by another session during restore()",
							t->target_schema, t->name)));
	}
	return found;
}

/*
 * The row a change to a table without a key (REPLICA IDENTITY FULL)
 * refers to.  Every value in the target and in the search came through the
 * column's input function from the archive's text form (written under the
 * pinned settings), so the row the change was made to has the same binary
 * image: that is looked for first.  It is exact where an equality operator
 * is not (1.0 = 1.00, -0 = 0, a case-insensitive type), and works for
 * types that have none.  Only when no row matches by image are equality
 * operators used, as the apply worker does.
 */
static bool
find_full_row(ApplyState *as, const CsRestoreTable *t,
			  const LogicalRepTupleData *tup, TupleTableSlot *searchslot,
			  TupleTableSlot *localslot)
{
	slot_getallattrs(searchslot);
	return scan_full_row(as, t, tup, searchslot, localslot, true) ||
		scan_full_row(as, t, tup, searchslot, localslot, false);
}

/*
 * Find the target row an UPDATE or DELETE refers to, into localslot.
 * Under a row filter a missing row is no damage: false.
 */
static bool
find_row(ApplyState *as, const CsRestoreTable *t, const CsChange *c,
		 TupleTableSlot *localslot)
{
	TupleTableSlot *searchslot = as->searchslot;
	const LogicalRepTupleData *tup = c->old_kind ? &c->oldtup : &c->newtup;
	Oid			idx = as->idxoid;
	bool		found;

	fill_slot(searchslot, NULL, t, tup);
	if (find_cached_row(as, t, tup, searchslot, localslot))
		found = true;
	else if (OidIsValid(idx))
		found = cs_find_repl_tuple_by_index(as->rel, idx, LockTupleExclusive,
											 searchslot, localslot);
	else
		found = find_full_row(as, t, tup, searchslot, localslot);
	if (!found && as->filter != NULL)
		return false;
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("the row to %s in \"%s.%s\" is not in the restored table",
						c->kind == CS_CHANGE_UPDATE ? "update" : "delete",
						t->target_schema, t->name),
				 errdetail("The change is in transaction %u (commit LSN " CS_LSN_FMT "), in \"%s\" at offset %lld.",
						   c->xid, LSN_FORMAT_ARGS(c->commit_lsn), c->path,
						   (long long) c->frame_offset)));
	return true;
}

/*
 * An UPDATE under a row filter of a row the target does not hold: its new
 * row goes in when it satisfies the filter (see the file header).
 */
static void
update_missing_row(ApplyState *as, const CsRestoreTable *t, const CsChange *c)
{
	bool		unchanged = false;
	bool		filter_reads_unchanged = false;

	fill_slot(as->remoteslot, NULL, t, &c->newtup);
	for (int i = 0; i < c->newtup.ncols; i++)
		if (t->attmap[i] > 0 &&
			c->newtup.colstatus[i] == LOGICALREP_COLUMN_UNCHANGED)
		{
			unchanged = true;
			filter_reads_unchanged = filter_reads_unchanged ||
				bms_is_member(t->attmap[i] - FirstLowInvalidHeapAttributeNumber,
							  as->filter_cols);
		}
	if (!filter_reads_unchanged && !row_passes(as, as->remoteslot))
		return;
	if (unchanged)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("row_filter cannot be applied to an update of \"%s.%s\": the row may enter the filter, and the archive does not hold its unchanged TOASTed values",
						t->target_schema, t->name),
				 errdetail("The change is in transaction %u (commit LSN " CS_LSN_FMT "), in \"%s\" at offset %lld.",
						   c->xid, LSN_FORMAT_ARGS(c->commit_lsn), c->path,
						   (long long) c->frame_offset),
				 errhint("Restore without row_filter into another target_schema and select the rows from there.")));
	ExecSimpleRelationInsert(as->rri, as->estate, as->remoteslot);
}

/*
 * cs_apply_change
 *	  Applies an INSERT, UPDATE or DELETE decoded from the archive to the
 *	  target table t, whose attmap the caller has matched to the change's
 *	  Relation (cs_restore_sync_table()).  Ends with
 *	  CommandCounterIncrement(), so the next change sees this one.
 *	  With t->row_filter, keeps the target to the rows that satisfy it
 *	  (see the file header).
 *	  Errors: XX001 when the row to update or delete is not there (and no
 *	  row filter is given); 0A000 for an update the row filter cannot
 *	  follow; the filter's own errors; input
 *	  function errors (22xxx) for a value the target column rejects;
 *	  unique violations (23505) as the executor raises them.
 */
void
cs_apply_change(CsRestoreTable *t, const CsChange *c)
{
	ApplyState *as;
	MemoryContext old;
	EPQState	epq;

	if (t->apply == NULL)
	{
		t->apply = palloc0(sizeof(ApplyState));
		begin_apply(t->apply, t);
	}
	as = t->apply;
	old = MemoryContextSwitchTo(as->change_cxt);
	as->estate->es_output_cid = GetCurrentCommandId(true);
	switch (c->kind)
	{
		case CS_CHANGE_INSERT:
			fill_slot(as->remoteslot, NULL, t, &c->newtup);
			if (as->filter == NULL || row_passes(as, as->remoteslot))
				ExecSimpleRelationInsert(as->rri, as->estate, as->remoteslot);
			break;
		case CS_CHANGE_UPDATE:
			if (!find_row(as, t, c, as->localslot))
			{
				update_missing_row(as, t, c);
				break;
			}
			fill_slot(as->remoteslot, as->localslot, t, &c->newtup);
			cs_epq_init(&epq, as->estate);
			if (as->filter != NULL && !row_passes(as, as->remoteslot))
				ExecSimpleRelationDelete(as->rri, as->estate, &epq, as->localslot);
			else
			{
				ExecSimpleRelationUpdate(as->rri, as->estate, &epq, as->localslot,
										 as->remoteslot);
				remember_row(as, t, &c->newtup, &as->remoteslot->tts_tid);
			}
			EvalPlanQualEnd(&epq);
			break;
		case CS_CHANGE_DELETE:
			if (!find_row(as, t, c, as->localslot))
				break;
			cs_epq_init(&epq, as->estate);
			ExecSimpleRelationDelete(as->rri, as->estate, &epq, as->localslot);
			EvalPlanQualEnd(&epq);
			break;
		default:
			elog(ERROR, "unexpected change kind %d", (int) c->kind);
	}
	ExecClearTuple(as->remoteslot);
	ExecClearTuple(as->searchslot);
	ExecClearTuple(as->localslot);
	ResetPerTupleExprContext(as->estate);
	MemoryContextSwitchTo(old);
	MemoryContextReset(as->change_cxt);
	CommandCounterIncrement();
}
