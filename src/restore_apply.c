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
 *	  IDENTITY FULL), and ExecSimpleRelationInsert/Update/Delete, which
 *	  maintain indexes.  Unchanged TOASTed columns keep the old row's
 *	  value.  Unlike the apply worker, which builds the EState for each
 *	  change, the state of a table stays open across its changes (until
 *	  cs_apply_close(), which restore.c calls before any DDL or TRUNCATE
 *	  and at the end), with a per-change memory context.  Triggers and foreign keys do not fire because the caller runs
 *	  under session_replication_role = replica.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"

#include "compat.h"
#include "restore.h"

typedef struct CsApplyState
{
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *remoteslot;
	TupleTableSlot *searchslot;
	TupleTableSlot *localslot;
	MemoryContext change_cxt;	/* reset after each change */
} ApplyState;

/* The apply worker's create_edata_for_relation(), for one target table. */
static void
begin_apply(ApplyState *as, Oid relid)
{
	RangeTblEntry *rte;

	as->rel = table_open(relid, RowExclusiveLock);
	as->estate = CreateExecutorState();
	rte = makeNode(RangeTblEntry);
	rte->rtekind = RTE_RELATION;
	rte->relid = relid;
	rte->relkind = as->rel->rd_rel->relkind;
	rte->rellockmode = AccessShareLock;
	cs_exec_init_range_table(as->estate, list_make1(rte));
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

/* The index to find rows by: the replica identity's, else the primary key. */
static Oid
lookup_index(Relation rel)
{
	Oid			idx = RelationGetReplicaIndex(rel);

	return OidIsValid(idx) ? idx : RelationGetPrimaryKeyIndex(rel);
}

/* Find the target row an UPDATE or DELETE refers to, into localslot. */
static void
find_row(ApplyState *as, const CsRestoreTable *t, const CsChange *c,
		 TupleTableSlot *localslot)
{
	TupleTableSlot *searchslot = as->searchslot;
	Oid			idx = lookup_index(as->rel);
	bool		found;

	fill_slot(searchslot, NULL, t, c->old_kind ? &c->oldtup : &c->newtup);
	if (OidIsValid(idx))
		found = RelationFindReplTupleByIndex(as->rel, idx, LockTupleExclusive,
											 searchslot, localslot);
	else
		found = RelationFindReplTupleSeq(as->rel, LockTupleExclusive,
										 searchslot, localslot);
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("the row to %s in \"%s.%s\" is not in the restored table",
						c->kind == CS_CHANGE_UPDATE ? "update" : "delete",
						t->target_schema, t->name),
				 errdetail("The change is in transaction %u (commit LSN %X/%X), in \"%s\" at offset %lld.",
						   c->xid, LSN_FORMAT_ARGS(c->commit_lsn), c->path,
						   (long long) c->frame_offset)));
}

/*
 * cs_apply_change
 *	  Applies an INSERT, UPDATE or DELETE decoded from the archive to the
 *	  target table t, whose attmap the caller has matched to the change's
 *	  Relation (cs_restore_sync_table()).  Ends with
 *	  CommandCounterIncrement(), so the next change sees this one.
 *	  Errors: XX001 when the row to update or delete is not there; input
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
		begin_apply(t->apply, t->relid);
	}
	as = t->apply;
	old = MemoryContextSwitchTo(as->change_cxt);
	as->estate->es_output_cid = GetCurrentCommandId(true);
	switch (c->kind)
	{
		case CS_CHANGE_INSERT:
			fill_slot(as->remoteslot, NULL, t, &c->newtup);
			ExecSimpleRelationInsert(as->rri, as->estate, as->remoteslot);
			break;
		case CS_CHANGE_UPDATE:
			find_row(as, t, c, as->localslot);
			fill_slot(as->remoteslot, as->localslot, t, &c->newtup);
			cs_epq_init(&epq, as->estate);
			ExecSimpleRelationUpdate(as->rri, as->estate, &epq, as->localslot,
									 as->remoteslot);
			EvalPlanQualEnd(&epq);
			break;
		case CS_CHANGE_DELETE:
			find_row(as, t, c, as->localslot);
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
