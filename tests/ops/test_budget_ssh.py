"""A run's budget with the real trainer on a loopback OpenSSH host priced at $1 a second: an alert's
record at 80%, and at 100% the run saves a checkpoint of the step it is on and stops with the class
``budget``, not retried; ``pippa why`` shows its ledger; ``--budget lots`` is refused in one line."""

from __future__ import annotations

import json

import pytest
import test_alerts
from test_alerts import configure
from test_restart_ssh import pippa, records, started, steps, wait_for

pytestmark = [pytest.mark.ssh, pytest.mark.slow]
restore_host = test_alerts.restore_host  # its fixture: the alerts' files on the host undone after
SETS = ["--set", "train.max_steps=100000", "--set", "checkpoint.every=1000", "--set", "eval.interval=100000"]


def test_a_run_at_its_budget_saves_and_stops_with_the_class_budget(
    client_env, ssh_hosts, restore_host
) -> None:
    h = restore_host(ssh_hosts[1])
    env = client_env.env
    configure(client_env, h.name, "secrets = []\ncost_per_hour = 3600\n")  # $1 a second
    up = pippa(env, "up", h.name, timeout=300)
    assert up.returncode == 0, up.stderr

    bad = pippa(env, "run", "tiny", "--host", h.name, "--budget", "lots")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "--budget" in bad.stderr

    run_id = started(pippa(env, "run", "tiny", "--host", h.name, "--name", "bud", "--budget", "$45", *SETS))
    run_dir = h.home / "pippa" / "runs" / run_id
    log = run_dir / "output.log"
    wait_for(lambda: (run_dir / "exit_code").exists(), 300, lambda: log.read_text()[-2000:])
    doc = json.loads((run_dir / "attempts.json").read_text())
    (last,) = doc["attempts"]
    assert last["class"] == "budget" and last["decision"]["retry"] is False, last
    assert doc["budget_alerted"] is True and "it stops at its budget" in log.read_text()
    assert last["price_s"] == pytest.approx(1.0)
    assert 45 <= last["end"] - last["start"] < 45 + 60  # stopped at the budget, within the poll and the save
    assert last["checked_at"] >= last["end"] and last["save_s"] > 0  # its checks; the trainer timed its save
    billed = last["checked_at"] - last["start"]  # the attempt and the supervisor's checks after it
    ck = sorted(int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("checkpoint-*"))
    assert ck and ck[-1] == steps(run_dir)[-1]  # the step it was on, saved (checkpoint.every is 1000)
    assert [r for r in records(run_dir) if r.get("type") == "end"][-1]["status"] == "interrupted"

    why = pippa(env, "why", run_id, "--host", h.name)
    assert why.returncode == 0 and "budget" in why.stdout, why.stdout
    spent = next(ln for ln in why.stdout.splitlines() if ln.startswith("spent: "))
    total = float(spent.split()[1].removeprefix("$"))
    assert total == pytest.approx(billed, rel=1e-3)  # the ledger: wall x price
    ps = json.loads(pippa(env, "ps", "--host", h.name, "--json").stdout)[h.name]["runs"]
    mine = next(r for r in ps if r["run_id"] == run_id)
    assert mine["state_text"].startswith("budget")
    assert sum(mine["ledger"].values()) == pytest.approx(billed, rel=1e-3)
    assert mine["ledger"]["checkpoint"] == pytest.approx(last["save_s"])  # $1 a second
    assert mine["ledger"]["health"] == pytest.approx(last["checked_at"] - last["end"])
    runs = pippa(env, "runs", "--host", h.name)
    assert "% productive" in next(ln for ln in runs.stdout.splitlines() if run_id.rsplit("-", 1)[1] in ln)
    compare = pippa(env, "compare", run_id, "--host", h.name)
    assert compare.returncode == 0 and "% productive)" in compare.stdout, compare.stdout + compare.stderr
