/*-------------------------------------------------------------------------
 *
 * archive_layout.c
 *	  The one owner of the archive directory's layout (docs/FORMAT.md,
 *	  section 3): the paths of generations, segments and snapshots, their
 *	  file names, the listings every reader and the writer use, and the one
 *	  way to open a file found in the archive.
 *
 *	  Everything found on disk is untrusted.  A name that looks like an
 *	  archive file but is not a regular file (a FIFO, a socket, a device, a
 *	  directory, a symbolic link loop) is damage: it is reported as such
 *	  (XX001) instead of being opened, because opening a FIFO blocks in
 *	  open(2) where no interrupt can reach it.  Files are opened with
 *	  O_NONBLOCK and checked with fstat() before the first read.  Listings
 *	  come through AllocateDir(), so an error never leaks a directory
 *	  handle.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "access/xact.h"
#include "storage/fd.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "archive_layout.h"
#include "retention.h"

#define SNAPSHOT_SUFFIX		".snapshot.gz"

/*
 * cs_parse_generation
 *	  True when text is exactly 16 lowercase hex digits (a generation name,
 *	  or the stem of a segment or snapshot name); stores the value.
 */
bool
cs_parse_generation(const char *text, uint64 *generation)
{
	uint64		v = 0;
	int			i;

	if (text == NULL || strlen(text) != 16)
		return false;
	for (i = 0; i < 16; i++)
	{
		char		c = text[i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else
			return false;
	}
	*generation = v;
	return true;
}

/*
 * cs_generation_path
 *	  Returns a palloc'd "<directory>/generations/<16 hex digits>".
 */
char *
cs_generation_path(const char *directory, uint64 generation)
{
	return psprintf("%s/generations/%016llx", directory,
					(unsigned long long) generation);
}

/*
 * cs_wal_dir_path
 *	  Returns a palloc'd "<directory>/generations/<generation>/wal".
 */
char *
cs_wal_dir_path(const char *directory, uint64 generation)
{
	return psprintf("%s/generations/%016llx/wal", directory,
					(unsigned long long) generation);
}

/*
 * cs_snapshots_dir_path
 *	  Returns a palloc'd "<directory>/generations/<generation>/snapshots".
 */
char *
cs_snapshots_dir_path(const char *directory, uint64 generation)
{
	return psprintf("%s/generations/%016llx/snapshots", directory,
					(unsigned long long) generation);
}

/*
 * cs_segment_file_name
 *	  Returns a palloc'd "<16 hex digits>.wal" or "<16 hex digits>.wal.gz".
 */
char *
cs_segment_file_name(int64 index, bool compressed)
{
	return psprintf("%016llx.wal%s", (unsigned long long) index,
					compressed ? ".gz" : "");
}

/*
 * cs_parse_segment_file_name
 *	  Recognises a segment file name, storing its index and whether it is
 *	  compressed; false for anything else (temporary files included).
 */
bool
cs_parse_segment_file_name(const char *name, int64 *index, bool *compressed)
{
	uint64		v;
	char		hex[17];

	if (strlen(name) < 20)
		return false;
	memcpy(hex, name, 16);
	hex[16] = '\0';
	if (!cs_parse_generation(hex, &v) || v > (uint64) PG_INT64_MAX)
		return false;
	if (strcmp(name + 16, ".wal") == 0)
		*compressed = false;
	else if (strcmp(name + 16, ".wal.gz") == 0)
		*compressed = true;
	else
		return false;
	*index = (int64) v;
	return true;
}

/*
 * cs_is_snapshot_file_name
 *	  True for "<16 hex digits>.snapshot.gz", the name of a durable snapshot
 *	  (its LSN in uppercase hex, so names sort in LSN order); false for
 *	  temporary files and anything else.
 */
bool
cs_is_snapshot_file_name(const char *name)
{
	int			i;

	if (strlen(name) != 16 + strlen(SNAPSHOT_SUFFIX) ||
		strcmp(name + 16, SNAPSHOT_SUFFIX) != 0)
		return false;
	for (i = 0; i < 16; i++)
		if (!isxdigit((unsigned char) name[i]))
			return false;
	return true;
}

/*
 * cs_file_mtime
 *	  A file's modification time as a timestamptz, with microseconds.
 */
TimestampTz
cs_file_mtime(const struct stat *st)
{
	return time_t_to_timestamptz(st->st_mtim.tv_sec) +
		st->st_mtim.tv_nsec / 1000;
}

static int
cmp_uint64(const ListCell *a, const ListCell *b)
{
	uint64		x = *(uint64 *) lfirst(a);
	uint64		y = *(uint64 *) lfirst(b);

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * Open a directory of the archive; NULL when it does not exist and
 * missing_ok, else an error with the file-access SQLSTATE of errno.
 */
static DIR *
open_dir(const char *path, bool missing_ok)
{
	DIR		   *dir = AllocateDir(path);

	if (dir == NULL)
	{
		if (errno == ENOENT && missing_ok)
			return NULL;
		if (errno == ENOTDIR)
			cs_file_damage(path, 0, "It is not a directory.");
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open directory \"%s\": %m", path)));
	}
	return dir;
}

