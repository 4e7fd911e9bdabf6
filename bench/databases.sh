#!/usr/bin/env bash
# bench/databases.sh: several databases from one cluster (issue 34).  NOT
# part of CI or of the test suite.
#
#   bash bench/databases.sh              # 1, 4 and 16 databases
#   COUNTS="1 4" bash bench/databases.sh
#   bash bench/databases.sh --skip-build # use the installed changestream
#
# For each number N of databases, twice on a fresh throwaway cluster each
# (temp directory, free port, changestream preloaded): (a) changestream
# archiving all N (changestream.databases), (b) N pg_recvlogical processes,
# one per database, writing to a file (-F 1 -s 1: fsync and report every
# second).  The same total pgbench load runs in both, twice: TXNS
# transactions in all, split evenly over the N databases, CLIENTS clients
# in all (at least one per database), all databases at once.  Measured:
#   tps (live)  the load's transactions over its wall time, consumers running
#   catch-up    seconds from the end of that load until every consumer has
#               made durable (changestream: status().flushed_lsn; pg_recvlogical:
#               the slot's confirmed_flush_lsn) a fence written after it in
#               its own database
#   drain       the same load written while the consumers are stopped
#               (changestream.directory = '', or the processes ended; the
#               slots keep the WAL), then the seconds from their start until
#               all are durable past a fence, and the backlog's WAL bytes
#               over that time (MB/s)
#   memory      the proportional set size (PSS, /proc/PID/smaps_rollup) of
#               every consumer process and the walsenders serving them,
#               summed, at the end of the live load (changestream:
#               launcher, archivers, maintenance worker)
# The table goes to bench/results/databases.md; logs to
# bench/results/databases-<timestamp>/ (not committed).
# Environment: COUNTS="1 4 16" TXNS=24000 CLIENTS=8 TIMEOUT=900

set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
# shellcheck source=../scripts/lib.sh
. "$ROOT/scripts/lib.sh"

SKIP_BUILD=${SKIP_BUILD:-0}
for arg in "$@"; do
	case $arg in
		--skip-build) SKIP_BUILD=1 ;;
		-h|--help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
		*) echo "unknown option: $arg (try --help)" >&2; exit 2 ;;
	esac
done
: "${COUNTS:=1 4 16}" "${TXNS:=24000}" "${CLIENTS:=8}" "${TIMEOUT:=900}"

now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.${2:-1}f\", ($1) }"; }

if [ "$SKIP_BUILD" != 1 ]; then
	cs_is_root || cs_die "run as root to build and install (or --skip-build)"
	cs_install_deps
	cs_build_install
fi
cs_pg_paths || cs_die "no PostgreSQL at $PG_CONFIG"

RESULTS=$BENCH_DIR/results
LOGDIR=$RESULTS/databases-$(date +%Y%m%d-%H%M%S)
mkdir -p "$LOGDIR"
if cs_is_root; then chown "$PG_OS_USER": "$LOGDIR"; fi
WORK=""
PORT=""
PIDS=()

cleanup() {
	local p
	for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
	[ -n "$WORK" ] && cs_cluster_stop "$WORK" immediate
	[ -n "$WORK" ] && rm -rf "$WORK"
	return 0
}
trap cleanup EXIT

psqld() { local db=$1; shift; cs_as_pg "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$WORK" -p "$PORT" -d "$db" "$@"; }

# A fresh cluster for N databases d1..dN, each with the pgbench tables and
# the publication changestream.
new_cluster() {
	local n=$1 i
	WORK=$(cs_mkwork cs-bench-dbs)
	PORT=$(cs_free_port 55400)
	cs_cluster_init "$WORK" "$PORT" <<-CONF
		max_worker_processes = $((n + 8))
		max_wal_senders = $((2 * n + 4))
		max_replication_slots = $((2 * n + 4))
		max_connections = $((2 * n + CLIENTS + 40))
		shared_buffers = '128MB'
		max_wal_size = '2GB'
		changestream.directory = ''
	CONF
	cs_cluster_start "$WORK" "$LOGDIR/server-$n-$2.log"
	for i in $(seq "$n"); do
		psqld postgres -c "CREATE DATABASE d$i"
		cs_as_pg "$PG_BINDIR/pgbench" -h "$WORK" -p "$PORT" -i -s 1 -q "d$i" >/dev/null 2>&1
		psqld "d$i" -c "CREATE EXTENSION changestream" \
			-c "CREATE PUBLICATION changestream FOR TABLE pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history"
	done
}

