#!/bin/sh
#SBATCH --job-name=20260101-120000-cmd-abcd
#SBATCH --output=output.log
#SBATCH --open-mode=append
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
# pippa run 20260101-120000-cmd-abcd: written by pippa at launch. Holds no secrets: they are sourced from
# ~/.config/pippa/secrets.env (mode 0600) inside the job.
RUN_DIR=/srv/p/runs/20260101-120000-cmd-abcd
[ -e "$RUN_DIR/stop_requested" ] && exit 0
date +%s > "$RUN_DIR/started"
cd /srv/p || exit 1
export PATH="$HOME/.local/bin:$PATH" PYTHONUNBUFFERED=1
export PIPPA_RUN_ID=20260101-120000-cmd-abcd PIPPA_RUN_DIR="$RUN_DIR"
:
if [ -f "$HOME"/.config/pippa/secrets.env ]; then set -a; . "$HOME"/.config/pippa/secrets.env; set +a; unset PIPPA_NOTIFY PIPPA_HEARTBEAT; fi
MAIN_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MAIN_PORT=$((20000 + SLURM_JOB_ID % 20000))
srun --kill-on-bad-exit=1 sh -c 'nvidia-smi; echo done'
code=$?
echo $code > "$RUN_DIR/exit_code.tmp"
mv -f "$RUN_DIR/exit_code.tmp" "$RUN_DIR/exit_code"
exit $code
