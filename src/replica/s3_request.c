/*-------------------------------------------------------------------------
 *
 * s3_request.c
 *	  One S3 request: signed (sigv4.c), sent with libcurl's multi
 *	  interface, and waited for in PostgreSQL's own wait loop, so no call
 *	  blocks where SIGTERM, a reload or a query cancel cannot reach it.
 *
 * The wait loop (wait_round()): curl says which sockets it wants through
 * CURLMOPT_SOCKETFUNCTION and when it next wants to run through
 * CURLMOPT_TIMERFUNCTION; each round builds a WaitEventSet of the latch,
 * postmaster death and those sockets, waits at most a second, hands curl
 * what is ready (curl_multi_socket_action()), and runs
 * CHECK_FOR_INTERRUPTS().  An ERROR there (a cancel, SIGTERM) unwinds
 * through PG_FINALLY, which removes and frees the transfer, its header
 * list, its buffers and the wait event set; the multi handle and its
 * connection cache are freed by a reset callback of the memory context
 * the client lives in.  So no ERROR leaks a handle or a socket.
 *
 * Several transfers can run at once on one client: cs_s3_start() begins
 * one without waiting (the readers' prefetch, docs/DESIGN.md section 16),
 * and every wait of the client (cs_s3_perform(), cs_s3_finish(),
 * cs_s3_progress()) moves all of them on.  Each started transfer is on the
 * client's list until it is finished or cancelled, and the client's reset
 * callback frees those still there, so a transfer abandoned by an ERROR
 * is freed with its client.
 *
 * curl's callbacks only copy into buffers bounded in size (the body by
 * the request's max_response, or 64 kB for an error answer; a header by
 * its field) and record state:
 * no ereport, no palloc, no interrupt processing.  Signals: CURLOPT_NOSIGNAL
 * keeps curl off SIGALRM and SIGPIPE; Debian's libcurl resolves names in
 * a thread, and a new thread inherits its creator's signal mask, so every
 * call into curl that may start one runs with all signals blocked
 * (curl_call_begin()/curl_call_end()), and PostgreSQL's signals land on the
 * backend's own thread.  A transfer that stalls (no byte for
 * CS_S3_STALL_S seconds) or does not connect within CS_S3_CONNECT_S fails
 * as timed out, a retryable error.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#include <unistd.h>
#include <curl/curl.h>

#include "lib/ilist.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "base/compat.h"
#include "replica/s3_request.h"
#include "replica/s3_xml.h"

#define CS_S3_CONNECT_S 10
#define CS_S3_STALL_S 30
#define CS_S3_MAX_SOCKETS 8
#define CS_S3_HEADER_MAX 200
#define CS_S3_ERROR_BODY_MAX (64 * 1024)

/* a socket curl asked to be watched */
typedef struct WatchedSocket
{
	curl_socket_t fd;
	int			what;			/* CURL_POLL_IN, _OUT, _INOUT */
} WatchedSocket;

/* a response body being received: malloc'd, so callbacks never raise */
typedef struct BodyBuffer
{
	CURL	   *easy;			/* the transfer, for its status */
	char	   *data;
	size_t		len;
	size_t		cap;
	size_t		max;
	bool		too_large;
	bool		out_of_memory;
	int			fd;				/* a 2xx body goes here when >= 0 */
	size_t		written;		/* bytes written to fd */
	int			write_errno;	/* what writing to fd failed with */
} BodyBuffer;

/* a request body being sent */
typedef struct UploadSource
{
	const char *data;
	size_t		len;
	size_t		pos;
} UploadSource;

/* headers captured from the response */
typedef struct CapturedHeaders
{
	char		date[CS_S3_HEADER_MAX];
	pg_time_t	date_received;	/* local clock when the Date arrived */
	char		etag[CS_S3_HEADER_MAX];
} CapturedHeaders;

struct CsS3Client
{
	CsS3Config	config;
	CsS3Credentials creds;
	CURLM	   *multi;
	WatchedSocket sockets[CS_S3_MAX_SOCKETS];
	int			nsockets;
	bool		sockets_overflow;	/* more sockets than the array holds */
	long		timer_ms;		/* curl's timer: -1 none, else ms from timer_set */
	TimestampTz timer_set;
	MemoryContext cxt;			/* the context the client lives in */
	dlist_head	transfers;		/* CsS3Transfer: started, not yet freed */
};

