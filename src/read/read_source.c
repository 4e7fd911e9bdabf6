/*-------------------------------------------------------------------------
 *
 * read_source.c
 *	  Where the readers (generations(), wal_segments(), snapshots(),
 *	  changes(), restore(), verify()) read the archive: the root their
 *	  paths are made from, the local directory (changestream.directory) or
 *	  the replica's bucket ("s3://<bucket>/<prefix>", read through the S3
 *	  storage driver, storage_s3.c).  docs/DESIGN.md section 16.
 *
 *	  'auto' (the default) reads the local archive while it holds the
 *	  files asked for, and the bucket where it does not: when
 *	  changestream.directory is empty or holds no generation (a fresh
 *	  server for disaster recovery, a lost disk), or when the generation
 *	  named is not there any more (local retention removed it) but a
 *	  replica is configured.  'local' and 'replica' choose explicitly.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "archive/archive_layout.h"
#include "archive/generation.h"
#include "base/archive_config.h"
#include "base/guc.h"
#include "base/shmem_status.h"
#include "read/read_source.h"

/*
 * cs_parse_read_source(text) -> the source
 *	  NULL or "auto", "local", "replica".  Errors: 22023 for anything else.
 */
CsReadSource
cs_parse_read_source(const char *text)
{
	if (text == NULL || strcmp(text, "auto") == 0)
		return CS_READ_AUTO;
	if (strcmp(text, "local") == 0)
		return CS_READ_LOCAL;
	if (strcmp(text, "replica") == 0)
		return CS_READ_REPLICA;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid source \"%s\"", text),
			 errhint("Use 'auto', 'local' or 'replica'.")));
	return CS_READ_AUTO;		/* keep the compiler quiet */
}

/*
 * cs_local_directory() -> changestream.directory, or NULL when it is
 *	  empty or the library is not preloaded (nothing archives here then).
 */
const char *
cs_local_directory(void)
{
	CsArchiveConfig *config;

	if (!cs_status_attached())
		return NULL;
	config = cs_archive_config_current();
	return cs_archive_config_enabled(config) ? config->directory : NULL;
}

/*
 * The replica's copy of the archive read (cs_archive_config_current(): the
 * current database's, or changestream.read_database's): the replica's
 * root for changestream.database, "<root>/databases/<name>" for another
 * database, as the uploader mirrors the local layout (docs/databases.md).
 * 55000 naming the problem when no replica is configured.
 */
static const char *
replica_root(void)
{
	const char *problem;
	char	   *root = cs_storage_s3_root(&problem);
	CsArchiveConfig *config;

	if (root == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the replica cannot be read: %s", problem),
				 errhint("Set changestream.replica_url, changestream.replica_endpoint (for a store other than AWS) and changestream.replica_credentials, then reload.")));
	/* by name: also without a local directory (a server for recovery) */
	config = cs_archive_config_current();
	if (strcmp(config->database, cs_database ? cs_database : "") == 0)
		return root;
	return cs_database_tree_path(root, config->database);
}

/* Whether the local archive in directory holds the generation asked for. */
static bool
local_has(const char *directory, const char *gen_text)
{
	uint64		generation;
	CsStorageInfo info;

	if (gen_text == NULL)
		return cs_list_generations(directory) != NIL;
	cs_validate_generation_arg(gen_text, &generation);
	return cs_storage_stat(cs_generation_path(directory, generation), true,
						   &info) == 0 && info.type == CS_STORAGE_DIR;
}

/*
 * cs_reader_directory(source, gen_text) -> the root to read from
 *	  The local directory or the replica's root ("s3://bucket/prefix"), by
 *	  source (see the file header); gen_text is the generation the call
 *	  names (NULL: any), which 'auto' looks for locally first.
 *	  Errors: 55000 when the source chosen (or, for 'auto', both) is not
 *	  configured: changestream.directory empty or the library not
 *	  preloaded, changestream.replica_url empty; 22023 for a malformed
 *	  gen_text.
 */
const char *
cs_reader_directory(CsReadSource source, const char *gen_text)
{
	const char *local;
	const char *problem;

	/* not preloaded: no setting of changestream's is even defined */
	cs_status_require_loaded();
	local = cs_local_directory();
	if (source == CS_READ_REPLICA)
		return replica_root();
	if (source == CS_READ_LOCAL || (local != NULL && local_has(local, gen_text)))
	{
		if (local == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("changestream.directory is not set"),
					 errhint("Set changestream.directory in postgresql.conf and reload.")));
		return local;
	}
	/* auto, and the local archive lacks it: the bucket, if there is one */
	if (cs_storage_s3_root(&problem) != NULL)
		return replica_root();
	if (local != NULL)
		return local;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("changestream.directory is not set"),
			 errhint("Set changestream.directory in postgresql.conf and reload (or, to read the archive from its bucket, changestream.replica_url and the other changestream.replica_* settings).")));
	return NULL;				/* keep the compiler quiet */
}
