/*-------------------------------------------------------------------------
 *
 * definition_statement.h
 *	  Checking and running the statements that give a restored table its
 *	  archived definition (definition_statement.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_DEFINITION_STATEMENT_H
#define CS_DEFINITION_STATEMENT_H

#include "nodes/parsenodes.h"

#include "read/definition_read.h"

/* The target table, as the statements name it. */
typedef struct CsDefTarget
{
	Oid			relid;
	Oid			nsp;
	const char *relname;
	const char *qualified;		/* quoted, schema-qualified */
	const CsTableDefinition *def;
	List	   *missing;		/* the definition's columns the target lacks
								 * (a publication's column list left them
								 * out), and generated ones not added */
} CsDefTarget;

extern void cs_def_run(const char *sql);
extern void cs_def_damage(const CsDefTarget *t, const char *what,
						  const char *why);
extern Node *cs_def_parse_one(const CsDefTarget *t, const char *sql,
							  NodeTag tag, const char *what);
extern bool cs_def_names_target(const CsDefTarget *t, RangeVar *rv);
extern AlterTableCmd *cs_def_check_alter(const CsDefTarget *t, const char *sql,
										 AlterTableType subtype,
										 const char *column, const char *what,
										 bool (*check) (Node *def, const void *arg),
										 const void *arg);
extern void cs_def_run_alter(const CsDefTarget *t, const char *sql,
							 AlterTableType subtype, const char *column,
							 const char *what,
							 bool (*check) (Node *def, const void *arg),
							 const void *arg);
extern bool cs_def_constraint_refers(const CsDefTarget *t, Constraint *c);
extern bool cs_def_index_refers(const CsDefTarget *t, IndexStmt *x);

#endif							/* CS_DEFINITION_STATEMENT_H */
