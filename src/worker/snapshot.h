/*-------------------------------------------------------------------------
 *
 * snapshot.h
 *	  Declarations of snapshot.c and snapshot_manifest.c: snapshots of the
 *	  published tables and their manifests.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SNAPSHOT_H
#define CS_SNAPSHOT_H

#include "access/xlogdefs.h"

#include "archive/snapshot_manifest.h"
#include "base/archive_config.h"

struct WalReceiverConn;

typedef struct CsSnapshotResult
{
	XLogRecPtr	lsn;
	int			tables;
	int64		rows;
	char		encoding[NAMEDATALEN];	/* source database's encoding */
} CsSnapshotResult;

extern XLogRecPtr cs_snapshot_take(const CsArchiveConfig *config,
								   struct WalReceiverConn *conn,
								   const char *slot_name, bool temporary,
								   const char *snapshots_dir, uint64 generation,
								   int progress_slot, CsSnapshotResult *result);
extern void cs_snapshot_cleanup(void);
extern void cs_check_replica_identity(const CsArchiveConfig *config,
									  struct WalReceiverConn *conn);

#endif							/* CS_SNAPSHOT_H */
