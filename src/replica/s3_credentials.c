/*-------------------------------------------------------------------------
 *
 * s3_credentials.c
 *	  The replica's access keys, from changestream.replica_credentials: a
 *	  file in the AWS shared credentials format, or "env" for the server's
 *	  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
 *
 * The file is checked as libpq checks ~/.pgpass (PasswordFromFile() in
 * src/interfaces/libpq/fe-connect.c): a regular file, no group or world
 * permissions, and here also owned by the server's user.  It is untrusted
 * input: lines are bounded (CS_CRED_LINE_MAX), the file too
 * (CS_CRED_FILE_MAX), and a bad line is reported by its number, never by
 * its content, which may hold a secret.  The keys are cached with the
 * file's identity (device, inode, size, mtime) and re-read when it changes,
 * so keys rotate without a reload.  The path is checked with stat() before
 * it is opened (non-blocking), so a FIFO named by mistake is refused at
 * once instead of blocking the session; the file is read whole with
 * read() and the copy wiped after parsing.
 *
 * The format is the AWS CLI's ("Configuration and credential file
 * settings"): "[profile]" section headers, "name = value" lines, '#' and
 * ';' comment lines; aws_access_key_id, aws_secret_access_key and
 * aws_session_token are read, other names ignored.
 *
 * No secret reaches a message, a log line or a setting: problems name the
 * file, the line, the profile and the missing name only.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/memutils.h"

#include "replica/s3_credentials.h"

#define CS_CRED_LINE_MAX 8192
#define CS_CRED_FILE_MAX (1024 * 1024)

/* the last keys read from a file, and what that file was */
typedef struct CredentialsCache
{
	bool		valid;
	char		path[MAXPGPATH];
	char		profile[129];
	dev_t		dev;
	ino_t		ino;
	off_t		size;
	struct timespec mtime;
	CsS3Credentials creds;
} CredentialsCache;

static CredentialsCache cache;

/* what one read of the file found for the profile */
typedef struct ParseState
{
	bool		in_profile;
	bool		profile_seen;
	bool		has_key;
	bool		has_secret;
} ParseState;

static bool
set_problem(CsS3CredentialsProblem *problem, char *message, char *detail,
			char *hint)
{
	problem->message = message;
	problem->detail = detail;
	problem->hint = hint;
	return false;
}

/*
 * cs_s3_credentials_wipe(creds)
 *	  Overwrite every key in creds with zero bytes.
 */
void
cs_s3_credentials_wipe(CsS3Credentials *creds)
{
	explicit_bzero(creds, sizeof(*creds));
}

/* Copy value into dst (size dstsize) if it fits; false if it does not. */
static bool
copy_key(char *dst, size_t dstsize, const char *value)
{
	if (strlen(value) >= dstsize || value[0] == '\0')
		return false;
	strlcpy(dst, value, dstsize);
	return true;
}

/* trim spaces and tabs at both ends of s, in place; returns s */
static char *
trim(char *s)
{
	char	   *end;

	while (*s == ' ' || *s == '\t')
		s++;
	end = s + strlen(s);
	while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' ||
					   end[-1] == '\n'))
		*--end = '\0';
	return s;
}

/*
 * One line of the file (without its newline) into st and out.  Returns
 * NULL, or a sentence saying what is wrong with the line.
 */
