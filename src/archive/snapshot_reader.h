/*-------------------------------------------------------------------------
 *
 * snapshot_reader.h
 *	  Reading a snapshot file section by section.  See snapshot_reader.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SNAPSHOT_READER_H
#define CS_SNAPSHOT_READER_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "utils/jsonb.h"

#include "archive/archive_layout.h"

typedef struct CsSnapshotReader CsSnapshotReader;

extern CsSnapshotReader *cs_snapreader_open(const char *path);
extern XLogRecPtr cs_snapreader_lsn(CsSnapshotReader *reader);
extern TimestampTz cs_snapreader_time(CsSnapshotReader *reader);
extern int64 cs_snapreader_rows(CsSnapshotReader *reader);
extern int	cs_snapreader_tables(CsSnapshotReader *reader);
extern const char *cs_snapreader_manifest(CsSnapshotReader *reader);
extern int	cs_snapreader_format_version(CsSnapshotReader *reader);
extern int64 cs_snapreader_manifest_offset(CsSnapshotReader *reader);
extern Jsonb *cs_snapreader_manifest_json(CsSnapshotReader *reader);
extern char *cs_snapreader_next_table(CsSnapshotReader *reader);
extern int	cs_snapreader_read(CsSnapshotReader *reader, char *buf,
							   int maxread);
extern int64 cs_snapreader_offset(CsSnapshotReader *reader);
extern int64 cs_snapreader_file_offset(CsSnapshotReader *reader);
extern void cs_snapreader_close(CsSnapshotReader *reader);

#endif							/* CS_SNAPSHOT_READER_H */
