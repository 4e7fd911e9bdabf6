#!/usr/bin/env bash
# scripts/demo.sh: changestream demo (the README's demo command).
#
#   bash scripts/demo.sh
#
# Installs what is missing (apt), builds and installs the extension, starts a
# throwaway PostgreSQL cluster (as the "postgres" user, in a temporary
# directory, on a free port) with changestream preloaded, creates the
# pgbench tables and the publication, then sets changestream.directory (a
# reload) so that the archiver starts with everything it needs, archives a
# ~30 s pgbench run, prints generations(), status(), snapshots(), wal_segments()
# and the archive's files, then stops the cluster and removes it.  With the
# replica (the default), it also starts a throwaway S3 store (a one-node
# Ceph RADOS Gateway on 127.0.0.1, scripts/object-store.sh, ~10 s), points
# changestream.replica_* at a bucket there, and at the end lists the
# bucket and checks that every finished file of the archive is in it.
#
# Environment:
#   KEEP=1         leave the cluster running and its directory in place
#   DURATION=30    pgbench run time in seconds     CLIENTS=4   pgbench clients
#   SCALE=10       pgbench scale factor            SKIP_BUILD=1  reuse the installed build
#   TIMEOUT=120    seconds to wait for the worker to stream / to catch up
#   REPLICA=0      no replica (no S3 store, nothing uploaded)

set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION=${DURATION:-30}
CLIENTS=${CLIENTS:-4}
SCALE=${SCALE:-10}
TIMEOUT=${TIMEOUT:-120}
REPLICA=${REPLICA:-1}
BUCKET=changestream-demo

t_start=$(cs_now)

if [ "${SKIP_BUILD:-0}" != 1 ]; then
	cs_section "dependencies"
	cs_install_deps
	cs_section "build and install"
	cs_build_install
fi

DEMO=$(cs_mkwork changestream-demo)
PGDATA_DIR=$DEMO/data
ARCHIVE=$DEMO/archive
LOG=$DEMO/postgres.log
PORT=$(cs_free_port 54330)
started=0
ok=0

# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
	local rc=$?
	if [ "$ok" != 1 ] && [ -f "$LOG" ]; then
		cs_tail "$LOG" 40
	fi
	if [ "${KEEP:-0}" = 1 ]; then
		cs_section "kept"
		cs_info "cluster: $PGDATA_DIR (port $PORT, socket directory $DEMO)"
		cs_info "connect: runuser -u $PG_OS_USER -- $PG_BINDIR/psql -h $DEMO -p $PORT -d postgres"
		cs_info "stop:    runuser -u $PG_OS_USER -- $PG_BINDIR/pg_ctl -D $PGDATA_DIR stop"
		if [ "$REPLICA" = 1 ]; then
			cs_info "store:   CS_OBJECT_STORE_DIR=$DEMO/object-store bash $CS_ROOT/scripts/object-store.sh stop"
		fi
		cs_info "then:    rm -rf $DEMO"
	else
		if [ "$started" = 1 ]; then
			cs_cluster_stop "$DEMO"
		fi
		if [ "$REPLICA" = 1 ]; then
			CS_OBJECT_STORE_DIR=$DEMO/object-store bash "$CS_ROOT/scripts/object-store.sh" stop >/dev/null 2>&1 || true
		fi
		rm -rf "$DEMO"
	fi
	exit "$rc"
}
trap cleanup EXIT

psql_demo() {
	cs_cluster_psql "$DEMO" "$PORT" -v ON_ERROR_STOP=1 "$@"
}
# one value, unaligned, no headers
psql_value() {
	psql_demo -qAt -c "$1"
}

