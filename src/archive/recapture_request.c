/*-------------------------------------------------------------------------
 *
 * recapture_request.c
 *	  The archiver's pending re-capture (docs/DESIGN.md section 12,
 *	  "Re-capture"), kept durably in generations/<gen>/recapture so that
 *	  it outlives the archiver: the end LSN of the newest commit of a
 *	  schema change that changed rows without archived changes, which no
 *	  snapshot of the generation covers yet.  Written (tmp, fsync, rename,
 *	  fsync of the directory) when the request is taken, removed once a
 *	  snapshot covers it, read at session start.  Only the archiver reads
 *	  it; readers, retention and the uploader pass it by (docs/FORMAT.md
 *	  section 3.5).  The file is untrusted: what does not parse is damage,
 *	  reported as a WARNING, since the archiver's answer to it is to take
 *	  a snapshot anyway rather than to stop archiving.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "archive/archive_layout.h"
#include "archive/recapture_request.h"
#include "archive/storage.h"
#include "base/compat.h"

#define RECAPTURE_KEY		"wanted_lsn = "
#define RECAPTURE_MAX_BYTES	4096

#define HEX_DIGITS "0123456789ABCDEFabcdef"

/*
 * Parse "<hex>/<hex>" (all of text, 1 to 8 hex digits each) into *lsn;
 * false if it is not one, or is 0/0.
 */
static bool
parse_lsn(const char *text, XLogRecPtr *lsn)
{
	size_t		hlen = strspn(text, HEX_DIGITS);
	size_t		llen;

	if (hlen < 1 || hlen > 8 || text[hlen] != '/')
		return false;
	llen = strspn(text + hlen + 1, HEX_DIGITS);
	if (llen < 1 || llen > 8 || text[hlen + 1 + llen] != '\0')
		return false;
	*lsn = ((XLogRecPtr) strtoul(text, NULL, 16) << 32) |
		strtoul(text + hlen + 1, NULL, 16);
	return *lsn != InvalidXLogRecPtr;
}

/* Report damage of the file path at offset (WARNING, XX001). */
static void
report_damage(const char *path, long long offset, const char *detail)
{
	ereport(WARNING,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("changestream file \"%s\" is damaged at offset %lld",
					path, offset),
			 errdetail("%s", detail),
			 errhint("The archiver takes a snapshot of the published tables and replaces the file.")));
}

/*
 * cs_read_recapture_request
 *	  Does generation have a pending re-capture?  False when there is no
 *	  file.  True with *lsn, the LSN a snapshot must be at or after to
 *	  cover it; or True with *lsn Invalid when the file is damaged (a
 *	  WARNING, XX001, names it and the offset): some snapshot is wanted,
 *	  at which LSN is not known.  Errors: file access SQLSTATEs as
 *	  cs_read_small_file(); XX001 when it is not a regular file or too
 *	  large.
 */
bool
cs_read_recapture_request(const char *directory, uint64 generation,
						  XLogRecPtr *lsn)
{
	char	   *path = cs_recapture_path(directory, generation);
	StringInfoData text;
	char	   *line;
	char	   *next;
	bool		found = false;

	*lsn = InvalidXLogRecPtr;
	initStringInfo(&text);
	if (!cs_read_small_file(path, RECAPTURE_MAX_BYTES, &text, true))
		return false;
	if (memchr(text.data, '\0', text.len) != NULL)
	{
		report_damage(path, (char *) memchr(text.data, '\0', text.len) - text.data,
					  "The file holds a zero byte.");
		return true;
	}
	for (line = text.data; line != NULL && *line != '\0'; line = next)
	{
		long long	offset = line - text.data;

		next = strchr(line, '\n');
		if (next != NULL)
			*next++ = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		if (found || strncmp(line, RECAPTURE_KEY, strlen(RECAPTURE_KEY)) != 0 ||
			!parse_lsn(line + strlen(RECAPTURE_KEY), lsn))
		{
			*lsn = InvalidXLogRecPtr;
			report_damage(path, offset,
						  "Expected one line \"" RECAPTURE_KEY "<LSN>\".");
			return true;
		}
		found = true;
	}
	if (!found)
		report_damage(path, 0, "The file lacks \"" RECAPTURE_KEY "<LSN>\".");
	return true;
}

/*
 * cs_write_recapture_request
 *	  Record durably that generation wants a snapshot at or after lsn
 *	  (replacing what the file held).  Errors: file access errors (class
 *	  58) as cs_write_file_durably().
 */
void
cs_write_recapture_request(const char *directory, uint64 generation,
						   XLogRecPtr lsn)
{
	char	   *content;

	content = psprintf("# changestream re-capture: the archiver takes a snapshot at or after this LSN\n"
					   RECAPTURE_KEY "%X/%X\n", LSN_FORMAT_ARGS(lsn));
	cs_write_file_durably(cs_recapture_path(directory, generation),
						  cs_generation_path(directory, generation),
						  content, strlen(content));
	pfree(content);
}

/*
 * cs_remove_recapture_request
 *	  Remove generation's pending re-capture, durably; nothing when it has
 *	  none.  Errors: file access errors as cs_durable_unlink().
 */
void
cs_remove_recapture_request(const char *directory, uint64 generation)
{
	(void) cs_durable_unlink(cs_recapture_path(directory, generation),
							 cs_generation_path(directory, generation));
}
