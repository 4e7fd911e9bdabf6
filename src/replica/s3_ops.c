/*-------------------------------------------------------------------------
 *
 * s3_ops.c
 *	  The S3 operations the replica uses, over one request each
 *	  (s3_request.c): PUT (optionally If-None-Match: *), GET, HEAD, DELETE,
 *	  ListObjectsV2 (start-after, looping while IsTruncated) and multipart
 *	  uploads (create, upload a part, complete, abort); and the one
 *	  classification of a failed request (docs/DESIGN.md section 14):
 *
 *	  - retryable: no response (connection refused or reset, timeout,
 *	    stall), 5xx, 408, 429, and the codes SlowDown, RequestTimeout,
 *	    InternalError, ServiceUnavailable, ExpiredToken (temporary keys
 *	    that expired: re-read the credentials and retry);
 *	  - configuration: AccessDenied, InvalidAccessKeyId,
 *	    SignatureDoesNotMatch, RequestTimeTooSkewed (with the skew, from
 *	    the response's Date header), NoSuchBucket, a wrong region
 *	    (AuthorizationHeaderMalformed, PermanentRedirect, 301), each with a
 *	    plain hint;
 *	  - failed: anything else (NoSuchKey, 412 PreconditionFailed, a body
 *	    over its bound): the request itself is wrong, the caller decides.
 *
 * Responses are untrusted input: the XML is read by s3_xml.c within the
 * body's bounds, sizes are checked to be numbers, and a listing that does
 * not advance is an error naming the prefix, never a loop.
 *
 * Source: the Amazon S3 API reference (ListObjectsV2,
 * CreateMultipartUpload, UploadPart, CompleteMultipartUpload,
 * AbortMultipartUpload, "Error responses").
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>
#include <time.h>

#include "lib/stringinfo.h"

#include "replica/s3_ops.h"
#include "replica/s3_xml.h"

/* bounds on one listing, against a store that never stops paging */
#define CS_S3_LIST_MAX_PAGES 100000
#define CS_S3_LIST_MAX_KEYS 10000000

#define SMALL_RESPONSE (64 * 1024)

/* one error code and what it means */
typedef struct ErrorCodeRule
{
	const char *code;
	CsS3ErrorClass class;
	const char *hint;
} ErrorCodeRule;

static const ErrorCodeRule error_rules[] = {
	{"SlowDown", CS_S3_RETRYABLE, NULL},
	{"RequestTimeout", CS_S3_RETRYABLE, NULL},
	{"InternalError", CS_S3_RETRYABLE, NULL},
	{"ServiceUnavailable", CS_S3_RETRYABLE, NULL},
	{"ExpiredToken", CS_S3_RETRYABLE,
	"The session token expired: write fresh temporary keys into the credentials file; they are read again when it changes."},
	{"AccessDenied", CS_S3_CONFIG,
	"The keys were accepted but may not do this: give them s3:PutObject, s3:GetObject, s3:DeleteObject and s3:ListBucket on the bucket and prefix."},
	{"InvalidAccessKeyId", CS_S3_CONFIG,
	"The store does not know the access key id: check aws_access_key_id in the credentials file (and changestream.replica_profile), or that changestream.replica_endpoint is the store the keys belong to."},
	{"SignatureDoesNotMatch", CS_S3_CONFIG,
	"The secret key is wrong for this access key id (check aws_secret_access_key), or something between the server and the store rewrites requests; with a proxy or a store without virtual hosts, try changestream.replica_uri_style = 'path'."},
	{"RequestTimeTooSkewed", CS_S3_CONFIG,
	"Synchronize the server's clock (NTP): S3 refuses requests more than 15 minutes off its own time."},
	{"NoSuchBucket", CS_S3_CONFIG,
	"Create the bucket, or correct its name in changestream.replica_url; check that changestream.replica_endpoint and changestream.replica_region are the bucket's."},
	{"AuthorizationHeaderMalformed", CS_S3_CONFIG,
	"The bucket is in another region: set changestream.replica_region to the bucket's region."},
	{"PermanentRedirect", CS_S3_CONFIG,
	"The bucket is in another region: set changestream.replica_region to the bucket's region (and changestream.replica_endpoint, if set)."},
	{"InvalidBucketName", CS_S3_CONFIG,
	"The store refuses the bucket name in changestream.replica_url."},
};

