"""The pure halves of retries: durations, the policy a run gets, backoff, what ps shows of attempts,
the crontab edit of recover_on_boot, which lost runs recover starts. What the supervisor may import:
tests/agent/test_supervisor_units.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from pippa_contract import attempts
from pippa_ops.errors import BadSetting
from pippa_ops.provision.boot import boot_line, edit_crontab
from pippa_ops.runs.launching.recover import why_not
from pippa_ops.runs.launching.restart import RestartFlags, RestartPolicy, parse_duration
from pippa_ops.runs.launching.script import Job, render_cmd_sh
from pippa_ops.runs.records.listing import RunRecord, host_runs


def test_durations_read_like_people_write_them() -> None:
    assert [parse_duration(x) for x in ("20m", "90s", "1.5h", "500ms", "45", 30)] == [
        1200,
        90,
        5400,
        0.5,
        45,
        30,
    ]
    for bad in ("20 minutes", "-5s", "0s", "m"):
        with pytest.raises(BadSetting):
            parse_duration(bad)


def test_a_flag_wins_over_the_recipes_restart_table(tmp_path: Path) -> None:
    (tmp_path / "r.toml").write_text('[restart]\nmax_attempts = 4\nstall_timeout = "20m"\n')
    want = RestartPolicy(max_attempts=4, stall_timeout_s=1200.0, watched=True)
    assert RestartFlags().policy_for("r", tmp_path) == want
    policy = RestartFlags(retry=1, backoff="5s").policy_for("r", tmp_path)
    assert (policy.max_attempts, policy.stall_timeout_s, policy.backoff_s) == (2, 1200.0, 5.0)
    assert not RestartFlags().policy_for(None, tmp_path).active  # a --cmd run: no table, no supervisor


def test_every_recipe_run_is_watched_for_stalls_unless_turned_off(tmp_path: Path) -> None:
    (tmp_path / "r.toml").write_text('[restart]\ninfra_retries = 1\non_oom = "fail"\n')
    policy = RestartFlags().policy_for("r", tmp_path)
    assert policy.active and policy.to_json()["stall_timeout_s"] is None  # None: derived on the host
    assert (policy.infra_retries, policy.on_oom) == (1, "fail")
    off = RestartFlags(stall_timeout="off").policy_for("r", tmp_path)
    assert not off.active and off.to_json()["stall_timeout_s"] == "off"
    assert RestartFlags(stall_timeout="off", retry=2).policy_for("r", tmp_path).active
    assert RestartFlags(infra_retries=0, on_oom="halve").policy_for("r", tmp_path).infra_retries == 0
    for bad in (RestartFlags(on_oom="shrink"), RestartFlags(infra_retries=-1)):
        with pytest.raises(BadSetting):
            bad.policy_for("r", tmp_path)
    (tmp_path / "bad.toml").write_text("[restart]\nretries = 3\n")
    with pytest.raises(BadSetting, match="unknown \\[restart\\] key 'retries'"):
        RestartFlags().policy_for("bad", tmp_path)


def test_backoff_doubles_and_is_capped() -> None:
    policy = attempts.policy_of({"restart": {"max_attempts": 9}})
    assert [attempts.backoff(n, policy) for n in (1, 2, 3, 5, 9)] == [30, 60, 120, 480, 600]


def test_a_supervised_cmd_sh_runs_the_supervisor_and_not_the_command_itself() -> None:
    job = Job("20260101-000000-tiny-abcd", "tiny", "python -m training_core.launch tiny", None)
    plain, supervised = render_cmd_sh(job, "~/pippa", {}), render_cmd_sh(job, "~/pippa", {}, supervised=True)
    assert "training_core.launch" in plain and "supervise" not in plain
    assert 'python3 -S -I "$RUN_DIR/agent.pyz" supervise "$RUN_DIR"' in supervised
    assert "training_core.launch" not in supervised  # it reads the command from run.json


def _run(attempts: dict[str, object] | None, *, alive: bool, exit_code: str | None) -> RunRecord:
    meta = {"session": "s", "recipe": "tiny", "command": "x"}
    raw = {"run_id": "r1", "meta": meta, "tmux_session": "$1@100", "exit_code": exit_code, "started": "100"}
    if attempts is not None:
        raw["attempts"] = attempts
    answer = {"now": 200.0, "sessions": "s|100|0|1|$1\n" if alive else "", "runs": [raw]}
    return host_runs("h", answer).runs[0]


def test_ps_shows_the_attempt_the_wait_and_how_many_it_took() -> None:
    one = {"max_attempts": 4, "attempts": [{"outcome": "failed", "reason": "CUDA error"}], "next_at": None}
    two = {**one, "attempts": [*one["attempts"], {"outcome": "running"}]}  # type: ignore[list-item]
    assert _run(two, alive=True, exit_code=None).state_text == "running (attempt 2/4)"
    assert (
        _run({**one, "next_at": 255.0}, alive=True, exit_code=None).state_text
        == "running (attempt 2/4 in 55s)"
    )
    four = {**one, "attempts": [{"outcome": "failed", "reason": f"boom {i}"} for i in range(1, 5)]}
    done = _run(four, alive=False, exit_code="1")
    assert (done.state_text, done.error) == ("failed after 4 attempts (exit 1)", "boom 4")
    assert _run(None, alive=False, exit_code=None).state_text == "lost"
    assert _run(None, alive=False, exit_code="1").state_text == "failed (exit 1)"  # no policy: as before


def test_recover_starts_lost_runs_with_attempts_left_only() -> None:
    lost = RunRecord("h", "r1", "s", "tiny", "x", "lost", attempt=1, max_attempts=2)
    assert why_not(lost, set()) is None
    assert why_not(lost, {"s"}) == "its session 's' is in use by another run"
    assert why_not(RunRecord("h", "r1", "s", "tiny", "x", "lost", attempt=2, max_attempts=2), set()) == (
        "no attempts left (2/2)"
    )
    assert "pippa resume r1" in str(why_not(RunRecord("h", "r1", "s", "tiny", "x", "lost"), set()))


def test_the_reboot_line_is_added_once_removed_cleanly_and_keeps_the_users_lines() -> None:
    mine = "0 3 * * * backup\n"
    with_line = edit_crontab(mine, "~/pippa", True)
    assert with_line == mine + boot_line("~/pippa") + "\n"
    assert edit_crontab(with_line, "~/pippa", True) == with_line  # idempotent
    assert edit_crontab(with_line, "/other", True).count("@reboot") == 2  # another project keeps its own
    assert edit_crontab(with_line, "~/pippa", False) == mine
    with pytest.raises(BadSetting):
        boot_line("~/pippa\n* * * * * evil")


def test_the_previous_versions_reboot_line_is_replaced_not_kept_beside_the_new_one() -> None:
    previous = (
        "@reboot python3 -S -I ~/.local/share/pippa/supervise.py --recover '~/pippa' "
        "# pippa recover_on_boot '~/pippa'\n"
    )
    mine = "0 3 * * * echo mine\n"
    assert edit_crontab(mine + previous, "~/pippa", True) == mine + boot_line("~/pippa") + "\n"
    assert "agent.pyz recover" in boot_line("~/pippa")


def test_a_lost_attempt_does_not_spend_the_retry_budget_of_recover() -> None:
    from pippa_contract.retry import may_restart_lost as infra_left

    doc = {"max_attempts": 1, "infra_retries": 3, "attempts": [{"attempt": 1, "outcome": "running"}]}
    assert infra_left(doc) is True  # --retry 0, and still recovered
    lost3 = [{"attempt": i, "class": "lost"} for i in (1, 2, 3)]
    assert infra_left({**doc, "attempts": [*lost3, {"attempt": 4}]}) is False
    assert infra_left({"max_attempts": 2, "attempts": [{"attempt": 1}]}) is None  # an older record
