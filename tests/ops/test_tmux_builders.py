"""Pure command builders of the tmux layer and of run launches: no tmux, no host needed."""

from __future__ import annotations

import shlex

import pytest

from pippa_contract.names import new_run_id
from pippa_ops.errors import BadSetting
from pippa_ops.runs.launching.script import (
    cmd_job,
    parse_sets,
    recipe_job,
    render_cmd_sh,
    session_argv,
)
from pippa_ops.runs.records import tmux
from pippa_ops.runs.records.listing import derive_state, host_runs
from pippa_ops.transport.shell import NAME_RE, sh_path


def test_tmux_targets_use_exact_match_so_a_prefix_never_hits_another_session() -> None:
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
    assert words[1:5] == ["-m", "training_core.launch", "tiny", "--run-dir"]
    assert words[5] == "/home/u/pippa/runs/20260101-000000-tiny-abcd"
    assert words[6:] == ["--set", "data.note=a b; touch /tmp/x"]


def test_cmd_sh_sources_secrets_from_the_file_and_never_contains_them() -> None:
    job = cmd_job("20260101-000000-cmd-abcd", "python train.py")
    script = render_cmd_sh(job, "~/pippa", {"HF_HOME": "/data/hf cache"})
    assert '. "$HOME"/.config/pippa/secrets.env' in script
    assert "set -a" in script
    assert "set +a; unset PIPPA_NOTIFY PIPPA_HEARTBEAT; fi" in script  # the alerts' and the watcher's alone
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


def test_state_is_derived_from_files_and_the_runs_own_session() -> None:
    assert derive_state(session_alive=True, exit_code=None, started=True, stop_requested=False) == "running"
    assert derive_state(session_alive=True, exit_code=None, started=False, stop_requested=False) == "queued"
    assert derive_state(session_alive=False, exit_code=0, started=True, stop_requested=False) == "finished"
    assert derive_state(session_alive=False, exit_code=3, started=True, stop_requested=False) == "failed"
    assert derive_state(session_alive=False, exit_code=130, started=True, stop_requested=True) == "stopped"
    assert derive_state(session_alive=False, exit_code=None, started=True, stop_requested=True) == "killed"
    assert (
        derive_state(session_alive=False, exit_code=None, started=False, stop_requested=True) == "cancelled"
    )
    assert derive_state(session_alive=False, exit_code=None, started=True, stop_requested=False) == "lost"


def test_listing_matches_sessions_by_creation_time_and_reads_last_step() -> None:
    meta = {
        "run_id": "r-old",
        "session": "training",
        "recipe": None,
        "command": "sleep 9",
        "sync": {"commit": "abc", "dirty": True},
    }
    meta2 = {**meta, "run_id": "r-new", "recipe": "tiny"}
    answer = {
        "now": 2000,
        "sessions": "training|1900|0|1|$4\n",
        "runs": [
            {"run_id": "r-old", "meta": meta, "ctime": 1000, "started": "1000\n"},
            {
                "run_id": "r-new",
                "meta": meta2,
                "ctime": 1899,
                "started": "1900",
                "steps": [{"type": "step", "step": 7, "reward/mean": 0.25}],
            },
            {"run_id": "bad;name", "meta": meta},
            {"run_id": "r-nometa", "meta": "x"},
        ],
    }
    runs = {r.run_id: r for r in host_runs("h", answer).runs}
    assert set(runs) == {"r-old", "r-new"}
    assert runs["r-old"].state == "lost"  # the live 'training' session belongs to the newer run
    assert runs["r-new"].state == "running" and runs["r-new"].duration_s == 100
    assert (runs["r-new"].last_step, runs["r-new"].last_reward) == (7, 0.25)
    assert (runs["r-new"].commit, runs["r-new"].dirty) == ("abc", True)


