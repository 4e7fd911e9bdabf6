#!/usr/bin/env bash
# bench/read_side.sh: the read-side figures of issue 11, in one run.  NOT
# part of CI or of the test suite: its figures depend on the machine.
#
#   bash bench/read_side.sh
#
# Starts a throwaway cluster through scripts/lib.sh (cs_cluster_init:
# temp directory, free port, wal_level=logical, changestream preloaded;
# archiving on) with pgbench tables at SCALE, then
# measures, on the same data:
#
#   1. changes() against pg_logical_slot_peek_changes() with test_decoding
#      over the same transactions (TXNS pgbench transactions, held by a
#      test_decoding slot created beforehand): change rows per second;
#   2. restore()'s snapshot load (target_lsn = the snapshot's LSN, into
#      existing empty tables without indexes) against
#      "zcat <snapshot> | psql" of the same file into the same kind of
#      tables in another database;
#   3. restore()'s apply of the TXNS transactions (restore to the end minus
#      restore to the snapshot) against a built-in subscription in a second
#      database of the same cluster, starting from the same data and a slot
#      created at the same point, catching up on them.
#
# Each timing is the median of ROUNDS.  It prints a markdown table with
# the ratios and writes it to bench/results/read_side.md.
#
# Environment: PG_BINDIR (default /usr/lib/postgresql/15/bin), SCALE=10,
#              TXNS=20000, ROUNDS=3; PARTS="1 2 3" (the measurements to
#              run: PARTS=3 ROUNDS=1 is a quick apply-only run); KEEP=1
#              leaves the cluster running at the end (for profiling) and
#              prints how to reach and stop it; READ_SIDE_OUT: where the
#              table goes instead of bench/results/read_side.md (bench/run.sh
#              runs it as its phase 7).
# As root, PostgreSQL programs run as the "postgres" user; the extension
# must be installed in PG_BINDIR's installation.

set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# lib.sh takes PostgreSQL from PG_CONFIG: the one of PG_BINDIR
PG_CONFIG=${PG_CONFIG:-${PG_BINDIR:-/usr/lib/postgresql/15/bin}/pg_config}
# shellcheck source=../scripts/lib.sh
. "$BENCH_DIR/../scripts/lib.sh"
PGBIN=$PG_BINDIR
export PGUSER=postgres			# cs_cluster_init's superuser
: "${SCALE:=10}" "${TXNS:=20000}" "${ROUNDS:=3}" "${PARTS:=1 2 3}" "${KEEP:=0}"
part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

as_pg() { cs_as_pg "$@"; }
now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.${2:-3}f\", ($1) }"; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) printf "%s", v[(NR + 1) / 2]; else printf "%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

WORK=$(cs_mkwork cs-readbench)
PORT=$(cs_free_port 55600)
cleanup() {
	if [ "$KEEP" = 1 ]; then
		echo "cluster kept: psql -h $WORK -p $PORT; stop: $PGBIN/pg_ctl -D $WORK/data stop; rm -rf $WORK"
		return
	fi
	cs_cluster_stop "$WORK" immediate; rm -rf "$WORK"
}
trap cleanup EXIT

