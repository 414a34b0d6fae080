#!/usr/bin/env bash
# A single-node Slurm on this machine, for benchmarks: munged, slurmctld and slurmd.
#
#   scripts/slurm_local.sh start default   # the config from /work/shared/ENVIRONMENT.md
#   scripts/slurm_local.sh start tuned     # + settings from Slurm's high-throughput guide
#   scripts/slurm_local.sh status          # exit status 3 when Slurm is not running
#   scripts/slurm_local.sh stop            # cancel jobs, stop the daemons, wipe Slurm's state
#
# "start" writes /etc/slurm/slurm.conf (host from `hostname -s`, CPUs = nproc, RealMemory =
# MemTotal minus headroom), creates the spool and log folders and the munge key, starts
# munged, slurmctld and slurmd in that order and waits until `sinfo` shows the node idle.
# Starting again stops what this script started first, so every start is fresh.
#
# Environment (for experiments; the benchmark does not set them):
#   SLURM_LOCAL_SET="Key=Value;Key2=Value2"  replace (or add) lines of the generated config
#   SLURM_LOCAL_MUNGE_THREADS=N              munged threads (default 2; tuned: 10)
#   SLURM_LOCAL_TIMEOUT=S                    how long to wait for the node to be idle (60)
#
# Needs root (it writes /etc/slurm and starts system daemons) and the packages that
# scripts/system_deps.sh installs (slurm-wlm, munge).
set -euo pipefail

CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
STATE_DIR=/var/spool/slurmctld
SLURMD_DIR=/var/spool/slurmd
LOG_DIR=/var/log/slurm
RUN_DIR=/run/slurm_local            # what this script started: pid files, marker files
CTLD_PID=$RUN_DIR/slurmctld.pid
SLURMD_PID=$RUN_DIR/slurmd.pid
MUNGE_KEY=/etc/munge/munge.key
MUNGE_RUN=/run/munge
MUNGE_PID=$MUNGE_RUN/munged.pid
HEADROOM_MB=2048                    # memory kept back from RealMemory for the OS and daemons
TIMEOUT=${SLURM_LOCAL_TIMEOUT:-60}

die() { echo "slurm_local: error: $*" >&2; exit 1; }
say() { echo "slurm_local: $*" >&2; }

usage() {
    echo "usage: $0 {start default|start tuned|stop|status}" >&2
    exit 2
}

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
pid_of() { [ -s "$1" ] && tr -dc '0-9' <"$1" || true; }

# A daemon of that name running that this script did not start (its pid is not ours).
foreign_daemon() {
    local name=$1 ours=$2 pid
    for pid in $(pgrep -x "$name" || true); do
        [ "$pid" = "$ours" ] || { echo "$pid"; return 0; }
    done
    return 1
}

check_tools() {
    [ "$(id -u)" = 0 ] || die "run as root (it writes $CONF and starts system daemons)"
    local tool
    for tool in slurmctld slurmd munged munge unmunge sinfo scontrol squeue scancel; do
        command -v "$tool" >/dev/null \
            || die "$tool not found: run scripts/system_deps.sh (installs slurm-wlm and munge)"
    done
}

