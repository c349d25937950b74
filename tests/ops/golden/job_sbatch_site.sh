#!/bin/bash
#SBATCH --qos=normal
#SBATCH --job-name=20260101-120000-tiny-abcd
#SBATCH --output=output.log
#SBATCH --open-mode=append
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
# the cluster's own set-up, before pippa's job
module load cuda/12.4
# pippa run 20260101-120000-tiny-abcd: written by pippa at launch. Holds no secrets: they are sourced from
# ~/.config/pippa/secrets.env (mode 0600) inside the job.
RUN_DIR=/scratch/me/pippa/runs/20260101-120000-tiny-abcd
[ -e "$RUN_DIR/stop_requested" ] && exit 0
date +%s > "$RUN_DIR/started"
cd /scratch/me/pippa || exit 1
export PATH="$HOME/.local/bin:$PATH" PYTHONUNBUFFERED=1
export PIPPA_RUN_ID=20260101-120000-tiny-abcd PIPPA_RUN_DIR="$RUN_DIR"
:
if [ -f "$HOME"/.config/pippa/secrets.env ]; then set -a; . "$HOME"/.config/pippa/secrets.env; set +a; unset PIPPA_NOTIFY PIPPA_HEARTBEAT; fi
MAIN_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MAIN_PORT=$((20000 + SLURM_JOB_ID % 20000))
RESUME=; [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && RESUME=--resume
asked=; trap 'asked=1; kill -USR1 "$step" 2>/dev/null' USR1
srun --kill-on-bad-exit=1 --container-image=nvcr.io/nvidia/pytorch:25.01-py3 --container-mounts=/scratch/me/pippa --container-workdir=/scratch/me/pippa sh -c 'a=$1 p=$2; shift 2; exec "$@" --machines "$SLURM_NTASKS" --machine-rank "$SLURM_PROCID" --main-addr "$a" --main-port "$p"' sh "$MAIN_ADDR" "$MAIN_PORT" python3 -m training_core.launch tiny --run-dir /scratch/me/pippa/runs/20260101-120000-tiny-abcd $RESUME &
step=$!
wait "$step"; code=$?
while kill -0 "$step" 2>/dev/null; do wait "$step"; code=$?; done
[ -n "$asked" ] && [ $code -ne 0 ] && code=94  # ended before it could save: still the limit
free=$(cat "$RUN_DIR/slurm_free_requeues" 2>/dev/null || echo 0)
if [ $code -eq 94 ] || [ $code -eq 95 ]; then
  echo "pippa: attempt saved before the time limit (exit $code): requeued with --resume (not counted in --retry)"
  echo $((free + 1)) > "$RUN_DIR/slurm_free_requeues"
  scontrol requeue "$SLURM_JOB_ID" && exit $code
fi
n=$((${SLURM_RESTART_COUNT:-0} + 1 - ${free:-0}))
if [ $code -ne 0 ] && [ $code -ne 2 ] && [ ! -e "$RUN_DIR/stop_requested" ] && [ $n -le 2 ]; then
  echo "pippa: attempt $n/$((2 + 1)) failed (exit $code): requeued, attempt $((n + 1)) with --resume"
  scontrol requeue "$SLURM_JOB_ID" && exit $code
fi
echo $code > "$RUN_DIR/exit_code.tmp"
mv -f "$RUN_DIR/exit_code.tmp" "$RUN_DIR/exit_code"
exit $code

