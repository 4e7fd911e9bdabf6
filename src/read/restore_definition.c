/*-------------------------------------------------------------------------
 *
 * restore_definition.c
 *	  After restore() applied the archive up to its target, a table it
 *	  created is given its source's definition as of the target: the one
 *	  of the newest schema history record of the table up to the target,
 *	  else the snapshot manifest's (definition_read.c).  pgoutput carries
 *	  columns and their types only; this adds what it does not:
 *
 *	  - generated columns the stream leaves out (stored ones before
 *	    PostgreSQL 18, and on 18 unless the publication publishes them;
 *	    virtual ones), added at the end with their expression, so that
 *	    PostgreSQL computes their values from the restored row;
 *	  - column collations other than the type's, NOT NULL, column
 *	    defaults, identity columns (ALWAYS or BY DEFAULT),
 *	    and serial columns, whose sequence is created in the target's
 *	    schema, owned by the column, as serial creates it;
 *	  - PRIMARY KEY, UNIQUE, CHECK and EXCLUDE constraints under their
 *	    source names (a primary key restore() added for applying changes is
 *	    kept when it is the source's, else dropped), and the indexes that
 *	    back no constraint;
 *	  - the replica identity.
 *
 *	  It runs after the changes are applied: a constraint added later on
 *	  the source need not hold for the rows of earlier points, and an index
 *	  is cheaper to build once.  Foreign keys are not restored (the tables
 *	  they reference may not be), nor partitioning, inheritance,
 *	  ownership, privileges, policies or triggers (docs/DESIGN.md section
 *	  12 lists the limits).
 *
 *	  The definition is text from the archive, and restore() never runs
 *	  archive text as it stands.  Every statement is composed here, with
 *	  names quoted by quote_identifier() and types written back from the
 *	  OID (cs_type_sql()); an expression or a constraint or index
 *	  definition is put in its place in the statement, and the statement is
 *	  parsed before it runs: it must be one ALTER TABLE of the target with
 *	  the one subcommand expected (a default of the named column, a
 *	  constraint of the recorded kind and name, a generated column) or one
 *	  CREATE INDEX of the recorded name on the target.  Anything else is
 *	  damage: XX001 naming the file and offset the definition came from.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "executor/spi.h"
#include "nodes/nodeFuncs.h"
#include "nodes/parsenodes.h"
#include "optimizer/optimizer.h"
#include "parser/parser.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "archive/archive_layout.h"
#include "read/definition_statement.h"
#include "read/restore_definition.h"
#include "read/restore_manifest.h"

/* A constraint or index of the target now: name and definition text. */
typedef struct Existing
{
	char	   *name;
	char	   *text;
} Existing;

/* what is left out: it refers to a column the target lacks. */
static void
not_restored(const CsDefTarget *t, const char *what)
{
	ereport(WARNING,
			(errcode(ERRCODE_WARNING),
			 errmsg("%s of %s is not restored", what, t->qualified),
			 errdetail("It refers to a column the target lacks: one the publication's column list leaves out, or a generated column not restored for that reason."),
			 errhint("Add it yourself once the target has the column, or publish the column.")));
}

/*
 * A constraint or index the archive names without its text (the source
 * dropped it while a snapshot read the definitions; its record follows in
 * the stream): left out, with a WARNING.
 */
static void
no_text(const CsDefTarget *t, const char *what)
{
	ereport(WARNING,
			(errcode(ERRCODE_WARNING),
			 errmsg("%s of %s is not restored", what, t->qualified),
			 errdetail("The archive holds no text of it (read from %s): the source dropped it while the snapshot read the table's definition.",
					   t->def->origin ? t->def->origin : "the archive")));
}

/* ---------- the target now ---------- */