write_conf() {
    local mode=$1 host cpus mem_mb real_mb
    host=$(hostname -s)
    cpus=$(nproc)
    mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
    real_mb=$((mem_mb - HEADROOM_MB))
    [ "$real_mb" -ge 1024 ] || real_mb=$((mem_mb * 3 / 4))
    mkdir -p "$CONF_DIR"
    {
        cat <<EOF
# Written by scripts/slurm_local.sh (mode: $mode) on $(date -u +%Y-%m-%dT%H:%M:%SZ).
ClusterName=local
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SLURMD_DIR
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without a default, a job that asks for no memory is given the whole node's memory and jobs
# run one at a time (ENVIRONMENT.md measured 0.4 jobs/s); 100 MB per CPU lets them share.
DefMemPerCPU=100
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ReturnToService=2
EOF
        if [ "$mode" = tuned ]; then
            # From https://slurm.schedmd.com/high_throughput.html, chosen by measurement on
            # this machine (docs/BENCHMARKS.md, section 4 lists what was tried and what it did).
            cat <<EOF
# --- high-throughput tuning ---
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0,default_queue_depth=1000,max_rpc_cnt=150
# A no-op epilog makes slurmd send MESSAGE_EPILOG_COMPLETE, whose handler runs the scheduler at
# once; without one, a freed CPU waits for slurmctld's once-a-second background pass.
Epilog=/bin/true
SlurmctldDebug=error
SlurmdDebug=error
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
PriorityType=priority/basic
MinJobAge=2
MaxJobCount=200000
MessageTimeout=30
EOF
        fi
        echo "NodeName=$host CPUs=$cpus RealMemory=$real_mb State=UNKNOWN"
        echo "PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP"
    } >"$CONF.new"
    if [ -n "${SLURM_LOCAL_SET:-}" ]; then
        local item key
        IFS=';' read -ra items <<<"$SLURM_LOCAL_SET"
        for item in "${items[@]}"; do
            [ -n "$item" ] || continue
            key=${item%%=*}
            [ "$key" != "$item" ] || die "SLURM_LOCAL_SET: '$item' is not Key=Value"
            # drop every line setting that key, then add the override before the node lines
            awk -v k="$key" 'index(tolower($0), tolower(k) "=") != 1' \
                "$CONF.new" >"$CONF.tmp"
            awk -v line="$item" '/^NodeName=/ && !done {print line; done = 1} {print}' \
                "$CONF.tmp" >"$CONF.new"
            rm -f "$CONF.tmp"
        done
    fi
    # a key set twice: keep the last one (the tuned block overrides the base lines)
    awk -F= '!/^#/ && NF > 1 {last[tolower($1)] = NR} {line[NR] = $0; key[NR] = tolower($1)}
        END {for (i = 1; i <= NR; i++)
                 if (line[i] ~ /^#/ || !(key[i] in last) || last[key[i]] == i) print line[i]}' \
        "$CONF.new" >"$CONF"
    rm -f "$CONF.new"
    chmod 644 "$CONF"
    echo "$mode" >"$RUN_DIR/mode"
}

ensure_munge_key() {
    if [ ! -s "$MUNGE_KEY" ]; then
        say "creating $MUNGE_KEY"
        mkdir -p "$(dirname "$MUNGE_KEY")"
        dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
    fi
    chown munge:munge "$MUNGE_KEY" "$(dirname "$MUNGE_KEY")"
    chmod 400 "$MUNGE_KEY"
}

start_munge() {
    local threads=$1 pid
    ensure_munge_key
    mkdir -p "$MUNGE_RUN" /var/lib/munge /var/log/munge
    chown munge:munge "$MUNGE_RUN" /var/lib/munge /var/log/munge
    chmod 755 "$MUNGE_RUN"
    pid=$(pid_of "$MUNGE_PID")
    if alive "$pid" && [ ! -e "$RUN_DIR/munged.ours" ]; then
        say "munged already running (pid $pid, not started here): using it"
    else
        if alive "$pid"; then stop_pid munged "$pid"; fi
        if pid=$(foreign_daemon munged ""); then
            die "munged is running (pid $pid) without $MUNGE_PID; stop it first"
        fi
        runuser -u munge -- /usr/sbin/munged --num-threads "$threads" \
            || die "munged did not start (see /var/log/munge/munged.log)"
        touch "$RUN_DIR/munged.ours"
    fi
    local i
    for i in $(seq 1 50); do
        if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    die "munge does not work (munge -n | unmunge fails; see /var/log/munge/munged.log)"
}

# SIGTERM, then SIGKILL after 10 s; $2 is a pid this script started.
stop_pid() {
    local name=$1 pid=$2 i
    alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
        alive "$pid" || return 0
        sleep 0.1
    done
    say "$name (pid $pid) ignored SIGTERM for 10 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
}

wait_idle() {
    local host state i
    host=$(hostname -s)
    for i in $(seq 1 $((TIMEOUT * 10))); do
        state=$(sinfo -h -n "$host" -o %T 2>/dev/null | head -1 || true)
        case "$state" in
            idle) return 0 ;;
            down* | drain* | fail* | inval*)
                if [ "$i" -gt 50 ]; then
                    sinfo -R >&2 || true
                    die "node $host is $state (see $LOG_DIR/slurmctld.log, slurmd.log)"
                fi
                ;;
        esac
        alive "$(pid_of "$CTLD_PID")" || die "slurmctld exited (see $LOG_DIR/slurmctld.log)"
        sleep 0.1
    done
    die "node $host not idle after ${TIMEOUT}s (state: ${state:-none}); see $LOG_DIR/"
}

