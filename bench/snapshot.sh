#!/usr/bin/env bash
# bench/snapshot.sh: snapshot throughput (issue 3), not part of CI.
#
#   bash bench/snapshot.sh            # SCALE=20 (2,000,000 pgbench_accounts rows), 3 rounds
#
# On a throwaway cluster it starts itself (as the postgres user), times
# changestream.take_snapshot() of one published table against
# "psql -c 'COPY table TO STDOUT' | gzip -6 > file" on the same table, in
# the same run, alternating, and prints rows/s, MB/s (of COPY text) and the
# ratio of the medians.  take_snapshot() includes what the baseline does
# not: a temporary slot, the manifest, fsync and rename.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/lib.sh
. "$ROOT/scripts/lib.sh"
SCALE=${SCALE:-20}
ROUNDS=${ROUNDS:-3}

cs_install_deps >/dev/null
[ "${SKIP_BUILD:-0}" = 1 ] || cs_build_install >/dev/null

W=$(cs_mkwork changestream-snapbench)
PORT=$(cs_free_port 55400)
cleanup() {
	cs_cluster_stop "$W" immediate
	rm -rf "$W"
}
trap cleanup EXIT

cs_cluster_init "$W" "$PORT" <<CONF
changestream.directory = '$W/archive'
CONF
cs_cluster_start "$W" "$W/log"
psql() { cs_cluster_psql "$W" "$PORT" -q "$@"; }

cs_as_pg "$PG_BINDIR/pgbench" -h "$W" -p "$PORT" -i -s "$SCALE" -q postgres >/dev/null 2>&1
psql -c "CREATE PUBLICATION changestream FOR TABLE pgbench_accounts" -c "CREATE EXTENSION changestream"
for _ in $(seq 1 120); do
	[ "$(psql -Atc "SELECT state FROM changestream.status()")" = streaming ] && break
	sleep 1
done
ROWS=$(psql -Atc "SELECT count(*) FROM pgbench_accounts")
COPY_BYTES=$(psql -c "COPY pgbench_accounts TO STDOUT" | wc -c)

now() { date +%s.%N; }
snap_times=()
base_times=()
for r in $(seq 1 "$ROUNDS"); do
	t0=$(now); cs_as_pg bash -c "'$PG_BINDIR/psql' -X -q -h '$W' -p $PORT -d postgres -c 'COPY pgbench_accounts TO STDOUT' | gzip -6 > '$W/base.gz'"; t1=$(now)
	base_times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')")
	t0=$(now); psql -Atc "SELECT changestream.take_snapshot()" >/dev/null; t1=$(now)
	snap_times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
SNAP=$(median "${snap_times[@]}")
BASE=$(median "${base_times[@]}")
GEN=$(psql -Atc "SELECT max(generation) FROM changestream.generations()")
SNAP_SIZE=$(psql -Atc "SELECT size_bytes FROM changestream.snapshots('$GEN') ORDER BY lsn DESC LIMIT 1")
BASE_SIZE=$(stat -c %s "$W/base.gz")
SNAP_ROWS=$(psql -Atc "SELECT row_count FROM changestream.snapshots('$GEN') ORDER BY lsn DESC LIMIT 1")
[ "$SNAP_ROWS" = "$ROWS" ] || { echo "snapshot holds $SNAP_ROWS rows, table $ROWS" >&2; exit 1; }

mkdir -p "$ROOT/bench/results"
awk -v rows="$ROWS" -v bytes="$COPY_BYTES" -v s="$SNAP" -v b="$BASE" \
    -v ss="$SNAP_SIZE" -v bs="$BASE_SIZE" -v rounds="$ROUNDS" -v st="${snap_times[*]}" -v bt="${base_times[*]}" 'BEGIN {
	printf "## Snapshot throughput\n\n";
	printf "pgbench_accounts, %d rows, %.1f MB of COPY text; medians of %d rounds (changestream: %s s; baseline: %s s).\n\n", rows, bytes/1e6, rounds, st, bt;
	printf "| | Time (s) | rows/s | MB/s (COPY text) | File (MB) |\n| --- | ---: | ---: | ---: | ---: |\n";
	printf "| changestream.take_snapshot() | %.2f | %.0f | %.1f | %.1f |\n", s, rows/s, bytes/1e6/s, ss/1e6;
	printf "| COPY ... TO STDOUT \\| gzip -6 | %.2f | %.0f | %.1f | %.1f |\n", b, rows/b, bytes/1e6/b, bs/1e6;
	printf "\nRatio (throughput, changestream / baseline): %.2f\n", b/s;
}' | tee "$ROOT/bench/results/snapshot.md"
