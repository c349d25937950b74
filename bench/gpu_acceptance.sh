#!/usr/bin/env bash
# GPU acceptance: everything pippa checks on a lent GPU machine, in one run (<= 8 minutes on one H100).
#
#   bench/gpu_acceptance.sh [OUT_DIR]        # OUT_DIR: $1, else $OUT, else ./gpu-acceptance
#   DRY=1 bench/gpu_acceptance.sh OUT_DIR    # CPU dry mode (the tests run it): same steps, tiny or skipped
#
# Steps, each bounded by its own timeout, each writing <OUT>/<step>.log (and its JSON where it has one):
#   capture     nvidia-smi -q -x, nvlink -s and pippa's --query-gpu fields, saved as test fixtures under
#               <OUT>/fixtures/ (copy them into tests/fixtures/nvidia-smi/ with their source line)
#   doctor      `pippa doctor local --json` (python3 -m pippa_ops: no install needed), passive + active
#   active      dry mode: training_core.hardware.doctor_active's CPU harness (on a GPU the doctor step runs it)
#   gemm_overhead  bench/bench_doctor.py --gemm: the doctor's GEMM figure vs a bare matmul loop (goal >= 0.95x)
#   pytest_gpu  pytest -m gpu on the training-side GPU tests (bf16 weights, tiny recipe, max_gpu shape)
#   bf16_train  the tiny recipe, 5 steps in bf16, its metrics kept
#   mfu         bench/bench_max_gpu.py: max_gpu's peak memory, tokens/s and train-phase MFU
# The summary (one line per step: status, seconds, what it found) is printed last and kept in
# <OUT>/summary.txt and <OUT>/summary.json. Exit status: 0 when every step passed or was skipped.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
OUT="${1:-${OUT:-$ROOT/gpu-acceptance}}"
mkdir -p "$OUT/fixtures" || exit 2
OUT="$(cd "$OUT" && pwd)"
DRY="${DRY:-0}"
PY="${PYTHON:-python3}"

# the wheels the GPU machine lacks (.whl/), and PYTHONPATH
. "$ROOT/bench/gpu_env.sh"
export PIPPA_NO_REUSE=1 PYTHONUNBUFFERED=1

SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
STEPS_JSON=()
FAILED=0

# step NAME TIMEOUT_S CMD...: run CMD bounded, its output in NAME.log; record status and seconds.
step() {
  local name="$1" limit="$2"
  shift 2
  local t0 rc status t
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  case "$rc" in
    0) status=ok ;;
    124 | 137) status=fail; FAILED=1 ;;
    *) status=fail; FAILED=1 ;;
  esac
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && echo "timed out after ${limit}s" >> "$OUT/$name.log"
  record "$name" "$status" "$t" "$(tail -n 1 "$OUT/$name.log" | cut -c1-160)"
}

skip() {
  record "$1" skipped 0 "$2"
}

record() {
  printf '%-14s %-8s %6ss  %s\n' "$1" "$2" "$3" "$4" | tee -a "$SUMMARY"
  STEPS_JSON+=("$("$PY" -c 'import json,sys; print(json.dumps(dict(zip(["step","status","seconds","detail"], sys.argv[1:]))))' "$@")")
}

have_gpu=0
if [ "$DRY" != "1" ] && command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
  have_gpu=1
fi
echo "gpu acceptance: out=$OUT dry=$DRY gpu=$have_gpu python=$("$PY" -c 'import sys; print(sys.version.split()[0])')"

# 1. the real capture, kept as a test fixture (named after the GPU and the driver)
if [ "$have_gpu" = 1 ]; then
  name="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z ' 'a-z_' | tr -cd 'a-z0-9_')"
  driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 | tr -cd '0-9.')"
  base="$OUT/fixtures/${name}__${driver}"
  step capture 60 bash -c "nvidia-smi -q -x > '${base}_q_x.xml' && (nvidia-smi nvlink -s > '${base}_nvlink_s.txt' || true) \
    && nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw,power.limit,driver_version,uuid --format=csv,noheader,nounits > '${base}_query_gpu.csv' \
    && echo 'captured ${base}_q_x.xml ('\$(grep -c '<gpu id' '${base}_q_x.xml')' GPUs)'"
else
  skip capture "no GPU (dry mode)"
fi

# 2. the doctor itself, as a user runs it (no install: python3 -m pippa_ops)
step doctor 180 bash -c "'$PY' -m pippa_ops doctor local --json > '$OUT/doctor.json'; rc=\$?; \
  '$PY' -c 'import json,sys; r=json.load(open(sys.argv[1]))[0]; print(\"verdict\", r[\"verdict\"], \
  [c[\"check\"]+\"=\"+c[\"status\"] for c in r[\"checks\"] if c[\"status\"] in (\"fail\",\"warn\")])' '$OUT/doctor.json'; \
  [ \$rc -le 1 ]"
step doctor_quick 60 bash -c "'$PY' -m pippa_ops doctor local --quick > '$OUT/doctor_quick.txt'; rc=\$?; tail -n 1 '$OUT/doctor_quick.txt'; [ \$rc -le 1 ]"

# 3. the active checks' overhead against a bare matmul loop (on a GPU the doctor step above ran them and
#    doctor.json has their figures; the dry mode runs the active program's CPU harness here)
if [ "$have_gpu" = 1 ]; then
  skip active "ran inside the doctor step (doctor.json: measured)"
  step gemm_overhead 90 bash -c "'$PY' bench/bench_doctor.py --gemm --json '$OUT/gemm_overhead.json'"
else
  step active 180 bash -c "'$PY' -m training_core.hardware.doctor_active --cpu --seconds 0.2 | tee '$OUT/doctor_active.json'"
  step gemm_overhead 120 bash -c "'$PY' bench/bench_doctor.py --gemm --cpu --json '$OUT/gemm_overhead.json'"
fi

# 4. training-side GPU checks
if [ "$have_gpu" = 1 ]; then
  step pytest_gpu 300 "$PY" -m pytest -q -s -m gpu -p no:cacheprovider tests/training/test_gpu.py tests/doctor/test_doctor_gpu.py
  step bf16_train 120 bash -c "'$PY' -m training_core.train tiny --run-dir '$OUT/bf16_run' --set train.max_steps=5 \
    --set eval.interval=5 --set checkpoint.every=0 --set model.precision=bf16 > /dev/null \
    && '$PY' -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; \
    print(\"precision\", r[0][\"config\"][\"config\"][\"model\"][\"precision\"], \"status\", r[-1].get(\"status\"))' \
    '$OUT/bf16_run/metrics.jsonl'"
  step mfu 200 bash -c "'$PY' bench/bench_max_gpu.py --steps 3 --warmup 1 | tee '$OUT/bench_max_gpu.txt' | tail -n 3"
else
  step pytest_gpu 120 "$PY" -m pytest -q -m gpu --collect-only -p no:cacheprovider tests/training/test_gpu.py tests/doctor/test_doctor_gpu.py
  skip bf16_train "needs CUDA (dry mode)"
  step mfu 120 bash -c "'$PY' bench/bench_max_gpu.py; [ \$? -eq 2 ]"
fi

"$PY" -c 'import json,sys; print(json.dumps([json.loads(s) for s in sys.argv[2:]], indent=1))' _ "${STEPS_JSON[@]}" \
  > "$OUT/summary.json"
echo "---- summary ($OUT) ----"
cat "$SUMMARY"
exit "$FAILED"
