#!/usr/bin/env bash
# bench/run.sh: changestream benchmark harness (issue 4).  NOT part of CI or
# of the test suite: it takes minutes and its figures depend on the machine.
#
#   bash bench/run.sh            # full run (about 20-30 minutes on 2 cores)
#   bash bench/run.sh --quick    # shorter run (about 10 minutes), same table
#   bash bench/run.sh --drain-only  # only the drain and archive size (1, 5)
#   bash bench/run.sh --tps-only    # only the TPS overhead (2), 5 rounds
#
# As root it installs what is missing with apt, builds and installs the
# extension from this checkout, and runs every PostgreSQL program as the
# unprivileged "postgres" user.  It starts its own throwaway cluster (temp
# directory, free port, wal_level=logical, changestream preloaded with
# changestream.directory unset) and measures, in one run and on the same WAL:
#
#   1. drain throughput of a WAL backlog (pgbench transactions written while
#      no consumer runs, held by slots created beforehand; changestream's
#      own slot and generation are opened first, then the worker is stopped
#      and later resumes, as after downtime): (a) changestream,
#      (e) changestream with compression_level 0 (to show what gzip costs),
#      (b) pg_recvlogical -f /dev/null, (c) pg_recvlogical -f FILE (default
#      fsync), (d) pg_logical_slot_peek_binary_changes(); medians of ROUNDS;
#   2. pgbench TPS with no consumer, with pg_recvlogical, with changestream;
#   3. commit-to-durable lag at a steady LAG_RATE tps;
#   4. the archiver's peak RSS during one very large transaction, and idle;
#   5. archive size against raw pgoutput bytes and gzip -6 of them;
#   6. raw segments under a steady saturating load (bench/steady_load.sh,
#      its own cluster, 1MB segments so that the maintenance worker has the most
#      segments to keep up with);
#   7. the read side of issue 11 (bench/read_side.sh, its own cluster):
#      changes(), restore()'s snapshot load and apply against their peers.
#
# It prints a markdown table with every figure, the targets of issue 4
# (PASS/FAIL) and the machine, and writes it to bench/results/latest.md
# (a full run), bench/results/quick.md (--quick) or bench/results/drain.md
# (--drain-only), so that a shorter run never replaces the full report.
# Logs and raw samples of the run go to bench/results/<timestamp>/ (not
# committed).  Other load on the machine skews every figure: the harness
# waits for quiet before each measurement, measures how many CPUs other
# work kept busy during it (shown next to every figure), repeats disturbed
# TPS runs, and reports the CPU seconds each consumer and walsender used.
#
# Options:  --quick  --drain-only (phases 1 and 5 only; with --quick, the
#           quick drain)  --tps-only (phase 2 only, TPS_ROUNDS=5 by default,
#           report in bench/results/tps.md)  --keep (leave the cluster and its directory)
#           --skip-build (use the installed changestream)  --help
#           --profile: instead, profile changestream draining a backlog:
#           perf of the worker and its walsender (and of pg_recvlogical's
#           walsender on the same backlog), strace -c of the worker, and the
#           walsenders' wait events; reports in bench/results/<timestamp>/
# Environment (defaults: full / --quick):
#   ROUNDS=5/3             drain rounds (medians are reported)
#   DRAIN_CLIENTS=4        pgbench clients writing the backlog
#   DRAIN_TXNS=25000/7500  transactions per client (100k / 30k in all)
#   SCALE=10               pgbench scale
#   TPS_SECONDS=60/15      length of each TPS run (8 clients, 2 threads)
#   TPS_PREALLOC_AB=0      1: phase 2 also runs changestream with
#                          changestream.preallocate_segments off
#   TPS_ROUNDS=3/1         TPS runs per configuration (order rotates;
#                          5 with --tps-only)
#   LAG_SECONDS=30/15      LAG_RATE=1000  lag run length and rate
#   BIG_MB=1024/256        size of the large transaction (pgoutput MB)
#   STEADY_SECONDS=120/60  length of the steady load run (6); 0 skips it
#   READ_SIDE=1            0 skips the read side (7); --quick runs it with
#                          TXNS=5000 ROUNDS=1 and keeps its table in the
#                          run's directory only
#   TIMEOUT=1800           seconds any single wait may take
#   QUIET_BUSY=0.3 QUIET_WAIT=600   before each measurement, wait up to
#                          QUIET_WAIT s while other processes keep at least
#                          QUIET_BUSY CPUs busy (QUIET_WAIT=0: do not wait)
#   QUIET_RETRIES=2        repeat a TPS run that other work disturbed (it
#                          kept QUIET_BUSY CPUs busy on average); drain
#                          medians use only the undisturbed rounds if >= 3

set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
# PG_CONFIG, PG_BINDIR, PG_OS_USER, cs_as_pg, cs_install_deps, the
# throwaway cluster (cs_cluster_*) and the other cs_* helpers
# shellcheck source=../scripts/lib.sh
. "$ROOT/scripts/lib.sh"

QUICK=0
DRAIN_ONLY=0
TPS_ONLY=0
PROFILE=0
KEEP=${KEEP:-0}
SKIP_BUILD=${SKIP_BUILD:-0}
for arg in "$@"; do
	case $arg in
		--quick) QUICK=1 ;;
		--drain-only) DRAIN_ONLY=1 ;;
		--tps-only) TPS_ONLY=1 ;;
		--keep) KEEP=1 ;;
		--skip-build) SKIP_BUILD=1 ;;
		--profile) PROFILE=1 ;;
		-h|--help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
		*) echo "unknown option: $arg (try --help)" >&2; exit 2 ;;
	esac
done

[ "$TPS_ONLY" = 1 ] && : "${TPS_ROUNDS:=5}"
if [ "$QUICK" = 1 ]; then
	: "${ROUNDS:=3}" "${DRAIN_TXNS:=7500}" "${TPS_SECONDS:=15}" \
	  "${LAG_SECONDS:=15}" "${BIG_MB:=256}" "${TPS_ROUNDS:=1}" \
	  "${STEADY_SECONDS:=60}"
else
	: "${ROUNDS:=5}" "${DRAIN_TXNS:=25000}" "${TPS_SECONDS:=60}" \
	  "${LAG_SECONDS:=30}" "${BIG_MB:=1024}" "${TPS_ROUNDS:=3}" \
	  "${STEADY_SECONDS:=120}"
fi
: "${READ_SIDE:=1}"
# the maintenance worker's bound on raw sealed segments while it defers (phase 6)
DEFER_MAX_RAW=$(awk '$1 == "#define" && $2 == "DEFER_MAX_RAW" { print $3 }' "$ROOT/src/worker/maintenance.c")
: "${DRAIN_CLIENTS:=4}" "${SCALE:=10}" "${LAG_RATE:=1000}" "${TIMEOUT:=1800}"
: "${QUIET_BUSY:=0.3}" "${QUIET_WAIT:=600}" "${QUIET_RETRIES:=2}"
TPS_CLIENTS=8
PGOUTPUT_OPTS="'proto_version','1','publication_names','changestream','messages','true'"
RECV_OPTS=(-o proto_version=1 -o publication_names=changestream -o messages=true)

# ---------------------------------------------------------------- helpers

now() { date +%s.%N; }
# calc EXPR [DECIMALS]: floating point arithmetic
calc() { awk "BEGIN { printf \"%.${2:-3}f\", ($1) }"; }
# median of the arguments
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) printf "%s", v[(NR + 1) / 2]; else printf "%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Start a program as the PostgreSQL user in the background; its own pid
# (not runuser's) is written to PIDFILE.  bg_pg PIDFILE LOGFILE cmd args...
bg_pg() {
	local pidfile=$1 log=$2
	shift 2
	rm -f "$pidfile"
	# shellcheck disable=SC2016
	cs_as_pg sh -c 'echo $$ > "$0"; exec "$@"' "$pidfile" "$@" >"$log" 2>&1 &
	local i
	for i in $(seq 100); do
		[ -s "$pidfile" ] && return 0
		sleep 0.05
	done
	cs_die "could not start $1"
}

# Wait until the backend or walsender that served a finished client has
# exited and been reaped: the postmaster has no child serving a connection
# (looked up in /proc, not with a query, whose own backend would count).
wait_reaped() {
	local i p pm busy
	pm=$(head -1 "$WORK/data/postmaster.pid")
	for i in $(seq 250); do
		busy=0
		for p in $(pgrep -P "$pm"); do
			case $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) in
				*walsender*|"postgres: postgres postgres"*) busy=1 ;;
			esac
		done
		[ "$busy" = 0 ] && return 0
		sleep 0.02
	done
}

# Stop a process started by bg_pg (by its recorded pid) and wait for it.
stop_pid() {
	local pidfile=$1 sig=${2:-INT} pid i
	[ -s "$pidfile" ] || return 0
	pid=$(cat "$pidfile")
	kill -"$sig" "$pid" 2>/dev/null || true
	for i in $(seq 200); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
	rm -f "$pidfile"
}

