#!/bin/sh
# failover/env.sh: a pg_auto_failover formation on loopback for pglease's
# failover tests (go test -tags failover ./failover/): one monitor and two
# Postgres nodes, a primary and a synchronous standby.
#
#   failover/env.sh up            start it (idempotent); prints the client URL
#   failover/env.sh down          stop everything and remove its directory
#   failover/env.sh url [DB]      the multi-host client URL of database DB
#                                 (default $PGLEASE_FAILOVER_DB or
#                                 pglease_failover, which up does not create)
#   failover/env.sh state         pg_autoctl show state
#   failover/env.sh wait-ready [S]  wait (S seconds, default 120) until the
#                                 formation is ready for a fault: the monitor
#                                 sees one primary and one secondary, both
#                                 healthy and in their goal state, and the
#                                 primary's pg_stat_replication shows the
#                                 secondary streaming (in the quorum when
#                                 synchronous_standby_names is set); on
#                                 timeout it says what was not ready
#   failover/env.sh primary       the node number (1 or 2) of the primary
#   failover/env.sh switchover    a planned failover (the monitor's
#                                 perform_failover), made so that pg_auto_failover
#                                 2.0 cannot lose commits to a race (see
#                                 switchover below)
#   failover/env.sh kill-postmaster  SIGKILL the primary's postmaster; its
#                                 keeper lives on and either restarts it in
#                                 place or, when the monitor fails over
#                                 first, rejoins as a secondary by itself
#                                 (pg_rewind); prints N
#   failover/env.sh kill-node     SIGKILL the primary's pg_autoctl,
#                                 postmaster and backends: the machine is
#                                 gone until start-node N; prints N
#   failover/env.sh start-node N  (re)start node N's keeper; a killed old
#                                 primary rejoins as a secondary
#   failover/env.sh save-logs D   copy pg_autoctl's and Postgres' logs to D
#   failover/env.sh sync|async    make the standby synchronous (the default)
#                                 or asynchronous (replication-quorum false)
#   failover/env.sh stop-sender   SIGSTOP the primary's WAL sender that
#                                 streams to the secondary: the standby
#                                 receives nothing more (a stopped receiver
#                                 would not do: the WAL already sent waits in
#                                 its socket buffer)
#   failover/env.sh cont-sender   SIGCONT the WAL sender stop-sender stopped
#
# The fault commands (switchover, kill-postmaster, kill-node, stop-sender)
# do not wait: run wait-ready first. Each one fails, signalling nothing,
# when it cannot find the process it should signal.
#
# Runs as root: installs postgresql-<major>-auto-failover when pg_autoctl is
# missing, and runs pg_autoctl and Postgres as user postgres with the
# server binaries on PATH. Everything lives under $PGLEASE_FAILOVER_DIR
# (default /tmp/pglease-failover), owned by postgres, including
# pg_autoctl's configuration, state and pid files (XDG_* point there).
# Ports: $PGLEASE_FAILOVER_PORT (default 6510) for the monitor, the next two
# for nodes 1 and 2, all on 127.0.0.1 with trust authentication.
#
# The monitor is tuned so that a test goes through several failovers in
# minutes: health checks every 1 s instead of 5 s, a node unhealthy after
# 5 s instead of 20 s (pgautofailover.node_considered_unhealthy_timeout),
# and a dead primary given up on after 10 s instead of 30 s
# (pgautofailover.primary_demote_timeout). Set
# PGLEASE_FAILOVER_MONITOR_DEFAULTS=1 to keep pg_auto_failover's defaults.
# In production keep primary_demote_timeout above the keepers'
# network_partition_timeout (20 s), so that an isolated primary has demoted
# itself before its standby is promoted.
set -eu

DIR=${PGLEASE_FAILOVER_DIR:-/tmp/pglease-failover}
BASE=${PGLEASE_FAILOVER_PORT:-6510}
DB=${PGLEASE_FAILOVER_DB:-pglease_failover}
HOST=127.0.0.1
MON_PORT=$BASE
MON_URI="postgres://autoctl_node@$HOST:$MON_PORT/pg_auto_failover?sslmode=disable"