psql_() { as_pg env PGOPTIONS="-c client_min_messages=warning" "$PGBIN/psql" -h "$WORK" -p "$PORT" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
# restore to target LSN $1: "wall-seconds cpu-seconds" (the backend's own
# /proc/self/schedstat, read with pg_read_file, before and after)
restore_cpu() {
	psql_ -d postgres -v t="$1" <<-'SQL'
	SELECT split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint AS c0, clock_timestamp() AS t0 \gset
	SELECT changestream.restore('s', target_lsn => :'t') \gset
	SELECT extract(epoch FROM clock_timestamp() - :'t0') || ' ' ||
		(split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint - :c0) / 1e9;
	SQL
}
timed() { local t0 t1; t0=$(now); psql_ "$@" >/dev/null; t1=$(now); calc "$t1 - $t0"; }

cs_cluster_init "$WORK" "$PORT" <<CONF || cs_die "initdb failed"
max_wal_senders = 10
max_replication_slots = 10
max_worker_processes = 16
shared_buffers = 256MB
max_wal_size = 4GB
changestream.directory = '$WORK/archive'
CONF
as_pg mkdir "$WORK/archive"
cs_cluster_start "$WORK" "$WORK/log"

echo "==== setup: pgbench scale $SCALE, $TXNS transactions"
as_pg "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -i -q -s "$SCALE" postgres >/dev/null 2>&1
psql_ -d postgres -c "CREATE EXTENSION changestream;
	ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY;
	CREATE PUBLICATION changestream FOR TABLE pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history;"
until [ "$(psql_ -d postgres -c "SELECT state FROM changestream.status()")" = streaming ]; do sleep 0.2; done
# the subscriber's database: the same starting data (pgbench -i is deterministic)
psql_ -d postgres -c "CREATE DATABASE sub"
as_pg "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -i -q -s "$SCALE" sub >/dev/null 2>&1
psql_ -d sub -c "ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY"
# restore's baseline: a snapshot now; the peers' slots at the same point
SNAP=$(psql_ -d postgres -c "SELECT changestream.take_snapshot()")
psql_ -d postgres -c "SELECT pg_create_logical_replication_slot('td', 'test_decoding');
	SELECT pg_create_logical_replication_slot('subslot', 'pgoutput');" >/dev/null
as_pg "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -n -c 4 -j 2 -t $((TXNS / 4)) postgres >/dev/null 2>&1
END_LSN=$(psql_ -d postgres -c "SELECT pg_current_wal_lsn()")
psql_ -d postgres -c "SELECT pg_logical_emit_message(true, 'bench', 'fence')" >/dev/null
until [ "$(psql_ -d postgres -c "SELECT flushed_lsn > '$END_LSN' FROM changestream.status()")" = t ]; do sleep 0.2; done
GEN=$(psql_ -d postgres -c "SELECT generation FROM changestream.status()")

if part 1; then
	echo "==== 1. changes() vs pg_logical_slot_peek_changes(test_decoding)"
	ROWS=$(psql_ -d postgres -c "SELECT count(*) FROM changestream.changes(start_lsn => '$SNAP', end_lsn => '$END_LSN')")
	TDROWS=$(psql_ -d postgres -c "SELECT count(*) FROM pg_logical_slot_peek_changes('td', '$END_LSN', NULL) WHERE data LIKE 'table %'")
	c=(); p=()
	for _ in $(seq "$ROUNDS"); do
		c+=("$(timed -d postgres -c "SELECT count(*) FROM changestream.changes(start_lsn => '$SNAP', end_lsn => '$END_LSN')")")
		p+=("$(timed -d postgres -c "SELECT count(*) FROM pg_logical_slot_peek_changes('td', '$END_LSN', NULL)")")
	done
	T_CHANGES=$(median "${c[@]}"); T_PEEK=$(median "${p[@]}")
	R1=$(calc "($ROWS / $T_CHANGES) / ($TDROWS / $T_PEEK)" 2)
	echo "changes(): $ROWS rows in $T_CHANGES s; peek: $TDROWS rows in $T_PEEK s; ratio $R1"
fi

if part 2; then
	echo "==== 2. snapshot load: restore() vs zcat | psql"
	SNAPFILE=$(printf '%s/archive/generations/%s/snapshots/%016X.snapshot.gz' "$WORK" "$GEN" \
		"$(( 0x$(echo "$SNAP" | cut -d/ -f1) << 32 | 0x$(echo "$SNAP" | cut -d/ -f2) ))")
	psql_ -d postgres -c "CREATE DATABASE zc"
	TBLS="CREATE TABLE %s.pgbench_accounts (aid int, bid int, abalance int, filler char(84));
		CREATE TABLE %s.pgbench_branches (bid int, bbalance int, filler char(88));
		CREATE TABLE %s.pgbench_tellers (tid int, bid int, tbalance int, filler char(84));
		CREATE TABLE %s.pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22), hid bigint);"
	SNAPROWS=$(psql_ -d postgres -c "SELECT row_count FROM changestream.snapshots('$GEN') WHERE lsn = '$SNAP'")
	l=(); z=()
	for _ in $(seq "$ROUNDS"); do
		# shellcheck disable=SC2059
		psql_ -d postgres -c "DROP SCHEMA IF EXISTS s CASCADE; CREATE SCHEMA s; $(printf "$TBLS" s s s s)"
		l+=("$(timed -d postgres -c "SELECT changestream.restore('s', target_lsn => '$SNAP')")")
		# shellcheck disable=SC2059
		psql_ -d zc -c "DROP SCHEMA IF EXISTS public CASCADE; CREATE SCHEMA public; $(printf "$TBLS" public public public public)"
		t0=$(now); zcat "$SNAPFILE" | psql_ -d zc >/dev/null; t1=$(now)
		z+=("$(calc "$t1 - $t0")")
	done
	T_LOAD=$(median "${l[@]}"); T_ZCAT=$(median "${z[@]}")
	R2=$(calc "$T_ZCAT / $T_LOAD" 2)
	echo "restore() load: $SNAPROWS rows in $T_LOAD s; zcat | psql: $T_ZCAT s; ratio $R2"
fi

