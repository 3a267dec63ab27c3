#!/usr/bin/env bash
# shared_fs.sh — a real network filesystem on this one machine: a GlusterFS volume and its FUSE clients.
#
# Usage (as root, Debian/Ubuntu):
#   tools/shared_fs.sh up                  install what is missing, start glusterd (unless one runs),
#                                          create and start the volume, mount the host's client at
#                                          $RFTHPC_SHARED_FS_MOUNT (idempotent: ~0.1 s when up)
#   tools/shared_fs.sh client DIR PIDFILE  mount one more client of the volume at DIR (its process's pid
#                                          in PIDFILE); local_slurm.sh mounts one per node this way, each
#                                          in the node's own mount namespace, at the host's path
#   tools/shared_fs.sh status              exit 0 iff the volume is started and the host's mount answers
#   tools/shared_fs.sh down                unmount the host's client, stop and delete the volume, stop
#                                          glusterd if this script started it
#
# Why: on a cluster every node is its own client of the shared filesystem, with caches of its own: a
# file one node changes reaches another a cache period late, a new name at once (docs/local-slurm.md,
# docs/scaling.md). rfthpc's roles hand things over through that filesystem, so the tests run them
# on different clients of a real one. GlusterFS runs as a user-space server and FUSE clients, so one
# machine can host the volume and as many clients as it wants. Every client uses the default mount
# options: those are what users have.
#
# Environment: RFTHPC_SHARED_FS_DIR    state dir (brick, logs, pids); default /tmp/rfthpc-sharedfs
#              RFTHPC_SHARED_FS_MOUNT  where the host's client (and each node's) is mounted;
#                                      default /mnt/rfthpc-shared
# Other volumes of the same glusterd are left alone.
set -Eeuo pipefail
trap 'echo "shared_fs: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
# shellcheck source=tools/apt_missing.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/apt_missing.sh"

STATE_DIR=${RFTHPC_SHARED_FS_DIR:-/tmp/rfthpc-sharedfs}
MOUNT=${RFTHPC_SHARED_FS_MOUNT:-/mnt/rfthpc-shared}
VOLUME=rfthpc
PACKAGES=(glusterfs-server glusterfs-client)
BRICK=$STATE_DIR/brick
PID_DIR=$STATE_DIR/pids
LOG_DIR=$STATE_DIR/log
GLUSTERD_PID=$PID_DIR/glusterd.pid
HOST_CLIENT_PID=$PID_DIR/client-host.pid

die() {
    echo "shared_fs: $*" >&2
    exit 1
}

usage() {
    sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

require_root() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (it installs packages, starts glusterd and mounts FUSE); try: sudo $0 $*"
}

