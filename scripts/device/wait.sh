#!/usr/bin/env bash
# Waits up to $1 seconds for driver.sh, then packs what it measured so far
# into $OUT (results and run directories as one archive, the log beside it).
W=${LAB_DEVICE_WORK:-/tmp/h200}
limit=${1:-540}
t0=$SECONDS
last=""
while [ $((SECONDS - t0)) -lt "$limit" ] && [ ! -f "$W/done" ]; do
  now=$(tail -n 1 "$W/driver.log" 2>/dev/null)
  [ "$now" != "$last" ] && echo "$now" && last=$now
  sleep 5
done
cp "$W/driver.log" "$OUT/driver.log" 2>/dev/null
tail -n 30 "$W/ninja.log" > "$OUT/ninja-tail.log" 2>/dev/null
for f in "$W"/*.log; do
  echo "== $f"
  grep -v "^llama_\|^load\|^print_info\|^graph_\|^sched_\|^srv \|^slot \|^que \|^ *$" "$f" | tail -n 20
done > "$OUT/logs-tail.txt" 2>/dev/null
tar czf "$OUT/h200.tar.gz" -C "$W" results runs 2>/dev/null || tar czf "$OUT/h200.tar.gz" -C "$W" results
ls -la "$OUT"
[ -f "$W/done" ] && echo "DRIVER DONE" || echo "DRIVER STILL RUNNING"
