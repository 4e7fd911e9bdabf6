#!/usr/bin/env bash
# bench/replica.sh: the replica's figures of issue 31, section 8, in one
# run against one Ceph RGW on loopback; not part of CI.
#
#   bash bench/replica.sh      # SCALE=10 IDLE_SECS=30 LOAD_SECS=30 ROUNDS=3
#
# Starts a Ceph RGW (scripts/object-store.sh, its own state directory,
# stopped on exit) unless CS_OBJECT_STORE_ENV names one that runs, and one
# throwaway cluster (as the postgres user, scripts/lib.sh) archiving the
# pgbench tables with a replica at the default settings
# (replica_sync_interval 10s, segment_size 16MB, segment_timeout 5min),
# then measures:
#   requests   the uploader's request counters of status() over IDLE_SECS
#              with no load and over LOAD_SECS of pgbench (-c 4, no
#              throttle), each scaled to an hour
#   lag        status().replica_lag_seconds and replica_lag_bytes sampled
#              every second during the load: p50, p99, max
#   upload     the archive's finished files put again: a reload points
#              changestream.replica_url at a new prefix, and the uploader
#              starts over (marker, then every file); status() polled
#              without pause: time from its first PUT seen (the marker)
#              to the PUT of its last finished file (PUTs counted from
#              replica_put_requests; the active segment's tail objects,
#              which follow at replica_sync_interval, are not counted),
#              bytes from replica_bytes_sent.  Against `aws s3 cp --recursive` and
#              `s3cmd put --recursive` of the same files (the objects the
#              uploader put under generations/, hard links of the local
#              files) to other prefixes of the same bucket, each at its
#              defaults
#   restore    restore() of every pgbench table to the end of the load,
#              from the local archive and from the bucket
#              (archive_directory => 'replica'), ROUNDS rounds, the two
#              interleaved, each into a new schema; the restored tables of
#              the two are compared (row count and md5 of the rows)
# SKIP_BUILD=1 uses the installed changestream.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/lib.sh
. "$ROOT/scripts/lib.sh"
SCALE=${SCALE:-10}
IDLE_SECS=${IDLE_SECS:-30}
LOAD_SECS=${LOAD_SECS:-30}
ROUNDS=${ROUNDS:-3}

cs_install_deps >/dev/null
[ "${SKIP_BUILD:-0}" = 1 ] || cs_build_install >/dev/null

