/*-------------------------------------------------------------------------
 *
 * retention.h
 *	  Retention: the maintenance worker's retention runs over the restorable
 *	  window (retention.c; docs/DESIGN.md section 11).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RETENTION_H
#define CS_RETENTION_H

#include "datatype/timestamp.h"
#include "utils/elog.h"

extern void cs_retention_reset(void);
extern bool cs_retention_step(const char *directory, TimestampTz now,
							  bool may_plan);
extern void cs_retention_failed(ErrorData *edata);
extern long cs_retention_retry_ms(void);

#endif							/* CS_RETENTION_H */
