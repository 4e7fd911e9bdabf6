/*-------------------------------------------------------------------------
 *
 * table_definition.c
 *	  A table's full definition as JSON: its columns (type, NOT NULL,
 *	  default, generated expression, identity, the sequence a serial
 *	  column owns), its constraints (primary key, unique, check,
 *	  exclusion), its other indexes and its replica identity; the format
 *	  is docs/FORMAT.md section 3.2 ("definition").  One query text, run
 *	  by the snapshot on its copy connection (worker/snapshot.c, libpq) and
 *	  by changestream.ddl_table_definition() (sql/ddl_history.c, SPI), so
 *	  that the snapshot manifest and the schema history say the same thing
 *	  the same way.
 *
 *	  Every catalog object and function is qualified with pg_catalog (the
 *	  copy connection's search_path is the server's default; operators
 *	  resolve in pg_catalog first unless a search_path names it later,
 *	  which neither caller does).  The expressions are deparsed by
 *	  pg_get_expr(), pg_get_constraintdef() and pg_get_indexdef(), and the
 *	  types by format_type(): these read the current catalog, not the
 *	  transaction's snapshot.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "archive/table_definition.h"

/*
 * The query: rows (oid text, definition text) for each ordinary or
 * partitioned table whose OID the subquery or list %s gives.
 *
 * columns: every column not dropped, generated ones and ones a column
 * list leaves unpublished included, in attnum order, each with its attnum
 * (which names it across renames, and tells a column dropped and added
 * again under its name from the one before); "collation" is the
 * column's collation where it is not its type's (regcollation text,
 * qualified unless in pg_catalog), else null; "default" is the
 * default expression of a column that is not generated, "generated" the
 * expression of a generated one (generated_kind 's' stored, 'v' virtual),
 * "serial_sequence" the unqualified name of the sequence the column owns
 * by an automatic dependency (serial, OWNED BY; an identity column's
 * sequence is internal and not named).
 * constraints: primary key, unique, check and exclusion constraints (no
 * foreign keys, no not-null constraints of PostgreSQL 18 on), by name.
 * indexes: the valid indexes that back no such constraint, by name;
 * "using" is pg_get_indexdef() after "CREATE [UNIQUE ]INDEX name ON
 * [ONLY ]schema.table USING " (access method, columns, INCLUDE, WHERE),
 * null should the text not begin so.
 */
static const char *const definition_query =
	"SELECT c.oid::pg_catalog.text, pg_catalog.json_build_object( "
	" 'columns', COALESCE((SELECT pg_catalog.json_agg(pg_catalog.json_build_object( "
	"     'name', a.attname, 'attnum', a.attnum, "
	"     'type', pg_catalog.format_type(a.atttypid, a.atttypmod), "
	"     'collation', CASE WHEN a.attcollation <> (SELECT t.typcollation "
	"         FROM pg_catalog.pg_type t WHERE t.oid = a.atttypid) "
	"         THEN a.attcollation::pg_catalog.regcollation::pg_catalog.text END, "
	"     'not_null', a.attnotnull, "
	"     'default', CASE WHEN a.attgenerated = '' THEN pg_catalog.pg_get_expr(d.adbin, d.adrelid) END, "
	"     'generated', CASE WHEN a.attgenerated <> '' THEN pg_catalog.pg_get_expr(d.adbin, d.adrelid) END, "
	"     'generated_kind', a.attgenerated::pg_catalog.text, "
	"     'identity', a.attidentity::pg_catalog.text, "
	"     'serial_sequence', (SELECT s.relname FROM pg_catalog.pg_depend dp "
	"         JOIN pg_catalog.pg_class s ON s.oid = dp.objid AND s.relkind = 'S' "
	"        WHERE dp.classid = 'pg_catalog.pg_class'::pg_catalog.regclass "
	"          AND dp.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass "
	"          AND dp.refobjid = c.oid AND dp.refobjsubid = a.attnum AND dp.deptype = 'a' "
	"        ORDER BY s.relname LIMIT 1)) "
	"   ORDER BY a.attnum) "
	"   FROM pg_catalog.pg_attribute a "
	"   LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
	"  WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '[]'), "
	" 'constraints', COALESCE((SELECT pg_catalog.json_agg(pg_catalog.json_build_object( "
	"     'name', k.conname, 'type', k.contype::pg_catalog.text, "
	"     'definition', pg_catalog.pg_get_constraintdef(k.oid)) ORDER BY k.conname) "
	"   FROM pg_catalog.pg_constraint k "
	"  WHERE k.conrelid = c.oid AND k.contype IN ('p', 'u', 'c', 'x')), '[]'), "
	" 'indexes', COALESCE((SELECT pg_catalog.json_agg(pg_catalog.json_build_object( "
	"     'name', ic.relname, 'unique', i.indisunique, "
	"     'using', CASE WHEN pg_catalog.starts_with(x.def, x.prefix) "
	"              THEN pg_catalog.substr(x.def, pg_catalog.length(x.prefix) + 1) END) "
	"   ORDER BY ic.relname) "
	"   FROM pg_catalog.pg_index i "
	"   JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid "
	"   CROSS JOIN LATERAL (SELECT pg_catalog.pg_get_indexdef(i.indexrelid) AS def, "
	"       'CREATE ' || CASE WHEN i.indisunique THEN 'UNIQUE ' ELSE '' END || 'INDEX ' "
	"       || pg_catalog.quote_ident(ic.relname) || ' ON ' "
	"       || CASE WHEN ic.relkind = 'I' THEN 'ONLY ' ELSE '' END "
	"       || pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname) "
	"       || ' USING ' AS prefix) x "
	"  WHERE i.indrelid = c.oid AND i.indisvalid "
	"    AND NOT EXISTS (SELECT FROM pg_catalog.pg_constraint k "
	"                     WHERE k.conrelid = c.oid AND k.conindid = i.indexrelid "
	"                       AND k.contype IN ('p', 'u', 'x'))), '[]'), "
	" 'replica_identity', c.relreplident::pg_catalog.text, "
	" 'replica_identity_index', (SELECT ic.relname FROM pg_catalog.pg_index i "
	"     JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid "
	"    WHERE i.indrelid = c.oid AND i.indisreplident))::pg_catalog.text "
	"FROM pg_catalog.pg_class c "
	"JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
	"WHERE c.relkind IN ('r', 'p') AND c.oid IN (%s)";

/*
 * cs_table_definition_query
 *	  The query text giving (oid::text, definition::text) for the tables
 *	  whose OIDs oid_list_sql yields: a list of OID literals, a subquery
 *	  or a parameter reference ("$1"), inserted as it stands (the caller
 *	  builds it from OIDs, never from names).  Relations that are not
 *	  ordinary or partitioned tables, and OIDs of no relation, give no
 *	  row.  Palloc'd in the current memory context.
 */
char *
cs_table_definition_query(const char *oid_list_sql)
{
	return psprintf(definition_query, oid_list_sql);
}
