"""Pure command builders of the tmux layer and of run launches: no tmux, no host needed."""

from __future__ import annotations

import json
import shlex

import pytest

from pippa_ops import tmux
from pippa_ops.errors import BadSetting, InvalidName
from pippa_ops.follow import follow_script
from pippa_ops.runs_list import derive_state, parse_listing
from pippa_ops.runs_script import (
    cmd_job,
    launch_script,
    new_run_id,
    parse_sets,
    recipe_job,
    render_cmd_sh,
    run_json,
    session_argv,
)
from pippa_ops.shell import NAME_RE, sh_path


def test_tmux_targets_use_exact_match_so_a_prefix_never_hits_another_session() -> None:
    assert tmux.has_session_argv("train") == ["tmux", "has-session", "-t", "=train"]
    assert tmux.interrupt_argv("train") == ["tmux", "send-keys", "-t", "=train:", "C-c"]
    assert tmux.kill_session_argv("train")[-1] == "=train"
    assert tmux.capture_pane_argv("train", 20) == ["tmux", "capture-pane", "-p", "-t", "=train:", "-S", "-20"]


def test_new_session_execs_an_argument_list_detached() -> None:
    argv = tmux.new_session_argv("training", ["sh", "-c", "echo hi"])
    assert argv[:8] == ["tmux", "new-session", "-d", "-P", "-F", tmux.IDENTITY_FORMAT, "-s", "training"]
    assert argv[-3:] == ["sh", "-c", "echo hi"]
    with pytest.raises(ValueError):
        tmux.new_session_argv("training", ["echo hi"])  # one string would go through the user's shell


def test_list_sessions_parser_reads_name_created_attached_windows() -> None:
    text = "training|1700000000|1|1|$0\nbad line\no|ther|1700000100|0|2|$3\n"
    sessions = tmux.parse_sessions(text)
    assert [(s.name, s.created, s.attached, s.windows) for s in sessions] == [
        ("training", 1700000000.0, 1, 1),
        ("o|ther", 1700000100.0, 0, 2),
    ]
    assert sessions[1].identity == "$3@1700000100"


def test_sh_path_leaves_tilde_to_the_host_shell_and_quotes_the_rest() -> None:
    assert sh_path("~/pippa runs") == "\"$HOME\"/'pippa runs'"
    assert sh_path("/srv/x;y") == "'/srv/x;y'"
    assert sh_path("~") == '"$HOME"'


def test_run_ids_follow_the_contract_pattern() -> None:
    rid = new_run_id("overfit_aggressive", now=0)
    assert NAME_RE.fullmatch(rid)
    assert "-overfit_aggressive-" in rid
    assert len(new_run_id("x" * 80)) <= 64


def test_set_items_need_key_equals_value_with_a_strict_key() -> None:
    assert parse_sets(["train.max_steps=3", "data.note=a b; c"]) == [
        ("train.max_steps", "3"),
        ("data.note", "a b; c"),
    ]
    for bad in ["noequals", "Train.x=1", "x;rm=1", "1x=2", "a-b=1"]:
        with pytest.raises(BadSetting):
            parse_sets([bad])


def test_recipe_job_quotes_set_values_so_they_stay_one_argument() -> None:
    job = recipe_job(
        "20260101-000000-tiny-abcd", "tiny", None, "~/pippa", [("data.note", "a b; touch /tmp/x")]
    )
    words = shlex.split(job.command.replace('"$HOME"', "/home/u"))
    assert words[0] == "/home/u/pippa/.venv/bin/python"
    assert words[1:5] == ["-m", "training_core.train", "tiny", "--run-dir"]
    assert words[5] == "/home/u/pippa/runs/20260101-000000-tiny-abcd"
    assert words[6:] == ["--set", "data.note=a b; touch /tmp/x"]


def test_cmd_sh_sources_secrets_from_the_file_and_never_contains_them() -> None:
    job = cmd_job("20260101-000000-cmd-abcd", "python train.py")
    script = render_cmd_sh(job, "~/pippa", {"HF_HOME": "/data/hf cache"})
    assert '. "$HOME"/.config/pippa/secrets.env' in script
    assert "set -a" in script
    assert "export HF_HOME='/data/hf cache'" in script
    assert 'export PATH="$HOME/.local/bin:$PATH"' in script
    assert 'tee -a -i "$RUN_DIR/output.log"' in script
    assert 'mv -f "$RUN_DIR/exit_code.tmp" "$RUN_DIR/exit_code"' in script  # atomic exit status
    assert "WANDB_API_KEY" not in script


def test_sweep_session_runs_each_cmd_sh_in_turn_with_a_gap_and_survives_ctrl_c() -> None:
    argv = session_argv("~/pippa", ["a-1", "b-2"], 10)
    assert argv[:2] == ["sh", "-c"]
    assert (
        argv[2] == 'trap : INT; sh "$HOME"/pippa/runs/a-1/cmd.sh; sleep 10; sh "$HOME"/pippa/runs/b-2/cmd.sh'
    )