# aws: Debian's awscli against the demo's store, with its keys only
aws_demo() {
	AWS_ACCESS_KEY_ID=$CS_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$CS_S3_SECRET_KEY \
		AWS_DEFAULT_REGION=$CS_S3_REGION AWS_CONFIG_FILE=/dev/null \
		AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_PAGER='' AWS_EC2_METADATA_DISABLED=true \
		AWS_REQUEST_CHECKSUM_CALCULATION=when_required AWS_RESPONSE_CHECKSUM_VALIDATION=when_required \
		/usr/bin/aws --endpoint-url "$CS_S3_ENDPOINT" "$@"
}

REPLICA_CONF=""
if [ "$REPLICA" = 1 ]; then
	cs_section "S3 store for the replica (scripts/object-store.sh)"
	envfile=$(CS_OBJECT_STORE_DIR=$DEMO/object-store bash "$CS_ROOT/scripts/object-store.sh" start | tail -n 1) ||
		cs_die "the S3 store did not start"
	# shellcheck disable=SC1090
	. "$envfile"
	aws_demo s3api create-bucket --bucket "$BUCKET" >/dev/null || cs_die "could not create bucket $BUCKET"
	cs_as_pg install -m 0600 "$CS_S3_CREDENTIALS" "$DEMO/s3-credentials"
	cs_info "bucket s3://$BUCKET at $CS_S3_ENDPOINT; keys in $DEMO/s3-credentials (AWS shared credentials format, 0600)"
	REPLICA_CONF="changestream.replica_url = 's3://$BUCKET/demo'
changestream.replica_endpoint = '$CS_S3_ENDPOINT'
changestream.replica_credentials = '$DEMO/s3-credentials'"
fi

cs_section "throwaway cluster"
cs_as_pg mkdir -p "$ARCHIVE"
# No changestream.directory yet: the archiver stays 'disabled' (not in
# error) until the tables and the publication exist, as on a server where
# the DBA creates the publication before pointing the archiver at a
# directory.  max_slot_wal_keep_size bounds the WAL a stuck archive's slot
# keeps (unlimited, the maintenance worker warns).
cs_cluster_init "$DEMO" "$PORT" <<EOF || cs_die "initdb failed"
max_slot_wal_keep_size = '1GB'
changestream.segment_size = '1MB'
changestream.status_interval = '1s'
$REPLICA_CONF
EOF
sed -n '/---- throwaway cluster/,$p' "$PGDATA_DIR/postgresql.conf"
cs_cluster_start "$DEMO" "$LOG"
started=1
cs_info "started PostgreSQL $(psql_value 'SHOW server_version') in $PGDATA_DIR, port $PORT"

cs_section "pgbench -i -s $SCALE"
cs_as_pg "$PG_BINDIR/pgbench" -h "$DEMO" -p "$PORT" -i -s "$SCALE" -q postgres 2>&1 | tail -n 3

cs_section "publication, extension, archive directory"
# pgbench_history has no primary key: without a replica identity, UPDATE
# and DELETE on a published table fail, so give it REPLICA IDENTITY FULL.
psql_demo -e <<EOF
ALTER TABLE pgbench_history REPLICA IDENTITY FULL;
CREATE PUBLICATION changestream
    FOR TABLE pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history;
CREATE EXTENSION changestream;
ALTER SYSTEM SET changestream.directory = '$ARCHIVE';
SELECT pg_reload_conf();
EOF

cs_section "waiting for the archiver to stream"
deadline=$(( $(cs_now) + TIMEOUT ))
last=""
while :; do
	line=$(psql_value "SELECT state || CASE WHEN state = 'error' THEN coalesce(': ' || last_error, '') ELSE '' END FROM changestream.status()")
	if [ "$line" != "$last" ]; then
		cs_info "status: $line"
		last=$line
	fi
	case $line in streaming*) break ;; esac
	if [ "$(cs_now)" -ge "$deadline" ]; then
		cs_die "the archiver did not reach state 'streaming' within ${TIMEOUT}s"
	fi
	sleep 1
done

