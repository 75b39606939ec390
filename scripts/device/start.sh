#!/usr/bin/env bash
# Starts driver.sh in its own session (it outlives this call while the machine
# stays held) unless it is running or has finished.
W=${LAB_DEVICE_WORK:-/tmp/h200}
mkdir -p "$W"
# With stage names (scripts/device/README.md lists them), runs those on a
# machine that already built everything, or builds first on a fresh one.
if [ -f "$W/driver.pid" ] && kill -0 "$(cat "$W/driver.pid")" 2>/dev/null; then echo "driver running"; exit 0; fi
if [ -f "$W/done" ] && [ $# -eq 0 ]; then echo "driver already finished"; exit 0; fi
rm -f "$W/done"
setsid nohup bash scripts/device/driver.sh "$@" < /dev/null > "$W/driver.out" 2>&1 &
echo $! > "$W/driver.pid"
echo "driver started: pid $(cat "$W/driver.pid")"
