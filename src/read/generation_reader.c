/*-------------------------------------------------------------------------
 *
 * generation_reader.c
 *	  Reads a generation's entries in stream order, segment after segment,
 *	  checking continuity as it goes (docs/DESIGN.md, damaged-archive
 *	  rules; docs/FORMAT.md section 11):
 *
 *	  - segment indexes have no gap (cs_check_segment_sequence());
 *	  - each header names its own index, its generation, and the system
 *		identifier and timeline of the generation's identity;
 *	  - segment 0 starts at the generation's start LSN (after retention,
 *		the first segment kept starts at or before the retention horizon's
 *		snapshot: docs/FORMAT.md 4.3), and each segment
 *		starts at the position of record where the previous one ended (or,
 *		when the previous one was skipped, no earlier than it started);
 *	  - no segment but the newest ends inside a transaction, and commit
 *		LSNs strictly increase, so no transaction is read twice;
 *	  - a sealed segment (format 2 or 3) holds what its seal says: its end
 *		position, first and last commit LSN, commit time range and count;
 *	  - a sealed segment skipped for the bounds still has its header
 *		checked, and its seal carries the chain on to the next segment;
 *	  - a compressed segment the caller remembers as read whole and sound
 *		before (verify()'s record of the replica: CsSegmentMemory) is
 *		passed over unopened, its remembered header checked in the chain
 *		as a skipped segment's is;
 *	  - only the newest raw segment may end in a torn tail, and of it only
 *		complete transactions are read;
 *	  - every message is checked to its last byte, and every change names
 *		a relation whose Relation message came before it in the same
 *		segment (docs/FORMAT.md section 9.2: each segment decodes on its
 *		own), so a frame lost or moved is seen even where positions do not
 *		show it.
 *
 *	  A violation is XX001 naming the file and the offset; nothing is ever
 *	  skipped or read twice silently.  Every reader of the archive's
 *	  contents reads through here, and a backend's read pins the
 *	  generation against retention first (reader_pins.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "access/xact.h"

#include "archive/archive_layout.h"
#include "archive/reader_pins.h"
#include "archive/retention_horizon.h"
#include "read/generation_reader.h"
#include "base/compat.h"

struct CsGenerationReader
{
	MemoryContext cxt;			/* everything, readers included */
	const char *directory;
	uint64		generation;
	CsIdentity	identity;
	bool		has_horizon;	/* retention removed its older files */
	CsHorizon	horizon;
	bool		pinned;			/* pinned, counted by cs_pin_reader_begin() */
	bool		reading;		/* a segment was opened to be read */
	XLogRecPtr	start_bound;	/* skip segments wholly before it */
	XLogRecPtr	end_bound;		/* stop at segments wholly after it */
	bool		has_start_time; /* skip sealed segments whose commit times */
	TimestampTz start_time;		/* all lie before start_time or after */
	bool		has_end_time;	/* end_time */
	TimestampTz end_time;
	bool		has_stop_time;	/* stop before a sealed segment whose every */
	TimestampTz stop_time;		/* transaction committed after stop_time */
	bool		stopped;		/* stopped so */
	int64		skipped;		/* segments skipped by their seal */
	CsSegmentSeal contents;		/* commits read in the current segment */
	List	   *segments;		/* CsSegmentFile *, by index */
	int			next;			/* next segment to open */
	CsSegmentFile *cur;
	CsSegmentReader *reader;	/* open segment, or NULL */
	bool		newest;			/* cur is the generation's newest */
	bool		in_frame;		/* a frame is being read */
	int64		limit_frame;	/* newest raw segment: safe point, or -1 */
	uint32		limit_entry;
	bool		limited;		/* stopped at the safe point */
	CsPositionTracker track;
	bool		have_prev_end;	/* previous segment was read whole */
	XLogRecPtr	prev_start;
	uint32		prev_version;	/* format versions never go back */
	MemoryContext rel_cxt;		/* holds rels, reset at each segment */
	HTAB	   *rels;			/* relation OIDs with a Relation message so
								 * far in the current segment */
	bool		done;
	const CsSegmentMemory *memory;	/* segments read before, or NULL */
};