/* days since 1970-01-01 of a civil date (proleptic Gregorian) */
static int64
days_from_civil(int y, int m, int d)
{
	int64		era;
	int			yoe;
	int			doy;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
}

/*
 * cs_s3_clock_skew_s(resp, known) -> seconds
 *	  How far the local clock is ahead of the store's (negative: behind),
 *	  from the response's Date header ("Sun, 06 Nov 1994 08:49:37 GMT",
 *	  RFC 9110's IMF-fixdate) against the local clock when that header
 *	  arrived (whole seconds, so +-1 s is noise).  *known is false when the
 *	  response had no such header.
 */
double
cs_s3_clock_skew_s(const CsS3Response *resp, bool *known)
{
	static const char *months = "JanFebMarAprMayJunJulAugSepOctNovDec";
	char		mon[4];
	int			d,
				y,
				hh,
				mm,
				ss;
	int			month;
	int64		store;

	*known = false;
	if (resp->date == NULL ||
		sscanf(resp->date, "%*3s, %2d %3s %4d %2d:%2d:%2d GMT",
			   &d, mon, &y, &hh, &mm, &ss) != 6)
		return 0;
	mon[3] = '\0';
	for (month = 0; month < 12; month++)
		if (strlen(mon) == 3 && strncmp(months + 3 * month, mon, 3) == 0)
			break;
	if (month == 12 || d < 1 || d > 31 || y < 1970 || y > 9999 ||
		hh < 0 || hh > 23 || mm < 0 || mm > 59 || ss < 0 || ss > 60)
		return 0;
	store = days_from_civil(y, month + 1, d) * 86400 +
		hh * 3600 + mm * 60 + ss;
	*known = true;
	return (double) ((int64) resp->date_received - store);
}

/* The rule for code, or NULL. */
static const ErrorCodeRule *
rule_for(const char *code)
{
	if (code == NULL)
		return NULL;
	for (int i = 0; i < lengthof(error_rules); i++)
		if (strcmp(error_rules[i].code, code) == 0)
			return &error_rules[i];
	return NULL;
}

/*
 * cs_s3_classify(resp, what, failure) -> the class
 *	  Classify a response; for anything but CS_S3_OK, failure gets a
 *	  message naming what (the request and key, e.g. "PUT of key \"a/b\"")
 *	  and the store's error code, and a hint where one is plain.  A 200
 *	  whose body is an <Error> (CompleteMultipartUpload may answer so) is a
 *	  failure by its code.
 */
CsS3ErrorClass
cs_s3_classify(const CsS3Response *resp, const char *what, CsS3Failure *failure)
{
	const ErrorCodeRule *rule = rule_for(resp->error_code);
	const char *code = resp->error_code;

	memset(failure, 0, sizeof(*failure));
	if (resp->too_large)
	{
		failure->class = CS_S3_FAILED;
		failure->message = psprintf("the response to the %s is larger than expected", what);
		failure->hint = pstrdup("The object store sent more than the request can hold; check that changestream.replica_endpoint is an S3 API.");
		return failure->class;
	}
	if (resp->status == 0 && resp->status_seen > 0)
	{
		failure->class = CS_S3_RETRYABLE;
		failure->message = psprintf("the response to the %s broke off after HTTP %ld: %s",
									what, resp->status_seen,
									resp->transport_error ? resp->transport_error : "unknown error");
		failure->hint = pstrdup("The connection to the object store failed in the middle of an answer; check the network and the store's logs.");
		return failure->class;
	}
	if (resp->status == 0)
	{
		failure->class = CS_S3_RETRYABLE;
		failure->message = psprintf("no response to the %s: %s", what,
									resp->transport_error ? resp->transport_error : "unknown error");
		failure->hint = pstrdup("Check that changestream.replica_endpoint is right and the object store is reachable from the server.");
		return failure->class;
	}
	if (resp->status >= 200 && resp->status < 300 && code == NULL)
		return CS_S3_OK;

	if (code == NULL)
		code = resp->status == 404 ? "NoSuchKey" :
			resp->status == 403 ? "AccessDenied" :
			resp->status == 412 ? "PreconditionFailed" :
			resp->status == 301 ? "PermanentRedirect" : NULL;
	if (rule == NULL)
		rule = rule_for(code);
	if (rule != NULL)
		failure->class = rule->class;
	else if (resp->status >= 500 || resp->status == 408 || resp->status == 429 ||
			 resp->status < 200)
		failure->class = CS_S3_RETRYABLE;
	else
		failure->class = CS_S3_FAILED;
	failure->hint = rule && rule->hint ? pstrdup(rule->hint) : NULL;

	if (code && strcmp(code, "RequestTimeTooSkewed") == 0)
	{
		bool		known;
		double		skew = cs_s3_clock_skew_s(resp, &known);

		failure->message = known ?
			psprintf("the %s was refused: RequestTimeTooSkewed, the server's clock is %.0f s %s the object store's",
					 what, fabs(skew), skew >= 0 ? "ahead of" : "behind") :
			psprintf("the %s was refused: RequestTimeTooSkewed", what);
	}
	else
		failure->message = psprintf("the %s failed: HTTP %ld%s%s%s%s", what, resp->status,
									code ? " " : "", code ? code : "",
									resp->error_message ? ": " : "",
									resp->error_message ? resp->error_message : "");
	return failure->class;
}

