/*-------------------------------------------------------------------------
 *
 * walsender_conn.h
 *	  Declarations of walsender_conn.c: the replication connection
 *	  (libpqwalreceiver).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_WALSENDER_CONN_H
#define CS_WALSENDER_CONN_H

#include "access/xlogdefs.h"
#include "nodes/pg_list.h"

#include "base/archive_config.h"

struct WalReceiverConn;
struct WalRcvExecResult;

typedef struct CsSlotInfo
{
	bool		exists;
	bool		lost;
	XLogRecPtr	confirmed_flush;
	bool		active;			/* a walsender is streaming from it */
	int			active_pid;		/* that walsender's PID, on the server */
} CsSlotInfo;

extern struct WalReceiverConn *cs_connect(const CsArchiveConfig *config,
										  uint64 *system_identifier,
										  uint32 *timeline);
extern void cs_disconnect(struct WalReceiverConn *conn);
extern void cs_get_slot(const CsArchiveConfig *config,
						struct WalReceiverConn *conn, CsSlotInfo *info);
extern bool cs_timeline_switch_lsn(struct WalReceiverConn *conn, uint32 tli,
								   uint32 old_tli, XLogRecPtr *switch_lsn);
extern void cs_drop_slot(const CsArchiveConfig *config,
						 struct WalReceiverConn *conn);
extern void cs_check_publication(const CsArchiveConfig *config,
								 struct WalReceiverConn *conn);
extern const char *cs_ddl_publication_sql(void);
extern Oid	cs_ddl_oid_in(const char *text);
extern bool cs_ddl_publication_exists(struct WalReceiverConn *conn,
									  XLogRecPtr *server_lsn,
									  Oid *history_oid);
extern void cs_start_replication(const CsArchiveConfig *config,
								 struct WalReceiverConn *conn,
								 XLogRecPtr startpoint, bool with_ddl);
extern void cs_send_status_update(struct WalReceiverConn *conn,
								  XLogRecPtr write_lsn, XLogRecPtr flush_lsn,
								  bool reply_requested);
extern struct WalRcvExecResult *cs_exec(struct WalReceiverConn *conn,
										const char *sql, int expect);
extern List *cs_exec_rows(struct WalReceiverConn *conn, const char *sql,
						  int ncols);
extern const char *cs_plugin_options(const CsArchiveConfig *config);
extern const char *cs_session_settings(void);

#endif							/* CS_WALSENDER_CONN_H */
