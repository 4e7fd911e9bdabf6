/*-------------------------------------------------------------------------
 *
 * generation_timelines.c
 *	  generations/<gen>/timelines: the promotions a generation was continued
 *	  across (issue 33).  A generation starts on its identity's timeline;
 *	  when a promoted standby's archiver proves that the archive continues
 *	  on the new timeline without a gap (docs/DESIGN.md section 6), it
 *	  appends one line "<new timeline> <switch LSN>" here, durably, before
 *	  anything of the new timeline is archived.  The switch LSN is where the
 *	  previous timeline ended (the server's timeline history).  The
 *	  identity file and the segment headers keep the timeline the
 *	  generation started on, so that readers of format 1 read the
 *	  generation unchanged; the file is specified in docs/FORMAT.md 4.4.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "archive/archive_layout.h"
#include "archive/generation_timelines.h"
#include "archive/storage.h"

#define TIMELINES_MAX_BYTES 65536

/* Up to 8 uppercase hex digits, as %X writes them; false otherwise. */
static bool
parse_hex32(const char *s, size_t len, uint32 *out)
{
	uint32		v = 0;

	if (len == 0 || len > 8)
		return false;
	for (size_t i = 0; i < len; i++)
	{
		char		c = s[i];

		if (c >= '0' && c <= '9')
			v = v * 16 + (c - '0');
		else if (c >= 'A' && c <= 'F')
			v = v * 16 + (c - 'A' + 10);
		else
			return false;
	}
	*out = v;
	return true;
}

/*
 * One line "<timeline> <hi>/<lo>", exactly as cs_add_generation_timeline()
 * writes it: a decimal timeline from 1 to 2^32 - 1 without sign, spaces
 * or leading zeros, one space, and an LSN in %X/%X.  False otherwise.
 */
static bool
parse_line(const char *line, uint32 *tli, XLogRecPtr *lsn)
{
	const char *space = strchr(line, ' ');
	const char *slash;
	uint64		t = 0;
	uint32		hi,
				lo;

	if (space == NULL || space == line || line[0] == '0' ||
		space - line > 10)
		return false;
	for (const char *p = line; p < space; p++)
	{
		if (*p < '0' || *p > '9')
			return false;
		t = t * 10 + (*p - '0');
	}
	slash = strchr(space + 1, '/');
	if (t > PG_UINT32_MAX || slash == NULL ||
		!parse_hex32(space + 1, slash - space - 1, &hi) ||
		!parse_hex32(slash + 1, strlen(slash + 1), &lo))
		return false;
	*tli = (uint32) t;
	*lsn = ((uint64) hi << 32) | lo;
	return true;
}

/*
 * Read the generation's timelines file into text (false when it has none)
 * (unchanged) and check every line: timelines strictly increasing from the identity's,
 * switch LSNs not decreasing and not before the generation's start.
 * Returns the newest timeline in *last.  Errors: XX001 naming the file and
 * the line's offset; file access errors as cs_read_small_file().
 */
static bool
read_timelines(const char *directory, const CsIdentity *identity,
			   StringInfo text, uint32 *last)
{
	char	   *path = cs_timelines_path(directory, identity->generation);
	XLogRecPtr	prev_lsn = identity->start_lsn;
	char	   *copy;
	char	   *line;
	char	   *next;

	*last = identity->timeline;
	if (!cs_read_small_file(path, TIMELINES_MAX_BYTES, text, true))
		return false;
	if (strlen(text->data) != (size_t) text->len)
		cs_file_damage(path, strlen(text->data), "The file holds a NUL byte.");
	copy = pnstrdup(text->data, text->len);	/* cut into lines below */
	for (line = copy; line != NULL && *line != '\0'; line = next)
	{
		uint32		tli;
		XLogRecPtr	lsn;
		long		offset = line - copy;

		next = strchr(line, '\n');
		if (next == NULL)
			cs_file_damage(path, offset, "The last line has no line feed.");
		*next++ = '\0';
		if (line[0] == '#')
			continue;
		if (!parse_line(line, &tli, &lsn))
			cs_file_damage(path, offset, "The line is not \"<timeline> <switch LSN>\".");
		if (tli <= *last || lsn < prev_lsn)
			cs_file_damage(path, offset,
						   "Timeline %u at %X/%X does not follow timeline %u at %X/%X.",
						   tli, LSN_FORMAT_ARGS(lsn), *last,
						   LSN_FORMAT_ARGS(prev_lsn));
		*last = tli;
		prev_lsn = lsn;
	}
	pfree(copy);
	return true;
}

/*
 * cs_generation_timeline
 *	  The timeline the generation is archived on now: the newest line of
 *	  its timelines file, else its identity's timeline.  Errors: XX001 for
 *	  a damaged timelines file; file access errors.
 */
uint32
cs_generation_timeline(const char *directory, const CsIdentity *identity)
{
	StringInfoData text;
	uint32		last;

	initStringInfo(&text);
	(void) read_timelines(directory, identity, &text, &last);
	pfree(text.data);
	return last;
}

/*
 * cs_add_generation_timeline
 *	  Record, durably, that the generation continues on timeline from
 *	  switch_lsn (where the previous timeline ended), which must follow its
 *	  newest timeline: the file is rewritten whole (tmp, fsync, rename, fsync of the generation's directory).
 *	  Errors: XX001 for a damaged timelines file; file access errors.
 */
void
cs_add_generation_timeline(const char *directory, const CsIdentity *identity,
						   uint32 timeline, XLogRecPtr switch_lsn)
{
	StringInfoData content;
	uint32		last;

	initStringInfo(&content);
	if (!read_timelines(directory, identity, &content, &last))
		appendStringInfo(&content,
						 "# changestream timelines: <timeline> <LSN where the previous one ended>\n");
	if (timeline <= last)
		elog(ERROR, "timeline %u does not follow the generation's timeline %u",
			 timeline, last);
	appendStringInfo(&content, "%u %X/%X\n", timeline,
					 LSN_FORMAT_ARGS(switch_lsn));
	cs_write_file_durably(cs_timelines_path(directory, identity->generation),
						  cs_generation_path(directory, identity->generation),
						  content.data, content.len);
	pfree(content.data);
}
