/*-------------------------------------------------------------------------
 *
 * archive_config.h
 *	  Declarations of archive_config.c: an archive's configuration, the
 *	  settings that name one archive and its source.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_ARCHIVE_CONFIG_H
#define CS_ARCHIVE_CONFIG_H

/*
 * An archive's configuration: a copy of the changestream.* settings that
 * say what is archived where.  The archiver takes one per session and
 * passes it down; the other processes and backends take one from the
 * current settings (cs_archive_config_current()).  Never NULL strings: an
 * unset setting is "".
 */
typedef struct CsArchiveConfig
{
	char	   *directory;		/* the archive's tree, "" = disabled */
	char	   *root;			/* changestream.directory, "" = disabled */
	char	   *database;		/* changestream.database */
	char	   *slot_name;		/* changestream.slot_name */
	char	   *publication;	/* changestream.publication */
	char	   *conninfo;		/* changestream.conninfo, "" = local server */
} CsArchiveConfig;

#include "nodes/pg_list.h"

extern CsArchiveConfig *cs_archive_config_current(void);
extern List *cs_archived_databases(void);
extern bool cs_archive_config_is_archived(const char *database);
extern CsArchiveConfig *cs_archive_config_for(const char *database, Oid dboid);
extern CsArchiveConfig *cs_archive_config_select(const char *database,
												 Oid dboid);
extern void cs_archive_config_serve(const char *database);
extern bool cs_archive_config_session_equal(const CsArchiveConfig *a,
											const CsArchiveConfig *b);

/* Is archiving enabled (changestream.directory set)? */
static inline bool
cs_archive_config_enabled(const CsArchiveConfig *config)
{
	return config->directory[0] != '\0';
}

/* Is the archived server the local one (changestream.conninfo empty)? */
static inline bool
cs_archive_config_local(const CsArchiveConfig *config)
{
	return config->conninfo[0] == '\0';
}

#endif							/* CS_ARCHIVE_CONFIG_H */