static const char *
parse_line(char *line, const char *profile, ParseState *st,
		   CsS3Credentials *out)
{
	char	   *s = trim(line);
	char	   *eq;
	char	   *name;
	char	   *value;

	if (s[0] == '\0' || s[0] == '#' || s[0] == ';')
		return NULL;
	if (s[0] == '[')
	{
		char	   *close = strchr(s, ']');

		if (close == NULL || *trim(close + 1) != '\0')
			return "A section header must be \"[name]\".";
		*close = '\0';
		st->in_profile = strcmp(trim(s + 1), profile) == 0;
		if (st->in_profile)
			st->profile_seen = true;
		return NULL;
	}
	eq = strchr(s, '=');
	if (eq == NULL)
		return "A line must be \"[profile]\", \"name = value\", empty or a comment.";
	*eq = '\0';
	name = trim(s);
	value = trim(eq + 1);
	if (!st->in_profile)
		return NULL;
	if (strcmp(name, "aws_access_key_id") == 0)
	{
		if (!copy_key(out->access_key, sizeof(out->access_key), value))
			return "aws_access_key_id is empty or longer than 128 bytes.";
		st->has_key = true;
	}
	else if (strcmp(name, "aws_secret_access_key") == 0)
	{
		if (!copy_key(out->secret_key, sizeof(out->secret_key), value))
			return "aws_secret_access_key is empty or longer than 128 bytes.";
		st->has_secret = true;
	}
	else if (strcmp(name, "aws_session_token") == 0)
	{
		if (!copy_key(out->session_token, sizeof(out->session_token), value))
			return "aws_session_token is empty or longer than 4096 bytes.";
	}
	return NULL;
}

/* The file's mode and owner as libpq wants .pgpass's; false + problem if not. */
static bool
check_file(const char *path, const struct stat *st,
		   CsS3CredentialsProblem *problem)
{
	if (!S_ISREG(st->st_mode))
		return set_problem(problem,
						   psprintf("credentials file \"%s\" is not a regular file", path),
						   NULL,
						   pstrdup("Point changestream.replica_credentials at a file in the AWS shared credentials format."));
	if (st->st_uid != geteuid())
		return set_problem(problem,
						   psprintf("credentials file \"%s\" is not owned by the server's user", path),
						   psprintf("It belongs to user id %u; the server runs as user id %u.",
									(unsigned) st->st_uid, (unsigned) geteuid()),
						   pstrdup("Change its owner to the user the server runs as (chown), as for a .pgpass file."));
	if (st->st_mode & (S_IRWXG | S_IRWXO))
		return set_problem(problem,
						   psprintf("credentials file \"%s\" has group or world access", path),
						   psprintf("Its mode is %04o.", (unsigned) (st->st_mode & 07777)),
						   pstrdup("Permissions should be u=rw (0600) or less: chmod 600 the file, as for a .pgpass file."));
	if (st->st_size > CS_CRED_FILE_MAX)
		return set_problem(problem,
						   psprintf("credentials file \"%s\" is too large", path),
						   psprintf("It is %lld bytes; at most %d are read.",
									(long long) st->st_size, CS_CRED_FILE_MAX),
						   pstrdup("Point changestream.replica_credentials at a file in the AWS shared credentials format."));
	return true;
}

/*
 * The profile's keys from the file's text (len bytes at text) into out;
 * false + problem when a line is bad or a key is missing.  Lines are split
 * on '\n' here, so a NUL byte is seen (and refused) wherever it is.
 */
static bool
parse_text(const char *text, size_t len, const char *path,
		   const char *profile, CsS3Credentials *out,
		   CsS3CredentialsProblem *problem)
{
	char	   *line = palloc(CS_CRED_LINE_MAX + 1);
	ParseState	st = {0};
	const char *p = text;
	const char *end = text + len;
	int			lineno = 0;
	bool		ok = true;

	while (ok && p < end)
	{
		const char *nl = memchr(p, '\n', end - p);
		size_t		n = (nl ? nl : end) - p;
		const char *bad;

		lineno++;
		if (n > CS_CRED_LINE_MAX)
			ok = set_problem(problem,
							 psprintf("line %d of credentials file \"%s\" is too long", lineno, path),
							 psprintf("A line may be at most %d bytes.", CS_CRED_LINE_MAX),
							 pstrdup("Check that the file is an AWS shared credentials file."));
		else if (memchr(p, '\0', n) != NULL)
			ok = set_problem(problem,
							 psprintf("invalid line %d in credentials file \"%s\"", lineno, path),
							 pstrdup("The line holds a NUL byte."),
							 pstrdup("Check that the file is an AWS shared credentials file, a text file."));
		else
		{
			memcpy(line, p, n);
			line[n] = '\0';
			if ((bad = parse_line(line, profile, &st, out)) != NULL)
				ok = set_problem(problem,
								 psprintf("invalid line %d in credentials file \"%s\"", lineno, path),
								 pstrdup(bad),
								 pstrdup("Write \"[profile]\" headers and \"name = value\" lines, as the AWS CLI does."));
		}
		p += n + 1;
	}
	explicit_bzero(line, CS_CRED_LINE_MAX + 1);
	pfree(line);
	if (!ok)
		return false;
	if (!st.profile_seen)
		return set_problem(problem,
						   psprintf("credentials file \"%s\" has no profile \"%s\"", path, profile),
						   NULL,
						   pstrdup("Add a [profile] section or set changestream.replica_profile to one the file has."));
	if (!st.has_key || !st.has_secret)
		return set_problem(problem,
						   psprintf("profile \"%s\" of credentials file \"%s\" lacks %s",
									profile, path,
									!st.has_key ? "aws_access_key_id" : "aws_secret_access_key"),
						   NULL,
						   pstrdup("A profile needs aws_access_key_id and aws_secret_access_key (and aws_session_token for temporary keys)."));
	return true;
}

