/*-------------------------------------------------------------------------
 *
 * sigv4.c
 *	  AWS Signature Version 4 of an S3 request, on PostgreSQL's own
 *	  SHA-256 and HMAC (common/cryptohash.h, common/hmac.h): the canonical
 *	  request, the string to sign, the signing key and the Authorization
 *	  header.  libcurl's CURLOPT_AWS_SIGV4 is not used: libcurl 7.88 signs
 *	  an unsorted query wrongly and never sends x-amz-content-sha256.
 *
 * Source: "Signature Calculations for the Authorization Header:
 * Transferring Payload in a Single Chunk (AWS Signature Version 4)" of the
 * Amazon S3 API reference, whose four examples the regression test checks
 * (sql/changestream.sql, changestream.sigv4_authorization()).  S3 differs
 * from the other services in encoding the path only once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "utils/builtins.h"

#include "replica/sigv4.h"

/* the longest secret key sign() takes, in bytes */
#define CS_SIGV4_SECRET_MAX 256

/* a header as it enters the canonical request */
typedef struct CanonicalHeader
{
	char	   *name;			/* lower case */
	char	   *value;			/* trimmed, inner runs of spaces as one */
} CanonicalHeader;

/* a query parameter, encoded */
typedef struct EncodedPair
{
	char	   *name;
	char	   *value;
} EncodedPair;

/*
 * cs_sigv4_uri_encode(out, s, keep_slash)
 *	  Append s to out with every byte but A-Z a-z 0-9 - . _ ~ written as
 *	  %XY (upper case hex), as SigV4's UriEncode(); '/' is kept when
 *	  keep_slash (an object key in the path), encoded otherwise (a query
 *	  parameter).  The same encoding builds the URL the request is sent to.
 */
void
cs_sigv4_uri_encode(StringInfo out, const char *s, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	const unsigned char *p;

	for (p = (const unsigned char *) s; *p; p++)
	{
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
			(*p >= '0' && *p <= '9') || *p == '-' || *p == '.' ||
			*p == '_' || *p == '~' || (keep_slash && *p == '/'))
			appendStringInfoChar(out, (char) *p);
		else
		{
			appendStringInfoChar(out, '%');
			appendStringInfoChar(out, hex[*p >> 4]);
			appendStringInfoChar(out, hex[*p & 0xf]);
		}
	}
}

static int
encoded_pair_cmp(const void *a, const void *b)
{
	const EncodedPair *x = a;
	const EncodedPair *y = b;
	int			c = strcmp(x->name, y->name);

	return c != 0 ? c : strcmp(x->value, y->value);
}

/*
 * cs_sigv4_canonical_query(query, nquery) -> palloc'd string
 *	  The canonical query string: names and values encoded, sorted by name
 *	  (then value), "name=value" joined by '&' ("name=" for an empty
 *	  value).  The request's URL uses it as its query, so what is signed is
 *	  what is sent.
 */
char *
cs_sigv4_canonical_query(const CsSigV4Pair *query, int nquery)
{
	EncodedPair *pairs = palloc0(sizeof(EncodedPair) * Max(nquery, 1));
	StringInfoData buf;
	int			i;

	for (i = 0; i < nquery; i++)
	{
		initStringInfo(&buf);
		cs_sigv4_uri_encode(&buf, query[i].name, false);
		pairs[i].name = buf.data;
		initStringInfo(&buf);
		cs_sigv4_uri_encode(&buf, query[i].value ? query[i].value : "", false);
		pairs[i].value = buf.data;
	}
	qsort(pairs, nquery, sizeof(EncodedPair), encoded_pair_cmp);
	initStringInfo(&buf);
	for (i = 0; i < nquery; i++)
		appendStringInfo(&buf, "%s%s=%s", i > 0 ? "&" : "",
						 pairs[i].name, pairs[i].value);
	return buf.data;
}

/*
 * A header value trimmed, with each inner run of spaces as one space, in
 * one allocation of the value's size (it may be the session token, wiped
 * by the caller: no copy is left behind by a growing buffer).
 */
