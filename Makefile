# changestream: PGXS build
#
# Build:   make            (warnings are errors: -Wall -Wextra -Werror)
# Install: make install
# Tests:   make installcheck     (pg_regress against the running server, then
#                                 the TAP tests in t/, which start their own)
#          bash scripts/test.sh  (the same on a temporary instance, as the
#                                 postgres user; see docs/testing.md)
# PG_CONFIG chooses the PostgreSQL version, as for any PGXS module:
#          make PG_CONFIG=/usr/lib/postgresql/17/bin/pg_config

MODULE_big = changestream
OBJS = \
	src/changestream.o \
	src/base/guc.o \
	src/base/replica_url.o \
	src/replica/sigv4.o \
	src/replica/s3_credentials.o \
	src/replica/s3_config.o \
	src/replica/s3_xml.o \
	src/replica/s3_request.o \
	src/replica/s3_ops.o \
	src/replica/replica_status.o \
	src/replica/replica_journal.o \
	src/replica/remote_retention.o \
	src/base/archive_config.o \
	src/base/shmem_status.o \
	src/archive/reader_pins.o \
	src/archive/retention.o \
	src/archive/retention_horizon.o \
	src/archive/storage.o \
	src/archive/storage_posix.o \
	src/archive/storage_s3.o \
	src/archive/archive_dir.o \
	src/archive/archive_layout.o \
	src/read/generation_reader.o \
	src/read/read_source.o \
	src/archive/snapshot_manifest.o \
	src/archive/generation.o \
	src/archive/generation_timelines.o \
	src/archive/generation_span.o \
	src/archive/segment_format.o \
	src/archive/segment_writer.o \
	src/archive/segment_recovery.o \
	src/archive/segment_schema.o \
	src/archive/schema_history.o \
	src/archive/recapture_request.o \
	src/archive/table_definition.o \
	src/archive/segment_reader.o \
	src/archive/compress.o \
	src/worker/maintenance.o \
	src/worker/slot_wal_watch.o \
	src/worker/uploader.o \
	src/archive/segment_spare.o \
	src/base/latch_wait.o \
	src/base/log_once.o \
	src/base/slot_wal.o \
	src/archive/pgoutput_parse.o \
	src/worker/walsender_conn.o \
	src/worker/stream.o \
	src/worker/recapture.o \
	src/worker/stream_pacing.o \
	src/worker/generation_policy.o \
	src/worker/archiver.o \
	src/worker/launcher.o \
	src/worker/dropdb_hook.o \
	src/worker/snapshot.o \
	src/worker/snapshot_worker.o \
	src/worker/walsender_reap.o \
	src/worker/message_filter.o \
	src/base/conninfo_secret.o \
	src/worker/ri_monitor.o \
	src/base/guc_rejected.o \
	src/sql/sql_functions.o \
	src/sql/sql_worker.o \
	src/sql/sql_replica.o \
	src/read/decoder.o \
	src/archive/snapshot_reader.o \
	src/read/sql_changes.o \
	src/read/sql_verify.o \
	src/read/verify_record.o \
	src/read/restore.o \
	src/read/restore_apply.o \
	src/read/restore_columns.o \
	src/read/restore_manifest.o \
	src/read/restore_key.o \
	src/read/restore_filter.o \
	src/read/archived_tables.o \
	src/read/restore_dry_count.o \
	src/read/restore_row_filter.o \
	src/read/restore_progress.o \
	src/read/restore_sequences.o \
	src/read/ddl_record.o \
	src/read/json_member.o \
	src/read/definition_read.o \
	src/read/restore_definition.o \
	src/read/definition_statement.o \
	src/sql/ddl_history.o

EXTENSION = changestream
DATA = sql/changestream--0.1.sql sql/changestream--0.2.sql sql/changestream--0.1--0.2.sql
PGFILEDESC = "changestream - durable archive of a logical change stream"

SHLIB_LINK += -lz $(shell pkg-config --libs libcurl 2>/dev/null || echo -lcurl)
PG_CPPFLAGS = -I$(srcdir)/src
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare

# pg_regress test of the SQL surface (sql/changestream.sql, expected/; the
# alternative expected/changestream_1.out is PostgreSQL 17+'s wording of GUC
# range errors).  "make installcheck" runs it against the running server,
# which must preload changestream and have changestream.directory set (see
# docs/testing.md).  A temporary instance (scripts/test.sh, or "make check" in a
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
$(OBJS): $(wildcard src/*/*.h)

# The archive directory of a temporary regress instance: an absolute path,
# so it is written at run time.
.PHONY: regress-conf
regress-conf:
	@mkdir -p $(CURDIR)/tmp_regress/archive
	@echo "changestream.directory = '$(CURDIR)/tmp_regress/archive'" >$(REGRESS_CONF)
