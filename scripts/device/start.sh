#!/usr/bin/env bash
# Starts driver.sh in its own session (it outlives this call while the machine
# stays held) unless it is running or has finished. With stage names
# (scripts/device/README.md lists them) it runs those on a machine that
# already built everything, or builds first on a fresh one; while an earlier
# driver still runs, they are queued behind it and wait.sh waits for both.
W=${LAB_DEVICE_WORK:-/tmp/h200}
mkdir -p "$W"
if [ -f "$W/driver.pid" ] && kill -0 "$(cat "$W/driver.pid")" 2>/dev/null; then
  if [ $# -eq 0 ]; then echo "driver running"; exit 0; fi
  prev=$(cat "$W/driver.pid")
  touch "$W/queued"  # the running driver leaves "done" to the queued one
  setsid nohup bash -c 'while kill -0 "$0" 2>/dev/null; do sleep 1; done; rm -f "$1/queued"; exec bash scripts/device/driver.sh "${@:2}"' \
    "$prev" "$W" "$@" < /dev/null >> "$W/driver.out" 2>&1 &
  echo $! > "$W/driver.pid"
  echo "queued behind driver $prev: $*"
  exit 0
fi
if [ -f "$W/done" ] && [ $# -eq 0 ]; then echo "driver already finished"; exit 0; fi
rm -f "$W/done"
setsid nohup bash scripts/device/driver.sh "$@" < /dev/null > "$W/driver.out" 2>&1 &
echo $! > "$W/driver.pid"
echo "driver started: pid $(cat "$W/driver.pid")"
