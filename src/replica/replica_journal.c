/*-------------------------------------------------------------------------
 *
 * replica_journal.c
 *	  The uploader's journal, "replica.journal" in the archive directory:
 *	  one line per object in the bucket (its size, its ETag and its name
 *	  relative to the archive, which is its key under the prefix), after a
 *	  first line naming the store (its endpoint, or AWS's region), bucket
 *	  and prefix it describes.  A journal of another store, bucket or
 *	  prefix is not used: the uploader starts from an empty one and adopts
 *	  what the bucket holds (docs/DESIGN.md section 15).
 *
 *	  The file is replaced durably (write, fsync, rename, fsync of the
 *	  directory, through the storage seam) after each object, a line
 *	  appended; once it holds twice the lines of its last compaction (and
 *	  64 more), and at load when a line is superseded, it is written
 *	  compactly from the table (one line per object, the latest), without
 *	  the objects whose local file retention deleted: its size stays
 *	  linear in the live objects, each record amortized constant.  A journal above
 *	  JOURNAL_MAX is not read (logged): the uploader rebuilds it from the
 *	  bucket's listing, as for a lost journal.  A crash
 *	  loses at most the record of the object being uploaded, which the
 *	  next uploader adopts after checking it.  The file is read as
 *	  untrusted input: a line that does not parse is damage (XX001 naming
 *	  the file and the offset).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/hsearch.h"

#include "archive/archive_layout.h"
#include "archive/storage.h"
#include "replica/replica_journal.h"

#define JOURNAL_HEADER	"changestream replica journal 1 "
#define JOURNAL_MAX		(256 * 1024 * 1024)

static void rewrite(CsJournal *journal);

/* Parse one entry line (without its newline); false if malformed. */
static bool
parse_line(char *line, CsJournalEntry *e)
{
	char	   *end;
	char	   *space;
	long long	size;

	errno = 0;
	size = strtoll(line, &end, 10);
	if (errno != 0 || end == line || *end != ' ' || size < 0)
		return false;
	line = end + 1;
	space = strchr(line, ' ');
	if (space == NULL || space == line || space - line >= CS_JOURNAL_ETAG_MAX)
		return false;
	memcpy(e->etag, line, space - line);
	e->etag[space - line] = '\0';
	line = space + 1;
	if (*line == '\0' || strlen(line) >= MAXPGPATH || line[0] == '/' ||
		strstr(line, "..") != NULL)
		return false;
	strlcpy(e->name, line, MAXPGPATH);
	e->size = size;
	return true;
}

/* Add or replace an entry in the table. */
static CsJournalEntry *
put_entry(CsJournal *journal, const CsJournalEntry *e)
{
	CsJournalEntry *entry;

	bool		found;

	entry = hash_search(journal->entries, e->name, HASH_ENTER, &found);
	if (!found)
		entry->seen = false;
	entry->size = e->size;
	strlcpy(entry->etag, e->etag, CS_JOURNAL_ETAG_MAX);
	return entry;
}

/*
 * cs_journal_load(directory, url) -> journal
 *	  The journal of the archive in directory, in the current memory
 *	  context, empty when there is none or it describes another store
 *	  (url: CsS3Config.store, "s3://bucket/prefix at <endpoint>" or "... in
 *	  AWS region <region>").  Raises XX001 for a damaged journal.
 */
