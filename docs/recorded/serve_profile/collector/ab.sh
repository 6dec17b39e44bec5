#!/usr/bin/env bash
# issue 40, the collector: HYDE_SERVER__GC_THRESHOLD=0 (Python's default) against the default (20000), alternated
cd /work/main
export HYDE_DATA_DIR=/work/s14/dd
out=/work/s14/ab; mkdir -p $out
drill() { # tag gc rate extra...
  local tag=$1 gc=$2 rate=$3; shift 3
  echo "== $tag gc_threshold=$gc token_s=$rate $*"
  HYDE_SERVER__GC_THRESHOLD=$gc .venv/bin/python scripts/serve_drill.py --sessions 50 --turns 8 --token-s $rate --workers 2 --json $out/$tag.json "$@" 2>&1 | grep -v " INFO "
}
for rep in 1 2 3; do
  echo "== bench $rep"; .venv/bin/hyde-tutor bench --load --calls 400 --concurrency 50 2>&1 | tail -1
  drill off1000_$rep 0 0.001; drill on1000_$rep 20000 0.001
  drill off40_$rep 0 0.025; drill on40_$rep 20000 0.025
done
for rep in 1; do
  drill pg_off1000_$rep 0 0.001 --database throwaway-postgresql; drill pg_on1000_$rep 20000 0.001 --database throwaway-postgresql
  drill pg_off40_$rep 0 0.025 --database throwaway-postgresql; drill pg_on40_$rep 20000 0.025 --database throwaway-postgresql
done
echo "== bench after"; .venv/bin/hyde-tutor bench --load --calls 400 --concurrency 50 2>&1 | tail -1
for gc in 0 20000; do
  echo "== profiled, 1 worker, gc_threshold=$gc"
  HYDE_SERVER__GC_THRESHOLD=$gc .venv/bin/python scripts/serve_drill.py --sessions 50 --turns 8 --token-s 0.001 --py-spy $out/profile_$gc.txt 2>&1 | grep -v " INFO "
  .venv/bin/python scripts/profile_table.py $out/profile_$gc.txt --turns 400 > $out/profile_table_$gc.md
done
echo "== done $(cat /proc/loadavg)"