/*
 * cs_list_generations
 *	  Returns the generations present as a List of palloc'd uint64, in
 *	  ascending (creation) order: directories named with 16 hex digits that
 *	  hold an entry named "generation" (the identity file, which readers
 *	  then check).  Anything else (a half-made "<gen>.tmp", a stray file or
 *	  an empty directory) is ignored; a missing generations/ gives NIL.
 *	  Errors: file access SQLSTATEs when generations/ cannot be read.
 */
List *
cs_list_generations(const char *directory)
{
	char	   *path = psprintf("%s/generations", directory);
	DIR		   *dir = open_dir(path, true);
	struct dirent *de;
	List	   *result = NIL;

	if (dir == NULL)
		return NIL;
	while ((de = ReadDir(dir, path)) != NULL)
	{
		uint64		g;
		struct stat st;
		char		idpath[MAXPGPATH];

		if (!cs_parse_generation(de->d_name, &g))
			continue;
		snprintf(idpath, sizeof(idpath), "%s/%s/generation", path, de->d_name);
		if (lstat(idpath, &st) == 0)
		{
			uint64	   *p = palloc(sizeof(uint64));

			*p = g;
			result = lappend(result, p);
		}
	}
	FreeDir(dir);
	list_sort(result, cmp_uint64);
	return result;
}

static int
cmp_segment(const ListCell *a, const ListCell *b)
{
	const CsSegmentFile *x = lfirst(a);
	const CsSegmentFile *y = lfirst(b);

	return x->index < y->index ? -1 : (x->index > y->index ? 1 : 0);
}

/*
 * stat() an entry named like an archive file; false when it vanished
 * (compression removes raw segments), XX001 when it is not a regular file.
 */
static bool
stat_regular(const char *path, struct stat *st)
{
	if (stat(path, st) != 0)
	{
		if (errno == ENOENT)
			return false;
		if (errno == ELOOP)
			cs_file_damage(path, 0, "It is a symbolic link loop, not a regular file.");
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", path)));
	}
	if (!S_ISREG(st->st_mode))
		cs_file_damage(path, 0, "It is not a regular file.");
	return true;
}

/*
 * list_segments
 *	  Returns the segment files of a generation as a List of palloc'd
 *	  CsSegmentFile, by index.  Where a raw segment and its .gz both exist
 *	  (compression finishing: the .gz is renamed into place only once it is
 *	  durable) the .gz is listed.  A generation without wal/ gives NIL.
 *	  Errors: XX001 for an entry named like a segment that is not a regular
 *	  file; file access SQLSTATEs when wal/ cannot be read.
 */