W=$(cs_mkwork changestream-replicabench)
PORT=$(cs_free_port 55750)
STORE_DIR=
SAMPLER=
cleanup() {
	[ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null
	cs_cluster_stop "$W" immediate
	[ -n "$STORE_DIR" ] && CS_OBJECT_STORE_DIR=$STORE_DIR bash "$ROOT/scripts/object-store.sh" stop >/dev/null
	rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if [ -z "${CS_OBJECT_STORE_ENV:-}" ] || [ ! -r "$CS_OBJECT_STORE_ENV" ]; then
	STORE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/changestream-object-store.XXXXXX")
	CS_OBJECT_STORE_ENV=$(CS_OBJECT_STORE_DIR=$STORE_DIR bash "$ROOT/scripts/object-store.sh" start)
fi
# shellcheck disable=SC1090
. "$CS_OBJECT_STORE_ENV"
BUCKET=cs-bench-$$
aws() {
	AWS_ACCESS_KEY_ID=$CS_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CS_S3_SECRET_KEY \
		AWS_DEFAULT_REGION=$CS_S3_REGION AWS_CONFIG_FILE=/dev/null \
		AWS_SHARED_CREDENTIALS_FILE=/dev/null \
		/usr/bin/aws --endpoint-url "$CS_S3_ENDPOINT" "$@"
}
aws s3api create-bucket --bucket "$BUCKET" >/dev/null
HOSTPORT=${CS_S3_ENDPOINT#http://}
cat >"$W/s3cfg" <<CFG
[default]
access_key = $CS_S3_ACCESS_KEY
secret_key = $CS_S3_SECRET_KEY
host_base = $HOSTPORT
host_bucket = $HOSTPORT
bucket_location = $CS_S3_REGION
use_https = False
signature_v2 = False
CFG

# the key file, owned by the server's user, mode 0600
printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
	"$CS_S3_ACCESS_KEY" "$CS_S3_SECRET_KEY" | cs_as_pg tee "$W/credentials" >/dev/null
cs_as_pg chmod 0600 "$W/credentials"

cs_cluster_init "$W" "$PORT" <<CONF
changestream.directory = '$W/archive'
changestream.replica_url = 's3://$BUCKET/first'
changestream.replica_endpoint = '$CS_S3_ENDPOINT'
changestream.replica_region = '$CS_S3_REGION'
changestream.replica_credentials = '$W/credentials'
max_wal_senders = 10
max_replication_slots = 10
max_wal_size = 2GB
CONF
cs_cluster_start "$W" "$W/log"
psql() { cs_cluster_psql "$W" "$PORT" -q "$@"; }
status() { psql -Atc "SELECT $1 FROM changestream.status()"; }
now() { date +%s.%N; }
# seconds (two decimals) a command takes; its output is discarded
seconds_of() {
	local t0 t1
	t0=$(now)
	"$@" >/dev/null || return
	t1=$(now)
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }'
}
phase() { echo "phase $1: $(date -u +%T)" >&2; }

cs_as_pg "$PG_BINDIR/pgbench" -i -q -s "$SCALE" -h "$W" -p "$PORT" postgres >"$W/pgbench_init.log" 2>&1
psql -c "CREATE PUBLICATION changestream FOR TABLE pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history" \
	-c "CREATE EXTENSION changestream"
# in the bucket: the opening snapshot, and the uploader idle
caught_up="state = 'streaming' AND replica_state = 'idle' AND replica_flushed_lsn IS NOT NULL AND replica_backlog_files = 0 AND replica_lag_bytes = 0"
wait_up() {
	for _ in $(seq 1 "$1"); do
		[ "$(status "$caught_up")" = t ] && return 0
		sleep 0.2
	done
	cs_die "the bucket did not catch up: $(status '*')"
}
wait_up 900

counters() { status "replica_put_requests || ' ' || replica_get_requests || ' ' || replica_list_requests || ' ' || replica_delete_requests || ' ' || replica_bytes_sent"; }
# per_hour BEFORE AFTER SECS: the counters' growth scaled to an hour
per_hour() {
	awk -v a="$1" -v b="$2" -v s="$3" 'BEGIN {
		split(a, x, " "); split(b, y, " ");
		for (i = 1; i <= 5; i++) r[i] = (y[i] - x[i]) * 3600 / s;
		printf "%.0f %.0f %.0f %.0f %.1f", r[1], r[2], r[3], r[4], r[5] / 1048576 }'
}

# 1. requests, idle
phase idle
c0=$(counters); t0=$(now)
sleep "$IDLE_SECS"
c1=$(counters); t1=$(now)
idle=$(per_hour "$c0" "$c1" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")

# 2. requests and lag under load
phase load
sampler() {
	while :; do
		status "coalesce(replica_lag_seconds, -1) || ' ' || coalesce(replica_lag_bytes, -1)" >>"$W/lag" || true
		sleep 1
	done
}
sampler &
SAMPLER=$!
c0=$(counters); t0=$(now)
cs_as_pg "$PG_BINDIR/pgbench" -n -c 4 -j 2 -T "$LOAD_SECS" -h "$W" -p "$PORT" postgres >"$W/pgbench.log" 2>&1 ||
	{ cat "$W/pgbench.log"; cs_die "pgbench failed"; }
c1=$(counters); t1=$(now)
kill "$SAMPLER"; wait "$SAMPLER" 2>/dev/null || true; SAMPLER=
load=$(per_hour "$c0" "$c1" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")
tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$W/pgbench.log" | head -1)
target=$(psql -Atc "SELECT pg_current_wal_lsn()")
# the end of the load sealed, compressed and up (the readers of the bucket
# read sealed segments only): a short segment_timeout for a moment
psql -c "ALTER SYSTEM SET changestream.segment_timeout = '1s'" -c "SELECT pg_reload_conf()" >/dev/null
gen=$(psql -Atc "SELECT generation FROM changestream.generations() ORDER BY 1 DESC LIMIT 1")
for _ in $(seq 1 300); do
	cs_as_pg "$PG_BINDIR/pgbench" -n -c 1 -t 10 -h "$W" -p "$PORT" postgres >/dev/null 2>&1
	[ "$(psql -Atc "SELECT max(end_lsn) > '$target'::pg_lsn FROM changestream.wal_segments('$gen') WHERE compressed")" = t ] && break
	sleep 0.5
done
psql -c "ALTER SYSTEM RESET changestream.segment_timeout" -c "SELECT pg_reload_conf()" >/dev/null
wait_up 900

# pct FILE COLUMN P: the P-th percentile of a column of the samples
pct() {
	awk -v c="$2" '$c >= 0 { print $c }' "$1" | sort -g |
		awk -v p="$3" '{ a[NR] = $1 } END { if (NR == 0) { print "-"; exit } i = int(NR * p / 100 + 0.5); if (i < 1) i = 1; print a[i] }'
}

phase upload
# 3. upload throughput: the uploader starts over under a new prefix; timed
# from its first PUT (the marker: the reload is taken at its next pass, up
# to replica_sync_interval later) to the bucket holding everything
c0=$(counters)
psql -c "ALTER SYSTEM SET changestream.replica_url = 's3://$BUCKET/second'" -c "SELECT pg_reload_conf()" >/dev/null
# samples "time PUTs bytes_sent caught_up" until the bucket has caught up
for _ in $(seq 1 3000); do
	line=$(status "replica_put_requests || ' ' || replica_bytes_sent || ' ' || ($caught_up)")
	echo "$(now) $line" >>"$W/upload"
	[ "${line##* }" = t ] && break
done
c1=$(counters)

# the same files for the command-line clients: what the uploader put
# under generations/, as hard links of the local files
aws s3api list-objects-v2 --bucket "$BUCKET" --prefix second/generations/ \
	--query 'Contents[].[Key]' --output text >"$W/keys"
mkdir "$W/files"
while read -r key; do
	rel=${key#second/}
	mkdir -p "$W/files/$(dirname "$rel")"
	ln "$W/archive/$rel" "$W/files/$rel"
done <"$W/keys"
files=$(wc -l <"$W/keys")
file_bytes=$(find "$W/files" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
# from the first PUT seen (the marker) to the PUT of the last of the files
# (the active segment's tail objects follow at replica_sync_interval)
read -r up_secs up_bytes up_puts < <(awk -v p0="${c0%% *}" -v n="$files" -v b0="$(echo "$c0" | awk '{ print $5 }')" '
	$2 > p0 && t0 == "" { t0 = $1 }
	$2 >= p0 + 1 + n { printf "%.2f %d %d\n", $1 - t0, $3 - b0, $2 - p0; done = 1; exit }
	END { if (!done) print "0 0 0" }' "$W/upload")
[ "$up_puts" -gt 0 ] || cs_die "the uploader's PUTs were not seen: $(tail -3 "$W/upload")"

# each client's start-up: one object of 1 byte
mkdir "$W/one" && echo >"$W/one/x"
aws_start=$(seconds_of aws s3 cp --recursive --only-show-errors "$W/one" "s3://$BUCKET/one-aws/")
s3cmd_start=$(seconds_of s3cmd -c "$W/s3cfg" --quiet put --recursive "$W/one/" "s3://$BUCKET/one-s3cmd/")
aws_secs=$(seconds_of aws s3 cp --recursive --only-show-errors "$W/files" "s3://$BUCKET/cli-aws/")
s3cmd_secs=$(seconds_of s3cmd -c "$W/s3cfg" --quiet put --recursive "$W/files/" "s3://$BUCKET/cli-s3cmd/")
for p in cli-aws cli-s3cmd; do
	n=$(aws s3api list-objects-v2 --bucket "$BUCKET" --prefix "$p/generations/" --query 'length(Contents)' --output text)
	[ "$n" = "$files" ] || cs_die "$p holds $n objects, not $files"
done

# 4. restore() from the local archive and from the bucket
phase restore
digest() {
	psql -Atc "SELECT string_agg(n || ':' || m, ' ' ORDER BY t) FROM (
		SELECT 'accounts' t, count(*) n, md5(string_agg(a::text, '|' ORDER BY aid)) m FROM $1.pgbench_accounts a
		UNION ALL SELECT 'branches', count(*), md5(string_agg(b::text, '|' ORDER BY bid)) FROM $1.pgbench_branches b
		UNION ALL SELECT 'tellers', count(*), md5(string_agg(t::text, '|' ORDER BY tid)) FROM $1.pgbench_tellers t
		UNION ALL SELECT 'history', count(*), md5(string_agg(h::text, '|' ORDER BY h::text)) FROM $1.pgbench_history h) d"
}
restore_once() {
	local schema=$1 where=$2 t0 t1
	psql -c "CREATE SCHEMA $schema"
	t0=$(now)
	PGOPTIONS='-c client_min_messages=warning' psql -Atc "SELECT transactions || ' ' || changes || ' ' || snapshot_bytes || ' ' || wal_bytes FROM changestream.restore('$schema', '$gen', target_lsn => '$target'$where)" >"$W/$schema.out"
	t1=$(now)
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", b - a }' >>"$W/restore_$3"
}
ref=
for r in $(seq 1 "$ROUNDS"); do
	restore_once "l$r" "" local
	restore_once "b$r" ", archive_directory => 'replica'" bucket
	dl=$(digest "l$r"); db=$(digest "b$r")
	[ "$dl" = "$db" ] || cs_die "round $r: the tables restored from the bucket differ from the local ones: $dl / $db"
	[ -z "$ref" ] && ref=$dl
	[ "$dl" = "$ref" ] || cs_die "round $r restored other tables than round 1"
	psql -c "DROP SCHEMA l$r CASCADE" -c "DROP SCHEMA b$r CASCADE"
done
read -r r_tx r_changes r_snap r_wal <"$W/l1.out"
med() { sort -g "$1" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

mbs() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.1f", (s > 0 ? b / 1048576 / s : 0) }'; }
up_mbs=$(mbs "$up_bytes" "$up_secs")
aws_mbs=$(mbs "$file_bytes" "$aws_secs")
s3cmd_mbs=$(mbs "$file_bytes" "$s3cmd_secs")

echo "### Upload throughput (the archive's $files finished files, $(mbs "$file_bytes" 1) MB)"
echo
net() { awk -v b="$1" -v s="$2" -v z="$3" 'BEGIN { printf "%.1f", (s - z > 0 ? b / 1048576 / (s - z) : 0) }'; }
aws_net=$(net "$file_bytes" "$aws_secs" "$aws_start")
s3cmd_net=$(net "$file_bytes" "$s3cmd_secs" "$s3cmd_start")
ratio() { awk -v u="$1" -v c="$2" 'BEGIN { printf "%.2f", (c > 0 ? u / c : 0) }'; }
echo "| client | MB | seconds | MB/s | uploader / client | start-up (1 byte, s) | MB/s without it | uploader / that |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
echo "| uploader ($up_puts PUTs, the marker included) | $(mbs "$up_bytes" 1) | $up_secs | $up_mbs | 1.00 | | | |"
echo "| aws s3 cp --recursive | $(mbs "$file_bytes" 1) | $aws_secs | $aws_mbs | $(ratio "$up_mbs" "$aws_mbs") | $aws_start | $aws_net | $(ratio "$up_mbs" "$aws_net") |"
echo "| s3cmd put --recursive | $(mbs "$file_bytes" 1) | $s3cmd_secs | $s3cmd_mbs | $(ratio "$up_mbs" "$s3cmd_mbs") | $s3cmd_start | $s3cmd_net | $(ratio "$up_mbs" "$s3cmd_net") |"
echo
echo "### Replica lag under pgbench ($LOAD_SECS s, 4 clients, $tps tps, $(wc -l <"$W/lag") samples)"
echo
echo "| | p50 | p99 | max |"
echo "|---|---:|---:|---:|"
echo "| replica_lag_seconds | $(pct "$W/lag" 1 50) | $(pct "$W/lag" 1 99) | $(pct "$W/lag" 1 100) |"
echo "| replica_lag_bytes | $(pct "$W/lag" 2 50) | $(pct "$W/lag" 2 99) | $(pct "$W/lag" 2 100) |"
echo
echo "### Requests per hour at the defaults"
echo
echo "| | PUT | GET | LIST | DELETE | MB sent |"
echo "|---|---:|---:|---:|---:|---:|"
echo "| idle ($IDLE_SECS s) | ${idle// / | } |"
echo "| pgbench ($LOAD_SECS s) | ${load// / | } |"
echo
awk -v i="$idle" -v l="$load" 'BEGIN {
	split(i, x, " "); split(l, y, " ");
	# AWS S3 Standard, us-east-1: PUT, COPY, POST, LIST $0.005 per 1,000; GET $0.0004 per 1,000; DELETE free
	ci = 24 * ((x[1] + x[3]) * 0.005 + x[2] * 0.0004) / 1000;
	cl = 24 * ((y[1] + y[3]) * 0.005 + y[2] * 0.0004) / 1000;
	printf "Request cost per day on AWS S3 Standard: idle $%.4f (%d PUTs), under this load $%.4f (%d PUTs).\n", ci, 24 * x[1], cl, 24 * y[1] }'
echo
echo "### restore() to the end of the load ($r_tx transactions, $r_changes changes, snapshot $(mbs "$r_snap" 1) MB, WAL $(mbs "$r_wal" 1) MB)"
echo
echo "| from | rounds (s) | median (s) |"
echo "|---|---|---:|"
echo "| local archive | $(paste -sd' ' "$W/restore_local") | $(med "$W/restore_local") |"
echo "| bucket (archive_directory => 'replica') | $(paste -sd' ' "$W/restore_bucket") | $(med "$W/restore_bucket") |"
echo
awk -v l="$(med "$W/restore_local")" -v b="$(med "$W/restore_bucket")" 'BEGIN { printf "bucket / local: %.2fx.\n", b / l }'
echo
echo "Machine: $(nproc) CPUs, PostgreSQL $("$PG_BINDIR/postgres" --version | awk '{ print $3 }'), Ceph RGW on loopback, pgbench scale $SCALE, $(date -u '+%Y-%m-%d %H:%M UTC')."
