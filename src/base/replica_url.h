/*-------------------------------------------------------------------------
 *
 * replica_url.h
 *	  Parsing the replica's location settings (replica_url.c):
 *	  changestream.replica_url and changestream.replica_endpoint.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_REPLICA_URL_H
#define CS_REPLICA_URL_H

/* the longest object key prefix accepted, in bytes (S3 keys are <= 1024) */
#define CS_REPLICA_PREFIX_MAX 512

/* changestream.replica_url parsed: s3://bucket/prefix */
typedef struct CsReplicaUrl
{
	char	   *bucket;			/* 3 to 63 characters, S3's naming rules */
	char	   *prefix;			/* "" or "a/b", no leading or trailing '/' */
} CsReplicaUrl;

/* changestream.replica_endpoint parsed: http[s]://host[:port] */
typedef struct CsReplicaEndpoint
{
	bool		https;
	char	   *host;			/* a name, an IPv4 address or [IPv6] */
	int			port;			/* 0 = the scheme's default */
	bool		host_is_ip;		/* an address literal or "localhost" */
} CsReplicaEndpoint;

extern const char *cs_replica_url_parse(const char *url, CsReplicaUrl *out);
extern const char *cs_replica_endpoint_parse(const char *endpoint,
											 CsReplicaEndpoint *out);
extern const char *cs_replica_region_problem(const char *region);

#endif							/* CS_REPLICA_URL_H */