/*
 * cs_genreader_open
 *	  Starts reading a generation.  start_bound and end_bound (LSNs;
 *	  InvalidXLogRecPtr for none) only let whole segments be skipped: one
 *	  whose successor starts at or before start_bound holds no commit at or
 *	  after it, and one that starts after end_bound none before it.
 *	  Callers still filter entries.  The reader lives in a child of
 *	  CurrentMemoryContext; an error releases its files with it.  In a
 *	  transaction (a backend), it first pins the whole generation against
 *	  retention until the transaction ends (cs_pin_read()); then it reads
 *	  the retention horizon, so segments below it are not listed.  Until
 *	  it reads its first segment (those wholly before start_bound, or
 *	  outside the time bounds, are skipped), it moves the pin forward to
 *	  the start of each segment it opens (cs_pin_advance()), so that the
 *	  pin keeps what it reads from its position on, and nothing before.
 *	  Errors: as cs_read_identity(), cs_read_horizon() and
 *	  cs_list_segments(); XX001 for a gap in the segments; 53400 from
 *	  cs_pin_read(); 22023 when start_bound lies before the retention
 *	  horizon's snapshot (that history was removed: reading on would
 *	  silently miss it).
 */
CsGenerationReader *
cs_genreader_open(const char *directory, uint64 generation,
				  XLogRecPtr start_bound, XLogRecPtr end_bound)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext,
											  "changestream generation reader",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	CsGenerationReader *gr = palloc0(sizeof(CsGenerationReader));

	gr->cxt = cxt;
	gr->directory = pstrdup(directory);
	gr->generation = generation;
	gr->start_bound = start_bound;
	gr->end_bound = end_bound;
	/*
	 * The whole generation, not from start_bound: every listed segment's
	 * header is opened (seals, continuity), also those before start_bound,
	 * and a retention run honouring only start_bound could delete them
	 * under the reader (docs/DESIGN.md section 11, rule 5).
	 */
	if (IsTransactionState())
	{
		cs_pin_read(generation, InvalidXLogRecPtr);
		cs_pin_reader_begin();
		gr->pinned = true;
	}
	cs_require_identity(directory, generation, &gr->identity);
	gr->has_horizon = cs_read_horizon(directory, generation, &gr->horizon);
	if (gr->has_horizon && start_bound != InvalidXLogRecPtr &&
		start_bound < gr->horizon.snapshot_lsn)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("changestream history before " CS_LSN_FMT " of generation %016llx was removed by retention",
						LSN_FORMAT_ARGS(gr->horizon.snapshot_lsn),
						(unsigned long long) generation),
				 errdetail("The requested start " CS_LSN_FMT " lies before the generation's restorable start; its history is available from " CS_LSN_FMT " (%s) on.",
						   LSN_FORMAT_ARGS(start_bound),
						   LSN_FORMAT_ARGS(gr->horizon.snapshot_lsn),
						   timestamptz_to_str(gr->horizon.snapshot_time)),
				 errhint("Start at or after restorable_from_lsn of changestream.generations(), or pass no start.")));
	gr->segments = cs_list_segments(directory, generation);
	cs_check_segment_sequence(directory, generation, gr->segments);
	MemoryContextSwitchTo(old);
	return gr;
}

/*
 * cs_open_listed_segment
 *	  Opens a segment found by cs_list_segments() and returns its reader
 *	  (header read).  A raw segment may have been compressed and removed since
 *	  it was listed (the maintenance worker works beside every reader): then
 *	  its .gz is opened instead, and sf says so.
 *	  Errors: file access error (class 58) when neither exists any more;
 *	  as cs_reader_open() for damage.
 */