/* a transfer under way, and everything it holds until transfer_release() */
struct CsS3Transfer
{
	dlist_node	node;			/* in the client's transfers */
	CsS3Client *client;
	CURL	   *easy;
	struct curl_slist *volatile headers;
	bool		added;			/* in the multi handle */
	bool		done;			/* curl reported its end */
	CURLcode	result;			/* and its result */
	char		method[8];		/* GET, HEAD, PUT, POST, DELETE */
	BodyBuffer	body;
	UploadSource upload;
	CapturedHeaders captured;
	char		errbuf[CURL_ERROR_SIZE];
	TimestampTz start;
};

static bool curl_initialized = false;

static void free_headers(struct curl_slist *list);

/*
 * Block every signal around a call into curl that may start a resolver
 * thread, so the thread inherits the full mask.
 */
static void
curl_call_begin(sigset_t *saved)
{
	sigset_t	all;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, saved);
}

static void
curl_call_end(const sigset_t *saved)
{
	pthread_sigmask(SIG_SETMASK, saved, NULL);
}

/* CURLMOPT_SOCKETFUNCTION: remember which sockets to wait for. */
static int
socket_callback(CURL *easy, curl_socket_t fd, int what, void *userp,
				void *socketp)
{
	CsS3Client *client = userp;
	int			i;

	for (i = 0; i < client->nsockets; i++)
		if (client->sockets[i].fd == fd)
			break;
	if (what == CURL_POLL_REMOVE)
	{
		if (i < client->nsockets)
			client->sockets[i] = client->sockets[--client->nsockets];
		return 0;
	}
	if (i == client->nsockets)
	{
		if (client->nsockets == CS_S3_MAX_SOCKETS)
		{
			client->sockets_overflow = true;
			return 0;
		}
		client->nsockets++;
	}
	client->sockets[i].fd = fd;
	client->sockets[i].what = what;
	return 0;
}

/* CURLMOPT_TIMERFUNCTION: remember when curl wants to run next. */
static int
timer_callback(CURLM *multi, long timeout_ms, void *userp)
{
	CsS3Client *client = userp;

	client->timer_ms = timeout_ms;
	client->timer_set = GetCurrentTimestamp();
	return 0;
}

