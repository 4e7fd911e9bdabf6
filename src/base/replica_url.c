/*-------------------------------------------------------------------------
 *
 * replica_url.c
 *	  Parsing and checking the settings that say where the replica is:
 *	  changestream.replica_url (s3://bucket/prefix), replica_endpoint
 *	  (http[s]://host[:port]) and replica_region.  guc.c's check hooks and
 *	  the S3 client (replica/s3_config.c) both parse through here, so a
 *	  value the settings accept is one the client can use.
 *
 * The functions return NULL when the value is good, else one sentence
 * saying what is wrong (for errdetail); they allocate in the current
 * memory context and never raise.
 *
 * Bucket names follow Amazon S3's rules for general purpose buckets
 * ("Bucket naming rules" in the S3 user guide): 3 to 63 characters of
 * lower case letters, digits, dots and hyphens, beginning and ending with
 * a letter or digit, no two adjacent dots, not formatted as an IPv4
 * address.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "base/replica_url.h"

/* The S3 bucket naming rules above; NULL when name follows them. */
static const char *
bucket_problem(const char *name)
{
	size_t		len = strlen(name);
	const char *p;
	bool		all_ip_chars = true;
	int			dots = 0;

	if (len == 0)
		return "The bucket name is empty.";
	if (len < 3 || len > 63)
		return psprintf("The bucket name is %zu characters; S3 allows 3 to 63.", len);
	for (p = name; *p; p++)
	{
		bool		alnum = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9');

		if (!alnum && *p != '.' && *p != '-')
			return "A bucket name may hold only lower case letters, digits, dots and hyphens.";
		if (*p == '.' && p[1] == '.')
			return "A bucket name may not hold two adjacent dots.";
		if (*p == '.')
			dots++;
		else if (!(*p >= '0' && *p <= '9'))
			all_ip_chars = false;
	}
	if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9')) ||
		!((name[len - 1] >= 'a' && name[len - 1] <= 'z') ||
		  (name[len - 1] >= '0' && name[len - 1] <= '9')))
		return "A bucket name must begin and end with a letter or a digit.";
	if (all_ip_chars && dots == 3)
		return "A bucket name may not be formatted as an IP address.";
	return NULL;
}

/* NULL when prefix (already stripped of its outer slashes) is usable. */
static const char *
prefix_problem(const char *prefix)
{
	const char *p;

	if (strlen(prefix) > CS_REPLICA_PREFIX_MAX)
		return psprintf("The prefix is %zu bytes; at most %d are allowed.",
						strlen(prefix), CS_REPLICA_PREFIX_MAX);
	for (p = prefix; *p; p++)
	{
		if ((unsigned char) *p < 0x20 || *p == 0x7f || *p == '\\')
			return "The prefix holds a control character or a backslash.";
		if (*p == '/' && p[1] == '/')
			return "The prefix holds an empty path element (\"//\").";
	}
	for (p = prefix; *p; p = strchr(p, '/') ? strchr(p, '/') + 1 : p + strlen(p))
	{
		size_t		seg = strcspn(p, "/");

		if ((seg == 1 && p[0] == '.') || (seg == 2 && p[0] == '.' && p[1] == '.'))
			return "The prefix holds a \".\" or \"..\" path element.";
	}
	return NULL;
}

/*
 * cs_replica_url_parse(url, out) -> NULL or a sentence
 *	  Parse "s3://bucket" or "s3://bucket/prefix" into out (bucket and
 *	  prefix palloc'd; the prefix without its leading and trailing '/').
 *	  An empty url is not parsed here: it means "no replica".
 */
const char *
cs_replica_url_parse(const char *url, CsReplicaUrl *out)
{
	const char *rest;
	const char *slash;
	char	   *prefix;
	size_t		len;
	const char *problem;

	if (strncmp(url, "s3://", 5) != 0)
		return "The URL must begin with s3://, as in s3://bucket/prefix.";
	rest = url + 5;
	slash = strchr(rest, '/');
	out->bucket = slash ? pnstrdup(rest, slash - rest) : pstrdup(rest);
	if ((problem = bucket_problem(out->bucket)) != NULL)
		return problem;
	prefix = pstrdup(slash ? slash + 1 : "");
	len = strlen(prefix);
	while (len > 0 && prefix[len - 1] == '/')
		prefix[--len] = '\0';
	if (prefix[0] == '/')
		return "The prefix may not begin with \"/\" (write s3://bucket/prefix).";
	if ((problem = prefix_problem(prefix)) != NULL)
		return problem;
	out->prefix = prefix;
	return NULL;
}

