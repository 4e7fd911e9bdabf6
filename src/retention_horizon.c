/*-------------------------------------------------------------------------
 *
 * retention_horizon.c
 *	  A generation's retention horizon, generations/<gen>/retention: the
 *	  lowest segment index and the oldest snapshot that retention keeps.
 *	  Retention writes it (durably) before it deletes anything; the readers
 *	  read it and ignore what lies below it, so that a crash in the middle
 *	  of a deletion leaves an archive every reader finds sound (retention
 *	  rule 6 of docs/DESIGN.md; the file is specified in docs/FORMAT.md
 *	  section 4.3).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "storage/fd.h"

#include "archive_dir.h"
#include "archive_layout.h"
#include "generation.h"
#include "retention.h"

/*
 * cs_snapshot_name_lsn
 *	  The LSN in a snapshot file name ("<16 hex digits>.snapshot.gz").
 *	  Returns false for any other name.
 */
bool
cs_snapshot_name_lsn(const char *name, XLogRecPtr *lsn)
{
	char	   *end;

	if (!cs_is_snapshot_file_name(name))
		return false;
	*lsn = (XLogRecPtr) strtou64(name, &end, 16);
	return end == name + 16;
}

/* Parse one "key = value" line of the horizon file into horizon. */
static int
parse_line(const char *path, char *line, CsHorizon *horizon)
{
	char	   *eq = strstr(line, " = ");
	char	   *value;
	char	   *end;
	uint32		hi,
				lo;

	if (line[0] == '#' || eq == NULL)
		return 0;
	*eq = '\0';
	value = eq + 3;
	if (strcmp(line, "first_segment") == 0)
	{
		horizon->first_segment = strtoi64(value, &end, 10);
		if (end == value || *end != '\0' || horizon->first_segment < 0)
			cs_file_damage(path, 0, "first_segment \"%s\" is not a segment index.", value);
		return 1;
	}
	if (strcmp(line, "snapshot_lsn") == 0)
	{
		if (sscanf(value, "%X/%X", &hi, &lo) != 2)
			cs_file_damage(path, 0, "snapshot_lsn \"%s\" is not an LSN.", value);
		horizon->snapshot_lsn = ((uint64) hi << 32) | lo;
		return 2;
	}
	if (strcmp(line, "snapshot_time_us") == 0)
	{
		horizon->snapshot_time = strtoi64(value, &end, 10);
		if (end == value || *end != '\0')
			cs_file_damage(path, 0, "snapshot_time_us \"%s\" is not a number.", value);
		return 4;
	}
	return 0;
}

/*
 * cs_read_horizon
 *	  Read generation's retention horizon into *horizon.  Returns false
 *	  when the generation has none (retention never deleted anything of
 *	  it).  Errors: XX001 (data_corrupted) naming the file when a key is
 *	  missing or does not parse; file access errors as
 *	  cs_read_small_file().
 */
bool
cs_read_horizon(const char *directory, uint64 generation, CsHorizon *horizon)
{
	char	   *path = psprintf("%s/%s", cs_generation_path(directory, generation),
								CS_HORIZON_FILE);
	StringInfoData text;
	char	   *line;
	char	   *next;
	int			seen = 0;

	memset(horizon, 0, sizeof(*horizon));
	initStringInfo(&text);
	if (!cs_read_small_file(path, 4096, &text, true))
		return false;
	for (line = text.data; line != NULL && *line != '\0'; line = next)
	{
		next = strchr(line, '\n');
		if (next != NULL)
			*next++ = '\0';
		seen |= parse_line(path, line, horizon);
	}
	if (seen != 7)
		cs_file_damage(path, 0,
					   "The retention horizon lacks first_segment, snapshot_lsn or snapshot_time_us.");
	return true;
}

/*
 * cs_write_horizon
 *	  Write generation's retention horizon durably: to retention.tmp,
 *	  fsync, rename, fsync of the generation's directory.  Errors: file
 *	  access errors (class 58) as core's messages.
 */
void
cs_write_horizon(const char *directory, uint64 generation,
				 const CsHorizon *horizon)
{
	char	   *gendir = cs_generation_path(directory, generation);
	char	   *path = psprintf("%s/%s", gendir, CS_HORIZON_FILE);
	char		when[64];
	char	   *content;

	cs_format_utc(horizon->snapshot_time, when, sizeof(when));
	content = psprintf("# changestream retention horizon\n"
					   "first_segment = %lld\n"
					   "snapshot_lsn = %X/%X\n"
					   "snapshot_time_us = " INT64_FORMAT "\n"
					   "# snapshot_time %s\n",
					   (long long) horizon->first_segment,
					   LSN_FORMAT_ARGS(horizon->snapshot_lsn),
					   horizon->snapshot_time, when);
	cs_write_file_durably(path, gendir, content, strlen(content));
}
