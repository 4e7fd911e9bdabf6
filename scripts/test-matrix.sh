#!/usr/bin/env bash
# scripts/test-matrix.sh: the test suite against several PostgreSQL major
# versions, one after the other.
#
#   bash scripts/test-matrix.sh              15, 17, 18 and 19 (what CI runs)
#   bash scripts/test-matrix.sh 17 19 ...    the named versions
#
# 15 runs on the host, through scripts/test.sh (the README's test command).
# The others run in Debian chroots made with "debootstrap --variant=minbase"
# from the mirror the host's apt sources name: trixie for 17, sid for 18,
# sid plus experimental (pinned to the PostgreSQL packages) for 19.  Inside
# each: postgresql-N, postgresql-server-dev-N, postgresql-client-N, make,
# gcc, zlib1g-dev and libipc-run-perl, with service start-up prevented
# (policy-rc.d exits 101, no main cluster is created).  The checkout is
# copied into the chroot and scripts/test.sh runs there with
# PG_CONFIG=/usr/lib/postgresql/N/bin/pg_config.
#
# The object store of the replica tests (scripts/object-store.sh: Ceph
# RADOS Gateway on 127.0.0.1) is started once, on the host, when a TAP
# file to run calls cs_object_store, and stopped by PID when the script
# exits, whatever happens.  The chroots share the host's network: each gets
# the store's env and credentials files (copied into the chroot at the
# same path, owned by its postgres user) through CS_OBJECT_STORE_ENV, and
# has curl and awscli to check it with.
#
# Root only (debootstrap, chroot, mount).  A chroot is kept in the cache
# directory and reused by later runs (about 1.5 GB each).  Whatever happens
# (failure, timeout, Ctrl-C, SIGTERM), the chroot's processes are killed
# (found by PID through /proc/PID/root) and its mounts (proc, dev, dev/pts,
# dev/shm) are removed before the script exits.
#
# Environment:
#   CS_CHROOT_CACHE=DIR   chroot cache (default /var/cache/changestream-chroots)
#   CS_VERSION_TIMEOUT=S  time cap per version, setup included (default 1200)
#   CS_HOST_LOCK=FILE     hold "flock FILE" while the host (15) tests run (a
#                         shared machine); the wait is not counted in the cap
#   CS_MIRROR=URL         Debian mirror (default: read from the apt sources)
#   CS_CHROOT_REFRESH=1   rebuild cached chroots from scratch
#   CS_PREPARE_ONLY=1     only make (or check) the chroots, run no test
#   CS_DEB=1              build the Debian package in the chroot, install it
#                         there and CREATE EXTENSION with it (17, 18, 19)
#   CS_TESTS="t/007_x.pl t/020_y.pl"  only these TAP files (and pg_regress),
#                         as scripts/test.sh's arguments
#   anything scripts/test.sh reads (PROVE_FLAGS, SKIP_REGRESS, CS_TEST_JOBS,
#   ...) is passed on
# Exits non-zero if any version fails; prints a table of results and times.

set -uo pipefail

CS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${CS_CHROOT_CACHE:-/var/cache/changestream-chroots}
CAP=${CS_VERSION_TIMEOUT:-1200}

usage() { sed -n '2,43p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }
now() { date +%s; }

versions=()
for a in "$@"; do
	case $a in
	-h | --help) usage; exit 0 ;;
	15 | 17 | 18 | 19) versions+=("$a") ;;
	*) usage >&2; die "unsupported version: $a (15, 17, 18 or 19)" ;;
	esac
