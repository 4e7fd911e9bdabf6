/*-------------------------------------------------------------------------
 *
 * restore_definition.h
 *	  Gives a table restore() created its source's definition as of the
 *	  target (restore_definition.c; docs/DESIGN.md section 12).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RESTORE_DEFINITION_H
#define CS_RESTORE_DEFINITION_H

#include "read/definition_read.h"

extern void cs_restore_definition(Oid relid, const CsTableDefinition *def);

#endif							/* CS_RESTORE_DEFINITION_H */
