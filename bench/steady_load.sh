#!/usr/bin/env bash
# bench/steady_load.sh: raw segments under a steady load (issue 9, item 1).
# NOT part of CI or of the test suite: it takes minutes.
#
#   bash bench/steady_load.sh [SECONDS]      (default 600)
#
# Starts a throwaway cluster through scripts/lib.sh (cs_cluster_init) from
# PG_BINDIR (default the host's PostgreSQL 15; point it at a private copy
# with the extension installed), with
# changestream preloaded and archiving the pgbench tables with default
# settings, then runs pgbench (8 clients, 2 threads, scale 10) for SECONDS
# and every SAMPLE seconds prints: elapsed seconds, raw segments (*.wal, the
# active one included, the preallocated spare.wal not), compressed segments
# (*.wal.gz), the archiver's lag behind the server's flush position in
# bytes; and at the end the TPS of the run and the session restarts and
# new generations the server logged while pgbench ran (LOG_COPY=FILE keeps
# a copy of the server's log).
# As root it runs every PostgreSQL program as the "postgres" user.
#
# Environment: PG_BINDIR, CLIENTS=8, SCALE=10, SAMPLE=10 (seconds),
#              SEGMENT_SIZE (default: the setting's default).

set -euo pipefail

SECS=${1:-600}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# lib.sh takes PostgreSQL from PG_CONFIG: the one of PG_BINDIR
PG_CONFIG=${PG_CONFIG:-${PG_BINDIR:-/usr/lib/postgresql/15/bin}/pg_config}
# shellcheck source=../scripts/lib.sh
. "$ROOT/scripts/lib.sh"
BIN=$PG_BINDIR
CLIENTS=${CLIENTS:-8}
SCALE=${SCALE:-10}
SAMPLE=${SAMPLE:-10}
WORK=$(cs_mkwork cs-steady)
PORT=$(cs_free_port 55500)

as_pg() { cs_as_pg "$@"; }

cleanup() {
	[ -n "${LOG_COPY:-}" ] && cp "$WORK/postgres.log" "$LOG_COPY" 2>/dev/null
	cs_cluster_stop "$WORK"
	rm -rf "$WORK"
}
trap cleanup EXIT

cs_cluster_init "$WORK" "$PORT" <<EOF || cs_die "initdb failed"
max_wal_size = 2GB
changestream.database = 'postgres'
changestream.directory = '$WORK/archive'
${SEGMENT_SIZE:+changestream.segment_size = '$SEGMENT_SIZE'}
EOF
cs_cluster_start "$WORK" "$WORK/postgres.log"
PSQL=(cs_cluster_psql "$WORK" "$PORT" -U postgres -qAt)
as_pg "$BIN/pgbench" -h "$WORK" -p "$PORT" -U postgres -i -s "$SCALE" -q postgres >/dev/null 2>&1
"${PSQL[@]}" -c "CREATE PUBLICATION changestream FOR TABLE pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history" >/dev/null
"${PSQL[@]}" -c "CREATE EXTENSION changestream" >/dev/null
# streaming and flushed once: the archiver logs its recovery from the waits
# for the publication at its first flush (archiver.c, note_recovered())
for _ in $(seq 120); do
	[ "$("${PSQL[@]}" -c "SELECT state = 'streaming' AND last_flush_at IS NOT NULL FROM changestream.status()")" = t ] && break
	sleep 1
done

# segments only (16 hex digits, archive_layout.c), not the preallocated
# spare.wal nor a *.part being written
count() {
	find "$WORK/archive/generations" -name "$(printf '%.0s[0-9A-Fa-f]' $(seq 16))$1" 2>/dev/null | wc -l
}
lag() {
	"${PSQL[@]}" -c "SELECT pg_current_wal_flush_lsn() - flushed_lsn FROM changestream.status()"
}

echo "seconds raw_segments gz_segments lag_bytes"
# the log from here on: the waits for the publication and the first start
# above are not restarts
log_from=$(($(stat -c %s "$WORK/postgres.log") + 1))
as_pg "$BIN/pgbench" -h "$WORK" -p "$PORT" -U postgres -c "$CLIENTS" -j 2 -T "$SECS" -n postgres \
	>"$WORK/pgbench.log" 2>&1 &
PGB=$!
start=$(date +%s)
while kill -0 "$PGB" 2>/dev/null; do
	echo "$(($(date +%s) - start)) $(count .wal) $(count .wal.gz) $(lag)"
	sleep "$SAMPLE"
done
wait "$PGB" || true
echo "$(($(date +%s) - start)) $(count .wal) $(count .wal.gz) $(lag)"
grep -E "^tps" "$WORK/pgbench.log" || tail -3 "$WORK/pgbench.log"
restarts=$(tail -c +"$log_from" "$WORK/postgres.log" | grep -E "streaming again|started generation" || true)
echo "session restarts or generations logged: $(printf '%s' "$restarts" | grep -c . || true)"
[ -z "$restarts" ] || printf '%s\n' "$restarts" | sed 's/^/log: /'
