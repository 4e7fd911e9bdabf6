/*-------------------------------------------------------------------------
 *
 * slot_wal_watch.h
 *	  Warnings about the WAL the archiver's slot keeps (slot_wal_watch.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SLOT_WAL_WATCH_H
#define CS_SLOT_WAL_WATCH_H

#include "base/archive_config.h"

extern void cs_slot_wal_watch(const CsArchiveConfig *config);

#endif							/* CS_SLOT_WAL_WATCH_H */