static char *
canonical_value(const char *value)
{
	char	   *out = palloc(strlen(value) + 1);
	char	   *o = out;
	const char *p = value;
	bool		space = false;

	while (*p == ' ' || *p == '\t')
		p++;
	for (; *p; p++)
	{
		if (*p == ' ' || *p == '\t')
			space = true;
		else
		{
			if (space)
				*o++ = ' ';
			space = false;
			*o++ = *p;
		}
	}
	*o = '\0';
	return out;
}

static int
canonical_header_cmp(const void *a, const void *b)
{
	return strcmp(((const CanonicalHeader *) a)->name,
				  ((const CanonicalHeader *) b)->name);
}

/*
 * Append the canonical headers ("name:value\n" each, sorted) to creq and
 * the signed header list ("a;b;c") to signed_headers.
 */
static void
append_canonical_headers(StringInfo creq, StringInfo signed_headers,
						 const CsSigV4Pair *headers, int nheaders)
{
	CanonicalHeader *h = palloc0(sizeof(CanonicalHeader) * Max(nheaders, 1));
	int			i;

	for (i = 0; i < nheaders; i++)
	{
		h[i].name = pstrdup(headers[i].name);
		for (char *c = h[i].name; *c; c++)
			*c = pg_ascii_tolower((unsigned char) *c);
		h[i].value = canonical_value(headers[i].value);
	}
	qsort(h, nheaders, sizeof(CanonicalHeader), canonical_header_cmp);
	for (i = 0; i < nheaders; i++)
	{
		appendStringInfo(creq, "%s:%s\n", h[i].name, h[i].value);
		appendStringInfo(signed_headers, "%s%s", i > 0 ? ";" : "", h[i].name);
		/* a value may be the session token */
		explicit_bzero(h[i].value, strlen(h[i].value));
		pfree(h[i].value);
	}
}

/*
 * cs_sha256_hex(data, len, hex)
 *	  The SHA-256 of len bytes at data, as 64 lower case hex digits and a
 *	  terminating NUL in hex (65 bytes).  Raises only if the hash cannot be
 *	  computed (out of memory).
 */
void
cs_sha256_hex(const void *data, size_t len, char *hex)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);
	uint8		digest[PG_SHA256_DIGEST_LENGTH];

	if (ctx == NULL || pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, data, len) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not compute a SHA-256 hash: %s",
						ctx ? pg_cryptohash_error(ctx) : "out of memory")));
	pg_cryptohash_free(ctx);
	hex_encode((const char *) digest, sizeof(digest), hex);
	hex[2 * PG_SHA256_DIGEST_LENGTH] = '\0';
}

/* HMAC-SHA256 of data under key into out (32 bytes). */
static void
hmac_sha256(const uint8 *key, size_t keylen, const char *data, uint8 *out)
{
	pg_hmac_ctx *ctx = pg_hmac_create(PG_SHA256);

	if (ctx == NULL || pg_hmac_init(ctx, key, keylen) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) data, strlen(data)) < 0 ||
		pg_hmac_final(ctx, out, PG_SHA256_DIGEST_LENGTH) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not compute an HMAC-SHA256: %s",
						ctx ? pg_hmac_error(ctx) : "out of memory")));
	pg_hmac_free(ctx);
}

/*
 * The signature of string_to_sign, in hex, under the key derived from
 * secret, the date (YYYYMMDD) and region: HMAC("AWS4" secret, date), then
 * region, "s3", "aws4_request".  The secret's copies are wiped.
 */
