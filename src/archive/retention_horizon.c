/*-------------------------------------------------------------------------
 *
 * retention_horizon.c
 *	  A generation's retention horizon, generations/<gen>/retention: the
 *	  lowest segment index and the oldest snapshot that retention keeps.
 *	  Retention writes it (durably) before it deletes anything; the readers
 *	  read it and ignore what lies below it, so that a crash in the middle
 *	  of a deletion leaves an archive every reader finds sound (retention
 *	  rule 6 of docs/DESIGN.md; the file is specified in docs/FORMAT.md
 *	  section 4.3).  The horizon is applied here, above the layout, which
 *	  lists what is on disk: cs_list_segments(), cs_list_snapshots() and
 *	  cs_check_segment_sequence() are the readers' view of a generation.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "archive/archive_layout.h"
#include "archive/generation.h"
#include "archive/retention_horizon.h"

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
	char	   *path = cs_horizon_path(directory, generation);
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
	char	   *path = cs_horizon_path(directory, generation);
	char	   *content = cs_horizon_text(horizon);

	cs_write_file_durably(path, gendir, content, strlen(content));
}

/*
 * cs_horizon_text(horizon) -> palloc'd text
 *	  The content of a horizon file (the format cs_read_horizon() reads):
 *	  the local file, and the replica's "retention" objects.
 */
char *
cs_horizon_text(const CsHorizon *horizon)
{
	char		when[64];

	cs_format_utc(horizon->snapshot_time, when, sizeof(when));
	return psprintf("# changestream retention horizon\n"
					"first_segment = %lld\n"
					"snapshot_lsn = %X/%X\n"
					"snapshot_time_us = " INT64_FORMAT "\n"
					"# snapshot_time %s\n",
					(long long) horizon->first_segment,
					LSN_FORMAT_ARGS(horizon->snapshot_lsn),
					horizon->snapshot_time, when);
}

/* Do the (sorted) segments skip an index? */
static bool
has_gap(List *segments)
{
	int64		prev = -1;
	ListCell   *lc;

	foreach(lc, segments)
	{
		CsSegmentFile *sf = lfirst(lc);

		if (prev >= 0 && sf->index != prev + 1)
			return true;
		prev = sf->index;
	}
	return false;
}

/* cs_list_all_segments() without the segments below the horizon. */
static List *
list_kept_segments(const char *directory, uint64 generation)
{
	List	   *result = cs_list_all_segments(directory, generation);
	CsHorizon	horizon;
	int			below = 0;

	if (!cs_read_horizon(directory, generation, &horizon))
		return result;
	/* below the retention horizon: being deleted, not read */
	while (below < list_length(result) &&
		   ((CsSegmentFile *) list_nth(result, below))->index < horizon.first_segment)
		below++;
	return list_delete_first_n(result, below);
}

/*
 * cs_list_segments
 *	  The segment files of a generation, as cs_list_all_segments() gives
 *	  them (a List of CsSegmentFile by index), without those below its
 *	  retention horizon (docs/FORMAT.md 4.3).
 *	  Errors: as cs_list_all_segments(); XX001 for a damaged horizon file.
 */
List *
cs_list_segments(const char *directory, uint64 generation)
{
	List	   *result = list_kept_segments(directory, generation);

	/*
	 * The maintenance worker replaces a raw segment by its .gz beside every
	 * reader: a directory read that passed the .gz's place before it was
	 * created and reached the raw name after it was removed sees neither.
	 * Such a gap is gone at the next read; a real one stays, and
	 * cs_check_segment_sequence() reports it.
	 */
	for (int i = 0; i < 2 && has_gap(result); i++)
	{
		list_free_deep(result);
		result = list_kept_segments(directory, generation);
	}
	return result;
}

/*
 * cs_check_segment_sequence
 *	  Checks that a listing from cs_list_segments() has no gap: a missing
 *	  segment between two present ones loses the transactions it held.
 *	  Errors: XX001 naming the missing file.
 */
void
cs_check_segment_sequence(const char *directory, uint64 generation,
						  List *segments)
{
	ListCell   *lc;
	int64		expect = -1;
	CsHorizon	horizon;
	char	   *wal_dir = cs_wal_dir_path(directory, generation);

	if (!cs_read_horizon(directory, generation, &horizon))
	{
		if (segments == NIL)
			return;				/* a new generation, before its first segment */
		horizon.first_segment = 0;
	}
	else if (segments == NIL)
	{
		/* retention never deletes the newest segment */
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("changestream segment \"%s\" is missing",
						cs_segment_path(wal_dir, horizon.first_segment, false)),
				 errdetail("The generation's retention horizon keeps segments from %lld on, but none is there.",
						   (long long) horizon.first_segment),
				 errhint(CS_DAMAGE_HINT)));
	}
	expect = horizon.first_segment;
	foreach(lc, segments)
	{
		CsSegmentFile *sf = lfirst(lc);

		if (expect >= 0 && sf->index != expect)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("changestream segment \"%s\" is missing",
							cs_segment_path(wal_dir, expect, false)),
					 expect == horizon.first_segment ?
					 errdetail("The generation's segments start at %lld (its retention horizon, or 0 without one), but the first one found is %lld.",
							   (long long) expect, (long long) sf->index) :
					 errdetail("Segments %lld and %lld of the generation exist, so every segment between them must too.",
							   (long long) (expect - 1), (long long) sf->index),
					 errhint(CS_DAMAGE_HINT)));
		expect = sf->index + 1;
	}
}

/*
 * cs_list_snapshots
 *	  Returns the names of a generation's durable snapshot files as a List
 *	  of palloc'd strings in LSN order, without those below its retention
 *	  horizon (being deleted, not read).
 *	  Errors: as cs_list_all_snapshots(); XX001 for a damaged horizon file.
 */
List *
cs_list_snapshots(const char *directory, uint64 generation)
{
	List	   *names;
	List	   *result = NIL;
	ListCell   *lc;
	CsHorizon	horizon;
	XLogRecPtr	lsn;

	if (!cs_read_horizon(directory, generation, &horizon))
		horizon.snapshot_lsn = InvalidXLogRecPtr;
	names = cs_list_all_snapshots(directory, generation);
	foreach(lc, names)
	{
		if (cs_snapshot_name_lsn(lfirst(lc), &lsn) &&
			lsn >= horizon.snapshot_lsn)
			result = lappend(result, lfirst(lc));
	}
	list_free(names);
	return result;
}
