#!/bin/sh
# Installs Prometheus (with promtool) from Debian if it is missing. Used by the integration
# test in crates/cli/tests/exporter.rs; exits non-zero with the reason when it cannot.
set -eu
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-prometheus: apt-get not found; install prometheus and promtool by hand" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt run (another test, a cron job) instead of failing on its lock.
lock_wait="-o DPkg::Lock::Timeout=300"
# shellcheck disable=SC2086
apt-get $lock_wait update -qq || { echo "install-prometheus: apt-get update failed" >&2; exit 1; }
apt-get $lock_wait install -y -qq --no-install-recommends prometheus >/dev/null \
    || { echo "install-prometheus: apt-get install prometheus failed" >&2; exit 1; }
# The Debian package starts a system service; this project only needs the binaries.
command -v prometheus >/dev/null && command -v promtool >/dev/null