/*
 * Read the whole open file (at most CS_CRED_FILE_MAX bytes) and parse it
 * into out; the text is wiped before it is freed.  false + problem on a
 * read error, a file grown past the bound, or a bad line.
 */
static bool
read_file(int fd, const char *path, const char *profile,
		  CsS3Credentials *out, CsS3CredentialsProblem *problem)
{
	char	   *text = palloc(CS_CRED_FILE_MAX + 1);
	size_t		len = 0;
	bool		ok = true;

	for (;;)
	{
		ssize_t		r = read(fd, text + len, CS_CRED_FILE_MAX + 1 - len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
		{
			ok = set_problem(problem,
							 psprintf("could not read credentials file \"%s\": %m", path),
							 NULL, pstrdup("Check the file's permissions."));
			break;
		}
		if (r == 0)
			break;
		len += r;
		if (len > CS_CRED_FILE_MAX)
		{
			ok = set_problem(problem,
							 psprintf("credentials file \"%s\" is too large", path),
							 psprintf("It holds more than %d bytes.", CS_CRED_FILE_MAX),
							 pstrdup("Point changestream.replica_credentials at a file in the AWS shared credentials format."));
			break;
		}
	}
	if (ok)
		ok = parse_text(text, len, path, profile, out, problem);
	explicit_bzero(text, CS_CRED_FILE_MAX + 1);
	pfree(text);
	return ok;
}

/*
 * The keys from the file at path, from the cache while the file is
 * unchanged.  The path is checked with stat() before it is opened, and
 * opened non-blocking, so a FIFO or a device never blocks the caller; the
 * open file is checked again (fstat) before it is read.
 */
static bool
load_file(const char *path, const char *profile, CsS3Credentials *out,
		  CsS3CredentialsProblem *problem)
{
	int			fd;
	struct stat st;
	bool		ok;

	if (stat(path, &st) != 0)
		return set_problem(problem,
						   psprintf("could not open credentials file \"%s\": %m", path),
						   NULL,
						   pstrdup("Create it in the AWS shared credentials format, readable by the server's user only (mode 0600), or set changestream.replica_credentials to 'env'."));
	if (!check_file(path, &st, problem))
		return false;
	fd = OpenTransientFile(path, O_RDONLY | O_NONBLOCK | PG_BINARY);
	if (fd < 0)
		return set_problem(problem,
						   psprintf("could not open credentials file \"%s\": %m", path),
						   NULL,
						   pstrdup("Create it in the AWS shared credentials format, readable by the server's user only (mode 0600), or set changestream.replica_credentials to 'env'."));
	if (fstat(fd, &st) != 0)
	{
		ok = set_problem(problem,
						 psprintf("could not stat credentials file \"%s\": %m", path),
						 NULL, pstrdup("Check the file."));
		CloseTransientFile(fd);
		return ok;
	}
	if (!check_file(path, &st, problem))
	{
		CloseTransientFile(fd);
		return false;
	}
	if (cache.valid && strcmp(cache.path, path) == 0 &&
		strcmp(cache.profile, profile) == 0 && cache.dev == st.st_dev &&
		cache.ino == st.st_ino && cache.size == st.st_size &&
		cache.mtime.tv_sec == st.st_mtim.tv_sec &&
		cache.mtime.tv_nsec == st.st_mtim.tv_nsec)
	{
		CloseTransientFile(fd);
		*out = cache.creds;
		return true;
	}
	cs_s3_credentials_wipe(&cache.creds);
	cache.valid = false;
	memset(out, 0, sizeof(*out));
	ok = read_file(fd, path, profile, out, problem);
	CloseTransientFile(fd);
	if (!ok)
	{
		cs_s3_credentials_wipe(out);
		return false;
	}
	strlcpy(cache.path, path, sizeof(cache.path));
	strlcpy(cache.profile, profile, sizeof(cache.profile));
	cache.dev = st.st_dev;
	cache.ino = st.st_ino;
	cache.size = st.st_size;
	cache.mtime = st.st_mtim;
	cache.creds = *out;
	cache.valid = true;
	return true;
}

/* The keys from the server's AWS_* environment variables. */
static bool
load_env(CsS3Credentials *out, CsS3CredentialsProblem *problem)
{
	const char *key = getenv("AWS_ACCESS_KEY_ID");
	const char *secret = getenv("AWS_SECRET_ACCESS_KEY");
	const char *token = getenv("AWS_SESSION_TOKEN");

	memset(out, 0, sizeof(*out));
	if (key == NULL || secret == NULL || key[0] == '\0' || secret[0] == '\0')
		return set_problem(problem,
						   pstrdup("AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY is not set in the server's environment"),
						   NULL,
						   pstrdup("Set both in the environment the server is started with (for a systemd service, its Environment= lines), or name a credentials file in changestream.replica_credentials."));
	if (!copy_key(out->access_key, sizeof(out->access_key), key) ||
		!copy_key(out->secret_key, sizeof(out->secret_key), secret) ||
		(token != NULL && token[0] != '\0' &&
		 !copy_key(out->session_token, sizeof(out->session_token), token)))
	{
		cs_s3_credentials_wipe(out);
		return set_problem(problem,
						   pstrdup("an AWS_* variable of the server's environment is too long"),
						   pstrdup("Key ids and secrets may be 128 bytes, a session token 4096."),
						   pstrdup("Check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN."));
	}
	return true;
}

/*
 * cs_s3_credentials_load(source, profile, out, problem) -> bool
 *	  The keys of changestream.replica_credentials (source: a file's
 *	  absolute path, or "env") for profile into out; true on success.  On
 *	  failure returns false with problem set (palloc'd sentences naming the
 *	  file, line or variable, never a secret) and out wiped.  Raises only
 *	  on out-of-memory.
 */
bool
cs_s3_credentials_load(const char *source, const char *profile,
					   CsS3Credentials *out, CsS3CredentialsProblem *problem)
{
	if (source == NULL || source[0] == '\0')
		return set_problem(problem,
						   pstrdup("changestream.replica_credentials is not set"),
						   NULL,
						   pstrdup("Set it to the path of an AWS shared credentials file (mode 0600, owned by the server's user), or to 'env'."));
	if (strcmp(source, "env") == 0)
		return load_env(out, problem);
	return load_file(source, profile, out, problem);
}

/*
 * cs_s3_credentials_get(source, profile, out)
 *	  As cs_s3_credentials_load(), but a problem is raised as an ERROR
 *	  (config_file_error, with its detail and hint).
 */
void
cs_s3_credentials_get(const char *source, const char *profile,
					  CsS3Credentials *out)
{
	CsS3CredentialsProblem problem;

	if (!cs_s3_credentials_load(source, profile, out, &problem))
		ereport(ERROR,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("%s", problem.message),
				 problem.detail ? errdetail("%s", problem.detail) : 0,
				 errhint("%s", problem.hint)));
}
