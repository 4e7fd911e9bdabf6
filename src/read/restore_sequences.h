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

/* A restored target table, and what the snapshot says of its sequences. */
typedef struct CsSequenceTarget
{
	Oid			relid;			/* the target table */
	const char *qualified;		/* its quoted, qualified name */
	List	   *archived;		/* CsArchivedSequence *, attnum set; NIL for
								 * a table not in the snapshot */
} CsSequenceTarget;

extern int	cs_restore_sequences(List *targets);

#endif							/* CS_RESTORE_SEQUENCES_H */