# alive PIDFILE COMM: the pid recorded in PIDFILE if that process lives and runs COMM.
alive() {
    local pidfile=$1 comm=$2 pid
    [[ -s $pidfile ]] || return 1
    pid=$(<"$pidfile")
    [[ $pid =~ ^[0-9]+$ ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm" ]] || return 1
    echo "$pid"
}

gluster_cli() { gluster --mode=script "$@"; }

install_packages() {
    install_missing shared_fs "$LOG_DIR/apt.log" "${PACKAGES[@]}" || exit 1
}

check_fuse() {
    [[ -c /dev/fuse ]] || die "/dev/fuse is missing: FUSE clients cannot mount here (a container without the fuse device?)"
}

# start_glusterd: share one that runs (other volumes may be served by it); else start ours, with a pid file.
start_glusterd() {
    gluster_cli pool list >/dev/null 2>&1 && return 0
    # 9>&-: the daemon must not inherit (and hold) this script's lock.
    glusterd -p "$GLUSTERD_PID" --log-level WARNING --log-file "$LOG_DIR/glusterd.log" 9>&- \
        || die "glusterd did not start (log: $LOG_DIR/glusterd.log)"
    local i
    for ((i = 0; i < 150; i++)); do
        gluster_cli pool list >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    die "glusterd did not answer within 30 s (log: $LOG_DIR/glusterd.log)"
}

volume_started() { [[ $(gluster_cli volume info "$VOLUME" 2>/dev/null | awk '/^Status:/ {print $2}') == Started ]]; }

start_volume() {
    if ! gluster_cli volume info "$VOLUME" >/dev/null 2>&1; then
        # A brick directory left by an earlier volume carries its extended attributes: wipe it.
        rm -rf "$BRICK"
        mkdir -p "$BRICK"
        # The brick is named by host name (glusterd refuses the literal 127.0.0.1).
        gluster_cli volume create "$VOLUME" "$(hostname):$BRICK" force >/dev/null \
            || die "gluster volume create $VOLUME failed"
        # Failed links and exclusive creates (EEXIST: a compare-and-swap that lost) are logged as errors
        # by the brick; they are normal for rfthpc, so keep its log to what is critical.
        gluster_cli volume set "$VOLUME" diagnostics.brick-log-level CRITICAL >/dev/null
        gluster_cli volume set "$VOLUME" diagnostics.client-log-level WARNING >/dev/null
    fi
    volume_started || gluster_cli volume start "$VOLUME" >/dev/null || die "gluster volume start $VOLUME failed"
}

mounted() { mountpoint -q "$1" 2>/dev/null; }

# clear_stale DIR: a client that died (killed, or the machine's session ended) leaves its mount behind,
# answering "Transport endpoint is not connected"; detach it so a new client can mount there.
clear_stale() {
    local dir=$1
    stat "$dir" >/dev/null 2>&1 && return 0
    awk -v d="$dir" '$2 == d {found = 1} END {exit !found}' /proc/self/mounts || return 0
    echo "shared_fs: $dir is a dead client's mount; detaching it" >&2
    umount -l "$dir"
}

# mount_client DIR PIDFILE: a FUSE client of the volume at DIR, default options, its pid in PIDFILE.
mount_client() {
    local dir=$1 pidfile=$2 i
    clear_stale "$dir"
    mkdir -p "$dir" "$(dirname "$pidfile")" "$LOG_DIR"
    glusterfs --volfile-server=127.0.0.1 --volfile-id="$VOLUME" --pid-file="$pidfile" \
        --log-file="$LOG_DIR/client-$(basename "$pidfile" .pid).log" --log-level=WARNING "$dir" 9>&- \
        || die "the GlusterFS client did not start for $dir"
    for ((i = 0; i < 150; i++)); do
        mounted "$dir" && return 0
        sleep 0.1
    done
    die "the GlusterFS client did not mount $dir within 15 s (log: $LOG_DIR)"
}

answers() {
    local probe=$MOUNT/.probe-$$
    echo ok >"$probe" && [[ $(<"$probe") == ok ]] && rm -f "$probe"
}

cmd_up() {
    require_root up
    mkdir -p "$PID_DIR" "$LOG_DIR"
    exec 9>"$STATE_DIR/.lock"
    flock -w 300 9 || die "another shared_fs.sh holds $STATE_DIR/.lock for over 300 s"
    if volume_started 2>/dev/null && mounted "$MOUNT" && answers; then
        echo "shared filesystem up: GlusterFS volume $VOLUME mounted at $MOUNT"
        return 0
    fi
    install_packages
    check_fuse
    start_glusterd
    start_volume
    mounted "$MOUNT" || mount_client "$MOUNT" "$HOST_CLIENT_PID"
    answers || die "$MOUNT is mounted but does not answer (log: $LOG_DIR)"
    echo "shared filesystem up: GlusterFS volume $VOLUME mounted at $MOUNT (state in $STATE_DIR)"
}

cmd_client() {
    require_root client
    [[ $# -eq 2 ]] || die "usage: $0 client DIR PIDFILE"
    check_fuse
    volume_started || die "volume $VOLUME is not started: run $0 up first"
    mounted "$1" || mount_client "$1" "$2"
}

cmd_status() {
    local ok=0 pid
    if volume_started 2>/dev/null; then echo "volume $VOLUME: started"; else echo "volume $VOLUME: NOT started"; ok=1; fi
    if mounted "$MOUNT" && answers; then
        pid=$(alive "$HOST_CLIENT_PID" glusterfs) && echo "host client: $MOUNT (pid $pid)" || echo "host client: $MOUNT"
    else
        echo "host client: $MOUNT NOT mounted or not answering"
        ok=1
    fi
    return "$ok"
}

cmd_down() {
    require_root down
    [[ -d $STATE_DIR ]] || { echo "shared_fs: nothing to stop ($STATE_DIR does not exist)"; return 0; }
    exec 9>"$STATE_DIR/.lock"
    flock -w 300 9 || die "another shared_fs.sh holds $STATE_DIR/.lock for over 300 s"
    local pid
    if mounted "$MOUNT"; then umount "$MOUNT" || umount -l "$MOUNT"; fi
    if pid=$(alive "$HOST_CLIENT_PID" glusterfs); then kill -TERM "$pid" 2>/dev/null || true; fi
    if gluster_cli volume info "$VOLUME" >/dev/null 2>&1; then
        gluster_cli volume stop "$VOLUME" force >/dev/null 2>&1 || true
        gluster_cli volume delete "$VOLUME" >/dev/null 2>&1 || true
    fi
    if pid=$(alive "$GLUSTERD_PID" glusterd); then kill -TERM "$pid" 2>/dev/null || true; fi
    rm -f "$HOST_CLIENT_PID" "$GLUSTERD_PID"
    echo "shared filesystem down (state kept in $STATE_DIR)"
}

case ${1:-} in
    up) cmd_up ;;
    client) shift; cmd_client "$@" ;;
    status) cmd_status || exit 1 ;;
    down) cmd_down ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
esac
