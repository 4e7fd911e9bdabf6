/*-------------------------------------------------------------------------
 *
 * generation_policy.c
 *	  When the archiver continues the newest generation and when it opens
 *	  a new one, and how it opens one (with its opening snapshot).  A new
 *	  generation is decided only when its reason is true: a first start, a
 *	  new or recreated slot, an operator's request, a changed identity
 *	  (system, timeline, slot, database, plugin options), a damaged
 *	  identity file in a generation that holds no acknowledged data, or a
 *	  slot ahead of an intact archive (decided by archiver.c after
 *	  recovery).  A generation that holds acknowledged data is never
 *	  replaced on the archiver's own initiative: its damage is an error
 *	  (docs/DESIGN.md, "Damaged archives").
 *
 *	  generation.c owns the generation's files; this file owns the policy.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "replication/walreceiver.h"
#include "utils/elog.h"
#include "utils/timestamp.h"

#include "archive/archive_layout.h"
#include "archive/generation.h"
#include "archive/generation_timelines.h"
#include "archive/retention_horizon.h"
#include "archive/segment_reader.h"
#include "archive/segment_writer.h"
#include "base/shmem_status.h"
#include "worker/generation_policy.h"
#include "worker/snapshot.h"
#include "worker/walsender_conn.h"
#include "worker/walsender_reap.h"
#include "base/compat.h"

/*
 * Why the newest generation's identity file cannot be used, or NULL when it
 * reads (then *identity holds it).  A missing file, XX001 or a data
 * exception from one of its fields is damage; other errors (I/O, a newer
 * format) propagate.
 */
static const char *
identity_damage(const char *directory, uint64 generation,
				CsIdentity *identity)
{
	MemoryContext cxt = CurrentMemoryContext;
	const char *volatile damage = NULL;

	PG_TRY();
	{
		if (!cs_read_identity(directory, generation, identity))
			damage = psprintf("identity file \"%s/generation\" is missing",
							  cs_generation_path(directory, generation));
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_DATA_CORRUPTED &&
			ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_DATA_EXCEPTION)
			PG_RE_THROW();
		FlushErrorState();
		damage = edata->message;
	}
	PG_END_TRY();
	return damage;
}

/*
 * Does a generation hold data that was acknowledged to the server?  Yes
 * when it has a sealed segment (segments are sealed only after data), when
 * its first segment holds a complete transaction or a position past its
 * start, or when the slot has confirmed a position past that start.  A
 * first segment that cannot be read raises XX001, which keeps the
 * generation as it is, for the operator.
 */
static bool
holds_acknowledged_data(const char *directory, uint64 generation,
						const CsSlotInfo *slot)
{
	List	   *segments = cs_list_segments(directory, generation);
	CsSegmentFile *first;
	CsSegmentScan scan;

	if (segments == NIL)
		return false;
	first = linitial(segments);
	if (list_length(segments) > 1 || first->compressed || first->index != 0)
		return true;
	if (!cs_scan_segment(first->path, false, CS_TAIL_NEWEST, &scan, NULL, NULL))
		return false;
	return scan.transactions > 0 ||
		scan.position > scan.header.start_lsn ||
		(slot->exists && slot->confirmed_flush > scan.header.start_lsn);
}

/*
 * A slot event (the slot missing or lost) after the timeline changed is
 * what a promotion looks like when the slot did not come across (it was
 * not a synchronized failover slot): say so beside the slot event.  The
 * newest generation's identity, when sound, holds the timeline it was
 * written on.
 */
static const char *
with_timeline_change(const char *directory, List *gens, uint32 tli,
					 const char *slot_event)
{
	CsIdentity	identity;

	uint32		gen_tli;

	if (identity_damage(directory, *(uint64 *) llast(gens), &identity) != NULL)
		return slot_event;
	gen_tli = cs_generation_timeline(directory, &identity);
	if (gen_tli == tli)
		return slot_event;
	return psprintf("%s; the timeline changed from %u to %u (the server was promoted, and the slot did not come across)",
					slot_event, gen_tli, tli);
}

/*
 * cs_new_generation_reason
 *	  Decide whether the newest of gens (a List of uint64 *, oldest first,
 *	  in config's directory) continues under config: returns the reason
 *	  for a new generation (a palloc'd or static string), or NULL with the
 *	  newest generation's identity in *identity.  slot_event is a reason
 *	  already found with the slot (created, recreated), or NULL; requested
 *	  is an operator's new_generation(), honoured before the newest
 *	  generation is looked at.  *promotion is set when the only reason is
 *	  a new timeline (its generation's timeline: the identity's, or the
 *	  newest of its timelines file), which the caller may prove
 *	  continuous (a promotion with the slot carried across).
 *	  Raises XX001 when the newest generation's identity file is damaged
 *	  but the generation holds acknowledged data, and what reading the
 *	  archive raises.
 */