/*
 * cs_s3_explain(resp, what, failure) -> the class
 *	  cs_s3_classify() for a response its caller cannot use: failure
 *	  always gets a message, for a response that classifies as CS_S3_OK
 *	  (an answer the request does not expect) "the WHAT got an unexpected
 *	  answer: HTTP N" with no hint.  The class is returned unchanged.
 */
CsS3ErrorClass
cs_s3_explain(const CsS3Response *resp, const char *what, CsS3Failure *failure)
{
	CsS3ErrorClass class = cs_s3_classify(resp, what, failure);

	if (class == CS_S3_OK)
	{
		failure->message = psprintf("the %s got an unexpected answer: HTTP %ld",
									what, resp->status);
		failure->hint = NULL;
	}
	return class;
}

/*
 * cs_s3_class_sqlstate(class) -> the SQLSTATE of a failure of that class
 *	  08006 (connection_failure) for one worth retrying, F0000
 *	  (config_file_error) for a configuration the store refuses, 38000
 *	  (external_routine_exception) for any other.
 */
int
cs_s3_class_sqlstate(CsS3ErrorClass class)
{
	return class == CS_S3_RETRYABLE ? ERRCODE_CONNECTION_FAILURE :
		class == CS_S3_CONFIG ? ERRCODE_CONFIG_FILE_ERROR :
		ERRCODE_EXTERNAL_ROUTINE_EXCEPTION;
}

/* A request for key with method, the body and bound given. */
static void
simple_request(CsS3Request *req, const char *method, const char *key,
			   const char *data, size_t len, size_t max)
{
	memset(req, 0, sizeof(*req));
	req->method = method;
	req->key = key;
	req->body = data;
	req->body_len = len;
	req->max_response = max;
}

/*
 * cs_s3_put(client, key, data, len, if_none_match, resp)
 *	  PUT len bytes at data as key; with if_none_match, only if no such
 *	  object exists (a store that honours it answers 412 otherwise).
 */
void
cs_s3_put(CsS3Client *client, const char *key, const char *data, size_t len,
		  bool if_none_match, CsS3Response *resp)
{
	CsS3Request req;

	simple_request(&req, "PUT", key, data, len, SMALL_RESPONSE);
	if (if_none_match)
		cs_s3_request_add_header(&req, "if-none-match", "*");
	cs_s3_perform(client, &req, resp);
}

/*
 * cs_s3_get(client, key, max, resp)
 *	  GET key; a body over max bytes fails (resp->too_large).
 */
void
cs_s3_get(CsS3Client *client, const char *key, size_t max, CsS3Response *resp)
{
	CsS3Request req;

	simple_request(&req, "GET", key, NULL, 0, max);
	cs_s3_perform(client, &req, resp);
}

/*
 * cs_s3_get_to_file(client, key, fd, max, resp)
 *	  GET key, its body streamed to the open file fd (written from its
 *	  current position; resp->file_bytes says how much) instead of memory,
 *	  so an object of any size takes a bounded buffer; an error answer's
 *	  body stays in resp->body.  A body over max bytes fails
 *	  (resp->too_large); a local write failure raises (file access
 *	  SQLSTATE).
 */