CsSegmentReader *
cs_open_listed_segment(CsSegmentFile *sf)
{
	CsSegmentReader *r = cs_reader_open(sf->path, sf->compressed, true);

	if (r == NULL && !sf->compressed)
	{
		strlcat(sf->path, ".gz", MAXPGPATH);
		sf->compressed = true;
		r = cs_reader_open(sf->path, true, true);
	}
	if (r == NULL)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("changestream segment \"%s\" disappeared while being read",
						sf->path)));
	return r;
}

/* Does the segment after segment i start at or before start_bound? */
static bool
wholly_before_start(CsGenerationReader *gr, int i)
{
	CsSegmentFile *next;
	CsSegmentReader *r;
	bool		before;

	if (gr->start_bound == InvalidXLogRecPtr || i + 1 >= list_length(gr->segments))
		return false;
	next = list_nth(gr->segments, i + 1);
	r = cs_open_listed_segment(next);
	cs_check_segment_header(next->path, cs_reader_header(r), next->index,
							gr->generation, &gr->identity);
	before = cs_reader_header(r)->start_lsn <= gr->start_bound;
	cs_reader_close(r);
	return before;
}

/* Check where the segment just opened starts. */
static void
check_start(CsGenerationReader *gr, const CsSegmentHeader *h)
{
	const char *path = gr->cur->path;

	cs_check_segment_header(path, h, gr->cur->index, gr->generation,
							&gr->identity);
	if (gr->cur->index == 0 && h->start_lsn != gr->identity.start_lsn)
		cs_segment_damage(path, 0,
						  "The generation starts at " CS_LSN_FMT ", but its first segment at " CS_LSN_FMT ".",
						  LSN_FORMAT_ARGS(gr->identity.start_lsn),
						  LSN_FORMAT_ARGS(h->start_lsn));
	if (gr->has_horizon && gr->cur->index == gr->horizon.first_segment &&
		gr->cur->index > 0 && h->start_lsn > gr->horizon.snapshot_lsn)
		cs_segment_damage(path, 0,
						  "The generation's retention horizon keeps history from its snapshot " CS_LSN_FMT ", but its first segment kept starts at " CS_LSN_FMT ".",
						  LSN_FORMAT_ARGS(gr->horizon.snapshot_lsn),
						  LSN_FORMAT_ARGS(h->start_lsn));
	if (gr->have_prev_end && h->start_lsn != gr->track.position)
		cs_segment_damage(path, 0,
						  "It starts at " CS_LSN_FMT ", but the previous segment ends at " CS_LSN_FMT ".",
						  LSN_FORMAT_ARGS(h->start_lsn),
						  LSN_FORMAT_ARGS(gr->track.position));
	if (h->start_lsn < gr->prev_start)
		cs_segment_damage(path, 0,
						  "It starts at " CS_LSN_FMT ", before the previous segment's start " CS_LSN_FMT ".",
						  LSN_FORMAT_ARGS(h->start_lsn),
						  LSN_FORMAT_ARGS(gr->prev_start));
	if (h->format_version < gr->prev_version)
		cs_segment_damage(path, 0,
						  "It is of format version %u, but the segment before it of version %u: a generation is only ever upgraded.",
						  h->format_version, gr->prev_version);
	gr->prev_version = h->format_version;
	gr->prev_start = h->start_lsn;
	gr->track.position = h->start_lsn;
	/*
	 * Until the reader reads its first segment, the segments it passes are
	 * behind it for good: its pin moves to the one it is at.  From its
	 * first segment read on, it keeps what it has read.
	 */
	if (gr->pinned && !gr->reading)
		cs_pin_advance(gr->generation, h->start_lsn);
}

/*
 * Check a seal's own consistency and that it continues the stream read so
 * far; XX001 at the header when not.
 */