/* NULL when host (no port, no brackets for a name) is a plausible host. */
static const char *
host_problem(const char *host, bool *is_ip)
{
	const char *p;
	bool		digits_dots = true;

	*is_ip = false;
	if (host[0] == '\0')
		return "The endpoint names no host.";
	if (host[0] == '[')
	{
		size_t		len = strlen(host);

		if (len < 3 || host[len - 1] != ']')
			return "An IPv6 address must be written in brackets, as in http://[::1]:7480.";
		for (p = host + 1; p < host + len - 1; p++)
			if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') ||
				  (*p >= 'A' && *p <= 'F') || *p == ':' || *p == '.'))
				return "The IPv6 address holds a character that is not a hex digit, ':' or '.'.";
		*is_ip = true;
		return NULL;
	}
	for (p = host; *p; p++)
	{
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			  (*p >= '0' && *p <= '9') || *p == '.' || *p == '-'))
			return "The host name may hold only letters, digits, dots and hyphens.";
		if (!((*p >= '0' && *p <= '9') || *p == '.'))
			digits_dots = false;
	}
	*is_ip = digits_dots || pg_strcasecmp(host, "localhost") == 0;
	return NULL;
}

/*
 * cs_replica_endpoint_parse(endpoint, out) -> NULL or a sentence
 *	  Parse "http://host[:port]" or "https://host[:port]" (a trailing '/'
 *	  allowed, no path, no user name) into out.  An empty endpoint is not
 *	  parsed here: it means AWS for the region.
 */
const char *
cs_replica_endpoint_parse(const char *endpoint, CsReplicaEndpoint *out)
{
	const char *rest;
	char	   *authority;
	char	   *colon;
	size_t		len;
	const char *problem;

	memset(out, 0, sizeof(*out));
	if (strncmp(endpoint, "https://", 8) == 0)
	{
		out->https = true;
		rest = endpoint + 8;
	}
	else if (strncmp(endpoint, "http://", 7) == 0)
		rest = endpoint + 7;
	else
		return "The endpoint must begin with http:// or https://.";
	authority = pstrdup(rest);
	len = strlen(authority);
	if (len > 0 && authority[len - 1] == '/')
		authority[--len] = '\0';
	if (strpbrk(authority, "/?#"))
		return "The endpoint may not hold a path or a query: give only scheme, host and port.";
	if (strchr(authority, '@'))
		return "The endpoint may not hold a user name or password.";
	colon = strrchr(authority, ':');
	if (colon && (authority[0] != '[' || strrchr(authority, ']') < colon))
	{
		char	   *end;
		long		port;

		*colon = '\0';
		errno = 0;
		port = strtol(colon + 1, &end, 10);
		if (colon[1] == '\0' || *end != '\0' || errno != 0 || port < 1 || port > 65535)
			return "The endpoint's port must be a number from 1 to 65535.";
		out->port = (int) port;
	}
	if ((problem = host_problem(authority, &out->host_is_ip)) != NULL)
		return problem;
	out->host = authority;
	return NULL;
}

/*
 * cs_replica_region_problem(region) -> NULL or a sentence
 *	  A region is a non-empty word of lower case letters, digits and
 *	  hyphens (us-east-1, eu-central-1, or a store's own name); it goes into
 *	  the signature's credential scope and AWS's host name.
 */
const char *
cs_replica_region_problem(const char *region)
{
	const char *p;

	if (region[0] == '\0' || strlen(region) > 64)
		return "The region must be 1 to 64 characters.";
	for (p = region; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
			return "A region may hold only lower case letters, digits, hyphens and underscores.";
	return NULL;
}
