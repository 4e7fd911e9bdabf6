/*-------------------------------------------------------------------------
 *
 * sql_replica.c
 *	  The SQL functions of the replica's client layer: replica_check(), a
 *	  self-test of the configured bucket, and sigv4_authorization(), the
 *	  request signer as a diagnostic (docs/DESIGN.md section 14).
 *
 * replica_check() writes to the bucket, under
 * "<prefix>/replica_check/<system id>.<pid>.<time>", and deletes what it
 * wrote: superusers only, or roles granted EXECUTE.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "base/shmem_status.h"
#include "replica/s3_config.h"
#include "replica/s3_credentials.h"
#include "replica/s3_ops.h"
#include "replica/sigv4.h"

PG_FUNCTION_INFO_V1(changestream_replica_check);
PG_FUNCTION_INFO_V1(changestream_sigv4_authorization);

#define CHECK_COLS 5
/* S3's smallest part but the last, so the check's first part has it */
#define PART1_BYTES (5 * 1024 * 1024)
#define PART2_BYTES 4096
/* clock skew that fails the check, s (S3 refuses requests at 15 min) */
#define SKEW_LIMIT_S 60

/* the state of one replica_check() run */
typedef struct CheckRun
{
	ReturnSetInfo *rsinfo;
	CsS3Config	config;
	CsS3Client *client;
	char	   *key;			/* the test object's key */
	char	   *content;		/* what was put there */
	bool		written;		/* the put succeeded */
	TimestampTz started;		/* of the check in progress */
	CsS3Response last;			/* the last response with a Date header */
} CheckRun;

static void
begin_check(CheckRun *run)
{
	run->started = GetCurrentTimestamp();
}

/* Emit one row for the check in progress. */
static void
emit(CheckRun *run, const char *name, bool ok, const char *detail,
	 const char *hint)
{
	Datum		values[CHECK_COLS];
	bool		nulls[CHECK_COLS] = {0};
	long		secs;
	int			usecs;

	TimestampDifference(run->started, GetCurrentTimestamp(), &secs, &usecs);
	values[0] = CStringGetTextDatum(name);
	values[1] = BoolGetDatum(ok);
	values[2] = CStringGetTextDatum(detail ? detail : "");
	nulls[3] = hint == NULL;
	values[3] = hint ? CStringGetTextDatum(hint) : (Datum) 0;
	values[4] = Float8GetDatum(secs * 1000.0 + usecs / 1000.0);
	tuplestore_putvalues(run->rsinfo->setResult, run->rsinfo->setDesc,
						 values, nulls);
}

/* Remember resp for the clock check if it carries a Date. */
static void
saw(CheckRun *run, const CsS3Response *resp)
{
	if (resp->date && resp->date[0])
		run->last = *resp;
}

/*
 * Emit a failed check for resp, with the usual mistakes named; returns
 * false so callers can "return fail(...)".
 */
static bool
fail(CheckRun *run, const char *name, const CsS3Response *resp,
	 const char *what)
{
	CsS3Failure f;
	char	   *hint;

	saw(run, resp);
	cs_s3_explain(resp, what, &f);
	hint = f.hint;
	if (resp->status == 0 && !run->config.path_style)
		hint = psprintf("%s Requests name the bucket in the host name (%s); a store without wildcard DNS for its buckets needs changestream.replica_uri_style = 'path'.",
						hint ? hint : "", run->config.host_header);
	emit(run, name, false, f.message, hint);
	return false;
}

/* The content of the test object: text saying who wrote it, and when. */
static char *
test_content(void)
{
	return psprintf("changestream replica_check by system %llu, pid %d, at %s\n",
					(unsigned long long) GetSystemIdentifier(), MyProcPid,
					timestamptz_to_str(GetCurrentTimestamp()));
}