static void
check_seal(CsGenerationReader *gr, const CsSegmentHeader *h)
{
	const CsSegmentSeal *seal = &h->seal;
	const char *path = gr->cur->path;

	if (seal->end_lsn < h->start_lsn ||
		(seal->transactions > 0 &&
		 (seal->first_commit_lsn > seal->last_commit_lsn ||
		  seal->min_commit_time > seal->max_commit_time ||
		  seal->first_commit_lsn < h->start_lsn)) ||
		(seal->transactions == 0 &&
		 (seal->first_commit_lsn != 0 || seal->last_commit_lsn != 0)))
		cs_segment_damage(path, CS_SEAL_OFFSET,
						  "The seal in its header is not consistent (end " CS_LSN_FMT ", commits " CS_LSN_FMT " to " CS_LSN_FMT ", %llu transactions).",
						  LSN_FORMAT_ARGS(seal->end_lsn),
						  LSN_FORMAT_ARGS(seal->first_commit_lsn),
						  LSN_FORMAT_ARGS(seal->last_commit_lsn),
						  (unsigned long long) seal->transactions);
	if (seal->transactions > 0 && gr->track.last_commit_lsn != InvalidXLogRecPtr &&
		seal->first_commit_lsn <= gr->track.last_commit_lsn)
		cs_segment_damage(path, CS_SEAL_OFFSET,
						  "Its seal says its first commit LSN is " CS_LSN_FMT ", which does not follow the previous commit LSN " CS_LSN_FMT ".",
						  LSN_FORMAT_ARGS(seal->first_commit_lsn),
						  LSN_FORMAT_ARGS(gr->track.last_commit_lsn));
}

/*
 * Can a sealed segment be skipped whole?  Its seal says it holds no commit
 * at or after start_bound (it ends at or before it: the rule
 * wholly_before_start() applies to unsealed ones), or, with time bounds,
 * no transaction whose commit time lies in them (messages outside
 * transactions are not wanted when time bounds are given).
 */
static bool
seal_excludes(CsGenerationReader *gr, const CsSegmentSeal *seal)
{
	if (gr->start_bound != InvalidXLogRecPtr && seal->end_lsn <= gr->start_bound)
		return true;
	if (!gr->has_start_time && !gr->has_end_time)
		return false;
	if (seal->transactions == 0)
		return true;
	return (gr->has_start_time && seal->max_commit_time < gr->start_time) ||
		(gr->has_end_time && seal->min_commit_time > gr->end_time);
}

/*
 * A seal whose CRC does not match is damage, except in the newest raw
 * segment, where it may be a seal torn by a crash while it was written
 * (recovery clears it): there it only means "not sealed".
 */
static void
check_seal_crc(CsGenerationReader *gr, const CsSegmentHeader *h)
{
	if (h->seal_state == CS_SEAL_BAD && (!gr->newest || gr->cur->compressed))
		cs_segment_damage(gr->cur->path, CS_SEAL_OFFSET,
						  "The CRC-32C of the seal in its header does not match, and the segment is not the newest raw one of its generation.");
}

/*
 * Does reading stop before this sealed segment?  With a stop time, when
 * its first transaction is one the caller reads (at or after start_bound)
 * and every one of its transactions committed after the stop time: the
 * caller, which stops at its first transaction committed after the stop
 * time, would stop at the segment's first one.
 */
static bool
stops_here(CsGenerationReader *gr, const CsSegmentSeal *seal)
{
	return gr->has_stop_time && seal->transactions > 0 &&
		seal->first_commit_lsn >= gr->start_bound &&
		seal->min_commit_time > gr->stop_time;
}

/* Skip the sealed segment just opened: its seal carries the chain on. */
static void
skip_sealed(CsGenerationReader *gr, const CsSegmentHeader *h)
{
	elog(DEBUG1, "segment \"%s\" skipped: its seal puts it outside the bounds (commits " CS_LSN_FMT " to " CS_LSN_FMT ", %llu transactions)",
		 gr->cur->path, LSN_FORMAT_ARGS(h->seal.first_commit_lsn),
		 LSN_FORMAT_ARGS(h->seal.last_commit_lsn),
		 (unsigned long long) h->seal.transactions);
	gr->track.position = h->seal.end_lsn;
	if (h->seal.transactions > 0)
		gr->track.last_commit_lsn = h->seal.last_commit_lsn;
	gr->have_prev_end = true;
	gr->skipped++;
}

