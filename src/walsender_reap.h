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

struct WalReceiverConn;

extern void cs_walsender_remember(struct WalReceiverConn *conn);
extern void cs_walsender_forget(void);
extern void cs_walsender_reap(struct WalReceiverConn *conn);

#endif							/* CS_WALSENDER_REAP_H */