/* Rows of query (with the target's OID as $1), each a char *[ncols]. */
static List *
target_rows(const CsDefTarget *t, const char *query, int ncols)
{
	Oid			argtypes[1] = {OIDOID};
	Datum		args[1] = {ObjectIdGetDatum(t->relid)};
	List	   *rows = NIL;

	if (SPI_execute_with_args(query, 1, argtypes, args, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the definition of %s", t->qualified);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	  **row = palloc0(sizeof(char *) * ncols);

		for (int c = 0; c < ncols; c++)
			row[c] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, c + 1);
		rows = lappend(rows, row);
	}
	return rows;
}

static List *
existing_list(const CsDefTarget *t, const char *query)
{
	List	   *rows = target_rows(t, query, 2);
	List	   *list = NIL;
	ListCell   *lc;

	foreach(lc, rows)
	{
		Existing   *e = palloc(sizeof(Existing));

		e->name = ((char **) lfirst(lc))[0];
		e->text = ((char **) lfirst(lc))[1];
		list = lappend(list, e);
	}
	return list;
}

/* The target's PRIMARY KEY, UNIQUE, CHECK and EXCLUDE constraints. */
static List *
target_constraints(const CsDefTarget *t)
{
	return existing_list(t,
						 "SELECT conname::text, contype::text || ':' || "
						 "pg_catalog.pg_get_constraintdef(oid) "
						 "FROM pg_catalog.pg_constraint WHERE conrelid = $1 "
						 "AND contype IN ('p', 'u', 'c', 'x')");
}

/* The target's indexes that back no constraint, with their definitions. */
static List *
target_indexes(const CsDefTarget *t)
{
	return existing_list(t,
						 "SELECT c.relname::text, pg_catalog.pg_get_indexdef(i.indexrelid) "
						 "FROM pg_catalog.pg_index i "
						 "JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid "
						 "WHERE i.indrelid = $1 AND NOT EXISTS (SELECT 1 "
						 "  FROM pg_catalog.pg_constraint k WHERE k.conrelid = $1 "
						 "  AND k.conindid = i.indexrelid AND k.contype IN ('p', 'u', 'x'))");
}

static Existing *
find_existing(List *list, const char *name)
{
	ListCell   *lc;

	foreach(lc, list)
		if (strcmp(((Existing *) lfirst(lc))->name, name) == 0)
			return lfirst(lc);
	return NULL;
}

/* "CREATE [UNIQUE ]INDEX name ON schema.table USING " of the target. */
static char *
index_prefix(const CsDefTarget *t, const char *name, bool unique)
{
	return psprintf("CREATE %sINDEX %s ON %s USING ", unique ? "UNIQUE " : "",
					quote_identifier(name), t->qualified);
}

/* ---------- constraints and indexes ---------- */

static ConstrType
constraint_node_type(char type)
{
	switch (type)
	{
		case 'p':
			return CONSTR_PRIMARY;
		case 'u':
			return CONSTR_UNIQUE;
		case 'x':
			return CONSTR_EXCLUSION;
		default:
			return CONSTR_CHECK;
	}
}

static bool
is_constraint(Node *def, const void *arg)
{
	const CsDefConstraint *k = arg;
	Constraint *c = (Constraint *) def;

	return def != NULL && IsA(def, Constraint) &&
		c->contype == constraint_node_type(k->type) &&
		c->conname != NULL && strcmp(c->conname, k->name) == 0;
}

static CsDefConstraint *
wanted_constraint(const CsTableDefinition *def, const Existing *e)
{
	ListCell   *lc;

	foreach(lc, def->constraints)
	{
		CsDefConstraint *k = lfirst(lc);

		if (strcmp(k->name, e->name) == 0 && e->text[0] == k->type &&
			k->definition != NULL && strcmp(e->text + 2, k->definition) == 0)
			return k;
	}
	return NULL;
}