static List *
list_segments(const char *directory, uint64 generation, bool all)
{
	char	   *wal_dir = cs_wal_dir_path(directory, generation);
	DIR		   *dir = open_dir(wal_dir, true);
	struct dirent *de;
	List	   *result = NIL;
	CsHorizon	horizon;

	if (dir == NULL)
		return NIL;
	while ((de = ReadDir(dir, wal_dir)) != NULL)
	{
		int64		idx;
		bool		compressed;
		CsSegmentFile *sf = NULL;
		struct stat st;
		char		path[MAXPGPATH];
		ListCell   *lc;

		if (!cs_parse_segment_file_name(de->d_name, &idx, &compressed))
			continue;
		snprintf(path, sizeof(path), "%s/%s", wal_dir, de->d_name);
		if (!stat_regular(path, &st))
			continue;
		foreach(lc, result)
		{
			CsSegmentFile *o = lfirst(lc);

			if (o->index == idx)
				sf = o;
		}
		if (sf != NULL && !compressed)
		{
			sf->raw_twin = true;
			continue;
		}
		if (sf == NULL)
		{
			sf = palloc0(sizeof(CsSegmentFile));
			result = lappend(result, sf);
		}
		else
			sf->raw_twin = true;	/* the raw one was listed first */
		sf->index = idx;
		sf->compressed = compressed;
		strlcpy(sf->path, path, MAXPGPATH);
		sf->size = st.st_size;
		sf->mtime = cs_file_mtime(&st);
	}
	FreeDir(dir);
	list_sort(result, cmp_segment);
	if (!all && cs_read_horizon(directory, generation, &horizon))
	{
		/* below the retention horizon: being deleted, not read */
		while (result != NIL &&
			   ((CsSegmentFile *) linitial(result))->index < horizon.first_segment)
			result = list_delete_first(result);
	}
	return result;
}

/* Do the (sorted) segments skip an index? */
static bool
has_gap(List *segments)
{
	int64		prev = -1;
	ListCell   *lc;

	foreach(lc, segments)
	{
		CsSegmentFile *sf = lfirst(lc);

		if (prev >= 0 && sf->index != prev + 1)
			return true;
		prev = sf->index;
	}
	return false;
}

/*
 * cs_list_segments
 *	  The segment files of a generation, as list_segments() gives them,
 *	  without those below its retention horizon (docs/FORMAT.md 4.3).
 *	  Errors: as list_segments(); XX001 for a damaged horizon file.
 */
List *
cs_list_segments(const char *directory, uint64 generation)
{
	List	   *result = list_segments(directory, generation, false);

	/*
	 * The compressor replaces a raw segment by its .gz beside every reader:
	 * a directory read that passed the .gz's place before it was created
	 * and reached the raw name after it was removed sees neither.  Such a
	 * gap is gone at the next read; a real one stays, and
	 * cs_check_segment_sequence() reports it.
	 */
	for (int i = 0; i < 2 && has_gap(result); i++)
	{
		list_free_deep(result);
		result = list_segments(directory, generation, false);
	}
	return result;
}

/*
 * cs_list_all_segments
 *	  As cs_list_segments(), including those below the retention horizon
 *	  (for retention, which deletes them).
 */
List *
cs_list_all_segments(const char *directory, uint64 generation)
{
	return list_segments(directory, generation, true);
}

/*
 * cs_check_segment_sequence
 *	  Checks that a listing from cs_list_segments() has no gap: a missing
 *	  segment between two present ones loses the transactions it held.
 *	  Errors: XX001 naming the missing file.
 */