/* Write a 2xx body's n bytes at ptr to b->fd; n, or 0 on failure. */
static size_t
write_to_file(BodyBuffer *b, const char *ptr, size_t n)
{
	size_t		done = 0;

	while (done < n)
	{
		ssize_t		w = write(b->fd, ptr + done, n - done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
		{
			b->write_errno = w < 0 ? errno : ENOSPC;
			return 0;
		}
		done += w;
	}
	b->written += n;
	return n;
}

/*
 * CURLOPT_WRITEFUNCTION: append to the body, within its bound; a 2xx body
 * of a request with a body_fd goes to that file instead.
 */
static size_t
write_callback(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	BodyBuffer *b = userdata;
	size_t		n = size * nmemb;
	size_t		max = b->max;
	long		status = 0;

	/* an error answer may be larger than the success it replaces */
	if (curl_easy_getinfo(b->easy, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK &&
		(status < 200 || status >= 300))
		max = Max(max, CS_S3_ERROR_BODY_MAX);
	if (b->fd >= 0 && status >= 200 && status < 300)
	{
		if (n > max - b->written)
		{
			b->too_large = true;
			return 0;
		}
		return write_to_file(b, ptr, n);
	}
	if (n > max - b->len)
	{
		b->too_large = true;
		return 0;
	}
	if (b->len + n + 1 > b->cap)
	{
		size_t		cap = Max(b->cap * 2, 8192);
		char	   *grown;

		while (cap < b->len + n + 1)
			cap *= 2;
		grown = realloc(b->data, cap);
		if (grown == NULL)
		{
			b->out_of_memory = true;
			return 0;
		}
		b->data = grown;
		b->cap = cap;
	}
	memcpy(b->data + b->len, ptr, n);
	b->len += n;
	b->data[b->len] = '\0';
	return n;
}

/* CURLOPT_READFUNCTION: the request body from memory. */
static size_t
read_callback(char *buffer, size_t size, size_t nitems, void *userdata)
{
	UploadSource *src = userdata;
	size_t		n = Min(size * nitems, src->len - src->pos);

	memcpy(buffer, src->data + src->pos, n);
	src->pos += n;
	return n;
}

/*
 * CURLOPT_SEEKFUNCTION: rewind the request body, for libcurl's resend of a
 * request on a fresh connection when a reused one died before any answer.
 */
static int
seek_callback(void *userdata, curl_off_t offset, int origin)
{
	UploadSource *src = userdata;

	if (origin != SEEK_SET || offset < 0 || (size_t) offset > src->len)
		return CURL_SEEKFUNC_CANTSEEK;
	src->pos = (size_t) offset;
	return CURL_SEEKFUNC_OK;
}

/* Copy a header's value (after "name:", trimmed) into dst, bounded. */
static void
capture_value(char *dst, const char *value, size_t len)
{
	while (len > 0 && (*value == ' ' || *value == '\t'))
		value++, len--;
	while (len > 0 && (value[len - 1] == '\r' || value[len - 1] == '\n' ||
					   value[len - 1] == ' '))
		len--;
	len = Min(len, CS_S3_HEADER_MAX - 1);
	memcpy(dst, value, len);
	dst[len] = '\0';
}

/* CURLOPT_HEADERFUNCTION: keep Date and ETag; a status line starts afresh. */
static size_t
header_callback(char *buffer, size_t size, size_t nitems, void *userdata)
{
	CapturedHeaders *h = userdata;
	size_t		n = size * nitems;

	if (n >= 5 && strncmp(buffer, "HTTP/", 5) == 0)
		memset(h, 0, sizeof(*h));
	else if (n > 5 && pg_strncasecmp(buffer, "date:", 5) == 0)
	{
		capture_value(h->date, buffer + 5, n - 5);
		h->date_received = (pg_time_t) time(NULL);
	}
	else if (n > 5 && pg_strncasecmp(buffer, "etag:", 5) == 0)
		capture_value(h->etag, buffer + 5, n - 5);
	return n;
}

/*
 * Free what a transfer holds outside memory contexts (the easy handle, the
 * header list, the body buffer) and take it off the client's list; never
 * raises.  The struct itself is left to its memory context.
 */
static void
transfer_release(CsS3Transfer *t)
{
	if (t->added)
		curl_multi_remove_handle(t->client->multi, t->easy);
	t->added = false;
	if (t->easy)
		curl_easy_cleanup(t->easy);
	t->easy = NULL;
	if (t->headers)
		free_headers(t->headers);
	t->headers = NULL;
	free(t->body.data);
	t->body.data = NULL;
	dlist_delete(&t->node);
}

/*
 * Memory context reset callback: free the transfers still under way, the
 * multi handle and its connections.
 */
static void
client_cleanup(void *arg)
{
	CsS3Client *client = arg;
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &client->transfers)
		transfer_release(dlist_container(CsS3Transfer, node, iter.cur));
	if (client->multi)
		curl_multi_cleanup(client->multi);
	client->multi = NULL;
	cs_s3_credentials_wipe(&client->creds);
}

/*
 * cs_s3_client_create(config, creds) -> CsS3Client *
 *	  A client for the bucket of config, signing with creds (copied), in
 *	  CurrentMemoryContext; its curl handles and connections are freed when
 *	  that context is reset or deleted.  Raises if libcurl cannot start.
 */
CsS3Client *
cs_s3_client_create(const CsS3Config *config, const CsS3Credentials *creds)
{
	CsS3Client *client = palloc0(sizeof(CsS3Client));
	MemoryContextCallback *cb = palloc0(sizeof(MemoryContextCallback));
	sigset_t	saved;

	if (!curl_initialized)
	{
		curl_call_begin(&saved);
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		{
			curl_call_end(&saved);
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not initialize libcurl")));
		}
		curl_call_end(&saved);
		curl_initialized = true;
	}
	client->config = *config;
	client->creds = *creds;
	client->timer_ms = -1;
	client->cxt = CurrentMemoryContext;
	dlist_init(&client->transfers);
	client->multi = curl_multi_init();
	if (client->multi == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not create a libcurl multi handle")));
	cb->func = client_cleanup;
	cb->arg = client;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, cb);
	curl_multi_setopt(client->multi, CURLMOPT_SOCKETFUNCTION, socket_callback);
	curl_multi_setopt(client->multi, CURLMOPT_SOCKETDATA, client);
	curl_multi_setopt(client->multi, CURLMOPT_TIMERFUNCTION, timer_callback);
	curl_multi_setopt(client->multi, CURLMOPT_TIMERDATA, client);
	return client;
}

/*
 * cs_s3_client_config(client) -> the configuration the client was made with
 */
const CsS3Config *
cs_s3_client_config(const CsS3Client *client)
{
	return &client->config;
}

/*
 * cs_s3_request_add_header(req, name, value)
 *	  Add a header to send and sign (Range, If-None-Match, ...).
 */
void
cs_s3_request_add_header(CsS3Request *req, const char *name, const char *value)
{
	if (req->nheaders >= CS_S3_MAX_EXTRA_HEADERS)
		elog(ERROR, "too many headers for one S3 request");
	req->headers[req->nheaders].name = name;
	req->headers[req->nheaders].value = value;
	req->nheaders++;
}

/* The request's path, decoded: "/bucket/key", "/key", "/bucket" or "/". */
static char *
request_path(const CsS3Config *config, const char *key)
{
	if (config->path_style)
		return key ? psprintf("/%s/%s", config->bucket, key) :
			psprintf("/%s", config->bucket);
	return key ? psprintf("/%s", key) : pstrdup("/");
}

/* x-amz-date for now: YYYYMMDDTHHMMSSZ */
static char *
amz_date_now(void)
{
	pg_time_t	now = (pg_time_t) time(NULL);
	struct pg_tm *tm = pg_gmtime(&now);
	char		buf[32];

	pg_strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", tm);
	return pstrdup(buf);
}

/*
 * Append line to the curl list *list; raises on out-of-memory, with *list
 * as it was (the caller frees it).
 */
static void
append_header(struct curl_slist *volatile *list, const char *line)
{
	struct curl_slist *grown = curl_slist_append(*list, line);

	if (grown == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory building the headers of an S3 request")));
	*list = grown;
}

/* Free a curl header list, its lines (a token, a signature) wiped first. */
static void
free_headers(struct curl_slist *list)
{
	struct curl_slist *item;

	for (item = list; item != NULL; item = item->next)
		explicit_bzero(item->data, strlen(item->data));
	curl_slist_free_all(list);
}

/*
 * The headers to send, with Authorization, appended to the curl list
 * *list (which the caller frees, also when this raises); the URL into
 * *url.
 */
static void
signed_headers(CsS3Client *client, const CsS3Request *req, char **url,
			   struct curl_slist *volatile *list)
{
	CsSigV4Pair headers[CS_S3_MAX_EXTRA_HEADERS + 4];
	CsSigV4Request sig;
	char		payload_hash[65];
	char	   *path = request_path(&client->config, req->key);
	char	   *query = cs_sigv4_canonical_query(req->query, req->nquery);
	char	   *authorization;
	StringInfoData buf;
	int			n = 0;
	int			i;

	cs_sha256_hex(req->body ? req->body : "", req->body_len, payload_hash);
	headers[n].name = "host";
	headers[n++].value = client->config.host_header;
	headers[n].name = "x-amz-date";
	headers[n++].value = amz_date_now();
	headers[n].name = "x-amz-content-sha256";
	headers[n++].value = pstrdup(payload_hash);
	if (client->creds.session_token[0] != '\0')
	{
		headers[n].name = "x-amz-security-token";
		headers[n++].value = client->creds.session_token;
	}
	for (i = 0; i < req->nheaders; i++)
		headers[n++] = req->headers[i];

	memset(&sig, 0, sizeof(sig));
	sig.method = req->method;
	sig.path = path;
	sig.query = req->query;
	sig.nquery = req->nquery;
	sig.headers = headers;
	sig.nheaders = n;
	sig.payload_sha256 = payload_hash;
	sig.amz_date = headers[1].value;
	sig.region = client->config.region;
	sig.access_key = client->creds.access_key;
	sig.secret_key = client->creds.secret_key;

	initStringInfo(&buf);
	/* room for the longest line (the token's) at once: no copy left behind */
	enlargeStringInfo(&buf, 8192);
	for (i = 0; i < n; i++)
	{
		resetStringInfo(&buf);
		appendStringInfo(&buf, "%s: %s", headers[i].name, headers[i].value);
		append_header(list, buf.data);
	}
	authorization = cs_sigv4_authorization(&sig);
	resetStringInfo(&buf);
	appendStringInfo(&buf, "Authorization: %s", authorization);
	explicit_bzero(authorization, strlen(authorization));
	append_header(list, buf.data);
	/* the whole allocation: the token's line may have been longer */
	explicit_bzero(buf.data, buf.maxlen);
	/* no 100-continue round trip, no form content type on POST */
	append_header(list, "Expect:");
	append_header(list, "Content-Type:");

	resetStringInfo(&buf);
	appendStringInfoString(&buf, client->config.base_url);
	cs_sigv4_uri_encode(&buf, path, true);
	if (query[0] != '\0')
		appendStringInfo(&buf, "?%s", query);
	*url = buf.data;
}

/* Set the easy handle's options for req. */
static void
set_options(CsS3Client *client, CURL *easy, const CsS3Request *req,
			const char *url, struct curl_slist *headers, BodyBuffer *body,
			UploadSource *upload, CapturedHeaders *captured, char *errbuf)
{
	curl_easy_setopt(easy, CURLOPT_URL, url);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
	/* the path as signed: no "." or ".." folded away */
	curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, write_callback);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, body);
	curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, header_callback);
	curl_easy_setopt(easy, CURLOPT_HEADERDATA, captured);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT, (long) CS_S3_CONNECT_S);
	curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, (long) CS_S3_STALL_S);
	curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