void
cs_s3_get_to_file(CsS3Client *client, const char *key, int fd, size_t max,
				  CsS3Response *resp)
{
	CsS3Request req;

	simple_request(&req, "GET", key, NULL, 0, max);
	req.to_file = true;
	req.body_fd = fd;
	cs_s3_perform(client, &req, resp);
}

/*
 * cs_s3_get_to_file_start(client, key, fd, max) -> CsS3Transfer *
 *	  cs_s3_get_to_file() without waiting: the GET moves on whenever the
 *	  client waits; cs_s3_finish() gives its response (fd must stay open
 *	  until then), cs_s3_cancel() drops it.
 */
CsS3Transfer *
cs_s3_get_to_file_start(CsS3Client *client, const char *key, int fd,
						size_t max)
{
	CsS3Request req;

	simple_request(&req, "GET", key, NULL, 0, max);
	req.to_file = true;
	req.body_fd = fd;
	return cs_s3_start(client, &req);
}

/*
 * cs_s3_get_range(client, key, offset, length, resp)
 *	  GET length bytes of key from byte offset (Range: bytes=a-b; a store
 *	  answers 206).  length must be at least 1; the body is bounded by it.
 */
void
cs_s3_get_range(CsS3Client *client, const char *key, uint64 offset,
				uint64 length, CsS3Response *resp)
{
	CsS3Request req;

	Assert(length > 0);
	simple_request(&req, "GET", key, NULL, 0, (size_t) length);
	cs_s3_request_add_header(&req, "range",
							 psprintf("bytes=" UINT64_FORMAT "-" UINT64_FORMAT,
									  offset, offset + length - 1));
	cs_s3_perform(client, &req, resp);
}

/* cs_s3_head(client, key, resp): HEAD key (status 200 or 404). */
void
cs_s3_head(CsS3Client *client, const char *key, CsS3Response *resp)
{
	CsS3Request req;

	simple_request(&req, "HEAD", key, NULL, 0, SMALL_RESPONSE);
	cs_s3_perform(client, &req, resp);
}

/* cs_s3_delete(client, key, resp): DELETE key (204 even when absent). */
void
cs_s3_delete(CsS3Client *client, const char *key, CsS3Response *resp)
{
	CsS3Request req;

	simple_request(&req, "DELETE", key, NULL, 0, SMALL_RESPONSE);
	cs_s3_perform(client, &req, resp);
}

/*
 * The ETag of a listing's Contents entry, its quotes removed (S3 sends
 * "&quot;...&quot;"); NULL when there is none, or it is empty, too long
 * or holds white space: such an object is simply not known by its ETag.
 */
static char *
listed_etag(CsXmlSpan entry)
{
	CsXmlSpan	field;
	char	   *etag;
	size_t		len;

	if (!cs_xml_find(entry.start, entry.len, "ETag", &field) ||
		(etag = cs_xml_text(field, 256)) == NULL)
		return NULL;
	len = strlen(etag);
	if (len >= 2 && etag[0] == '"' && etag[len - 1] == '"')
	{
		etag[len - 1] = '\0';
		etag++;
	}
	if (etag[0] == '\0' || strpbrk(etag, " \t\r\n") != NULL)
		return NULL;
	return etag;
}

/*
 * Append the objects of one ListObjectsV2 page to *objects; *truncated
 * from IsTruncated.  NULL, or a sentence saying what is wrong with it.
 */