/* Close the segment just opened, unread (gr->reader). */
static void
drop_current(CsGenerationReader *gr)
{
	cs_reader_close(gr->reader);
	gr->reader = NULL;
}

/*
 * Pass over the segment just listed, unopened, when the caller's memory
 * knows it (cs_genreader_set_memory()): its remembered header has its
 * start and seal checked as if it were read, and its seal carries the
 * chain on.  Whether it was passed over.
 */
static bool
pass_known(CsGenerationReader *gr)
{
	CsSegmentHeader h;

	if (gr->memory == NULL || !gr->cur->compressed ||
		!gr->memory->known(gr->memory->arg, gr->cur, &h) ||
		h.seal_state != CS_SEAL_VALID)
		return false;
	check_start(gr, &h);
	check_seal(gr, &h);
	gr->track.position = h.seal.end_lsn;
	if (h.seal.transactions > 0)
		gr->track.last_commit_lsn = h.seal.last_commit_lsn;
	gr->have_prev_end = true;
	return true;
}

/* What open_next() does with a segment that has a successor. */
typedef enum
{
	SEGMENT_READ,				/* read it (gr->reader is open) */
	SEGMENT_SKIP,				/* outside the bounds: go on to the next */
	SEGMENT_STOP				/* reading stops before it */
} SegmentVerdict;

/*
 * Open segment i, which has a successor and so was sealed, and judge it by
 * its seal: skipped when the seal puts it outside the bounds, the end of
 * reading when every transaction in it committed after the stop time.
 * Without a valid seal, only a segment wholly before the start is skipped.
 * Errors: XX001 from the header, seal and continuity checks.
 */
static SegmentVerdict
judge_sealed(CsGenerationReader *gr, int i)
{
	const CsSegmentHeader *h;

	gr->reader = cs_open_listed_segment(gr->cur);
	h = cs_reader_header(gr->reader);
	check_seal_crc(gr, h);
	if (h->seal_state != CS_SEAL_VALID)
	{
		if (wholly_before_start(gr, i))
		{
			drop_current(gr);
			gr->have_prev_end = false;
			return SEGMENT_SKIP;
		}
		check_start(gr, h);
		return SEGMENT_READ;
	}
	check_start(gr, h);
	check_seal(gr, h);
	if (stops_here(gr, &h->seal))
	{
		elog(DEBUG1, "segment \"%s\" not read: its seal says every transaction in it committed after the stop time",
			 gr->cur->path);
		drop_current(gr);
		return SEGMENT_STOP;
	}
	if (seal_excludes(gr, &h->seal))
	{
		skip_sealed(gr, h);
		drop_current(gr);
		return SEGMENT_SKIP;
	}
	return SEGMENT_READ;
}

/*
 * Of the newest raw segment, only complete transactions are read: set the
 * limit (frame offset, entry offset) where its safe point lies.  No limit
 * for any other segment.
 */
static void
limit_newest(CsGenerationReader *gr)
{
	CsSegmentScan scan;

	gr->limit_frame = -1;
	gr->limit_entry = 0;
	gr->limited = false;
	if (gr->newest && !gr->cur->compressed &&
		cs_scan_segment(gr->cur->path, false, CS_TAIL_NEWEST, &scan, NULL, NULL))
	{
		gr->limit_frame = scan.safe_entry_offset == 0 ?
			scan.safe_end : scan.safe_frame_offset;
		gr->limit_entry = scan.safe_entry_offset;
	}
}

/* A segment is about to be read: no Relation message seen in it yet. */
static void
reset_relations(CsGenerationReader *gr)
{
	if (gr->rel_cxt == NULL)
		gr->rel_cxt = AllocSetContextCreate(gr->cxt,
											"changestream segment relations",
											ALLOCSET_SMALL_SIZES);
	else
		MemoryContextReset(gr->rel_cxt);
	gr->rels = cs_relation_set(gr->rel_cxt);
}