void
cs_check_segment_sequence(const char *directory, uint64 generation,
						  List *segments)
{
	ListCell   *lc;
	int64		expect = -1;
	CsHorizon	horizon;

	if (!cs_read_horizon(directory, generation, &horizon))
	{
		if (segments == NIL)
			return;				/* a new generation, before its first segment */
		horizon.first_segment = 0;
	}
	else if (segments == NIL)
	{
		/* retention never deletes the newest segment */
		char	   *path = psprintf("%s/%s",
									cs_wal_dir_path(directory, generation),
									cs_segment_file_name(horizon.first_segment, false));

		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("changestream segment \"%s\" is missing", path),
				 errdetail("The generation's retention horizon keeps segments from %lld on, but none is there.",
						   (long long) horizon.first_segment),
				 errhint(CS_DAMAGE_HINT)));
	}
	expect = horizon.first_segment;
	foreach(lc, segments)
	{
		CsSegmentFile *sf = lfirst(lc);

		if (expect >= 0 && sf->index != expect)
		{
			char	   *path = psprintf("%s/%s",
										cs_wal_dir_path(directory, generation),
										cs_segment_file_name(expect, false));

			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("changestream segment \"%s\" is missing", path),
					 expect == horizon.first_segment ?
					 errdetail("The generation's segments start at %lld (its retention horizon, or 0 without one), but the first one found is %lld.",
							   (long long) expect, (long long) sf->index) :
					 errdetail("Segments %lld and %lld of the generation exist, so every segment between them must too.",
							   (long long) (expect - 1), (long long) sf->index),
					 errhint(CS_DAMAGE_HINT)));
		}
		expect = sf->index + 1;
	}
}

static int
cmp_name(const ListCell *a, const ListCell *b)
{
	return strcmp(lfirst(a), lfirst(b));
}

/*
 * cs_list_snapshots
 *	  Returns the names of a generation's durable snapshot files as a List
 *	  of palloc'd strings in LSN order (their names are their LSNs in hex).
 *	  Errors: file access SQLSTATEs when snapshots/ cannot be read (a
 *	  generation always has it), never an empty result instead.
 */
List *
cs_list_snapshots(const char *directory, uint64 generation)
{
	char	   *path = cs_snapshots_dir_path(directory, generation);
	DIR		   *dir = open_dir(path, false);
	struct dirent *de;
	List	   *names = NIL;

	CsHorizon	horizon;
	XLogRecPtr	lsn;

	if (!cs_read_horizon(directory, generation, &horizon))
		horizon.snapshot_lsn = InvalidXLogRecPtr;
	while ((de = ReadDir(dir, path)) != NULL)
	{
		/* below the retention horizon: being deleted, not read */
		if (cs_snapshot_name_lsn(de->d_name, &lsn) &&
			lsn >= horizon.snapshot_lsn)
			names = lappend(names, pstrdup(de->d_name));
	}
	FreeDir(dir);
	list_sort(names, cmp_name);
	return names;
}

/*
 * cs_open_regular_file
 *	  Opens a file of the archive read-only without blocking and checks that
 *	  it is a regular file (a symbolic link to one is followed).  Returns
 *	  the file descriptor, which the caller closes, or -1 when the file does
 *	  not exist and missing_ok.  The descriptor is not tracked by fd.c:
 *	  callers account for it with AcquireExternalFD() or own it through a
 *	  memory context reset callback.
 *	  Errors: XX001 when it is not a regular file; file access SQLSTATEs
 *	  (42501, 58P01, ...) for other failures.
 */
int
cs_open_regular_file(const char *path, bool missing_ok)
{
	int			fd;
	struct stat st;
	int			flags;

	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | PG_BINARY, 0);
	if (fd < 0)
	{
		if (errno == ENOENT && missing_ok)
			return -1;
		if (errno == ELOOP || errno == ENXIO)
			cs_file_damage(path, 0, "It is not a regular file.");
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	}
	if (fstat(fd, &st) != 0)
	{
		int			save_errno = errno;

		close(fd);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", path)));
	}
	if (!S_ISREG(st.st_mode))
	{
		close(fd);
		cs_file_damage(path, 0, "It is not a regular file.");
	}
	/* regular files ignore O_NONBLOCK; clear it all the same */
	flags = fcntl(fd, F_GETFL);
	if (flags >= 0)
		(void) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
	return fd;
}

/*
 * cs_open_counted_file
 *	  cs_open_regular_file(), with the descriptor counted by fd.c as an
 *	  external one (AcquireExternalFD()), for a descriptor that zlib or a
 *	  reader owns: the caller calls ReleaseExternalFD() after closing it.
 *	  Errors: as cs_open_regular_file(); 53000 when fd.c allows no more
 *	  files.
 */
