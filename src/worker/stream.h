/*-------------------------------------------------------------------------
 *
 * stream.h
 *	  Declarations of stream.c: the durability state machine of a streaming
 *	  session.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_STREAM_H
#define CS_STREAM_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"

#include "base/archive_config.h"

struct WalReceiverConn;

/*
 * Called on a Relation message named changestream.ddl_history, before it is
 * archived, with the relation's OID: the session's owner decides whether
 * the generation trusts it as the schema history (archiver.c), and returns
 * whether it does.
 */
typedef bool (*CsHistoryRelationHook) (Oid relid);

/*
 * Called when the stream reaches the start of the new generation set with
 * cs_stream_set_handoff(), after the active generation holds everything
 * before it durably: the session's owner ends the active generation there
 * and makes the new one the writer's (archiver.c).
 */
typedef void (*CsHandoffHook) (void);

extern void cs_stream_reset(void);
extern void cs_stream_writer_opened(XLogRecPtr position);
extern void cs_stream_started(const CsArchiveConfig *config,
							  struct WalReceiverConn *conn,
							  CsHistoryRelationHook on_history_relation);
extern void cs_stream_set_handoff(XLogRecPtr start_lsn,
								  CsHandoffHook on_handoff);
extern bool cs_stream_handoff_pending(void);
extern bool cs_stream_is_streaming(void);
extern bool cs_stream_made_durable(void);
extern XLogRecPtr cs_stream_position(void);
extern bool cs_stream_in_transaction(void);
extern bool cs_stream_receive(pgsocket *fd);
extern void cs_stream_periodic(TimestampTz now, bool idle);
extern void cs_stream_wait(pgsocket fd, TimestampTz now);
extern void cs_stream_pause(TimestampTz now);
extern void cs_stream_finish(void);
extern void cs_stream_exit(void);

#endif							/* CS_STREAM_H */