cs_section "pgbench -c $CLIENTS -T $DURATION"
cs_as_pg "$PG_BINDIR/pgbench" -h "$DEMO" -p "$PORT" -c "$CLIENTS" -j 2 \
	-T "$DURATION" -P 5 postgres 2>&1 | tee "$DEMO/pgbench.out" |
	grep -E '^(progress|number of transactions actually|tps|latency average)'
pgbench_xacts=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$DEMO/pgbench.out")

cs_section "waiting for the archive to catch up"
target=$(psql_value "SELECT pg_current_wal_lsn()")
cs_info "pg_current_wal_lsn() after pgbench: $target"
t0=$(cs_now)
caught_up=0
while [ $(( $(cs_now) - t0 )) -lt "$TIMEOUT" ]; do
	if [ "$(psql_value "SELECT coalesce(flushed_lsn >= '$target'::pg_lsn, false) FROM changestream.status()")" = t ]; then
		caught_up=1
		break
	fi
	sleep 1
done
flushed=$(psql_value "SELECT flushed_lsn FROM changestream.status()")
if [ "$caught_up" = 1 ]; then
	cs_info "flushed_lsn $flushed >= $target after $(( $(cs_now) - t0 ))s: everything is durable in the archive"
else
	cs_info "WARNING: flushed_lsn is $flushed, still behind $target after ${TIMEOUT}s"
fi

gen=$(psql_value "SELECT coalesce((SELECT generation FROM changestream.status()),
                                  (SELECT max(generation) FROM changestream.generations()))")

