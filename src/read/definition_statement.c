/*-------------------------------------------------------------------------
 *
 * definition_statement.c
 *	  The statements restore_definition.c runs with text from the archive
 *	  in them (a default or generated expression, a constraint or index
 *	  definition), checked before they run: restore() never runs archive
 *	  text as it stands.  Each statement is parsed (raw_parser(), in a
 *	  subtransaction, so a syntax error is caught) and must be one ALTER
 *	  TABLE of the target with the one subcommand expected, or one CREATE
 *	  INDEX on the target; anything else is damage, XX001 naming the file
 *	  and offset the definition was read from.  The parse trees also tell
 *	  whether a constraint or an index names a column the target lacks (a
 *	  column a publication's column list leaves out).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "executor/spi.h"
#include "nodes/nodeFuncs.h"
#include "parser/parser.h"
#include "utils/lsyscache.h"

#include "archive/archive_layout.h"
#include "read/definition_statement.h"

/*
 * cs_def_run
 *	  Runs sql (composed by restore_definition.c, or checked here) through
 *	  SPI, which the caller has connected.
 */
void
cs_def_run(const char *sql)
{
	int			rc = SPI_execute(sql, false, 0);

	if (rc < 0)
		elog(ERROR, "SPI_execute failed (%d): %s", rc, sql);
}

/*
 * cs_def_damage
 *	  The definition of t cannot be applied as recorded: raises XX001
 *	  naming the file and offset it was read from, what part (what) and
 *	  why.  Does not return.
 */
void
cs_def_damage(const CsDefTarget *t, const char *what, const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("the archived definition of table %s is damaged",
					t->qualified),
			 errdetail("Read from %s: %s %s.",
					   t->def->origin ? t->def->origin : "the archive", what, why),
			 errhint("Call changestream.verify() on the generation; a restore to a target after the next snapshot may not need this definition.")));
}

/* raw_parser() step run under cs_catch_error(). */
typedef struct ParseStep
{
	const char *sql;
	List	   *raw;
} ParseStep;

static void
parse_step(void *arg)
{
	ParseStep  *p = arg;

	p->raw = raw_parser(p->sql, RAW_PARSE_DEFAULT);
}

/*
 * cs_def_parse_one
 *	  The one raw statement sql parses to, which must be of node type tag;
 *	  damage (cs_def_damage(), naming what) otherwise, a syntax error
 *	  included: it is the archive's text.  A cancel is raised as it is.
 */
Node *
cs_def_parse_one(const CsDefTarget *t, const char *sql, NodeTag tag, const char *what)
{
	ParseStep	p = {sql, NIL};
	ErrorData  *error = cs_catch_error(parse_step, &p, CurrentMemoryContext);
	Node	   *stmt;

	if (error != NULL)
	{
		if (error->sqlerrcode == ERRCODE_QUERY_CANCELED)
			ReThrowError(error);
		cs_def_damage(t, what, psprintf("does not parse: %s", error->message));
	}
	if (list_length(p.raw) != 1)
		cs_def_damage(t, what, "is not one statement");
	stmt = linitial_node(RawStmt, p.raw)->stmt;
	if (nodeTag(stmt) != tag)
		cs_def_damage(t, what, "makes another kind of statement");
	return stmt;
}

/*
 * cs_def_names_target
 *	  Does rv (a parsed, schema-qualified relation) name t's table?
 */
bool
cs_def_names_target(const CsDefTarget *t, RangeVar *rv)
{
	return rv != NULL && rv->schemaname != NULL &&
		strcmp(rv->relname, t->relname) == 0 &&
		get_namespace_oid(rv->schemaname, true) == t->nsp;
}

/*
 * cs_def_check_alter
 *	  Checks sql, an ALTER TABLE of t's table with text from the archive in
 *	  it, to be one subcommand of type subtype (of column, if given) whose
 *	  definition node passes check (if given, called with arg); returns
 *	  that subcommand (parsed, not run).  Damage otherwise.
 */