/* Drop the target's constraints the definition does not hold as they are. */
static void
drop_other_constraints(const CsDefTarget *t)
{
	ListCell   *lc;

	foreach(lc, target_constraints(t))
	{
		Existing   *e = lfirst(lc);

		if (wanted_constraint(t->def, e) == NULL)
			cs_def_run(psprintf("ALTER TABLE %s DROP CONSTRAINT %s", t->qualified,
								quote_identifier(e->name)));
	}
}

static bool
is_unvalidated_check(Node *def, const void *arg)
{
	return is_constraint(def, arg) && ((Constraint *) def)->skip_validation;
}

/* Does the target's CHECK constraint name call a volatile function? */
static bool
check_is_volatile(const CsDefTarget *t, const char *name)
{
	Oid			conoid = get_relation_constraint_oid(t->relid, name, false);
	HeapTuple	tuple = SearchSysCache1(CONSTROID, ObjectIdGetDatum(conoid));
	bool		isnull;
	Datum		bin;
	bool		volatile_expr;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for constraint %u", conoid);
	bin = SysCacheGetAttr(CONSTROID, tuple, Anum_pg_constraint_conbin, &isnull);
	volatile_expr = !isnull &&
		contain_volatile_functions(stringToNode(TextDatumGetCString(bin)));
	ReleaseSysCache(tuple);
	return volatile_expr;
}

/*
 * A CHECK constraint is added NOT VALID, so that adding it evaluates
 * nothing, and then validated unless its expression calls a volatile
 * function (nextval(), lo_import()...): checking the restored rows would
 * run that function, with its effects, once a row, at the archive's word;
 * such a constraint stays NOT VALID, with a WARNING.
 */
static void
add_check(const CsDefTarget *t, const CsDefConstraint *k, const char *sql,
		  const char *what)
{
	AlterTableCmd *cmd = cs_def_check_alter(t, sql, AT_AddConstraint, NULL,
											what, is_constraint, k);
	bool		recorded_valid = !((Constraint *) cmd->def)->skip_validation;

	cs_def_run_alter(t, recorded_valid ? psprintf("%s\nNOT VALID", sql) : sql,
					 AT_AddConstraint, NULL, what, is_unvalidated_check, k);
	if (!recorded_valid)
		return;
	if (check_is_volatile(t, k->name))
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("CHECK constraint %s of %s is restored NOT VALID",
						quote_identifier(k->name), t->qualified),
				 errdetail("Its expression calls a volatile function, which restore() does not run on the restored rows."),
				 errhint("Run ALTER TABLE ... VALIDATE CONSTRAINT once you have read the constraint's definition.")));
	else
		cs_def_run(psprintf("ALTER TABLE %s VALIDATE CONSTRAINT %s", t->qualified,
								   quote_identifier(k->name)));
}

static void
add_constraints(const CsDefTarget *t)
{
	List	   *now = target_constraints(t);
	ListCell   *lc;

	foreach(lc, t->def->constraints)
	{
		CsDefConstraint *k = lfirst(lc);
		char	   *sql;
		char	   *what;
		AlterTableCmd *cmd;

		if (find_existing(now, k->name) != NULL)
			continue;
		what = psprintf("constraint %s", quote_identifier(k->name));
		if (k->definition == NULL)
		{
			no_text(t, what);
			continue;
		}
		sql = psprintf("ALTER TABLE %s ADD CONSTRAINT %s %s", t->qualified,
					   quote_identifier(k->name), k->definition);
		cmd = cs_def_check_alter(t, sql, AT_AddConstraint, NULL, what,
								 is_constraint, k);
		if (cs_def_constraint_refers(t, (Constraint *) cmd->def))
			not_restored(t, what);
		else if (k->type == 'c')
			add_check(t, k, sql, what);
		else
			cs_def_run(sql);
	}
}