#if LIBCURL_VERSION_NUM >= 0x075700
	/* a cancel during name resolution does not wait for the resolver */
	curl_easy_setopt(easy, CURLOPT_QUICK_EXIT, 1L);
#endif
	if (client->config.ca_file)
		curl_easy_setopt(easy, CURLOPT_CAINFO, client->config.ca_file);
	if (strcmp(req->method, "HEAD") == 0)
		curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
	else if (strcmp(req->method, "PUT") == 0)
	{
		curl_easy_setopt(easy, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(easy, CURLOPT_READFUNCTION, read_callback);
		curl_easy_setopt(easy, CURLOPT_READDATA, upload);
		curl_easy_setopt(easy, CURLOPT_SEEKFUNCTION, seek_callback);
		curl_easy_setopt(easy, CURLOPT_SEEKDATA, upload);
		curl_easy_setopt(easy, CURLOPT_INFILESIZE_LARGE, (curl_off_t) req->body_len);
	}
	else if (strcmp(req->method, "POST") == 0)
	{
		curl_easy_setopt(easy, CURLOPT_POST, 1L);
		curl_easy_setopt(easy, CURLOPT_POSTFIELDS, req->body ? req->body : "");
		curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) req->body_len);
	}
	else if (strcmp(req->method, "GET") != 0)
		curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, req->method);
}

