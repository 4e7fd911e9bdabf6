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

#include "changestream.h"

/*
 * cs_parse_generation(text, *generation) -> bool
 *	  True when text is exactly 16 lowercase hex digits; stores the value.
 */
bool
cs_parse_generation(const char *text, uint64 *generation)
{
	uint64		v = 0;
	int			i;

	if (text == NULL || strlen(text) != 16)
		return false;
	for (i = 0; i < 16; i++)
	{
		char		c = text[i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else
			return false;
	}
	*generation = v;
	return true;
}

/*
 * cs_validate_generation_arg(text, *generation) -> void
 *	  Validate a generation given to an SQL function.  Raises 22023
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
 * cs_generation_path(directory, generation) -> palloc'd char *
 *	  <directory>/generations/<16 hex digits>
 */
char *
cs_generation_path(const char *directory, uint64 generation)
{
	return psprintf("%s/generations/%016llx", directory,
					(unsigned long long) generation);
}

/*
 * cs_wal_dir_path(directory, generation) -> palloc'd char *
 *	  <directory>/generations/<generation>/wal
 */
char *
cs_wal_dir_path(const char *directory, uint64 generation)
{
	return psprintf("%s/generations/%016llx/wal", directory,
					(unsigned long long) generation);
}

static int
cmp_uint64(const ListCell *a, const ListCell *b)
{
	uint64		x = *(uint64 *) lfirst(a);
	uint64		y = *(uint64 *) lfirst(b);

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * cs_list_generations(directory) -> List of uint64 * (palloc'd), ascending
 *	  The generations present: directories named with 16 hex digits that
 *	  hold an identity file.  Anything else (a half-made "<gen>.tmp", a
 *	  stray file or empty directory) is ignored.  A missing generations/
 *	  directory gives NIL.  58030 if it cannot be read.
 */
List *
cs_list_generations(const char *directory)
{
	char		path[MAXPGPATH];
	DIR		   *dir;
	struct dirent *de;
	List	   *result = NIL;

	snprintf(path, sizeof(path), "%s/generations", directory);
	dir = AllocateDir(path);
	if (dir == NULL)
	{
		if (errno == ENOENT)
			return NIL;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open directory \"%s\": %m", path)));
	}
	while ((de = ReadDir(dir, path)) != NULL)
	{
		uint64		g;

		struct stat st;
		char		idpath[MAXPGPATH];

		/* a generation is a directory with its identity file */
		snprintf(idpath, sizeof(idpath), "%s/%s/generation", path, de->d_name);
		if (cs_parse_generation(de->d_name, &g) && stat(idpath, &st) == 0 &&
			S_ISREG(st.st_mode))
		{
			uint64	   *p = palloc(sizeof(uint64));

			*p = g;
			result = lappend(result, p);
		}
	}
	FreeDir(dir);
	list_sort(result, cmp_uint64);
	return result;
}

/*
 * cs_format_utc(t, buf, len) -> void
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
		elog(ERROR, "timestamp out of range");
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ",
			 tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min,
			 tm.tm_sec, (int) fsec);
}

static void
identity_path(const char *gendir, char *path)
{
	snprintf(path, MAXPGPATH, "%s/generation", gendir);
}

/*
 * cs_read_identity(directory, generation, *identity) -> bool
 *	  Read generations/<gen>/generation.  False if the file is missing;
 *	  raises 58030 on other I/O errors and XX001 (data_corrupted) when a
 *	  required key is absent.
 */
