/*-------------------------------------------------------------------------
 *
 * generation.c
 *	  Generations: their names (16 lowercase hex digits, never a path from
 *	  SQL), their directories, and their identity file.
 *
 * A generation's name is the creation time in microseconds since the
 * PostgreSQL epoch, in hex, bumped past the newest existing one, so names
 * sort in creation order.  The identity file is text, "key = value" per
 * line, written as tmp + fsync + rename + fsync of the directory.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nodes/pg_list.h"
#include "storage/fd.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"

#include "archive/archive_dir.h"
#include "archive/archive_layout.h"
#include "archive/generation.h"
#include "archive/segment_format.h"

/*
 * cs_validate_generation_arg
 *	  Validate a generation given to an SQL function (text) and set
 *	  *generation.  Raises 22023
 *	  (invalid_parameter_value) unless it is 16 lowercase hex digits, so no
 *	  path can ever be built from SQL input.
 */
void
cs_validate_generation_arg(const char *text, uint64 *generation)
{
	if (!cs_parse_generation(text, generation))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid generation \"%s\"", text),
				 errdetail("A generation is exactly 16 lowercase hexadecimal digits."),
				 errhint("Call changestream.generations() to list the generations.")));
}

/*
 * cs_format_utc
 *	  Format a timestamp as UTC ISO 8601 with microseconds and "Z", the way
 *	  the archive's text files (identity, snapshot manifest) record times;
 *	  independent of the session's DateStyle and TimeZone.
 */
void
cs_format_utc(TimestampTz t, char *buf, size_t len)
{
	struct pg_tm tm;
	fsec_t		fsec;

	if (timestamp2tm(t, NULL, &tm, &fsec, NULL, NULL) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ",
			 tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min,
			 tm.tm_sec, (int) fsec);
}

/*
 * Parse a time as cs_format_utc() writes it ("YYYY-MM-DDTHH:MM:SS.ffffffZ"),
 * without raising: a damaged identity file must be reported as such.
 */
static bool
parse_utc(const char *text, TimestampTz *result)
{
	struct pg_tm tm;
	int			usec;
	int			consumed = 0;

	memset(&tm, 0, sizeof(tm));
	if (sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d.%6dZ%n", &tm.tm_year, &tm.tm_mon,
			   &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &usec,
			   &consumed) != 7 || consumed != (int) strlen(text) ||
		tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
		tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60 || usec < 0)
		return false;
	return tm2timestamp(&tm, usec, NULL, result) == 0;
}

/* Parse "hi/lo" as an LSN, without raising. */
static bool
parse_lsn(const char *text, XLogRecPtr *lsn)
{
	unsigned int hi,
				lo;
	int			consumed = 0;

	if (sscanf(text, "%X/%X%n", &hi, &lo, &consumed) != 2 ||
		consumed != (int) strlen(text))
		return false;
	*lsn = ((uint64) hi << 32) | lo;
	return true;
}

/* Parse an unsigned decimal number that must fill text, without raising. */
static bool
parse_u64(const char *text, uint64 *value)
{
	char	   *end;

	if (*text < '0' || *text > '9')
		return false;
	errno = 0;
	*value = strtou64(text, &end, 10);
	return errno == 0 && *end == '\0';
}

/* parse_u64() for a value that must fit in 32 bits. */
static bool
parse_u32(const char *text, uint32 *value)
{
	uint64		v;

	if (!parse_u64(text, &v) || v > PG_UINT32_MAX)
		return false;
	*value = (uint32) v;
	return true;
}

/*
 * Apply one "key = value" line to *identity; returns the bit of the key
 * among the required ones (0 for others), or -1 for a bad value.
 */