/* The definition's index of the target's index e, unchanged, or NULL. */
static CsDefIndex *
wanted_index(const CsDefTarget *t, const Existing *e)
{
	ListCell   *lc;

	foreach(lc, t->def->indexes)
	{
		CsDefIndex *x = lfirst(lc);
		char	   *prefix = index_prefix(t, x->name, x->unique);

		if (strcmp(x->name, e->name) == 0 && x->using_clause != NULL &&
			strncmp(e->text, prefix, strlen(prefix)) == 0 &&
			strcmp(e->text + strlen(prefix), x->using_clause) == 0)
			return x;
	}
	return NULL;
}

static void
drop_other_indexes(const CsDefTarget *t)
{
	ListCell   *lc;

	foreach(lc, target_indexes(t))
	{
		Existing   *e = lfirst(lc);

		if (wanted_index(t, e) == NULL)
			cs_def_run(psprintf("DROP INDEX %s",
								quote_qualified_identifier(get_namespace_name(t->nsp), e->name)));
	}
}

static void
add_indexes(const CsDefTarget *t)
{
	List	   *now = target_indexes(t);
	ListCell   *lc;

	foreach(lc, t->def->indexes)
	{
		CsDefIndex *x = lfirst(lc);
		char	   *what = psprintf("index %s", quote_identifier(x->name));
		char	   *sql;
		IndexStmt  *stmt;

		if (find_existing(now, x->name) != NULL)
			continue;
		if (x->using_clause == NULL)
		{
			no_text(t, what);
			continue;
		}
		sql = psprintf("%s%s", index_prefix(t, x->name, x->unique), x->using_clause);
		stmt = (IndexStmt *) cs_def_parse_one(t, sql, T_IndexStmt, what);
		if (!cs_def_names_target(t, stmt->relation) || stmt->idxname == NULL ||
			strcmp(stmt->idxname, x->name) != 0 || stmt->unique != x->unique ||
			stmt->primary || stmt->isconstraint || stmt->concurrent)
			cs_def_damage(t, what, "makes another command than the one recorded");
		if (cs_def_index_refers(t, stmt))
			not_restored(t, what);
		else
			cs_def_run(sql);
	}
}

/* ---------- columns ---------- */

static bool
is_generated(Node *def, const void *arg)
{
	ColumnDef  *cd = (ColumnDef *) def;
	const CsDefColumn *col = arg;

	return def != NULL && IsA(def, ColumnDef) &&
		strcmp(cd->colname, col->name) == 0 &&
		list_length(cd->constraints) == 1 &&
		((Constraint *) linitial(cd->constraints))->contype == CONSTR_GENERATED;
}

/*
 * A generated column the stream left out, with its expression; one whose
 * expression refers to a column the target lacks is not added, and is
 * missing too.
 */
static void
add_generated(CsDefTarget *t, const CsDefColumn *col)
{
	char	   *why = NULL;
	char	   *type = cs_type_sql(col->type, &why);
	char	   *what = psprintf("generated column %s", quote_identifier(col->name));
	char	   *sql;
	AlterTableCmd *cmd;

	if (type == NULL)
		cs_def_damage(t, what, psprintf("has a type that is not one of this database: %s", why));
	sql = psprintf("ALTER TABLE %s ADD COLUMN %s %s%s%s GENERATED ALWAYS AS (%s) %s",
				   t->qualified, quote_identifier(col->name), type,
				   col->collation ? " COLLATE " : "",
				   col->collation ? col->collation : "",
				   col->generated,
#if PG_VERSION_NUM >= 180000
				   col->generated_kind == 'v' ? "VIRTUAL" : "STORED");
#else
				   "STORED");
#endif
	cmd = cs_def_check_alter(t, sql, AT_AddColumn, NULL, what, is_generated, col);
	if (cs_def_constraint_refers(t, linitial(((ColumnDef *) cmd->def)->constraints)))
	{
		not_restored(t, what);
		t->missing = lappend(t->missing, col->name);
	}
	else
		cs_def_run(sql);
}

/*
 * A serial column: its sequence, created in the target's schema under the
 * name serial would choose, owned by the column, and the default drawing
 * from it (the source's default names the source's sequence).
 */
