/*-------------------------------------------------------------------------
 *
 * generation_span.c
 *	  Where a generation's history ends, and whether it continues the
 *	  generation before it.  A generation the archiver handed off to
 *	  (docs/DESIGN.md section 6) starts exactly where the previous one
 *	  ends; any other new generation leaves a gap between the two, which
 *	  generations() shows and restore() names.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "archive/archive_layout.h"
#include "archive/generation.h"
#include "archive/generation_timelines.h"
#include "archive/generation_span.h"
#include "archive/retention_horizon.h"
#include "archive/segment_reader.h"
#include "archive/snapshot_reader.h"
#include "base/shmem_status.h"

/*
 * The newest commit time a segment's header seal vouches for, searching
 * the segments before the newest one backwards (headers only); 0 when
 * none holds a transaction.
 */
static TimestampTz
sealed_commit_time(List *segments)
{
	for (int i = list_length(segments) - 2; i >= 0; i--)
	{
		CsSegmentFile *sf = list_nth(segments, i);
		CsSegmentReader *r = cs_reader_open(sf->path, sf->compressed, true);
		const CsSegmentHeader *h;
		TimestampTz t = 0;

		if (r == NULL)
			continue;
		h = cs_reader_header(r);
		if (h->seal_state == CS_SEAL_VALID && h->seal.transactions > 0)
			t = h->seal.max_commit_time;
		cs_reader_close(r);
		if (t != 0)
			return t;
	}
	return 0;
}

/*
 * cs_generation_end
 *	  The archive's position of record (an LSN) at the end of generation
 *	  (segments: its cs_list_segments(); start_lsn: its identity's): the
 *	  archiver's durable position when the generation is the one it
 *	  writes, else found by scanning the newest segment (which may end in a
 *	  torn tail if raw).  With last_commit_time, also the greatest commit
 *	  time of the newest segment that holds a transaction (0: none).
 *	  Errors: XX001 for damage; file access SQLSTATEs.
 */
XLogRecPtr
cs_generation_end(const char *directory, uint64 generation, List *segments,
				  XLogRecPtr start_lsn, TimestampTz *last_commit_time)
{
	CsSegmentFile *last;
	CsSegmentScan scan;
	XLogRecPtr	flushed;

	if (last_commit_time != NULL)
		*last_commit_time = 0;
	flushed = cs_status_flushed_lsn_of(generation);
	if (flushed != InvalidXLogRecPtr && last_commit_time == NULL)
		return flushed;
	if (segments == NIL)
		return start_lsn;
	last = llast(segments);
	if (!cs_scan_segment(last->path, last->compressed,
						 last->compressed ? CS_TAIL_SEALED : CS_TAIL_NEWEST,
						 &scan, NULL, NULL))
	{
		/* compressed and removed since it was listed */
		char	   *gz = cs_compressed_path(last->path);

		if (last->compressed || !cs_scan_segment(gz, true, CS_TAIL_SEALED, &scan, NULL, NULL))
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("changestream segment \"%s\" disappeared while being read",
							last->path)));
	}
	if (last_commit_time != NULL)
		*last_commit_time = scan.safe_contents.transactions > 0 ?
			scan.safe_contents.max_commit_time : sealed_commit_time(segments);
	return flushed != InvalidXLogRecPtr ? flushed : scan.position;
}

/* The time of a generation's opening snapshot, else its creation time. */
static TimestampTz
opening_time(const char *directory, uint64 generation,
			 const CsIdentity *identity)
{
	char	   *path = cs_snapshot_path(cs_snapshots_dir_path(directory, generation),
										identity->start_lsn);
	CsStorageInfo info;
	CsSnapshotReader *r;
	TimestampTz t;

	if (cs_storage_stat(path, true, &info) != 0 ||
		info.type != CS_STORAGE_FILE)
		return identity->created_at;
	r = cs_snapreader_open(path);
	t = cs_snapreader_time(r);
	cs_snapreader_close(r);
	return t;
}

/* What read_previous() reads, for cs_catch_damage(). */
typedef struct PreviousEnd
{
	const char *directory;
	uint64		generation;
	CsIdentity	identity;
	uint32		timeline;		/* where it ended: after promotions, the
								 * newest of its timelines file */
	XLogRecPtr	end_lsn;
	TimestampTz end_time;
} PreviousEnd;