static const char *
parse_list_page(const CsS3Response *resp, List **objects, bool *truncated)
{
	const char *p = resp->body;
	const char *end = resp->body + resp->body_len;
	CsXmlSpan	span;
	char	   *text;

	*truncated = false;
	if (!cs_xml_find(p, end - p, "ListBucketResult", &span))
		return "it is not a ListBucketResult";
	p = span.start;
	end = span.start + span.len;
	if (cs_xml_find(p, end - p, "IsTruncated", &span))
	{
		text = cs_xml_text(span, 8);
		if (text == NULL || (strcmp(text, "true") != 0 && strcmp(text, "false") != 0))
			return "its IsTruncated is neither true nor false";
		*truncated = strcmp(text, "true") == 0;
	}
	while (cs_xml_find(p, end - p, "Contents", &span))
	{
		CsXmlSpan	field;
		CsS3Object *obj = palloc0(sizeof(CsS3Object));
		char	   *endptr;

		if (!cs_xml_find(span.start, span.len, "Key", &field) ||
			(obj->key = cs_xml_text(field, 1024)) == NULL || obj->key[0] == '\0')
			return "an entry has no valid Key";
		if (!cs_xml_find(span.start, span.len, "Size", &field) ||
			(text = cs_xml_text(field, 20)) == NULL || text[0] < '0' || text[0] > '9')
			return psprintf("the Size of key \"%s\" is not a number", obj->key);
		errno = 0;
		obj->size = strtoll(text, &endptr, 10);
		if (errno != 0 || *endptr != '\0')
			return psprintf("the Size of key \"%s\" is not a number", obj->key);
		obj->etag = listed_etag(span);
		*objects = lappend(*objects, obj);
		p = span.start + span.len;
	}
	return NULL;
}

/*
 * cs_s3_list(client, prefix, start_after, max_keys, objects, resp,
 *			   bad_response) -> bool
 *	  Every object whose key begins with prefix and sorts after
 *	  start_after (NULL: from the start), in key order, appended to
 *	  *objects (CsS3Object *): ListObjectsV2 pages of up to max_keys keys
 *	  (0: the store's default, 1000 on S3),
 *	  the next one starting after the last key seen, while IsTruncated.
 *	  False when a request fails (resp holds it) or a page is malformed,
 *	  lists a key without the prefix, or the listing runs past
 *	  CS_S3_LIST_MAX_PAGES pages or CS_S3_LIST_MAX_KEYS keys (*bad_response
 *	  says how, naming the prefix; resp's status is 2xx).
 */
bool
cs_s3_list(CsS3Client *client, const char *prefix, const char *start_after,
		   int max_keys, List **objects, CsS3Response *resp, char **bad_response)
{
	char	   *after = start_after ? pstrdup(start_after) : NULL;
	int			pages = 0;

	*bad_response = NULL;
	for (;;)
	{
		CsS3Request req;
		CsSigV4Pair query[4];
		int			n = 0;
		bool		truncated;
		int			before = list_length(*objects);
		const char *problem;
		CsS3Failure failure;

		query[n].name = "list-type";
		query[n++].value = "2";
		query[n].name = "prefix";
		query[n++].value = prefix;
		if (after)
		{
			query[n].name = "start-after";
			query[n++].value = after;
		}
		if (max_keys > 0)
		{
			query[n].name = "max-keys";
			query[n++].value = psprintf("%d", max_keys);
		}
		simple_request(&req, "GET", NULL, NULL, 0, CS_S3_SMALL_RESPONSE);
		req.query = query;
		req.nquery = n;
		cs_s3_perform(client, &req, resp);
		if (cs_s3_classify(resp, "listing", &failure) != CS_S3_OK)
			return false;
		problem = parse_list_page(resp, objects, &truncated);
		for (int i = before; problem == NULL && i < list_length(*objects); i++)
		{
			const char *key = ((CsS3Object *) list_nth(*objects, i))->key;

			if (strncmp(key, prefix, strlen(prefix)) != 0)
				problem = psprintf("it lists key \"%s\", which does not begin with the prefix", key);
		}
		if (problem == NULL && truncated &&
			(++pages >= CS_S3_LIST_MAX_PAGES ||
			 list_length(*objects) >= CS_S3_LIST_MAX_KEYS))
			problem = psprintf("it goes on past %d pages or %d keys",
							   CS_S3_LIST_MAX_PAGES, CS_S3_LIST_MAX_KEYS);
		if (problem == NULL && truncated)
		{
			CsS3Object *last;

			if (list_length(*objects) == before)
				problem = "it is truncated but lists no key";
			else if (after &&
					 strcmp((last = llast(*objects))->key, after) <= 0)
				problem = "it does not advance past its start-after key";
		}
		if (problem != NULL)
		{
			*bad_response = psprintf("invalid listing of prefix \"%s\" from the object store: %s",
									 prefix, problem);
			return false;
		}
		if (!truncated)
			return true;
		after = ((CsS3Object *) llast(*objects))->key;
	}
}

/*
 * cs_s3_multipart_create(client, key, upload_id, resp) -> bool
 *	  Start a multipart upload of key; its UploadId into *upload_id.
 */
