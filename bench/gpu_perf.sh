#!/usr/bin/env bash
# GPU performance and precision: what pippa measures on a lent GPU machine, in one run (<= 8 minutes on
# one H100/H200).
#
#   bench/gpu_perf.sh [OUT_DIR]              # OUT_DIR: $1, else $OUT, else ./gpu-perf
#   PARTS="E P" bench/gpu_perf.sh OUT_DIR    # only some parts (letters, in the order given)
#   DRY=1 bench/gpu_perf.sh OUT_DIR          # CPU dry mode (the tests run it): every part, a toy shape
#
# Each part is bench/gpu_perf/part_<letter>.py, run bounded by its own timeout; it writes
# <OUT>/<letter>.json as soon as it ends (a later timeout loses only later parts) and its log to
# <OUT>/<letter>.log. Parts:
#   E  env: nvidia-smi -q -x, torch/transformers/TRL versions, attention backends
#   P  precision: the Qwen2.5-0.5B shape, GRPO steps in pure bf16 against the default precision
#   T  learns: the tiny recipe on the GPU over seeds, and a from-scratch model at GPU scale
#   G  generation: HF generate() against each engine
#   S  step: a GRPO step of today's max_gpu, plain TRL and pippa's tuned step
#   L  1.5B: the tuned step on the Qwen2.5-1.5B shape
# The summary (one line per part: status, seconds, its headline) is printed last and kept in
# <OUT>/summary.txt and <OUT>/summary.json. Exit status: 0 when every part passed or was skipped.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
OUT="${1:-${OUT:-$ROOT/gpu-perf}}"
mkdir -p "$OUT" || exit 2
OUT="$(cd "$OUT" && pwd)"
DRY="${DRY:-0}"
PY="${PYTHON:-python3}"
PARTS="${PARTS:-E P T G S L}"

# the wheels the GPU machine lacks (.whl/), and PYTHONPATH
. "$ROOT/bench/gpu_env.sh"
export PYTHONUNBUFFERED=1

SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
FAILED=0

# limits in seconds per part, on a GPU (the dry mode has its own, for two slow CPU cores)
limit() {
  case "$1:$DRY" in
    E:0) echo 60 ;;  P:0) echo 90 ;;  T:0) echo 145 ;;  G:0) echo 80 ;;  S:0) echo 100 ;;  L:0) echo 60 ;;
    *:1) echo 300 ;;
    *) echo 120 ;;
  esac
}

dry_flag=()
[ "$DRY" = 1 ] && dry_flag=(--dry)
echo "gpu perf: out=$OUT dry=$DRY parts=$PARTS python=$("$PY" -c 'import sys; print(sys.version.split()[0])')"

for p in $PARTS; do
  script="bench/gpu_perf/part_$(echo "$p" | tr 'A-Z' 'a-z').py"
  if [ ! -f "$script" ]; then
    printf '%-3s %-8s %6ss  %s\n' "$p" fail 0 "no such part ($script)" | tee -a "$SUMMARY"
    FAILED=1
    continue
  fi
  lim="$(limit "$p")"
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$lim" "$PY" "$script" --out "$OUT/$p.json" "${dry_flag[@]}" > "$OUT/$p.log" 2>&1
  rc=$?
  t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" -eq 0 ]; then
    status=ok
  else
    status=fail
    FAILED=1
  fi
  { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && echo "timed out after ${lim}s" >> "$OUT/$p.log"
  printf '%-3s %-8s %6ss  %s\n' "$p" "$status" "$t" "$(tail -n 1 "$OUT/$p.log" | cut -c1-200)" | tee -a "$SUMMARY"
done

"$PY" bench/gpu_perf/summary.py "$OUT" > "$OUT/summary.json" || FAILED=1
echo "---- summary ($OUT) ----"
cat "$SUMMARY"
exit "$FAILED"
