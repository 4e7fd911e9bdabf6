#!/usr/bin/env bash
# bench/listing.sh: listing a generation of many segments (issue 29), not
# part of CI.
#
#   bash bench/listing.sh          # SEGMENTS=100000, ROUNDS=3
#
# A generation written with the default segment_timeout (5 minutes) holds
# about 100,000 segments after a year.  On a throwaway cluster it starts
# itself (as the postgres user, scripts/lib.sh), the archiver opens its
# generation with time-based rotation off; the script then adds empty
# "<index>.wal.gz" files after the archiver's open segment, up to SEGMENTS
# names in all, and times changestream.generations() and
# changestream.generation_stats() (each lists the generation's segments,
# checks their sequence and stats every file; the generation is the one the
# archiver writes, so its end is the archiver's position and no segment is
# read).  The archiver only appends to its open segment meanwhile: nothing
# writes to the database.  Medians of ROUNDS, in milliseconds (psql's
# \timing).  SKIP_BUILD=1 uses the installed changestream.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/lib.sh
. "$ROOT/scripts/lib.sh"
SEGMENTS=${SEGMENTS:-100000}
ROUNDS=${ROUNDS:-3}

cs_install_deps >/dev/null
[ "${SKIP_BUILD:-0}" = 1 ] || cs_build_install >/dev/null

W=$(cs_mkwork changestream-listbench)
PORT=$(cs_free_port 55500)
cleanup() {
	cs_cluster_stop "$W" immediate
	rm -rf "$W"
}
trap cleanup EXIT

cs_cluster_init "$W" "$PORT" <<CONF
changestream.directory = '$W/archive'
changestream.segment_timeout = 0
changestream.preallocate_segments = off
CONF
cs_cluster_start "$W" "$W/log"
psql() { cs_cluster_psql "$W" "$PORT" -q "$@"; }

psql -c "CREATE TABLE t (id int PRIMARY KEY)" \
	-c "CREATE PUBLICATION changestream FOR TABLE t" \
	-c "CREATE EXTENSION changestream"
for _ in $(seq 1 120); do
	[ "$(psql -Atc "SELECT state FROM changestream.status()")" = streaming ] && break
	sleep 1
done
GEN=$(psql -Atc "SELECT max(generation) FROM changestream.generations()")
WAL=$W/archive/generations/$GEN/wal
LAST=$(find "$WAL" -maxdepth 1 -name '*.wal*' -printf '%f\n' | sort | tail -1)
FIRST_FAKE=$(( 16#${LAST:0:16} + 1 ))
cs_as_pg python3 - "$WAL" "$FIRST_FAKE" "$SEGMENTS" <<'PY'
import os, sys
wal, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(first, last):
    open(os.path.join(wal, "%016x.wal.gz" % i), "w").close()
PY
NAMES=$(find "$WAL" -maxdepth 1 -name '*.wal*' | wc -l)

# time_ms SQL: the server's time for one statement (psql's \timing)
time_ms() {
	psql -At -c '\timing on' -c "$1" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
gen_times=()
stat_times=()
for _ in $(seq 1 "$ROUNDS"); do
	gen_times+=("$(time_ms "SELECT count(*) FROM changestream.generations()")")
	stat_times+=("$(time_ms "SELECT wal_count FROM changestream.generation_stats('$GEN')")")
done
ROW=$(psql -At -c "SELECT wal_count, coalesce(damage, 'none') FROM changestream.generations()")

echo "| Case | Median of $ROUNDS |"
echo "|---|---|"
echo "| \`generations()\`, one generation of $NAMES segment names | $(median "${gen_times[@]}") ms |"
echo "| \`generation_stats()\`, the same generation | $(median "${stat_times[@]}") ms |"
echo
echo "wal_count and damage: $ROW.  Rounds (ms): generations() ${gen_times[*]}; generation_stats() ${stat_times[*]}."
echo "Machine: $(nproc) CPUs, PostgreSQL $("$PG_BINDIR/postgres" --version | awk '{ print $3 }'), $(date -u '+%Y-%m-%d %H:%M UTC')."