# Sealed segments are compressed when the stream goes quiet (or, under
# sustained load, as fast as they are sealed); give that a moment.
t0=$(cs_now)
while [ $(( $(cs_now) - t0 )) -lt 60 ]; do
	raw=$(psql_value "SELECT count(*) FROM changestream.wal_segments('$gen') s
	                  WHERE NOT compressed AND segment_index <
	                        (SELECT max(segment_index) FROM changestream.wal_segments('$gen'))")
	[ "$raw" = 0 ] && break
	sleep 1
done
cs_info "sealed segments compressed after $(( $(cs_now) - t0 ))s (still raw: $raw)"

bucket_missing=0
bucket_objects=0
if [ "$REPLICA" = 1 ]; then
	cs_section "waiting for the replica to catch up"
	# every finished file (sealed .gz segments, snapshots, identity files)
	# must be in the bucket with its size; the active raw segment is not
	bucket_compare() {
		aws_demo s3 ls --recursive "s3://$BUCKET/demo/" >"$DEMO/bucket.txt" || return 1
		bucket_objects=$(wc -l <"$DEMO/bucket.txt")
		bucket_missing=0
		: >"$DEMO/bucket-missing.txt"
		while IFS=' ' read -r size rel; do
			grep -q " $size demo/$rel\$" "$DEMO/bucket.txt" ||
				{ echo "$rel" >>"$DEMO/bucket-missing.txt"; bucket_missing=$((bucket_missing + 1)); }
		done < <(cd "$ARCHIVE" && find generations -type f \( -name '*.wal.gz' -o -name '*.snapshot.gz' -o -name generation \) -printf '%s %p\n')
	}
	t0=$(cs_now)
	while :; do
		bucket_compare || cs_die "could not list the bucket"
		[ "$bucket_missing" = 0 ] && break
		[ $(( $(cs_now) - t0 )) -ge "$TIMEOUT" ] && break
		sleep 1
	done
	cs_info "every finished file in the bucket after $(( $(cs_now) - t0 ))s (still missing: $bucket_missing)"
	sed 's/^/not in the bucket (or another size): /' "$DEMO/bucket-missing.txt"
	psql_demo -c "SELECT replica_state, replica_flushed_lsn, flushed_lsn, replica_lag_bytes,
	                     replica_backlog_files, replica_put_requests, replica_bytes_sent
	                FROM changestream.status()"

	cs_section "the bucket: aws s3 ls --recursive s3://$BUCKET/demo/"
	awk '{ printf "%12s  %s\n", $3, $4 }' "$DEMO/bucket.txt" |
		awk 'NR <= 12 { print; next } { tail[NR] = $0 } END { if (NR > 15) printf "%12s  ... %d more ...\n", "", NR - 15; for (i = (NR > 15 ? NR - 2 : 13); i <= NR; i++) if (i in tail) print tail[i] }'
	cs_info "bucket: $bucket_objects objects; finished local files missing from it: $bucket_missing"
fi

cs_section "SELECT * FROM changestream.generations()"
psql_demo -c "SELECT * FROM changestream.generations()"

cs_section "is it healthy? (changestream.stat_archiver)"
psql_demo -x -c "SELECT healthy, state, error_current, last_error, lag_bytes, lag_seconds,
                        last_archived_commit_at, replica_state, slot_wal_status
                   FROM changestream.stat_archiver"
healthy=$(psql_value "SELECT healthy FROM changestream.stat_archiver")

cs_section "SELECT * FROM changestream.status()"
psql_demo -x -c "SELECT * FROM changestream.status()"

if [ -n "$gen" ]; then
	cs_section "SELECT * FROM changestream.snapshots('$gen')"
	psql_demo -c "SELECT * FROM changestream.snapshots('$gen')"

	cs_section "SELECT * FROM changestream.wal_segments('$gen')"
	psql_demo -c "SELECT * FROM changestream.wal_segments('$gen')"

	cs_section "archived pgoutput messages by type (wal_records('$gen'))"
	psql_demo <<EOF
SELECT chr(get_byte(data, 0)) AS type,
       CASE chr(get_byte(data, 0))
         WHEN 'B' THEN 'begin'    WHEN 'C' THEN 'commit'
         WHEN 'I' THEN 'insert'   WHEN 'U' THEN 'update'
         WHEN 'D' THEN 'delete'   WHEN 'T' THEN 'truncate'
         WHEN 'R' THEN 'relation' WHEN 'Y' THEN 'type'
         WHEN 'O' THEN 'origin'   WHEN 'M' THEN 'message'
         ELSE '?' END AS message,
       count(*) AS count
  FROM changestream.wal_records('$gen')
 WHERE length(data) > 0
 GROUP BY 1, 2
 ORDER BY 3 DESC;
EOF
fi

cs_section "archive files ($ARCHIVE)"
if command -v tree >/dev/null 2>&1; then
	tree -a -h --noreport "$ARCHIVE"
else
	# An indented listing: size in bytes, then the name.  In a long run of
	# sealed segments only the first and last few are shown.
	(cd "$ARCHIVE" && find . -mindepth 1 -printf '%y %s %P\n' | sort -k3 |
		awk '
		function flush_run(   i) {
			if (nrun <= 8) { for (i = 1; i <= nrun; i++) print run[i] }
			else {
				for (i = 1; i <= 4; i++) print run[i]
				printf "%12s  %s... %d more sealed segments ...\n", "", runindent, nrun - 7
				for (i = nrun - 2; i <= nrun; i++) print run[i]
			}
			nrun = 0
		}
		{
			n = split($3, part, "/"); indent = sprintf("%*s", 2 * (n - 1), "")
			if ($1 == "d") line = sprintf("%12s  %s%s/", "", indent, part[n])
			else line = sprintf("%12s  %s%s", $2, indent, part[n])
			if (part[n] ~ /\.wal\.gz$/) { run[++nrun] = line; runindent = indent; next }
			flush_run(); print line
		}
		END { flush_run() }')
fi
cs_info "total: $(du -sh "$ARCHIVE" | cut -f1)"

sealed=$(find "$ARCHIVE/generations" -path '*/wal/*' -name '*.wal.gz' | wc -l)
raw=$(find "$ARCHIVE/generations" -path '*/wal/*' -name '*.wal' | wc -l)  # not spare.wal, the preallocated next segment
bad_gz=0
while IFS= read -r f; do
	gzip -t "$f" 2>/dev/null || { cs_info "gzip -t failed: $f"; bad_gz=$((bad_gz + 1)); }
done < <(find "$ARCHIVE" -name '*.wal.gz' -o -name '*.snapshot.gz')
snaps=$(find "$ARCHIVE" -name '*.snapshot.gz' | wc -l)

decode_result="skipped (no python3)"
if [ -n "$gen" ] && command -v python3 >/dev/null 2>&1; then
	cs_section "independent reader: scripts/cs_decode.py --summary (written from docs/FORMAT.md)"
	if python3 "$CS_ROOT/scripts/cs_decode.py" --summary "$ARCHIVE/generations/$gen"; then
		decode_result="all CRCs and messages valid"
	else
		decode_result="FAILED"
	fi
fi

cs_section "server log: the archiver's lines"
# the workers' own lines (default log_line_prefix '%m [%p] '), with their
# DETAIL and HINT lines, and any other line naming changestream
wpids=$(psql_value "SELECT concat_ws('|', pid, compressor_pid) FROM changestream.status()")
grep -E "changestream|\[(${wpids:-0})\] " "$LOG" | grep -v -E 'STATEMENT:|listening on' | tail -n 16 || true

cs_section "summary"
ngen=$(psql_value "SELECT count(*) FROM changestream.generations()")
commits=0
if [ -n "$gen" ]; then
	commits=$(psql_value "SELECT count(*) FROM changestream.wal_records('$gen') WHERE length(data) > 0 AND get_byte(data, 0) = ascii('C')")
fi
cs_info "pgbench transactions:          ${pgbench_xacts:-?}"
truncates=0
if [ -n "$gen" ]; then
	truncates=$(psql_value "SELECT count(*) FROM changestream.wal_records('$gen') WHERE length(data) > 0 AND get_byte(data, 0) = ascii('T')")
fi
if [ "$truncates" -gt 0 ]; then
	cs_info "archived COMMITs:              $commits ($truncates of them a TRUNCATE: pgbench empties pgbench_history before its run)"
else
	cs_info "archived COMMITs:              $commits"
fi
cs_info "generations:                   $ngen"
cs_info "WAL segments:                  $((sealed + raw)) ($sealed sealed and gzip-compressed, $raw active)"
cs_info "snapshots:                     $snaps"
cs_info "gzip -t (segments, snapshots): $((sealed + snaps - bad_gz)) ok, $bad_gz bad"
cs_info "cs_decode.py:                  $decode_result"
if [ "$REPLICA" = 1 ]; then
	cs_info "replica (s3://$BUCKET/demo):   $bucket_objects objects, $bucket_missing finished local files missing"
fi
cs_info "total time:                    $(( $(cs_now) - t_start ))s"

status=0
[ "$caught_up" = 1 ] || { cs_info "FAIL: the archive did not catch up"; status=1; }
[ "$healthy" = t ] || { cs_info "FAIL: changestream.stat_archiver.healthy is not true"; status=1; }
[ "$sealed" -gt 0 ] || { cs_info "FAIL: no sealed (compressed) segment"; status=1; }
[ "$bad_gz" -eq 0 ] || { cs_info "FAIL: corrupt gzip files"; status=1; }
[ "$decode_result" != FAILED ] || { cs_info "FAIL: scripts/cs_decode.py found damage"; status=1; }
[ "$bucket_missing" -eq 0 ] || { cs_info "FAIL: finished files missing from the bucket"; status=1; }
if [ -n "${pgbench_xacts:-}" ] && [ "$commits" -lt "$pgbench_xacts" ]; then
	cs_info "FAIL: fewer archived COMMITs than pgbench transactions"
	status=1
fi
[ $status -eq 0 ] && ok=1 && cs_info "OK: the pgbench run is in the archive"
exit $status
