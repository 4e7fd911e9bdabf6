/*-------------------------------------------------------------------------
 *
 * schema_history.c
 *	  Which relation of the archived stream is the extension's
 *	  changestream.ddl_history (docs/DESIGN.md section 12): its name, and
 *	  the OIDs each generation trusts as that table, kept durably in
 *	  generations/<gen>/schema_history by the archiver and read by every
 *	  reader.  The file is untrusted: a line that is not an OID is damage
 *	  (XX001, file and offset named).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "archive/archive_dir.h"
#include "archive/archive_layout.h"
#include "archive/schema_history.h"
#include "base/compat.h"

/*
 * cs_ddl_is_history_name
 *	  Is schema.name the name of the extension's history table?  A name
 *	  alone proves nothing (see cs_ddl_is_history()); this is for the
 *	  places that leave the table out by name, such as restore()'s
 *	  tables from a snapshot manifest.
 */
bool
cs_ddl_is_history_name(const char *schema, const char *name)
{
	return schema != NULL && name != NULL &&
		strcmp(schema, CS_DDL_SCHEMA) == 0 && strcmp(name, CS_DDL_TABLE) == 0;
}

/*
 * cs_ddl_is_history
 *	  Is rel (a Relation message of the archive) the extension's
 *	  changestream.ddl_history?  Its name and one of the OIDs trusted
 *	  (cs_ddl_trusted_oids()) must both match: a table of that name made
 *	  by anyone else (after DROP EXTENSION, say) is ordinary data.
 */
bool
cs_ddl_is_history(const LogicalRepRelation *rel, const List *trusted)
{
	return rel != NULL && cs_ddl_is_history_name(rel->nspname, rel->relname) &&
		list_member_oid(trusted, rel->remoteid);
}

/*
 * cs_ddl_trusted_oids
 *	  The OIDs of generations/<gen>/schema_history (NIL when there is no
 *	  such file: then no relation is schema history).  Errors: XX001
 *	  naming the file when a line is not an OID; file access errors as
 *	  cs_read_small_file().
 */
List *
cs_ddl_trusted_oids(const char *directory, uint64 generation)
{
	char	   *path = cs_schema_history_path(directory, generation);
	StringInfoData text;
	char	   *line;
	char	   *next;
	List	   *oids = NIL;

	initStringInfo(&text);
	if (!cs_read_small_file(path, 65536, &text, true))
		return NIL;
	for (line = text.data; line != NULL && *line != '\0'; line = next)
	{
		char	   *end;
		unsigned long oid;

		next = strchr(line, '\n');
		if (next != NULL)
			*next++ = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		errno = 0;
		oid = strtoul(line, &end, 10);
		if (errno != 0 || end == line || *end != '\0' || oid > PG_UINT32_MAX ||
			oid == InvalidOid)
			cs_file_damage(path, line - text.data, "\"%s\" is not an OID.", line);
		oids = list_append_unique_oid(oids, (Oid) oid);
	}
	return oids;
}

/*
 * cs_ddl_trust_oid
 *	  The archiver, before it streams the extension's publication: adds oid
 *	  (the extension's ddl_history on the archived server, from pg_depend)
 *	  to generations/<gen>/schema_history unless it is there, durably
 *	  (schema_history.tmp, fsync, rename, fsync of the directory), so that
 *	  every row of that table the generation holds comes after it.
 *	  Errors: as cs_ddl_trusted_oids(); file access errors (class 58).
 */
void
cs_ddl_trust_oid(const char *directory, uint64 generation, Oid oid)
{
	List	   *oids = cs_ddl_trusted_oids(directory, generation);
	char	   *gendir = cs_generation_path(directory, generation);
	char	   *path = cs_schema_history_path(directory, generation);
	StringInfoData content;
	ListCell   *lc;

	if (list_member_oid(oids, oid))
		return;
	oids = lappend_oid(oids, oid);
	initStringInfo(&content);
	appendStringInfoString(&content,
						   "# changestream schema history: OIDs of the extension's table "
						   CS_DDL_SCHEMA "." CS_DDL_TABLE "\n");
	foreach(lc, oids)
		appendStringInfo(&content, "%u\n", lfirst_oid(lc));
	cs_write_file_durably(path, gendir, content.data, content.len);
}