static void
read_previous(void *arg)
{
	PreviousEnd *p = (PreviousEnd *) arg;
	List	   *segments;

	cs_require_identity(p->directory, p->generation, &p->identity);
	p->timeline = cs_generation_timeline(p->directory, &p->identity);
	segments = cs_list_segments(p->directory, p->generation);
	cs_check_segment_sequence(p->directory, p->generation, segments);
	p->end_lsn = cs_generation_end(p->directory, p->generation, segments,
								   p->identity.start_lsn, &p->end_time);
}

/*
 * cs_generation_gap
 *	  Is there a gap in the archive's history before generation (one of
 *	  gens, the listing oldest first, of directory)?  There is when a
 *	  generation precedes it and does not end exactly at its start on the
 *	  same system and timeline: a new generation that was not handed off
 *	  to (docs/DESIGN.md section 6).  Then *gap says from where to where;
 *	  a previous generation whose end cannot be read (damage) gives a gap
 *	  of unknown start.  Without a gap, gap->previous is still the
 *	  previous generation (0: none) and, when one was read, gap->start_lsn
 *	  and gap->start_time its end and last commit time.  Errors: XX001
 *	  when this generation's identity file is missing or damaged; file
 *	  access SQLSTATEs.
 */
bool
cs_generation_gap(const char *directory, List *gens, uint64 generation,
				  CsGap *gap)
{
	CsIdentity	identity;
	PreviousEnd prev;
	ListCell   *lc;
	bool		found = false;
	ErrorData  *damage;
	MemoryContext cxt;

	memset(gap, 0, sizeof(*gap));
	foreach(lc, gens)
	{
		uint64		g = *(uint64 *) lfirst(lc);

		if (g == generation)
		{
			found = true;
			break;
		}
		gap->previous = g;
	}
	if (!found || gap->previous == 0)
		return false;
	cs_require_identity(directory, generation, &identity);

	memset(&prev, 0, sizeof(prev));
	prev.directory = directory;
	prev.generation = gap->previous;
	cxt = AllocSetContextCreate(CurrentMemoryContext, "changestream gap",
								ALLOCSET_DEFAULT_SIZES);
	damage = cs_catch_damage(read_previous, &prev, cxt);
	MemoryContextDelete(cxt);
	gap->start_known = (damage == NULL);
	gap->start_lsn = prev.end_lsn;
	gap->start_time = prev.end_time;
	if (damage == NULL &&
		prev.identity.system_identifier == identity.system_identifier &&
		prev.timeline == identity.timeline &&
		prev.end_lsn == identity.start_lsn)
		return false;
	gap->end_lsn = identity.start_lsn;
	gap->end_time = opening_time(directory, generation, &identity);
	return true;
}

/*
 * cs_handoff_time
 *	  Was generation (one of gens, the listing of directory) handed off to:
 *	  does it continue the generation before it exactly (no gap,
 *	  cs_generation_gap())?  Then *previous is that generation and *from
 *	  the time from which its opening snapshot stands for the archive's
 *	  history: the previous generation's last archived commit time, or the
 *	  snapshot's own time if earlier or when the previous generation holds
 *	  no transaction.  The snapshot, taken at the hand-off point C, holds
 *	  every transaction that committed before C, which the previous
 *	  generation ends with; the first transaction committing at or past C
 *	  is this generation's.  So a time target from *from on is this
 *	  generation's to restore, and one before it the previous one's
 *	  (docs/DESIGN.md section 6).  Errors: as cs_generation_gap().
 */
bool
cs_handoff_time(const char *directory, List *gens, uint64 generation,
				uint64 *previous, TimestampTz *from)
{
	CsGap		gap;
	CsIdentity	identity;
	TimestampTz taken;

	if (cs_generation_gap(directory, gens, generation, &gap) ||
		gap.previous == 0)
		return false;
	cs_require_identity(directory, generation, &identity);
	taken = opening_time(directory, generation, &identity);
	*previous = gap.previous;
	*from = (gap.start_time != 0 && gap.start_time < taken) ?
		gap.start_time : taken;
	return true;
}