done
[ ${#versions[@]} -gt 0 ] || versions=(15 17 18 19)
[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, chroot and mount need it)"

# ------------------------------------------------------------ the mirror

# The Debian archive the host's apt uses: the first "deb" URI of a
# non-security Debian suite in /etc/apt/sources.list(.d).  Both the
# one-line and the deb822 (.sources) formats are read.
host_mirror() {
	local f
	{
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
			[ -f "$f" ] || continue
			# deb [options] URI suite components
			sed -n -E 's/^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+)[[:space:]]+([^[:space:]]+).*/\2 \3/p' "$f"
		done
		for f in /etc/apt/sources.list.d/*.sources; do
			[ -f "$f" ] || continue
			# one stanza per paragraph: print "URI suite" for Types: deb
			awk '
				function flush() {
					if (deb && uris != "")
						print uris, suites
					deb = 0; uris = ""; suites = ""
				}
				/^[[:space:]]*$/ { flush(); next }
				/^[[:space:]]*#/ { next }
				tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
				tolower($1) == "uris:" { uris = $2 }
				tolower($1) == "suites:" { suites = $2 }
				tolower($1) == "enabled:" && tolower($2) == "no" { uris = "" }
				END { flush() }' "$f"
		done
	} | awk '$2 !~ /security/ && $1 ~ /^(https?|ftp):\/\// { print $1; exit }'
}

MIRROR=${CS_MIRROR:-$(host_mirror)}

# ------------------------------------------------------- chroot handling

CURRENT_ROOT=""     # the chroot in use, for the exit trap

# Kill every process whose root directory is inside the chroot: TERM,
# then KILL after a grace period.  PIDs come from /proc/PID/root.
chroot_pids() {
	local root=$1 p link
	for p in /proc/[0-9]*; do
		link=$(readlink "$p/root" 2>/dev/null) || continue
		case $link in
		"$root" | "$root"/*) printf '%s\n' "${p#/proc/}" ;;
		esac
	done
}

kill_chroot_processes() {
	local root=$1 pids i
	pids=$(chroot_pids "$root")
	[ -n "$pids" ] || return 0
	printf 'stopping processes left in %s: %s\n' "$root" "$(echo $pids)"
	# shellcheck disable=SC2086
	kill -TERM $pids 2>/dev/null
	for i in 1 2 3 4 5 6 7 8 9 10; do
		pids=$(chroot_pids "$root")
		[ -n "$pids" ] || return 0
		sleep 1
	done
	# shellcheck disable=SC2086
	kill -KILL $pids 2>/dev/null
	sleep 1
}

# Unmount everything mounted under the chroot, deepest first.
unmount_chroot() {
	local root=$1 m
	for m in $(awk -v r="$root/" 'index($2, r) == 1 { print $2 }' /proc/self/mounts | sort -r); do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null ||
			printf 'WARNING: could not unmount %s\n' "$m" >&2
	done
}

cleanup_chroot() {
	local root=$1
	[ -n "$root" ] || return 0
	kill_chroot_processes "$root"
	unmount_chroot "$root"
}

on_exit() {
	local rc=$?
	trap - EXIT INT TERM HUP
	stop_job
	if [ -n "$CURRENT_ROOT" ]; then
		cleanup_chroot "$CURRENT_ROOT"
		CURRENT_ROOT=""
	fi
	stop_store
	exit $rc
}
trap on_exit EXIT
trap 'printf "\ninterrupted\n" >&2; exit 130' INT
trap 'printf "\nterminated\n" >&2; exit 143' TERM HUP

mount_chroot() {
	local root=$1
	mount -t proc proc "$root/proc" || return 1
	# a bind of /dev that does not propagate mounts back to the host
	mount --bind /dev "$root/dev" || return 1
	mount --make-rslave "$root/dev" || return 1
	mount --bind /dev/pts "$root/dev/pts" || return 1
	mkdir -p "$root/dev/shm"
	mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm" || return 1
	cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null
	return 0
}

# Run a command in the chroot with a clean environment.
in_chroot() {
	local root=$1
	shift
	chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
		PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
		CI="${CI:-}" "$@"
}

suite_of() {
	case $1 in
	17) echo trixie ;;
	18) echo sid ;;
	19) echo sid ;;
	esac
}

chroot_name_of() {
	case $1 in
	19) echo sid-experimental-pg19 ;;
	*) echo "$(suite_of "$1")-pg$1" ;;
	esac
}

# The clients the object store's tests use (t/ChangestreamTest.pm): in a
# separate apt-get run whose failure (sid's awscli uninstallable for a
# while) does not stop the rest of the suite.
CHROOT_STORE_CLIENTS="curl awscli"

# add_packages ROOT PACKAGE...: install those of the packages that a ready
# chroot lacks (the list grew after it was made).
add_packages() {
	local root=$1 p missing=""
	shift
	for p in "$@"; do
		# shellcheck disable=SC2016 # dpkg-query expands it
		[ "$(in_chroot "$root" dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] ||
			missing="$missing $p"
	done
	[ -n "$missing" ] || return 0
	echo "installing in $root:$missing"
	grep -q " $root/proc " /proc/self/mounts || mount_chroot "$root" || return 1
	if ! in_chroot "$root" sh -c "apt-get update -qq && apt-get install -y -qq $missing && apt-get clean" \
		</dev/null >>"$root.apt.log" 2>&1; then
		tail -n 20 "$root.apt.log"
		return 1
	fi
	return 0
}

# Make (or reuse) the chroot for version $1 and print its path.  A chroot
# is complete when its .changestream-ready stamp exists; anything else in
# the cache under that name is a leftover of an interrupted setup and is
# removed.
ensure_chroot() {
	local v=$1 suite name root pkgs t0
	suite=$(suite_of "$v")
	name=$(chroot_name_of "$v")
	root=$CACHE/$name
	pkgs="postgresql-$v postgresql-server-dev-$v postgresql-client-$v make gcc libc6-dev zlib1g-dev libipc-run-perl perl libcurl4-openssl-dev pkg-config"
	if [ -f "$root/.changestream-ready" ] && [ "${CS_CHROOT_REFRESH:-0}" != 1 ]; then
		echo "reusing chroot $root"
		# shellcheck disable=SC2086
		add_packages "$root" $pkgs || return 1
		# shellcheck disable=SC2086
		add_packages "$root" $CHROOT_STORE_CLIENTS ||
			echo "WARNING: $CHROOT_STORE_CLIENTS did not install in $root: the object store tests fail there" >&2
		return 0
	fi
	[ -n "$MIRROR" ] || { echo "no Debian mirror found in the apt sources (set CS_MIRROR)" >&2; return 1; }
	command -v debootstrap >/dev/null ||
		{ apt-get install -y -qq debootstrap </dev/null || return 1; }
	# a half-made chroot may still have mounts or processes: clean first
	cleanup_chroot "$root"
	if [ -f "$root/.changestream-debootstrap" ] && [ "${CS_CHROOT_REFRESH:-0}" != 1 ]; then
		echo "reusing the debootstrap of $root (package installation did not finish)"
	else
		rm -rf --one-file-system "$root"
		mkdir -p "$CACHE"
		t0=$(now)
		echo "debootstrap $suite from $MIRROR into $root"
		debootstrap --variant=minbase "$suite" "$root" "$MIRROR" >"$CACHE/$name.debootstrap.log" 2>&1 ||
			{ tail -n 30 "$CACHE/$name.debootstrap.log"; return 1; }
		echo "debootstrap: $(( $(now) - t0 ))s"
		date -u >"$root/.changestream-debootstrap"
	fi

	# no service starts in the chroot, no cluster is created by the packages
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod 0755 "$root/usr/sbin/policy-rc.d"
	mkdir -p "$root/etc/postgresql-common/createcluster.d"
	echo "create_main_cluster = false" >"$root/etc/postgresql-common/createcluster.d/00-changestream.conf"
	printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
		>"$root/etc/apt/apt.conf.d/90changestream"
	# the host's apt may accept Release files past their Valid-Until date (a
	# mirror that is a snapshot of the archive): so does the chroot's
	if apt-config dump 2>/dev/null | grep -i '^Acquire::Check-Valid-Until "false"' >/dev/null; then
		echo 'Acquire::Check-Valid-Until "false";' >>"$root/etc/apt/apt.conf.d/90changestream"
	fi
	if [ "$v" = 19 ]; then
		echo "deb $MIRROR experimental main" >"$root/etc/apt/sources.list.d/experimental.list"
		cat >"$root/etc/apt/preferences.d/changestream-pg19" <<-EOF
			Package: postgresql-19 postgresql-client-19 postgresql-server-dev-19 postgresql-common postgresql-common-dev postgresql-client-common libpq5 libpq-dev
			Pin: release a=experimental
			Pin-Priority: 500
		EOF
	fi

	t0=$(now)
	mount_chroot "$root" || return 1
	# shellcheck disable=SC2086
	if ! in_chroot "$root" sh -c "apt-get update -qq && apt-get install -y -qq $pkgs" \
		</dev/null >"$CACHE/$name.apt.log" 2>&1; then
		tail -n 40 "$CACHE/$name.apt.log"
		return 1
	fi
	# shellcheck disable=SC2086
	add_packages "$root" $CHROOT_STORE_CLIENTS ||
		echo "WARNING: $CHROOT_STORE_CLIENTS did not install in $root: the object store tests fail there" >&2
	echo "apt: $(( $(now) - t0 ))s"
	in_chroot "$root" sh -c 'apt-get clean' </dev/null
	date -u >"$root/.changestream-ready"
	return 0
}

# CS_DEB=1: the Debian package instead of the test suite.  In the chroot
# (as root): install the build dependencies, dpkg-buildpackage (which runs
# the regression test through pg_buildext installcheck), install the
# package with apt, and CREATE EXTENSION on a pg_virtualenv instance that
# preloads it.  The chroot keeps the extra packages.
# shellcheck disable=SC2016
DEB_CHECK='
set -e
v=$1
cd /build/changestream
apt-get install -y -qq build-essential dpkg-dev debhelper postgresql-server-dev-all postgresql-all \
	zlib1g-dev >/tmp/deb-deps.log 2>&1 || { tail -n 30 /tmp/deb-deps.log; exit 1; }
pg_buildext updatecontrol
echo "debian/control lists: $(sed -n "s/^Package: //p" debian/control | tr "\n" " ")"
dpkg-buildpackage -us -uc -b
deb=$(ls ../postgresql-$v-changestream_*.deb)
echo "built $deb"
dpkg-deb --contents "$deb" | awk "{ print \$NF }" | grep -E "changestream(\.so|\.control|--)"
apt-get install -y -qq "$PWD/$deb" >/tmp/deb-install.log 2>&1 || { cat /tmp/deb-install.log; exit 1; }
dpkg -s postgresql-$v-changestream | grep -E "^(Package|Status|Version)"
archive=$(mktemp -d /tmp/changestream-deb.XXXXXX)
chmod 1777 "$archive"
pg_virtualenv -v "$v" -o shared_preload_libraries=changestream -o wal_level=logical \
	-o changestream.directory="$archive/archive" \
	psql -X -v ON_ERROR_STOP=1 -c "CREATE EXTENSION changestream" \
	-c "SELECT extversion FROM pg_extension WHERE extname = '"'"'changestream'"'"'" \
	-c "SELECT pg_sleep(2)" -c "SELECT state, slot, generation IS NOT NULL AS has_generation FROM changestream.status()"
'

# Copy the checkout (without build products and git metadata) into the
# chroot and run scripts/test.sh there.  Everything is inside the time cap.
run_in_chroot() {
	local v=$1 root
	root=$CACHE/$(chroot_name_of "$v")
	# a run killed with SIGKILL (no trap runs) may have left processes and
	# mounts behind: remove them before anything else
	cleanup_chroot "$root"
	ensure_chroot "$v" || return 1
	[ "${CS_PREPARE_ONLY:-0}" = 1 ] && return 0
	# ensure_chroot leaves a new chroot mounted; a reused one is mounted here
	grep -q " $root/proc " /proc/self/mounts || mount_chroot "$root" || return 1
	rm -rf "$root/build"
	mkdir -p "$root/build/changestream"
	tar -C "$CS_ROOT" --exclude=./.git --exclude='*.o' --exclude='*.so' \
		--exclude='*.bc' --exclude=./tmp_check --exclude=./tmp_regress --exclude=./results \
		--exclude=./log --exclude='./regression.*' -cf - . |
		tar -C "$root/build/changestream" -xf - || return 1
	if [ "${CS_DEB:-0}" = 1 ]; then
		in_chroot "$root" bash -c "$DEB_CHECK" deb-check "$v" </dev/null
		return $?
	fi
	store_into_chroot "$root" || return 1
	in_chroot "$root" env \
		PG_CONFIG="/usr/lib/postgresql/$v/bin/pg_config" \
		CS_OBJECT_STORE_ENV="${CS_OBJECT_STORE_ENV:-}" \
		PROVE_FLAGS="${PROVE_FLAGS:-}" SKIP_REGRESS="${SKIP_REGRESS:-0}" \
		SKIP_TAP="${SKIP_TAP:-0}" KEEP="${KEEP:-0}" CS_TEST_JOBS="${CS_TEST_JOBS:-4}" \
		bash /build/changestream/scripts/test.sh ${CS_TESTS:-} </dev/null
}

# The PIDs of a process and all its descendants, parents first.
process_tree() {
	local p
	printf '%s\n' "$1"
	for p in $(ps -o pid= --ppid "$1" 2>/dev/null); do
		process_tree "$p"
	done
}

# One chroot version runs in a background subshell that this shell
# watches, so that the time cap, a failure, Ctrl-C or SIGTERM all end in
# the same place: the subshell's process tree and the chroot's processes
# are killed and its mounts removed (on_exit does it when the script
# itself is stopped).
JOB_PID=""
run_version() {
	local v=$1 deadline rc
	deadline=$(( $(now) + CAP ))
	if [ "$v" = 15 ]; then
		# on a shared machine: wait for the host lock first; the cap and
		# the reported time start once it is held
		local lockfd t0
		if [ -n "${CS_HOST_LOCK:-}" ]; then
			exec {lockfd}>>"$CS_HOST_LOCK" || return 1
			t0=$(now)
			flock "$lockfd"
			LOCK_WAIT=$(( $(now) - t0 ))
		fi
		timeout --kill-after=30 "$CAP" bash "$CS_ROOT/scripts/test.sh" ${CS_TESTS:-} </dev/null
		rc=$?
		if [ -n "${lockfd:-}" ]; then
			flock -u "$lockfd"
			exec {lockfd}>&-
		fi
		return $rc
	fi
	CURRENT_ROOT=$CACHE/$(chroot_name_of "$v")
	run_in_chroot "$v" &
	JOB_PID=$!
	while kill -0 "$JOB_PID" 2>/dev/null; do
		if [ "$(now)" -ge "$deadline" ]; then
			printf '\nPostgreSQL %s: time cap of %ss reached, stopping\n' "$v" "$CAP" >&2
			stop_job
			break
		fi
		sleep 1
	done
	wait "$JOB_PID"
	rc=$?
	JOB_PID=""
	# whatever ended the run, nothing of it stays in the chroot
	cleanup_chroot "$CURRENT_ROOT"
	store_out_of_chroot "$CURRENT_ROOT"
	CURRENT_ROOT=""
	return $rc
}

stop_job() {
	local pids
	[ -n "$JOB_PID" ] || return 0
	pids=$(process_tree "$JOB_PID")
	# shellcheck disable=SC2086
	kill -TERM $pids 2>/dev/null
	sleep 1
	# shellcheck disable=SC2086
	kill -KILL $pids 2>/dev/null
	return 0
}

# ------------------------------------------------------- the object store

STORE_DIR=""
# shellcheck disable=SC2317 # invoked by on_exit
stop_store() {
	[ -n "$STORE_DIR" ] || return 0
	CS_OBJECT_STORE_DIR=$STORE_DIR bash "$CS_ROOT/scripts/object-store.sh" stop
	STORE_DIR=""
}

# The TAP files this run gives scripts/test.sh, by name (none when no TAP
# test runs).
tap_files() {
	local t
	if [ "${SKIP_TAP:-0}" = 1 ] || [ "${CS_DEB:-0}" = 1 ] || [ "${CS_PREPARE_ONLY:-0}" = 1 ]; then
		return 0
	fi
	if [ -n "${CS_TESTS:-}" ]; then
		for t in $CS_TESTS; do
			case $t in *.pl) printf 't/%s\n' "$(basename "$t")" ;; esac
		done
	else
		(cd "$CS_ROOT" && ls t/*.pl)
	fi
}

# Start the store on the host if a TAP file needs it and none is given;
# export CS_OBJECT_STORE_ENV.  A store that does not start is reported;
# the files that need it then fail under CI=true.
start_store() {
	local f need=0
	for f in $(tap_files); do
		grep -q 'cs_object_store(' "$CS_ROOT/$f" 2>/dev/null && need=1
	done
	[ "$need" = 1 ] || return 0
	if [ -n "${CS_OBJECT_STORE_ENV:-}" ] && [ -r "$CS_OBJECT_STORE_ENV" ]; then
		export CS_OBJECT_STORE_ENV
		return 0
	fi
	printf '\n######## object store ########\n'
	command -v radosgw >/dev/null 2>&1 ||
		bash "$CS_ROOT/scripts/object-store.sh" install || return 0
	STORE_DIR=$(mktemp -d /tmp/changestream-object-store.XXXXXX)
	if CS_OBJECT_STORE_ENV=$(CS_OBJECT_STORE_DIR=$STORE_DIR bash "$CS_ROOT/scripts/object-store.sh" start); then
		export CS_OBJECT_STORE_ENV
	else
		STORE_DIR=""
		unset CS_OBJECT_STORE_ENV
		echo "the object store did not start: the TAP files that need it skip, or fail under CI=true" >&2
	fi
}

# Copy the store's client files into chroot $1 at the same path, owned by
# the chroot's postgres user (its uid is not the host's).
store_into_chroot() {
	local root=$1 client
	[ -n "${CS_OBJECT_STORE_ENV:-}" ] || return 0
	client=$(dirname "$CS_OBJECT_STORE_ENV")
	rm -rf "${root:?}$client"
	mkdir -p "$root$client"
	cp -p "$client"/* "$root$client/" || return 1
	in_chroot "$root" chown -R postgres: "$client"
}

# Remove those copies again, and their directory if that is left empty
# (the chroot is kept in the cache).
store_out_of_chroot() {
	local root=$1 client
	[ -n "${CS_OBJECT_STORE_ENV:-}" ] || return 0
	client=$(dirname "$CS_OBJECT_STORE_ENV")
	rm -rf "${root:?}$client"
	rmdir "$root$(dirname "$client")" 2>/dev/null
	return 0
}

start_store

results=()
failed=0
for v in "${versions[@]}"; do
	printf '\n######## PostgreSQL %s ########\n' "$v"
	t0=$(now)
	LOCK_WAIT=0
	run_version "$v"
	rc=$?
	secs=$(( $(now) - t0 - LOCK_WAIT ))
	if [ $rc -eq 0 ]; then
		results+=("PostgreSQL $v: passed in ${secs}s")
	else
		results+=("PostgreSQL $v: FAILED (exit $rc) after ${secs}s")
		failed=1
	fi
	[ "$LOCK_WAIT" = 0 ] || results[-1]+=" (after ${LOCK_WAIT}s waiting for $CS_HOST_LOCK)"
	printf '%s\n' "${results[-1]}"
done

printf '\n######## matrix summary ########\n'
printf '%s\n' "${results[@]}"
exit $failed
