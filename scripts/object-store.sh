#!/usr/bin/env bash
# scripts/object-store.sh: the S3 object store the replica tests run
# against (issue 31, section 8): a one-node Ceph cluster with RADOS Gateway
# from Debian's packages, on 127.0.0.1, all of its state in one directory.
#
#   bash scripts/object-store.sh start    start it (or reuse it if it runs and
#                                         answers), print the env file's path
#   bash scripts/object-store.sh status   exit 0 if it runs and answers a
#                                         signed S3 request, else 1
#   bash scripts/object-store.sh env      print the env file (shell syntax)
#   bash scripts/object-store.sh stop     kill its daemons by PID, remove the
#                                         directory
#   bash scripts/object-store.sh install  install the Debian packages it needs
#                                         (root; scripts/test.sh's dependencies
#                                         include them)
#
# What runs: one monitor, one OSD on a sparse bluestore file, and radosgw
# (the beast frontend on a free loopback port).  No manager daemon: S3 does
# not need it.  Inside the cluster "auth none" (the gateway's monitor client
# then needs "ms mon client mode = crc", or it hangs), pools of size 1, and
# a monitor that proposes changes every 0.1 s instead of every 1 s (start-up
# 12 s instead of 20 s: the gateway's pools are made one map change each).
# The gateway checks S3's own SigV4 signatures against one user made with
# radosgw-admin with fixed test keys.  Measured on 2 cores: ready in 11 to
# 12 s, 120 MB of RSS (140 MB after t/041), 55 MB of disk.  As root the daemons run as the
# PostgreSQL user (PG_OS_USER, default postgres); otherwise as the caller.
#
# The env file, DIR/client/env, has one KEY=value per line:
#   CS_S3_ENDPOINT     http://127.0.0.1:PORT (path-style URLs)
#   CS_S3_REGION       the region to sign for (us-east-1)
#   CS_S3_ACCESS_KEY, CS_S3_SECRET_KEY   the test user's keys
#   CS_S3_CREDENTIALS  DIR/client/credentials, the same keys in the AWS
#                      shared credentials format ([default]), mode 0600
#   CS_S3_PIDS         the daemons' PIDs, comma-separated
# DIR/client holds nothing else, so it can be copied elsewhere (into a
# chroot, at the same path) to give the store to programs there.
#
# Environment:
#   CS_OBJECT_STORE_DIR=DIR   the state directory (default
#                             /tmp/changestream-object-store)
#   CS_OBJECT_STORE_TIMEOUT=S seconds to wait for the store (default 120)

set -uo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR=${CS_OBJECT_STORE_DIR:-/tmp/changestream-object-store}
TIMEOUT=${CS_OBJECT_STORE_TIMEOUT:-120}
CONF=$DIR/ceph.conf
ENVFILE=$DIR/client/env
# fixed test keys: the store is a throwaway on the loopback interface
ACCESS_KEY=CSTESTACCESSKEY00001
SECRET_KEY=cstest/secret/key/0000000000000000000000
REGION=us-east-1
DAEMONS="mon.a osd.0 client.rgw.a"   # their pid files: DIR/run/NAME.pid

usage() { sed -n '2,42p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

# Debian's awscli (a Python environment may put another aws first in PATH)
AWS=/usr/bin/aws
[ -x "$AWS" ] || AWS=aws

# Run a Ceph program as the store's user, with the store's configuration.
as_store() {
	cs_as_pg "$@"
}

ceph_cli() {
	as_store ceph -c "$CONF" --connect-timeout 10 "$@"
}

# pid_of NAME: the PID in DIR/run/NAME.pid if that process is alive
pid_of() {
	local f=$DIR/run/$1.pid pid
	[ -f "$f" ] || return 1
	pid=$(cat "$f" 2>/dev/null) || return 1
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
	printf '%s\n' "$pid"
}

# A signed S3 request with the test keys: list the buckets.
s3_answers() {
	local endpoint
	[ -f "$ENVFILE" ] || return 1
	endpoint=$(sed -n 's/^CS_S3_ENDPOINT=//p' "$ENVFILE")
	[ -n "$endpoint" ] || return 1
	env AWS_ACCESS_KEY_ID="$ACCESS_KEY" AWS_SECRET_ACCESS_KEY="$SECRET_KEY" \
		AWS_DEFAULT_REGION="$REGION" AWS_PAGER="" AWS_CONFIG_FILE=/dev/null \
		AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_REQUEST_CHECKSUM_CALCULATION=when_required \
		timeout 20 "$AWS" --endpoint-url "$endpoint" s3api list-buckets >/dev/null 2>&1
}

store_status() {
	local d
	for d in $DAEMONS; do
		pid_of "$d" >/dev/null || return 1
	done
	s3_answers
}

# Kill the daemons by PID (TERM, then KILL after 10 s) and remove DIR.
store_stop() {
	local d pid pids="" alive=""
	for d in $DAEMONS; do
		pid=$(pid_of "$d") && pids="$pids $pid"
	done
	if [ -n "$pids" ]; then
		# shellcheck disable=SC2086
		kill -TERM $pids 2>/dev/null
		for _ in $(seq 1 20); do
			alive=""
			for pid in $pids; do
				kill -0 "$pid" 2>/dev/null && alive="$alive $pid"
			done
			[ -n "$alive" ] || break
			sleep 0.5
		done
		# shellcheck disable=SC2086
		[ -z "$alive" ] || kill -KILL $alive 2>/dev/null
	fi
	case $DIR in
	/ | "") ;;
	*) rm -rf --one-file-system "$DIR" ;;
	esac
	cs_info "object store stopped${pids:+ (PIDs$pids)}"
}

