# shellcheck shell=bash
# The TOKEND_*_THROWAWAY_* globals are read by callers:
# shellcheck disable=SC2034
# scripts/lib.sh: shared helpers for scripts/test and scripts/run. Source it;
# do not execute it.
#
# Functions
#   ensure_postgres        export TOKEND_PG_ADMIN_URL: a reachable server where
#                          we are superuser. Reuses TOKEND_PG_ADMIN_URL if set,
#                          else 127.0.0.1:5432, else starts a throwaway cluster,
#                          installing the postgresql package only as a last resort.
#   ensure_redis [--no-install]
#                          export TOKEND_REDIS_TEST_URL (redis://host:port/0).
#                          Returns non-zero (never exits) when Redis can't be had.
#   create_database NAME   create NAME on the admin server unless it exists.
#   pg_url_for_db NAME     print TOKEND_PG_ADMIN_URL with its database replaced.
#   tokend_cleanup         stop whatever this shell started (use in a trap).
#   ensure_c_compiler      make sure `go test -race` (cgo) can build.
#
# Knobs (environment)
#   TOKEND_FORCE_THROWAWAY_PG=1     ignore running servers, start our own.
#   TOKEND_FORCE_THROWAWAY_REDIS=1  same for Redis.
#   TOKEND_PERSIST_DIR=DIR          throwaway servers live under DIR, outlive
#                                   the script and are reused by the next call
#                                   (scripts/run). Unset: a temp dir, stopped
#                                   and removed by tokend_cleanup (scripts/test).
#   TOKEND_PG_PORT_BASE / TOKEND_REDIS_PORT_BASE
#                                   first port tried for throwaways
#                                   (default 55432 / 56379).

# Gin's MessagePack binding, and the ugorji codec under it, is never used:
# the nomsgpack tag leaves both out of every build the scripts make, about
# 60 CPU-seconds of a cold -race compile (docs/testing.md). A -tags the
# caller put in GOFLAGS wins.
case " ${GOFLAGS:-} " in
*" -tags="* | *" -tags "*) ;;
*) export GOFLAGS="${GOFLAGS:+$GOFLAGS }-tags=nomsgpack" ;;
esac

_TOKEND_CLEANUP=()
_TOKEND_APT_UPDATED=0
# Set when we started (or reused) a throwaway server; informational.
TOKEND_PG_THROWAWAY_DATA=""
TOKEND_PG_THROWAWAY_BINDIR=""
TOKEND_REDIS_THROWAWAY_DIR=""

# log prints a progress line, with the time, so a slow phase shows in CI's output.
log() { printf '==> %s %s\n' "$(date +%T)" "$*" >&2; }
warn() { printf '==> WARNING: %s\n' "$*" >&2; }
die() {
	printf '==> ERROR: %s\n' "$*" >&2
	exit 1
}

# _register_cleanup CMD...: run CMD (eval'd) from tokend_cleanup, newest first.
_register_cleanup() { _TOKEND_CLEANUP+=("$*"); }

