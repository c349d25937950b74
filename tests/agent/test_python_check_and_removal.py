"""The host agent's python check (pippa_agent.probe.check_python) and its run removal
(pippa_agent.runs: run_checkpoints, remove_runs), called on this machine as the host."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pippa_agent import probe as agent_probe
from pippa_agent import runs as agent_runs
from pippa_contract import errors as agent_errors


def test_the_agents_python_check_and_run_removal_on_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMUX_TMPDIR", str(tmp_path))  # a tmux server of its own (none running)
    remote = str(tmp_path / "remote")
    (tmp_path / "remote" / "mypkg").mkdir(parents=True)
    (tmp_path / "remote" / "mypkg" / "__init__.py").write_text("")
    assert agent_probe.check_python({"argv": ["/no/such/python"], "remote_dir": remote})["missing"] is True
    ok = agent_probe.check_python({"argv": [sys.executable], "remote_dir": remote, "module": "mypkg"})
    assert ok["ok"] is True  # imported from the remote dir, as the trainer's cwd puts it first
    bad = agent_probe.check_python(
        {"argv": [sys.executable], "remote_dir": remote, "module": "no_such_mod_q"}
    )
    assert bad["ok"] is False and bad["line"] == "ModuleNotFoundError: No module named 'no_such_mod_q'"
    with pytest.raises(agent_errors.AgentError):
        agent_probe.check_python({"argv": [sys.executable], "remote_dir": remote, "module": "os; import x"})

    run = tmp_path / "remote" / "runs" / "20261118-101500-tiny-aaaa"
    (run / "checkpoints" / "checkpoint-5").mkdir(parents=True)
    (run / "checkpoints" / "checkpoint-10").mkdir()
    (run / "run.json").write_text('{"session": "training"}')
    (run / "exit_code").write_text("0\n")
    (run / "output.log").write_text("x" * 1000)
    assert agent_runs.run_checkpoints({"remote_dir": remote, "run_id": run.name}) == {
        "checkpoints": ["checkpoint-5", "checkpoint-10"],
        "skipped": [],
    }
    args = {"remote_dir": remote, "run_ids": [run.name, "20261118-000000-tiny-none"], "dry_run": True}
    dry = agent_runs.remove_runs(args)
    assert dry["removed"] == [run.name] and dry["bytes"] >= 1000 and run.is_dir()
    assert dry["refused"] == {"20261118-000000-tiny-none": "no such run directory"}
    assert agent_runs.remove_runs({**args, "dry_run": False})["removed"] == [run.name] and not run.exists()
