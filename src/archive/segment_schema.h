/*-------------------------------------------------------------------------
 *
 * segment_schema.h
 *	  The Relation and Type messages in force and which of them the active
 *	  segment already carries, so that each segment holds, before its first
 *	  use, the schema of every relation it uses.  See segment_schema.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SEGMENT_SCHEMA_H
#define CS_SEGMENT_SCHEMA_H

#include "utils/palloc.h"

/* Called for each Relation/Type message a change needs in the segment. */
typedef void (*CsSchemaEmit) (const char *data, uint32 len, void *arg);

extern void cs_schema_reset(MemoryContext cxt);
extern void cs_schema_new_segment(void);
extern void cs_schema_note(const char *data, uint32 len, char type, Oid oid,
						   bool in_segment);
extern void cs_schema_require(const char *data, uint32 len, CsSchemaEmit emit,
							  void *arg);

#endif							/* CS_SEGMENT_SCHEMA_H */
