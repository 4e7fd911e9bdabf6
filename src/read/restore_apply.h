/*-------------------------------------------------------------------------
 *
 * restore_apply.h
 *	  Applying archived changes to a table restore() restores, through
 *	  the executor (restore_apply.c), and the table being restored, which
 *	  restore.c sets up.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RESTORE_APPLY_H
#define CS_RESTORE_APPLY_H

#include "read/ddl_record.h"
#include "read/decoder.h"
#include "read/restore_key.h"

/* One archived table being restored. */
typedef struct CsRestoreTable
{
	Oid			remote_oid;		/* pg_class OID on the archived server */
	char	   *schema;			/* archived schema and name */
	char	   *name;
	char	   *target_schema;	/* where it is restored */
	Oid			relid;			/* the target table */
	bool		created;		/* created by this restore */
	List	   *columns;		/* char *: archived column names in force */
	LogicalRepRelation *synced; /* Relation the target was last matched to */
	AttrNumber *attmap;			/* synced's column i -> target attnum */
	int64		rows;			/* snapshot rows loaded */
	struct CsApplyState *apply; /* open for applying, or NULL */
	CsDdlRecord *pending;		/* not seen in the stream yet: refused if
								 * it is (the record, and its commit LSN) */
	XLogRecPtr	pending_lsn;
	CsDdlRecord *stale;			/* an ALTER TABLE of it with no Relation
								 * since (its definition at the target is
								 * not archived), and its commit LSN */
	XLogRecPtr	stale_lsn;
	CsDdlRecord *renamed;		/* a RENAME COLUMN of it with no Relation
								 * since, and its commit LSN */
	XLogRecPtr	renamed_lsn;
	CsKeyState	key;			/* a created table's key (restore_key.c) */
	List	   *seen_values;	/* CsSeenValues * (restore_sequences.h): the
								 * archived rows' extremes in columns of an
								 * existing target that own a sequence */
	Node	   *row_filter;		/* restore()'s row_filter, raw
								 * (restore_row_filter.c), or NULL */
	struct CsTableDefinition *definition;	/* the source's definition as of
											 * the point applied, or NULL
											 * when the archive has none */
} CsRestoreTable;

extern void cs_apply_change(CsRestoreTable *t, const CsChange *change);
extern void cs_apply_close(CsRestoreTable *t);

#endif							/* CS_RESTORE_APPLY_H */