wait_for() {
	local what=$1 deadline
	shift
	deadline=$(( $(cs_now) + TIMEOUT ))
	until "$@"; do
		if [ "$(cs_now)" -ge "$deadline" ]; then
			printf 'ERROR: object store: %s not ready after %ss\n' "$what" "$TIMEOUT" >&2
			return 1
		fi
		sleep 0.5
	done
}

write_conf() {
	local fsid=$1 mon_port=$2 rgw_port=$3
	cat <<-CONF
		# scripts/object-store.sh: a throwaway one-node cluster
		[global]
		fsid = $fsid
		mon host = v2:127.0.0.1:$mon_port
		public addr = 127.0.0.1
		ms bind ipv6 = false
		auth cluster required = none
		auth service required = none
		auth client required = none
		ms mon client mode = crc
		run dir = $DIR/run
		admin socket = $DIR/run/\$name.asok
		pid file = $DIR/run/\$name.pid
		log file = $DIR/log/\$name.log
		crash dir = $DIR/crash
		mon data = $DIR/mon
		osd data = $DIR/osd
		osd objectstore = bluestore
		bluestore block create = true
		bluestore block size = 21474836480
		bluestore fsck on mount = false
		osd pool default size = 1
		osd pool default min size = 1
		osd pool default pg num = 8
		osd pool default pgp num = 8
		osd crush chooseleaf type = 0
		mon allow pool size one = true
		mon max pg per osd = 1000
		mon warn on pool no redundancy = false
		paxos propose interval = 0.1
		paxos min wait = 0.01
		osd memory target = 939524096
		bluestore cache autotune = false
		bluestore cache size = 67108864
		[client]
		rgw frontends = beast endpoint=127.0.0.1:$rgw_port
		rgw data = $DIR/rgw
		rgw enable usage log = false
		rgw dns name = 127.0.0.1
	CONF
}

write_env() {
	local rgw_port=$1 pids=$2
	mkdir -p "$DIR/client"
	(
		umask 077
		printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
			"$ACCESS_KEY" "$SECRET_KEY" >"$DIR/client/credentials"
		{
			printf 'CS_S3_ENDPOINT=http://127.0.0.1:%s\n' "$rgw_port"
			printf 'CS_S3_REGION=%s\n' "$REGION"
			printf 'CS_S3_ACCESS_KEY=%s\n' "$ACCESS_KEY"
			printf 'CS_S3_SECRET_KEY=%s\n' "$SECRET_KEY"
			printf 'CS_S3_CREDENTIALS=%s\n' "$DIR/client/credentials"
			printf 'CS_S3_PIDS=%s\n' "${pids// /,}"
		} >"$ENVFILE.tmp"
	)
	chmod 0644 "$ENVFILE.tmp"
	mv "$ENVFILE.tmp" "$ENVFILE"
	if cs_is_root; then
		chown -R "$PG_OS_USER": "$DIR/client"
	fi
}

mon_ready() {
	ceph_cli mon stat >/dev/null 2>&1
}

# The OSD is up and every placement group is active.
osd_ready() {
	ceph_cli osd stat 2>/dev/null | grep -q '1 osds: 1 up.*1 in'
}

# The gateway listens (a cheap check first), then answers a signed request.
rgw_ready() {
	local port
	pid_of client.rgw.a >/dev/null || return 1
	port=$(sed -n 's/^CS_S3_ENDPOINT=http:\/\/127\.0\.0\.1://p' "$ENVFILE")
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || return 1
	s3_answers
}