static void
add_serial(const CsDefTarget *t, const CsDefColumn *col, AttrNumber attnum)
{
	Oid			typid = get_atttype(t->relid, attnum);
	char	   *seq = ChooseRelationName(t->relname, col->name, "seq", t->nsp, false);
	char	   *qseq = quote_qualified_identifier(get_namespace_name(t->nsp), seq);

	cs_def_run(psprintf("CREATE SEQUENCE %s%s OWNED BY %s.%s", qseq,
						typid == INT2OID ? " AS smallint" :
						typid == INT4OID ? " AS integer" : "",
						t->qualified, quote_identifier(col->name)));
	cs_def_run(psprintf("ALTER TABLE %s ALTER COLUMN %s SET DEFAULT pg_catalog.nextval(%s::pg_catalog.regclass)",
						t->qualified, quote_identifier(col->name), quote_literal_cstr(qseq)));
}

static bool
is_collation(Node *def, const void *arg)
{
	ColumnDef  *cd = (ColumnDef *) def;

	(void) arg;
	return def != NULL && IsA(def, ColumnDef) && cd->collClause != NULL &&
		cd->raw_default == NULL && cd->constraints == NIL;
}

/*
 * The column's collation where it is not its type's: the column retyped
 * to the type it has (written back from the OID) with the collation.
 */
static void
match_collation(const CsDefTarget *t, const CsDefColumn *col, AttrNumber attnum)
{
	Oid			typid;
	int32		typmod;
	Oid			collid;
	const char *column = quote_identifier(col->name);

	get_atttypetypmodcoll(t->relid, attnum, &typid, &typmod, &collid);
	cs_def_run_alter(t, psprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s COLLATE %s",
								 t->qualified, column,
								 format_type_extended(typid, typmod,
													  FORMAT_TYPE_TYPEMOD_GIVEN |
													  FORMAT_TYPE_FORCE_QUALIFY),
								 col->collation),
					 AT_AlterColumnType, col->name,
					 psprintf("the collation of column %s", column), is_collation, NULL);
}

static bool
is_default(Node *def, const void *arg)
{
	(void) arg;
	return def != NULL;
}

/*
 * Collation, NOT NULL (set only: dropped after the constraints), default,
 * identity.
 */
static void
match_column(const CsDefTarget *t, const CsDefColumn *col, AttrNumber attnum)
{
	const char *column = quote_identifier(col->name);

	if (col->collation != NULL)
		match_collation(t, col, attnum);
	if (col->not_null)
		cs_def_run(psprintf("ALTER TABLE %s ALTER COLUMN %s SET NOT NULL", t->qualified, column));
	if (col->identity != '\0')
		cs_def_run(psprintf("ALTER TABLE %s ALTER COLUMN %s ADD GENERATED %s AS IDENTITY",
							t->qualified, column, col->identity == 'a' ? "ALWAYS" : "BY DEFAULT"));
	else if (col->serial_sequence != NULL && col->default_expr != NULL &&
			 strncmp(col->default_expr, "nextval(", strlen("nextval(")) == 0)
		add_serial(t, col, attnum);
	else if (col->default_expr != NULL)
		cs_def_run_alter(t, psprintf("ALTER TABLE %s ALTER COLUMN %s SET DEFAULT %s",
									 t->qualified, column, col->default_expr),
						 AT_ColumnDefault, col->name,
						 psprintf("the default of column %s", column), is_default, NULL);
}

/* The definition's columns, not generated, that the target lacks. */
static List *
missing_columns(const CsDefTarget *t)
{
	List	   *missing = NIL;
	ListCell   *lc;

	foreach(lc, t->def->columns)
	{
		CsDefColumn *col = lfirst(lc);

		if (col->generated == NULL &&
			get_attnum(t->relid, col->name) == InvalidAttrNumber)
			missing = lappend(missing, col->name);
	}
	return missing;
}