static int
identity_key(CsIdentity *identity, const char *key, const char *val)
{
	if (strcmp(key, "format_version") == 0)
		return parse_u32(val, &identity->format_version) ? 1 : -1;
	if (strcmp(key, "generation") == 0)
		return cs_parse_generation(val, &identity->generation) ? 2 : -1;
	if (strcmp(key, "system_identifier") == 0)
		return parse_u64(val, &identity->system_identifier) ? 4 : -1;
	if (strcmp(key, "timeline") == 0)
		return parse_u32(val, &identity->timeline) ? 8 : -1;
	if (strcmp(key, "start_lsn") == 0)
		return parse_lsn(val, &identity->start_lsn) ? 16 : -1;
	if (strcmp(key, "created_at") == 0)
		return parse_utc(val, &identity->created_at) ? 32 : -1;
	if (strcmp(key, "database") == 0)
		strlcpy(identity->database, val, NAMEDATALEN);
	else if (strcmp(key, "slot") == 0)
		strlcpy(identity->slot, val, NAMEDATALEN);
	else if (strcmp(key, "plugin") == 0)
		strlcpy(identity->plugin, val, NAMEDATALEN);
	else if (strcmp(key, "plugin_options") == 0)
		strlcpy(identity->plugin_options, val, sizeof(identity->plugin_options));
	else if (strcmp(key, "reason") == 0)
		strlcpy(identity->reason, val, sizeof(identity->reason));
	else if (strcmp(key, "encoding") == 0)
		strlcpy(identity->encoding, val, NAMEDATALEN);	/* optional */
	return 0;
}

/*
 * cs_read_identity
 *	  Reads generations/<gen>/generation into *identity.  Returns false if
 *	  the file is missing.
 *	  Errors: XX001 naming the file and the line when it is not a regular
 *	  file, too large, or a required key is missing or has a bad value;
 *	  0A000 for a format version newer than this changestream; file access
 *	  SQLSTATEs for I/O failures.
 */
bool
cs_read_identity(const char *directory, uint64 generation, CsIdentity *identity)
{
	char		path[MAXPGPATH];
	StringInfoData text;
	char	   *line;
	char	   *next;
	int			seen = 0;
	int			lineno = 0;

	strlcpy(path, cs_identity_path(cs_generation_path(directory, generation)),
			MAXPGPATH);
	memset(identity, 0, sizeof(*identity));
	initStringInfo(&text);
	if (!cs_read_small_file(path, 64 * 1024, &text, true))
		return false;
	for (line = text.data; line != NULL && *line != '\0'; line = next)
	{
		char	   *eq;
		int			bit;
		size_t		n;

		lineno++;
		next = strchr(line, '\n');
		if (next != NULL)
			*next++ = '\0';
		n = strlen(line);
		if (n > 0 && line[n - 1] == '\r')
			line[n - 1] = '\0';
		eq = strstr(line, " = ");
		if (eq == NULL || line[0] == '#')
			continue;
		*eq = '\0';
		bit = identity_key(identity, line, eq + 3);
		if (bit < 0)
			cs_file_damage(path, 0, "Line %d has an invalid value for \"%s\".",
						   lineno, line);
		seen |= bit;
	}
	pfree(text.data);
	if ((seen & 2) && identity->generation != generation)
		cs_file_damage(path, 0, "It names generation %016llx, but lies in generation %016llx.",
					   (unsigned long long) identity->generation,
					   (unsigned long long) generation);
	if (seen == 63 && identity->format_version > CS_FORMAT_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("generation identity file \"%s\" has format version %u, newer than this changestream (%u)",
						path, identity->format_version, CS_FORMAT_VERSION),
				 errhint("Upgrade changestream, or archive to another directory.")));
	if (seen != 63)
		cs_file_damage(path, 0,
					   "The identity file lacks required keys (format_version, generation, system_identifier, timeline, start_lsn, created_at).");
	return true;
}

/*
 * cs_require_identity
 *	  cs_read_identity() for a generation that must have its identity file.
 *	  Errors: XX001 when it is missing; as cs_read_identity() otherwise.
 */
void
cs_require_identity(const char *directory, uint64 generation,
					CsIdentity *identity)
{
	if (!cs_read_identity(directory, generation, identity))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("generation %016llx has no identity file",
						(unsigned long long) generation),
				 errhint(CS_DAMAGE_HINT)));
}

