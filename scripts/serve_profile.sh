#!/usr/bin/env bash
# Issue 40's measurement, in one run on a quiet machine: `hyde-tutor bench --load` (400 tool calls, 50 concurrent)
# against the same collections, the served drill (50 sessions x 8 turns) with the stub at 40 and at 1,000 tokens/s,
# and one more drill at 1,000 tokens/s under py-spy (its profile table: scripts/profile_table.py; py-spy is the
# `profile` extra: .venv/bin/pip install -e '.[profile]').
#   HYDE_DATA_DIR=/work/drill scripts/serve_profile.sh OUT_DIR [extra serve_drill.py options, e.g. --loop asyncio]
set -euo pipefail
out=${1:?an output folder}; shift
mkdir -p "$out"
py=${PYTHON:-.venv/bin/python}
cli=${CLI:-.venv/bin/hyde-tutor}
echo "== load before: $(cat /proc/loadavg)" | tee "$out/summary.txt"
"$cli" bench --load --calls 400 --concurrency 50 2>&1 | tail -1 | tee "$out/bench_load.json" >> "$out/summary.txt"
for rate in 0.025 0.001; do
  echo "== drill 50x8, stub at $rate s/token" | tee -a "$out/summary.txt"
  "$py" scripts/serve_drill.py --sessions 50 --turns 8 --token-s "$rate" --json "$out/drill_$rate.json" "$@" 2>&1 \
    | grep -v " INFO " | tee -a "$out/summary.txt"
done
echo "== profiled drill 50x8, stub at 0.001 s/token (py-spy --gil)" | tee -a "$out/summary.txt"
"$py" scripts/serve_drill.py --sessions 50 --turns 8 --token-s 0.001 --py-spy "$out/profile.txt" "$@" 2>&1 \
  | grep -v " INFO " | tee -a "$out/summary.txt"
"$py" scripts/profile_table.py "$out/profile.txt" --turns 400 | tee "$out/profile_table.md" >> "$out/summary.txt"
echo "== load after: $(cat /proc/loadavg)" | tee -a "$out/summary.txt"