/* Columns: generated ones added, the others matched (match_column()). */
static void
match_columns(CsDefTarget *t)
{
	ListCell   *lc;

	foreach(lc, t->def->columns)
	{
		CsDefColumn *col = lfirst(lc);
		AttrNumber	attnum = get_attnum(t->relid, col->name);

		if (attnum == InvalidAttrNumber && col->generated != NULL)
			add_generated(t, col);
		else if (attnum != InvalidAttrNumber && col->generated == NULL)
			match_column(t, col, attnum);
	}
}

/* NOT NULL that restore() set for its key, where the source has none. */
static void
drop_other_not_null(const CsDefTarget *t)
{
	ListCell   *lc;

	foreach(lc, t->def->columns)
	{
		CsDefColumn *col = lfirst(lc);
		AttrNumber	attnum = get_attnum(t->relid, col->name);
		HeapTuple	tuple;
		bool		not_null;

		if (col->not_null || attnum == InvalidAttrNumber)
			continue;
		tuple = SearchSysCache2(ATTNUM, ObjectIdGetDatum(t->relid), Int16GetDatum(attnum));
		if (!HeapTupleIsValid(tuple))
			continue;
		not_null = ((Form_pg_attribute) GETSTRUCT(tuple))->attnotnull;
		ReleaseSysCache(tuple);
		if (not_null)
			cs_def_run(psprintf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL",
								t->qualified, quote_identifier(col->name)));
	}
}

static void
match_replica_identity(const CsDefTarget *t)
{
	const CsTableDefinition *def = t->def;
	Oid			index = InvalidOid;

	if (def->replica_identity == 'i' && def->replica_identity_index != NULL)
		index = get_relname_relid(def->replica_identity_index, t->nsp);
	/* the index, restored above, is the target's (or was left out) */
	if (def->replica_identity == 'i' && def->replica_identity_index != NULL &&
		(!OidIsValid(index) || IndexGetRelation(index, true) != t->relid))
	{
		if (t->missing == NIL)
			cs_def_damage(t, psprintf("replica identity index %s",
										  quote_identifier(def->replica_identity_index)),
							  "is not an index of the table");
		not_restored(t, "the replica identity");
	}
	else if (def->replica_identity == 'i' && def->replica_identity_index != NULL)
		cs_def_run(psprintf("ALTER TABLE %s REPLICA IDENTITY USING INDEX %s", t->qualified,
							quote_identifier(def->replica_identity_index)));
	else if (def->replica_identity != 'i')
		cs_def_run(psprintf("ALTER TABLE %s REPLICA IDENTITY %s", t->qualified,
							def->replica_identity == 'f' ? "FULL" :
							def->replica_identity == 'n' ? "NOTHING" : "DEFAULT"));
}

/*
 * cs_restore_definition
 *	  Gives target table relid, which restore() created and filled, the
 *	  definition def (the source's as of the target; see the file header):
 *	  generated columns, NOT NULL, defaults, identity and serial columns,
 *	  constraints, indexes and replica identity.  Runs through SPI, which
 *	  the caller has connected.
 *	  Errors: XX001 naming def's origin when an expression or definition
 *	  text does not make the one command recorded, or a generated
 *	  column's type is not one of this database; the errors of the DDL
 *	  itself (a name another relation of the target's schema has: 42P07).
 */
void
cs_restore_definition(Oid relid, const CsTableDefinition *def)
{
	CsDefTarget		t;

	t.relid = relid;
	t.nsp = get_rel_namespace(relid);
	t.relname = get_rel_name(relid);
	t.qualified = quote_qualified_identifier(get_namespace_name(t.nsp), t.relname);
	t.def = def;
	t.missing = missing_columns(&t);
	drop_other_constraints(&t);
	drop_other_indexes(&t);
	match_columns(&t);
	add_constraints(&t);
	add_indexes(&t);
	drop_other_not_null(&t);
	match_replica_identity(&t);
}