static bool
check_settings(CheckRun *run)
{
	const char *problem;

	begin_check(run);
	problem = cs_s3_config_current(&run->config);
	if (problem != NULL)
	{
		emit(run, "settings", false, problem,
			 "Set changestream.replica_url (s3://bucket/prefix), and for a store other than AWS changestream.replica_endpoint, then reload.");
		return false;
	}
	emit(run, "settings", true,
		 psprintf("bucket \"%s\", prefix \"%s\", %s-style requests to %s, region %s",
				  run->config.bucket, run->config.prefix,
				  run->config.path_style ? "path" : "host",
				  run->config.base_url, run->config.region),
		 NULL);
	return true;
}

static bool
check_credentials(CheckRun *run)
{
	CsS3Credentials creds;
	CsS3CredentialsProblem problem;

	begin_check(run);
	if (!cs_s3_credentials_load(run->config.credentials, run->config.profile,
								&creds, &problem))
	{
		emit(run, "credentials", false,
			 problem.detail ? psprintf("%s: %s", problem.message, problem.detail) :
			 problem.message,
			 problem.hint);
		return false;
	}
	run->client = cs_s3_client_create(&run->config, &creds);
	emit(run, "credentials", true,
		 strcmp(run->config.credentials, "env") == 0 ?
		 psprintf("keys from the server's environment%s",
				  creds.session_token[0] ? ", with a session token" : "") :
		 psprintf("profile \"%s\" of \"%s\"%s", run->config.profile,
				  run->config.credentials,
				  creds.session_token[0] ? ", with a session token" : ""),
		 NULL);
	cs_s3_credentials_wipe(&creds);
	return true;
}

static bool
check_put(CheckRun *run)
{
	CsS3Response resp;

	begin_check(run);
	run->key = cs_s3_object_key(&run->config,
								psprintf("replica_check/%llu.%d.%lld",
										 (unsigned long long) GetSystemIdentifier(),
										 MyProcPid,
										 (long long) GetCurrentTimestamp()));
	run->content = test_content();
	cs_s3_put(run->client, run->key, run->content, strlen(run->content), false, &resp);
	if (resp.status != 200 || resp.error_code)
		return fail(run, "put", &resp, psprintf("PUT of key \"%s\"", run->key));
	saw(run, &resp);
	run->written = true;
	emit(run, "put", true, psprintf("wrote %zu bytes as \"%s\"",
									strlen(run->content), run->key), NULL);
	return true;
}

static bool
check_get(CheckRun *run)
{
	CsS3Response resp;

	begin_check(run);
	cs_s3_get(run->client, run->key, 1024 * 1024, &resp);
	if (resp.status != 200 || resp.error_code)
		return fail(run, "get", &resp, psprintf("GET of key \"%s\"", run->key));
	saw(run, &resp);
	if (resp.body_len != strlen(run->content) ||
		memcmp(resp.body, run->content, resp.body_len) != 0)
	{
		emit(run, "get", false,
			 psprintf("key \"%s\" read back as %zu bytes that differ from the %zu written",
					  run->key, resp.body_len, strlen(run->content)),
			 "Something between the server and the store changes objects (a proxy, or a transformation configured on the bucket).");
		return false;
	}
	/* a range: bytes 8 to 17 */
	cs_s3_get_range(run->client, run->key, 8, 10, &resp);
	if (resp.status != 206 || resp.error_code)
		return fail(run, "get", &resp,
					psprintf("GET of bytes 8 to 17 of key \"%s\" (a Range request)", run->key));
	if (resp.body_len != 10 || memcmp(resp.body, run->content + 8, 10) != 0)
	{
		emit(run, "get", false,
			 psprintf("bytes 8 to 17 of key \"%s\" read back as %zu bytes that differ from those written",
					  run->key, resp.body_len),
			 "The store does not honour Range requests correctly.");
		return false;
	}
	emit(run, "get", true, "read back the same bytes, whole and a range of 10 (206)", NULL);
	return true;
}

/* Whether objects holds key with size; false if not. */
static bool
listed(List *objects, const char *key, int64 size)
{
	ListCell   *lc;

	foreach(lc, objects)
	{
		CsS3Object *obj = lfirst(lc);

		if (strcmp(obj->key, key) == 0)
			return obj->size == size;
	}
	return false;
}

