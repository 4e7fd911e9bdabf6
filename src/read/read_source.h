/*-------------------------------------------------------------------------
 *
 * read_source.h
 *	  Where the readers read the archive: the local directory or the
 *	  replica's bucket (read_source.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_READ_SOURCE_H
#define CS_READ_SOURCE_H

/* what a reader was asked to read */
typedef enum CsReadSource
{
	CS_READ_AUTO,				/* the local archive where it has the files */
	CS_READ_LOCAL,				/* changestream.directory */
	CS_READ_REPLICA				/* the bucket of changestream.replica_url */
} CsReadSource;

extern CsReadSource cs_parse_read_source(const char *text);
extern const char *cs_reader_directory(CsReadSource source,
									   const char *gen_text);
extern const char *cs_local_directory(void);

#endif							/* CS_READ_SOURCE_H */
