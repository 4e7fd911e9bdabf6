# changestream: PGXS build
#
# Build:   make            (warnings are errors: -Wall -Wextra -Werror)
# Install: make install
# Tests:   make installcheck     (pg_regress against the running server, then
#                                 the TAP tests in t/, which start their own)
#          bash scripts/test.sh  (the same on a temporary instance, as the
#                                 postgres user; see the README)
# PG_CONFIG chooses the PostgreSQL version, as for any PGXS module:
#          make PG_CONFIG=/usr/lib/postgresql/17/bin/pg_config

MODULE_big = changestream
OBJS = \
	src/changestream.o \
	src/guc.o \
	src/archive_config.o \
	src/shmem_status.o \
	src/reader_pins.o \
	src/retention.o \
	src/retention_horizon.o \
	src/storage.o \
	src/storage_posix.o \
	src/archive_dir.o \
	src/archive_layout.o \
	src/generation_reader.o \
	src/snapshot_manifest.o \
	src/generation.o \
	src/segment_format.o \
	src/segment_writer.o \
	src/segment_recovery.o \
	src/segment_schema.o \
	src/segment_reader.o \
	src/compress.o \
	src/compressor.o \
	src/segment_spare.o \
	src/log_once.o \
	src/pgoutput_parse.o \
	src/walsender_conn.o \
	src/stream.o \
	src/stream_pacing.o \
	src/generation_policy.o \
	src/archiver.o \
	src/snapshot.o \
	src/snapshot_worker.o \
	src/walsender_reap.o \
	src/message_filter.o \
	src/conninfo_secret.o \
	src/ri_monitor.o \
	src/guc_rejected.o \
	src/sql_functions.o \
	src/sql_worker.o \
	src/decoder.o \
	src/snapshot_reader.o \
	src/sql_changes.o \
	src/sql_verify.o \
	src/restore.o \
	src/restore_apply.o \
	src/ddl_history.o

EXTENSION = changestream
DATA = sql/changestream--0.1.sql sql/changestream--0.2.sql sql/changestream--0.1--0.2.sql
PGFILEDESC = "changestream - durable archive of a logical change stream"

SHLIB_LINK += -lz
PG_CPPFLAGS = -I$(srcdir)/src
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare

# pg_regress test of the SQL surface (sql/changestream.sql, expected/; the
# alternative expected/changestream_1.out is PostgreSQL 17+'s wording of GUC
# range errors).  "make installcheck" runs it against the running server,
# which must preload changestream and have changestream.directory set (see
# the README).  A temporary instance (scripts/test.sh, or "make check" in a
# source tree) is configured by test/regress.conf plus the archive directory
# written by the regress-conf rule below: --temp-config, as contrib's
# pg_prewarm and basic_archive do.
REGRESS = changestream
REGRESS_CONF = $(CURDIR)/tmp_regress/archive.conf
REGRESS_OPTS = --temp-config=$(srcdir)/test/regress.conf \
	--temp-config=$(REGRESS_CONF)
REGRESS_PREP = regress-conf

# TAP tests in t/ (PostgreSQL::Test::Cluster nodes, changestream must be
# installed); t/ChangestreamTest.pm is their helper module.
TAP_TESTS = 1
EXTRA_CLEAN = tmp_regress

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

PG_PROVE_FLAGS += -I $(srcdir)/t

# PostgreSQL 16+ TAP modules put node directories under TESTDATADIR and logs
# under TESTLOGDIR (PGXS sets them from 16 on; harmless for 15).
export TESTDATADIR ?= $(CURDIR)/tmp_check
export TESTLOGDIR ?= $(CURDIR)/tmp_check/log

# every object depends on the shared headers (CsStatus lives in shared
# memory: all objects must agree on its layout)
$(OBJS): $(wildcard src/*.h)

# The archive directory of a temporary regress instance: an absolute path,
# so it is written at run time.
.PHONY: regress-conf
regress-conf:
	@mkdir -p $(CURDIR)/tmp_regress/archive
	@echo "changestream.directory = '$(CURDIR)/tmp_regress/archive'" >$(REGRESS_CONF)