static void
sign(const char *secret, const char *date, const char *region,
	 const char *string_to_sign, char *hex)
{
	char		k_secret[4 + CS_SIGV4_SECRET_MAX];
	size_t		len = strlen(secret);
	uint8		k1[PG_SHA256_DIGEST_LENGTH];
	uint8		k2[PG_SHA256_DIGEST_LENGTH];

	if (len > CS_SIGV4_SECRET_MAX)
		elog(ERROR, "secret access key longer than %d bytes", CS_SIGV4_SECRET_MAX);
	memcpy(k_secret, "AWS4", 4);
	memcpy(k_secret + 4, secret, len);
	hmac_sha256((uint8 *) k_secret, 4 + len, date, k1);
	explicit_bzero(k_secret, sizeof(k_secret));
	hmac_sha256(k1, sizeof(k1), region, k2);
	hmac_sha256(k2, sizeof(k2), "s3", k1);
	hmac_sha256(k1, sizeof(k1), "aws4_request", k2);
	hmac_sha256(k2, sizeof(k2), string_to_sign, k1);
	hex_encode((const char *) k1, sizeof(k1), hex);
	hex[2 * PG_SHA256_DIGEST_LENGTH] = '\0';
	explicit_bzero(k1, sizeof(k1));
	explicit_bzero(k2, sizeof(k2));
}

/*
 * cs_sigv4_authorization(req) -> palloc'd string
 *	  The value of the Authorization header for req:
 *	  "AWS4-HMAC-SHA256 Credential=<key id>/<date>/<region>/s3/aws4_request,
 *	  SignedHeaders=<names>,Signature=<64 hex digits>".  Every header in
 *	  req->headers is signed; the caller sends exactly those, with the path
 *	  encoded by cs_sigv4_uri_encode(keep_slash) and the query
 *	  cs_sigv4_canonical_query() gives.  amz_date must be 16 characters.
 */
char *
cs_sigv4_authorization(const CsSigV4Request *req)
{
	StringInfoData creq;
	StringInfoData signed_headers;
	StringInfoData sts;
	char		date[9];
	char		creq_hash[2 * PG_SHA256_DIGEST_LENGTH + 1];
	char		signature[2 * PG_SHA256_DIGEST_LENGTH + 1];
	char	   *scope;
	size_t		creq_size;

	if (strlen(req->amz_date) != 16 || req->amz_date[8] != 'T')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid x-amz-date \"%s\"", req->amz_date),
				 errhint("Write it as YYYYMMDDTHHMMSSZ, for example 20130524T000000Z.")));
	memcpy(date, req->amz_date, 8);
	date[8] = '\0';
	scope = psprintf("%s/%s/s3/aws4_request", date, req->region);

	initStringInfo(&creq);
	/* room for it all at once, so no growth leaves a copy of the token */
	creq_size = strlen(req->method) + 3 * strlen(req->path) +
		strlen(req->payload_sha256) + 256;
	for (int i = 0; i < req->nquery; i++)
		creq_size += 3 * (strlen(req->query[i].name) + strlen(req->query[i].value)) + 2;
	for (int i = 0; i < req->nheaders; i++)
		creq_size += 2 * strlen(req->headers[i].name) + strlen(req->headers[i].value) + 3;
	enlargeStringInfo(&creq, creq_size);
	initStringInfo(&signed_headers);
	appendStringInfo(&creq, "%s\n", req->method);
	cs_sigv4_uri_encode(&creq, req->path, true);
	appendStringInfo(&creq, "\n%s\n",
					 cs_sigv4_canonical_query(req->query, req->nquery));
	append_canonical_headers(&creq, &signed_headers, req->headers, req->nheaders);
	appendStringInfo(&creq, "\n%s\n%s", signed_headers.data, req->payload_sha256);
	cs_sha256_hex(creq.data, creq.len, creq_hash);

	initStringInfo(&sts);
	appendStringInfo(&sts, "AWS4-HMAC-SHA256\n%s\n%s\n%s",
					 req->amz_date, scope, creq_hash);
	/* the canonical request holds the session token: wipe it */
	explicit_bzero(creq.data, creq.maxlen);
	sign(req->secret_key, date, req->region, sts.data, signature);
	return psprintf("AWS4-HMAC-SHA256 Credential=%s/%s,SignedHeaders=%s,Signature=%s",
					req->access_key, scope, signed_headers.data, signature);
}
