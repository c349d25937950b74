#!/bin/sh
# pippa run 20260101-120000-tiny-abcd: written by pippa at launch. Holds no secrets: they are sourced from
# ~/.config/pippa/secrets.env (mode 0600) inside the job's subshell.
RUN_DIR="$HOME"/pippa/runs/20260101-120000-tiny-abcd
[ -e "$RUN_DIR/stop_requested" ] && exit 0
date +%s > "$RUN_DIR/started"
trap : INT
{
  trap : INT
  (
    cd "$HOME"/pippa || exit 1
    export PATH="$HOME/.local/bin:$PATH" PYTHONUNBUFFERED=1
    export PIPPA_RUN_ID=20260101-120000-tiny-abcd PIPPA_RUN_DIR="$RUN_DIR"
    export HF_HOME='/data/hf cache'
    if [ -f "$HOME"/.config/pippa/secrets.env ]; then set -a; . "$HOME"/.config/pippa/secrets.env; set +a; unset PIPPA_NOTIFY PIPPA_HEARTBEAT; fi
"$HOME"/pippa/.venv/bin/python -m training_core.launch tiny --run-dir "$HOME"/pippa/runs/20260101-120000-tiny-abcd --set train.max_steps=3
  )
  echo $? > "$RUN_DIR/exit_code.tmp"
} 2>&1 | tee -a -i "$RUN_DIR/output.log"
[ -f "$RUN_DIR/exit_code.tmp" ] && mv -f "$RUN_DIR/exit_code.tmp" "$RUN_DIR/exit_code"
[ -f "$HOME"/.config/pippa/alerts/config.json ] && [ -f "$RUN_DIR/agent.pyz" ] && python3 -S -I "$RUN_DIR/agent.pyz" alerts event --run-dir "$RUN_DIR" --detach >/dev/null 2>&1 || :
exit 0
