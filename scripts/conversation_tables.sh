#!/usr/bin/env bash
# The figures of issues 29 (items 2 and 5) and 32, in one go, on this machine (run it on a quiet one: the
# timings are per turn on the embedded model). Writes everything under OUT (default /tmp/conversation-tables)
# and prints the tables. About 40 minutes on 2 free cores; the search tables alone take a minute.
#
#   bash scripts/conversation_tables.sh              # everything
#   SKIP_LLM=1 bash scripts/conversation_tables.sh   # the search tables only (no LLM)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/conversation-tables}
export HYDE_DATA_DIR=${HYDE_DATA_DIR:-$OUT/data}
CLI=".venv/bin/hyde-tutor"
PY=".venv/bin/python"
mkdir -p "$OUT"
for c in grammar docs; do
  $CLI ingest --collection $c --file data/$c.jsonl >/dev/null 2>&1
done

echo "== conversation search per kind (real USE + BM25, no LLM); uptime: $(uptime)"
for set in conversations followups; do
  $CLI eval --collection grammar --dataset data/eval/$set --arms raw,context,fused,reply,conversation --by kind \
    | tee "$OUT/eval.$set.txt"
done
[ -n "${SKIP_LLM:-}" ] && exit 0

echo "== three-turn transcript (issue 29); uptime: $(uptime)"
printf 'Как сказать, что я хочу поехать в Пусан?\nА в прошедшем времени?\nА если это не я, а мой друг хочет?\n' \
  | $CLI chat | tee "$OUT/transcript.txt"

echo "== one long chat, 12 and 20 questions (issue 32); uptime: $(uptime)"
for n in 12 20; do
  $PY scripts/long_chat.py --turns $n --json "$OUT/long_chat.$n.json" | tail -1
done

echo "== offline tutor turn: headline rules at the server's temperature and at 0, 40 questions + 20 follow-ups"
for t in server 0; do
  $PY scripts/tutor_turns.py --temperature $t --json "$OUT/tutor_turns.t$t.json" | tail -1
done

echo "== levers (10 questions each, temperature 0): fewer entry characters, a shorter answer, no prompt cache"
$PY scripts/tutor_turns.py --questions 10 --followups 0 --json "$OUT/lever.base.json" | tail -1   # entries 900 (the default)
$PY scripts/tutor_turns.py --questions 10 --followups 0 --entries-chars 1800 --json "$OUT/lever.entries1800.json" | tail -1
$PY scripts/tutor_turns.py --questions 10 --followups 0 --short-answer --json "$OUT/lever.short.json" | tail -1
$PY scripts/tutor_turns.py --questions 10 --followups 0 --defeat-cache --json "$OUT/lever.nocache.json" | tail -1
echo "done; uptime: $(uptime)"
