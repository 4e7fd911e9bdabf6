/*-------------------------------------------------------------------------
 *
 * s3_request.h
 *	  One signed S3 request over libcurl, in a wait loop that interrupts
 *	  reach (s3_request.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_S3_REQUEST_H
#define CS_S3_REQUEST_H

#include "pgtime.h"

#include "replica/s3_config.h"
#include "replica/s3_credentials.h"
#include "replica/sigv4.h"

/* the most headers a request adds beside the ones every request has */
#define CS_S3_MAX_EXTRA_HEADERS 4

typedef struct CsS3Client CsS3Client;
typedef struct CsS3Transfer CsS3Transfer;

/* what to send */
typedef struct CsS3Request
{
	const char *method;			/* GET, HEAD, PUT, POST, DELETE */
	const char *key;			/* the object's key; NULL for the bucket */
	const CsSigV4Pair *query;	/* decoded parameters */
	int			nquery;
	CsSigV4Pair headers[CS_S3_MAX_EXTRA_HEADERS];	/* signed too */
	int			nheaders;
	const char *body;			/* PUT and POST */
	size_t		body_len;
	size_t		max_response;	/* the longest body accepted, in bytes */
	bool		to_file;		/* a 2xx body is written to body_fd */
	int			body_fd;		/* (not kept in memory: streamed) */
} CsS3Request;

/* what came back; strings palloc'd */
typedef struct CsS3Response
{
	long		status;			/* HTTP status; 0 when no (whole) response came */
	long		status_seen;	/* the HTTP status received before a failure */
	char	   *transport_error;	/* NULL, or what libcurl said */
	bool		timed_out;		/* no response, or a stalled one */
	bool		too_large;		/* the body passed max_response */
	char	   *body;			/* NUL-terminated */
	size_t		body_len;
	size_t		file_bytes;		/* bytes of a 2xx body written to body_fd */
	int			file_errno;		/* 0, or why writing to body_fd failed */
	char	   *date;			/* the Date header, or "" */
	pg_time_t	date_received;	/* the local clock when it arrived, s */
	char	   *etag;			/* the ETag header, or "" */
	char	   *error_code;		/* <Code> of an error body, or NULL */
	char	   *error_message;	/* <Message> of an error body, or NULL */
	double		elapsed_ms;
} CsS3Response;

extern CsS3Client *cs_s3_client_create(const CsS3Config *config,
									   const CsS3Credentials *creds);
extern const CsS3Config *cs_s3_client_config(const CsS3Client *client);
extern void cs_s3_perform(CsS3Client *client, const CsS3Request *req,
						  CsS3Response *resp);
extern CsS3Transfer *cs_s3_start(CsS3Client *client, const CsS3Request *req);
extern void cs_s3_finish(CsS3Transfer *t, CsS3Response *resp);
extern void cs_s3_cancel(CsS3Transfer *t);
extern bool cs_s3_transfer_done(const CsS3Transfer *t);
extern void cs_s3_progress(CsS3Client *client, long max_ms);
extern void cs_s3_request_add_header(CsS3Request *req, const char *name,
									 const char *value);

#endif							/* CS_S3_REQUEST_H */
