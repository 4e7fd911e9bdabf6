/*-------------------------------------------------------------------------
 *
 * segment_writer.h
 *	  Declarations of segment_writer.c: the active segment: append, fsync,
 *	  rotate; and what recovery (segment_recovery.c) hands it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SEGMENT_WRITER_H
#define CS_SEGMENT_WRITER_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"

#include "archive/pgoutput_parse.h"
#include "archive/segment_format.h"
#include "archive/segment_reader.h"

extern void cs_writer_reset(void);
extern void cs_writer_begin(const char *directory, uint64 generation,
							uint64 system_identifier, uint32 timeline);
extern void cs_writer_open_first(const char *directory, uint64 generation,
								 uint64 system_identifier, uint32 timeline,
								 XLogRecPtr start_lsn);
extern void cs_writer_create_segment(int64 index, XLogRecPtr start_lsn);
extern void cs_writer_resume_segment(int64 index, const char *path,
									 const CsSegmentScan *scan);
extern void cs_writer_write_seal(const char *path, const CsSegmentSeal *seal);
extern void cs_writer_write_all(int fd, const char *buf, size_t len,
								const char *path);
extern int64 cs_writer_take_failed_size(const char *path);
extern uint64 cs_writer_generation(void);
extern int64 cs_writer_segment_index(void);
extern int64 cs_writer_durable_size(void);
extern void cs_writer_add(char kind, XLogRecPtr data_start, XLogRecPtr wal_end,
						  TimestampTz send_time, const char *data, uint32 len,
						  const CsMessageInfo *info);
extern void cs_writer_note_schema(const char *data, uint32 len,
								  const CsMessageInfo *info, bool in_segment);
extern void cs_writer_flush(void);
extern bool cs_writer_unsynced(void);
extern bool cs_writer_should_rotate(TimestampTz now);
extern void cs_writer_rotate(XLogRecPtr position);
extern void cs_writer_end_generation(XLogRecPtr end_lsn);
extern void cs_writer_next_generation(const char *directory, uint64 generation,
									  uint64 system_identifier, uint32 timeline,
									  XLogRecPtr start_lsn);
extern void cs_writer_close(void);

#endif							/* CS_SEGMENT_WRITER_H */
