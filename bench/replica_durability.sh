#!/usr/bin/env bash
# bench/replica_durability.sh: commit latency with the archiver as the
# synchronous standby and changestream.replica_durability = remote (a
# commit returns once its change is in the bucket) against local (once it
# is in the local archive), issue 31 section 3; not part of CI.
#
#   bash bench/replica_durability.sh     # SECS=20 per case, ROUNDS=3
#
# Starts a Ceph RGW (scripts/object-store.sh, its own state directory,
# stopped on exit) unless CS_OBJECT_STORE_ENV names one that runs, and one
# throwaway cluster (as the postgres user, scripts/lib.sh) with the replica
# settings, changestream.synchronous = on and synchronous_standby_names =
# 'changestream'.  pgbench runs single-row INSERTs from one client (-c 1,
# -T SECS, per-transaction latencies logged with -l), in rounds, the two
# cases interleaved within each round (a reload switches
# replica_durability):
#   local    the slot is confirmed at the local fsync
#   remote   the slot is confirmed up to what is in the bucket
# Prints p50 and p99 of each case (milliseconds, over all rounds' commits),
# remote's ratio to local, and the PUTs the uploader sent.
# SKIP_BUILD=1 uses the installed changestream.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/lib.sh
. "$ROOT/scripts/lib.sh"
SECS=${SECS:-20}
ROUNDS=${ROUNDS:-3}

cs_install_deps >/dev/null
[ "${SKIP_BUILD:-0}" = 1 ] || cs_build_install >/dev/null

W=$(cs_mkwork changestream-replicabench)
PORT=$(cs_free_port 55700)
STORE_DIR=
cleanup() {
	cs_cluster_stop "$W" immediate
	[ -n "$STORE_DIR" ] && CS_OBJECT_STORE_DIR=$STORE_DIR bash "$ROOT/scripts/object-store.sh" stop >/dev/null
	rm -rf "$W"
}
trap cleanup EXIT

if [ -z "${CS_OBJECT_STORE_ENV:-}" ] || [ ! -r "$CS_OBJECT_STORE_ENV" ]; then
	STORE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/changestream-object-store.XXXXXX")
	CS_OBJECT_STORE_ENV=$(CS_OBJECT_STORE_DIR=$STORE_DIR bash "$ROOT/scripts/object-store.sh" start)
fi
# shellcheck disable=SC1090
. "$CS_OBJECT_STORE_ENV"
BUCKET=cs-bench-$$
AWS_ACCESS_KEY_ID=$CS_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CS_S3_SECRET_KEY \
	AWS_DEFAULT_REGION=$CS_S3_REGION AWS_CONFIG_FILE=/dev/null \
	AWS_SHARED_CREDENTIALS_FILE=/dev/null \
	/usr/bin/aws --endpoint-url "$CS_S3_ENDPOINT" s3api create-bucket --bucket "$BUCKET" >/dev/null

# the key file, owned by the server's user, mode 0600
printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
	"$CS_S3_ACCESS_KEY" "$CS_S3_SECRET_KEY" | cs_as_pg tee "$W/credentials" >/dev/null
cs_as_pg chmod 0600 "$W/credentials"

cs_cluster_init "$W" "$PORT" <<CONF
changestream.directory = '$W/archive'
changestream.synchronous = on
changestream.replica_url = 's3://$BUCKET/bench'
changestream.replica_endpoint = '$CS_S3_ENDPOINT'
changestream.replica_region = '$CS_S3_REGION'
changestream.replica_credentials = '$W/credentials'
max_wal_senders = 10
max_replication_slots = 10
CONF
cs_cluster_start "$W" "$W/log"
psql() { cs_cluster_psql "$W" "$PORT" -q "$@"; }

psql -c "CREATE TABLE t (id bigserial PRIMARY KEY, v text NOT NULL)" \
	-c "CREATE PUBLICATION changestream FOR TABLE t" \
	-c "CREATE EXTENSION changestream"
for _ in $(seq 1 120); do
	[ "$(psql -Atc "SELECT state = 'streaming' AND replica_state = 'idle' AND replica_flushed_lsn IS NOT NULL FROM changestream.status()")" = t ] && break
	sleep 1
done
psql -c "ALTER SYSTEM SET synchronous_standby_names = 'changestream'" \
	-c "SELECT pg_reload_conf()" >/dev/null
echo "INSERT INTO t (v) VALUES ('one row');" | cs_as_pg tee "$W/insert.sql" >/dev/null

# setup CASE: replica_durability for the case
setup() {
	psql -c "ALTER SYSTEM SET changestream.replica_durability = $1" \
		-c "SELECT pg_reload_conf()" >/dev/null
	sleep 2
	[ "$(psql -Atc "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'changestream' AND sync_state = 'sync'")" = 1 ] ||
		cs_die "the archiver is not the synchronous standby"
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

CASES="local remote"
puts_before=$(psql -Atc "SELECT replica_put_requests FROM changestream.status()")
for r in $(seq 1 "$ROUNDS"); do
	for c in $CASES; do
		setup "$c"
		run "$c" "$r"
	done
done
puts_after=$(psql -Atc "SELECT replica_put_requests FROM changestream.status()")
psql -c "ALTER SYSTEM RESET synchronous_standby_names" -c "SELECT pg_reload_conf()" >/dev/null

# pct FILE P: the P-th percentile of the latencies in FILE, in ms
pct() {
	sort -n "$1" | awk -v p="$2" '{ a[NR] = $1 } END { i = int(NR * p / 100 + 0.5); if (i < 1) i = 1; printf "%.3f", a[i] / 1000 }'
}
echo "| replica_durability | commits | p50 (ms) | p99 (ms) |"
echo "|---|---|---|---|"
for c in $CASES; do
	echo "| $c | $(wc -l <"$W/$c.lat") | $(pct "$W/$c.lat" 50) | $(pct "$W/$c.lat" 99) |"
done
awk -v l50="$(pct "$W/local.lat" 50)" -v r50="$(pct "$W/remote.lat" 50)" \
	-v l99="$(pct "$W/local.lat" 99)" -v r99="$(pct "$W/remote.lat" 99)" 'BEGIN {
	printf "\nremote / local: p50 %.2fx (+%.3f ms), p99 %.2fx (+%.3f ms).\n",
		(l50 > 0 ? r50 / l50 : 0), r50 - l50, (l99 > 0 ? r99 / l99 : 0), r99 - l99 }'
echo "PUTs during the runs: $((puts_after - puts_before)) for $(($(wc -l <"$W/local.lat") + $(wc -l <"$W/remote.lat"))) commits."
echo "Machine: $(nproc) CPUs, PostgreSQL $("$PG_BINDIR/postgres" --version | awk '{ print $3 }'), Ceph RGW on loopback, $SECS s x $ROUNDS rounds per case, $(date -u '+%Y-%m-%d %H:%M UTC')."
