/*-------------------------------------------------------------------------
 *
 * verify_record.h
 *	  verify()'s durable record of the replica's objects it has read and
 *	  found sound, so that a repeat run does not download them again
 *	  (verify_record.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_VERIFY_RECORD_H
#define CS_VERIFY_RECORD_H

#include "datatype/timestamp.h"
#include "port/pg_crc32c.h"
#include "utils/hsearch.h"

#include "archive/segment_format.h"

#define CS_VERIFY_ETAG_MAX 128

/* what the object was found to be when it was read whole */
typedef enum CsVerifiedKind
{
	CS_VERIFIED_NONE = '-',		/* nothing beyond its CRC-32C, if known */
	CS_VERIFIED_SEGMENT = 'S',	/* a segment decoded sound: header kept */
	CS_VERIFIED_SNAPSHOT = 'P'	/* a snapshot read sound */
} CsVerifiedKind;

/* One object of the replica, by its name under the replica's root. */
typedef struct CsVerifiedObject
{
	char		name[MAXPGPATH];	/* hash key: relative to the root */
	int64		size;			/* as listed when it was read */
	char		etag[CS_VERIFY_ETAG_MAX];	/* likewise; "" = unknown */
	TimestampTz verified_at;	/* when the facts below were found */
	bool		has_crc;
	pg_crc32c	crc;			/* CRC-32C of the whole object */
	CsVerifiedKind kind;
	CsSegmentHeader header;		/* CS_VERIFIED_SEGMENT: as read */
	/* in memory only, for this run */
	bool		read_now;		/* downloaded by this run */
	bool		skipped_now;	/* taken from the record by this run */
} CsVerifiedObject;

typedef struct CsVerifyRecord CsVerifyRecord;

extern CsVerifyRecord *cs_verify_record_open(const char *root,
											 const char *local, bool full);
extern CsVerifiedObject *cs_verify_record_known(CsVerifyRecord *record,
												const char *path);
extern CsVerifiedObject *cs_verify_record_reading(CsVerifyRecord *record,
												  const char *path);
extern void cs_verify_record_found(CsVerifiedObject *object);
extern void cs_verify_record_counts(CsVerifyRecord *record, int64 *read,
									int64 *skipped);
extern void cs_verify_record_save(CsVerifyRecord *record);

#endif							/* CS_VERIFY_RECORD_H */