major() { pg_config --version | sed -E 's/[^0-9]*([0-9]+).*/\1/'; }
BINDIR=${PGLEASE_FAILOVER_PG_BINDIR:-/usr/lib/postgresql/$(major)/bin}

log() { echo "failover/env.sh: $*" >&2; }
die() { log "$*"; exit 1; }

port_of() { # node number -> port
	echo $((BASE + $1))
}

pgdata_of() { # node name (monitor, node1, node2) -> data directory
	echo "$DIR/$1/pgdata"
}

# as_pg runs a command as postgres, with a clean environment whose XDG
# directories keep pg_autoctl's files under $DIR.
as_pg() {
	setpriv --reuid=postgres --regid=postgres --init-groups \
		env -i PATH="$BINDIR:/usr/bin:/bin" HOME="$DIR" LANG=C.UTF-8 \
		XDG_CONFIG_HOME="$DIR/xdg/config" XDG_DATA_HOME="$DIR/xdg/data" \
		XDG_RUNTIME_DIR="$DIR/xdg/run" \
		"$@"
}

autoctl() { (cd "$DIR" && as_pg pg_autoctl "$@"); }

psql_at() { # port db user sql
	"$BINDIR/psql" -X -q -At -h "$HOST" -p "$1" -d "$2" -U "$3" -v ON_ERROR_STOP=1 -c "$4"
}

monitor_sql() { psql_at "$MON_PORT" pg_auto_failover autoctl_node "$1"; }

ensure_installed() {
	command -v pg_autoctl >/dev/null 2>&1 && return 0
	[ "$(id -u)" -eq 0 ] || die "pg_autoctl is missing; run as root to install postgresql-$(major)-auto-failover"
	log "installing postgresql-$(major)-auto-failover"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "postgresql-$(major)-auto-failover" >/dev/null
}

