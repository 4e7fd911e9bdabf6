/*-------------------------------------------------------------------------
 *
 * restore_sequences.h
 *	  Setting the sequences of restored tables (restore_sequences.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RESTORE_SEQUENCES_H
#define CS_RESTORE_SEQUENCES_H

#include "read/restore_manifest.h"

/*
 * The extremes of the values the archived rows after the snapshot gave a
 * target column that owns a sequence (restore.c tracks them while it
 * applies inserts and updates, deleted rows' included).
 */
typedef struct CsSeenValues
{
	AttrNumber	attnum;			/* the target's column */
	bool		any;			/* a value was seen */
	int64		max;
	int64		min;
} CsSeenValues;

/* A restored target table, and what the archive says of its sequences. */
typedef struct CsSequenceTarget
{
	Oid			relid;			/* the target table */
	const char *qualified;		/* its quoted, qualified name */
	List	   *archived;		/* CsArchivedSequence *, attnum set; NIL for
								 * a table not in the snapshot */
	List	   *seen;			/* CsSeenValues * (cs_sequence_columns()) */
} CsSequenceTarget;

extern int	cs_restore_sequences(List *targets);
extern List *cs_sequence_columns(Oid relid);
extern void cs_see_value(List *seen, AttrNumber attnum, const char *text);
extern void cs_require_all_rows(Oid relid, const char *qualified);

#endif							/* CS_RESTORE_SEQUENCES_H */