CsJournal *
cs_journal_load(const char *directory, const char *url)
{
	CsJournal  *journal = palloc0(sizeof(CsJournal));
	char	   *path = cs_replica_journal_path(directory);
	HASHCTL		ctl;
	StringInfoData text;
	char	   *header = psprintf(JOURNAL_HEADER "%s\n", url);
	char	   *p;
	CsStorageInfo info;

	journal->directory = pstrdup(directory);
	journal->url = pstrdup(url);
	ctl.keysize = MAXPGPATH;
	ctl.entrysize = sizeof(CsJournalEntry);
	ctl.hcxt = CurrentMemoryContext;
	journal->entries = hash_create("changestream replica journal", 256, &ctl,
								   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	initStringInfo(&journal->text);
	appendStringInfoString(&journal->text, header);

	initStringInfo(&text);
	if (cs_storage_stat(path, false, &info) == 0 &&
		info.type == CS_STORAGE_FILE && info.size > JOURNAL_MAX)
	{
		ereport(LOG,
				(errmsg("changestream uploader: replica journal \"%s\" has %lld bytes, more than %d; it is rebuilt from the bucket's listing",
						path, (long long) info.size, JOURNAL_MAX)));
		return journal;
	}
	if (!cs_read_small_file(path, JOURNAL_MAX, &text, true))
		return journal;
	if (strlen(text.data) != (size_t) text.len)
		cs_file_damage(path, (int64) strlen(text.data),
					   "The replica journal holds a NUL byte.");
	if (strncmp(text.data, header, strlen(header)) != 0)
	{
		if (strncmp(text.data, JOURNAL_HEADER, strlen(JOURNAL_HEADER)) != 0)
			cs_file_damage(path, 0, "The replica journal's first line is not \"%s<url>\".",
						   JOURNAL_HEADER);
		return journal;			/* another store, bucket or prefix */
	}
	p = text.data + strlen(header);
	while (*p != '\0')
	{
		char	   *nl = strchr(p, '\n');
		CsJournalEntry e;

		if (nl == NULL)
			break;				/* a torn last line: not durable, ignored */
		*nl = '\0';
		if (!parse_line(p, &e))
			cs_file_damage(path, (int64) (p - text.data),
						   "A line of the replica journal is not \"<size> <etag> <name>\".");
		put_entry(journal, &e);
		appendStringInfo(&journal->text, "%lld %s %s\n", (long long) e.size,
						 e.etag, e.name);
		journal->lines++;
		p = nl + 1;
	}
	pfree(text.data);
	if (journal->lines > hash_get_num_entries(journal->entries))
		rewrite(journal);		/* superseded lines: compact it */
	journal->compact_lines = journal->lines;
	return journal;
}

/*
 * cs_journal_find(journal, name) -> entry or NULL
 *	  The journal's record of name (relative to the archive), if any.
 */
CsJournalEntry *
cs_journal_find(CsJournal *journal, const char *name)
{
	char		key[MAXPGPATH];

	strlcpy(key, name, MAXPGPATH);
	return hash_search(journal->entries, key, HASH_FIND, NULL);
}

/*
 * cs_journal_record(journal, name, size, etag)
 *	  Record that name (relative to the archive) is in the bucket with size
 *	  bytes and etag (quotes already removed), and make the journal durable
 *	  before returning.  The etag must hold no white space.
 */
void
cs_journal_record(CsJournal *journal, const char *name, int64 size,
				  const char *etag)
{
	CsJournalEntry e;
	CsJournalEntry *old = cs_journal_find(journal, name);

	memset(&e, 0, sizeof(e));
	strlcpy(e.name, name, MAXPGPATH);
	strlcpy(e.etag, etag[0] ? etag : "-", CS_JOURNAL_ETAG_MAX);
	e.size = size;
	if (old != NULL && old->size == size && strcmp(old->etag, e.etag) == 0)
	{
		old->seen = true;
		return;
	}
	put_entry(journal, &e)->seen = true;
	if (journal->lines >= 2 * journal->compact_lines + 64)
	{
		rewrite(journal);
		return;
	}
	appendStringInfo(&journal->text, "%lld %s %s\n", (long long) size,
					 e.etag, name);
	journal->lines++;
	cs_write_file_durably(cs_replica_journal_path(journal->directory),
						  journal->directory, journal->text.data,
						  journal->text.len);
}

/*
 * Write the journal again from its table: one line per object, the latest;
 * the entries whose local file is gone (retention deleted it) are dropped.
 */
static void
rewrite(CsJournal *journal)
{
	HASH_SEQ_STATUS seq;
	CsJournalEntry *e;
	List	   *gone = NIL;
	ListCell   *lc;

	resetStringInfo(&journal->text);
	appendStringInfo(&journal->text, JOURNAL_HEADER "%s\n", journal->url);
	journal->lines = 0;
	hash_seq_init(&seq, journal->entries);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		char	   *local = psprintf("%s/%s", journal->directory, e->name);
		CsStorageInfo info;

		if (cs_storage_stat(local, false, &info) == 0 &&
			info.type == CS_STORAGE_MISSING)
			gone = lappend(gone, pstrdup(e->name));
		else
		{
			appendStringInfo(&journal->text, "%lld %s %s\n",
							 (long long) e->size, e->etag, e->name);
			journal->lines++;
		}
		pfree(local);
	}
	foreach(lc, gone)
		hash_search(journal->entries, lfirst(lc), HASH_REMOVE, NULL);
	list_free_deep(gone);
	journal->compact_lines = journal->lines;
	cs_write_file_durably(cs_replica_journal_path(journal->directory),
						  journal->directory, journal->text.data,
						  journal->text.len);
}

/*
 * cs_journal_forget(journal, unseen_only) -> list of names
 *	  Drop from the journal every entry (unseen_only: every entry not
 *	  marked seen, i.e. not in the bucket's listing nor put since the load),
 *	  and make the journal durable without them when there were any.
 *	  Returns the names dropped (palloc'd, in the current context).  The
 *	  uploader calls it when the bucket lacks what the journal claims: a
 *	  prefix emptied by a lifecycle rule or by hand is uploaded again.
 */
List *
cs_journal_forget(CsJournal *journal, bool unseen_only)
{
	HASH_SEQ_STATUS seq;
	CsJournalEntry *e;
	List	   *names = NIL;
	ListCell   *lc;

	hash_seq_init(&seq, journal->entries);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		if (!unseen_only || !e->seen)
			names = lappend(names, pstrdup(e->name));
	}
	foreach(lc, names)
		hash_search(journal->entries, lfirst(lc), HASH_REMOVE, NULL);
	if (names != NIL)
		rewrite(journal);
	return names;
}
