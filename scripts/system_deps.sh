#!/usr/bin/env bash
# Installs and starts the real system parts the tests use: bubblewrap and busybox (containers),
# OpenMPI, Slurm + munge (the comparison benchmark), PostgreSQL (the second store),
# Prometheus (scrapes the controller's /metrics in tests/live/test_prometheus.py), Chromium
# (Playwright drives it in tests/live/test_portal.py; no browser is downloaded), rsync (the
# dataset cache's rsync stager, tests/agent/test_datasets.py) and a C compiler (the native
# front of `fusesched submit`, src/fusesched/cli/front.c). Safe to run
# again: installs only what is missing, starts only what is down.
set -euo pipefail

need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v mpirun >/dev/null || need+=(openmpi-bin libopenmpi-dev)
command -v slurmctld >/dev/null || need+=(slurm-wlm)
command -v munged >/dev/null || need+=(munge)
command -v pg_ctlcluster >/dev/null || need+=(postgresql)
command -v busybox >/dev/null || need+=(busybox-static)  # a tiny real image for container tests
command -v prometheus >/dev/null || need+=(prometheus)  # scrapes /metrics in tests/live
command -v chromium >/dev/null || need+=(chromium)  # the portal's browser tests (Playwright)
command -v rsync >/dev/null || need+=(rsync)  # the dataset cache's rsync stager
command -v cc >/dev/null || need+=(gcc libc6-dev)  # the native front of `fusesched submit`

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

if [ ${#need[@]} -gt 0 ]; then
    echo "system_deps: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
        || { $SUDO apt-get update -q >/dev/null && \
             $SUDO apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; }
fi

# PostgreSQL on 127.0.0.1:5432 with trust auth (the tests use database "test").
if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
    version="$(ls /etc/postgresql | sort -V | tail -1)"
    echo "system_deps: starting PostgreSQL $version"
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
    for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 0.5; done
fi
if pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
    psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" \
        | grep -q 1 || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test" >/dev/null
fi
# Tasks run under unprivileged per-user uids (never root): the Python interpreter given as the
# first argument (the project's venv) must be reachable by them, both the path tasks use (inside
# the checkout, which may sit in a private temporary folder) and the file it links to. Add
# search permission (x, not read) to each folder above them that lacks it — e.g. /root when
# Python comes from pyenv, or a mktemp -d folder holding the checkout.
searchable() {
    local dir="$1"
    while [ "$dir" != "/" ]; do
        local other
        other="$(stat -c %A "$dir" | cut -c10)"
        if [ "$other" != "x" ] && [ "$other" != "t" ]; then
            echo "system_deps: making $dir searchable for task users (o+x)"
            $SUDO chmod o+x "$dir"
        fi
        dir="$(dirname "$dir")"
    done
}
if [ $# -ge 1 ] && [ -e "$1" ]; then
    searchable "$(cd "$(dirname "$1")" && pwd)"
    searchable "$(dirname "$(readlink -f "$1")")"
fi
echo "system_deps: ok"
