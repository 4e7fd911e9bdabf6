/*-------------------------------------------------------------------------
 *
 * replica_journal.h
 *	  The uploader's durable journal of what is in the bucket
 *	  (replica_journal.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CS_REPLICA_JOURNAL_H
#define CS_REPLICA_JOURNAL_H

#include "nodes/pg_list.h"
#include "utils/hsearch.h"

#define CS_JOURNAL_ETAG_MAX 80

/* one object that is up: its name under the prefix, size and ETag */
typedef struct CsJournalEntry
{
	char		name[MAXPGPATH];	/* hash key: relative to the archive */
	int64		size;
	char		etag[CS_JOURNAL_ETAG_MAX];	/* without quotes */
	bool		seen;			/* in memory only: listed in the bucket, or
								 * put, since the journal was loaded */
} CsJournalEntry;

typedef struct CsJournal
{
	char	   *directory;		/* the archive directory holding it */
	char	   *url;			/* the store, bucket and prefix it describes */
	HTAB	   *entries;		/* of CsJournalEntry */
	StringInfoData text;		/* the file's content */
	int64		lines;			/* entry lines in text (some superseded) */
	int64		compact_lines;	/* lines after the last compaction or load */
} CsJournal;

extern CsJournal *cs_journal_load(const char *directory, const char *url);
extern CsJournalEntry *cs_journal_find(CsJournal *journal, const char *name);
extern void cs_journal_record(CsJournal *journal, const char *name,
							  int64 size, const char *etag);
extern List *cs_journal_forget(CsJournal *journal, bool unseen_only);

#endif							/* CS_REPLICA_JOURNAL_H */