const char *
cs_new_generation_reason(const CsArchiveConfig *config, List *gens,
						 uint64 sysid, uint32 tli, const CsSlotInfo *slot,
						 const char *slot_event, bool requested,
						 CsIdentity *identity, bool *promotion)
{
	const char *directory = config->directory;
	uint64		newest;
	const char *damage;
	uint32		gen_tli;

	*promotion = false;

	if (gens == NIL)
		return "first start: the archive holds no generation";
	if (slot_event)
		return with_timeline_change(directory, gens, tli, slot_event);
	if (requested)
		return "requested by changestream.new_generation()";
	newest = *(uint64 *) llast(gens);
	damage = identity_damage(directory, newest, identity);
	if (damage != NULL)
	{
		if (holds_acknowledged_data(directory, newest, slot))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("cannot continue generation %016llx",
							(unsigned long long) newest),
					 errdetail("%s; the generation holds acknowledged data and is left as it is.",
							   damage),
					 errhint("Restore the identity file, or call changestream.new_generation() to start a new generation.")));
		return psprintf("the newest generation %016llx holds no acknowledged data and its %s",
						(unsigned long long) newest, damage);
	}
	if (identity->system_identifier != sysid)
		return psprintf("the system identifier changed from " UINT64_FORMAT " to " UINT64_FORMAT,
						identity->system_identifier, sysid);
	if (strcmp(identity->slot, config->slot_name) != 0 ||
		strcmp(identity->database, config->database) != 0)
		return psprintf("the slot or database changed (was slot \"%s\" of database \"%s\")",
						identity->slot, identity->database);
	if (strcmp(identity->plugin_options, cs_plugin_options(config)) != 0)
		return psprintf("the plugin options changed (were %s)",
						identity->plugin_options);
	gen_tli = cs_generation_timeline(directory, identity);
	if (gen_tli != tli)
	{
		*promotion = true;
		return psprintf("the timeline changed from %u to %u", gen_tli, tli);
	}
	return NULL;
}

/*
 * cs_newest_snapshot_time
 *	  The mtime of the newest snapshot of a generation (a TimestampTz), or
 *	  its creation time when it has none; 0 when neither is known.
 */
TimestampTz
cs_newest_snapshot_time(const char *directory, uint64 generation)
{
	char	   *dir = cs_snapshots_dir_path(directory, generation);
	bool		found;
	List	   *names = cs_storage_list(dir, true, &found);
	ListCell   *lc;
	TimestampTz newest = 0;
	CsIdentity	identity;

	foreach(lc, names)
	{
		CsStorageInfo info;

		if (!cs_is_snapshot_file_name(lfirst(lc)))
			continue;
		/* whole seconds, as the file's st_mtime */
		if (cs_storage_stat(cs_file_in(dir, lfirst(lc)), true, &info) == 0 &&
			info.type != CS_STORAGE_MISSING)
			newest = Max(newest, info.mtime - info.mtime % USECS_PER_SEC);
	}
	if (newest == 0 && cs_read_identity(directory, generation, &identity))
		newest = identity.created_at;
	return newest;
}

/*
 * A new generation whose opening snapshot is taken and whose directory is
 * still generations/<gen>.tmp: the hand-off waits for the stream to reach
 * its start (docs/DESIGN.md section 6).  tmpdir NULL: none.
 */
static struct
{
	char	   *tmpdir;			/* in TopMemoryContext */
	CsIdentity	identity;
	char	   *directory;
} pending;

/* Forget the pending generation, removing its .tmp directory if it can. */
static void
forget_pending(bool remove)
{
	CsStorageInfo info;

	if (pending.tmpdir == NULL)
		return;
	if (remove && cs_storage_stat(pending.tmpdir, true, &info) == 0 &&
		info.type != CS_STORAGE_MISSING &&
		!cs_storage_try_remove_tree(pending.tmpdir))
		ereport(WARNING,
				(errmsg("could not remove directory \"%s\"", pending.tmpdir)));
	pfree(pending.tmpdir);
	pfree(pending.directory);
	pending.tmpdir = NULL;
	pending.directory = NULL;
}

/*
 * Build a new generation in config's directory as generations/<gen>.tmp
 * with its opening snapshot, and remember it as pending (not yet
 * renamed into place).  With create_slot the snapshot is the new slot's
 * own (created on conn, SNAPSHOT 'use'); otherwise a temporary slot on a
 * second connection gives a snapshot at its consistent point C.  Returns
 * C, the generation's start.  On error nothing is left behind: the second
 * connection is closed and the .tmp directory removed.
 */