AlterTableCmd *
cs_def_check_alter(const CsDefTarget *t, const char *sql, AlterTableType subtype,
				   const char *column, const char *what,
				   bool (*check) (Node *def, const void *arg), const void *arg)
{
	AlterTableStmt *stmt = (AlterTableStmt *) cs_def_parse_one(t, sql, T_AlterTableStmt, what);
	AlterTableCmd *cmd;

	if (!cs_def_names_target(t, stmt->relation) || list_length(stmt->cmds) != 1)
		cs_def_damage(t, what, "makes a statement of more than one command");
	cmd = linitial_node(AlterTableCmd, stmt->cmds);
	if (cmd->subtype != subtype ||
		(column != NULL && (cmd->name == NULL || strcmp(cmd->name, column) != 0)) ||
		(check != NULL && !check(cmd->def, arg)))
		cs_def_damage(t, what, "makes another command than the one recorded");
	return cmd;
}

/*
 * cs_def_run_alter
 *	  Runs sql once cs_def_check_alter() (same arguments) has checked it.
 */
void
cs_def_run_alter(const CsDefTarget *t, const char *sql, AlterTableType subtype,
				 const char *column, const char *what,
				 bool (*check) (Node *def, const void *arg), const void *arg)
{
	(void) cs_def_check_alter(t, sql, subtype, column, what, check, arg);
	cs_def_run(sql);
}

/* ---------- columns the target lacks ---------- */

static bool
is_missing(const CsDefTarget *t, const char *name)
{
	ListCell   *lc;

	foreach(lc, t->missing)
		if (strcmp((char *) lfirst(lc), name) == 0)
			return true;
	return false;
}

/* raw_expression_tree_walker() step: a column reference to a missing one? */
static bool
refers_walker(Node *node, void *arg)
{
	const CsDefTarget *t = arg;

	if (node == NULL)
		return false;
	if (IsA(node, ColumnRef) &&
		IsA(llast(((ColumnRef *) node)->fields), String) &&
		is_missing(t, strVal(llast(((ColumnRef *) node)->fields))))
		return true;
	if (IsA(node, IndexElem) && ((IndexElem *) node)->name != NULL &&
		is_missing(t, ((IndexElem *) node)->name))
		return true;
	return raw_expression_tree_walker(node, refers_walker, arg);
}

/* Does a list of column names (String) or index elements name a missing one? */
static bool
refers_list(const CsDefTarget *t, List *list)
{
	ListCell   *lc;

	foreach(lc, list)
		if (IsA(lfirst(lc), String) ? is_missing(t, strVal(lfirst(lc))) :
			refers_walker(lfirst(lc), unconstify(CsDefTarget *, t)))
			return true;
	return false;
}

/*
 * cs_def_constraint_refers
 *	  Does raw constraint c (of an ALTER TABLE ... ADD) name a column of
 *	  t->missing, the definition's columns the target lacks?
 */
bool
cs_def_constraint_refers(const CsDefTarget *t, Constraint *c)
{
	ListCell   *lc;

	if (t->missing == NIL)
		return false;
	foreach(lc, c->exclusions)
		if (refers_walker(linitial((List *) lfirst(lc)), unconstify(CsDefTarget *, t)))
			return true;
	return refers_walker(c->raw_expr, unconstify(CsDefTarget *, t)) ||
		refers_walker(c->where_clause, unconstify(CsDefTarget *, t)) ||
		refers_list(t, c->keys) || refers_list(t, c->including);
}

/*
 * cs_def_index_refers
 *	  Does raw index statement x name a column of t->missing (its keys,
 *	  expressions, INCLUDE columns or predicate)?
 */
bool
cs_def_index_refers(const CsDefTarget *t, IndexStmt *x)
{
	return t->missing != NIL &&
		(refers_list(t, x->indexParams) || refers_list(t, x->indexIncludingParams) ||
		 refers_walker(x->whereClause, unconstify(CsDefTarget *, t)));
}