/*
 * curl_multi_socket_action() with signals blocked; raises if curl reports
 * the multi handle itself broken (out of memory, an internal error).
 */
static void
socket_action(CsS3Client *client, curl_socket_t fd, int flags)
{
	sigset_t	saved;
	int			running;
	CURLMcode	mc;

	curl_call_begin(&saved);
	mc = curl_multi_socket_action(client->multi, fd, flags, &running);
	curl_call_end(&saved);
	if (mc != CURLM_OK && mc != CURLM_BAD_SOCKET)
		ereport(ERROR,
				(errcode(mc == CURLM_OUT_OF_MEMORY ? ERRCODE_OUT_OF_MEMORY :
						 ERRCODE_INTERNAL_ERROR),
				 errmsg("libcurl failed driving an S3 request: %s",
						curl_multi_strerror(mc))));
}

/* Milliseconds to wait this round: curl's timer, at most a second. */
static long
wait_timeout(CsS3Client *client)
{
	long		elapsed;

	if (client->sockets_overflow)
		return 10;
	if (client->timer_ms < 0)
		return 1000;
	elapsed = (long) ((GetCurrentTimestamp() - client->timer_set) / 1000);
	return Max(0, Min(1000, client->timer_ms - elapsed));
}

/* Whether curl's timer has expired. */
static bool
timer_due(CsS3Client *client)
{
	return client->timer_ms >= 0 &&
		(GetCurrentTimestamp() - client->timer_set) / 1000 >= client->timer_ms;
}

