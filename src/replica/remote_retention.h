/*-------------------------------------------------------------------------
 *
 * remote_retention.h
 *	  Retention of the replica's bucket, run by the uploader
 *	  (remote_retention.c; docs/DESIGN.md section 15).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_REMOTE_RETENTION_H
#define CS_REMOTE_RETENTION_H

#include "replica/s3_config.h"
#include "replica/s3_request.h"

/* a failed step explained for the uploader's status and log */
typedef struct CsRemoteFailure
{
	bool		retry;			/* retryable: the store or the network */
	int			sqlerrcode;
	char	   *message;		/* palloc'd, naming the key */
	char	   *hint;			/* NULL when nothing plain */
} CsRemoteFailure;

extern int	cs_remote_retention_s(void);
extern void cs_remote_retention_forget(const char *directory,
									   const char *store);
extern bool cs_remote_retention_removed(const char *directory,
										const char *store, const char *name);
extern bool cs_remote_retention_step(CsS3Client *client,
									 const CsS3Config *config,
									 const char *directory,
									 CsRemoteFailure *failure);

#endif							/* CS_REMOTE_RETENTION_H */
