/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every difference between the PostgreSQL major versions changestream
 *	  supports (15 through 19) is absorbed here, and only here.
 *
 * Sources: src/include/replication/walreceiver.h of each branch (the
 * walrcv_connect and walrcv_create_slot signatures changed in 16 and 17,
 * walrcv_identify_system's in 19), executor/executor.h and
 * utils/jsonb.h (pushJsonbValue's state became a JsonbInState in 19).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CHANGESTREAM_COMPAT_H
#define CHANGESTREAM_COMPAT_H

#include "replication/walreceiver.h"
#include "storage/latch.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

/* PG_TEMP_FILES_DIR moved from storage/fd.h to common/file_utils.h in 17 */
#if PG_VERSION_NUM >= 170000
#include "common/file_utils.h"
#else
#include "storage/fd.h"
#endif

#if PG_VERSION_NUM < 150000
#error "changestream requires PostgreSQL 15 or later"
#endif

/*
 * CS_LSN_FMT: the text form of an LSN in messages, the server's own on each
 * version (used with LSN_FORMAT_ARGS()): 19 pads the low half to 8 hex
 * digits, as pg_lsn's output does there.  The archive's files always use
 * "%X/%X" (docs/FORMAT.md), whichever server wrote them, and every reader
 * accepts both.
 */
#if PG_VERSION_NUM >= 190000
#define CS_LSN_FMT "%X/%08X"
#else
#define CS_LSN_FMT "%X/%X"
#endif

/*
 * cs_walrcv_connect(conninfo, appname, err) -> WalReceiverConn *
 *	  Open a logical replication (walsender) connection.  NULL and *err set
 *	  on failure.  16 added must_use_password; 17 added "replication".
 */
#if PG_VERSION_NUM >= 170000
#define cs_walrcv_connect(conninfo, appname, err) \
	walrcv_connect((conninfo), true, true, false, (appname), (err))
#elif PG_VERSION_NUM >= 160000
#define cs_walrcv_connect(conninfo, appname, err) \
	walrcv_connect((conninfo), true, false, (appname), (err))
#else
#define cs_walrcv_connect(conninfo, appname, err) \
	walrcv_connect((conninfo), true, (appname), (err))
#endif

/*
 * cs_walrcv_create_slot(conn, name, temporary, snapshot_action, lsn)
 *	  CREATE_REPLICATION_SLOT ... LOGICAL pgoutput, no two-phase.  17 added
 *	  "failover": a permanent slot (the archiver's) is a failover slot
 *	  there, which standbys with sync_replication_slots keep in step, so
 *	  that a promoted standby continues the generation (docs/DESIGN.md
 *	  section 6); a temporary slot cannot be one.
 */
#if PG_VERSION_NUM >= 170000
#define CS_FAILOVER_SLOTS true
#define cs_walrcv_create_slot(conn, name, temporary, action, lsn) \
	walrcv_create_slot((conn), (name), (temporary), false, !(temporary), (action), (lsn))
#else
#define CS_FAILOVER_SLOTS false
#define cs_walrcv_create_slot(conn, name, temporary, action, lsn) \
	walrcv_create_slot((conn), (name), (temporary), false, (action), (lsn))
#endif

/*
 * cs_walrcv_identify_system(conn, primary_tli)
 *	  IDENTIFY_SYSTEM: returns the system identifier (text, palloc'd) and
 *	  sets *primary_tli.  19 added a server_lsn output (the sender's current
 *	  WAL position), which changestream does not use.
 */
static inline char *
cs_walrcv_identify_system(WalReceiverConn *conn, TimeLineID *primary_tli)
{
#if PG_VERSION_NUM >= 190000
	XLogRecPtr	server_lsn;

	return walrcv_identify_system(conn, primary_tli, &server_lsn);
#else
	return walrcv_identify_system(conn, primary_tli);
#endif
}

/*
 * cs_create_wait_event_set(nevents) -> WaitEventSet *
 *	  A wait event set that lives until FreeWaitEventSet(); 17 replaced the
 *	  memory context argument by a resource owner (NULL: not tracked).
 */
#if PG_VERSION_NUM >= 170000
#define cs_create_wait_event_set(nevents) CreateWaitEventSet(NULL, (nevents))
#else
#define cs_create_wait_event_set(nevents) \
	CreateWaitEventSet(TopMemoryContext, (nevents))
#endif


/*
 * Executor set-up for restore's apply (restore_apply.c) over one relation,
 * as the apply worker's create_estate_for_relation() does it: PostgreSQL 16
 * added RTEPermissionInfo lists (addRTEPermissionInfo(), from
 * parser/parse_relation.h), 18 the set of unpruned range table indexes
 * (the one relation, index 1).
 */
#if PG_VERSION_NUM >= 180000
#define cs_exec_init_range_table(estate, rte) \
	do { \
		List	   *perminfos_ = NIL; \
		addRTEPermissionInfo(&perminfos_, (rte)); \
		ExecInitRangeTable((estate), list_make1(rte), perminfos_, \
						   bms_make_singleton(1)); \
	} while (0)
#elif PG_VERSION_NUM >= 160000
#define cs_exec_init_range_table(estate, rte) \
	do { \
		List	   *perminfos_ = NIL; \
		addRTEPermissionInfo(&perminfos_, (rte)); \
		ExecInitRangeTable((estate), list_make1(rte), perminfos_); \
	} while (0)
#else
#define cs_exec_init_range_table(estate, rte) \
	ExecInitRangeTable((estate), list_make1(rte))
#endif

#if PG_VERSION_NUM >= 160000
#define cs_epq_init(epq, estate) \
	EvalPlanQualInit((epq), (estate), NULL, NIL, -1, NIL)
#else
#define cs_epq_init(epq, estate) \
	EvalPlanQualInit((epq), (estate), NULL, NIL, -1)
#endif

/*
 * cs_relation_primary_key(rel) -> Oid of the primary key index, or
 * InvalidOid; 18 added deferrable_ok (false: what earlier versions did).
 */
#if PG_VERSION_NUM >= 180000
#define cs_relation_primary_key(rel) RelationGetPrimaryKeyIndex((rel), false)
#else
#define cs_relation_primary_key(rel) RelationGetPrimaryKeyIndex(rel)
#endif

/*
 * cs_find_repl_tuple_by_index(rel, idxoid, lockmode, searchslot, outslot)
 *	  RelationFindReplTupleByIndex() on the table's replica identity index or
 *	  primary key (restore_apply.c's lookup_index() never passes another).
 *	  Up to 18 the function itself skipped the whole-row comparison of each
 *	  match for such an index (a unique key identifies the row; the search
 *	  slot of a key-only old tuple holds NULLs in the other columns); 19
 *	  made the caller say so with skipduplicates.  false there would compare
 *	  the key-only search slot with the whole stored row and find nothing.
 */
#if PG_VERSION_NUM >= 190000
#define cs_find_repl_tuple_by_index(rel, idx, mode, search, out) \
	RelationFindReplTupleByIndex((rel), (idx), true, (mode), (search), (out))
#else
#define cs_find_repl_tuple_by_index(rel, idx, mode, search, out) \
	RelationFindReplTupleByIndex((rel), (idx), (mode), (search), (out))
#endif

/*
 * cs_table_beginscan(rel, snapshot): a sequential scan of rel without scan
 * keys; 19 added table_beginscan()'s flags argument (ScanOptions).
 */
#if PG_VERSION_NUM >= 190000
#define cs_table_beginscan(rel, snapshot) \
	table_beginscan((rel), (snapshot), 0, NULL, 0)
#else
#define cs_table_beginscan(rel, snapshot) \
	table_beginscan((rel), (snapshot), 0, NULL)
#endif

/*
 * CsJsonbBuild: the state of a jsonb value built with pushJsonbValue(), to
 * be zeroed before the first push.
 * cs_jsonb_push(state, seq, value) -> the completed value after the token
 *	  that closes the outermost object or array, else not meaningful.
 * 19 made the state a JsonbInState that holds the result (pushJsonbValue
 * returns void); before, it is a JsonbParseState stack and the result is
 * pushJsonbValue's return value.
 */
#if PG_VERSION_NUM >= 190000
typedef JsonbInState CsJsonbBuild;

static inline JsonbValue *
cs_jsonb_push(CsJsonbBuild *state, JsonbIteratorToken seq, JsonbValue *value)
{
	pushJsonbValue(state, seq, value);
	return state->result;
}
#else
typedef JsonbParseState *CsJsonbBuild;

#define cs_jsonb_push(state, seq, value) pushJsonbValue((state), (seq), (value))
#endif

/*
 * cs_is_add_column(subtype): an ALTER TABLE subcommand that adds a column;
 * 15 marks the recursing form AT_AddColumnRecurse, which 16 removed.
 */
#if PG_VERSION_NUM >= 160000
#define cs_is_add_column(subtype) ((subtype) == AT_AddColumn)
#else
#define cs_is_add_column(subtype) \
	((subtype) == AT_AddColumn || (subtype) == AT_AddColumnRecurse)
#endif

/*
 * cs_jsonb_in_soft(text, &result) -> true with the jsonb value of text in
 *	  *result, or false when jsonb_in rejects text with a data exception
 *	  (class 22: a \u0000 escape, a number outside numeric's range, an
 *	  escape the database encoding cannot hold), without raising it.
 * 16 has soft errors (DirectInputFunctionCallSafe with an
 * ErrorSaveContext, utils/fmgr.h), which also turn a string over jsonb's
 * length limit (54000) into false; 15 has not, so the call runs in an
 * internal subtransaction, as PL/pgSQL's exception blocks do, and only a
 * class 22 error is caught: any other (54000 included) is raised.
 */
#if PG_VERSION_NUM >= 160000
#include "nodes/miscnodes.h"

static inline bool
cs_jsonb_in_soft(char *text, Datum *result)
{
	ErrorSaveContext escontext = {T_ErrorSaveContext};

	return DirectInputFunctionCallSafe(jsonb_in, text, JSONBOID, -1,
									   (Node *) &escontext, result);
}
#else
static inline bool
cs_jsonb_in_soft(char *text, Datum *result)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool ok = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		*result = DirectFunctionCall1(jsonb_in, CStringGetDatum(text));
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_DATA_EXCEPTION)
			ReThrowError(edata);
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return ok;
}
#endif

