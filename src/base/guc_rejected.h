/*-------------------------------------------------------------------------
 *
 * guc_rejected.h
 *	  Remembering a changestream.* value the configuration file set but the
 *	  server rejected at start, so the archiver does not run silently on
 *	  the default instead (guc_rejected.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_GUC_REJECTED_H
#define CS_GUC_REJECTED_H

#include "utils/guc.h"

extern bool cs_guc_checked(const char *setting, bool ok, GucSource source,
						   const char *value, bool restart_only);
extern void cs_guc_require_accepted(void);

#endif							/* CS_GUC_REJECTED_H */
