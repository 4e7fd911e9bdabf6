/*-------------------------------------------------------------------------
 *
 * restore_manifest.h
 *	  The tables of a snapshot's manifest as restore() uses them, read and
 *	  checked as untrusted input (restore_manifest.c; docs/FORMAT.md
 *	  section 3.2).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_RESTORE_MANIFEST_H
#define CS_RESTORE_MANIFEST_H

#include "nodes/pg_list.h"

#include "archive/snapshot_reader.h"
#include "read/definition_read.h"

/* A sequence a column of a table owned on the source, at the snapshot. */
typedef struct CsArchivedSequence
{
	char	   *column;			/* the owning column's name at the snapshot */
	char	   *sequence;		/* the source's sequence, quoted, qualified */
	bool		known;			/* its value could be read (is_called not
								 * null) */
	bool		is_called;
	int64		last_value;		/* valid when is_called */
	AttrNumber	attnum;			/* the target's column (restore.c), or 0 */
} CsArchivedSequence;

/* One table of the manifest. */
typedef struct CsManifestTable
{
	char	   *schema;
	char	   *name;
	Oid			oid;			/* pg_class OID on the source */
	char		identity;		/* replica_identity: 'd', 'n', 'f', 'i', or
								 * '\0' when the manifest has none */
	List	   *columns;		/* per column a List of (name, type) */
	bool		has_key;		/* "key" given (snapshot format 2 on) */
	List	   *key;			/* char *: replica identity key columns */
	List	   *sequences;		/* CsArchivedSequence * (format 2 on) */
	CsTableDefinition *definition;	/* the table's definition, or NULL when
									 * the manifest has none */
	const char *path;			/* the snapshot file, for messages */
	int64		offset;			/* the manifest line's offset in it */
	int			position;		/* 1-based, in the manifest's tables */
} CsManifestTable;

extern List *cs_manifest_tables(CsSnapshotReader *reader, const char *path);
extern List *cs_manifest_column_types(const CsManifestTable *mt);
extern char *cs_type_sql(const char *text, char **why);

#endif							/* CS_RESTORE_MANIFEST_H */