store_start() {
	local t0 t_mon t_osd t_user fsid osd_uuid mon_port rgw_port pid pids=""
	t0=$(cs_now)
	if store_status; then
		cs_info "object store already running in $DIR" >&2
		printf '%s\n' "$ENVFILE"
		return 0
	fi
	for p in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool; do
		command -v "$p" >/dev/null ||
			cs_die "$p not found: bash scripts/object-store.sh install (Debian: $CS_OBJECT_STORE_PACKAGES)"
	done
	# leftovers of a store that died: kill what is left by PID, start afresh
	[ -d "$DIR" ] && store_stop >/dev/null
	mkdir -p "$DIR"/{run,log,crash,mon,osd,rgw,client} || return 1
	if cs_is_root; then
		chown -R "$PG_OS_USER": "$DIR"
	fi
	fsid=$(cat /proc/sys/kernel/random/uuid)
	osd_uuid=$(cat /proc/sys/kernel/random/uuid)
	mon_port=$(cs_free_port 46789)
	rgw_port=$(cs_free_port 47480)
	write_conf "$fsid" "$mon_port" "$rgw_port" | as_store tee "$CONF" >/dev/null

	# the monitor
	as_store monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" \
		"$DIR/monmap" >"$DIR/log/setup.log" 2>&1 || return 1
	as_store ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" \
		>>"$DIR/log/setup.log" 2>&1 || return 1
	as_store ceph-mon -c "$CONF" -i a >>"$DIR/log/setup.log" 2>&1 ||
		return 1
	wait_for monitor mon_ready || return 1
	t_mon=$(cs_now)

	# the OSD, on a sparse bluestore file
	ceph_cli osd new "$osd_uuid" >>"$DIR/log/setup.log" 2>&1 ||
		return 1
	as_store ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" \
		>>"$DIR/log/setup.log" 2>&1 || return 1
	as_store ceph-osd -c "$CONF" -i 0 >>"$DIR/log/setup.log" 2>&1 ||
		return 1
	wait_for OSD osd_ready || return 1
	t_osd=$(cs_now)

	# the user (radosgw-admin makes the default zone and its pools), then
	# the gateway
	as_store radosgw-admin -c "$CONF" user create --uid=changestream-test \
		--display-name="changestream tests" --access-key="$ACCESS_KEY" \
		--secret-key="$SECRET_KEY" >>"$DIR/log/setup.log" 2>&1 ||
		return 1
	t_user=$(cs_now)
	as_store radosgw -c "$CONF" -n client.rgw.a >>"$DIR/log/setup.log" 2>&1 ||
		return 1
	for d in $DAEMONS; do
		pid=$(pid_of "$d") || { printf 'ERROR: no %s daemon\n' "$d" >&2; return 1; }
		pids="$pids${pids:+ }$pid"
	done
	write_env "$rgw_port" "$pids"
	wait_for gateway rgw_ready || return 1
	cs_info "object store ready in $(( $(cs_now) - t0 ))s (monitor $(( t_mon - t0 ))s, OSD $(( t_osd - t_mon ))s, user $(( t_user - t_osd ))s, gateway $(( $(cs_now) - t_user ))s): $(sed -n 's/^CS_S3_ENDPOINT=//p' "$ENVFILE"), RSS $(store_rss) MB (PIDs $pids)" >&2
	printf '%s\n' "$ENVFILE"
}

# The daemons' resident memory in MB (VmRSS summed).
store_rss() {
	local d pid kb=0 v
	for d in $DAEMONS; do
		pid=$(pid_of "$d") || continue
		v=$(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid/status")
		kb=$(( kb + ${v:-0} ))
	done
	printf '%s\n' $(( kb / 1024 ))
}

case ${1:-} in
start)
	if ! store_start; then
		for f in "$DIR"/log/*.log; do
			cs_tail "$f" 20 >&2
		done
		store_stop >/dev/null
		cs_die "object store failed to start (its logs are above)"
	fi
	;;
stop) store_stop ;;
status)
	if store_status; then
		cs_info "running: $(sed -n 's/^CS_S3_ENDPOINT=//p' "$ENVFILE"), RSS $(store_rss) MB"
	else
		cs_info "not running (or not answering) in $DIR"
		exit 1
	fi
	;;
env)
	[ -f "$ENVFILE" ] || cs_die "no object store in $DIR (start it first)"
	sed 's/^/export /' "$ENVFILE"
	;;
install)
	CS_PACKAGES=$CS_OBJECT_STORE_PACKAGES cs_install_deps || cs_die "could not install $CS_OBJECT_STORE_PACKAGES"
	;;
-h | --help) usage ;;
*) usage >&2; exit 2 ;;
esac