static XLogRecPtr
snapshot_new_generation(const CsArchiveConfig *config, WalReceiverConn *conn,
						bool create_slot, uint64 sysid, uint32 tli,
						const char *reason)
{
	const char *directory = config->directory;
	CsIdentity	identity;
	CsSnapshotResult result;
	char	   *volatile tmpdir = NULL;
	WalReceiverConn *volatile snap_conn = NULL;
	MemoryContext old;

	forget_pending(true);
	memset(&identity, 0, sizeof(identity));
	identity.system_identifier = sysid;
	identity.timeline = tli;
	strlcpy(identity.database, config->database, NAMEDATALEN);
	strlcpy(identity.slot, config->slot_name, NAMEDATALEN);
	strlcpy(identity.plugin, "pgoutput", NAMEDATALEN);
	strlcpy(identity.plugin_options, cs_plugin_options(config),
			sizeof(identity.plugin_options));
	strlcpy(identity.reason, reason, sizeof(identity.reason));

	PG_TRY();
	{
		char	   *snapdir;

		tmpdir = cs_generation_prepare(directory, &identity);
		snapdir = cs_gendir_snapshots_path(tmpdir);
		if (create_slot)
		{
			cs_snapshot_take(config, conn, config->slot_name, false, snapdir,
							 identity.generation, CS_PROGRESS_ARCHIVER, &result);
			ereport(LOG,
					(errmsg("created replication slot \"%s\" at " CS_LSN_FMT,
							config->slot_name, LSN_FORMAT_ARGS(result.lsn))));
		}
		else
		{
			uint64		sysid2;
			uint32		tli2;
			char		slot_name[NAMEDATALEN];

			snprintf(slot_name, sizeof(slot_name), "changestream_snapshot_%d",
					 MyProcPid);
			snap_conn = cs_connect(config, &sysid2, &tli2);
			cs_snapshot_take(config, snap_conn, slot_name, true, snapdir,
							 identity.generation, CS_PROGRESS_ARCHIVER, &result);
			cs_disconnect(snap_conn);
			snap_conn = NULL;
		}
		identity.start_lsn = result.lsn;
		strlcpy(identity.encoding, result.encoding, NAMEDATALEN);
	}
	PG_CATCH();
	{
		CsStorageInfo info;

		/* a walsender still creating the slot would linger: end it */
		cs_walsender_reap(config, snap_conn);
		if (tmpdir != NULL &&
			cs_storage_stat(tmpdir, true, &info) == 0 &&
			info.type != CS_STORAGE_MISSING &&
			!cs_storage_try_remove_tree(tmpdir))
			ereport(WARNING,
					(errmsg("could not remove directory \"%s\"", tmpdir)));
		PG_RE_THROW();
	}
	PG_END_TRY();

	old = MemoryContextSwitchTo(TopMemoryContext);
	pending.tmpdir = pstrdup(tmpdir);
	pending.directory = pstrdup(directory);
	pending.identity = identity;
	MemoryContextSwitchTo(old);
	return identity.start_lsn;
}

/* Rename the pending generation into place; returns it. */
static uint64
commit_pending(void)
{
	uint64		generation = pending.identity.generation;

	cs_generation_commit(pending.directory, &pending.identity,
						 cs_session_settings(), pending.tmpdir);
	forget_pending(false);
	return generation;
}

/*
 * cs_open_generation
 *	  Open a new generation in config's directory with its opening
 *	  snapshot (connections and slot of config), and
 *	  make its segment 0 the active segment.  With create_slot the
 *	  snapshot is the new slot's own (created on conn, SNAPSHOT 'use');
 *	  otherwise a temporary slot on a second connection gives a snapshot at
 *	  its consistent point C, and the archiver's slot is streamed from C:
 *	  transactions that commit before C are in the snapshot, the others in
 *	  the segments.  Used where the newest generation cannot be continued
 *	  up to C (cs_prepare_handoff() is used where it can): the history
 *	  between that generation's end and C is a gap, which generations()
 *	  shows.  Returns the generation; *start_lsn is C.  On error nothing is
 *	  left behind: the second connection is closed and the generation's
 *	  .tmp directory removed.
 */
uint64
cs_open_generation(const CsArchiveConfig *config, WalReceiverConn *conn,
				   bool create_slot, uint64 sysid, uint32 tli,
				   const char *reason, XLogRecPtr *start_lsn)
{
	XLogRecPtr	start;
	uint64		generation;

	start = snapshot_new_generation(config, conn, create_slot, sysid, tli,
									reason);
	generation = commit_pending();
	cs_writer_open_first(config->directory, generation, sysid, tli, start);
	cs_status_set_segment(cs_writer_segment_index());
	cs_status_set_last_snapshot(GetCurrentTimestamp());
	*start_lsn = start;
	return generation;
}

