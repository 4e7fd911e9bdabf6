/*-------------------------------------------------------------------------
 *
 * archive_layout.h
 *	  The archive directory's layout: every path and file name of the
 *	  archive is made and parsed here, and the listings of what is on disk
 *	  (docs/FORMAT.md section 3).  See archive_layout.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_ARCHIVE_LAYOUT_H
#define CS_ARCHIVE_LAYOUT_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "nodes/pg_list.h"

#include "archive/storage.h"

struct stat;

/* a generation's retention horizon file (retention_horizon.c) */
#define CS_HORIZON_FILE		"retention"

/* One segment file of a generation, as listed. */
typedef struct CsSegmentFile
{
	int64		index;			/* from the file name */
	bool		compressed;		/* *.wal.gz */
	bool		raw_twin;		/* compressed, and *.wal exists too */
	char		path[MAXPGPATH];
	int64		size;			/* bytes on disk */
	TimestampTz mtime;
} CsSegmentFile;

/* directories */
extern char *cs_generations_dir_path(const char *directory);
extern bool cs_parse_generation(const char *text, uint64 *generation);
extern char *cs_generation_path(const char *directory, uint64 generation);
extern char *cs_generation_tmp_path(const char *directory, uint64 generation);
extern char *cs_wal_dir_path(const char *directory, uint64 generation);
extern char *cs_snapshots_dir_path(const char *directory, uint64 generation);
extern char *cs_gendir_wal_path(const char *gendir);
extern char *cs_gendir_snapshots_path(const char *gendir);
extern bool cs_is_snapshots_dir_name(const char *name);

/* files of a generation directory, of the archive directory */
extern char *cs_identity_path(const char *gendir);
extern char *cs_horizon_path(const char *directory, uint64 generation);
extern char *cs_schema_history_path(const char *directory, uint64 generation);
extern char *cs_timelines_path(const char *directory, uint64 generation);
extern char *cs_recapture_path(const char *directory, uint64 generation);
extern char *cs_replica_journal_path(const char *directory);
extern char *cs_replica_verified_path(const char *directory);
extern char *cs_replica_retention_path(const char *directory);

/* the kinds of files of a generation directory */
typedef enum CsGenerationFileKind
{
	CS_GENFILE_OTHER,			/* schema history, timelines, ... */
	CS_GENFILE_IDENTITY,
	CS_GENFILE_HORIZON,
	CS_GENFILE_SEGMENT,			/* raw or .gz */
	CS_GENFILE_SNAPSHOT			/* complete */
} CsGenerationFileKind;

extern bool cs_parse_generation_file(const char *name, uint64 *generation,
									 CsGenerationFileKind *kind,
									 int64 *order);
extern char *cs_archive_relative_name(const char *directory,
									  const char *path);
extern char *cs_lock_file_path(const char *directory, bool maintenance);
extern char *cs_spare_path(const char *directory);
extern char *cs_spare_part_path(const char *directory);
extern char *cs_file_in(const char *dir, const char *name);
extern char *cs_databases_dir_path(const char *root);
extern char *cs_database_tree_path(const char *root, const char *database);
extern char *cs_tmp_path(const char *path);
extern bool cs_is_tmp_name(const char *name);
extern bool cs_is_maintenance_tmp_name(const char *name);

/* segments */
extern char *cs_segment_file_name(int64 index, bool compressed);
extern bool cs_parse_segment_file_name(const char *name, int64 *index,
									   bool *compressed);
extern char *cs_segment_path(const char *wal_dir, int64 index,
							 bool compressed);
extern char *cs_compressed_path(const char *raw_path);
extern char *cs_compressed_tmp_path(const char *raw_path);

/* snapshots */
extern char *cs_snapshot_file_name(XLogRecPtr lsn);
extern char *cs_snapshot_path(const char *snapshots_dir, XLogRecPtr lsn);
extern char *cs_snapshot_tmp_path(const char *snapshots_dir, XLogRecPtr lsn);
extern char *cs_snapshot_data_path(const char *snapshots_dir, XLogRecPtr lsn);
extern bool cs_is_snapshot_file_name(const char *name);
extern bool cs_snapshot_name_lsn(const char *name, XLogRecPtr *lsn);

extern TimestampTz cs_file_mtime(const struct stat *st);

/* listings of what is on disk (the retention horizon is applied above) */
extern List *cs_list_generations(const char *directory);
extern List *cs_list_all_segments(const char *directory, uint64 generation);
extern List *cs_list_all_snapshots(const char *directory, uint64 generation);

extern ErrorData *cs_catch_error(void (*fn) (void *arg), void *arg,
								 MemoryContext cxt);
extern ErrorData *cs_catch_damage(void (*fn) (void *arg), void *arg,
								  MemoryContext cxt);

#endif							/* CS_ARCHIVE_LAYOUT_H */
