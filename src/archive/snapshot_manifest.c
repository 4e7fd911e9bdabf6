/*-------------------------------------------------------------------------
 *
 * snapshot_manifest.c
 *	  Reads the manifest at the start of a snapshot file (docs/FORMAT.md,
 *	  section 3.2): the SQL comment lines "-- lsn:", "-- tables:" and
 *	  "-- rows:" before "-- end of manifest".  The file is untrusted: it is
 *	  opened without blocking and checked to be a regular file, only the
 *	  manifest's first lines are read (a bounded number of bytes), and the
 *	  file and zlib's buffers are released in PG_FINALLY, on error too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "storage/fd.h"

#include "archive/archive_layout.h"
#include "archive/snapshot_manifest.h"

#define MANIFEST_MAX_LINES	64	/* the manifest is a handful of lines */

/* Read the manifest's keys from an open gzip stream; true if all three. */
static bool
parse_manifest(gzFile gz, XLogRecPtr *lsn, int *tables, int64 *rows)
{
	char		line[1024];
	int			seen = 0;
	int			n;

	for (n = 0; n < MANIFEST_MAX_LINES && seen != 7; n++)
	{
		unsigned int hi,
					lo;
		long long	v;

		if (gzgets(gz, line, sizeof(line)) == NULL)
			break;
		if (strncmp(line, "-- end of manifest", 18) == 0)
			break;
		if (sscanf(line, "-- lsn: %X/%X", &hi, &lo) == 2)
		{
			*lsn = ((uint64) hi << 32) | lo;
			seen |= 1;
		}
		else if (sscanf(line, "-- tables: %lld", &v) == 1 && v >= 0 && v <= PG_INT32_MAX)
		{
			*tables = (int) v;
			seen |= 2;
		}
		else if (sscanf(line, "-- rows: %lld", &v) == 1 && v >= 0)
		{
			*rows = v;
			seen |= 4;
		}
	}
	return seen == 7;
}

/*
 * cs_snapshot_read_manifest
 *	  Reads a snapshot file's manifest: its consistent LSN, table count and
 *	  row count, and the file's stat() in *st.  Returns false if the file
 *	  does not exist (removed since it was listed).
 *	  Errors: XX001 naming the file when it is not a regular file or has no
 *	  valid manifest; 53000 when fd.c allows no more files; file access
 *	  SQLSTATEs for I/O failures.
 */
bool
cs_snapshot_read_manifest(const char *path, XLogRecPtr *lsn, int *tables,
						  int64 *rows, struct stat *st)
{
	int			fd = cs_open_counted_file(path, true);
	gzFile		gz = NULL;
	bool		valid = false;

	if (fd < 0)
		return false;
	PG_TRY();
	{
		if (fstat(fd, st) != 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not stat file \"%s\": %m", path)));
		gz = gzdopen(fd, "rb");
		if (gz == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory")));
		valid = parse_manifest(gz, lsn, tables, rows);
	}
	PG_FINALLY();
	{
		cs_close_counted_file(gz, fd);
	}
	PG_END_TRY();
	if (!valid)
		cs_file_damage(path, 0,
					   "The snapshot does not begin with a valid manifest (lsn, tables and rows).");
	return true;
}