/*
 * cs_parse_type_string(str, &typid, &typmod) -> true with the type str
 *	  names (parser/parse_type.h's parseTypeString(): one type name, with
 *	  its modifiers, as a cast would read it) in *typid and *typmod; false
 *	  when no such type exists.  A string that is not a type name, or whose
 *	  modifiers the type rejects, still raises its error (class 42 or 22),
 *	  which the caller catches.  15 takes missing_ok; 16 on take a soft
 *	  error context, in which a syntax error is also soft (false).
 */
#include "parser/parse_type.h"

#if PG_VERSION_NUM >= 160000
static inline bool
cs_parse_type_string(const char *str, Oid *typid, int32 *typmod)
{
	ErrorSaveContext escontext = {T_ErrorSaveContext};

	*typid = InvalidOid;
	return parseTypeString(str, typid, typmod, (Node *) &escontext) &&
		OidIsValid(*typid);
}
#else
static inline bool
cs_parse_type_string(const char *str, Oid *typid, int32 *typmod)
{
	*typid = InvalidOid;
	parseTypeString(str, typid, typmod, true);
	return OidIsValid(*typid);
}
#endif

/*
 * cs_database_ownercheck(dboid) -> does the current user own the database
 * (or is a superuser)?  16 replaced pg_database_ownercheck() by
 * object_ownercheck() (utils/acl.h, catalog/pg_database.h).
 */
#if PG_VERSION_NUM >= 160000
#define cs_database_ownercheck(dboid) \
	object_ownercheck(DatabaseRelationId, (dboid), GetUserId())
#else
#define cs_database_ownercheck(dboid) \
	pg_database_ownercheck((dboid), GetUserId())
#endif

/*
 * cs_slot_active_pid(slot) -> the PID of the process using the
 * replication slot (its mutex held), 0 when none.  19 replaced the slot's
 * active_pid by active_proc, a ProcNumber (replication/slot.h,
 * storage/proc.h).
 */
#if PG_VERSION_NUM >= 190000
#define cs_slot_active_pid(slot) \
	((slot)->active_proc == INVALID_PROC_NUMBER ? 0 : \
	 GetPGProcByNumber((slot)->active_proc)->pid)
#else
#define cs_slot_active_pid(slot) ((slot)->active_pid)
#endif

#endif							/* CHANGESTREAM_COMPAT_H */
