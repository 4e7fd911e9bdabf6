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
extern char *cs_slot_name;
extern char *cs_publication;
extern char *cs_conninfo;
extern int	cs_status_interval_ms;
extern int	cs_flush_interval_ms;
extern int	cs_segment_size_kb;
extern int	cs_segment_timeout_s;
extern int	cs_compression_level;
extern int	cs_snapshot_interval_s;
extern bool cs_preallocate_segments;
extern char *cs_message_prefixes;
extern int	cs_retention_s;		/* changestream.retention, s; 0 = keep all */

extern void cs_define_gucs(void);

#endif							/* CS_GUC_H */