def test_launch_script_refuses_an_existing_session_unless_replace() -> None:
    files = [
        (
            "r-1",
            run_json(
                cmd_job("r-1", "true"),
                session="s",
                host="h",
                started=1.0,
                sync=None,
                sweep_index=0,
                sweep_size=1,
            ),
            "#!/bin/sh\n",
        )
    ]
    plain = launch_script(
        session="s", remote_dir="~/p", files=files, tmux_argv=["tmux", "x"], replace=False, stamp=5
    )
    assert "exit 17" in plain and "kill-session" not in plain
    replaced = launch_script(
        session="s", remote_dir="~/p", files=files, tmux_argv=["tmux", "x"], replace=True, stamp=5
    )
    assert "kill-session -t =s" in replaced and "stop_requested" in replaced
    with pytest.raises(InvalidName):
        launch_script(
            session="s;x", remote_dir="~/p", files=files, tmux_argv=["tmux"], replace=False, stamp=5
        )


def test_state_is_derived_from_files_and_the_runs_own_session() -> None:
    assert derive_state(session_alive=True, exit_code=None, started=True, stop_requested=False) == "running"
    assert derive_state(session_alive=True, exit_code=None, started=False, stop_requested=False) == "queued"
    assert derive_state(session_alive=False, exit_code=3, started=True, stop_requested=False) == "finished"
    assert derive_state(session_alive=False, exit_code=130, started=True, stop_requested=True) == "stopped"
    assert derive_state(session_alive=False, exit_code=None, started=True, stop_requested=True) == "killed"
    assert (
        derive_state(session_alive=False, exit_code=None, started=False, stop_requested=True) == "cancelled"
    )
    assert derive_state(session_alive=False, exit_code=None, started=True, stop_requested=False) == "lost"


def test_listing_parser_matches_sessions_by_creation_time_and_reads_last_step() -> None:
    m = "@@x:"
    meta = {
        "run_id": "r-old",
        "session": "training",
        "recipe": None,
        "command": "sleep 9",
        "sync": {"commit": "abc", "dirty": True},
    }
    meta2 = {**meta, "run_id": "r-new", "recipe": "tiny"}
    step = json.dumps({"type": "step", "step": 7, "reward/mean": 0.25})
    text = "\n".join(
        [
            f"{m}NOW 2000",
            f"{m}SESSION training|1900|0|1|$4",
            f"{m}RUN r-old",
            f"{m}JSON {json.dumps(meta)}",
            f"{m}CTIME 1000",
            f"{m}STARTED 1000",
            f"{m}RUN r-new",
            f"{m}JSON {json.dumps(meta2)}",
            f"{m}CTIME 1899",
            f"{m}STARTED 1900",
            f"{m}STEP {step}",
            f'{m}STEP {{"type": "step", "st',  # a partial last line is ignored
            "noise without the marker",
        ]
    )
    runs = {r.run_id: r for r in parse_listing("h", text, m).runs}
    assert runs["r-old"].state == "lost"  # the live 'training' session belongs to the newer run
    assert runs["r-new"].state == "running" and runs["r-new"].duration_s == 100
    assert (runs["r-new"].last_step, runs["r-new"].last_reward) == (7, 0.25)
    assert (runs["r-new"].commit, runs["r-new"].dirty) == ("abc", True)


def test_follow_script_resumes_from_the_byte_after_the_offset_and_ends_with_the_run() -> None:
    script = follow_script("~/p/runs/r/output.log", 10, end_file="~/p/runs/r/exit_code", session="training")
    assert 'tail -c +11 -F "$HOME"/p/runs/r/output.log' in script
    assert '[ -e "$HOME"/p/runs/r/exit_code ]' in script
    assert "! tmux has-session -t =training" in script
    assert "cat <&3" in script  # the host's tail stops when the client closes the channel


def test_a_session_reusing_the_name_within_seconds_is_not_the_replaced_runs() -> None:
    m = "@@x:"
    meta = {"run_id": "r-a", "session": "dup", "command": "sleep 30"}
    lines = [f"{m}NOW 100", f"{m}SESSION dup|100|0|1|$7", f"{m}RUN r-a", f"{m}JSON {json.dumps(meta)}"]
    old = [*lines, f"{m}CTIME 100", f"{m}TMUX $6@100", f"{m}STARTED 100", f"{m}STOP 100"]
    (rec,) = parse_listing("h", "\n".join(old), m).runs
    assert rec.state == "killed"  # same name, same second, but another tmux session ($6 vs $7)
    new = [*lines, f"{m}CTIME 100", f"{m}TMUX $7@100", f"{m}STARTED 100"]
    assert parse_listing("h", "\n".join(new), m).runs[0].state == "running"


def test_attach_is_one_command_line_for_pippa_attach_and_the_dashboard(tmp_path, monkeypatch) -> None:
    from pippa_ops.inventory import HostSpec, local_spec
    from pippa_ops.runs import attach_argv

    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/config: the spec alone says where
    local = local_spec(tmp_path)
    assert attach_argv(local, "train") == ["tmux", "attach-session", "-t", "=train"]
    assert attach_argv(local, "train", switch_client=True) == tmux.switch_client_argv("train")
    remote = attach_argv(HostSpec("gpu1", address="10.0.0.5", user="me", port=2222), "train")
    assert remote[0] == "ssh" and "-t" in remote
    assert remote[-2:] == ["10.0.0.5", "tmux attach-session -t =train"]
    assert remote[remote.index("-p") + 1] == "2222" and remote[remote.index("-l") + 1] == "me"
