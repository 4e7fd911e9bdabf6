# changestream: PGXS build
#
# Build:   make            (warnings are errors: -Wall -Wextra -Werror)
# Install: make install
# Tests:   bash scripts/test.sh   (pg_regress + TAP, as the postgres user)

MODULE_big = changestream
OBJS = \
	src/changestream.o \
	src/guc.o \
	src/shmem_status.o \
	src/reader_pins.o \
	src/retention.o \
	src/retention_horizon.o \
	src/archive_dir.o \
	src/archive_layout.o \
	src/generation_reader.o \
	src/snapshot_manifest.o \
	src/generation.o \
	src/segment_format.o \
	src/segment_writer.o \
	src/segment_reader.o \
	src/compress.o \
	src/pgoutput_parse.o \
	src/walsender_conn.o \
	src/stream.o \
	src/generation_policy.o \
	src/archiver.o \
	src/snapshot.o \
	src/snapshot_worker.o \
	src/sql_functions.o \
	src/sql_worker.o \
	src/decoder.o \
	src/snapshot_reader.o \
	src/sql_changes.o \
	src/sql_verify.o \
	src/restore.o \
	src/restore_apply.o

EXTENSION = changestream
DATA = sql/changestream--0.1.sql
PGFILEDESC = "changestream - durable archive of a logical change stream"

SHLIB_LINK += -lz
PG_CPPFLAGS = -I$(srcdir)/src
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# every object depends on the shared headers (CsStatus lives in shared
# memory: all objects must agree on its layout)
$(OBJS): src/changestream.h src/compat.h src/wire.h src/pinned_settings.h \
	src/archive_layout.h src/generation_reader.h src/decoder.h \
	src/snapshot_reader.h src/restore.h

# pg_regress test of the SQL surface (sql/changestream.sql, expected/).
# It needs the library preloaded and an archive directory: run it with
# "bash scripts/test.sh regress", which uses a temporary instance configured
# from test/regress.conf.  Listing it here also makes "make clean" remove
# results/, tmp_check/ and regression.*.
REGRESS = changestream