/*
 * Check an entry's message to its last byte, and that a change names only
 * relations whose Relation message came before it in this segment
 * (cs_check_relations()).  Errors: XX001 at the frame.
 */
static void
check_message(CsGenerationReader *gr, const CsReadItem *item)
{
	const char *problem = cs_check_entry_message(&item->entry);

	if (problem != NULL)
		cs_segment_damage(item->path, item->frame_offset,
						  "The entry ending at byte %u of the frame holds a malformed pgoutput message. %s",
						  cs_reader_entry_offset(gr->reader), problem);
	problem = cs_check_relations(gr->rels, &item->entry);
	if (problem != NULL)
		cs_segment_damage(item->path, item->frame_offset, "%s", problem);
}

/* Open the next segment to read; false when there is none. */
static bool
open_next(CsGenerationReader *gr)
{
	int			n = list_length(gr->segments);

	while (gr->next < n)
	{
		int			i = gr->next++;

		gr->cur = list_nth(gr->segments, i);
		gr->newest = (i == n - 1);
		gr->reader = NULL;
		memset(&gr->contents, 0, sizeof(gr->contents));
		if (pass_known(gr))
			continue;
		if (!gr->newest)
		{
			SegmentVerdict verdict = judge_sealed(gr, i);

			if (verdict == SEGMENT_STOP)
			{
				gr->stopped = true;
				return false;
			}
			if (verdict == SEGMENT_SKIP)
				continue;
		}
		limit_newest(gr);
		if (gr->reader == NULL)
		{
			gr->reader = cs_open_listed_segment(gr->cur);
			check_seal_crc(gr, cs_reader_header(gr->reader));
			check_start(gr, cs_reader_header(gr->reader));
		}
		if (gr->end_bound != InvalidXLogRecPtr &&
			cs_reader_header(gr->reader)->start_lsn > gr->end_bound)
		{
			drop_current(gr);
			return false;
		}
		reset_relations(gr);
		gr->in_frame = false;
		gr->reading = true;
		return true;
	}
	return false;
}

/*
 * A segment read whole must hold what its seal says; XX001 at the header
 * when it does not.
 */
static void
check_contents(CsGenerationReader *gr)
{
	const CsSegmentHeader *h = cs_reader_header(gr->reader);
	const CsSegmentSeal *s = &h->seal;
	const CsSegmentSeal *c = &gr->contents;

	if (h->seal_state != CS_SEAL_VALID || gr->limited)
		return;
	if (s->end_lsn != gr->track.position || s->transactions != c->transactions ||
		s->first_commit_lsn != c->first_commit_lsn ||
		s->last_commit_lsn != c->last_commit_lsn ||
		s->min_commit_time != c->min_commit_time ||
		s->max_commit_time != c->max_commit_time)
		cs_segment_damage(gr->cur->path, CS_SEAL_OFFSET,
						  "The seal in its header says it ends at " CS_LSN_FMT " and holds %llu transactions committed from " CS_LSN_FMT " to " CS_LSN_FMT "; it ends at " CS_LSN_FMT " and holds %llu, from " CS_LSN_FMT " to " CS_LSN_FMT " (or their commit times differ).",
						  LSN_FORMAT_ARGS(s->end_lsn),
						  (unsigned long long) s->transactions,
						  LSN_FORMAT_ARGS(s->first_commit_lsn),
						  LSN_FORMAT_ARGS(s->last_commit_lsn),
						  LSN_FORMAT_ARGS(gr->track.position),
						  (unsigned long long) c->transactions,
						  LSN_FORMAT_ARGS(c->first_commit_lsn),
						  LSN_FORMAT_ARGS(c->last_commit_lsn));
}

