#!/bin/sh
# pippa run {{run_id}}: written by pippa at launch. Holds no secrets: they are sourced from
# {{secrets_path}} (mode 0600) inside the job's subshell.
RUN_DIR={{run_dir}}
[ -e "$RUN_DIR/stop_requested" ] && exit 0
date +%s > "$RUN_DIR/started"
trap : INT
{
  trap : INT
  (
    cd {{remote_dir}} || exit 1
    export PATH="$HOME/.local/bin:$PATH" PYTHONUNBUFFERED=1
    export PIPPA_RUN_ID={{run_id_word}} PIPPA_RUN_DIR="$RUN_DIR"
    {{export_line}}
    {{source_secrets}}
{{job_line}}
  )
  echo $? > "$RUN_DIR/exit_code.tmp"
} 2>&1 | tee -a -i "$RUN_DIR/output.log"
[ -f "$RUN_DIR/exit_code.tmp" ] && mv -f "$RUN_DIR/exit_code.tmp" "$RUN_DIR/exit_code"
{{run_end_line}}
exit 0