/*
 * The list check: a second object beside the first, then a listing in
 * pages of one key (so the IsTruncated/start-after loop runs) that must
 * show both, in key order, with their sizes.
 */
static bool
check_list(CheckRun *run)
{
	CsS3Response resp;
	List	   *objects = NIL;
	char	   *bad;
	char	   *dir = cs_s3_object_key(&run->config, "replica_check/");
	char	   *second = psprintf("%s.list", run->key);
	bool		ok;

	begin_check(run);
	cs_s3_put(run->client, second, run->content, strlen(run->content), false, &resp);
	if (resp.status != 200 || resp.error_code)
		return fail(run, "list", &resp, psprintf("PUT of key \"%s\"", second));
	if (!cs_s3_list(run->client, dir, NULL, 1, &objects, &resp, &bad))
	{
		cs_s3_delete(run->client, second, &resp);
		if (bad)
		{
			emit(run, "list", false, bad, "Check that changestream.replica_endpoint is an S3 API.");
			return false;
		}
		return fail(run, "list", &resp, psprintf("listing of prefix \"%s\"", dir));
	}
	saw(run, &resp);
	ok = listed(objects, run->key, strlen(run->content)) &&
		listed(objects, second, strlen(run->content));
	for (int i = 1; ok && i < list_length(objects); i++)
		ok = strcmp(((CsS3Object *) list_nth(objects, i - 1))->key,
					((CsS3Object *) list_nth(objects, i))->key) < 0;
	cs_s3_delete(run->client, second, &resp);
	if (!ok)
	{
		emit(run, "list", false,
			 psprintf("the listing of \"%s\" in pages of one key does not show keys \"%s\" and \"%s\" with their sizes, in order",
					  dir, run->key, second),
			 "The store's listings lag its writes, or it pages listings wrongly (max-keys, start-after); readers of the replica need listings that show what was written.");
		return false;
	}
	emit(run, "list", true,
		 psprintf("a listing of \"%s\" one key per page (%d objects) shows both test objects in order",
				  dir, list_length(objects)), NULL);
	return true;
}

/* n bytes that do not compress, from seed */
static char *
noise(size_t n, uint32 seed)
{
	char	   *buf = palloc(n);

	for (size_t i = 0; i < n; i++)
	{
		seed = seed * 1103515245 + 12345;
		buf[i] = (char) (seed >> 16);
	}
	return buf;
}

static bool
check_multipart(CheckRun *run)
{
	CsS3Response resp;
	char	   *key = psprintf("%s.multipart", run->key);
	char	   *upload_id;
	char	   *etag1;
	char	   *etag2;
	char	   *data = noise(PART1_BYTES + PART2_BYTES, (uint32) MyProcPid);
	const char *what = psprintf("multipart upload of key \"%s\"", key);
	bool		ok = false;

	begin_check(run);
	if (!cs_s3_multipart_create(run->client, key, &upload_id, &resp))
		return fail(run, "multipart", &resp, what);
	if (!cs_s3_multipart_part(run->client, key, upload_id, 1, data, PART1_BYTES, &etag1, &resp))
		fail(run, "multipart", &resp, psprintf("upload of part 1 of key \"%s\"", key));
	else if (!cs_s3_multipart_part(run->client, key, upload_id, 2, data + PART1_BYTES,
								   PART2_BYTES, &etag2, &resp))
		fail(run, "multipart", &resp, psprintf("upload of part 2 of key \"%s\"", key));
	else if (!cs_s3_multipart_complete(run->client, key, upload_id,
									   list_make2(etag1, etag2), &resp))
		fail(run, "multipart", &resp, psprintf("completion of the %s", what));
	else
		ok = true;
	if (!ok)
	{
		/* the completion may have taken effect though its answer failed */
		cs_s3_multipart_abort(run->client, key, upload_id, &resp);
		cs_s3_delete(run->client, key, &resp);
		return false;
	}
	cs_s3_get(run->client, key, PART1_BYTES + PART2_BYTES, &resp);
	if (resp.status != 200 || resp.error_code)
		ok = fail(run, "multipart", &resp, psprintf("GET of key \"%s\"", key));
	else if (resp.body_len != PART1_BYTES + PART2_BYTES ||
			 memcmp(resp.body, data, resp.body_len) != 0)
	{
		emit(run, "multipart", false,
			 psprintf("key \"%s\" read back as %zu bytes that differ from the %d uploaded in 2 parts",
					  key, resp.body_len, PART1_BYTES + PART2_BYTES),
			 "The store does not assemble multipart uploads correctly.");
		ok = false;
	}
	else
		emit(run, "multipart", true,
			 psprintf("uploaded %d bytes in 2 parts, completed, read back equal",
					  PART1_BYTES + PART2_BYTES), NULL);
	cs_s3_delete(run->client, key, &resp);
	return ok;
}

