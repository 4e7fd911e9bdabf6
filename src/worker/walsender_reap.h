/*-------------------------------------------------------------------------
 *
 * walsender_reap.h
 *	  Ending the walsender of a replication connection that is being
 *	  abandoned in the middle of a command (walsender_reap.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_WALSENDER_REAP_H
#define CS_WALSENDER_REAP_H

#include "base/archive_config.h"

struct WalReceiverConn;

extern void cs_walsender_remember(const CsArchiveConfig *config,
								  struct WalReceiverConn *conn);
extern void cs_walsender_forget(void);
extern void cs_walsender_reap(const CsArchiveConfig *config,
							  struct WalReceiverConn *conn);

#endif							/* CS_WALSENDER_REAP_H */