/*
 * cs_prepare_handoff
 *	  The writer continues the newest generation (recovered, at its
 *	  position of record P) and a new one is to follow it without a gap:
 *	  take the new generation's opening snapshot through a temporary slot
 *	  on a second connection of config (consistent point C) into
 *	  generations/<gen>.tmp, and keep it pending.  The session then streams
 *	  the archiver's slot from P into the newest generation, and
 *	  cs_complete_handoff() ends it at C and starts the new one there.
 *	  status() shows the hand-off pending until then (handoff_pending,
 *	  cleared by cs_complete_handoff() once the new generation is
 *	  published, or by cs_handoff_reset()).
 *	  Returns C.  Errors: as cs_open_generation().
 */
XLogRecPtr
cs_prepare_handoff(const CsArchiveConfig *config, uint64 sysid, uint32 tli,
				   const char *reason)
{
	XLogRecPtr	start;

	start = snapshot_new_generation(config, NULL, false, sysid, tli, reason);
	cs_status_set_handoff(true, pending.identity.generation, start);
	return start;
}

/*
 * cs_handoff_pending
 *	  Is a new generation waiting for the stream to reach its start?  Sets
 *	  *generation and *start_lsn when it is.
 */
bool
cs_handoff_pending(uint64 *generation, XLogRecPtr *start_lsn)
{
	if (pending.tmpdir == NULL)
		return false;
	*generation = pending.identity.generation;
	*start_lsn = pending.identity.start_lsn;
	return true;
}

/*
 * cs_complete_handoff
 *	  The stream has reached the pending generation's start C, and the
 *	  writer's generation holds everything before it, up to a position of
 *	  record of C (durable).  In this order, so that a crash anywhere
 *	  leaves an archive the next session continues correctly: seal the
 *	  old generation's last segment (its seal ends at C); rename the new
 *	  generation into place (until then a crash leaves the old generation
 *	  newest, ending at C, and the next session continues it); start its
 *	  segment 0 at C (a crash before leaves a generation without segments,
 *	  which recovery gives segment 0 at its start).  The Relation and Type
 *	  messages in force carry over to the new segment's preamble.  The new
 *	  generation is published (status().generation) before the hand-off
 *	  stops showing as pending, so that no take_snapshot() in between is
 *	  aimed at the old one.  Returns the new generation.
 *	  Errors: file access SQLSTATEs.
 */
uint64
cs_complete_handoff(void)
{
	XLogRecPtr	start = pending.identity.start_lsn;
	uint64		sysid = pending.identity.system_identifier;
	uint32		tli = pending.identity.timeline;
	char	   *directory = pstrdup(pending.directory);
	uint64		generation;

	Assert(pending.tmpdir != NULL);
	cs_writer_end_generation(start);
	generation = commit_pending();
	cs_writer_next_generation(directory, generation, sysid, tli, start);
	cs_status_set_generation(generation);
	cs_status_set_handoff(false, 0, InvalidXLogRecPtr);
	cs_status_set_segment(cs_writer_segment_index());
	cs_status_set_last_snapshot(GetCurrentTimestamp());
	return generation;
}

/*
 * cs_handoff_reset
 *	  Forget a pending generation (session end or error): its .tmp
 *	  directory is removed, and the next session takes a new snapshot if
 *	  the new generation is still requested.
 */
void
cs_handoff_reset(void)
{
	forget_pending(true);
	cs_status_set_handoff(false, 0, InvalidXLogRecPtr);
}

/*
 * cs_generation_continuable
 *	  Can the newest of gens (in config's directory) be continued by a
 *	  session of config on system sysid, timeline tli, with slot: is its
 *	  identity file sound and the same (system, timeline, slot, database,
 *	  plugin options), and the slot there and usable (slot_event NULL)?
 *	  Then *identity holds its identity.  Raises nothing for a damaged
 *	  identity file (it only says no); other errors reading it propagate.
 */
bool
cs_generation_continuable(const CsArchiveConfig *config, List *gens,
						  uint64 sysid, uint32 tli, const CsSlotInfo *slot,
						  const char *slot_event, CsIdentity *identity)
{
	uint64		newest;

	if (gens == NIL || slot_event != NULL || !slot->exists || slot->lost)
		return false;
	newest = *(uint64 *) llast(gens);
	if (identity_damage(config->directory, newest, identity) != NULL)
		return false;
	return identity->system_identifier == sysid &&
		cs_generation_timeline(config->directory, identity) == tli &&
		strcmp(identity->slot, config->slot_name) == 0 &&
		strcmp(identity->database, config->database) == 0 &&
		strcmp(identity->plugin_options, cs_plugin_options(config)) == 0;
}