/* The current segment is read: judge its end, and close it. */
static void
close_current(CsGenerationReader *gr)
{
	bool		may_be_torn = gr->newest && !gr->cur->compressed;

	if (!gr->limited)
		(void) cs_reader_finish(gr->reader,
								may_be_torn ? CS_TAIL_NEWEST : CS_TAIL_SEALED);
	if ((!gr->newest || gr->cur->compressed) && gr->track.in_txn)
		cs_segment_damage(gr->cur->path, cs_reader_valid_end(gr->reader),
						  "The segment ends inside a transaction; segments are only sealed between transactions.");
	if (!gr->newest || gr->cur->compressed)
		check_contents(gr);
	if (gr->memory != NULL && gr->cur->compressed && !gr->limited &&
		cs_reader_header(gr->reader)->seal_state == CS_SEAL_VALID)
		gr->memory->read(gr->memory->arg, gr->cur, cs_reader_header(gr->reader));
	cs_reader_close(gr->reader);
	gr->reader = NULL;
	gr->have_prev_end = true;
}

/* Has reading reached the newest raw segment's safe point? */
static bool
at_limit_frame(CsGenerationReader *gr)
{
	int64		off = cs_reader_frame_offset(gr->reader);

	return gr->limit_frame >= 0 && off >= gr->limit_frame &&
		!(off == gr->limit_frame && gr->limit_entry > 0);
}

static bool
past_limit_entry(CsGenerationReader *gr)
{
	return gr->limit_frame >= 0 &&
		cs_reader_frame_offset(gr->reader) == gr->limit_frame &&
		gr->limit_entry > 0 &&
		cs_reader_entry_offset(gr->reader) > gr->limit_entry;
}

/*
 * cs_genreader_next
 *	  Reads the next entry of the generation into *item (messages parsed
 *	  into item->info; preamble and position entries too, for callers that
 *	  want them).  Returns false at the end.  item->entry.data stays valid
 *	  until the next call.
 *	  Errors: XX001 naming file and offset for damage or a break in
 *	  continuity (see the file header); file access SQLSTATEs on I/O.
 */
bool
cs_genreader_next(CsGenerationReader *gr, CsReadItem *item)
{
	MemoryContext old = MemoryContextSwitchTo(gr->cxt);
	bool		found = false;

	while (!found && !gr->done)
	{
		CHECK_FOR_INTERRUPTS();
		if (gr->reader == NULL && !open_next(gr))
		{
			gr->done = true;
			break;
		}
		if (!gr->in_frame)
		{
			if (!cs_reader_next_frame(gr->reader))
			{
				close_current(gr);
				continue;
			}
			if (at_limit_frame(gr))
			{
				gr->limited = true;
				close_current(gr);
				continue;
			}
			gr->in_frame = true;
		}
		if (!cs_reader_next_entry(gr->reader, &item->entry))
		{
			gr->in_frame = false;
			continue;
		}
		if (past_limit_entry(gr))
		{
			gr->limited = true;
			close_current(gr);
			continue;
		}
		found = true;
	}
	MemoryContextSwitchTo(old);
	if (!found)
		return false;

	item->path = gr->cur->path;
	item->frame_offset = cs_reader_frame_offset(gr->reader);
	memset(&item->info, 0, sizeof(item->info));
	if (item->entry.kind == CS_ENTRY_MESSAGE ||
		item->entry.kind == CS_ENTRY_PREAMBLE)
	{
		check_message(gr, item);
		(void) cs_parse_pgoutput(item->entry.data, item->entry.len, &item->info);
	}
	/* entries of an unknown kind change nothing (docs/FORMAT.md 8.1) */
	if (item->entry.kind == CS_ENTRY_MESSAGE ||
		item->entry.kind == CS_ENTRY_POSITION)
	{
		const char *problem;

		problem = cs_track_entry(&gr->track, &item->entry,
								 item->entry.kind == CS_ENTRY_MESSAGE ? &item->info : NULL);
		if (problem == NULL && item->entry.kind == CS_ENTRY_MESSAGE &&
			item->info.type == 'C' && item->info.lsn < gr->identity.start_lsn)
			problem = psprintf("The commit LSN " CS_LSN_FMT " lies before the generation's start " CS_LSN_FMT ".",
							   LSN_FORMAT_ARGS(item->info.lsn),
							   LSN_FORMAT_ARGS(gr->identity.start_lsn));
		if (problem != NULL)
			cs_segment_damage(item->path, item->frame_offset, "%s", problem);
		if (item->entry.kind == CS_ENTRY_MESSAGE && item->info.type == 'C')
			cs_seal_note_commit(&gr->contents, item->info.lsn,
								item->info.commit_time);
	}
	return true;
}

