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
 * cs_new_generation_reason
 *	  Decide whether the newest of gens (a List of uint64 *, oldest first,
 *	  in config's directory) continues under config: returns the reason
 *	  for a new generation (a palloc'd or static string), or NULL with the
 *	  newest generation's identity in *identity.  slot_event is a reason
 *	  already found with the slot (created, recreated), or NULL; requested
 *	  is an operator's new_generation(), honoured before the newest
 *	  generation is looked at.
 *	  Raises XX001 when the newest generation's identity file is damaged
 *	  but the generation holds acknowledged data, and what reading the
 *	  archive raises.
 */
const char *
cs_new_generation_reason(const CsArchiveConfig *config, List *gens,
						 uint64 sysid, uint32 tli, const CsSlotInfo *slot,
						 const char *slot_event, bool requested,
						 CsIdentity *identity)
{
	const char *directory = config->directory;
	uint64		newest;
	const char *damage;

	if (gens == NIL)
		return "first start: the archive holds no generation";
	if (slot_event)
		return slot_event;
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
	if (identity->timeline != tli)
		return psprintf("the timeline changed from %u to %u",
						identity->timeline, tli);
	if (strcmp(identity->slot, config->slot_name) != 0 ||
		strcmp(identity->database, config->database) != 0)
		return psprintf("the slot or database changed (was slot \"%s\" of database \"%s\")",
						identity->slot, identity->database);
	if (strcmp(identity->plugin_options, cs_plugin_options(config)) != 0)
		return psprintf("the plugin options changed (were %s)",
						identity->plugin_options);
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
 * cs_open_generation
 *	  Open a new generation in config's directory with its opening
 *	  snapshot (connections and slot of config), and
 *	  make its segment 0 the active segment.  With create_slot the
 *	  snapshot is the new slot's own (created on conn, SNAPSHOT 'use');
 *	  otherwise a temporary slot on a second connection gives a snapshot at
 *	  its consistent point C, and the archiver's slot is streamed from C:
 *	  transactions that commit before C are in the snapshot, the others in
 *	  the segments.  Returns the generation; *start_lsn is C.  On error
 *	  nothing is left behind: the second connection is closed and the
 *	  generation's .tmp directory removed.
 */
uint64
cs_open_generation(const CsArchiveConfig *config, WalReceiverConn *conn,
				   bool create_slot, uint64 sysid, uint32 tli,
				   const char *reason, XLogRecPtr *start_lsn)
{
	const char *directory = config->directory;
	CsIdentity	identity;
	CsSnapshotResult result;
	char	   *volatile tmpdir = NULL;
	WalReceiverConn *volatile snap_conn = NULL;

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
		cs_generation_commit(directory, &identity, cs_session_settings(),
							 tmpdir);
		tmpdir = NULL;
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

	cs_writer_open_first(directory, identity.generation, sysid, tli,
						 identity.start_lsn);
	cs_status_set_segment(cs_writer_segment_index());
	cs_status_set_last_snapshot(GetCurrentTimestamp());
	*start_lsn = identity.start_lsn;
	return identity.generation;
}
