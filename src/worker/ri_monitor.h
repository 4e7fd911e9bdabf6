/*-------------------------------------------------------------------------
 *
 * ri_monitor.h
 *	  Keeping status().tables_without_replica_identity and its warning
 *	  true while the archiver streams (ri_monitor.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RI_MONITOR_H
#define CS_RI_MONITOR_H

#include "datatype/timestamp.h"

#include "base/archive_config.h"

extern void cs_ri_report(const CsArchiveConfig *config, const char *missing);
extern void cs_ri_signal(void);
extern void cs_ri_tick(const CsArchiveConfig *config, TimestampTz now);

#endif							/* CS_RI_MONITOR_H */
