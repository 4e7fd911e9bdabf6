# shellcheck shell=bash disable=SC2034
# scripts/lib.sh: helpers shared by scripts/test.sh, scripts/demo.sh,
# bench/run.sh and bench/snapshot.sh.
# Source it; do not run it.
#
# PostgreSQL refuses to run as root, so as root these helpers install the
# dependencies, build and install the extension, and run every server and
# client program as the unprivileged "postgres" user.  Run as any other user,
# they run everything as that user (the dependencies must then be installed
# already and "make install" must be allowed to write PostgreSQL's
# directories).

# PG_CONFIG chooses the PostgreSQL installation, as it does for PGXS: the
# pg_config given, else the one in PATH, else Debian's PostgreSQL 15 (which
# cs_install_deps installs when it is missing).  Every other path comes
# from that pg_config (cs_pg_paths), never from a Debian layout.
if [ -z "${PG_CONFIG:-}" ]; then
	if command -v pg_config >/dev/null 2>&1; then
		PG_CONFIG=$(command -v pg_config)
	else
		PG_CONFIG=/usr/lib/postgresql/${PG_MAJOR:-15}/bin/pg_config
	fi
fi
PG_OS_USER=${PG_OS_USER:-postgres}

# PG_MAJOR (for the package names), PG_BINDIR, PG_PKGLIBDIR, PG_PGXS (the
# pgxs.mk), PG_REGRESS and PG_TEST_PERL (PostgreSQL::Test::*), from
# $PG_CONFIG.  Returns non-zero while that pg_config does not exist yet.
cs_pg_paths() {
	local version pgxs_dir
	version=$("$PG_CONFIG" --version 2>/dev/null) || return 1
	# "PostgreSQL 17.12 (Debian 17.12-1)", "PostgreSQL 19rc1"
	PG_MAJOR=$(printf '%s\n' "$version" | sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p')
	PG_BINDIR=$("$PG_CONFIG" --bindir)
	PG_PKGLIBDIR=$("$PG_CONFIG" --pkglibdir)
	PG_PGXS=$("$PG_CONFIG" --pgxs)
	pgxs_dir=$(dirname "$(dirname "$(dirname "$PG_PGXS")")")  # .../lib/pgxs
	PG_REGRESS=$pgxs_dir/src/test/regress/pg_regress
	PG_TEST_PERL=$pgxs_dir/src/test/perl
	return 0
}
if ! cs_pg_paths; then
	# not installed yet: the major version only names the packages
	PG_MAJOR=${PG_MAJOR:-$(printf '%s\n' "$PG_CONFIG" | sed -n 's|.*/postgresql/\([0-9][0-9]*\)/bin/pg_config$|\1|p')}
	PG_MAJOR=${PG_MAJOR:-15}
fi

# The object store of the replica tests (scripts/object-store.sh; its
# "install" installs these alone): the Ceph daemons (no ceph-mgr: S3 does
# not need it) and the S3 clients the tests and benchmarks use.
CS_OBJECT_STORE_PACKAGES="ceph-mon ceph-osd radosgw ceph-common awscli s3cmd curl"

# Debian packages the build, the tests and the demo need: the build
# (libcurl4-openssl-dev: the replica's S3 transport, issue 31), the
# PostgreSQL under test, and the object store, unless CS_OBJECT_STORE_ENV
# names one started elsewhere (scripts/test-matrix.sh starts it on the host
# and gives it to the chroots, which install only its clients).
CS_PACKAGES="make gcc libc6-dev perl zlib1g-dev libipc-run-perl libcurl4-openssl-dev pkg-config
  postgresql-$PG_MAJOR postgresql-client-$PG_MAJOR postgresql-server-dev-$PG_MAJOR"
[ -n "${CS_OBJECT_STORE_ENV:-}" ] || CS_PACKAGES="$CS_PACKAGES $CS_OBJECT_STORE_PACKAGES"

CS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

cs_now() { date +%s; }

# A section header.
cs_section() {
	printf '\n==== %s ====\n' "$*"
}

cs_info() { printf '%s\n' "$*"; }

cs_die() {
	printf 'ERROR: %s\n' "$*" >&2
	exit 1
}

cs_is_root() { [ "$(id -u)" -eq 0 ]; }

# Run a command as the user who owns the PostgreSQL processes.
# Environment variables are passed explicitly: cs_as_pg env VAR=x cmd args.
cs_as_pg() {
	if cs_is_root; then
		# from /, when the postgres user cannot enter the current directory
		# (a checkout made by mktemp -d, say): otherwise every command warns
		if runuser -u "$PG_OS_USER" -- test -x "$PWD" 2>/dev/null; then
			runuser -u "$PG_OS_USER" -- "$@"
		else
			(cd / && runuser -u "$PG_OS_USER" -- "$@")
		fi
	else
		"$@"
	fi
}

# Install the Debian packages that are missing (apt-get update first, and
# only when something is missing, so reruns are fast).
cs_install_deps() {
	local missing="" p status
	for p in $CS_PACKAGES; do
		status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
		[ "$status" = installed ] || missing="$missing $p"
	done
	if [ -z "$missing" ]; then
		cs_info "dependencies: all present"
		return 0
	fi
	if ! cs_is_root; then
		cs_die "missing packages:$missing (run as root to install them)"
	fi
	cs_info "installing:$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing </dev/null || return 1
	cs_pg_paths
}

# make (warnings are errors) and make install, from the checkout.
cs_build_install() {
	local jobs
	jobs=$(nproc 2>/dev/null || echo 2)
	make -C "$CS_ROOT" -s -j"$jobs" PG_CONFIG="$PG_CONFIG" || return 1
	make -C "$CS_ROOT" -s install PG_CONFIG="$PG_CONFIG" || return 1
	cs_info "installed $("$PG_CONFIG" --pkglibdir)/changestream.so"
}

# Create a fresh directory owned by the PostgreSQL user: cs_mkwork PREFIX
cs_mkwork() {
	local d
	d=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
	chmod 0755 "$d"
	if cs_is_root; then
		chown "$PG_OS_USER": "$d"
	fi
	printf '%s\n' "$d"
}

# A TCP port nobody listens on, starting at $1.
cs_free_port() {
	local port=${1:-54320}
	while [ "$port" -lt 65000 ]; do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null &&
		   [ ! -e "/tmp/.s.PGSQL.$port" ] &&
		   [ ! -e "/var/run/postgresql/.s.PGSQL.$port" ]; then
			printf '%s\n' "$port"
			return 0
		fi
		port=$((port + 1))
	done
	cs_die "no free port found"
}

# Print the last lines of a file with a header, if it exists.
cs_tail() {
	local file=$1 lines=${2:-50}
	[ -f "$file" ] || return 0
	printf '\n---- last %s lines of %s ----\n' "$lines" "$file"
	tail -n "$lines" "$file"
}

# ------------------------------------------------------ throwaway clusters
#
# The cluster bring-up of scripts/demo.sh, bench/run.sh and bench/snapshot.sh.
# A throwaway cluster lives in one directory DIR owned by the PostgreSQL
# user: data directory DIR/data, Unix socket in DIR, no TCP listener.

# cs_cluster_init DIR PORT < extra-settings
#   initdb DIR/data (superuser postgres, trust, UTF8, C locale, no sync) and
#   append to its postgresql.conf: port, the socket directory, changestream
#   preloaded, wal_level = logical, then the lines on stdin.  initdb's
#   output goes to DIR/initdb.log and is printed if it fails (returns 1).
cs_cluster_init() {
	local dir=$1 port=$2
	cs_as_pg "$PG_BINDIR/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 \
		--locale=C --no-sync >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log"; return 1; }
	{
		cat <<-CONF

			# ---- throwaway cluster (scripts/lib.sh) ----
			port = $port
			listen_addresses = ''
			unix_socket_directories = '$dir'
			shared_preload_libraries = 'changestream'
			wal_level = logical
		CONF
		cat
	} | cs_as_pg tee -a "$dir/data/postgresql.conf" >/dev/null
}