if part 3; then
	echo "==== 3. apply: restore() vs a subscription catching up"
	# both restores create their tables (as a restore into a fresh database
	# does) with the source's definition, primary keys included (built
	# after the snapshot's COPY in both); the difference is the apply
	a=(); b=(); ac=(); bc=()
	for _ in $(seq "$ROUNDS"); do
		psql_ -d postgres -c "DROP SCHEMA IF EXISTS s CASCADE"
		read -r w c <<<"$(restore_cpu "$SNAP")"; b+=("$w"); bc+=("$c")
		psql_ -d postgres -c "DROP SCHEMA IF EXISTS s CASCADE"
		read -r w c <<<"$(restore_cpu "$END_LSN")"; a+=("$w"); ac+=("$c")
	done
	T_ALL=$(median "${a[@]}"); T_BASE=$(median "${b[@]}")
	T_APPLY=$(calc "$T_ALL - $T_BASE")
	C_APPLY=$(calc "$(median "${ac[@]}") - $(median "${bc[@]}")")
	TXAPPLIED=$(psql_ -d postgres -c "BEGIN; DROP SCHEMA IF EXISTS s CASCADE; SELECT transactions FROM changestream.restore('s', target_lsn => '$END_LSN'); ROLLBACK" | grep -E '^[0-9]+$')
	t0=$(now)
	psql_ -d sub -c "CREATE SUBSCRIPTION bench CONNECTION 'host=$WORK port=$PORT dbname=postgres user=postgres' PUBLICATION changestream
		WITH (create_slot = false, slot_name = 'subslot', copy_data = false)"
	until [ "$(psql_ -d postgres -c "SELECT confirmed_flush_lsn >= '$END_LSN' FROM pg_replication_slots WHERE slot_name = 'subslot'")" = t ]; do sleep 0.05; done
	t1=$(now)
	T_SUB=$(calc "$t1 - $t0")
	# CPU time of the subscriber's two processes (both started with it)
	WS_PID=$(psql_ -d postgres -c "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'subslot'")
	AW_PID=$(psql_ -d sub -c "SELECT pid FROM pg_stat_subscription WHERE subname = 'bench' AND relid IS NULL ORDER BY pid LIMIT 1")
	C_SUB=$(calc "($(cut -d' ' -f1 "/proc/$WS_PID/schedstat") + $(cut -d' ' -f1 "/proc/$AW_PID/schedstat")) / 1e9")
	SAME=$(psql_ -d sub -c "SELECT md5(string_agg(a::text, '|' ORDER BY aid)) FROM pgbench_accounts a")
	SAME2=$(psql_ -d postgres -c "SELECT md5(string_agg(a::text, '|' ORDER BY aid)) FROM pgbench_accounts a")
	[ "$SAME" = "$SAME2" ] || echo "WARNING: the subscriber's pgbench_accounts differs from the source"
	R3=$(calc "$T_SUB / $T_APPLY" 2)
	R3CPU=$(calc "$C_SUB / $C_APPLY" 2)
	echo "restore() apply: $TXAPPLIED transactions in $T_APPLY s ($T_ALL s - snapshot only $T_BASE s); subscription: $T_SUB s; ratio $R3"
	echo "CPU: restore() apply $C_APPLY s; subscription (walsender + apply worker) $C_SUB s; ratio $R3CPU"
fi

verdict() { awk "BEGIN { exit !($1 >= $2) }" && echo PASS || echo FAIL; }
OUT=${READ_SIDE_OUT:-$BENCH_DIR/results/read_side.md}
{
	echo "| Measure | changestream | Peer, same run | Ratio | Target | Result |"
	echo "| --- | ---: | ---: | ---: | --- | --- |"
	part 1 && echo "| Decode $TXNS pgbench transactions ($ROWS change rows), median of $ROUNDS | \`changes()\` $(calc "$ROWS / $T_CHANGES" 0) rows/s | \`pg_logical_slot_peek_changes\` (test_decoding) $(calc "$TDROWS / $T_PEEK" 0) rows/s | ${R1}x | >= 1.0x | $(verdict "$R1" 1.0) |"
	part 2 && echo "| Snapshot load, $SNAPROWS rows, median of $ROUNDS | \`restore()\` $T_LOAD s | \`zcat | psql\` $T_ZCAT s | ${R2}x | >= 0.9x | $(verdict "$R2" 0.9) |"
	part 3 && echo "| Apply $TXAPPLIED transactions, median of $ROUNDS | \`restore()\` $T_APPLY s | subscription catching up $T_SUB s | ${R3}x | >= 1.0x | $(verdict "$R3" 1.0) |"
	part 3 && echo "| Same, CPU time | \`restore()\` $C_APPLY s | walsender + apply worker $C_SUB s | ${R3CPU}x | | |"
	echo
	echo "Machine: $(nproc) CPUs (load average $(cut -d" " -f1-3 /proc/loadavg) at the end), $(awk '/MemTotal/ { printf "%.1f GB", $2 / 1048576 }' /proc/meminfo), PostgreSQL $("$PGBIN/postgres" --version | awk '{ print $3 }'), $(date -u '+%Y-%m-%d %H:%M UTC'); scale $SCALE."
} | tee "$OUT"
