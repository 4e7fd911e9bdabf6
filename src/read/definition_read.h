/*-------------------------------------------------------------------------
 *
 * definition_read.h
 *	  A published table's definition as the archive records it (a snapshot
 *	  manifest's "definition" member, a schema history record's
 *	  definition column; docs/FORMAT.md section 3.2), read and checked as
 *	  untrusted input (definition_read.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_DEFINITION_READ_H
#define CS_DEFINITION_READ_H

#include "nodes/pg_list.h"
#include "utils/jsonb.h"

/* One column of the definition, in the source's column order. */
typedef struct CsDefColumn
{
	char	   *name;
	int			attnum;			/* the source's attnum; 0 in a definition
								 * written before it was recorded */
	char	   *type;			/* format_type() text of the source */
	char	   *collation;		/* regcollation text where not the type's,
								 * or NULL */
	bool		not_null;
	char	   *default_expr;	/* pg_get_expr() text, or NULL */
	char	   *generated;		/* a generated column's expression, or NULL */
	char		generated_kind; /* '\0', 's' (stored) or 'v' (virtual) */
	char		identity;		/* '\0', 'a' (ALWAYS) or 'd' (BY DEFAULT) */
	char	   *serial_sequence;	/* the sequence it owns as a serial
									 * column (unqualified name), or NULL */
} CsDefColumn;

/* A PRIMARY KEY, UNIQUE, CHECK or EXCLUDE constraint. */
typedef struct CsDefConstraint
{
	char	   *name;
	char		type;			/* 'p', 'u', 'c' or 'x' */
	char	   *definition;		/* pg_get_constraintdef() text, or NULL when
								 * the source could not give it (dropped
								 * while a snapshot read it) */
} CsDefConstraint;

/* An index that backs no constraint. */
typedef struct CsDefIndex
{
	char	   *name;
	bool		unique;
	char	   *using_clause;	/* pg_get_indexdef() from the access method
								 * on, or NULL when it could not be split */
} CsDefIndex;

typedef struct CsTableDefinition
{
	List	   *columns;		/* CsDefColumn * */
	List	   *constraints;	/* CsDefConstraint * */
	List	   *indexes;		/* CsDefIndex * */
	bool		attnums;		/* every column has its attnum (distinct) */
	char		replica_identity;	/* 'd', 'n', 'f' or 'i' */
	char	   *replica_identity_index; /* under 'i', or NULL */
	char	   *origin;			/* where it was read, for messages: "file
								 * F at offset N" (set by the caller) */
} CsTableDefinition;

extern CsTableDefinition *cs_definition_from_jsonb(JsonbContainer *obj,
												   char **why);
extern CsTableDefinition *cs_definition_from_text(const char *json, char **why);
extern CsTableDefinition *cs_definition_without_index(const CsTableDefinition *def,
													  const char *index);
extern CsDefColumn *cs_definition_column(const CsTableDefinition *def,
										 const char *name);

#endif							/* CS_DEFINITION_READ_H */