static bool
check_conditional_put(CheckRun *run)
{
	CsS3Response resp;

	begin_check(run);
	cs_s3_put(run->client, run->key, run->content, strlen(run->content), true, &resp);
	saw(run, &resp);
	if (resp.status == 412)
	{
		emit(run, "conditional put", true,
			 "a PUT with If-None-Match: * on the existing key was refused (412)", NULL);
		return true;
	}
	if (resp.status == 200 && resp.error_code == NULL)
	{
		emit(run, "conditional put", true,
			 "not supported: the store ignored If-None-Match: * and overwrote the object",
			 "The replica works without it, but the store cannot then refuse a second cluster writing to the same prefix; changestream's marker check does it alone.");
		return true;
	}
	return fail(run, "conditional put", &resp,
				psprintf("conditional PUT of key \"%s\"", run->key));
}

static bool
check_delete(CheckRun *run)
{
	CsS3Response resp;

	begin_check(run);
	cs_s3_delete(run->client, run->key, &resp);
	if (resp.status != 204 && resp.status != 200)
		return fail(run, "delete", &resp, psprintf("DELETE of key \"%s\"", run->key));
	saw(run, &resp);
	cs_s3_head(run->client, run->key, &resp);
	if (resp.status != 404)
	{
		if (resp.status == 200)
		{
			emit(run, "delete", false,
				 psprintf("key \"%s\" is still there after its DELETE", run->key),
				 "The store keeps deleted objects (versioning or object lock?); retention could then not free space in the bucket.");
			return false;
		}
		return fail(run, "delete", &resp, psprintf("HEAD of key \"%s\"", run->key));
	}
	emit(run, "delete", true, "deleted the object; a HEAD then found nothing (404)", NULL);
	return true;
}

static void
check_clock(CheckRun *run)
{
	bool		known;
	double		skew;

	begin_check(run);
	skew = cs_s3_clock_skew_s(&run->last, &known);
	if (!known)
	{
		emit(run, "clock skew", false, "no response carried a Date header",
			 "Check that changestream.replica_endpoint is an S3 API.");
		return;
	}
	emit(run, "clock skew", fabs(skew) <= SKEW_LIMIT_S,
		 psprintf("the server's clock is %.0f s %s the object store's (whole seconds; S3 refuses requests more than 15 minutes off)",
				  fabs(skew), skew >= 0 ? "ahead of" : "behind"),
		 fabs(skew) <= SKEW_LIMIT_S ? NULL :
		 "Synchronize the server's clock (NTP).");
}

/*
 * changestream.replica_check()
 *	  Returns setof (check_name text, ok boolean, detail text, hint text,
 *	  elapsed_ms double precision): a self-test of the replica's bucket,
 *	  one row per check, in order: settings, credentials, put, get, list,
 *	  multipart, conditional put, delete, clock skew.  A failed check ends
 *	  the run (the clock is still checked once the store has answered);
 *	  detail says what happened, hint what to do.  The objects it writes
 *	  under "<prefix>/replica_check/" are deleted.
 *	  Errors: 55000 if changestream is not in shared_preload_libraries;
 *	  57014 when cancelled (the request in flight is abandoned).
 */
