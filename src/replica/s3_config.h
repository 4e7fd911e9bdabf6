/*-------------------------------------------------------------------------
 *
 * s3_config.h
 *	  The replica's settings as the S3 client uses them (s3_config.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_S3_CONFIG_H
#define CS_S3_CONFIG_H

/* where requests go and how they are signed; all strings palloc'd */
typedef struct CsS3Config
{
	char	   *bucket;
	char	   *prefix;			/* "" or "a/b": keys are "<prefix>/<name>" */
	char	   *region;
	bool		path_style;		/* /bucket/key on the endpoint's host */
	char	   *base_url;		/* scheme://host[:port], the bucket's host */
	char	   *host_header;	/* host[:port] as sent and signed */
	char	   *ca_file;		/* NULL = the system's */
	char	   *credentials;	/* a file's path or "env" */
	char	   *profile;
	char	   *store;			/* the store, bucket and prefix, as one text */
} CsS3Config;

extern const char *cs_s3_config_current(CsS3Config *out);
extern void cs_s3_config_under(CsS3Config *config, const char *sub);
extern char *cs_s3_object_key(const CsS3Config *config, const char *name);

#endif							/* CS_S3_CONFIG_H */
