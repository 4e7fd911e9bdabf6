/*-------------------------------------------------------------------------
 *
 * s3_config.c
 *	  The replica's settings (changestream.replica_*, base/guc.c) turned
 *	  into what a request needs: the URL of the bucket, the Host header,
 *	  the region, the credentials' source.  The settings' own parser
 *	  (base/replica_url.c) is used, so what the settings accept works here.
 *
 * An empty replica_endpoint means AWS: https://s3.<region>.amazonaws.com.
 * replica_uri_style auto puts the bucket in the path for an address
 * literal, localhost or an endpoint with an explicit port (a local test
 * store has no wildcard DNS), and in the host name otherwise, as AWS wants.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>

#include "base/guc.h"
#include "base/replica_url.h"
#include "replica/s3_config.h"

#define CS_CA_FILE_MAX (16 * 1024 * 1024)

/*
 * NULL when path names a regular file of at most CS_CA_FILE_MAX bytes.
 * Checked before any request: OpenSSL opens it inside libcurl, with
 * signals blocked, where a FIFO would block the session for good.
 */
static const char *
ca_file_problem(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0)
		return psprintf("could not stat \"%s\": %m.", path);
	if (!S_ISREG(st.st_mode))
		return psprintf("\"%s\" is not a regular file.", path);
	if (st.st_size > CS_CA_FILE_MAX)
		return psprintf("\"%s\" is %lld bytes; a CA file may be at most %d.",
						path, (long long) st.st_size, CS_CA_FILE_MAX);
	return NULL;
}

/*
 * cs_s3_config_current(out) -> NULL or a sentence
 *	  Fill out from the current settings (out->store names the store, from
 *	  the endpoint or else the AWS region, with the bucket and prefix: what
 *	  the uploader's journal and pass state are keyed on).  Returns NULL on success, else a
 *	  sentence naming the setting that is empty or wrong (the check hooks
 *	  reject bad values, so in practice: no replica_url).  Never raises
 *	  (but on out-of-memory).
 */
const char *
cs_s3_config_current(CsS3Config *out)
{
	CsReplicaUrl url;
	CsReplicaEndpoint ep;
	const char *problem;
	char	   *host;

	memset(out, 0, sizeof(*out));
	if (cs_replica_url == NULL || cs_replica_url[0] == '\0')
		return "changestream.replica_url is empty: no replica is configured.";
	if ((problem = cs_replica_url_parse(cs_replica_url, &url)) != NULL)
		return psprintf("changestream.replica_url: %s", problem);
	if ((problem = cs_replica_region_problem(cs_replica_region)) != NULL)
		return psprintf("changestream.replica_region: %s", problem);
	if (cs_replica_endpoint == NULL || cs_replica_endpoint[0] == '\0')
	{
		memset(&ep, 0, sizeof(ep));
		ep.https = true;
		ep.host = psprintf("s3.%s.amazonaws.com", cs_replica_region);
	}
	else if ((problem = cs_replica_endpoint_parse(cs_replica_endpoint, &ep)) != NULL)
		return psprintf("changestream.replica_endpoint: %s", problem);

	out->bucket = url.bucket;
	out->prefix = url.prefix;
	out->region = pstrdup(cs_replica_region);
	if (cs_replica_uri_style == CS_URI_STYLE_AUTO)
		out->path_style = ep.host_is_ip || ep.port != 0;
	else
		out->path_style = cs_replica_uri_style == CS_URI_STYLE_PATH;
	host = out->path_style ? ep.host : psprintf("%s.%s", url.bucket, ep.host);
	out->host_header = ep.port ? psprintf("%s:%d", host, ep.port) : pstrdup(host);
	out->base_url = psprintf("%s://%s", ep.https ? "https" : "http",
							 out->host_header);
	out->ca_file = (cs_replica_ca_file && cs_replica_ca_file[0]) ?
		pstrdup(cs_replica_ca_file) : NULL;
	if (out->ca_file && (problem = ca_file_problem(out->ca_file)) != NULL)
		return psprintf("changestream.replica_ca_file: %s", problem);
	out->credentials = pstrdup(cs_replica_credentials ? cs_replica_credentials : "");
	out->profile = pstrdup(cs_replica_profile ? cs_replica_profile : "default");
	/* the endpoint names the store; without one, AWS's region does */
	if (cs_replica_endpoint == NULL || cs_replica_endpoint[0] == '\0')
		out->store = psprintf("s3://%s/%s in AWS region %s", url.bucket,
							  url.prefix, cs_replica_region);
	else
		out->store = psprintf("s3://%s/%s at %s://%s%s", url.bucket,
							  url.prefix, ep.https ? "https" : "http",
							  ep.host, ep.port ?
							  psprintf(":%d", ep.port) : "");
	return NULL;
}

/*
 * cs_s3_config_under(config, sub)
 *	  Move config (filled by cs_s3_config_current()) to the prefix of sub
 *	  (a relative path, "databases/<name>": an archive tree under the
 *	  directory root, docs/databases.md) under the configured prefix, so
 *	  that the bucket mirrors the local layout; config->store names the
 *	  new prefix, with the same store.
 */
void
cs_s3_config_under(CsS3Config *config, const char *sub)
{
	/* store is "s3://<bucket>/<prefix>" followed by the store's name */
	const char *rest = config->store + strlen("s3://") +
		strlen(config->bucket) + 1 + strlen(config->prefix);

	config->prefix = cs_s3_object_key(config, sub);
	config->store = psprintf("s3://%s/%s%s", config->bucket, config->prefix,
							 rest);
}

/*
 * cs_s3_object_key(config, name) -> palloc'd key
 *	  The object key of name (a path relative to the archive, no leading
 *	  '/') under the configured prefix: "<prefix>/<name>", or name when
 *	  the prefix is empty.
 */
char *
cs_s3_object_key(const CsS3Config *config, const char *name)
{
	if (config->prefix[0] == '\0')
		return pstrdup(name);
	return psprintf("%s/%s", config->prefix, name);
}
