#!/usr/bin/env bash
# bench/sync_commit.sh: commit latency with the archiver as the synchronous
# standby (issue 33, section 3), not part of CI.
#
#   bash bench/sync_commit.sh          # SECS=20 per case, ROUNDS=3
#
# One throwaway cluster (as the postgres user, scripts/lib.sh) archives a
# table t; pgbench runs single-row INSERTs into it from one client
# (-c 1, -T SECS, per-transaction latencies logged with -l), in rounds,
# the cases interleaved within each round so that a disturbance of the
# machine hits all of them alike:
#   none       synchronous_standby_names = '' (the floor: local WAL flush)
#   receivewal pg_receivewal --synchronous on a physical slot as the
#              synchronous standby (the physical anchor: it fsyncs each WAL
#              write and reports at once)
#   cs_sync    the archiver as the synchronous standby, with
#              changestream.synchronous = on
#   cs_async   the archiver as the synchronous standby, with
#              changestream.synchronous = off (group commit window, paced
#              reports: what synchronous mode removes)
# Prints p50 and p99 of each case (milliseconds, over all rounds' commits)
# and the archiver's added latency over none against pg_receivewal's.
# SKIP_BUILD=1 uses the installed changestream.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/lib.sh
. "$ROOT/scripts/lib.sh"
SECS=${SECS:-20}
ROUNDS=${ROUNDS:-3}

cs_install_deps >/dev/null
[ "${SKIP_BUILD:-0}" = 1 ] || cs_build_install >/dev/null

W=$(cs_mkwork changestream-syncbench)
PORT=$(cs_free_port 55600)
RECV_PID=
cleanup() {
	[ -n "$RECV_PID" ] && kill "$RECV_PID" 2>/dev/null
	cs_cluster_stop "$W" immediate
	rm -rf "$W"
}
trap cleanup EXIT

cs_cluster_init "$W" "$PORT" <<CONF
changestream.directory = '$W/archive'
max_wal_senders = 10
max_replication_slots = 10
CONF
cs_cluster_start "$W" "$W/log"
psql() { cs_cluster_psql "$W" "$PORT" -q "$@"; }

psql -c "CREATE TABLE t (id bigserial PRIMARY KEY, v text NOT NULL)" \
	-c "CREATE PUBLICATION changestream FOR TABLE t" \
	-c "CREATE EXTENSION changestream" \
	-c "SELECT pg_create_physical_replication_slot('bench_receivewal')"
for _ in $(seq 1 120); do
	[ "$(psql -Atc "SELECT state FROM changestream.status()")" = streaming ] && break
	sleep 1
done
cs_as_pg mkdir "$W/receivewal"
cs_as_pg "$PG_BINDIR/pg_receivewal" -h "$W" -p "$PORT" -D "$W/receivewal" \
	-S bench_receivewal --synchronous --no-loop >"$W/receivewal.log" 2>&1 &
RECV_PID=$!

echo "INSERT INTO t (v) VALUES ('one row');" | cs_as_pg tee "$W/insert.sql" >/dev/null

# setup CASE: point synchronous_standby_names (and the mode) at the case
setup() {
	local names='' sync=off
	case $1 in
	receivewal) names=pg_receivewal ;;
	cs_sync) names=changestream sync=on ;;
	cs_async) names=changestream ;;
	esac
	psql -c "ALTER SYSTEM SET synchronous_standby_names = '$names'" \
		-c "ALTER SYSTEM SET changestream.synchronous = $sync" \
		-c "SELECT pg_reload_conf()" >/dev/null
	sleep 2
	if [ -n "$names" ]; then
		[ "$(psql -Atc "SELECT count(*) FROM pg_stat_replication WHERE application_name = '$names' AND sync_state = 'sync'")" = 1 ] ||
			cs_die "$names is not the synchronous standby"
	fi
}

# run CASE ROUND: one pgbench run, its latencies (us) appended to CASE.lat
run() {
	local dir="$W/pgbench_$1_$2"
	cs_as_pg mkdir "$dir"
	(cd "$dir" && cs_as_pg "$PG_BINDIR/pgbench" -n -h "$W" -p "$PORT" -c 1 -T "$SECS" \
		-f "$W/insert.sql" -l --log-prefix="$dir/log" postgres >"$dir/out" 2>&1) ||
		{ cat "$dir/out"; cs_die "pgbench failed ($1)"; }
	awk '{ print $3 }' "$dir"/log* >>"$W/$1.lat"
}

CASES="none receivewal cs_sync cs_async"
for r in $(seq 1 "$ROUNDS"); do
	for c in $CASES; do
		setup "$c"
		run "$c" "$r"
	done
done
psql -c "ALTER SYSTEM RESET synchronous_standby_names" -c "SELECT pg_reload_conf()" >/dev/null

# pct FILE P: the P-th percentile of the latencies in FILE, in ms
pct() {
	sort -n "$1" | awk -v p="$2" '{ a[NR] = $1 } END { i = int(NR * p / 100 + 0.5); if (i < 1) i = 1; printf "%.3f", a[i] / 1000 }'
}
echo "| Case | commits | p50 (ms) | p99 (ms) |"
echo "|---|---|---|---|"
for c in $CASES; do
	echo "| $c | $(wc -l <"$W/$c.lat") | $(pct "$W/$c.lat" 50) | $(pct "$W/$c.lat" 99) |"
done
awk -v n50="$(pct "$W/none.lat" 50)" -v r50="$(pct "$W/receivewal.lat" 50)" \
	-v c50="$(pct "$W/cs_sync.lat" 50)" -v n99="$(pct "$W/none.lat" 99)" \
	-v r99="$(pct "$W/receivewal.lat" 99)" -v c99="$(pct "$W/cs_sync.lat" 99)" 'BEGIN {
	printf "\nAdded over none, p50: archiver %.3f ms, pg_receivewal %.3f ms (ratio %.2f); p99: %.3f ms, %.3f ms (ratio %.2f).\n",
		c50 - n50, r50 - n50, (r50 - n50 > 0 ? (c50 - n50) / (r50 - n50) : 0),
		c99 - n99, r99 - n99, (r99 - n99 > 0 ? (c99 - n99) / (r99 - n99) : 0) }'
echo "Archived commits: $(psql -Atc "SELECT transactions FROM changestream.status()"); rows in t: $(psql -Atc 'SELECT count(*) FROM t')."
echo "Machine: $(nproc) CPUs, PostgreSQL $("$PG_BINDIR/postgres" --version | awk '{ print $3 }'), $SECS s x $ROUNDS rounds per case, $(date -u '+%Y-%m-%d %H:%M UTC')."