/*
 * cs_genreader_set_time_bounds
 *	  Lets the reader skip sealed segments none of whose transactions
 *	  committed in [start_time, end_time] (has_start / has_end false: that
 *	  side is open), reading only their headers.  For callers that want no
 *	  message outside a transaction when time bounds are given, and that
 *	  still filter entries themselves.  Call before the first
 *	  cs_genreader_next().  Returns nothing.
 *	  Errors: 22023 when start_time lies before the retention horizon's
 *	  snapshot time, the generation's restorable start (that history was
 *	  removed: reading on would silently start later), as the same start
 *	  given as an LSN is refused by cs_genreader_open().
 */
void
cs_genreader_set_time_bounds(CsGenerationReader *gr, bool has_start,
							 TimestampTz start_time, bool has_end,
							 TimestampTz end_time)
{
	if (has_start && gr->has_horizon &&
		start_time < gr->horizon.snapshot_time)
	{
		char	   *asked = pstrdup(timestamptz_to_str(start_time));

		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("changestream history before %s of generation %016llx was removed by retention",
						timestamptz_to_str(gr->horizon.snapshot_time),
						(unsigned long long) gr->generation),
				 errdetail("The requested start time %s lies before the generation's restorable start; its history is available from " CS_LSN_FMT " (%s) on.",
						   asked, LSN_FORMAT_ARGS(gr->horizon.snapshot_lsn),
						   timestamptz_to_str(gr->horizon.snapshot_time)),
				 errhint("Start at or after restorable_from_time of changestream.generations(), or pass no start.")));
	}
	gr->has_start_time = has_start;
	gr->start_time = start_time;
	gr->has_end_time = has_end;
	gr->end_time = end_time;
}

/*
 * cs_genreader_set_stop_time
 *	  For a caller that stops at its first transaction (at or after the
 *	  start bound) committed after stop_time: reading ends, without opening
 *	  its body, before a sealed segment whose first transaction is at or
 *	  after the start bound and whose transactions all committed after
 *	  stop_time; cs_genreader_stopped() then says so.  Returns nothing.
 */
void
cs_genreader_set_stop_time(CsGenerationReader *gr, TimestampTz stop_time)
{
	gr->has_stop_time = true;
	gr->stop_time = stop_time;
}

/*
 * cs_genreader_set_memory
 *	  Lets the reader pass over the compressed segments the caller's memory
 *	  knows, and tells it of those read whole now (CsSegmentMemory in
 *	  generation_reader.h).  memory must live as long as the reader.  Call
 *	  before the first cs_genreader_next().  Returns nothing.
 */
void
cs_genreader_set_memory(CsGenerationReader *gr, const CsSegmentMemory *memory)
{
	gr->memory = memory;
}

/* cs_genreader_stopped: did reading end at a segment past the stop time? */
bool
cs_genreader_stopped(CsGenerationReader *gr)
{
	return gr->stopped;
}

/*
 * cs_genreader_close
 *	  Closes the open segment, if any, and frees the reader.  Its pin
 *	  stays, at the segment where it began reading, until the transaction
 *	  ends.
 */
void
cs_genreader_close(CsGenerationReader *gr)
{
	if (gr->pinned)
		cs_pin_reader_end();
	MemoryContextDelete(gr->cxt);
}
