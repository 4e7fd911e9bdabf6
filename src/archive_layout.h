/*-------------------------------------------------------------------------
 *
 * archive_layout.h
 *	  The archive directory's layout: paths, file names, listings and the
 *	  one way to open a file found there.  See archive_layout.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_ARCHIVE_LAYOUT_H
#define CS_ARCHIVE_LAYOUT_H

#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "nodes/pg_list.h"

struct stat;

/* One segment file of a generation, as listed. */
typedef struct CsSegmentFile
{
	int64		index;			/* from the file name */
	bool		compressed;		/* *.wal.gz */
	char		path[MAXPGPATH];
	int64		size;			/* bytes on disk */
	TimestampTz mtime;
} CsSegmentFile;

extern bool cs_parse_generation(const char *text, uint64 *generation);
extern char *cs_generation_path(const char *directory, uint64 generation);
extern char *cs_wal_dir_path(const char *directory, uint64 generation);
extern char *cs_snapshots_dir_path(const char *directory, uint64 generation);
extern char *cs_segment_file_name(int64 index, bool compressed);
extern bool cs_parse_segment_file_name(const char *name, int64 *index,
									   bool *compressed);
extern bool cs_is_snapshot_file_name(const char *name);
extern TimestampTz cs_file_mtime(const struct stat *st);

extern List *cs_list_generations(const char *directory);
extern List *cs_list_segments(const char *directory, uint64 generation);
extern void cs_check_segment_sequence(const char *directory, uint64 generation,
									  List *segments);
extern List *cs_list_snapshots(const char *directory, uint64 generation);

extern int	cs_open_regular_file(const char *path, bool missing_ok);
extern int	cs_open_counted_file(const char *path, bool missing_ok);
extern bool cs_read_small_file(const char *path, Size max_bytes,
							   StringInfo out, bool missing_ok);

/*
 * Damage found in a file of the archive: XX001 (data_corrupted) naming the
 * file and the byte offset (in the uncompressed stream for *.gz files),
 * with the problem as errdetail.  Nothing is changed on disk.
 */
#define CS_DAMAGE_HINT \
	"The file is left as it is: restore it from a copy, or call changestream.new_generation() to start a new generation."

#define cs_segment_damage(path, offset, ...) \
	ereport(ERROR, \
			(errcode(ERRCODE_DATA_CORRUPTED), \
			 errmsg("changestream segment \"%s\" is damaged at offset %lld", \
					(path), (long long) (offset)), \
			 errdetail(__VA_ARGS__), \
			 errhint(CS_DAMAGE_HINT)))

#define cs_file_damage(path, offset, ...) \
	ereport(ERROR, \
			(errcode(ERRCODE_DATA_CORRUPTED), \
			 errmsg("changestream file \"%s\" is damaged at offset %lld", \
					(path), (long long) (offset)), \
			 errdetail(__VA_ARGS__), \
			 errhint(CS_DAMAGE_HINT)))

#endif							/* CS_ARCHIVE_LAYOUT_H */