tokend_cleanup() {
	local i
	for ((i = ${#_TOKEND_CLEANUP[@]} - 1; i >= 0; i--)); do
		eval "${_TOKEND_CLEANUP[i]}" || true
	done
	_TOKEND_CLEANUP=()
}

# _port_in_use PORT: true if something accepts TCP connections on 127.0.0.1:PORT.
_port_in_use() {
	timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# _free_port BASE: print the first port >= BASE nobody listens on.
_free_port() {
	local p=$1
	while _port_in_use "$p"; do
		p=$((p + 1))
		((p < $1 + 200)) || return 1
	done
	echo "$p"
}

# _as_root CMD...: run CMD as root (directly, or via non-interactive sudo).
_as_root() {
	if [[ $EUID -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		sudo -n "$@"
	else
		return 1
	fi
}

# _apt_install PKG...: last-resort package install.
_apt_install() {
	command -v apt-get >/dev/null || {
		warn "apt-get not available; cannot install $*"
		return 1
	}
	if [[ $_TOKEND_APT_UPDATED -eq 0 ]]; then
		log "apt-get update"
		_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || {
			warn "apt-get update failed (need root or passwordless sudo)"
			return 1
		}
		_TOKEND_APT_UPDATED=1
	fi
	log "apt-get install -y --no-install-recommends $*"
	_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}

# ---------------------------------------------------------------- Postgres --

# _pg_bindir: print the newest /usr/lib/postgresql/*/bin holding initdb+pg_ctl,
# or the directory of initdb on PATH.
_pg_bindir() {
	local d best=""
	# sort -V: version 9.6 < 15, unlike the glob's lexical order
	while read -r d; do
		[[ -x $d/initdb && -x $d/pg_ctl ]] && best=$d
	done < <(compgen -G '/usr/lib/postgresql/*/bin' | sort -V)
	if [[ -z $best ]] && command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
		best=$(dirname "$(readlink -f "$(command -v pg_ctl)")")
	fi
	[[ -n $best ]] && echo "$best"
}

# _pg_tool NAME: path of a client tool (PATH first, then the server bindir).
_pg_tool() {
	local b
	if command -v "$1" >/dev/null; then
		command -v "$1"
	elif b=$(_pg_bindir) && [[ -x $b/$1 ]]; then
		echo "$b/$1"
	else
		return 1
	fi
}

# _pg_superuser_ok URL: true if URL connects and its user is a superuser.
_pg_superuser_ok() {
	local psql out
	psql=$(_pg_tool psql) || return 1
	out=$(PGCONNECT_TIMEOUT=5 "$psql" -X -w -q -t -A -d "$1" \
		-c 'select rolsuper from pg_roles where rolname = current_user' 2>/dev/null) || return 1
	[[ $out == t ]]
}

# _pg_ready HOST PORT: pg_isready, or a plain TCP probe without it.
_pg_ready() {
	local isready
	if isready=$(_pg_tool pg_isready); then
		"$isready" -q -h "$1" -p "$2" -t 3
	else
		_port_in_use "$2"
	fi
}

# _run_as_pg CMD...: run CMD as the `postgres` OS user when we are root
# (initdb refuses root), else as ourselves.
_run_as_pg() {
	if [[ $EUID -ne 0 ]]; then
		"$@"
	elif command -v runuser >/dev/null; then
		runuser -u postgres -- "$@"
	else
		su -s /bin/sh postgres -c "$(printf '%q ' "$@")"
	fi
}

# _pg_throwaway_dir: print (and create) the directory for our own cluster.
_pg_throwaway_dir() {
	local dir
	if [[ -n ${TOKEND_PERSIST_DIR:-} ]]; then
		dir=$TOKEND_PERSIST_DIR/pg
		mkdir -p "$dir"
		[[ $EUID -eq 0 ]] && chown postgres: "$dir"
		# The postgres user must be able to reach it (a repo under /root can't).
		if ! (cd / && _run_as_pg test -w "$dir" -a -x "$dir") 2>/dev/null; then
			dir=${TMPDIR:-/tmp}/tokend-pg-$(printf '%s' "$TOKEND_PERSIST_DIR" | cksum | cut -d' ' -f1)
			mkdir -p "$dir"
			chmod 700 "$dir"
			[[ $EUID -eq 0 ]] && chown postgres: "$dir"
		fi
	else
		dir=$(mktemp -d "${TMPDIR:-/tmp}/tokend-pg.XXXXXX")
		[[ $EUID -eq 0 ]] && chown postgres: "$dir"
	fi
	echo "$dir"
}

# _pg_start_throwaway: start (or, when persistent, reuse) our own cluster and
# set TOKEND_PG_ADMIN_URL.
_pg_start_throwaway() {
	local bindir dir data port attempt url
	bindir=$(_pg_bindir) || return 1
	if [[ $EUID -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
		warn "no 'postgres' OS user to run initdb as"
		return 1
	fi
	dir=$(_pg_throwaway_dir) || return 1
	data=$dir/data

	if [[ -n ${TOKEND_PERSIST_DIR:-} && -f $dir/port && -f $data/postmaster.pid ]] &&
		(cd / && _run_as_pg "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1); then
		port=$(<"$dir/port")
		url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
		if _pg_superuser_ok "$url"; then
			log "reusing throwaway PostgreSQL at 127.0.0.1:$port (data $data)"
			TOKEND_PG_THROWAWAY_DATA=$data TOKEND_PG_THROWAWAY_BINDIR=$bindir
			TOKEND_PG_ADMIN_URL=$url
			return 0
		fi
	fi

	if [[ ! -f $data/PG_VERSION ]]; then
		log "initdb throwaway PostgreSQL cluster in $data ($bindir)"
		(cd / && _run_as_pg "$bindir/initdb" -D "$data" -U postgres -A trust -E UTF8 \
			--locale=C --no-sync >"$dir/initdb.log" 2>&1) || {
			cat "$dir/initdb.log" >&2
			warn "initdb failed"
			return 1
		}
		{
			echo "# added by scripts/lib.sh"
			echo "listen_addresses = '127.0.0.1'"
			echo "unix_socket_directories = ''"
			echo "max_connections = 300"
			if [[ -z ${TOKEND_PERSIST_DIR:-} ]]; then
				# test cluster: durability is worthless, speed is not
				echo "fsync = off"
				echo "synchronous_commit = off"
				echo "full_page_writes = off"
			fi
		} >>"$data/postgresql.conf"
	fi

	port=${TOKEND_PG_PORT_BASE:-55432}
	# a persistent cluster comes back on its old port when that is free
	[[ -n ${TOKEND_PERSIST_DIR:-} && -f $dir/port ]] && port=$(<"$dir/port")
	for attempt in 1 2 3 4 5; do
		port=$(_free_port "$port") || break
		log "starting throwaway PostgreSQL on 127.0.0.1:$port"
		if (cd / && _run_as_pg "$bindir/pg_ctl" -D "$data" -l "$dir/postgres.log" -w -t 60 \
			-o "-p $port" start >/dev/null 2>&1); then
			echo "$port" >"$dir/port"
			TOKEND_PG_THROWAWAY_DATA=$data TOKEND_PG_THROWAWAY_BINDIR=$bindir
			if [[ -z ${TOKEND_PERSIST_DIR:-} ]]; then
				_register_cleanup "_pg_stop_throwaway $(printf '%q %q %q' "$bindir" "$data" "$dir")"
			fi
			TOKEND_PG_ADMIN_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
			return 0
		fi
		warn "start on port $port failed (attempt $attempt); log tail:"
		tail -n 5 "$dir/postgres.log" >&2 2>/dev/null || true
		port=$((port + 1))
	done
	[[ -z ${TOKEND_PERSIST_DIR:-} ]] && rm -rf "$dir"
	return 1
}

_pg_stop_throwaway() {
	local bindir=$1 data=$2 dir=$3
	log "stopping throwaway PostgreSQL ($data)"
	(cd / && _run_as_pg "$bindir/pg_ctl" -D "$data" -m immediate -w -t 30 stop >/dev/null 2>&1) ||
		warn "pg_ctl stop failed for $data"
	rm -rf "$dir"
}

ensure_postgres() {
	local url=${TOKEND_PG_ADMIN_URL:-}
	if [[ -n $url ]]; then
		if _pg_superuser_ok "$url"; then
			log "using PostgreSQL from TOKEND_PG_ADMIN_URL"
			export TOKEND_PG_ADMIN_URL
			return 0
		fi
		die "TOKEND_PG_ADMIN_URL is set but does not reach a server as a superuser"
	fi

	url="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	if [[ ${TOKEND_FORCE_THROWAWAY_PG:-0} != 1 ]]; then
		if _pg_ready 127.0.0.1 5432 && _pg_superuser_ok "$url"; then
			log "using running PostgreSQL at 127.0.0.1:5432"
			export TOKEND_PG_ADMIN_URL=$url
			return 0
		fi
		log "no usable PostgreSQL at 127.0.0.1:5432 (need trust auth as superuser postgres)"
	else
		log "TOKEND_FORCE_THROWAWAY_PG=1: not reusing a running PostgreSQL"
	fi

	if ! _pg_bindir >/dev/null || ! _pg_tool psql >/dev/null; then
		log "no PostgreSQL binaries found; installing the postgresql package"
		_apt_install postgresql || die "cannot install postgresql; install it or set TOKEND_PG_ADMIN_URL"
		# The package may have started its own cluster; usable only with trust auth.
		if [[ ${TOKEND_FORCE_THROWAWAY_PG:-0} != 1 ]] && _pg_ready 127.0.0.1 5432 &&
			_pg_superuser_ok "$url"; then
			log "using freshly installed PostgreSQL at 127.0.0.1:5432"
			export TOKEND_PG_ADMIN_URL=$url
			return 0
		fi
	fi

	_pg_start_throwaway || die "could not start a throwaway PostgreSQL cluster"
	_pg_superuser_ok "$TOKEND_PG_ADMIN_URL" || die "throwaway PostgreSQL started but psql cannot connect"
	export TOKEND_PG_ADMIN_URL
}

# pg_url_for_db NAME: the admin URL pointing at database NAME.
pg_url_for_db() {
	local re='^(postgres(ql)?://[^/?]*)(/[^?]*)?(\?.*)?$'
	[[ $TOKEND_PG_ADMIN_URL =~ $re ]] || die "cannot parse TOKEND_PG_ADMIN_URL"
	echo "${BASH_REMATCH[1]}/$1${BASH_REMATCH[4]:-?sslmode=disable}"
}

# create_database NAME: idempotent CREATE DATABASE on the admin server.
create_database() {
	local name=$1 psql
	[[ -n ${TOKEND_PG_ADMIN_URL:-} ]] || die "create_database: call ensure_postgres first"
	psql=$(_pg_tool psql) || die "psql not found"
	_db_exists() {
		[[ $("$psql" -X -w -q -t -A -d "$TOKEND_PG_ADMIN_URL" -v n="$name" 2>/dev/null <<<"select 1 from pg_database where datname = :'n'") == 1 ]]
	}
	if _db_exists; then
		log "database $name exists"
		return 0
	fi
	log "creating database $name"
	if ! "$psql" -X -w -q -d "$TOKEND_PG_ADMIN_URL" -v ON_ERROR_STOP=1 -v n="$name" >/dev/null <<<"select format('create database %I', :'n') \\gexec"; then
		_db_exists || die "could not create database $name"
	fi
}

# ------------------------------------------------------------------ Redis --

# _redis_ping HOST PORT: true if a Redis answers PING (no redis-cli needed).
_redis_ping() {
	# shellcheck disable=SC2016
	timeout 3 bash -c '
		exec 3<>"/dev/tcp/$1/$2" || exit 1
		printf "PING\r\n" >&3
		IFS= read -r -t 2 line <&3 || exit 1
		[[ $line == "+PONG"* ]]' _ "$1" "$2" 2>/dev/null
}

# _redis_is_ours PORT PIDFILE: true if the Redis on 127.0.0.1:PORT is the one
# we started with PIDFILE (another run may have won the race for the port).
_redis_is_ours() {
	# shellcheck disable=SC2016
	timeout 3 bash -c '
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf "CONFIG GET pidfile\r\n" >&3
		for i in 1 2 3 4 5 6; do
			IFS= read -r -t 2 line <&3 || exit 1
			[[ ${line%$'"'"'\r'"'"'} == "$2" ]] && exit 0
		done
		exit 1' _ "$1" "$2" 2>/dev/null
}

_redis_stop_throwaway() {
	local dir=$1 pid i
	log "stopping throwaway Redis ($dir)"
	if [[ -f $dir/redis.pid ]]; then
		pid=$(<"$dir/redis.pid")
		kill "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}

_redis_start_throwaway() {
	local server dir port attempt i pid
	server=$(command -v redis-server) || return 1
	if [[ -n ${TOKEND_PERSIST_DIR:-} ]]; then
		dir=$TOKEND_PERSIST_DIR/redis
		mkdir -p "$dir"
		if [[ -f $dir/port && -f $dir/redis.pid ]]; then
			pid=$(<"$dir/redis.pid")
			port=$(<"$dir/port")
			if kill -0 "$pid" 2>/dev/null && _redis_is_ours "$port" "$dir/redis.pid"; then
				log "reusing throwaway Redis at 127.0.0.1:$port"
				TOKEND_REDIS_THROWAWAY_DIR=$dir
				TOKEND_REDIS_TEST_URL="redis://127.0.0.1:$port/0"
				return 0
			fi
		fi
	else
		dir=$(mktemp -d "${TMPDIR:-/tmp}/tokend-redis.XXXXXX")
	fi
	port=${TOKEND_REDIS_PORT_BASE:-56379}
	[[ -n ${TOKEND_PERSIST_DIR:-} && -f $dir/port ]] && port=$(<"$dir/port")
	for attempt in 1 2 3 4 5; do
		port=$(_free_port "$port") || break
		log "starting throwaway Redis on 127.0.0.1:$port"
		rm -f "$dir/redis.pid"
		if "$server" --port "$port" --bind 127.0.0.1 --daemonize yes --save '' --appendonly no \
			--dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null 2>&1; then
			for ((i = 0; i < 50; i++)); do
				_redis_ping 127.0.0.1 "$port" && break
				sleep 0.1
			done
			if _redis_ping 127.0.0.1 "$port" && _redis_is_ours "$port" "$dir/redis.pid"; then
				echo "$port" >"$dir/port"
				TOKEND_REDIS_THROWAWAY_DIR=$dir
				[[ -z ${TOKEND_PERSIST_DIR:-} ]] &&
					_register_cleanup "_redis_stop_throwaway $(printf '%q' "$dir")"
				TOKEND_REDIS_TEST_URL="redis://127.0.0.1:$port/0"
				return 0
			fi
			# not ours (lost a race for the port) or not answering: stop it
			if [[ -f $dir/redis.pid ]]; then
				pid=$(<"$dir/redis.pid")
				kill "$pid" 2>/dev/null || true
				for ((i = 0; i < 30; i++)); do
					kill -0 "$pid" 2>/dev/null || break
					sleep 0.1
				done
			fi
		fi
		warn "Redis start on port $port failed (attempt $attempt)"
		tail -n 5 "$dir/redis.log" >&2 2>/dev/null || true
		port=$((port + 1))
	done
	[[ -z ${TOKEND_PERSIST_DIR:-} ]] && rm -rf "$dir"
	return 1
}

# ensure_redis [--no-install]: export TOKEND_REDIS_TEST_URL or return 1.
ensure_redis() {
	local install=1 re='^rediss?://([^@/]*@)?([^:/]+):([0-9]+)'
	[[ ${1:-} == --no-install ]] && install=0

	if [[ -n ${TOKEND_REDIS_TEST_URL:-} ]]; then
		if [[ $TOKEND_REDIS_TEST_URL =~ $re ]] && _redis_ping "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}"; then
			log "using Redis from TOKEND_REDIS_TEST_URL"
			export TOKEND_REDIS_TEST_URL
			return 0
		fi
		warn "TOKEND_REDIS_TEST_URL is set but no Redis answers there"
		return 1
	fi

	if [[ ${TOKEND_FORCE_THROWAWAY_REDIS:-0} != 1 ]]; then
		if _redis_ping 127.0.0.1 6379; then
			log "using running Redis at 127.0.0.1:6379"
			export TOKEND_REDIS_TEST_URL="redis://127.0.0.1:6379/0"
			return 0
		fi
		log "no Redis at 127.0.0.1:6379"
	else
		log "TOKEND_FORCE_THROWAWAY_REDIS=1: not reusing a running Redis"
	fi

	if ! command -v redis-server >/dev/null; then
		if [[ $install -eq 0 ]]; then
			log "redis-server not installed; going without Redis"
			return 1
		fi
		log "no redis-server found; installing the redis-server package"
		_apt_install redis-server || {
			warn "cannot install redis-server"
			return 1
		}
		if [[ ${TOKEND_FORCE_THROWAWAY_REDIS:-0} != 1 ]] && _redis_ping 127.0.0.1 6379; then
			log "using freshly installed Redis at 127.0.0.1:6379"
			export TOKEND_REDIS_TEST_URL="redis://127.0.0.1:6379/0"
			return 0
		fi
	fi

	_redis_start_throwaway || {
		warn "could not start a throwaway Redis"
		return 1
	}
	export TOKEND_REDIS_TEST_URL
}

# ------------------------------------------------------------------- misc --

# ensure_c_compiler: `go test -race` needs cgo and a C compiler.
ensure_c_compiler() {
	local cc
	cc=$(go env CC)
	if command -v "${cc%% *}" >/dev/null; then
		return 0
	fi
	log "no C compiler ($cc) for -race; installing gcc"
	_apt_install gcc libc6-dev || die "-race needs a C compiler; install gcc"
}

# ------------------------------------------- deployments: PgBouncer, Cluster --

# _port_pair_free P: P and its Redis Cluster bus port P+10000 are both free.
_port_pair_free() { ! _port_in_use "$1" && ! _port_in_use $(($1 + 10000)); }

# start_pgbouncer: start PgBouncer (installing Debian's package if missing)
# in transaction pooling mode in front of TOKEND_PG_ADMIN_URL's server, on a
# free loopback port, and export TOKEND_TEST_PGBOUNCER_ADDR. It is stopped
# at exit. Returns 1 when it cannot.
start_pgbouncer() {
	local bin dir port host pgport i owner=()
	local re='^postgres(ql)?://([^@/]*@)?([^:/?]+)(:([0-9]+))?'
	bin=$(command -v pgbouncer) || { _apt_install pgbouncer && bin=$(command -v pgbouncer); } || return 1
	[[ $TOKEND_PG_ADMIN_URL =~ $re ]] || return 1
	host=${BASH_REMATCH[3]} pgport=${BASH_REMATCH[5]:-5432}
	# Below the kernel's ephemeral range, like the Redis Cluster's ports.
	port=$(_free_port 16432) || return 1
	dir=$(mktemp -d "${TMPDIR:-/tmp}/tokend-pgbouncer.XXXXXX")
	echo '"postgres" ""' >"$dir/users.txt"
	cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=$host port=$pgport
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 40
pidfile = $dir/pgbouncer.pid
logfile = $dir/pgbouncer.log
INI
	# PgBouncer refuses to run as root.
	if [[ $EUID -eq 0 ]]; then
		id postgres >/dev/null 2>&1 || return 1
		chmod 755 "$dir" && chown -R postgres "$dir"
		owner=(-u postgres)
	fi
	log "starting PgBouncer $("$bin" --version 2>/dev/null | head -n 1 | awk '{print $2}') (transaction pooling) on 127.0.0.1:$port"
	"$bin" -d "${owner[@]}" "$dir/pgbouncer.ini" >/dev/null 2>&1 || {
		tail -n 5 "$dir/pgbouncer.log" >&2 2>/dev/null
		rm -rf "$dir"
		return 1
	}
	_register_cleanup "_stop_pidfile $(printf '%q' "$dir/pgbouncer.pid") $(printf '%q' "$dir")"
	for ((i = 0; i < 50; i++)); do
		_port_in_use "$port" && break
		sleep 0.1
	done
	_port_in_use "$port" || {
		warn "PgBouncer is not listening on $port after 5s: $(tail -n 3 "$dir/pgbouncer.log" 2>/dev/null | tr '\n' ' ')"
		return 1
	}
	export TOKEND_TEST_PGBOUNCER_ADDR=127.0.0.1:$port
}

# start_redis_cluster: start a Redis Cluster of 3 masters with a replica
# each (6 redis-server processes on free loopback ports from 22000; a node's
# bus port is its port + 10000, so both stay below the kernel's ephemeral
# range, where a client socket left by the tests could hold a port that
# looked free) and export TOKEND_TEST_REDIS_CLUSTER_URL. A node that does
# not come up is reported and replaced by one on the next free port. It is
# stopped at exit. Returns 1, saying why, when it cannot.
start_redis_cluster() {
	local server cli dir p=22000 i tries ports=() url
	server=$(command -v redis-server) && cli=$(command -v redis-cli) || {
		warn "redis-server and redis-cli are needed for a Redis Cluster"
		return 1
	}
	dir=$(mktemp -d "${TMPDIR:-/tmp}/tokend-redis-cluster.XXXXXX")
	_register_cleanup "_stop_redis_cluster $(printf '%q' "$dir")"
	for ((tries = 0; ${#ports[@]} < 6 && tries < 20; tries++)); do
		while ! _port_pair_free "$p"; do
			p=$((p + 1))
			((p <= 22767)) || {
				warn "no free port pair for a Redis Cluster node below 22768"
				return 1
			}
		done
		"$server" --port "$p" --bind 127.0.0.1 --daemonize yes --save '' --appendonly no \
			--cluster-enabled yes --cluster-config-file "nodes-$p.conf" --cluster-node-timeout 1000 \
			--dir "$dir" --pidfile "$dir/$p.pid" --logfile "$dir/$p.log" >/dev/null 2>&1
		for ((i = 0; i < 30; i++)); do
			_redis_ping 127.0.0.1 "$p" && break
			sleep 0.1
		done
		if _redis_ping 127.0.0.1 "$p"; then
			ports+=("$p")
		else
			warn "redis-server on port $p did not come up; trying the next port. Its log: $(tail -n 3 "$dir/$p.log" 2>/dev/null | tr '\n' ' ')"
			[[ -f $dir/$p.pid ]] && kill "$(<"$dir/$p.pid")" 2>/dev/null
		fi
		p=$((p + 1))
	done
	((${#ports[@]} == 6)) || {
		warn "could not start 6 Redis Cluster nodes"
		return 1
	}
	log "creating a Redis Cluster of 3 masters and 3 replicas on ports ${ports[*]}"
	"$cli" --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 || {
		warn "redis-cli --cluster create failed: $(tail -n 3 "$dir/create.log" | tr '\n' ' ')"
		return 1
	}
	for ((i = 0; i < 100; i++)); do
		"$cli" -p "${ports[0]}" cluster info 2>/dev/null | grep -q '^cluster_state:ok' && break
		sleep 0.1
	done
	"$cli" -p "${ports[0]}" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || {
		warn "the Redis Cluster on ports ${ports[*]} did not reach cluster_state:ok within 10s"
		return 1
	}
	url="redis://127.0.0.1:${ports[0]}?"
	for p in "${ports[@]:1}"; do url+="addr=127.0.0.1:$p&"; done
	export TOKEND_TEST_REDIS_CLUSTER_URL=${url%&}
}

# _stop_pidfile PIDFILE DIR: stop the process of PIDFILE, remove DIR.
_stop_pidfile() {
	[[ -f $1 ]] && kill "$(<"$1")" 2>/dev/null
	rm -rf "$2"
}

# _stop_redis_cluster DIR: stop every node whose pid file is in DIR.
_stop_redis_cluster() {
	local f
	for f in "$1"/*.pid; do
		[[ -f $f ]] && kill "$(<"$f")" 2>/dev/null
	done
	log "stopped the Redis Cluster"
	rm -rf "$1"
}

# _citus_src: print the directory of the prebuilt Citus (install, cluster):
# $TOKEND_CITUS_SRC, else shared/citus beside the repository (../shared/citus
# from the main checkout, or from the main checkout of a worktree).
_citus_src() {
	local d common
	common=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
	for d in "${TOKEND_CITUS_SRC:-}" ../shared/citus ../../shared/citus ${common:+"$common/../../shared/citus"}; do
		[[ -n $d && -x $d/cluster && -x $d/install ]] && {
			(cd "$d" && pwd -P)
			return 0
		}
	done
	return 1
}

# start_citus_cluster: install Citus into the local PostgreSQL 15 from
# shared/citus when it lacks it (root only), start a throwaway coordinator
# with two workers, stopped by tokend_cleanup, and export
# TOKEND_TEST_CITUS_DIR (internal/testkit/pgtest makes each test's database on all
# three). Returns non-zero, having said why in one line, when it cannot.
start_citus_cluster() {
	local src dir pkglib
	src=$(_citus_src) || {
		warn "Citus pass skipped: no shared/citus found beside the repository (set TOKEND_CITUS_SRC)"
		return 1
	}
	pkglib=$(pg_config --pkglibdir 2>/dev/null || echo /usr/lib/postgresql/15/lib)
	if [[ ! -f $pkglib/citus.so ]]; then
		_as_root "$src/install" >/dev/null 2>&1 || {
			warn "Citus pass skipped: Citus is not installed and $src/install needs root"
			return 1
		}
	fi
	dir=$(mktemp -d "${TMPDIR:-/tmp}/tokend-citus.XXXXXX")
	rmdir "$dir" # cluster start makes it
	log "starting a Citus cluster (a coordinator and two workers) under $dir"
	bash "$src/cluster" start "$dir" >/dev/null 2>"$dir.log" || {
		warn "Citus pass skipped: the cluster did not start ($(tail -n 1 "$dir.log"))"
		bash "$src/cluster" stop "$dir" >/dev/null 2>&1 || true
		rm -f "$dir.log"
		return 1
	}
	rm -f "$dir.log"
	_register_cleanup "bash $(printf '%q' "$src/cluster") stop $(printf '%q' "$dir") >/dev/null 2>&1"
	export TOKEND_TEST_CITUS_DIR=$dir
	# For the tests that start a cluster of their own (a worker restart).
	export TOKEND_CITUS_SRC=$src
}
