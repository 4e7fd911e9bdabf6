#!/usr/bin/env bash
# scripts/test.sh: changestream's test suite (the README's test command).
#
#   bash scripts/test.sh                 everything: pg_regress, then all TAP tests
#   bash scripts/test.sh t/001_x.pl ...  only the named TAP tests (plus pg_regress
#                                        unless SKIP_REGRESS=1)
#   bash scripts/test.sh regress         only pg_regress
#
# Environment:
#   SKIP_BUILD=1     do not install packages, build or install (reuse what is installed)
#   SKIP_REGRESS=1   skip pg_regress            SKIP_TAP=1   skip the TAP tests
#   PROVE_FLAGS=...  extra flags for prove (e.g. "-v")
#   CS_TEST_JOBS=N   TAP files run at once (prove -j; default 4, 1 = one at a time)
#   KEEP=1           keep the work directory even when everything passes
#
#   PG_CONFIG=...    the PostgreSQL to build and test against (default: the
#                    pg_config in PATH, else /usr/lib/postgresql/15/bin/pg_config)
#   CS_OBJECT_STORE_ENV=FILE  the env file of an object store already running
#                    (scripts/object-store.sh); without it, when a TAP file to
#                    run calls cs_object_store, one is started for the run
#                    (about 20 s) and stopped by PID at the end, also on failure
#   CI=true          a TAP file that needs the object store fails without it
#                    (elsewhere it is skipped)
#
# A thin wrapper around PGXS: as root it installs what is missing with apt,
# runs make (warnings are errors) and make install, then runs
# "make installcheck" as the "postgres" user from a copy of the source tree
# in a fresh directory that user owns: pg_regress on a temporary instance
# (--temp-instance, configured by the Makefile's --temp-config files), and
# prove on t/*.pl (PostgreSQL::Test::Cluster nodes).  Exits non-zero if
# anything fails, after printing regression.diffs and the tail of the
# relevant logs.

set -uo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { sed -n '2,31p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

run_regress=1
run_tap=1
tap_tests=()
if [ $# -gt 0 ]; then
	run_regress=0
	run_tap=0
	for arg in "$@"; do
		case $arg in
		-h | --help) usage; exit 0 ;;
		regress) run_regress=1 ;;
		*.pl)
			# accept t/001_x.pl, 001_x.pl or a path to the checkout's t/
			name=$(basename "$arg")
			[ -f "$CS_ROOT/t/$name" ] || cs_die "no such TAP test: t/$name"
			tap_tests+=("t/$name")
			run_tap=1
			run_regress=1 # pg_regress is quick; SKIP_REGRESS=1 skips it
			;;
		*) usage >&2; cs_die "unknown argument: $arg" ;;
		esac
	done
fi
[ "${SKIP_REGRESS:-0}" = 1 ] && run_regress=0
[ "${SKIP_TAP:-0}" = 1 ] && run_tap=0

t_start=$(cs_now)

if [ "${SKIP_BUILD:-0}" != 1 ]; then
	cs_section "dependencies"
	cs_install_deps || cs_die "could not install the dependencies"
	cs_section "build and install"
	t0=$(cs_now)
	cs_build_install || cs_die "build failed (the Makefile treats warnings as errors)"
	cs_info "build: $(( $(cs_now) - t0 ))s"
fi
cs_pg_paths || cs_die "no PostgreSQL at $PG_CONFIG (set PG_CONFIG)"
[ -x "$PG_REGRESS" ] || cs_die "pg_regress not found at $PG_REGRESS"
cs_info "PostgreSQL $PG_MAJOR: $PG_CONFIG"

# A work area the postgres user owns, holding a copy of the source tree
# (the checkout may not be readable or writable by that user).
WORK=$(cs_mkwork changestream-test)
mkdir -p "$WORK/src"
tar -C "$CS_ROOT" --exclude=./.git --exclude='*.o' --exclude='*.so' \
	--exclude='*.bc' --exclude=./tmp_check --exclude=./tmp_regress --exclude=./results \
	--exclude=./log --exclude='./regression.*' -cf - . | tar -C "$WORK/src" -xf -
if cs_is_root; then
	chown -R "$PG_OS_USER": "$WORK"
fi
cs_info "work directory: $WORK"

regress_result=skipped
tap_result=skipped
failed=0

# The object store this run started (stopped by PID on exit, whatever
# happens), or none.
STORE_DIR=""
stop_object_store() {
	[ -n "$STORE_DIR" ] || return 0
	CS_OBJECT_STORE_DIR=$STORE_DIR bash "$CS_ROOT/scripts/object-store.sh" stop
	STORE_DIR=""
}
trap stop_object_store EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# Give the TAP files the object store when one of them needs it: the one
# named by CS_OBJECT_STORE_ENV, else one started here.
start_object_store() {
	if [ -n "${CS_OBJECT_STORE_ENV:-}" ] && [ -r "$CS_OBJECT_STORE_ENV" ]; then
		cs_info "object store: $CS_OBJECT_STORE_ENV (started by the caller)"
		export CS_OBJECT_STORE_ENV
		return 0
	fi
	if ! command -v radosgw >/dev/null 2>&1; then
		cs_info "object store: not installed (bash scripts/object-store.sh install); the TAP files that need it are skipped, or fail under CI=true"
		unset CS_OBJECT_STORE_ENV
		return 0
	fi
	STORE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/changestream-object-store.XXXXXX")
	if CS_OBJECT_STORE_ENV=$(CS_OBJECT_STORE_DIR=$STORE_DIR bash "$CS_ROOT/scripts/object-store.sh" start); then
		export CS_OBJECT_STORE_ENV
	else
		STORE_DIR=""
		unset CS_OBJECT_STORE_ENV
		cs_info "object store: failed to start (above); the TAP files that need it are skipped, or fail under CI=true"
	fi
}