# The load: TXNS in all over n databases at once; prints its wall seconds.
run_load() {
	local n=$1 per_db clients t0 i pids=()
	clients=$(( CLIENTS / n )); [ "$clients" -ge 1 ] || clients=1
	per_db=$(( TXNS / n / clients ))
	t0=$(now)
	for i in $(seq "$n"); do
		cs_as_pg "$PG_BINDIR/pgbench" -h "$WORK" -p "$PORT" -n -c "$clients" -j 1 \
			-t "$per_db" "d$i" >"$LOGDIR/pgbench-$n-d$i.log" 2>&1 &
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i"; done
	LOAD_S=$(calc "$(now) - $t0" 3)
	LOAD_TXNS=$(( per_db * clients * n ))
	LOAD_T0=$t0
}

# Fence every database (a transactional message after the load): FENCES
# is a VALUES list of (database, its fence LSN), FENCE the last fence.
fence_all() {
	local n=$1 i lsn
	FENCES=""
	for i in $(seq "$n"); do
		lsn=$(psqld "d$i" -c "SELECT pg_logical_emit_message(true, 'bench', 'fence')")
		FENCES="$FENCES${FENCES:+,}('d$i','$lsn'::pg_lsn)"
		FENCE=$lsn
	done
}

# Wait until query (run in postgres) returns t; dies after TIMEOUT.
wait_true() {
	local query=$1 t0
	t0=$(date +%s)
	until [ "$(psqld postgres -c "$query")" = t ]; do
		[ $(( $(date +%s) - t0 )) -lt "$TIMEOUT" ] || cs_die "timed out: $query"
		sleep 0.05
	done
}