Datum
changestream_replica_check(PG_FUNCTION_ARGS)
{
	CheckRun	run;

	cs_status_require_loaded();
	InitMaterializedSRF(fcinfo, 0);
	memset(&run, 0, sizeof(run));
	run.rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	if (!check_settings(&run) || !check_credentials(&run))
		return (Datum) 0;
	if (check_put(&run) && check_get(&run) && check_list(&run) &&
		check_multipart(&run) && check_conditional_put(&run))
		(void) check_delete(&run);
	else
	{
		CsS3Response resp;

		if (run.written)
			cs_s3_delete(run.client, run.key, &resp);
	}
	if (run.last.date)
		check_clock(&run);
	return (Datum) 0;
}

/* query text "a=1&b" as decoded pairs */
static int
parse_query(char *query, CsSigV4Pair **pairs)
{
	int			n = 0;
	char	   *tok;
	char	   *save;

	*pairs = palloc0(sizeof(CsSigV4Pair) * (strlen(query) / 2 + 2));
	for (tok = strtok_r(query, "&", &save); tok; tok = strtok_r(NULL, "&", &save))
	{
		char	   *eq = strchr(tok, '=');

		if (eq)
			*eq = '\0';
		(*pairs)[n].name = tok;
		(*pairs)[n].value = eq ? eq + 1 : "";
		n++;
	}
	return n;
}

/* headers text[] of "name:value" as pairs */
static int
parse_headers(ArrayType *arr, CsSigV4Pair **pairs)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	*pairs = palloc0(sizeof(CsSigV4Pair) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		char	   *h;
		char	   *colon;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("a header may not be NULL")));
		h = TextDatumGetCString(elems[i]);
		colon = strchr(h, ':');
		if (colon == NULL || colon == h)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("header \"%s\" is not \"name:value\"", h)));
		*colon = '\0';
		(*pairs)[i].name = h;
		(*pairs)[i].value = colon + 1;
	}
	return n;
}

/*
 * changestream.sigv4_authorization(method text, path text, query text,
 *		headers text[], payload_sha256 text, amz_date text, region text,
 *		access_key text, secret_key text) -> text
 *	  The Authorization header value AWS Signature Version 4 gives an S3
 *	  request (sigv4.c): path decoded ("/test$file.text"), query decoded
 *	  "name=value" pairs joined by '&' ("" for none; "lifecycle" is
 *	  "lifecycle="), headers as "name:value" (host, x-amz-date and
 *	  x-amz-content-sha256 among them: every header given is signed).  A
 *	  test and diagnostic aid: the regression test checks it against AWS's
 *	  published examples.  Its arguments include a secret key, which the
 *	  server may log with the statement: use it with test keys only.
 *	  Superusers only.
 */
Datum
changestream_sigv4_authorization(PG_FUNCTION_ARGS)
{
	CsSigV4Request req;
	CsSigV4Pair *query;
	CsSigV4Pair *headers;

	memset(&req, 0, sizeof(req));
	req.method = text_to_cstring(PG_GETARG_TEXT_PP(0));
	req.path = text_to_cstring(PG_GETARG_TEXT_PP(1));
	req.nquery = parse_query(text_to_cstring(PG_GETARG_TEXT_PP(2)), &query);
	req.query = query;
	req.nheaders = parse_headers(PG_GETARG_ARRAYTYPE_P(3), &headers);
	req.headers = headers;
	req.payload_sha256 = text_to_cstring(PG_GETARG_TEXT_PP(4));
	req.amz_date = text_to_cstring(PG_GETARG_TEXT_PP(5));
	req.region = text_to_cstring(PG_GETARG_TEXT_PP(6));
	req.access_key = text_to_cstring(PG_GETARG_TEXT_PP(7));
	req.secret_key = text_to_cstring(PG_GETARG_TEXT_PP(8));
	if (req.path[0] != '/')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("path \"%s\" does not begin with \"/\"", req.path)));
	PG_RETURN_TEXT_P(cstring_to_text(cs_sigv4_authorization(&req)));
}