# ---------------------------------------------------------------- pg_regress
if [ "$run_regress" = 1 ]; then
	cs_section "pg_regress (temporary instance, changestream preloaded)"
	t0=$(cs_now)
	R=$WORK/src
	# REGRESS_OPTS (the Makefile) adds test/regress.conf and the archive
	# directory as --temp-config; TAP_TESTS= leaves the TAP tests for later
	cs_as_pg make -C "$WORK/src" -s installcheck PG_CONFIG="$PG_CONFIG" TAP_TESTS= \
		EXTRA_REGRESS_OPTS="--temp-instance=$R/tmp_regress/instance"
	rc=$?
	# expected/changestream_1.out is the same output in PostgreSQL 17+'s
	# wording of GUC range errors (units beside the bounds) and nothing else:
	# check that here, so a change to one file without the other fails on
	# every version, not only on the versions whose file was forgotten
	if ! sed -e 's/\("changestream\.segment_size"\) (64 \.\. 1048576)/\1 (64 kB .. 1048576 kB)/' \
		-e 's/\("changestream\.status_interval"\) (100 \.\. 3600000)/\1 (100 ms .. 3600000 ms)/' \
		"$R/expected/changestream.out" | diff -u - "$R/expected/changestream_1.out"; then
		cs_info "expected/changestream_1.out differs from expected/changestream.out beyond the GUC range wording (diff above)"
		[ $rc -eq 0 ] && rc=3
	fi
	if [ $rc -eq 0 ]; then
		regress_result=passed
	else
		regress_result="FAILED (pg_regress exit $rc)"
		failed=1
		if [ -f "$R/regression.diffs" ]; then
			printf '\n---- %s ----\n' "$R/regression.diffs"
			head -n 400 "$R/regression.diffs"
		fi
		cs_tail "$R/log/postmaster.log" 60
	fi
	cs_info "pg_regress: $regress_result ($(( $(cs_now) - t0 ))s)"
fi

# ---------------------------------------------------------------------- TAP
if [ "$run_tap" = 1 ]; then
	cs_section "TAP tests (prove)"
	t0=$(cs_now)
	if [ ${#tap_tests[@]} -eq 0 ]; then
		# the longest files first (t/schedule), so that the parallel run
		# does not end waiting for one of them; then the others in order
		tap_tests=($(cs_tap_schedule "$WORK/src"))
	fi
	if [ ${#tap_tests[@]} -eq 0 ]; then
		cs_info "no TAP tests found in t/"
		tap_result="none found"
	else
		if cs_tap_need_object_store "$WORK/src" "${tap_tests[@]}"; then
			start_object_store
		fi
		# PGXS's prove_installcheck (REGRESS= leaves pg_regress out); the
		# Makefile exports TESTDATADIR and TESTLOGDIR for PostgreSQL 16+
		cs_as_pg make -C "$WORK/src" -s installcheck PG_CONFIG="$PG_CONFIG" REGRESS= \
			PROVE_TESTS="${tap_tests[*]}" \
			PROVE_FLAGS="--timer -j${CS_TEST_JOBS:-4} ${PROVE_FLAGS:-}" \
			2>&1 | tee "$WORK/prove.out"
		rc=${PIPESTATUS[0]}
		if [ "$rc" -eq 0 ]; then
			tap_result="passed (${#tap_tests[@]} files)"
		else
			tap_result="FAILED (prove exit $rc)"
			failed=1
			# the failing test files, from prove's summary report
			bad=$(sed -n 's|^\(t/[^ ]*\.pl\) *(Wstat.*|\1|p' "$WORK/prove.out" | sort -u)
			[ -n "$bad" ] || bad=$(printf '%s\n' "${tap_tests[@]}")
			logdir=$WORK/src/tmp_check/log
			for t in $bad; do
				name=$(basename "$t" .pl)
				if [ -f "$logdir/regress_log_$name" ]; then
					printf '\n---- failures in %s ----\n' "$logdir/regress_log_$name"
					grep -E -A12 'not ok |Bail out|error running SQL|connection error|timed out|Dubious|died|exited with' \
						"$logdir/regress_log_$name" | head -n 120
				fi
				cs_tail "$logdir/regress_log_$name" 60
				for node_log in "$logdir/${name}_"*.log; do
					[ -f "$node_log" ] || continue
					if grep -q -E 'terminated by signal|PANIC|TRAP:' "$node_log"; then
						printf '\n---- crashes in %s ----\n' "$node_log"
						grep -B3 -A2 -E 'terminated by signal|PANIC|TRAP:' "$node_log" | head -n 60
					fi
					cs_tail "$node_log" 40
				done
			done
		fi
	fi
	stop_object_store
	cs_info "TAP: $tap_result ($(( $(cs_now) - t0 ))s)"
fi

cs_section "summary"
cs_info "pg_regress: $regress_result"
cs_info "TAP:        $tap_result"
cs_info "total time: $(( $(cs_now) - t_start ))s"
if [ $failed -ne 0 ]; then
	cs_info "logs kept in $WORK/src (regression.diffs and log/ for pg_regress, tmp_check/log/ for TAP)"
	exit 1
fi
if [ "${KEEP:-0}" = 1 ]; then
	cs_info "work directory kept: $WORK"
else
	rm -rf "$WORK"
fi
exit 0
