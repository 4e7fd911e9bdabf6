/*-------------------------------------------------------------------------
 *
 * restore_row_filter.c
 *	  restore()'s row_filter: the caller's SQL text, accepted only as one
 *	  expression (parsed as the target list of "SELECT <text>", which must
 *	  then hold that one expression and nothing else: no FROM, WHERE,
 *	  second statement or other clause), and transformed against the
 *	  restored table alone, as COPY FROM ... WHERE transforms its
 *	  condition (DoCopy() in commands/copy.c): only that table's columns,
 *	  no subquery, aggregate, window or set-returning function (the
 *	  parser's rules for EXPR_KIND_COPY_WHERE), and here no volatile
 *	  function, so that the filter gives the same answer for a row each
 *	  time it is asked (restore.c asks it of the snapshot's rows in COPY
 *	  and of each archived change's new row, restore_apply.c).  It runs
 *	  with the caller's privileges, as any query of theirs.  The dry run
 *	  transforms it against the archived columns alone (no table exists),
 *	  as an ephemeral named relation of their types.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "nodes/makefuncs.h"
#include "nodes/parsenodes.h"
#include "optimizer/optimizer.h"
#include "parser/parse_coerce.h"
#include "parser/parse_collate.h"
#include "parser/parse_expr.h"
#include "parser/parse_node.h"
#include "parser/parse_relation.h"
#include "parser/parser.h"
#include "storage/lockdefs.h"
#include "utils/queryenvironment.h"
#include "utils/rel.h"

#include "read/restore_row_filter.h"

static Node *transform_in(ParseState *pstate, Node *raw, const char *table);

static void
not_one_expression(const char *text)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("row_filter must be one SQL expression over the restored table's columns"),
			 errdetail("row_filter was: %s", text),
			 errhint("Write a condition as in WHERE, for example row_filter => 'aid < 1000'.")));
}

/*
 * A parse error's position is in "SELECT <text>", not in the caller's
 * query: it is reported as an internal query's, with that text.
 */
static void
parse_error_context(void *arg)
{
	int			pos = geterrposition();

	if (pos > 0)
	{
		errposition(0);
		internalerrposition(pos);
		internalerrquery((const char *) arg);
	}
	errcontext("row_filter");
}

/*
 * cs_row_filter_parse
 *	  The raw parse tree of row_filter text: one expression, nothing else.
 *	  Errors: 42601 syntax errors as the parser raises them; 22023 when the
 *	  text is more than one expression (a clause, a second statement).
 */
Node *
cs_row_filter_parse(const char *text)
{
	char	   *sql = psprintf("SELECT %s", text);
	ErrorContextCallback callback;
	List	   *stmts;
	SelectStmt *s;
	ResTarget  *rt;

	callback.callback = parse_error_context;
	callback.arg = sql;
	callback.previous = error_context_stack;
	error_context_stack = &callback;
	stmts = raw_parser(sql, RAW_PARSE_DEFAULT);
	error_context_stack = callback.previous;

	if (list_length(stmts) != 1 ||
		!IsA(((RawStmt *) linitial(stmts))->stmt, SelectStmt))
		not_one_expression(text);
	s = (SelectStmt *) ((RawStmt *) linitial(stmts))->stmt;
	if (s->op != SETOP_NONE || s->distinctClause != NIL ||
		s->intoClause != NULL || list_length(s->targetList) != 1 ||
		s->fromClause != NIL || s->whereClause != NULL ||
		s->groupClause != NIL || s->havingClause != NULL ||
		s->windowClause != NIL || s->valuesLists != NIL ||
		s->sortClause != NIL || s->limitOffset != NULL ||
		s->limitCount != NULL || s->lockingClause != NIL ||
		s->withClause != NULL)
		not_one_expression(text);
	rt = linitial_node(ResTarget, s->targetList);
	if (rt->name != NULL || rt->indirection != NIL || rt->val == NULL)
		not_one_expression(text);
	return rt->val;
}

/*
 * cs_row_filter_transform
 *	  The boolean expression raw (cs_row_filter_parse()) over table rel,
 *	  whose Vars are of range table index 1 (evaluated with the row in
 *	  ecxt_scantuple).  raw is not changed.
 *	  Errors: 42703 for a column rel lacks; 42804 when the expression is
 *	  not boolean; 0A000 for a subquery, an aggregate, a window or
 *	  set-returning function (the parser's COPY FROM WHERE messages) or a
 *	  volatile function.
 */
Node *
cs_row_filter_transform(Node *raw, Relation rel)
{
	ParseState *pstate = make_parsestate(NULL);
	ParseNamespaceItem *nsitem;

	nsitem = addRangeTableEntryForRelation(pstate, rel, AccessShareLock, NULL,
										   false, true);
	addNSItemToQuery(pstate, nsitem, false, true, true);
	return transform_in(pstate, raw, RelationGetRelationName(rel));
}

/*
 * cs_row_filter_transform_desc
 *	  As cs_row_filter_transform(), over a table that does not exist here:
 *	  rows of descriptor desc under the name name (an ephemeral named
 *	  relation, as a trigger's transition table is), for restore()'s dry
 *	  run, which creates nothing.  The same errors.
 */
Node *
cs_row_filter_transform_desc(Node *raw, const char *name, TupleDesc desc)
{
	ParseState *pstate = make_parsestate(NULL);
	EphemeralNamedRelation enr = palloc0(sizeof(EphemeralNamedRelationData));
	ParseNamespaceItem *nsitem;

	enr->md.name = pstrdup(name);
	enr->md.reliddesc = InvalidOid;
	enr->md.tupdesc = desc;
	enr->md.enrtype = ENR_NAMED_TUPLESTORE;
	enr->md.enrtuples = -1;
	pstate->p_queryEnv = create_queryEnv();
	register_ENR(pstate->p_queryEnv, enr);
	nsitem = addRangeTableEntryForENR(pstate, makeRangeVar(NULL, enr->md.name, -1),
									  true);
	addNSItemToQuery(pstate, nsitem, false, true, true);
	return transform_in(pstate, raw, name);
}

/* An error in the filter names the table it was applied to. */
static void
transform_error_context(void *arg)
{
	errcontext("row_filter on table %s", (const char *) arg);
}

/*
 * The boolean expression raw in pstate, whose namespace holds the one
 * table (range table index 1), named table in errors; pstate is freed.
 */
static Node *
transform_in(ParseState *pstate, Node *raw, const char *table)
{
	ErrorContextCallback callback;
	Node	   *expr;

	callback.callback = transform_error_context;
	callback.arg = (void *) table;
	callback.previous = error_context_stack;
	error_context_stack = &callback;
	expr = transformExpr(pstate, copyObject(raw), EXPR_KIND_COPY_WHERE);
	expr = coerce_to_boolean(pstate, expr, "row_filter");
	assign_expr_collations(pstate, expr);
	if (contain_volatile_functions(expr))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("row_filter must not call a volatile function"),
				 errhint("The filter is asked of each row more than once (snapshot and changes); it must give the same answer each time.")));
	expr = eval_const_expressions(NULL, expr);
	error_context_stack = callback.previous;
	free_parsestate(pstate);
	return expr;
}

/*
 * cs_row_filter_columns
 *	  The columns a transformed filter reads, as attnos offset by
 *	  FirstLowInvalidHeapAttributeNumber (pull_varattnos()).
 */
Bitmapset *
cs_row_filter_columns(Node *expr)
{
	Bitmapset  *cols = NULL;

	pull_varattnos(expr, 1, &cols);
	return cols;
}