# alive tells whether the process whose pid is in file $1 runs.
alive() {
	[ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# spawn runs pg_autoctl in the background, in a session of its own (so that
# kill-node can kill the whole process group), logging to $DIR/$name.log.
spawn() {
	name=$1
	shift
	(cd "$DIR" && exec setsid setpriv --reuid=postgres --regid=postgres --init-groups \
		env -i PATH="$BINDIR:/usr/bin:/bin" HOME="$DIR" LANG=C.UTF-8 \
		XDG_CONFIG_HOME="$DIR/xdg/config" XDG_DATA_HOME="$DIR/xdg/data" \
		XDG_RUNTIME_DIR="$DIR/xdg/run" \
		pg_autoctl "$@" >>"$DIR/$name.log" 2>&1 </dev/null) &
	echo $! >"$DIR/$name.pid"
}

wait_for() { # seconds description command...
	secs=$1
	what=$2
	shift 2
	end=$(($(date +%s) + secs))
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$end" ] || die "timed out after ${secs}s waiting for $what (logs in $DIR/*.log)"
		sleep 0.2
	done
}

counts() { # "primaries secondaries" as the monitor sees them, settled
	monitor_sql "SELECT count(*) FILTER (WHERE reportedstate = 'primary' AND goalstate = 'primary')
	                 || ' ' ||
	                    count(*) FILTER (WHERE reportedstate = 'secondary' AND goalstate = 'secondary')
	               FROM pgautofailover.node"
}

# unready prints what keeps the formation from being ready for a fault, or
# nothing when it is ready: the monitor sees two nodes, one primary and one
# secondary, each healthy, running and in its goal state; and the primary's
# pg_stat_replication shows a WAL sender streaming to that secondary, in
# the quorum when synchronous_standby_names is set.
unready() {
	m=$(monitor_sql "SELECT coalesce(string_agg(format('%s %s/%s health %s', nodename, reportedstate, goalstate, health), ', '
	                                            ORDER BY nodeid), 'no nodes')
	                 || '|' || (count(*) = 2
	                      AND count(*) FILTER (WHERE reportedstate = 'primary' AND goalstate = 'primary'
	                                             AND health = 1 AND reportedpgisrunning) = 1
	                      AND count(*) FILTER (WHERE reportedstate = 'secondary' AND goalstate = 'secondary'
	                                             AND health = 1 AND reportedpgisrunning) = 1)
	                 || '|' || coalesce(min(nodeport) FILTER (WHERE reportedstate = 'primary' AND goalstate = 'primary'), 0)
	                 || '|' || coalesce(min(nodeid) FILTER (WHERE reportedstate = 'secondary' AND goalstate = 'secondary'), 0)
	               FROM pgautofailover.node" 2>&1) || {
		echo "the monitor (port $MON_PORT) does not answer: $m"
		return 0
	}
	nodes=${m%%|*}
	m=${m#*|}
	settled=${m%%|*}
	m=${m#*|}
	pport=${m%%|*}
	sid=${m#*|}
	if [ "$settled" != true ]; then
		echo "the monitor does not see one primary and one secondary, healthy and in their goal state (reported/goal): $nodes"
		return 0
	fi
	standby="pgautofailover_standby_$sid"
	r=$(psql_at "$pport" postgres postgres "SELECT CASE
	        WHEN pg_is_in_recovery() THEN 'is in recovery'
	        WHEN r.state IS NULL THEN 'has no WAL sender to $standby in pg_stat_replication'
	        WHEN r.state <> 'streaming' THEN 'has its WAL sender to $standby ' || r.state || ', not streaming'
	        WHEN current_setting('synchronous_standby_names') <> '' AND r.sync_state NOT IN ('sync', 'quorum')
	          THEN 'sees $standby ' || r.sync_state || ', not in the quorum of '
	               || current_setting('synchronous_standby_names')
	        ELSE '' END
	      FROM (SELECT) AS one
	      LEFT JOIN LATERAL (SELECT state, sync_state FROM pg_stat_replication
	                          WHERE application_name = '$standby'
	                          ORDER BY state = 'streaming' DESC LIMIT 1) AS r ON true" 2>&1) || {
		echo "the primary (port $pport) does not answer: $r"
		return 0
	}
	[ -z "$r" ] || echo "the primary (port $pport) $r"
}

ready() { [ -z "$(unready)" ]; }

primary_node() {
	p=$(monitor_sql "SELECT nodeport FROM pgautofailover.node
	                  WHERE reportedstate = 'primary' AND goalstate = 'primary'")
	[ -n "$p" ] || die "no primary now: $(counts)"
	echo $((p - BASE))
}

secondary_node() {
	p=$(monitor_sql "SELECT nodeport FROM pgautofailover.node
	                  WHERE reportedstate = 'secondary' AND goalstate = 'secondary'")
	[ -n "$p" ] || die "no secondary now: $(counts)"
	echo $((p - BASE))
}

# postmaster prints the pid of the postmaster of node name, when one runs.
postmaster() {
	f="$(pgdata_of "$1")/postmaster.pid"
	[ -f "$f" ] || return 0
	pm=$(head -1 "$f")
	case $(ps -o args= -p "$pm" 2>/dev/null) in
	*"-D $(pgdata_of "$1")"*) echo "$pm" ;;
	esac
}

running() { alive "$DIR/monitor.pid" && alive "$DIR/node1.pid" && alive "$DIR/node2.pid"; }

url() { # [database]
	echo "postgres://postgres@$HOST:$(port_of 1),$HOST:$(port_of 2)/${1:-$DB}?target_session_attrs=read-write&sslmode=disable&connect_timeout=2"
}

start_node() { # n
	n=$1
	if alive "$DIR/node$n.pid"; then
		return 0
	fi
	if [ -f "$(pgdata_of "node$n")/PG_VERSION" ]; then
		spawn "node$n" run --pgdata "$(pgdata_of "node$n")"
	else
		spawn "node$n" create postgres --pgdata "$(pgdata_of "node$n")" --pgport "$(port_of "$n")" \
			--hostname "$HOST" --listen "$HOST" --name "node$n" --auth trust --no-ssl --monitor "$MON_URI" --run
	fi
}

up() {
	ensure_installed
	if running && ready; then
		url
		return 0
	fi
	[ ! -e "$DIR" ] || down
	mkdir -p "$DIR/xdg/config" "$DIR/xdg/data" "$DIR/xdg/run" "$DIR/monitor" "$DIR/node1" "$DIR/node2"
	chown -R postgres:postgres "$DIR"
	chmod 700 "$DIR/xdg/run"

	log "starting the monitor on port $MON_PORT"
	# create monitor has no --listen: create, set it, then run.
	autoctl create monitor --pgdata "$(pgdata_of monitor)" --pgport "$MON_PORT" \
		--hostname "$HOST" --auth trust --no-ssl >>"$DIR/monitor.log" 2>&1
	autoctl config set --pgdata "$(pgdata_of monitor)" postgresql.listen_addresses "$HOST" >/dev/null
	spawn monitor run --pgdata "$(pgdata_of monitor)"
	wait_for 60 "the monitor" monitor_sql "SELECT 1"
	# Declare a node dead after ~5 s rather than 20 s, and promote a standby
	# 10 s rather than 30 s after its primary stopped answering, unless
	# PGLEASE_FAILOVER_MONITOR_DEFAULTS is set.
	[ -n "${PGLEASE_FAILOVER_MONITOR_DEFAULTS:-}" ] ||
	for setting in health_check_period=1000 health_check_timeout=1000 health_check_max_retries=1 \
		health_check_retry_delay=500 node_considered_unhealthy_timeout=5000 primary_demote_timeout=10000; do
		psql_at "$MON_PORT" pg_auto_failover postgres \
			"ALTER SYSTEM SET pgautofailover.${setting%%=*} = ${setting#*=}" >/dev/null
	done
	psql_at "$MON_PORT" pg_auto_failover postgres "SELECT pg_reload_conf()" >/dev/null

	log "starting node 1 on port $(port_of 1)"
	start_node 1
	wait_for 60 "node 1 to be the single node" sh -c \
		"[ \"\$(\"$BINDIR/psql\" -X -At -h $HOST -p $MON_PORT -U autoctl_node -d pg_auto_failover -c \"SELECT reportedstate FROM pgautofailover.node WHERE nodeport = $(port_of 1)\")\" = single ]"
	log "starting node 2 on port $(port_of 2)"
	start_node 2
	wait_ready 120
	url
}

wait_ready() { # seconds
	secs=${1:-120}
	end=$(($(date +%s) + secs))
	while why=$(unready) && [ -n "$why" ]; do
		[ "$(date +%s)" -lt "$end" ] ||
			die "the formation is not ready for a fault after ${secs}s: $why (logs in $DIR/*.log)"
		sleep 0.5
	done
}

down() {
	for name in node2 node1 monitor; do
		if alive "$DIR/$name.pid"; then
			pid=$(cat "$DIR/$name.pid")
			# Ask the keeper to stop Postgres and itself; then kill its
			# process group (pg_autoctl and the postmaster; the backends
			# run in sessions of their own and are killed below).
			autoctl stop --pgdata "$(pgdata_of "$name")" --immediate >/dev/null 2>&1 || true
			i=0
			while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do
				sleep 0.2
				i=$((i + 1))
			done
			/bin/kill -s KILL -- "-$pid" 2>/dev/null || true
		fi
		pm=$(postmaster "$name")
		if [ -n "$pm" ]; then
			kids=$(ps -o pid= --ppid "$pm" || true)
			as_pg pg_ctl stop -D "$(pgdata_of "$name")" -m immediate -w -t 10 >/dev/null 2>&1 || true
			kill -KILL "$pm" $kids 2>/dev/null || true
		fi
	done
	rm -rf "$DIR"
}

set_mode() { # true (sync) | false (async)
	# pg_autoctl 2.0's set node (and get formation settings) logs "Monitor
	# ERROR: invalid byte sequence for encoding UTF8" for its get_nodes($1,
	# $2) call: monitor_get_nodes() passes the group id (0 here, from the
	# node's configuration; we pass nothing but --pgdata) as a pointer into
	# a stack buffer that is out of scope by the time the query is sent, so
	# the monitor receives garbage bytes. That call only lists the nodes'
	# settings for display; the setting itself is applied by its own call
	# (checked below through synchronous_standby_names), and the keepers
	# never make it. So its output goes to $DIR/env.log.
	# Each node's setting is made on a settled formation, and retried: the
	# monitor of pg_auto_failover 2.0 can fail it with "deadlock detected"
	# (set_node_replication_quorum against the primary's node_active while
	# it applies the other node's setting).
	for n in 1 2; do
		tries=1
		until wait_ready 120 &&
			autoctl set node replication-quorum "$1" --pgdata "$(pgdata_of "node$n")" >>"$DIR/env.log" 2>&1; do
			[ $tries -lt 5 ] || die "pg_autoctl set node replication-quorum $1 failed $tries times on node $n (see $DIR/env.log)"
			log "pg_autoctl set node replication-quorum $1 failed on node $n (see $DIR/env.log); trying again"
			tries=$((tries + 1))
		done
	done
	end=$(($(date +%s) + 60))
	while :; do
		ssn="?"
		if ready; then
			ssn=$(psql_at "$(port_of "$(primary_node)")" postgres postgres "SHOW synchronous_standby_names" 2>/dev/null || echo "?")
		fi
		case "$1:$ssn" in
		true:ANY*) break ;;
		false:) break ;;
		esac
		[ "$(date +%s)" -lt "$end" ] || die "synchronous_standby_names is '$ssn' after 60s"
		sleep 0.2
	done
	echo "synchronous_standby_names = '$ssn'"
}

sender_pid() { # the primary's WAL sender streaming to the secondary
	n=$(primary_node)
	pm=$(postmaster "node$n")
	[ -n "$pm" ] || die "node $n, the primary, has no running postmaster; run wait-ready first"
	pid=$(psql_at "$(port_of "$n")" postgres postgres "SELECT pid FROM pg_stat_replication
	        WHERE state = 'streaming' AND application_name LIKE 'pgautofailover\_standby\_%'
	        ORDER BY backend_start DESC LIMIT 1") ||
		die "cannot read pg_stat_replication on node $n, the primary"
	[ -n "$pid" ] || die "node $n, the primary, has no WAL sender streaming to the standby; run wait-ready first"
	[ "$(ps -o ppid= -p "$pid" | tr -d ' ')" = "$pm" ] ||
		die "WAL sender $pid is not a child of node $n's postmaster $pm"
	echo "$pid"
}

# keeper prints the pid of node n's pg_autoctl, or fails saying why.
keeper() {
	[ -s "$DIR/node$1.pid" ] || die "node $1 has no pg_autoctl pid file ($DIR/node$1.pid)"
	k=$(cat "$DIR/node$1.pid")
	kill -0 "$k" 2>/dev/null || die "node $1's pg_autoctl (pid $k) is not running"
	echo "$k"
}

# node_active_pid prints the pid of node n's "pg_autoctl: node active"
# service, or fails saying why.
node_active_pid() {
	k=$(keeper "$1")
	p=$(ps -o pid=,args= --ppid "$k" | awk '/node active/ {print $1}')
	[ -n "$p" ] || die "node $1's pg_autoctl (pid $k) has no node-active service"
	echo "$p"
}

# switchover is pg_autoctl perform failover, without its race. In
# pg_auto_failover 2.0, when the primary's keeper reports "primary" to the
# monitor after perform_failover() assigned it draining but before the
# standby reported prepare_promotion, the monitor sees no healthy standby
# in the quorum and reassigns the primary wait_primary: the keeper disables
# synchronous replication, and later cannot reach demote_timeout from
# wait_primary ("does not know how to reach state"), so the old primary
# acknowledges writes that the promoted standby never receives until the
# demote timeout, and pg_rewind drops them (upstream issues #774 and #1168,
# fixed after 2.0). So the primary's node-active service is paused
# (SIGSTOP) from before perform_failover() until the standby has reported
# prepare_promotion: the primary keeper's next report then finds
# demote_timeout, which it reaches from primary. Postgres itself keeps
# running throughout, with synchronous replication on.
switchover() {
	n=$(primary_node)
	s=$(secondary_node)
	na=$(node_active_pid "$n")
	kill -STOP "$na"
	trap 'kill -CONT "$na" 2>/dev/null || true' EXIT
	# A report already on its way must be over before the failover starts.
	wait_for 60 "node $n's last report to the monitor to finish" no_report_running
	psql_at "$MON_PORT" pg_auto_failover postgres "SELECT pgautofailover.perform_failover('default', 0)" >/dev/null
	wait_for 120 "node $s to report prepare_promotion" left_secondary "$s"
	kill -CONT "$na"
	trap - EXIT
	wait_for 240 "node $s to become the primary" is_primary "$s"
}

no_report_running() {
	[ "$(psql_at "$MON_PORT" pg_auto_failover postgres "SELECT count(*) FROM pg_stat_activity
	      WHERE state = 'active' AND query LIKE '%node_active(%' AND pid <> pg_backend_pid()")" = 0 ]
}

left_secondary() { # n
	[ "$(monitor_sql "SELECT reportedstate <> 'secondary' FROM pgautofailover.node WHERE nodeport = $(port_of "$1")")" = t ]
}

is_primary() { # n
	[ "$(primary_node 2>/dev/null)" = "$1" ]
}

cmd=${1:-}
[ $# -eq 0 ] || shift
case $cmd in
up) up ;;
down) down ;;
url) url "${1:-}" ;;
state) autoctl show state --pgdata "$(pgdata_of monitor)" ;;
wait-ready) wait_ready "${1:-120}" ;;
primary) primary_node ;;
secondary) secondary_node ;;
switchover) switchover ;;
kill-postmaster)
	n=$(primary_node)
	pm=$(postmaster "node$n")
	[ -n "$pm" ] || die "node $n has no postmaster"
	kill -KILL "$pm"
	echo "$n"
	;;
kill-node)
	n=$(primary_node)
	pm=$(postmaster "node$n")
	[ -n "$pm" ] || die "node $n has no postmaster"
	k=$(keeper "$n")
	# Postgres' children run in sessions of their own: kill them by pid
	# (a stopped WAL sender would otherwise hold the shared memory and keep
	# the node from ever starting again).
	kids=$(ps -o pid= --ppid "$pm" || true)
	/bin/kill -s KILL -- "-$k" ||
		die "cannot kill node $n's pg_autoctl process group $k"
	kill -KILL "$pm" $kids 2>/dev/null || true
	rm -f "$DIR/stopped-sender.pid"
	echo "$n"
	;;
start-node) start_node "${1:?node number}" ;;
save-logs)
	dest=${1:?destination directory}
	mkdir -p "$dest"
	for name in monitor node1 node2; do
		[ ! -f "$DIR/$name.log" ] || cp "$DIR/$name.log" "$dest/"
		[ ! -d "$(pgdata_of "$name")/log" ] || cp -r "$(pgdata_of "$name")/log" "$dest/$name-postgres"
	done
	[ ! -f "$DIR/env.log" ] || cp "$DIR/env.log" "$dest/"
	;;
sync) set_mode true ;;
async) set_mode false ;;
stop-sender)
	pid=$(sender_pid)
	kill -STOP "$pid"
	echo "$pid" >"$DIR/stopped-sender.pid"
	;;
cont-sender)
	[ -s "$DIR/stopped-sender.pid" ] || die "no WAL sender is stopped ($DIR/stopped-sender.pid is missing)"
	pid=$(cat "$DIR/stopped-sender.pid")
	kill -CONT "$pid" || die "the stopped WAL sender $pid is gone"
	rm -f "$DIR/stopped-sender.pid"
	;;
*)
	sed -n '2,/^# Runs as root/p' "$0" | sed '$d' >&2
	exit 2
	;;
esac