int
cs_open_counted_file(const char *path, bool missing_ok)
{
	int			fd = cs_open_regular_file(path, missing_ok);

	if (fd >= 0 && !AcquireExternalFD())
	{
		close(fd);
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not open file \"%s\": too many open files", path)));
	}
	return fd;
}

/*
 * cs_close_counted_file
 *	  Closes a descriptor from cs_open_counted_file(): through zlib when a
 *	  gzFile owns it (gzclose() closes it and frees zlib's buffers), else
 *	  directly, and tells fd.c it is gone.  fd < 0 (nothing open) is a
 *	  no-op.  Called from release callbacks and PG_FINALLY blocks: it never
 *	  raises.
 */
void
cs_close_counted_file(struct gzFile_s *gz, int fd)
{
	if (fd < 0)
		return;
	if (gz != NULL)
		gzclose(gz);
	else
		close(fd);
	ReleaseExternalFD();
}

/* Check that fd is a regular file of at most max_bytes, and read it into out. */
static void
read_regular_fd(int fd, const char *path, Size max_bytes, StringInfo out)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat file \"%s\": %m", path)));
	if (!S_ISREG(st.st_mode))
		cs_file_damage(path, 0, "It is not a regular file.");
	if ((Size) st.st_size > max_bytes)
		cs_file_damage(path, 0, "It is %lld bytes long, more than the %zu bytes such a file can hold.",
					   (long long) st.st_size, max_bytes);
	resetStringInfo(out);
	enlargeStringInfo(out, st.st_size + 1);
	for (;;)
	{
		ssize_t		n = read(fd, out->data + out->len, out->maxlen - out->len - 1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read file \"%s\": %m", path)));
		if (n == 0)
			break;
		out->len += n;
		if ((Size) out->len >= max_bytes)
			cs_file_damage(path, 0, "It grew past the %zu bytes such a file can hold.",
						   max_bytes);
		if (out->len >= out->maxlen - 1)
			enlargeStringInfo(out, 1024);
	}
	out->data[out->len] = '\0';
}

/*
 * cs_read_small_file
 *	  Reads a whole small text file of the archive (an identity file, say)
 *	  into out, which is reset first; false when it does not exist and
 *	  missing_ok.  max_bytes bounds what is read: a larger file is damage.
 *	  The descriptor is a transient file, released on error.
 *	  Errors: XX001 when the file is not a regular file or is larger than
 *	  max_bytes; file access SQLSTATEs for I/O failures.
 */
bool
cs_read_small_file(const char *path, Size max_bytes, StringInfo out,
				   bool missing_ok)
{
	int			fd;

	fd = OpenTransientFile(path, O_RDONLY | O_NONBLOCK | PG_BINARY);
	if (fd < 0)
	{
		if (errno == ENOENT && missing_ok)
			return false;
		if (errno == ELOOP || errno == ENXIO)
			cs_file_damage(path, 0, "It is not a regular file.");
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	}
	PG_TRY();
	{
		read_regular_fd(fd, path, max_bytes, out);
	}
	PG_FINALLY();
	{
		CloseTransientFile(fd);
	}
	PG_END_TRY();
	return true;
}

/*
 * cs_catch_damage
 *	  Runs fn(arg) in a subtransaction with cxt as CurrentMemoryContext, the
 *	  way PL/pgSQL runs an exception block.  Returns NULL when fn returns,
 *	  or the error, copied into the caller's memory context, when fn raised
 *	  XX001 (data_corrupted): the subtransaction is then rolled back and cxt
 *	  reset, which closes the files fn's readers held in it.  Any other
 *	  error is raised again.  For readers that report damage as a value
 *	  (generations()' damage column, verify()'s rows) instead of failing.
 */
ErrorData *
cs_catch_damage(void (*fn) (void *arg), void *arg, MemoryContext cxt)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	ErrorData  *volatile damage = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		fn(arg);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		MemoryContextReset(cxt);
		if (edata->sqlerrcode != ERRCODE_DATA_CORRUPTED)
			ReThrowError(edata);
		damage = edata;
	}
	PG_END_TRY();
	return damage;
}