static void
write_text_file(const char *path, const char *text)
{
	FILE	   *f = AllocateFile(path, "w");

	if (f == NULL)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", path)));
	if (fputs(text, f) == EOF || fflush(f) != 0 || fsync(fileno(f)) != 0)
	{
		int			save_errno = errno;

		FreeFile(f);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", path)));
	}
	if (FreeFile(f) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not close file \"%s\": %m", path)));
}

/*
 * cs_generation_prepare
 *	  Chooses the new generation's name (identity->generation) and builds
 *	  generations/<gen>.tmp with wal/ and snapshots/, where the opening
 *	  snapshot is written before the generation exists; returns that
 *	  directory's palloc'd path.  Errors: file access errors (class 58).
 *	  A crash leaves only a .tmp, removed at the next start.
 */
char *
cs_generation_prepare(const char *directory, CsIdentity *identity)
{
	List	   *existing;
	uint64		gen;
	char	   *tmpdir;

	cs_make_dir(cs_generations_dir_path(directory));

	gen = (uint64) GetCurrentTimestamp();
	existing = cs_list_generations(directory);
	if (existing != NIL)
	{
		uint64		newest = *(uint64 *) llast(existing);

		if (gen <= newest)
		{
			if (newest == PG_UINT64_MAX)
				ereport(ERROR,
						(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						 errmsg("no generation name is left after %016llx",
								(unsigned long long) newest),
						 errhint("Remove the stray entries from the archive's generations directory.")));
			gen = newest + 1;
		}
	}
	identity->generation = gen;
	identity->format_version = CS_FORMAT_VERSION;

	tmpdir = cs_generation_tmp_path(directory, gen);
	cs_remove_tree(tmpdir);
	cs_make_dir(tmpdir);
	cs_make_dir(cs_gendir_wal_path(tmpdir));
	cs_make_dir(cs_gendir_snapshots_path(tmpdir));
	return tmpdir;
}

/*
 * cs_generation_commit
 *	  Write the identity file (created_at is set here; session_settings is
 *	  the replication connection's pinned settings, cs_session_settings())
 *	  into tmpdir, fsync it, rename tmpdir to generations/<gen> and fsync
 *	  generations/.  Errors: file access errors (class 58).
 */
void
cs_generation_commit(const char *directory, CsIdentity *identity,
					 const char *session_settings, const char *tmpdir)
{
	char	   *gendir = cs_generation_path(directory, identity->generation);
	char		when[64];
	char		lsn[32];
	StringInfoData buf;

	identity->created_at = GetCurrentTimestamp();
	cs_format_utc(identity->created_at, when, sizeof(when));
	snprintf(lsn, sizeof(lsn), "%X/%X", LSN_FORMAT_ARGS(identity->start_lsn));
	initStringInfo(&buf);
	appendStringInfo(&buf,
					 "# changestream generation identity\n"
					 "format_version = %u\n"
					 "generation = %016llx\n"
					 "system_identifier = " UINT64_FORMAT "\n"
					 "timeline = %u\n"
					 "database = %s\n"
					 "slot = %s\n"
					 "plugin = %s\n"
					 "plugin_options = %s\n"
					 "session_settings = %s\n"
					 "encoding = %s\n"
					 "start_lsn = %s\n"
					 "created_at = %s\n"
					 "reason = %s\n",
					 identity->format_version,
					 (unsigned long long) identity->generation,
					 identity->system_identifier,
					 identity->timeline,
					 identity->database,
					 identity->slot,
					 identity->plugin,
					 identity->plugin_options,
					 session_settings,
					 identity->encoding,
					 lsn, when, identity->reason);
	write_text_file(cs_identity_path(tmpdir), buf.data);
	cs_fsync_path(tmpdir, true);
	cs_fsync_path(cs_gendir_snapshots_path(tmpdir), true);
	cs_fsync_path(cs_gendir_wal_path(tmpdir), true);
	cs_durable_rename(tmpdir, gendir, cs_generations_dir_path(directory));
}