bool
cs_s3_multipart_create(CsS3Client *client, const char *key, char **upload_id,
					   CsS3Response *resp)
{
	CsS3Request req;
	CsSigV4Pair query[1] = {{"uploads", ""}};
	CsXmlSpan	span;

	simple_request(&req, "POST", key, NULL, 0, SMALL_RESPONSE);
	req.query = query;
	req.nquery = 1;
	cs_s3_perform(client, &req, resp);
	*upload_id = NULL;
	if (resp->status != 200 || resp->error_code)
		return false;
	if (cs_xml_find(resp->body, resp->body_len, "UploadId", &span))
		*upload_id = cs_xml_text(span, 1024);
	return *upload_id != NULL && (*upload_id)[0] != '\0';
}

/*
 * cs_s3_multipart_part(client, key, upload_id, part, data, len, etag,
 *						resp) -> bool
 *	  Upload part number part (1-based; every part but the last must be
 *	  at least 5 MiB on S3); its ETag into *etag.
 */
bool
cs_s3_multipart_part(CsS3Client *client, const char *key, const char *upload_id,
					 int part, const char *data, size_t len, char **etag,
					 CsS3Response *resp)
{
	CsS3Request req;
	CsSigV4Pair query[2];

	query[0].name = "partNumber";
	query[0].value = psprintf("%d", part);
	query[1].name = "uploadId";
	query[1].value = upload_id;
	simple_request(&req, "PUT", key, data, len, SMALL_RESPONSE);
	req.query = query;
	req.nquery = 2;
	cs_s3_perform(client, &req, resp);
	*etag = resp->etag ? pstrdup(resp->etag) : NULL;
	return resp->status == 200 && resp->error_code == NULL &&
		*etag != NULL && (*etag)[0] != '\0';
}

/* Append s to buf with XML's special characters escaped. */
static void
append_xml_escaped(StringInfo buf, const char *s)
{
	for (; *s; s++)
	{
		if (*s == '&')
			appendStringInfoString(buf, "&amp;");
		else if (*s == '<')
			appendStringInfoString(buf, "&lt;");
		else if (*s == '>')
			appendStringInfoString(buf, "&gt;");
		else
			appendStringInfoChar(buf, *s);
	}
}

/*
 * cs_s3_multipart_complete(client, key, upload_id, etags, resp) -> bool
 *	  Complete the upload from its parts' ETags (char *, part 1 first).
 *	  A 200 whose body is an <Error> is a failure (resp->error_code).
 */
bool
cs_s3_multipart_complete(CsS3Client *client, const char *key,
						 const char *upload_id, List *etags, CsS3Response *resp)
{
	CsS3Request req;
	CsSigV4Pair query[1];
	StringInfoData body;
	ListCell   *lc;
	CsXmlSpan	span;

	initStringInfo(&body);
	appendStringInfoString(&body, "<CompleteMultipartUpload>");
	foreach(lc, etags)
	{
		appendStringInfo(&body, "<Part><PartNumber>%d</PartNumber><ETag>",
						 foreach_current_index(lc) + 1);
		append_xml_escaped(&body, lfirst(lc));
		appendStringInfoString(&body, "</ETag></Part>");
	}
	appendStringInfoString(&body, "</CompleteMultipartUpload>");
	query[0].name = "uploadId";
	query[0].value = upload_id;
	simple_request(&req, "POST", key, body.data, body.len, SMALL_RESPONSE);
	req.query = query;
	req.nquery = 1;
	cs_s3_perform(client, &req, resp);
	return resp->status == 200 && resp->error_code == NULL &&
		cs_xml_find(resp->body, resp->body_len, "CompleteMultipartUploadResult", &span);
}

/* cs_s3_multipart_abort(client, key, upload_id, resp): abort the upload. */
void
cs_s3_multipart_abort(CsS3Client *client, const char *key,
					  const char *upload_id, CsS3Response *resp)
{
	CsS3Request req;
	CsSigV4Pair query[1];

	query[0].name = "uploadId";
	query[0].value = upload_id;
	simple_request(&req, "DELETE", key, NULL, 0, SMALL_RESPONSE);
	req.query = query;
	req.nquery = 1;
	cs_s3_perform(client, &req, resp);
}