CLK_TCK=$(getconf CLK_TCK)
# user + system CPU ticks of a process so far (0 if it is gone)
cpu_ticks() {
	local st
	st=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
	st=${st##*) }
	# shellcheck disable=SC2086
	set -- $st
	echo $(( ${12} + ${13} ))
}
ticks_s() { calc "$1 / $CLK_TCK" 2; }
# context switches of a process so far (0 if it is gone), voluntary (each
# is a sleep it was woken from) or with "non", involuntary (each is a
# preemption: another task took its CPU while it could still run).  The
# walsender's voluntary count is how often it slept (waiting for WAL, or
# for a full socket to drain) and, from the other side, how often it woke
# a consumer asleep on an empty socket shows up in that consumer's count.
ctxt_switches() {
	local k v _ n=0
	while read -r k v _; do
		[ "$k" = "${2:-}voluntary_ctxt_switches:" ] && n=$v
	done 2>/dev/null <"/proc/$1/status"
	echo "$n"
}
vol_switches() { ctxt_switches "$1"; }
invol_switches() { ctxt_switches "$1" non; }
# Follow the walsender that serves slot $1 until it exits: every 10 ms its
# voluntary context switches, CPU ticks and involuntary context switches so
# far are written to $2 as "switches ticks preemptions".  The loop reads
# /proc with bash builtins and sleeps in read -t on a FIFO, so that it does
# not fork while the drain runs.
ws_follow() {
	local slot=$1 out=$2 pid="" i k v sw iv st fd
	echo "0 0 0" >"$out"
	for i in $(seq 1000); do
		pid=$(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '$slot'")
		[ -n "$pid" ] && break
		sleep 0.01
	done
	[ -n "$pid" ] || return 0
	rm -f "$out.fifo"
	mkfifo "$out.fifo"
	exec {fd}<>"$out.fifo"
	while :; do
		sw="" iv=0
		while read -r k v _; do
			[ "$k" = voluntary_ctxt_switches: ] && sw=$v
			[ "$k" = nonvoluntary_ctxt_switches: ] && iv=$v
		done 2>/dev/null <"/proc/$pid/status"
		[ -n "$sw" ] || break
		read -r st 2>/dev/null <"/proc/$pid/stat" || break
		st=${st##*) }
		# shellcheck disable=SC2086
		set -- $st
		echo "$sw $(( ${12} + ${13} )) $iv" >"$out"
		read -r -t 0.01 -u "$fd" _ || true
	done
	exec {fd}>&-
	rm -f "$out.fifo"
}
# CPU ticks of the postmaster's reaped children (exited backends and
# walsenders): the delta over a drain is the CPU of the walsender or backend
# that served it and exited
reaped_ticks() {
	local st
	st=$(cat "/proc/$(head -1 "$WORK/data/postmaster.pid")/stat")
	st=${st##*) }
	# shellcheck disable=SC2086
	set -- $st
	echo $(( ${14} + ${15} ))
}
# CPUs kept busy by other work: sampled over 1 s while the bench is idle
other_busy() {
	local a b
	a=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat)
	sleep 1
	b=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat)
	calc "(${b% *} - ${a% *}) / (${b#* } - ${a#* }) * $(nproc)" 2
}
# How much other work ran during a measurement: CPU time of the whole
# machine minus that of the cluster (postmaster and its children, reaped
# ones included), of this script's children (pgbench, psql, ...) and of the
# background programs it started; as an average number of CPUs.  Kernel
# threads doing this workload's I/O count as "other", so expect ~0.05.
# cpu_mark, then other_cpus sets OTHER_CPUS (never call it in $(...)).
sys_busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
mine_ticks() {
	local total=0 p st pm
	pm=$(head -1 "$WORK/data/postmaster.pid")
	for p in $pm $(pgrep -P "$pm") $(cat "$WORK"/*.pid 2>/dev/null); do
		st=$(cat "/proc/$p/stat" 2>/dev/null) || continue
		st=${st##*) }
		# shellcheck disable=SC2086
		set -- $st
		total=$(( total + ${12} + ${13} + ${14} + ${15} ))
	done
	times >"$WORK/times.txt"
	total=$(( total + $(awk -v hz="$CLK_TCK" '{ for (i = 1; i <= NF; i++) { split($i, a, /[ms]/); t += (a[1] * 60 + a[2]) * hz } } END { printf "%d", t }' "$WORK/times.txt") ))
	echo "$total"
}
cpu_mark() {
	MARK_T=$(now)
	MARK_SYS=$(sys_busy_ticks)
	mine_ticks >"$WORK/mine.txt"
	MARK_MINE=$(cat "$WORK/mine.txt")
}
other_cpus() {
	local t sys mine
	t=$(now)
	sys=$(sys_busy_ticks)
	mine_ticks >"$WORK/mine.txt"
	mine=$(cat "$WORK/mine.txt")
	OTHER_CPUS=$(calc "(($sys - $MARK_SYS) - ($mine - $MARK_MINE)) / $CLK_TCK / ($t - $MARK_T)" 2)
	case $OTHER_CPUS in -*) OTHER_CPUS=0.00 ;; esac
}
# is_quiet X: X < QUIET_BUSY
is_quiet() { [ "$(awk "BEGIN { print ($1 < $QUIET_BUSY) ? 1 : 0 }")" = 1 ]; }

# Before each measurement: wait (up to QUIET_WAIT s) until other work keeps
# fewer than QUIET_BUSY CPUs busy, and record how busy they were.
LOADS=()
note_load() {
	local busy t0 waited=""
	t0=$(date +%s)
	busy=$(other_busy)
	while [ "$(awk "BEGIN { print ($busy >= $QUIET_BUSY) ? 1 : 0 }")" = 1 ] &&
	      [ $(( $(date +%s) - t0 )) -lt "$QUIET_WAIT" ]; do
		[ -n "$waited" ] || cs_info "  other work keeps $busy CPUs busy: waiting up to ${QUIET_WAIT}s for it to drop below $QUIET_BUSY"
		waited=1
		sleep 4
		busy=$(other_busy)
	done
	[ -z "$waited" ] || cs_info "  waited $(( $(date +%s) - t0 ))s; other work now keeps $busy CPUs busy"
	LOADS+=("$1: $busy")
}

psqlc() {
	cs_cluster_psql "$WORK" "$PORT" -q -v ON_ERROR_STOP=1 "$@"
}
# one value (unaligned, tuples only)
q() { psqlc -At -c "$1"; }

# ------------------------------------------------------- deps and build

# lib.sh's package list plus what only the bench uses (pg_walinspect,
# ps/pgrep, taskset, /usr/bin/time)
install_deps() {
	CS_PACKAGES="$CS_PACKAGES postgresql-contrib gzip procps util-linux time" cs_install_deps
}

# ------------------------------------------------------- cluster

T_START=$(now)
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RESULTS=$BENCH_DIR/results
RUN_DIR=$RESULTS/$STAMP
mkdir -p "$RUN_DIR"
WORK=""
STARTED=0
OK=0

# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
	local rc=$?
	set +e
	for f in "$WORK"/*.pid; do
		[ -e "$f" ] && stop_pid "$f" TERM
	done
	if [ -n "$WORK" ] && [ -f "$WORK/postgres.log" ]; then
		cp "$WORK/postgres.log" "$RUN_DIR/postgres.log" 2>/dev/null
		if [ "$OK" != 1 ]; then
			printf '\n---- last 40 lines of the server log ----\n'
			tail -n 40 "$WORK/postgres.log"
		fi
	fi
	if [ "$KEEP" = 1 ] && [ -n "$WORK" ]; then
		cs_info "kept: cluster $WORK/data (port $PORT, socket directory $WORK)"
		cs_info "stop: runuser -u $PG_OS_USER -- $PG_BINDIR/pg_ctl -D $WORK/data stop; rm -rf $WORK"
	elif [ -n "$WORK" ]; then
		if [ "$STARTED" = 1 ]; then
			cs_cluster_stop "$WORK" immediate
		fi
		rm -rf "$WORK"
	fi
	if [ "$rc" != 0 ]; then cs_info "bench: FAILED (exit $rc); logs in $RUN_DIR"; elif [ "$OK" != 1 ]; then cs_info "bench: incomplete; logs in $RUN_DIR"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

setup_cluster() {
	WORK=$(cs_mkwork changestream-bench)
	PORT=$(cs_free_port 54400)
	cs_cluster_init "$WORK" "$PORT" <<EOF || cs_die "initdb failed"
max_replication_slots = 16
max_wal_senders = 16
shared_buffers = 512MB
max_wal_size = 16GB
min_wal_size = 2GB
checkpoint_timeout = 1h
autovacuum = off                # the harness vacuums between measurements
log_line_prefix = '%m [%p] '
log_checkpoints = on
changestream.directory = ''     # set by the harness for each measurement
EOF
	cs_cluster_start "$WORK" "$WORK/postgres.log"
	STARTED=1
	# changestream's measurements use its default compression level
	CS_LEVEL=$(q "SELECT boot_val FROM pg_settings WHERE name = 'changestream.compression_level'")
	[ -n "$CS_LEVEL" ] || cs_die "changestream.compression_level is not defined (is changestream preloaded?)"
	LIB_NOTE=""
	if [ -f "$ROOT/changestream.so" ] && ! cmp -s "$ROOT/changestream.so" "$("$PG_CONFIG" --pkglibdir)/changestream.so"; then
		LIB_NOTE=" WARNING: the installed changestream.so differs from this checkout's build (installed by something else?)."
		cs_info "$LIB_NOTE"
	fi
	cs_info "PostgreSQL $(q 'SHOW server_version') in $WORK/data, port $PORT"
	cs_info "pgbench -i -s $SCALE"
	cs_as_pg "$PG_BINDIR/pgbench" -h "$WORK" -p "$PORT" -i -s "$SCALE" -q postgres >"$RUN_DIR/pgbench-init.log" 2>&1 ||
		{ cat "$RUN_DIR/pgbench-init.log"; cs_die "pgbench -i failed"; }
	psqlc <<'EOF'
CREATE TABLE bench_big (id int PRIMARY KEY, payload text);
CREATE PUBLICATION changestream
    FOR TABLE pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history, bench_big;
CREATE EXTENSION changestream;
CREATE EXTENSION pg_walinspect;
CREATE SCHEMA bench;

-- Wait until changestream, streaming, reports target durable: "s1 s2",
-- the seconds until its state was 'streaming' and until target was durable.
CREATE FUNCTION bench.wait_flushed(target pg_lsn, timeout_s float8)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    t_streaming float8;
    st record;
BEGIN
    LOOP
        SELECT * INTO st FROM changestream.status();
        IF t_streaming IS NULL AND st.state = 'streaming' THEN
            t_streaming := extract(epoch FROM clock_timestamp() - t0);
        END IF;
        -- only a streaming session's position counts: after a stop and
        -- reload, status() still shows the previous session's until then
        IF st.state = 'streaming' AND st.flushed_lsn >= target THEN
            RETURN round(coalesce(t_streaming, 0)::numeric, 3) || ' ' ||
                   round(extract(epoch FROM clock_timestamp() - t0), 3);
        END IF;
        IF clock_timestamp() - t0 > timeout_s * interval '1 second' THEN
            RAISE EXCEPTION 'changestream did not reach % within % s: state %, flushed_lsn %, last error %',
                target, timeout_s, st.state, st.flushed_lsn, st.last_error;
        END IF;
        PERFORM pg_sleep(0.005);
    END LOOP;
END $$;

-- End LSN of the last COMMIT record written since from_lsn (exact, unlike
-- pg_current_wal_lsn(), which other WAL may have moved past it).
CREATE FUNCTION bench.last_commit_end(from_lsn pg_lsn) RETURNS pg_lsn
LANGUAGE sql AS $$
    SELECT max(end_lsn) FROM pg_get_wal_records_info(from_lsn, pg_current_wal_flush_lsn())
     WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT'
$$;

EOF
	wait_state disabled 60
}

# ------------------------------------------------------- changestream control

cs_state() { q "SELECT state FROM changestream.status()"; }

wait_state() {
	local want=$1 timeout=${2:-60} t0 s
	t0=$(date +%s)
	while :; do
		s=$(cs_state)
		[ "$s" = "$want" ] && return 0
		if [ $(( $(date +%s) - t0 )) -ge "$timeout" ]; then
			cs_die "changestream state is '$s', not '$want', after ${timeout}s (last error: $(q "SELECT last_error FROM changestream.status()"))"
		fi
		sleep 0.05
	done
}

cs_set_directory() {
	psqlc >/dev/null <<EOF
ALTER SYSTEM SET changestream.directory = '$1';
SELECT pg_reload_conf();
EOF
}

# Stop archiving, drop the changestream slot, remove the archive.
cs_stop() {
	cs_set_directory ''
	wait_state disabled 120
	drop_slot changestream
	[ -n "${ARCHIVE:-}" ] && rm -rf "$ARCHIVE"
	ARCHIVE=""
}

# A new, empty archive directory (not yet configured).
new_archive() {
	ARCHIVE=$WORK/archive-$1
	rm -rf "$ARCHIVE"
	cs_as_pg mkdir -p "$ARCHIVE"
}

create_slot() {
	q "SELECT lsn FROM pg_create_logical_replication_slot('$1', 'pgoutput')" >/dev/null
}

drop_slot() {
	local i
	for i in $(seq 200); do
		if [ "$(q "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$1'")" = 0 ]; then
			return 0
		fi
		if q "SELECT pg_drop_replication_slot('$1')" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.1
	done
	cs_die "could not drop replication slot $1"
}

# The end LSN of a transactional marker written now: every transaction
# committed before it ends at or before that LSN.
mark_end() {
	psqlc -At <<'EOF'
SELECT pg_current_wal_insert_lsn() AS from_lsn \gset
SELECT pg_logical_emit_message(true, 'bench', 'end') \g /dev/null
SELECT bench.last_commit_end(:'from_lsn');
EOF
}

vacuum_checkpoint() {
	psqlc -c "VACUUM" -c "CHECKPOINT"
}

# ------------------------------------------------------- machine

machine_info() {
	local dev fstype size dsync
	CPU_MODEL=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
	NPROC=$(nproc)
	KERNEL=$(uname -r)
	MEM_GB=$(awk '/MemTotal/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)
	read -r dev fstype size < <(df -PT "$WORK" | awk 'NR == 2 { print $1, $2, $3 }')
	DISK="$dev ($fstype, $(calc "$size / 1048576" 0) GB)"
	local base
	base=$(basename "$dev")
	if [ -r "/sys/block/$base/queue/rotational" ]; then
		if [ "$(cat "/sys/block/$base/queue/rotational")" = 0 ]; then DISK="$DISK, non-rotational"; else DISK="$DISK, rotational"; fi
	fi
	# fdatasync latency: 500 synchronous 8 kB writes
	dsync=$( { TIMEFORMAT=%R; time dd if=/dev/zero of="$WORK/dsync.test" bs=8k count=500 oflag=dsync 2>/dev/null; } 2>&1 )
	rm -f "$WORK/dsync.test"
	FSYNC_MS=$(calc "$dsync * 1000 / 500" 2)
	PG_VERSION=$(q "SHOW server_version")
	GIT_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
	if [ -n "$(git -C "$ROOT" status --porcelain -- src 2>/dev/null)" ]; then GIT_REV="$GIT_REV (src/ modified)"; fi
}

# ======================================================= 1. drain + 5. compression

declare -a D_TIME_A D_TIME_B D_TIME_C D_TIME_D D_MBS_A D_MBS_B D_MBS_C D_MBS_D D_COMPRESSED_A
PAYLOAD_BYTES=()

# Point the worker at an archive directory, slot and compression level
# (one reload).  cs_config DIR [SLOT [LEVEL]]
cs_config() {
	psqlc >/dev/null <<EOF
ALTER SYSTEM SET changestream.slot_name = '${2:-changestream}';
ALTER SYSTEM SET changestream.compression_level = ${3:-$CS_LEVEL};
ALTER SYSTEM SET changestream.directory = '$1';
SELECT pg_reload_conf();
EOF
}

# Open changestream's slot and generation (with its snapshot) in DIR, then
# stop the worker: it resumes there later, as after downtime.
cs_open_generation() {
	cs_config "$1" "$2" "$3"
	wait_state streaming "$TIMEOUT"
	cs_set_directory ''
	wait_state disabled 120
}

# (a) changestream, or (e) the same with compression_level 0
drain_changestream() {
	local r=$1 end=$2 which=${3:-A} t0 t1 b0 m0 b1 m1 out wpid c0 c1 c2 wspid dir slot level v0
	local -n d_time=D_TIME_$which d_other=D_OTHER_$which d_ws=D_WS_CPU_$which d_start=D_START_$which \
		d_compressed=D_COMPRESSED_$which d_cpu=D_CPU_$which d_cpu2=D_CPU2_$which \
		d_wake=D_WAKE_$which d_wwake=D_WWAKE_$which d_iwake=D_IWAKE_$which
	if [ "$which" = A ]; then
		dir=$ARCHIVE slot=changestream level=$CS_LEVEL
	else
		dir=$ARCHIVE0 slot=changestream_l0 level=0
	fi
	b0=$(q "SELECT bytes FROM changestream.status()")
	m0=$(q "SELECT messages FROM changestream.status()")
	wpid=$(q "SELECT pid FROM changestream.status()")
	c0=$(cpu_ticks "$wpid")
	v0=$(vol_switches "$wpid")
	cpu_mark
	t0=$(now)
	out=$(psqlc -At <<EOF
ALTER SYSTEM SET changestream.slot_name = '$slot';
ALTER SYSTEM SET changestream.compression_level = $level;
ALTER SYSTEM SET changestream.directory = '$dir';
SELECT pg_reload_conf() \g /dev/null
SELECT bench.wait_flushed('$end', $TIMEOUT);
EOF
)
	t1=$(now)
	other_cpus
	d_other[r]=$OTHER_CPUS
	c1=$(cpu_ticks "$wpid")
	d_wwake[r]=$(( $(vol_switches "$wpid") - v0 ))
	wspid=$(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '$slot'")
	d_ws[r]=$(ticks_s "$(cpu_ticks "$wspid")")
	d_wake[r]=$(vol_switches "$wspid")
	d_iwake[r]=$(invol_switches "$wspid")
	d_time[r]=$(calc "$t1 - $t0")
	d_start[r]=${out% *}
	# the time until every sealed segment is compressed too
	psqlc -At >/dev/null <<EOF
DO \$\$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
    WHILE EXISTS (SELECT 1 FROM changestream.status() s, changestream.wal_segments(s.generation) w
                   WHERE w.segment_index < s.segment_index AND NOT w.compressed) LOOP
        IF clock_timestamp() - t0 > $TIMEOUT * interval '1 second' THEN
            RAISE EXCEPTION 'sealed segments still not compressed';
        END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
END \$\$;
EOF
	d_compressed[r]=$(calc "$(now) - $t0")
	c2=$(cpu_ticks "$wpid")
	d_cpu[r]=$(ticks_s "$((c1 - c0))")
	d_cpu2[r]=$(ticks_s "$((c2 - c0))")
	b1=$(q "SELECT bytes FROM changestream.status()")
	m1=$(q "SELECT messages FROM changestream.status()")
	if [ "$which" = A ]; then
		CS_BYTES[r]=$((b1 - b0))
		CS_MESSAGES[r]=$((m1 - m0))
		cs_info "  (a) changestream:            ${d_time[r]} s  (streaming after ${d_start[r]} s; all sealed segments compressed after ${d_compressed[r]} s; worker CPU ${d_cpu[r]} s, ${d_cpu2[r]} s with compression, ${d_wwake[r]} wakeups; its walsender ${d_ws[r]} s, ${d_wake[r]} wakeups, ${d_iwake[r]} preemptions; ${CS_BYTES[r]} bytes, ${CS_MESSAGES[r]} messages; other work ${d_other[r]} CPUs)"
	else
		cs_info "  (e) changestream, level 0:   ${d_time[r]} s  (streaming after ${d_start[r]} s; worker CPU ${d_cpu[r]} s, ${d_wwake[r]} wakeups; its walsender ${d_ws[r]} s, ${d_wake[r]} wakeups, ${d_iwake[r]} preemptions; $((b1 - b0)) bytes; other work ${d_other[r]} CPUs)"
	fi
	# stop the worker so that it does not run during the other drains
	cs_set_directory ''
	wait_state disabled 120
}

drain_recvlogical_null() {
	local r=$1 end=$2 t0 t1 cpu_u cpu_s w0 follow
	w0=$(reaped_ticks)
	ws_follow bench_null "$WORK/follow-null.txt" &
	follow=$!
	cpu_mark
	t0=$(now)
	cs_as_pg /usr/bin/time -o "$WORK/time.txt" -f '%U %S %w' "$PG_BINDIR/pg_recvlogical" -h "$WORK" -p "$PORT" -d postgres -S bench_null --start --no-loop \
		"${RECV_OPTS[@]}" --endpos="$end" -v -F 0 -f /dev/null >"$RUN_DIR/recvlogical-null-$r.log" 2>&1 ||
		{ cat "$RUN_DIR/recvlogical-null-$r.log"; cs_die "pg_recvlogical -f /dev/null failed"; }
	t1=$(now)
	# user and system CPU, voluntary context switches (of pg_recvlogical
	# and of runuser, which only waits for it)
	read -r cpu_u cpu_s "D_CWAKE_B[r]" < <(tail -n 1 "$WORK/time.txt")
	wait "$follow" || true
	other_cpus
	D_OTHER_B[r]=$OTHER_CPUS
	wait_reaped
	read -r "D_WAKE_B[r]" _ "D_IWAKE_B[r]" <"$WORK/follow-null.txt"
	D_WS_CPU_B[r]=$(ticks_s "$(( $(reaped_ticks) - w0 ))")
	D_TIME_B[r]=$(calc "$t1 - $t0")
	D_CPU_B[r]=$(calc "$cpu_u + $cpu_s" 2)
	cs_info "  (b) pg_recvlogical /dev/null: ${D_TIME_B[r]} s  (CPU ${D_CPU_B[r]} s; ${D_CWAKE_B[r]} wakeups; its walsender ${D_WS_CPU_B[r]} s, ${D_WAKE_B[r]} wakeups, ${D_IWAKE_B[r]} preemptions; other work ${D_OTHER_B[r]} CPUs)"
}

drain_recvlogical_file() {
	local r=$1 end=$2 t0 t1 cpu_u cpu_s w0 follow
	rm -f "$WORK/recv.out"
	w0=$(reaped_ticks)
	ws_follow bench_file "$WORK/follow-file.txt" &
	follow=$!
	cpu_mark
	t0=$(now)
	cs_as_pg /usr/bin/time -o "$WORK/time.txt" -f '%U %S %w' "$PG_BINDIR/pg_recvlogical" -h "$WORK" -p "$PORT" -d postgres -S bench_file --start --no-loop \
		"${RECV_OPTS[@]}" --endpos="$end" -v -f "$WORK/recv.out" >"$RUN_DIR/recvlogical-file-$r.log" 2>&1 ||
		{ cat "$RUN_DIR/recvlogical-file-$r.log"; cs_die "pg_recvlogical -f FILE failed"; }
	t1=$(now)
	# user and system CPU, voluntary context switches (of pg_recvlogical
	# and of runuser, which only waits for it)
	read -r cpu_u cpu_s "D_CWAKE_C[r]" < <(tail -n 1 "$WORK/time.txt")
	wait "$follow" || true
	other_cpus
	D_OTHER_C[r]=$OTHER_CPUS
	wait_reaped
	read -r "D_WAKE_C[r]" _ "D_IWAKE_C[r]" <"$WORK/follow-file.txt"
	D_WS_CPU_C[r]=$(ticks_s "$(( $(reaped_ticks) - w0 ))")
	D_TIME_C[r]=$(calc "$t1 - $t0")
	D_CPU_C[r]=$(calc "$cpu_u + $cpu_s" 2)
	RECV_FILE_BYTES[r]=$(stat -c %s "$WORK/recv.out")
	cs_info "  (c) pg_recvlogical -f FILE:   ${D_TIME_C[r]} s  (CPU ${D_CPU_C[r]} s; ${D_CWAKE_C[r]} wakeups; its walsender ${D_WS_CPU_C[r]} s, ${D_WAKE_C[r]} wakeups, ${D_IWAKE_C[r]} preemptions; ${RECV_FILE_BYTES[r]} bytes written; other work ${D_OTHER_C[r]} CPUs)"
}

drain_peek() {
	local r=$1 end=$2 t0 t1 out w0
	w0=$(reaped_ticks)
	cpu_mark
	t0=$(now)
	# the third figure: logical messages ('M'), such as the harness's own
	# end marker, which changestream leaves out (message_prefixes empty)
	out=$(q "SELECT count(*) || ' ' || sum(length(data)) || ' ' || coalesce(sum(length(data)) FILTER (WHERE get_byte(data, 0) = 77), 0) FROM pg_logical_slot_peek_binary_changes('bench_peek', '$end', NULL, $PGOUTPUT_OPTS)")
	t1=$(now)
	other_cpus
	D_OTHER_D[r]=$OTHER_CPUS
	wait_reaped
	D_WS_CPU_D[r]=$(ticks_s "$(( $(reaped_ticks) - w0 ))")
	D_TIME_D[r]=$(calc "$t1 - $t0")
	read -r PEEK_MESSAGES[r] PAYLOAD_BYTES[r] PEEK_M_BYTES[r] <<<"$out"
	cs_info "  (d) peek_binary_changes:     ${D_TIME_D[r]} s  (its backend ${D_WS_CPU_D[r]} s; ${PAYLOAD_BYTES[r]} bytes, ${PEEK_MESSAGES[r]} messages; other work ${D_OTHER_D[r]} CPUs)"
}

# Compression (round 1): seal the active segment, wait for every sealed
# segment to be compressed, and compare with gzip -6 of the same bytes.
measure_compression() {
	local end=$1 seg0
	seg0=$(q "SELECT segment_index FROM changestream.status()")
	psqlc >/dev/null <<'EOF'
ALTER SYSTEM SET changestream.segment_timeout = '1s';
SELECT pg_reload_conf();
EOF
	local t0
	t0=$(date +%s)
	while :; do
		if [ "$(q "SELECT s.segment_index > $seg0 AND NOT EXISTS (
		            SELECT 1 FROM changestream.wal_segments(s.generation) w
		             WHERE w.segment_index < s.segment_index AND NOT w.compressed)
		           FROM changestream.status() s")" = t ]; then
			break
		fi
		[ $(( $(date +%s) - t0 )) -lt 120 ] || cs_die "the active segment was not sealed and compressed within 120 s"
		sleep 0.2
	done
	psqlc >/dev/null <<'EOF'
ALTER SYSTEM RESET changestream.segment_timeout;
SELECT pg_reload_conf();
EOF
	# The sealed segments hold the whole drain; the new active segment holds
	# at most a position record, and its file is preallocated (segment_size
	# of zeros, changestream.preallocate_segments): not archive data.
	local sealed="FROM changestream.status() s, changestream.wal_segments(s.generation) w WHERE w.segment_index < s.segment_index"
	ARCHIVE_BYTES=$(q "SELECT sum(w.size_bytes) $sealed")
	ARCHIVE_SEGMENTS=$(q "SELECT count(*) $sealed")
	[ "$(q "SELECT bool_and(w.compressed) $sealed")" = t ] || cs_die "a sealed segment is not compressed"
	# the archive's bytes before compression (framing included)
	# shellcheck disable=SC2016
	ARCHIVE_RAW_BYTES=$(cs_as_pg sh -c 'cd "$1" && cat generations/*/wal/*.gz | zcat | wc -c' sh "$ARCHIVE")
	# the exact pgoutput bytes of the same WAL, from the peek slot
	q "COPY (SELECT data FROM pg_logical_slot_peek_binary_changes('bench_peek', '$end', NULL, $PGOUTPUT_OPTS)) TO STDOUT" |
		perl -ne 'chomp; s/^\\\\x//; print pack("H*", $_)' >"$WORK/payload.bin"
	RAW_PAYLOAD_FILE_BYTES=$(stat -c %s "$WORK/payload.bin")
	GZIP_PAYLOAD_BYTES=$(gzip -6 -c "$WORK/payload.bin" | wc -c)
	GZIP_RECV_BYTES=$(gzip -6 -c "$WORK/recv.out" | wc -c)
	# what the archive's entry headers cost after compression
	perl "$BENCH_DIR/entry_overhead.pl" "$ARCHIVE"/generations/*/wal/*.gz >"$RUN_DIR/entry_overhead.txt"
	sed 's/^/               /' "$RUN_DIR/entry_overhead.txt"
	rm -f "$WORK/payload.bin"
	cs_info "  compression: archive $ARCHIVE_BYTES bytes in $ARCHIVE_SEGMENTS segments ($ARCHIVE_RAW_BYTES before compression);"
	cs_info "               pgoutput $RAW_PAYLOAD_FILE_BYTES bytes, gzip -6 $GZIP_PAYLOAD_BYTES; pg_recvlogical file gzip -6 $GZIP_RECV_BYTES"
}

drain_phase() {
	cs_section "1. drain throughput ($ROUNDS rounds of $((DRAIN_CLIENTS * DRAIN_TXNS)) pgbench transactions)"
	local r end order c
	# (some are only used through namerefs, in drain_changestream)
	# shellcheck disable=SC2034
	declare -g -a CS_BYTES CS_MESSAGES RECV_FILE_BYTES PEEK_MESSAGES PEEK_M_BYTES D_START_A D_CPU_A D_CPU2_A D_WS_CPU_A D_CPU_B D_CPU_C \
		D_WS_CPU_B D_WS_CPU_C D_WS_CPU_D \
		D_OTHER_A D_OTHER_B D_OTHER_C D_OTHER_D \
		D_TIME_E D_OTHER_E D_WS_CPU_E D_START_E D_COMPRESSED_E D_CPU_E D_CPU2_E D_MBS_E \
		D_WAKE_A D_WAKE_B D_WAKE_C D_WAKE_E D_IWAKE_A D_IWAKE_B D_IWAKE_C D_IWAKE_E D_WWAKE_A D_WWAKE_E D_CWAKE_B D_CWAKE_C
	for r in $(seq 1 "$ROUNDS"); do
		vacuum_checkpoint
		note_load "drain round $r"
		cs_info "round $r: opening changestream's slots and generations (snapshots), then stopping it"
		new_archive "drain$r"
		ARCHIVE0=$WORK/archive-drain$r-level0
		rm -rf "$ARCHIVE0"
		cs_as_pg mkdir -p "$ARCHIVE0"
		cs_open_generation "$ARCHIVE" changestream 6
		cs_open_generation "$ARCHIVE0" changestream_l0 0
		for s in bench_null bench_file bench_peek; do create_slot "$s"; done
		cs_info "  writing the backlog (no consumer running)"
		cs_as_pg "$PG_BINDIR/pgbench" -h "$WORK" -p "$PORT" -c "$DRAIN_CLIENTS" -j 2 -t "$DRAIN_TXNS" \
			--no-vacuum postgres >"$RUN_DIR/drain-pgbench-$r.log" 2>&1 ||
			{ cat "$RUN_DIR/drain-pgbench-$r.log"; cs_die "pgbench failed"; }
		end=$(mark_end)
		q "CHECKPOINT" >/dev/null
		cs_info "  backlog: $(q "SELECT pg_size_pretty(pg_wal_lsn_diff('$end', restart_lsn)) FROM pg_replication_slots WHERE slot_name = 'bench_peek'") of WAL, end LSN $end"
		# rotate the order so that no consumer always goes first
		case $(( (r - 1) % 5 )) in
			0) order="a b c d e" ;; 1) order="b c d e a" ;; 2) order="c d e a b" ;;
			3) order="d e a b c" ;; 4) order="e a b c d" ;;
		esac
		for c in $order; do
			case $c in
				a) drain_changestream "$r" "$end" A ;;
				e) drain_changestream "$r" "$end" E ;;
				b) drain_recvlogical_null "$r" "$end" ;;
				c) drain_recvlogical_file "$r" "$end" ;;
				d) drain_peek "$r" "$end" ;;
			esac
		done
		if [ "$r" = 1 ]; then
			# archive size, with the worker archiving this round's WAL again
			cs_config "$ARCHIVE" changestream 6
			wait_state streaming 120
			measure_compression "$end"
			cs_set_directory ''
			wait_state disabled 120
		fi
		D_MBS_A[r]=$(calc "${PAYLOAD_BYTES[r]} / 1e6 / ${D_TIME_A[r]}" 2)
		D_MBS_B[r]=$(calc "${PAYLOAD_BYTES[r]} / 1e6 / ${D_TIME_B[r]}" 2)
		D_MBS_C[r]=$(calc "${PAYLOAD_BYTES[r]} / 1e6 / ${D_TIME_C[r]}" 2)
		D_MBS_D[r]=$(calc "${PAYLOAD_BYTES[r]} / 1e6 / ${D_TIME_D[r]}" 2)
		D_MBS_E[r]=$(calc "${PAYLOAD_BYTES[r]} / 1e6 / ${D_TIME_E[r]}" 2)
		[ "${CS_BYTES[r]}" = "$(( PAYLOAD_BYTES[r] - PEEK_M_BYTES[r] ))" ] ||
			cs_info "  WARNING: changestream received ${CS_BYTES[r]} pgoutput bytes, peek decoded ${PAYLOAD_BYTES[r]} (${PEEK_M_BYTES[r]} of them logical messages, which changestream does not archive by default)"
		[ "${RECV_FILE_BYTES[r]}" = "$(( PAYLOAD_BYTES[r] + PEEK_MESSAGES[r] ))" ] ||
			cs_info "  WARNING: pg_recvlogical wrote ${RECV_FILE_BYTES[r]} bytes, expected $(( PAYLOAD_BYTES[r] + PEEK_MESSAGES[r] )) (payload + one newline per message)"
		cs_info "  MB/s: (a) ${D_MBS_A[r]}  (b) ${D_MBS_B[r]}  (c) ${D_MBS_C[r]}  (d) ${D_MBS_D[r]}  (e) ${D_MBS_E[r]}"
		rm -f "$WORK/recv.out"
		for s in changestream changestream_l0 bench_null bench_file bench_peek; do drop_slot "$s"; done
		rm -rf "$ARCHIVE" "$ARCHIVE0"
		ARCHIVE=""
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "${PAYLOAD_BYTES[r]}" "${D_TIME_A[r]}" "${D_TIME_B[r]}" \
			"${D_TIME_C[r]}" "${D_TIME_D[r]}" "${D_COMPRESSED_A[r]}" "${CS_BYTES[r]}" "${D_CPU_A[r]}" "${D_CPU2_A[r]}" \
			"${D_CPU_B[r]}" "${D_CPU_C[r]}" "${D_OTHER_A[r]}" "${D_OTHER_B[r]}" "${D_OTHER_C[r]}" "${D_OTHER_D[r]}" \
			"${D_TIME_E[r]}" "${D_CPU_E[r]}" "${D_OTHER_E[r]}" >>"$RUN_DIR/drain.tsv"
	done
	# the other measurements use the defaults
	psqlc >/dev/null <<'EOF'
ALTER SYSTEM RESET changestream.slot_name;
ALTER SYSTEM RESET changestream.compression_level;
SELECT pg_reload_conf();
EOF
}

# ======================================================= 2. TPS overhead

declare -A TPS_RUNS BEHIND_MB TPS_CPU TPS_OTHER TPS_KCPU

tps_run() {
	local mode=$1 i=$2 tps end behind="" pids="" p c0=0 c1=0 cpu="" comp="" k0=0 kcpu=""
	vacuum_checkpoint
	case $mode in
		none) ;;
		recvlogical)
			create_slot bench_tps
			bg_pg "$WORK/recv-tps.pid" "$RUN_DIR/recvlogical-tps.log" "$PG_BINDIR/pg_recvlogical" -h "$WORK" -p "$PORT" \
				-d postgres -S bench_tps --start --no-loop "${RECV_OPTS[@]}" -F 0 -f /dev/null
			local t0
			t0=$(date +%s)
			until [ "$(q "SELECT active FROM pg_replication_slots WHERE slot_name = 'bench_tps'")" = t ]; do
				[ $(( $(date +%s) - t0 )) -lt 60 ] || cs_die "pg_recvlogical did not start"
				sleep 0.05
			done
			pids="$(cat "$WORK/recv-tps.pid") $(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'bench_tps'")"
			;;
		changestream | cs_noprealloc)
			new_archive "tps-$i"
			[ "$mode" = changestream ] ||
				q "ALTER SYSTEM SET changestream.preallocate_segments = off" >/dev/null
			cs_set_directory "$ARCHIVE"
			wait_state streaming "$TIMEOUT"
			pids="$(q "SELECT pid FROM changestream.status()") $(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'changestream'")"
			comp=$(q "SELECT compressor_pid FROM changestream.status()")
			[ -n "$comp" ] || cs_die "no changestream compressor process (status().compressor_pid is NULL)"
			;;
	esac
	note_load "tps $mode $i"
	for p in $pids $comp; do c0=$((c0 + $(cpu_ticks "$p"))); done
	[ -z "$comp" ] || k0=$(cpu_ticks "$comp")
	cpu_mark
	cs_as_pg "$PG_BINDIR/pgbench" -h "$WORK" -p "$PORT" -c "$TPS_CLIENTS" -j 2 -T "$TPS_SECONDS" --no-vacuum postgres \
		>"$RUN_DIR/tps-$mode-$i.log" 2>&1 || { cat "$RUN_DIR/tps-$mode-$i.log"; cs_die "pgbench failed"; }
	other_cpus
	tps=$(sed -n 's/^tps = \([0-9]*\.[0-9]\).* (without initial connection time)/\1/p' "$RUN_DIR/tps-$mode-$i.log")
	[ -n "$tps" ] || cs_die "no tps in $RUN_DIR/tps-$mode-$i.log"
	if [ -n "$pids" ]; then
		# the maintenance worker's CPU is the gzip of what this run sealed
		for p in $pids $comp; do c1=$((c1 + $(cpu_ticks "$p"))); done
		cpu=$(ticks_s "$((c1 - c0))")
		[ -z "$comp" ] || kcpu=$(ticks_s "$(($(cpu_ticks "$comp") - k0))")
	fi
	end=$(mark_end)
	case $mode in
		recvlogical)
			behind=$(q "SELECT round(pg_wal_lsn_diff('$end', sent_lsn) / 1e6, 1) FROM pg_stat_replication WHERE application_name = 'pg_recvlogical'")
			stop_pid "$WORK/recv-tps.pid" INT
			drop_slot bench_tps
			;;
		changestream | cs_noprealloc)
			behind=$(q "SELECT round(pg_wal_lsn_diff('$end', flushed_lsn) / 1e6, 1) FROM changestream.status()")
			cs_stop
			[ "$mode" = changestream ] ||
				q "ALTER SYSTEM RESET changestream.preallocate_segments" >/dev/null
			;;
	esac
	LAST_TPS=$tps LAST_CPU=$cpu LAST_BEHIND=$behind LAST_OTHER=$OTHER_CPUS LAST_KCPU=$kcpu
	cs_info "  $mode: $tps tps (other work $OTHER_CPUS CPUs)${cpu:+  (consumer CPU $cpu s: client/worker + walsender${comp:+ + compressor ($kcpu s)}; WAL behind when pgbench ended: $behind MB)}"
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$mode" "$i" "$tps" "$behind" "$cpu" "$OTHER_CPUS" "$kcpu" >>"$RUN_DIR/tps.tsv"
}

# One TPS run per configuration and round; a run during which other work
# kept QUIET_BUSY CPUs or more busy is repeated, up to QUIET_RETRIES times.
tps_measure() {
	local mode=$1 i=$2 try=0
	while :; do
		tps_run "$mode" "$i"
		if is_quiet "$LAST_OTHER" || [ "$try" -ge "$QUIET_RETRIES" ]; then
			break
		fi
		try=$((try + 1))
		cs_info "    (other work ran alongside: repeating, attempt $((try + 1)) of $((QUIET_RETRIES + 1)))"
	done
	TPS_RUNS[$mode]="${TPS_RUNS[$mode]:-} $LAST_TPS"
	TPS_OTHER[$mode]="${TPS_OTHER[$mode]:-} $LAST_OTHER"
	[ -z "$LAST_CPU" ] || TPS_CPU[$mode]="${TPS_CPU[$mode]:-} $LAST_CPU"
	[ -z "$LAST_KCPU" ] || TPS_KCPU[$mode]="${TPS_KCPU[$mode]:-} $LAST_KCPU"
	[ -z "$LAST_BEHIND" ] || BEHIND_MB[$mode]="${BEHIND_MB[$mode]:-} $LAST_BEHIND"
}

tps_phase() {
	cs_section "2. overhead: pgbench -c $TPS_CLIENTS -j 2 -T $TPS_SECONDS, $TPS_ROUNDS run(s) per configuration"
	local i order m
	for i in $(seq 1 "$TPS_ROUNDS"); do
		case $(( (i - 1) % 3 )) in
			0) order="none recvlogical changestream" ;;
			1) order="recvlogical changestream none" ;;
			2) order="changestream none recvlogical" ;;
		esac
		# TPS_PREALLOC_AB=1: also changestream with preallocate_segments off
		[ "${TPS_PREALLOC_AB:-0}" = 1 ] && order=${order/changestream/changestream cs_noprealloc}
		for m in $order; do tps_measure "$m" "$i"; done
	done
	# shellcheck disable=SC2086
	{
		TPS_NONE=$(median ${TPS_RUNS[none]})
		TPS_RECV=$(median ${TPS_RUNS[recvlogical]})
		TPS_CS=$(median ${TPS_RUNS[changestream]})
		BEHIND_RECV=$(median ${BEHIND_MB[recvlogical]})
		BEHIND_CS=$(median ${BEHIND_MB[changestream]})
		TPS_CPU_RECV=$(median ${TPS_CPU[recvlogical]})
		TPS_CPU_CS=$(median ${TPS_CPU[changestream]})
		TPS_KCPU_CS=$(median ${TPS_KCPU[changestream]})
		if [ -n "${TPS_RUNS[cs_noprealloc]:-}" ]; then
			TPS_CSOFF=$(median ${TPS_RUNS[cs_noprealloc]})
			TPS_CPU_CSOFF=$(median ${TPS_CPU[cs_noprealloc]})
			TPS_KCPU_CSOFF=$(median ${TPS_KCPU[cs_noprealloc]})
			BEHIND_CSOFF=$(median ${BEHIND_MB[cs_noprealloc]})
		fi
	}
}

# ======================================================= 3. lag

lag_phase() {
	cs_section "3. lag: pgbench -R $LAG_RATE -c $TPS_CLIENTS -j 2 -T $LAG_SECONDS while archiving"
	vacuum_checkpoint
	new_archive lag
	cs_set_directory "$ARCHIVE"
	wait_state streaming "$TIMEOUT"
	note_load lag
	local samples=$WORK/lag-samples.txt t0 t1
	# one query every 5 ms: the clock, the server's WAL flush position and
	# the archive's durable position, read together
	cs_as_pg tee "$WORK/sampler.sql" >/dev/null <<'EOF'
SELECT extract(epoch FROM clock_timestamp()), pg_current_wal_flush_lsn(), flushed_lsn
  FROM changestream.status() \watch 0.005
EOF
	bg_pg "$WORK/sampler.pid" "$samples" "$PG_BINDIR/psql" -X -q -At -h "$WORK" -p "$PORT" -d postgres \
		-f "$WORK/sampler.sql"
	sleep 1
	cpu_mark
	t0=$(now)
	cs_as_pg "$PG_BINDIR/pgbench" -h "$WORK" -p "$PORT" -c "$TPS_CLIENTS" -j 2 -R "$LAG_RATE" -T "$LAG_SECONDS" \
		--no-vacuum postgres >"$RUN_DIR/lag-pgbench.log" 2>&1 || { cat "$RUN_DIR/lag-pgbench.log"; cs_die "pgbench failed"; }
	t1=$(now)
	other_cpus
	LAG_OTHER=$OTHER_CPUS
	sleep 2
	stop_pid "$WORK/sampler.pid" INT
	LAG_TPS=$(sed -n 's/^tps = \([0-9]*\.[0-9]\).* (without initial connection time)/\1/p' "$RUN_DIR/lag-pgbench.log")
	LAG_PGBENCH_LAT=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' "$RUN_DIR/lag-pgbench.log")
	# skip the first 2 s (connections ramping up)
	perl "$BENCH_DIR/lag.pl" "$samples" "$(calc "$t0 + 2")" "$t1" >"$RUN_DIR/lag.txt"
	cp "$samples" "$RUN_DIR/lag-samples.txt"
	LAG_P50=$(awk '$1 == "p50_ms" { print $2 }' "$RUN_DIR/lag.txt")
	LAG_P90=$(awk '$1 == "p90_ms" { print $2 }' "$RUN_DIR/lag.txt")
	LAG_P99=$(awk '$1 == "p99_ms" { print $2 }' "$RUN_DIR/lag.txt")
	LAG_MAX=$(awk '$1 == "max_ms" { print $2 }' "$RUN_DIR/lag.txt")
	LAG_N=$(awk '$1 == "resolved" { print $2 }' "$RUN_DIR/lag.txt")
	LAG_INTERVAL=$(awk '$1 == "interval_ms" { print $2 }' "$RUN_DIR/lag.txt")
	cs_info "  $LAG_TPS tps; lag p50 $LAG_P50 ms, p90 $LAG_P90 ms, p99 $LAG_P99 ms, max $LAG_MAX ms ($LAG_N samples, every $LAG_INTERVAL ms; other work $LAG_OTHER CPUs)"
	cs_stop
}

# ======================================================= 4. memory

rss_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

# VmHWM (peak RSS) is reset to the current RSS by writing 5 to clear_refs.
reset_hwm() { if cs_is_root; then echo 5 >"/proc/$1/clear_refs" 2>/dev/null || true; fi; }

memory_txn() {
	local pid=$1 mb=$2 rows out end t0 t1 b0 b1
	rows=$(( mb * 1000000 / 1015 ))	# about 1015 pgoutput bytes per row
	reset_hwm "$pid"
	b0=$(q "SELECT bytes FROM changestream.status()")
	out=$(psqlc -At <<EOF
BEGIN;
INSERT INTO bench_big SELECT g, repeat(md5(g::text), 31) FROM generate_series(coalesce((SELECT max(id) FROM bench_big), 0) + 1, coalesce((SELECT max(id) FROM bench_big), 0) + $rows) g;
SELECT pg_current_wal_insert_lsn() AS from_lsn \gset
COMMIT;
SELECT bench.last_commit_end(:'from_lsn');
EOF
)
	end=$out
	t0=$(now)
	q "SELECT bench.wait_flushed('$end', $TIMEOUT)" >/dev/null
	t1=$(now)
	b1=$(q "SELECT bytes FROM changestream.status()")
	MEM_TXN_BYTES[$mb]=$((b1 - b0))
	MEM_HWM[$mb]=$(rss_kb "$pid" VmHWM)
	MEM_ANON[$mb]=$(rss_kb "$pid" RssAnon)
	cs_info "  ${mb} MB transaction ($rows rows, $(calc "${MEM_TXN_BYTES[$mb]} / 1e6" 0) MB pgoutput): archived $(calc "$t1 - $t0" 1) s after its commit; worker VmHWM $(calc "${MEM_HWM[$mb]} / 1024" 1) MB"
}

memory_phase() {
	cs_section "4. memory: the archiver's peak RSS during a ${BIG_MB} MB transaction"
	declare -g -A MEM_HWM MEM_ANON MEM_TXN_BYTES
	vacuum_checkpoint
	new_archive memory
	cs_set_directory "$ARCHIVE"
	wait_state streaming "$TIMEOUT"
	note_load memory
	local pid
	pid=$(q "SELECT pid FROM changestream.status()")
	sleep 2
	reset_hwm "$pid"
	sleep 3
	MEM_IDLE_RSS=$(rss_kb "$pid" VmRSS)
	MEM_IDLE_HWM=$(rss_kb "$pid" VmHWM)
	cs_info "  idle: VmRSS $(calc "$MEM_IDLE_RSS / 1024" 1) MB, VmHWM $(calc "$MEM_IDLE_HWM / 1024" 1) MB"
	SMALL_MB=$(( BIG_MB / 4 ))
	memory_txn "$pid" "$SMALL_MB"
	memory_txn "$pid" "$BIG_MB"
	[ "$(q "SELECT pid FROM changestream.status()")" = "$pid" ] || cs_info "  WARNING: the worker restarted during the memory test"
	cs_stop
}

# Raw segments under a steady saturating pgbench (bench/steady_load.sh,
# its own cluster, 1MB segments: the maintenance worker has a segment to compress
# every fraction of a second).  Sets STEADY_MAX_RAW (most *.wal files seen,
# the active one included), STEADY_FIRST_RAW / STEADY_LAST_RAW (the largest
# in the first and in the last third of the run), STEADY_GZ (compressed at
# the end), STEADY_SAMPLES, STEADY_MAX_LAG (bytes), STEADY_TPS and
# STEADY_RESTARTS.
steady_phase() {
	cs_section "6. raw segments: pgbench -c 8 -j 2 -T $STEADY_SECONDS, segment_size 1MB"
	note_load steady
	local out=$RUN_DIR/steady_load.txt
	PG_BINDIR=$PG_BINDIR SEGMENT_SIZE=1MB SAMPLE=5 \
		bash "$BENCH_DIR/steady_load.sh" "$STEADY_SECONDS" >"$out" 2>&1 ||
		{ cat "$out"; cs_die "bench/steady_load.sh failed"; }
	read -r STEADY_SAMPLES STEADY_MAX_RAW STEADY_FIRST_RAW STEADY_LAST_RAW STEADY_GZ STEADY_MAX_LAG < <(
		awk -v secs="$STEADY_SECONDS" '
			$1 ~ /^[0-9]+$/ && NF == 4 {
				n++; if ($2 > max) max = $2; if ($4 > lag) lag = $4; gz = $3
				if ($1 <= secs / 3 && $2 > first) first = $2
				if ($1 >= 2 * secs / 3 && $2 > last) last = $2
			}
			END { printf "%d %d %d %d %d %d\n", n, max, first, last, gz, lag }' "$out")
	STEADY_TPS=$(awk '/^tps/ { printf "%.0f", $3 }' "$out")
	STEADY_RESTARTS=$(awk -F': ' '/session restarts or generations logged/ { print $2 }' "$out")
	cs_info "  $STEADY_SAMPLES samples: at most $STEADY_MAX_RAW raw segments (first third $STEADY_FIRST_RAW, last third $STEADY_LAST_RAW), $STEADY_GZ compressed at the end, lag at most $STEADY_MAX_LAG bytes, $STEADY_TPS tps"
}

# The read side of issue 11 (bench/read_side.sh, its own cluster); its
# table goes to $RUN_DIR/read_side.md, and for a full run to
# bench/results/read_side.md too.
read_side_phase() {
	cs_section "7. read side: changes(), restore() against their peers"
	note_load read-side
	local log=$RUN_DIR/read_side.log
	local -a env_=(PG_BINDIR="$PG_BINDIR" READ_SIDE_OUT="$RUN_DIR/read_side.md")
	[ "$QUICK" = 1 ] && env_+=(TXNS=5000 ROUNDS=1)
	env "${env_[@]}" bash "$BENCH_DIR/read_side.sh" >"$log" 2>&1 ||
		{ tail -40 "$log"; cs_die "bench/read_side.sh failed"; }
	[ "$QUICK" = 1 ] || cp "$RUN_DIR/read_side.md" "$RESULTS/read_side.md"
	grep -E '^\| (Decode|Snapshot|Apply)' "$RUN_DIR/read_side.md" | sed 's/^/  /'
}

# ======================================================= report

tps_runs_of() {
	local -a t o
	read -r -a t <<<"${TPS_RUNS[$1]}"
	read -r -a o <<<"${TPS_OTHER[$1]}"
	local k out=""
	for k in "${!t[@]}"; do out="$out${out:+, }${t[k]} [${o[k]}]"; done
	printf '%s' "$out"
}

pf() { if [ "$(awk "BEGIN { print ($1) ? 1 : 0 }")" = 1 ]; then echo PASS; else echo FAIL; fi; }

# the values of array $1 for the rounds in USE_ROUNDS, one a line
sel() {
	local -n arr=$1
	local r
	for r in "${USE_ROUNDS[@]}"; do printf '%s\n' "${arr[r]}"; done
}
# median of the selected rounds of array $1
msel() {
	local v
	mapfile -t v < <(sel "$1")
	median "${v[@]}"
}
# "value [other CPUs]" for every round of consumer $1 (A B C D)
rounds_of() {
	local -n mbs=D_MBS_$1 oth=D_OTHER_$1
	local r out=""
	for r in $(seq 1 "$ROUNDS"); do out="$out${out:+, }${mbs[r]} [${oth[r]}]"; done
	printf '%s' "$out"
}

# a/b throughput ratio of consumers $1 and $2 in every round (the time
# ratio inverted): "r1, r2, ..."
round_ratios() {
	local -n ta=D_TIME_$1 tb=D_TIME_$2
	local r out=""
	for r in $(seq 1 "$ROUNDS"); do out="$out${out:+, }$(calc "${tb[r]} / ${ta[r]}" 3)"; done
	printf '%s' "$out"
}

# The report's line on the machine (set by machine_info).
machine_line() {
	echo "Machine: $NPROC CPUs ($CPU_MODEL), $MEM_GB GB RAM, Linux $KERNEL, disk $DISK, 8 kB fdatasync'ed write $FSYNC_MS ms."
}

# The TPS of configuration $1 (default changestream) over that of $2
# (default recvlogical) in each round: "r1, r2, ..." (a round runs every
# configuration back to back, so its ratio is the least touched by the
# machine's slower drift)
tps_round_ratios() {
	local -a c r
	read -r -a c <<<"${TPS_RUNS[${1:-changestream}]}"
	read -r -a r <<<"${TPS_RUNS[${2:-recvlogical}]}"
	local k out=""
	for k in "${!c[@]}"; do out="$out${out:+, }$(calc "${c[k]} / ${r[k]}" 3)"; done
	printf '%s' "$out"
}

# Section 2 of the report (markdown on stdout).
tps_section() {
	local rr
	rr=$(tps_round_ratios)
	echo "## 2. Overhead on the primary"
	echo
	echo "pgbench -c $TPS_CLIENTS -j 2 -T $TPS_SECONDS (TPC-B-like, all four tables published), median of $TPS_ROUNDS run(s) per configuration."
	echo
	echo "| Consumer | TPS | vs none | Runs: TPS [CPUs other work kept busy] | Consumer CPU (s): client or archiver + its walsender + compressor | of which compressor (s) | Consumer CPU per 1000 transactions (ms) | WAL behind when pgbench ended (MB) |"
	echo "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |"
	echo "| none | $TPS_NONE | 1.000 | $(tps_runs_of none) | | | | |"
	echo "| pg_recvlogical -f /dev/null | $TPS_RECV | $R_TPS_RECV_NONE | $(tps_runs_of recvlogical) | $TPS_CPU_RECV | | $(calc "$TPS_CPU_RECV * 1e6 / ($TPS_RECV * $TPS_SECONDS)" 1) | $BEHIND_RECV |"
	echo "| changestream | $TPS_CS | $R_TPS_CS_NONE | $(tps_runs_of changestream) | $TPS_CPU_CS | $TPS_KCPU_CS | $(calc "$TPS_CPU_CS * 1e6 / ($TPS_CS * $TPS_SECONDS)" 1) | $BEHIND_CS |"
	[ -z "${TPS_CSOFF:-}" ] ||
		echo "| changestream, preallocate_segments off | $TPS_CSOFF | $(calc "$TPS_CSOFF / $TPS_NONE" 3) | $(tps_runs_of cs_noprealloc) | $TPS_CPU_CSOFF | $TPS_KCPU_CSOFF | $(calc "$TPS_CPU_CSOFF * 1e6 / ($TPS_CSOFF * $TPS_SECONDS)" 1) | $BEHIND_CSOFF |"
	echo
	# shellcheck disable=SC2086
	echo "changestream / pg_recvlogical: ${R_TPS_CS_RECV} (medians); round by round (runs next to each other): $rr, median $(median ${rr//,/})."
	if [ -n "${TPS_CSOFF:-}" ]; then
		rr=$(tps_round_ratios cs_noprealloc recvlogical)
		# shellcheck disable=SC2086
		echo "changestream with preallocate_segments off / pg_recvlogical: $(calc "$TPS_CSOFF / $TPS_RECV" 3) (medians); round by round: $rr, median $(median ${rr//,/})."
		rr=$(tps_round_ratios changestream cs_noprealloc)
		# shellcheck disable=SC2086
		echo "preallocate_segments on / off: $(calc "$TPS_CS / $TPS_CSOFF" 3) (medians); round by round: $rr, median $(median ${rr//,/})."
	fi
}

# The ratios of phase 2 (TPS_* set by tps_phase).
tps_ratios() {
	R_TPS_CS_RECV=$(calc "$TPS_CS / $TPS_RECV" 3)
	R_TPS_CS_NONE=$(calc "$TPS_CS / $TPS_NONE" 3)
	R_TPS_RECV_NONE=$(calc "$TPS_RECV / $TPS_NONE" 3)
}

# --tps-only: phase 2 alone, in bench/results/tps.md.
tps_report() {
	local f=$RUN_DIR/report.md elapsed
	tps_ratios
	elapsed=$(calc "$(now) - $T_START" 0)
	{
		echo "# changestream benchmark: TPS overhead only"
		echo
		echo "\`bash bench/run.sh --tps-only\`, $(date -u '+%Y-%m-%d %H:%M UTC'), changestream $GIT_REV, PostgreSQL $PG_VERSION; run time ${elapsed} s."
		echo
		machine_line
		echo
		echo "| Target | Measured | Result |"
		echo "| --- | --- | --- |"
		echo "| TPS with changestream >= 1.0x TPS with pg_recvlogical | ${R_TPS_CS_RECV}x | $(pf "$R_TPS_CS_RECV >= 1.0") |"
		echo
		tps_section
	} >"$f"
	cp "$f" "$RESULTS/tps.md"
	cs_section "results (bench/results/tps.md)"
	cat "$f"
}

report() {
	local f=$RUN_DIR/report.md r
	USE_ROUNDS=()
	for r in $(seq 1 "$ROUNDS"); do
		if is_quiet "${D_OTHER_A[r]}" && is_quiet "${D_OTHER_B[r]}" && is_quiet "${D_OTHER_C[r]}" &&
		   is_quiet "${D_OTHER_D[r]}" && is_quiet "${D_OTHER_E[r]}"; then
			USE_ROUNDS+=("$r")
		fi
	done
	if [ "${#USE_ROUNDS[@]}" -ge 3 ] || [ "${#USE_ROUNDS[@]}" -eq "$ROUNDS" ]; then
		ROUNDS_NOTE="Medians of rounds ${USE_ROUNDS[*]}: the rounds in which other work kept fewer than $QUIET_BUSY CPUs busy during every consumer's drain."
	else
		ROUNDS_NOTE="WARNING: other work disturbed all but ${#USE_ROUNDS[@]} of the $ROUNDS rounds (it kept $QUIET_BUSY CPUs or more busy during some drain); medians of all rounds."
		mapfile -t USE_ROUNDS < <(seq 1 "$ROUNDS")
	fi
	local mA mB mC mD mE tA tB tC tD tE cA cpuE
	mA=$(msel D_MBS_A); mB=$(msel D_MBS_B); mC=$(msel D_MBS_C); mD=$(msel D_MBS_D); mE=$(msel D_MBS_E)
	tA=$(msel D_TIME_A); tB=$(msel D_TIME_B); tC=$(msel D_TIME_C); tD=$(msel D_TIME_D); tE=$(msel D_TIME_E)
	cpuE=$(msel D_CPU_E)
	cA=$(msel D_COMPRESSED_A)
	local sA cpuA cpu2A wsA cpuB cpuC wsB wsC wsD wsE
	sA=$(msel D_START_A); cpuA=$(msel D_CPU_A); cpu2A=$(msel D_CPU2_A)
	wsA=$(msel D_WS_CPU_A); cpuB=$(msel D_CPU_B); cpuC=$(msel D_CPU_C)
	wsB=$(msel D_WS_CPU_B); wsC=$(msel D_WS_CPU_C); wsD=$(msel D_WS_CPU_D); wsE=$(msel D_WS_CPU_E)
	local pmb
	pmb=$(calc "$(msel PAYLOAD_BYTES) / 1e6" 1)
	R_AB=$(calc "$mA / $mB" 3); R_AC=$(calc "$mA / $mC" 3); R_AD=$(calc "$mA / $mD" 3)
	R_GZ=$(calc "$ARCHIVE_BYTES / $GZIP_PAYLOAD_BYTES" 3)
	local kA kB kC kE kwA kwE kwB kwC
	kA=$(msel D_WAKE_A); kB=$(msel D_WAKE_B); kC=$(msel D_WAKE_C); kE=$(msel D_WAKE_E)
	kwA=$(msel D_WWAKE_A); kwE=$(msel D_WWAKE_E); kwB=$(msel D_CWAKE_B); kwC=$(msel D_CWAKE_C)
	local iA iB iC iE
	iA=$(msel D_IWAKE_A); iB=$(msel D_IWAKE_B); iC=$(msel D_IWAKE_C); iE=$(msel D_IWAKE_E)
	local hwm_big_mb hwm_small_mb
	if [ "$DRAIN_ONLY" != 1 ]; then
		tps_ratios
		hwm_big_mb=$(calc "${MEM_HWM[$BIG_MB]} / 1024" 1)
		hwm_small_mb=$(calc "${MEM_HWM[$SMALL_MB]} / 1024" 1)
	fi
	local opts=""
	[ "$QUICK" = 1 ] && opts="$opts --quick"
	[ "$DRAIN_ONLY" = 1 ] && opts="$opts --drain-only"
	local elapsed
	elapsed=$(calc "$(now) - $T_START" 0)

	{
		echo "# changestream benchmark"
		echo
		echo "\`bash bench/run.sh$opts\`, $(date -u '+%Y-%m-%d %H:%M UTC'), changestream $GIT_REV, PostgreSQL $PG_VERSION; run time ${elapsed} s."
		echo
		machine_line
		echo
		echo "Other work on the machine (CPUs busy during 1 s sampled just before each measurement, with the bench idle): $(printf '%s; ' "${LOADS[@]}" | sed 's/; $//'); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg). Figures taken while other work competes for the $NPROC CPUs are skewed.$LIB_NOTE"
		echo
		echo "## Targets"
		echo
		echo "| Target | Measured | Result |"
		echo "| --- | --- | --- |"
		echo "| Drain >= 1.0x pg_recvlogical -f /dev/null | ${R_AB}x | $(pf "$R_AB >= 1.0") |"
		echo "| Drain >= 1.0x pg_recvlogical -f FILE | ${R_AC}x | $(pf "$R_AC >= 1.0") |"
		if [ "$DRAIN_ONLY" != 1 ]; then
			echo "| TPS with changestream >= 1.0x TPS with pg_recvlogical | ${R_TPS_CS_RECV}x | $(pf "$R_TPS_CS_RECV >= 1.0") |"
			echo "| Lag p99 < 15 ms at $LAG_RATE tps | $LAG_P99 ms | $(pf "$LAG_P99 < 15") |"
			echo "| Worker RSS < 64 MB during a $BIG_MB MB transaction | $hwm_big_mb MB | $(pf "$hwm_big_mb < 64") |"
			if [ "$STEADY_SECONDS" -gt 0 ]; then
				echo "| Raw segments bounded under a steady load (1MB segments): at most $((DEFER_MAX_RAW + 2)), the maintenance worker's bound while it defers plus the active segment and the one being compressed | $STEADY_MAX_RAW (most in the first third $STEADY_FIRST_RAW, in the last $STEADY_LAST_RAW) | $(pf "$STEADY_MAX_RAW <= $((DEFER_MAX_RAW + 2))") |"
			fi
		fi
		echo "| Archive <= 1.10x gzip -6 of the pgoutput payload | ${R_GZ}x | $(pf "$R_GZ <= 1.10") |"
		echo
		echo "## 1. Drain throughput"
		echo
		echo "A backlog of $((DRAIN_CLIENTS * DRAIN_TXNS)) pgbench transactions (scale $SCALE, $DRAIN_CLIENTS clients), $pmb MB of pgoutput payload (proto 1, messages on), written while no consumer ran and drained to the same end LSN by each consumer in turn, in $ROUNDS rounds (order rotated). changestream resumes its generation, opened (with its snapshot) before the backlog was written. MB/s is pgoutput payload bytes (10^6) per second of wall time, from start (connect/reload) to durable end."
		echo
		echo "$ROUNDS_NOTE"
		echo
		echo "| Consumer | Time (s) | MB/s | Every round: MB/s [CPUs other work kept busy] | Consumer process CPU (s) | Its walsender's CPU (s) | Walsender wakeups | Walsender preemptions | Consumer wakeups |"
		echo "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
		echo "| (a) changestream (fsync + gzip) | $tA | $mA | $(rounds_of A) | $cpuA (worker) | $wsA | $kA | $iA | $kwA |"
		echo "| (b) pg_recvlogical -f /dev/null | $tB | $mB | $(rounds_of B) | $cpuB | $wsB | $kB | $iB | $kwB |"
		echo "| (c) pg_recvlogical -f FILE (default fsync) | $tC | $mC | $(rounds_of C) | $cpuC | $wsC | $kC | $iC | $kwC |"
		echo "| (d) pg_logical_slot_peek_binary_changes | $tD | $mD | $(rounds_of D) | | $wsD (the backend) | | | |"
		echo "| (e) changestream, compression_level 0 (diagnostic) | $tE | $mE | $(rounds_of E) | $cpuE (worker) | $wsE | $kE | $iE | $kwE |"
		echo
		echo "Ratios (throughput, medians): a/b ${R_AB}, a/c ${R_AC}, a/d ${R_AD}; without compression e/b $(calc "$mE / $mB" 3), e/c $(calc "$mE / $mC" 3). Round by round (same WAL, back to back): a/b $(round_ratios A B), a/c $(round_ratios A C)."
		echo "Wakeups are voluntary context switches (/proc/PID/status) during the drain: each is one sleep the process was woken from. The walsender's own count (it sleeps when its socket is full or it waits for WAL); the consumer's is how often it slept on an empty socket (or, for changestream, on its nap timer) and was woken: a consumer asleep on the socket must be woken by the walsender, which is what the walsender's CPU follows (issue 13). pg_recvlogical's count is from /usr/bin/time (it includes runuser's few). Preemptions are the walsender's involuntary context switches: another task took its CPU while it could still run (on $NPROC CPUs, mostly the consumer's own processes: changestream's compressor waits while the archiver catches up, for that reason)."
		echo "CPU is user + system time during the drain: of the changestream worker and its walsender (from /proc), of pg_recvlogical (rusage), of the walsender or backend that served pg_recvlogical or the peek (the postmaster's reaped-children time)."
		echo "changestream's time includes its session start (reload, connect, resume the generation): streaming after $sA s (median)."
		echo "Until every sealed segment was compressed as well: $cA s, worker CPU $cpu2A s (medians)."
		echo
		if [ "$DRAIN_ONLY" != 1 ]; then
			tps_section
			echo
			echo "## 3. Commit-to-durable lag"
			echo
			echo "pgbench -R $LAG_RATE -c $TPS_CLIENTS -T $LAG_SECONDS ($LAG_TPS tps achieved, latency average $LAG_PGBENCH_LAT ms; other work kept $LAG_OTHER CPUs busy), default flush_interval. A sampler read (clock, pg_current_wal_flush_lsn(), status().flushed_lsn) every $LAG_INTERVAL ms; the lag of a sample is the time until flushed_lsn passed its WAL flush position ($LAG_N samples; upper bound, resolution one sampling interval)."
			echo
			echo "| p50 (ms) | p90 (ms) | p99 (ms) | max (ms) |"
			echo "| ---: | ---: | ---: | ---: |"
			echo "| $LAG_P50 | $LAG_P90 | $LAG_P99 | $LAG_MAX |"
			echo
			echo "## 4. Memory"
			echo
			echo "The archiver's VmHWM (peak RSS, reset before each measurement), while idle and while archiving one large INSERT transaction (~1 kB rows)."
			echo
			echo "| Worker state | pgoutput bytes | Peak RSS (MB) | RssAnon after (MB) |"
			echo "| --- | ---: | ---: | ---: |"
			echo "| idle (5 s) | | $(calc "$MEM_IDLE_HWM / 1024" 1) | |"
			echo "| one $SMALL_MB MB transaction | ${MEM_TXN_BYTES[$SMALL_MB]} | $hwm_small_mb | $(calc "${MEM_ANON[$SMALL_MB]} / 1024" 1) |"
			echo "| one $BIG_MB MB transaction | ${MEM_TXN_BYTES[$BIG_MB]} | $hwm_big_mb | $(calc "${MEM_ANON[$BIG_MB]} / 1024" 1) |"
			echo
		fi
		echo "## 5. Compression"
		echo
		echo "Round 1's WAL (segment_size 16MB, compression_level $CS_LEVEL, the default), with the last segment sealed and every sealed segment compressed."
		echo
		echo "| Bytes | Size | vs pgoutput | vs gzip -6 |"
		echo "| --- | ---: | ---: | ---: |"
		echo "| raw pgoutput payload | $RAW_PAYLOAD_FILE_BYTES | 1.000 | $(calc "$RAW_PAYLOAD_FILE_BYTES / $GZIP_PAYLOAD_BYTES" 3) |"
		echo "| archive before compression (framed) | $ARCHIVE_RAW_BYTES | $(calc "$ARCHIVE_RAW_BYTES / $RAW_PAYLOAD_FILE_BYTES" 3) | $(calc "$ARCHIVE_RAW_BYTES / $GZIP_PAYLOAD_BYTES" 3) |"
		echo "| archive ($ARCHIVE_SEGMENTS segments) | $ARCHIVE_BYTES | $(calc "$ARCHIVE_BYTES / $RAW_PAYLOAD_FILE_BYTES" 3) | $R_GZ |"
		echo "| gzip -6 of the pgoutput payload | $GZIP_PAYLOAD_BYTES | $(calc "$GZIP_PAYLOAD_BYTES / $RAW_PAYLOAD_FILE_BYTES" 3) | 1.000 |"
		echo "| gzip -6 of the pg_recvlogical -f file | $GZIP_RECV_BYTES | $(calc "$GZIP_RECV_BYTES / $RAW_PAYLOAD_FILE_BYTES" 3) | $(calc "$GZIP_RECV_BYTES / $GZIP_PAYLOAD_BYTES" 3) |"
		echo
		echo "What the entry headers cost: the same entries re-encoded by bench/entry_overhead.pl, then gzip -6 (one stream, as if one segment)."
		echo
		echo "| Encoding of the archived entries | Raw | gzip -6 | vs gzip -6 of the payload |"
		echo "| --- | ---: | ---: | ---: |"
		local name raw gz label
		while read -r name raw gz; do
			case $name in
				archive) label="as archived (the segments as written, headers and frames included)" ;;
				delta_varint) label="the same fields as varint deltas from the previous entry" ;;
				split) label="varint-delta headers and payloads in two separate streams" ;;
				lsn_delta) label="kind, varint length, dataStart delta (no walEnd, no send time)" ;;
				kind_len) label="kind + u32 length only (no positions, no times)" ;;
				varint_len) label="kind + varint length only" ;;
				payload) label="payload only" ;;
				*) continue ;;
			esac
			echo "| $label | $raw | $gz | $(calc "$gz / $GZIP_PAYLOAD_BYTES" 3) |"
		done <"$RUN_DIR/entry_overhead.txt"
		echo
		echo "Entries: $(awk '$1 == "entries" { print $2 }' "$RUN_DIR/entry_overhead.txt"), of which walEnd = dataStart: $(awk '$1 == "walEnd_eq_dataStart" { print $2 }' "$RUN_DIR/entry_overhead.txt"), dataStart 0/0: $(awk '$1 == "dataStart_zero" { print $2 }' "$RUN_DIR/entry_overhead.txt"); distinct send times: $(awk '$1 == "send_time_distinct" { print $2 }' "$RUN_DIR/entry_overhead.txt")."
		echo
		echo "Cluster: shared_buffers 512MB, max_wal_size 16GB, checkpoint_timeout 1h, autovacuum off (VACUUM and CHECKPOINT before each measurement), fsync and synchronous_commit on; changestream defaults otherwise."
		echo
		if [ "$DRAIN_ONLY" != 1 ] && [ "$STEADY_SECONDS" -gt 0 ]; then
			echo "## 6. Raw segments under a steady load"
			echo
			echo "\`bench/steady_load.sh $STEADY_SECONDS\` on its own cluster: pgbench -c 8 -j 2 (scale 10, unthrottled: $STEADY_TPS tps) while changestream archives with segment_size 1MB, so that a segment is sealed every fraction of a second; every 5 s the archive's raw (*.wal, the active one included) and compressed segments are counted ($STEADY_SAMPLES samples; samples in bench/results/<run>/steady_load.txt)."
			echo
			echo "| Raw segments, most seen | Most in the first third | Most in the last third | Compressed at the end | Archiver lag, most (bytes) | Session restarts or new generations logged |"
			echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
			echo "| $STEADY_MAX_RAW | $STEADY_FIRST_RAW | $STEADY_LAST_RAW | $STEADY_GZ | $STEADY_MAX_LAG | $STEADY_RESTARTS |"
			echo
		fi
		if [ "$DRAIN_ONLY" != 1 ] && [ "$READ_SIDE" = 1 ]; then
			echo "## 7. Read side"
			echo
			echo "\`bench/read_side.sh\` (issue 11) on its own cluster, in this run$([ "$QUICK" = 1 ] && echo " (5,000 transactions, 1 round)"): \`changes()\` decoding the archive against \`pg_logical_slot_peek_changes()\` over the same transactions, \`restore()\` loading a snapshot against \`zcat | psql\` of the same file, and \`restore()\` applying the transactions against a subscription catching up on them."
			echo
			cat "$RUN_DIR/read_side.md"
			echo
		fi
	} >"$f"
	local name=latest.md
	if [ "$DRAIN_ONLY" = 1 ]; then name=drain.md; elif [ "$QUICK" = 1 ]; then name=quick.md; fi
	cp "$f" "$RESULTS/$name"
	cs_section "results (bench/results/$name)"
	cat "$f"
}

# ======================================================= --profile

# Where changestream's CPU goes while it drains a backlog: perf (system-wide,
# then per process: the worker and its walsender) in one round, syscall
# counts of the worker (strace -c) in a second.  Nothing else is measured.
profile_backlog() {
	local tag=$1
	vacuum_checkpoint
	new_archive "profile-$tag"
	cs_set_directory "$ARCHIVE"
	wait_state streaming "$TIMEOUT"
	cs_set_directory ''
	wait_state disabled 120
	cs_as_pg "$PG_BINDIR/pgbench" -h "$WORK" -p "$PORT" -c "$DRAIN_CLIENTS" -j 2 -t "$DRAIN_TXNS" \
		--no-vacuum postgres >"$RUN_DIR/profile-pgbench-$tag.log" 2>&1 || cs_die "pgbench failed"
	PROFILE_END=$(mark_end)
	q "CHECKPOINT" >/dev/null
}

profile_drain() {
	local t0 out
	t0=$(now)
	out=$(psqlc -At <<EOF
ALTER SYSTEM SET changestream.directory = '$ARCHIVE';
SELECT pg_reload_conf() \g /dev/null
SELECT bench.wait_flushed('$PROFILE_END', $TIMEOUT);
EOF
)
	cs_info "  drained in $(calc "$(now) - $t0") s (streaming after ${out% *} s)"
	PROFILE_WS=$(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'changestream'")
}

profile_phase() {
	cs_section "profile: changestream draining $((DRAIN_CLIENTS * DRAIN_TXNS)) pgbench transactions"
	local wpid
	wpid=$(q "SELECT pid FROM changestream.status()")
	command -v perf >/dev/null || { cs_is_root && apt-get install -y -qq linux-perf </dev/null >/dev/null 2>&1; } || true
	note_load "profile (perf)"
	create_slot bench_prof
	profile_backlog perf
	if command -v perf >/dev/null && cs_is_root; then
		perf record -a -g -F 999 -o "$RUN_DIR/perf.data" >"$RUN_DIR/perf-record.log" 2>&1 &
		local perf_pid=$!
		sleep 0.5
		profile_drain
		kill -INT "$perf_pid"
		wait "$perf_pid" || true
		local who pid
		# shares of all samples (both CPUs, the whole drain) by process and
		# shared object
		perf report -i "$RUN_DIR/perf.data" --no-children --sort pid,dso -g none \
			>"$RUN_DIR/perf-pid-dso.txt" 2>/dev/null || true
		cs_info "  perf: share of all CPU samples (2 x drain time) by process and shared object"
		cs_info "  (worker pid $wpid, its walsender pid $PROFILE_WS):"
		grep -E "^ +[0-9.]+% +($wpid|$PROFILE_WS):" "$RUN_DIR/perf-pid-dso.txt" | sed -n '1,16s/^/    /p'
		for who in worker walsender; do
			pid=$wpid
			[ "$who" = walsender ] && pid=$PROFILE_WS
			perf report -i "$RUN_DIR/perf.data" --pid="$pid" --no-children --percentage relative \
				--sort dso,sym -g none >"$RUN_DIR/perf-$who-sym.txt" 2>/dev/null || true
			cs_info "  perf, $who: top symbols (share of that process's samples)"
			grep -v -e '^#' -e '^$' "$RUN_DIR/perf-$who-sym.txt" | sed -n '1,20s/^/    /p'
		done
		cs_set_directory ''
		wait_state disabled 120

		# the same backlog drained by pg_recvlogical -f /dev/null
		local t0 rpid rws=""
		perf record -a -g -F 999 -o "$RUN_DIR/perf-recvlogical.data" >"$RUN_DIR/perf-record-recvlogical.log" 2>&1 &
		perf_pid=$!
		sleep 0.5
		t0=$(now)
		bg_pg "$WORK/recv-prof.pid" "$RUN_DIR/recvlogical-prof.log" "$PG_BINDIR/pg_recvlogical" -h "$WORK" -p "$PORT" \
			-d postgres -S bench_prof --start --no-loop "${RECV_OPTS[@]}" --endpos="$PROFILE_END" -F 0 -f /dev/null
		rpid=$(cat "$WORK/recv-prof.pid")
		while kill -0 "$rpid" 2>/dev/null; do
			[ -n "$rws" ] || rws=$(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'bench_prof'")
			sleep 0.01
		done
		rm -f "$WORK/recv-prof.pid"
		cs_info "  pg_recvlogical -f /dev/null drained the same backlog in $(calc "$(now) - $t0") s"
		kill -INT "$perf_pid"
		wait "$perf_pid" || true
		perf report -i "$RUN_DIR/perf-recvlogical.data" --no-children --sort pid,dso -g none \
			>"$RUN_DIR/perf-recvlogical-pid-dso.txt" 2>/dev/null || true
		cs_info "  perf: share of all CPU samples by process and shared object (pg_recvlogical pid $rpid, its walsender pid $rws):"
		grep -E "^ +[0-9.]+% +($rpid|$rws):" "$RUN_DIR/perf-recvlogical-pid-dso.txt" | sed -n '1,12s/^/    /p'
		perf report -i "$RUN_DIR/perf-recvlogical.data" --pid="$rws" --no-children --percentage relative \
			--sort dso,sym -g none >"$RUN_DIR/perf-recvlogical-walsender-sym.txt" 2>/dev/null || true
		cs_info "  perf, walsender serving pg_recvlogical: top symbols (share of that process's samples)"
		grep -v -e '^#' -e '^$' "$RUN_DIR/perf-recvlogical-walsender-sym.txt" | sed -n '1,20s/^/    /p'
	else
		cs_info "  perf is not available (or not root): skipped"
		profile_drain
		cs_set_directory ''
		wait_state disabled 120
	fi
	drop_slot bench_prof

	note_load "profile (strace)"
	profile_backlog strace
	if command -v strace >/dev/null; then
		strace -c -p "$wpid" -o "$RUN_DIR/strace-worker.txt" 2>/dev/null &
		local st_pid=$!
		sleep 0.5
		profile_drain
		kill -INT "$st_pid"
		wait "$st_pid" || true
		cs_info "  syscalls of the worker while draining (strace -c):"
		sed -n '1,16s/^/    /p' "$RUN_DIR/strace-worker.txt"
	fi
	cs_set_directory ''
	wait_state disabled 120

	# What the walsender waits for, serving changestream and then
	# pg_recvlogical -f /dev/null on the same backlog: WalSenderWriteData
	# means its socket is full, i.e. it waits for its client to read.
	note_load "profile (walsender wait events)"
	create_slot bench_null
	profile_backlog waits
	local who
	for who in changestream pg_recvlogical; do
		wait_event_sampler "$RUN_DIR/walsender-waits-$who.txt" &
		local ws_pid=$!
		sleep 0.2
		if [ "$who" = changestream ]; then
			profile_drain
			cs_set_directory ''
			wait_state disabled 120
		else
			cs_as_pg "$PG_BINDIR/pg_recvlogical" -h "$WORK" -p "$PORT" -d postgres -S bench_null --start --no-loop \
				"${RECV_OPTS[@]}" --endpos="$PROFILE_END" -F 0 -f /dev/null
		fi
		touch "$WORK/sampler.stop"
		wait "$ws_pid" || true
		rm -f "$WORK/sampler.stop"
		cs_info "  walsender serving $who: wait events every 2 ms while draining (CPU = running or runnable)"
		sed 's/^/    /' "$RUN_DIR/walsender-waits-$who.txt"
	done
	drop_slot bench_null
	cs_info "perf data and reports in $RUN_DIR"
}

# Sample the walsenders' wait events every 2 ms until $WORK/sampler.stop
# exists (at most 10 minutes); histogram to $1.
wait_event_sampler() {
	psqlc -At -F ' ' >"$1" <<EOF
CREATE TEMP TABLE waits (w text);
DO \$\$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
    WHILE clock_timestamp() - t0 < interval '10 min'
          AND pg_stat_file('$WORK/sampler.stop', true) IS NULL LOOP
        INSERT INTO waits SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU')
          FROM pg_stat_activity WHERE backend_type = 'walsender';
        PERFORM pg_stat_clear_snapshot();
        PERFORM pg_sleep(0.002);
    END LOOP;
END \$\$;
SELECT count(*), w FROM waits GROUP BY w ORDER BY 1 DESC;
EOF
}

# ======================================================= main

# All the work happens in main(), called from the file's last line, so that
# editing this file while it runs cannot change what the run executes.
main() {
	if [ "$SKIP_BUILD" != 1 ]; then
		cs_section "dependencies and build"
		install_deps
		make -C "$ROOT" -s -j"$(nproc)" PG_CONFIG="$PG_CONFIG" >/dev/null
		make -C "$ROOT" -s install PG_CONFIG="$PG_CONFIG" >/dev/null
		cs_info "installed $("$PG_CONFIG" --pkglibdir)/changestream.so"
	fi

	cs_section "throwaway cluster"
	setup_cluster
	machine_info
	cs_info "machine: $NPROC x $CPU_MODEL, Linux $KERNEL, $DISK, fdatasync $FSYNC_MS ms"

	if [ "$PROFILE" = 1 ]; then
		profile_phase
		OK=1
		return 0
	fi
	if [ "$TPS_ONLY" = 1 ]; then
		tps_phase
		tps_report
		OK=1
		return 0
	fi
	drain_phase
	if [ "$DRAIN_ONLY" != 1 ]; then
		tps_phase
		lag_phase
		memory_phase
		if [ "$STEADY_SECONDS" -gt 0 ]; then steady_phase; fi
		if [ "$READ_SIDE" = 1 ]; then read_side_phase; fi
	fi
	report
	OK=1
}

main "$@"; exit
