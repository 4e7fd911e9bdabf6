/*-------------------------------------------------------------------------
 *
 * guc.h
 *	  Declarations of guc.c: the changestream.* settings (GUC variables).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_GUC_H
#define CS_GUC_H


extern char *cs_directory;
extern char *cs_database;
extern char *cs_databases;
extern char *cs_read_database;	/* "" = the current database's archive */		/* changestream.databases, "" = database alone */
extern char *cs_slot_name;
extern char *cs_publication;
extern char *cs_conninfo;
extern int	cs_status_interval_ms;
extern int	cs_flush_interval_ms;
extern bool cs_synchronous;
extern int	cs_segment_size_kb;
extern int	cs_segment_timeout_s;
extern int	cs_compression_level;
extern int	cs_snapshot_interval_s;
extern int	cs_recapture_delay_s;	/* changestream.recapture_delay, s; -1 off */
extern bool cs_preallocate_segments;
extern char *cs_message_prefixes;
extern int	cs_retention_s;		/* changestream.retention, s; 0 = keep all */

/* changestream.replica_uri_style */
typedef enum CsUriStyle
{
	CS_URI_STYLE_AUTO,
	CS_URI_STYLE_PATH,
	CS_URI_STYLE_HOST
} CsUriStyle;

extern char *cs_replica_url;	/* s3://bucket/prefix; "" = no replica */
extern char *cs_replica_endpoint;	/* http[s]://host[:port]; "" = AWS */
extern char *cs_replica_region;
extern int	cs_replica_uri_style;	/* CsUriStyle */
extern char *cs_replica_credentials;	/* a file's path, "env" or "" */
extern char *cs_replica_profile;
extern char *cs_replica_ca_file;	/* "" = the system's CAs */

/* changestream.replica_durability */
typedef enum CsReplicaDurability
{
	CS_REPLICA_DURABILITY_LOCAL,
	CS_REPLICA_DURABILITY_REMOTE
} CsReplicaDurability;

extern int	cs_replica_max_backlog_kb;	/* 0 = unbounded */
extern int	cs_replica_sync_interval_ms;	/* 0 = sealed segments only */
extern int	cs_replica_retention_s;	/* -1 = changestream.retention */
extern int	cs_replica_retention_grace_s;	/* s before deleting */
extern int	cs_replica_durability;	/* CsReplicaDurability */

extern void cs_define_gucs(void);

#endif							/* CS_GUC_H */
