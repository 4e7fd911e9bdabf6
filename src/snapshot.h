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

struct WalReceiverConn;

typedef struct CsSnapshotResult
{
	XLogRecPtr	lsn;
	int			tables;
	int64		rows;
} CsSnapshotResult;

extern XLogRecPtr cs_snapshot_take(struct WalReceiverConn *conn,
								   const char *slot_name, bool temporary,
								   const char *snapshots_dir, uint64 generation,
								   int progress_slot, CsSnapshotResult *result);
extern void cs_snapshot_cleanup(void);
extern void cs_check_replica_identity(struct WalReceiverConn *conn);

struct stat;
extern bool cs_snapshot_read_manifest(const char *path, XLogRecPtr *lsn,
									  int *tables, int64 *rows,
									  struct stat *st);

#endif							/* CS_SNAPSHOT_H */