bool
cs_read_identity(const char *directory, uint64 generation, CsIdentity *identity)
{
	char		path[MAXPGPATH];
	char	   *gendir = cs_generation_path(directory, generation);
	FILE	   *f;
	char		line[1024];
	int			seen = 0;

	identity_path(gendir, path);
	memset(identity, 0, sizeof(*identity));
	f = AllocateFile(path, "r");
	if (f == NULL)
	{
		if (errno == ENOENT)
			return false;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	}
	while (fgets(line, sizeof(line), f) != NULL)
	{
		char	   *eq = strstr(line, " = ");
		char	   *key = line;
		char	   *val;
		size_t		n;

		if (eq == NULL || line[0] == '#')
			continue;
		*eq = '\0';
		val = eq + 3;
		n = strlen(val);
		while (n > 0 && (val[n - 1] == '\n' || val[n - 1] == '\r'))
			val[--n] = '\0';

		if (strcmp(key, "format_version") == 0)
			identity->format_version = (uint32) strtoul(val, NULL, 10), seen |= 1;
		else if (strcmp(key, "generation") == 0)
			seen |= cs_parse_generation(val, &identity->generation) ? 2 : 0;
		else if (strcmp(key, "system_identifier") == 0)
			identity->system_identifier = strtou64(val, NULL, 10), seen |= 4;
		else if (strcmp(key, "timeline") == 0)
			identity->timeline = (uint32) strtoul(val, NULL, 10), seen |= 8;
		else if (strcmp(key, "database") == 0)
			strlcpy(identity->database, val, NAMEDATALEN);
		else if (strcmp(key, "slot") == 0)
			strlcpy(identity->slot, val, NAMEDATALEN);
		else if (strcmp(key, "plugin") == 0)
			strlcpy(identity->plugin, val, NAMEDATALEN);
		else if (strcmp(key, "plugin_options") == 0)
			strlcpy(identity->plugin_options, val, sizeof(identity->plugin_options));
		else if (strcmp(key, "start_lsn") == 0)
		{
			unsigned int hi,
						lo;

			if (sscanf(val, "%X/%X", &hi, &lo) == 2)
			{
				identity->start_lsn = ((uint64) hi << 32) | lo;
				seen |= 16;
			}
		}
		else if (strcmp(key, "created_at") == 0)
			identity->created_at =
				DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in,
														CStringGetDatum(val),
														ObjectIdGetDatum(InvalidOid),
														Int32GetDatum(-1)));
		else if (strcmp(key, "reason") == 0)
			strlcpy(identity->reason, val, sizeof(identity->reason));
	}
	FreeFile(f);
	if (seen == 31 && identity->format_version > CS_FORMAT_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("generation identity file \"%s\" has format version %u, newer than this changestream (%u)",
						path, identity->format_version, CS_FORMAT_VERSION),
				 errhint("Upgrade changestream, or archive to another directory.")));
	if (seen != 31)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("generation identity file \"%s\" is incomplete", path)));
	return true;
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
 * cs_generation_prepare(directory, identity) -> palloc'd char * (tmp dir)
 *	  Choose the new generation's name (identity->generation) and build
 *	  generations/<gen>.tmp with wal/ and snapshots/, where the opening
 *	  snapshot is written before the generation exists.  58030 on I/O
 *	  errors.  A crash leaves only a .tmp, removed at the next start.
 */
char *
cs_generation_prepare(const char *directory, CsIdentity *identity)
{
	List	   *existing;
	uint64		gen;
	char	   *tmpdir;
	char		path[MAXPGPATH];

	snprintf(path, sizeof(path), "%s/generations", directory);
	cs_make_dir(path);

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

	tmpdir = psprintf("%s.tmp", cs_generation_path(directory, gen));
	{
		struct stat st;

		if (stat(tmpdir, &st) == 0 && !rmtree(tmpdir, true))
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not remove directory \"%s\"", tmpdir)));
	}
	cs_make_dir(tmpdir);
	snprintf(path, sizeof(path), "%s/wal", tmpdir);
	cs_make_dir(path);
	snprintf(path, sizeof(path), "%s/snapshots", tmpdir);
	cs_make_dir(path);
	return tmpdir;
}

/*
 * cs_generation_commit(directory, identity, tmpdir) -> void
 *	  Write the identity file (created_at is set here) into tmpdir, fsync
 *	  it, rename tmpdir to generations/<gen> and fsync generations/.  58030
 *	  on I/O errors.
 */
void
cs_generation_commit(const char *directory, CsIdentity *identity,
					 const char *tmpdir)
{
	char	   *gendir = cs_generation_path(directory, identity->generation);
	char		path[MAXPGPATH];
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
					 cs_session_settings(),
					 lsn, when, identity->reason);
	identity_path(tmpdir, path);
	write_text_file(path, buf.data);
	snprintf(path, sizeof(path), "%s/snapshots", tmpdir);
	cs_fsync_path(path, true);
	snprintf(path, sizeof(path), "%s/wal", tmpdir);
	cs_fsync_path(path, true);
	cs_fsync_path(tmpdir, true);

	if (rename(tmpdir, gendir) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not rename \"%s\" to \"%s\": %m", tmpdir, gendir)));
	snprintf(path, sizeof(path), "%s/generations", directory);
	cs_fsync_path(path, true);
}
