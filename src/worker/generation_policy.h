/*-------------------------------------------------------------------------
 *
 * generation_policy.h
 *	  Declarations of generation_policy.c: when a new generation opens, and
 *	  opening it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_GENERATION_POLICY_H
#define CS_GENERATION_POLICY_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

#include "archive/generation.h"
#include "base/archive_config.h"
#include "worker/walsender_conn.h"

struct WalReceiverConn;

extern const char *cs_new_generation_reason(const CsArchiveConfig *config,
											List *gens,
											uint64 sysid, uint32 tli,
											const CsSlotInfo *slot,
											const char *slot_event,
											bool requested,
											CsIdentity *identity,
											bool *promotion);
extern TimestampTz cs_newest_snapshot_time(const char *directory,
										   uint64 generation);
extern uint64 cs_open_generation(const CsArchiveConfig *config,
								 struct WalReceiverConn *conn,
								 bool create_slot, uint64 sysid, uint32 tli,
								 const char *reason, XLogRecPtr *start_lsn);

extern XLogRecPtr cs_prepare_handoff(const CsArchiveConfig *config,
									 uint64 sysid, uint32 tli,
									 const char *reason);
extern bool cs_handoff_pending(uint64 *generation, XLogRecPtr *start_lsn);
extern uint64 cs_complete_handoff(void);
extern void cs_handoff_reset(void);
extern bool cs_generation_continuable(const CsArchiveConfig *config,
									  List *gens, uint64 sysid, uint32 tli,
									  const CsSlotInfo *slot,
									  const char *slot_event,
									  CsIdentity *identity);

#endif							/* CS_GENERATION_POLICY_H */