# Summed PSS in MB of the processes whose command line matches the
# pattern (pgrep -f; with children_only, children of this cluster's
# postmaster only), and of the walsenders of the slots named like $1.
pss_mb() {
	local slot_like=$1 pat=$2 children_only=${3:-0} pids p total=0 kb pm
	pm=$(head -1 "$WORK/data/postmaster.pid")
	if [ "$children_only" = 1 ]; then
		pids=$(pgrep -P "$pm" -f "$pat" || true)
	else
		pids=$(pgrep -f "$pat" || true)
	fi
	pids="$pids $(psqld postgres -c "SELECT active_pid FROM pg_replication_slots WHERE slot_name LIKE '$slot_like' AND active_pid IS NOT NULL")"
	for p in $pids; do
		kb=$(awk '/^Pss:/ { print $2 }' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
		total=$(( total + ${kb:-0} ))
	done
	calc "$total / 1024" 1
}

# changestream: is every database's archive durable past its own fence?
# (Another database's later fence is not in its stream: it would reach it
# only with a keepalive.)
cs_durable() {
	echo "SELECT count(*) = $1 FROM changestream.status() s JOIN (VALUES $FENCES) f(db, lsn) ON s.database = f.db WHERE s.flushed_lsn >= f.lsn"
}
# pg_recvlogical: is every slot confirmed past its database's fence?
recv_durable() {
	echo "SELECT count(*) = $1 FROM pg_replication_slots s JOIN (VALUES $FENCES) f(db, lsn) ON s.database = f.db WHERE s.slot_name LIKE 'recv_%' AND s.confirmed_flush_lsn >= f.lsn"
}

# Start the n pg_recvlogical processes (slots made by the caller); each
# one's own pid (not runuser's, which does not pass signals on) is in
# $WORK/recv_dI.pid, as bench/run.sh's bg_pg() does it.
recv_start() {
	local n=$1 i j
	PIDS=()
	for i in $(seq "$n"); do
		rm -f "$WORK/recv_d$i.pid"
		# shellcheck disable=SC2016
		cs_as_pg sh -c 'echo $$ > "$0"; exec "$@"' "$WORK/recv_d$i.pid" \
			"$PG_BINDIR/pg_recvlogical" -h "$WORK" -p "$PORT" -d "d$i" -S "recv_d$i" \
			-o proto_version=1 -o publication_names=changestream -o messages=true \
			-F 1 -s 1 -f "$WORK/recv_d$i.out" --start >>"$LOGDIR/recv-$n-d$i.log" 2>&1 &
		for j in $(seq 100); do
			[ -s "$WORK/recv_d$i.pid" ] && break
			sleep 0.05
		done
		PIDS+=("$(cat "$WORK/recv_d$i.pid")")
	done
	wait_true "SELECT count(*) = $n FROM pg_replication_slots WHERE slot_name LIKE 'recv_%' AND active"
}
recv_stop() {
	local p i
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do
		for i in $(seq 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
	done
	PIDS=()
	wait_true "SELECT count(*) = 0 FROM pg_replication_slots WHERE slot_name LIKE 'recv_%' AND active"
}

# One consumer kind on a fresh cluster of n databases: the live load
# (tps, catch-up, memory), then the drain of a backlog written while the
# consumers were stopped.  Appends a row to ROWS.
measure() {
	local n=$1 kind=$2 label start t_end t_done bytes mem tps catchup drain
	new_cluster "$n" "$kind"
	if [ "$kind" = changestream ]; then
		label=changestream
		psqld postgres -c "CREATE EXTENSION changestream" \
			-c "ALTER SYSTEM SET changestream.directory = '$WORK/archive'" \
			-c "ALTER SYSTEM SET changestream.databases = '$(seq -s, -f 'd%g' 1 "$n")'" \
			-c "SELECT pg_reload_conf()" >/dev/null
		wait_true "SELECT count(*) FILTER (WHERE state = 'streaming') = $n FROM changestream.status()"
	else
		label="$n x pg_recvlogical"
		for i in $(seq "$n"); do
			cs_as_pg "$PG_BINDIR/pg_recvlogical" -h "$WORK" -p "$PORT" -d "d$i" -S "recv_d$i" \
				-P pgoutput --create-slot >/dev/null
		done
		recv_start "$n"
	fi

	# live: the consumers run during the load
	run_load "$n"
	tps=$(calc "$LOAD_TXNS / $LOAD_S" 0)
	t_end=$(now)
	fence_all "$n"
	if [ "$kind" = changestream ]; then
		wait_true "$(cs_durable "$n")"
		mem=$(pss_mb 'changestream%' '^postgres: changestream' 1)
	else
		wait_true "$(recv_durable "$n")"
		mem=$(pss_mb 'recv_%' "^$PG_BINDIR/pg_recvlogical -h $WORK")
	fi
	catchup=$(calc "$(now) - $t_end" 2)

	# drain: a backlog written while the consumers are stopped
	if [ "$kind" = changestream ]; then
		psqld postgres -c "ALTER SYSTEM SET changestream.directory = ''" -c "SELECT pg_reload_conf()" >/dev/null
		wait_true "SELECT count(*) FILTER (WHERE state = 'disabled') = $n FROM changestream.status()"
		wait_true "SELECT count(*) = 0 FROM pg_replication_slots WHERE active"
	else
		recv_stop
	fi
	start=$(psqld postgres -c "SELECT pg_current_wal_lsn()")
	run_load "$n"
	fence_all "$n"
	bytes=$(psqld postgres -c "SELECT pg_wal_lsn_diff('$FENCE', '$start')")
	t_end=$(now)
	if [ "$kind" = changestream ]; then
		psqld postgres -c "ALTER SYSTEM SET changestream.directory = '$WORK/archive'" -c "SELECT pg_reload_conf()" >/dev/null
		wait_true "$(cs_durable "$n")"
	else
		recv_start "$n"
		wait_true "$(recv_durable "$n")"
	fi
	t_done=$(now)
	drain=$(calc "$bytes / 1048576 / ($t_done - $t_end)" 1)
	ROWS+=("| $n | $label | $tps | $catchup | $(calc "$bytes / 1048576" 0) | $(calc "$t_done - $t_end" 1) | $drain | $mem |")
	[ "$kind" = changestream ] || recv_stop
	cs_cluster_stop "$WORK"
	rm -rf "$WORK"; WORK=""
}

ROWS=()
for n in $COUNTS; do
	cs_info "== $n databases: changestream"
	measure "$n" changestream
	cs_info "== $n databases: pg_recvlogical"
	measure "$n" recvlogical
done

{
	echo "# Several databases: changestream against pg_recvlogical"
	echo
	echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, PostgreSQL $PG_MAJOR, $TXNS pgbench transactions in all (scale 1 per database), $CLIENTS clients in all (at least one per database)."
	echo
	echo "| databases | consumer | tps (live) | catch-up s | backlog WAL MB | drain s | drain MB/s | memory MB (PSS) |"
	echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
	printf '%s\n' "${ROWS[@]}"
} | tee "$RESULTS/databases.md"