do_stop() {
    local ctld slurmd pid i
    ctld=$(pid_of "$CTLD_PID")
    slurmd=$(pid_of "$SLURMD_PID")
    if alive "$ctld"; then
        # cancel every job so no job step outlives slurmd
        scancel --quiet --full --user=root 2>/dev/null || true
        local ids
        ids=$(squeue -h -o %i 2>/dev/null || true)
        # shellcheck disable=SC2086
        [ -z "$ids" ] || scancel --quiet --full $ids 2>/dev/null || true
        for i in $(seq 1 100); do
            [ -z "$(squeue -h -t R,CG -o %i 2>/dev/null || true)" ] && break
            sleep 0.1
        done
    fi
    stop_pid slurmd "$slurmd"
    stop_pid slurmctld "$ctld"
    # job steps whose slurmd is gone (only this script's slurmd could have started them)
    for pid in $(pgrep -x slurmstepd || true); do
        say "killing leftover slurmstepd pid $pid"
        kill -KILL "$pid" 2>/dev/null || true
    done
    if [ -e "$RUN_DIR/munged.ours" ]; then
        stop_pid munged "$(pid_of "$MUNGE_PID")"
        rm -f "$RUN_DIR/munged.ours"
    fi
    rm -rf "${STATE_DIR:?}"/* "${SLURMD_DIR:?}"/* 2>/dev/null || true
    rm -f "$CTLD_PID" "$SLURMD_PID" "$RUN_DIR/mode"
}

do_start() {
    local mode=$1 threads pid
    case "$mode" in
        default) threads=${SLURM_LOCAL_MUNGE_THREADS:-2} ;;
        tuned) threads=${SLURM_LOCAL_MUNGE_THREADS:-10} ;;
        *) usage ;;
    esac
    check_tools
    mkdir -p "$RUN_DIR"
    do_stop
    if pid=$(foreign_daemon slurmctld ""); then
        die "a slurmctld this script did not start is running (pid $pid); stop it first"
    fi
    if pid=$(foreign_daemon slurmd ""); then
        die "a slurmd this script did not start is running (pid $pid); stop it first"
    fi
    mkdir -p "$STATE_DIR" "$SLURMD_DIR" "$LOG_DIR"
    : >"$LOG_DIR/slurmctld.log"
    : >"$LOG_DIR/slurmd.log"
    write_conf "$mode"
    start_munge "$threads"
    slurmctld -c -f "$CONF" || die "slurmctld did not start (see $LOG_DIR/slurmctld.log)"
    for _ in $(seq 1 100); do
        scontrol ping 2>/dev/null | grep -q 'UP' && break
        sleep 0.1
    done
    scontrol ping 2>/dev/null | grep -q 'UP' \
        || die "slurmctld does not answer (see $LOG_DIR/slurmctld.log)"
    slurmd -c -f "$CONF" || die "slurmd did not start (see $LOG_DIR/slurmd.log)"
    wait_idle
    say "Slurm ($mode) is up: node $(hostname -s), $(nproc) CPUs; config in $CONF"
}

do_status() {
    local ctld slurmd munged rc=0
    ctld=$(pid_of "$CTLD_PID")
    slurmd=$(pid_of "$SLURMD_PID")
    munged=$(pid_of "$MUNGE_PID")
    echo "mode:      $(cat "$RUN_DIR/mode" 2>/dev/null || echo none)"
    if alive "$munged"; then echo "munged:    running (pid $munged)"; else echo "munged:    stopped"; fi
    if alive "$ctld"; then echo "slurmctld: running (pid $ctld)"; else echo "slurmctld: stopped"; rc=3; fi
    if alive "$slurmd"; then echo "slurmd:    running (pid $slurmd)"; else echo "slurmd:    stopped"; rc=3; fi
    if [ "$rc" = 0 ]; then
        sinfo -N -o '%N %T %c %m' || true
    fi
    return "$rc"
}

case "${1:-}" in
    start)
        [ $# -eq 2 ] || usage
        do_start "$2"
        ;;
    stop)
        [ $# -eq 1 ] || usage
        check_tools
        mkdir -p "$RUN_DIR"
        do_stop
        say "stopped"
        ;;
    status)
        [ $# -eq 1 ] || usage
        do_status
        ;;
    *) usage ;;
esac
