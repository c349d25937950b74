"""The host's stop command (pippa_agent.alerts.stopper) driven tick by tick, as the watcher drives it, with
real commands in a throw-away home: once per trigger, bounded when it hangs, never retried, a cancel."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pippa_agent.alerts.stopper import Stopper, saving


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".config" / "pippa" / "alerts").mkdir(parents=True)
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    return tmp_path


def _stopper(home: Path, command: str, told: list[tuple[str, str, str]], **cfg: object) -> Stopper:
    base = {"stop_command": command, "stop_when": ["done"], "stop_notice_s": 0, "host": "h", **cfg}
    return Stopper(base, str(home / "runs"), lambda *a: told.append(a))


def _until(stopper: Stopper, told: list[tuple[str, str, str]], state: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not any(t[0] == state for t in told):
        assert time.monotonic() < deadline, told
        stopper.tick(time.time(), [], None)
        time.sleep(0.05)


def test_a_stop_command_that_fails_runs_once_and_is_told_with_its_exit_and_last_line(home: Path) -> None:
    told: list[tuple[str, str, str]] = []
    s = _stopper(home, "echo ran >> $HOME/ran; echo 'no such pod' >&2; exit 3", told)
    s.tick(time.time(), ["r1"], None)
    s.tick(time.time(), [], None)  # the last run ended: done arms (no notice here) and runs
    _until(s, told, "stop ran")
    for _ in range(5):
        s.tick(time.time(), [], None)
    assert (home / "ran").read_text() == "ran\n"  # once: never retried
    assert [t[0] for t in told] == ["stop armed", "stop ran"]
    assert "exit 3" in told[1][2] and "no such pod" in told[1][2]
    assert "pippa keep h" in told[0][2]


def test_a_hung_stop_command_is_killed_after_its_limit_and_not_run_again(home: Path) -> None:
    told: list[tuple[str, str, str]] = []
    s = _stopper(home, "echo x >> $HOME/ran; sleep 60", told, stop_timeout_s=1)
    s.tick(time.time(), ["r1"], None)
    t0 = time.monotonic()
    s.tick(time.time(), [], None)
    _until(s, told, "stop ran")
    assert time.monotonic() - t0 < 10 and "killed after" in told[-1][2]
    s2 = _stopper(home, "echo x >> $HOME/ran", told)  # a watcher started again: the fired trigger stays fired
    s2.tick(time.time(), ["r1"], None)
    for _ in range(3):
        s2.tick(time.time(), [], None)
        time.sleep(0.1)
    assert (home / "ran").read_text() == "x\n" and not s2.state.get("armed")


def test_a_cancel_or_a_new_run_calls_the_stop_off(home: Path) -> None:
    told: list[tuple[str, str, str]] = []
    s = _stopper(home, "echo x >> $HOME/ran", told, stop_notice_s=60)
    s.tick(time.time(), ["r1"], None)
    s.tick(time.time(), [], None)
    assert s.state.get("armed")
    (home / ".config" / "pippa" / "alerts" / "stop.cancel").write_text("1\n")
    s.tick(time.time(), [], None)
    assert not s.state.get("armed") and told[-1][0] == "stop cancelled"
    (home / "runs" / "r2").mkdir()
    s.tick(time.time(), ["r2"], None)
    s.tick(time.time(), [], None)  # r2 ended: armed again, then r3 starts within the notice
    assert s.state.get("armed")
    s.tick(time.time(), ["r3"], None)
    assert not s.state.get("armed") and "a run started" in told[-1][2]
    assert not (home / "ran").exists()


def test_a_checkpoint_being_written_holds_the_stop(home: Path) -> None:
    staging = home / "runs" / "r1" / "checkpoints" / ".staging"
    staging.mkdir(parents=True)
    (staging / "shard").write_text("x")
    assert saving(str(home / "runs" / "r1"))
    assert not saving(str(home / "runs" / "r1"), time.time() + 31)


def test_a_run_that_ended_at_its_budget_arms_the_budget_stop(home: Path) -> None:
    told: list[tuple[str, str, str]] = []
    s = _stopper(home, "echo x >> $HOME/ran", told, stop_when=["budget"])
    run = home / "runs" / "r1"
    (run / "attempts.json").write_text('{"attempts": [{"attempt": 1, "class": "budget"}]}')
    s.tick(time.time(), ["r1"], None)
    (run / "exit_code").write_text("130\n")
    s.tick(time.time(), [], None)
    _until(s, told, "stop ran")
    assert told[0][:2] == ("stop armed", "budget") and (home / "ran").read_text() == "x\n"


def test_a_run_that_stalled_with_no_retry_left_arms_the_stalled_stop(home: Path) -> None:
    told: list[tuple[str, str, str]] = []
    s = _stopper(home, "echo x >> $HOME/ran", told, stop_when=["stalled"])
    r1, r2 = home / "runs" / "r1", home / "runs" / "r2"
    r2.mkdir()
    (r1 / "attempts.json").write_text('{"attempts": [{"attempt": 1, "class": "stalled"}]}')
    s.tick(time.time(), ["r1", "r2"], None)  # stalled, but retried: it goes on
    assert told == [] and "armed" not in s.state
    (r2 / "attempts.json").write_text('{"attempts": [{"attempt": 1, "class": "crash"}]}')
    (r2 / "exit_code").write_text("1\n")
    s.tick(time.time(), ["r1"], None)  # a crash is not a stall
    assert told == [] and "armed" not in s.state
    (r1 / "attempts.json").write_text(
        '{"attempts": [{"attempt": 1, "class": "stalled"}, {"attempt": 2, "class": "stalled"}]}'
    )
    (r1 / "exit_code").write_text("1\n")  # its supervisor gave up: no retry left
    deadline = time.monotonic() + 20
    while not any(t[0] == "stop ran" for t in told):
        assert time.monotonic() < deadline, told
        s.tick(time.time(), ["r3"], None)  # another run going does not call a stalled stop off
        time.sleep(0.05)
    assert told[0][:2] == ("stop armed", "stalled") and "run r1 stalled with no retry left" in told[0][2]
    for _ in range(5):
        s.tick(time.time(), ["r3"], None)
    assert (home / "ran").read_text() == "x\n", "once per trigger"
