/*-------------------------------------------------------------------------
 *
 * s3_ops.h
 *	  The S3 operations the replica uses, and how their failures are
 *	  classified (s3_ops.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_S3_OPS_H
#define CS_S3_OPS_H

#include "nodes/pg_list.h"
#include "replica/s3_request.h"

/* what a failed request means for its caller (docs/DESIGN.md section 14) */
typedef enum CsS3ErrorClass
{
	CS_S3_OK,					/* 2xx */
	CS_S3_RETRYABLE,			/* try again later: the store or network */
	CS_S3_CONFIG,				/* a setting or the keys are wrong */
	CS_S3_FAILED				/* this request is wrong (404, 412, ...) */
} CsS3ErrorClass;

/* a failed request explained: palloc'd sentences, no secret */
typedef struct CsS3Failure
{
	CsS3ErrorClass class;
	char	   *message;		/* what happened, naming the key */
	char	   *hint;			/* what to do; NULL when nothing plain */
} CsS3Failure;

/* one object of a listing */
typedef struct CsS3Object
{
	char	   *key;
	int64		size;
	char	   *etag;			/* its ETag, quotes removed; NULL if none */
} CsS3Object;

/* the longest response body accepted for a listing or a small request */
#define CS_S3_SMALL_RESPONSE (8 * 1024 * 1024)

extern CsS3ErrorClass cs_s3_classify(const CsS3Response *resp,
									 const char *what, CsS3Failure *failure);
extern CsS3ErrorClass cs_s3_explain(const CsS3Response *resp,
									const char *what, CsS3Failure *failure);
extern int	cs_s3_class_sqlstate(CsS3ErrorClass class);
extern double cs_s3_clock_skew_s(const CsS3Response *resp, bool *known);

extern void cs_s3_put(CsS3Client *client, const char *key, const char *data,
					  size_t len, bool if_none_match, CsS3Response *resp);
extern void cs_s3_get(CsS3Client *client, const char *key, size_t max,
					  CsS3Response *resp);
extern void cs_s3_get_to_file(CsS3Client *client, const char *key, int fd,
							  size_t max, CsS3Response *resp);
extern CsS3Transfer *cs_s3_get_to_file_start(CsS3Client *client,
											 const char *key, int fd,
											 size_t max);
extern void cs_s3_get_range(CsS3Client *client, const char *key,
							uint64 offset, uint64 length, CsS3Response *resp);
extern void cs_s3_head(CsS3Client *client, const char *key, CsS3Response *resp);
extern void cs_s3_delete(CsS3Client *client, const char *key,
						 CsS3Response *resp);
extern bool cs_s3_list(CsS3Client *client, const char *prefix,
					   const char *start_after, int max_keys, List **objects,
					   CsS3Response *resp, char **bad_response);
extern bool cs_s3_multipart_create(CsS3Client *client, const char *key,
								   char **upload_id, CsS3Response *resp);
extern bool cs_s3_multipart_part(CsS3Client *client, const char *key,
								 const char *upload_id, int part,
								 const char *data, size_t len, char **etag,
								 CsS3Response *resp);
extern bool cs_s3_multipart_complete(CsS3Client *client, const char *key,
									 const char *upload_id, List *etags,
									 CsS3Response *resp);
extern void cs_s3_multipart_abort(CsS3Client *client, const char *key,
								  const char *upload_id, CsS3Response *resp);

#endif							/* CS_S3_OPS_H */