# cs_cluster_start DIR LOGFILE: start it and wait until it accepts
# connections.
cs_cluster_start() {
	cs_as_pg "$PG_BINDIR/pg_ctl" -D "$1/data" -l "$2" -w start >/dev/null
}

# cs_cluster_stop DIR [MODE]: stop it (pg_ctl -m MODE, default fast) and
# wait; never fails (it may not be running).
cs_cluster_stop() {
	cs_as_pg "$PG_BINDIR/pg_ctl" -D "$1/data" -m "${2:-fast}" -w stop >/dev/null 2>&1 || true
}

# cs_cluster_psql DIR PORT [psql arguments]: psql -X on database postgres.
cs_cluster_psql() {
	local dir=$1 port=$2
	shift 2
	cs_as_pg "$PG_BINDIR/psql" -X -h "$dir" -p "$port" -d postgres "$@"
}

# cs_tap_need_object_store SRCDIR t/NNN_x.pl...: true if one of the TAP
# files calls cs_object_store (t/ChangestreamTest.pm), so that the object
# store is started only for runs that use it.
cs_tap_need_object_store() {
	local src=$1 t
	shift
	for t in "$@"; do
		grep -q 'cs_object_store(' "$src/$t" 2>/dev/null && return 0
	done
	return 1
}

# The TAP files of a source tree, in the order prove starts them:
# cs_tap_schedule SRCDIR.  The files t/schedule names (the longest, one per
# line, longest first; "#" starts a comment) come first, so that with
# prove -j the run does not end waiting for one long file started last;
# then every other t/*.pl in name order.
cs_tap_schedule() {
	local src=$1 f name
	local -A listed=()
	if [ -f "$src/t/schedule" ]; then
		while read -r name; do
			name=${name%%#*}
			name=${name//[[:space:]]/}
			[ -n "$name" ] && [ -f "$src/t/$name" ] || continue
			listed[$name]=1
			printf 't/%s\n' "$name"
		done <"$src/t/schedule"
	fi
	for f in "$src"/t/*.pl; do
		[ -e "$f" ] || continue
		name=$(basename "$f")
		[ -n "${listed[$name]:-}" ] || printf 't/%s\n' "$name"
	done
}
