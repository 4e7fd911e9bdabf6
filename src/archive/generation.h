/*-------------------------------------------------------------------------
 *
 * generation.h
 *	  Declarations of generation.c: generations and their identity files.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_GENERATION_H
#define CS_GENERATION_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"

typedef struct CsIdentity
{
	uint32		format_version;
	uint64		generation;
	uint64		system_identifier;
	uint32		timeline;
	char		database[NAMEDATALEN];
	char		slot[NAMEDATALEN];
	char		plugin[NAMEDATALEN];
	char		plugin_options[256];
	XLogRecPtr	start_lsn;
	TimestampTz created_at;
	char		reason[512];
	char		encoding[NAMEDATALEN];	/* source database's; "" if unknown */
} CsIdentity;

extern void cs_format_utc(TimestampTz t, char *buf, size_t len);
extern void cs_validate_generation_arg(const char *text, uint64 *generation);
extern bool cs_read_identity(const char *directory, uint64 generation,
							 CsIdentity *identity);
extern void cs_require_identity(const char *directory, uint64 generation,
								CsIdentity *identity);
extern char *cs_generation_prepare(const char *directory, CsIdentity *identity);
extern void cs_generation_commit(const char *directory, CsIdentity *identity,
								 const char *session_settings,
								 const char *tmpdir);

#endif							/* CS_GENERATION_H */
