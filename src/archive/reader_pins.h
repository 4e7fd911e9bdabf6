/*-------------------------------------------------------------------------
 *
 * reader_pins.h
 *	  The readers' pins that retention honours, and retention's status,
 *	  in shared memory (reader_pins.c; docs/DESIGN.md section 11).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_READER_PINS_H
#define CS_READER_PINS_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"

#define CS_PIN_ALL_GENERATIONS	0

extern void cs_pins_shmem_request(void);
extern void cs_pins_shmem_init(void);
extern void cs_pin_read(uint64 generation, XLogRecPtr oldest_lsn);
extern bool cs_pinned(uint64 generation, XLogRecPtr *oldest_lsn, pid_t *pid);
extern void cs_pin_reader_begin(void);
extern void cs_pin_reader_end(void);
extern void cs_pin_advance(uint64 generation, XLogRecPtr lsn);
extern void cs_pin_call_begin(void);
extern void cs_pin_call_end(void);
extern void cs_pins_lock(void);
extern void cs_pins_unlock(void);
extern void cs_retention_status_set(TimestampTz at, int64 freed_bytes);
extern TimestampTz cs_retention_status_get(int64 *freed_bytes);
extern void cs_retention_held_set(TimestampTz now, pid_t pid, int64 bytes);
extern TimestampTz cs_retention_held_get(pid_t *pid, int64 *bytes);

#endif							/* CS_READER_PINS_H */
