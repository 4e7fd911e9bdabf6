/*-------------------------------------------------------------------------
 *
 * segment_writer.h
 *	  Declarations of segment_writer.c: the active segment: append, fsync,
 *	  rotate, recover.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SEGMENT_WRITER_H
#define CS_SEGMENT_WRITER_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"

#include "pgoutput_parse.h"

extern void cs_writer_reset(void);
extern void cs_writer_recover(const char *directory, uint64 generation,
							  XLogRecPtr confirmed_flush,
							  XLogRecPtr *position);
extern void cs_writer_open_first(const char *directory, uint64 generation,
								 uint64 system_identifier, uint32 timeline,
								 XLogRecPtr start_lsn);
extern void cs_writer_add(char kind, XLogRecPtr data_start, XLogRecPtr wal_end,
						  TimestampTz send_time, const char *data, uint32 len);
extern void cs_writer_note_schema(const char *data, uint32 len,
								  const CsMessageInfo *info);
extern void cs_writer_flush(void);
extern bool cs_writer_unsynced(void);
extern bool cs_writer_should_rotate(TimestampTz now);
extern void cs_writer_rotate(XLogRecPtr position);
extern void cs_writer_close(void);

#endif							/* CS_SEGMENT_WRITER_H */