/*
 * Mark the transfers that curl reports ended (any of the client's: one
 * round may end several).
 */
static void
note_done(CsS3Client *client)
{
	CURLMsg    *msg;
	int			queued;

	while ((msg = curl_multi_info_read(client->multi, &queued)) != NULL)
	{
		CsS3Transfer *t = NULL;

		if (msg->msg != CURLMSG_DONE)
			continue;
		if (curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &t) == CURLE_OK &&
			t != NULL)
		{
			t->done = true;
			t->result = msg->data.result;
		}
	}
}

/*
 * One round of the wait loop: wait at most timeout_ms (capped by curl's
 * timer) for the latch, postmaster death or curl's sockets, and hand curl
 * what is ready.  *set holds the wait event set of the round, for the
 * caller's cleanup.
 */
static void
wait_round(CsS3Client *client, long timeout_ms, WaitEventSet *volatile *set)
{
	WaitEvent	events[CS_S3_MAX_SOCKETS + 2];
	int			n;
	int			i;

	*set = cs_create_wait_event_set(client->nsockets + 2);
	AddWaitEventToSet(*set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(*set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	for (i = 0; i < client->nsockets; i++)
	{
		int			ev = 0;

		if (client->sockets[i].what & CURL_POLL_IN)
			ev |= WL_SOCKET_READABLE;
		if (client->sockets[i].what & CURL_POLL_OUT)
			ev |= WL_SOCKET_WRITEABLE;
		AddWaitEventToSet(*set, ev, client->sockets[i].fd, NULL, NULL);
	}
	n = WaitEventSetWait(*set, Min(timeout_ms, wait_timeout(client)), events,
						 lengthof(events), PG_WAIT_EXTENSION);
	FreeWaitEventSet(*set);
	*set = NULL;

	client->sockets_overflow = false;
	for (i = 0; i < n; i++)
	{
		int			flags = 0;

		if (events[i].events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			continue;
		}
		if (events[i].events & WL_SOCKET_READABLE)
			flags |= CURL_CSELECT_IN;
		if (events[i].events & WL_SOCKET_WRITEABLE)
			flags |= CURL_CSELECT_OUT;
		if (flags)
			socket_action(client, events[i].fd, flags);
	}
	if (n == 0 || timer_due(client))
		socket_action(client, CURL_SOCKET_TIMEOUT, 0);
	note_done(client);
}

/*
 * Run the wait loop until t has ended (the client's other transfers move
 * on meanwhile).  *set as for wait_round().
 */
static void
transfer_wait(CsS3Transfer *t, WaitEventSet *volatile *set)
{
	note_done(t->client);
	while (!t->done)
	{
		CHECK_FOR_INTERRUPTS();
		wait_round(t->client, 1000, set);
	}
}

/*
 * Sign req and hand it to curl: a new transfer of client, in the client's
 * memory context and on its list (so an error later frees it).  Raises on
 * out-of-memory or a libcurl that cannot start it, having freed it.
 */
static CsS3Transfer *
transfer_start(CsS3Client *client, const CsS3Request *req)
{
	CsS3Transfer *t = MemoryContextAllocZero(client->cxt, sizeof(CsS3Transfer));

	t->client = client;
	strlcpy(t->method, req->method, sizeof(t->method));
	t->body.max = req->max_response;
	t->body.fd = req->to_file ? req->body_fd : -1;
	t->upload.data = req->body;
	t->upload.len = req->body_len;
	t->start = GetCurrentTimestamp();
	dlist_push_tail(&client->transfers, &t->node);
	PG_TRY();
	{
		sigset_t	saved;
		char	   *url;

		signed_headers(client, req, &url, &t->headers);
		t->easy = curl_easy_init();
		if (t->easy == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("could not create a libcurl handle")));
		t->body.easy = t->easy;
		set_options(client, t->easy, req, url, t->headers, &t->body,
					&t->upload, &t->captured, t->errbuf);
		curl_easy_setopt(t->easy, CURLOPT_PRIVATE, (char *) t);
		curl_call_begin(&saved);
		if (curl_multi_add_handle(client->multi, t->easy) != CURLM_OK)
		{
			curl_call_end(&saved);
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not start an S3 request")));
		}
		curl_call_end(&saved);
		t->added = true;
	}
	PG_CATCH();
	{
		transfer_release(t);
		pfree(t);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return t;
}

/*
 * Whether body is an S3 error document: its document element, after an
 * optional XML declaration and white space, is <Error>.
 */
static bool
is_error_document(const char *body, size_t len)
{
	const char *p = body;
	const char *end = body + len;

	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
		p++;
	if (end - p >= 5 && memcmp(p, "<?xml", 5) == 0)
	{
		const char *close = memchr(p, '>', end - p);

		if (close == NULL || close[-1] != '?')
			return false;
		p = close + 1;
		while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
			p++;
	}
	return end - p >= 7 && memcmp(p, "<Error", 6) == 0 &&
		(p[6] == '>' || p[6] == ' ' || p[6] == '\t' || p[6] == '\r' ||
		 p[6] == '\n');
}

/*
 * The response's Code and Message, when it is an S3 error: a non-2xx
 * answer, or a POST's 200 (CompleteMultipartUpload) whose document
 * element is Error.  Object data (a 2xx GET) is never read as XML.
 */
static void
parse_error_body(const char *method, CsS3Response *resp)
{
	CsXmlSpan	span;
	CsXmlSpan	inner;

	if (resp->status == 0 || resp->body_len == 0)
		return;
	if (resp->status >= 200 && resp->status < 300 &&
		!(resp->status == 200 && strcmp(method, "POST") == 0))
		return;
	if (!is_error_document(resp->body, resp->body_len) ||
		!cs_xml_find(resp->body, resp->body_len, "Error", &span))
		return;
	if (cs_xml_find(span.start, span.len, "Code", &inner))
		resp->error_code = cs_xml_display_text(inner, 128);
	if (cs_xml_find(span.start, span.len, "Message", &inner))
		resp->error_message = cs_xml_display_text(inner, 1024);
	/* a 200 that is an error stays one, whatever its Code */
	if (resp->error_code == NULL && resp->status == 200)
		resp->error_code = pstrdup("UnknownError");
}

/* Fill resp from a finished transfer. */
static void
collect(CURL *easy, const char *method, CURLcode rc, const char *errbuf,
		BodyBuffer *body, CapturedHeaders *captured, CsS3Response *resp)
{
	curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &resp->status);
	resp->too_large = body->too_large;
	resp->body = palloc(body->len + 1);
	if (body->len > 0)
		memcpy(resp->body, body->data, body->len);
	resp->body[body->len] = '\0';
	resp->body_len = body->len;
	resp->file_bytes = body->written;
	resp->file_errno = body->write_errno;
	resp->date = pstrdup(captured->date);
	resp->date_received = captured->date_received;
	resp->etag = pstrdup(captured->etag);
	if (body->write_errno != 0 && rc != CURLE_OK)
	{
		/* the local file failed, not the store */
		errno = body->write_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write the body of an S3 response to a local file: %m")));
	}
	if (body->out_of_memory)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory receiving an S3 response")));
	if (rc != CURLE_OK)
	{
		/* an answer that broke off, or overflowed, is no answer */
		resp->status_seen = resp->status;
		resp->status = 0;
		resp->timed_out = rc == CURLE_OPERATION_TIMEDOUT;
		if (!body->too_large)
			resp->transport_error = psprintf("%s%s%s", curl_easy_strerror(rc),
											 errbuf[0] ? ": " : "", errbuf);
	}
	parse_error_body(method, resp);
}

/* Fill resp from the ended transfer t. */
static void
transfer_collect(CsS3Transfer *t, CsS3Response *resp)
{
	long		secs;
	int			usecs;

	memset(resp, 0, sizeof(*resp));
	collect(t->easy, t->method, t->result, t->errbuf, &t->body, &t->captured, resp);
	TimestampDifference(t->start, GetCurrentTimestamp(), &secs, &usecs);
	resp->elapsed_ms = secs * 1000.0 + usecs / 1000.0;
}

/*
 * cs_s3_perform(client, req, resp)
 *	  Send req and wait for its response into resp (memset here; strings
 *	  palloc'd in the current context).  HTTP and transport failures are
 *	  reported in resp, not raised (s3_errors.c classifies them); raises
 *	  only on interrupts (a cancel, SIGTERM), out-of-memory, or a libcurl
 *	  that cannot start a transfer, and then frees everything the request
 *	  took.  The client's transfers started with cs_s3_start() move on
 *	  while it waits.
 */
void
cs_s3_perform(CsS3Client *client, const CsS3Request *req, CsS3Response *resp)
{
	CsS3Transfer *t;

	memset(resp, 0, sizeof(*resp));
	t = transfer_start(client, req);
	cs_s3_finish(t, resp);
}

/*
 * cs_s3_start(client, req) -> CsS3Transfer *
 *	  Start req without waiting for it: a transfer that moves on whenever
 *	  the client waits (cs_s3_perform(), cs_s3_finish(), cs_s3_progress()).
 *	  req's body and body_fd must stay valid until the transfer is finished
 *	  or cancelled; the transfer is freed by cs_s3_finish(), cs_s3_cancel()
 *	  or the reset of the client's memory context, whichever comes first.
 *	  Raises as cs_s3_perform() does.
 */
CsS3Transfer *
cs_s3_start(CsS3Client *client, const CsS3Request *req)
{
	return transfer_start(client, req);
}

/*
 * cs_s3_finish(t, resp)
 *	  Wait for the transfer t to end, as cs_s3_perform()
 *	  waits, fill resp and free t, also when this raises.
 */
void
cs_s3_finish(CsS3Transfer *t, CsS3Response *resp)
{
	WaitEventSet *volatile set = NULL;

	PG_TRY();
	{
		transfer_wait(t, &set);
		transfer_collect(t, resp);
	}
	PG_CATCH();
	{
		if (set)
			FreeWaitEventSet(set);
		cs_s3_cancel(t);
		PG_RE_THROW();
	}
	PG_END_TRY();
	cs_s3_cancel(t);
}

/*
 * cs_s3_cancel(t)
 *	  Stop the transfer t and free it; never raises.
 */
void
cs_s3_cancel(CsS3Transfer *t)
{
	transfer_release(t);
	pfree(t);
}

/*
 * cs_s3_transfer_done(t) -> whether t has ended (its response is ready
 *	  for cs_s3_finish() without waiting)
 */
bool
cs_s3_transfer_done(const CsS3Transfer *t)
{
	return t->done;
}

/*
 * cs_s3_progress(client, max_ms)
 *	  Let the client's transfers move on for at most max_ms milliseconds
 *	  (0: only what is ready now), returning early once none is left
 *	  running.  Runs CHECK_FOR_INTERRUPTS(); raises as cs_s3_perform().
 */
void
cs_s3_progress(CsS3Client *client, long max_ms)
{
	WaitEventSet *volatile set = NULL;
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													max_ms);

	PG_TRY();
	{
		for (;;)
		{
			dlist_iter	iter;
			bool		running = false;
			long		left;

			CHECK_FOR_INTERRUPTS();
			dlist_foreach(iter, &client->transfers)
				running |= !dlist_container(CsS3Transfer, node, iter.cur)->done;
			left = (long) ((until - GetCurrentTimestamp()) / 1000);
			if (!running)
				break;
			wait_round(client, Max(left, 0), &set);
			if (left <= 0)
				break;
		}
	}
	PG_FINALLY();
	{
		if (set)
			FreeWaitEventSet(set);
	}
	PG_END_TRY();
}