def test_a_failed_run_says_failed_with_its_exit_code_and_why() -> None:
    meta = {"run_id": "r-f", "session": "s", "command": "python boom.py"}
    raw = {"run_id": "r-f", "meta": meta, "ctime": 10, "started": "10", "exit_code": "1", "ended": 20}
    (rec,) = host_runs("h", {"now": 30, "runs": [{**raw, "error": "ValueError: boom"}]}).runs
    assert (rec.state, rec.state_text, rec.error) == ("failed", "failed (exit 1)", "ValueError: boom")
    assert rec.to_json()["error"] == "ValueError: boom"
    end = {"type": "end", "status": "failed", "error": "RuntimeError: CUDA out of memory"}
    (rec,) = host_runs("h", {"now": 30, "runs": [{**raw, "error": "x", "end": end}]}).runs
    assert rec.error == "RuntimeError: CUDA out of memory"  # the trainer's own words first
    (ok,) = host_runs("h", {"now": 30, "runs": [{**raw, "exit_code": "0"}]}).runs
    assert (ok.state_text, ok.error) == ("finished (exit 0)", None)


def test_a_session_reusing_the_name_within_seconds_is_not_the_replaced_runs() -> None:
    meta = {"run_id": "r-a", "session": "dup", "command": "sleep 30"}
    base = {"run_id": "r-a", "meta": meta, "ctime": 100, "started": "100"}
    old = {
        "now": 100,
        "sessions": "dup|100|0|1|$7",
        "runs": [{**base, "tmux_session": "$6@100", "stop_requested": "100"}],
    }
    (rec,) = host_runs("h", old).runs
    assert rec.state == "killed"  # same name, same second, but another tmux session ($6 vs $7)
    new = {"now": 100, "sessions": "dup|100|0|1|$7", "runs": [{**base, "tmux_session": "$7@100"}]}
    assert host_runs("h", new).runs[0].state == "running"


def test_the_agent_and_the_laptop_choose_a_run_for_a_name_by_one_rule() -> None:
    """``runpick.choose`` (the agent's ``read_run``) and ``current_run`` (the laptop) on one answer:
    a session's running run before its newer ended one, its queued one before nothing, an exact id,
    short ids, a SLURM job's run; none for an unknown name or a short id that fits several."""
    from pippa_contract import runpick
    from pippa_ops.errors import AmbiguousSession, RunNotFound
    from pippa_ops.runs.records.listing import current_run

    def raw(run_id: str, session: str, ctime: float, **facts: object) -> dict[str, object]:
        return {
            "run_id": run_id,
            "meta": {"run_id": run_id, "session": session, "command": "x"},
            "ctime": ctime,
            **facts,
        }

    answer = {
        "now": 500,
        "sessions": "train|100|0|1|$1\nq|300|0|1|$2\n",
        "runs": [
            raw("20260101-000100-a-1111", "train", 100, started="100", tmux_session="$1@100"),
            raw("20260101-000200-a-2222", "train", 200, started="200", exit_code="0"),
            raw("20260101-000300-b-3333", "q", 300, tmux_session="$2@300"),  # queued
            raw("20260101-000400-b-4444", "q", 400, started="400", exit_code="1"),
            raw("20260101-000450-c-5555", "gone", 450, started="450"),  # lost
            raw("20260101-000460-c-6666", "x", 460, slurm={"job_id": "77", "state": "RUNNING"}),
        ],
    }
    listed = host_runs("h", answer)
    for name in ("train", "q", "gone", "20260101-000200-a-2222", "2222", "a-1111", "20260101-00045", "6666"):
        assert runpick.choose(answer, name) == current_run(listed, name).run_id, name
    assert runpick.choose(answer, "train") == "20260101-000100-a-1111"  # running, though older
    assert runpick.choose(answer, "q") == "20260101-000300-b-3333"  # queued
    assert runpick.choose(answer, None) == listed.runs[-1].run_id == "20260101-000460-c-6666"
    for name in ("nosuch", "20260101"):  # unknown; a prefix of every run
        assert runpick.choose(answer, name) is None
    with pytest.raises(RunNotFound):
        current_run(listed, "nosuch")
    with pytest.raises(AmbiguousSession):
        current_run(listed, "20260101")
