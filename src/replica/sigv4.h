/*-------------------------------------------------------------------------
 *
 * sigv4.h
 *	  AWS Signature Version 4 for S3 requests (sigv4.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_SIGV4_H
#define CS_SIGV4_H

#include "lib/stringinfo.h"

/* the hex SHA-256 of an empty payload */
#define CS_SHA256_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* one query parameter or header, decoded (as the application means it) */
typedef struct CsSigV4Pair
{
	const char *name;
	const char *value;
} CsSigV4Pair;

/* what a request's signature covers */
typedef struct CsSigV4Request
{
	const char *method;			/* GET, PUT, ... */
	const char *path;			/* decoded, from '/': "/bucket/key" or "/key" */
	const CsSigV4Pair *query;	/* decoded parameters, any order */
	int			nquery;
	const CsSigV4Pair *headers; /* every header signed, host included */
	int			nheaders;
	const char *payload_sha256; /* hex, as in x-amz-content-sha256 */
	const char *amz_date;		/* x-amz-date: YYYYMMDDTHHMMSSZ */
	const char *region;
	const char *access_key;
	const char *secret_key;
} CsSigV4Request;

extern void cs_sigv4_uri_encode(StringInfo out, const char *s, bool keep_slash);
extern char *cs_sigv4_canonical_query(const CsSigV4Pair *query, int nquery);
extern char *cs_sigv4_authorization(const CsSigV4Request *req);
extern void cs_sha256_hex(const void *data, size_t len, char *hex);

#endif							/* CS_SIGV4_H */
