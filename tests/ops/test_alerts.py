"""Alerts from the host, end to end: real loopback sshd hosts, real tmux runs, Apprise posting to a real
HTTP server on loopback (tests/ops/webhook.py). PIPPA_NOTIFY is the secret: its token must appear in no
payload, argv, output.log or pippa output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import webhook
from argv_scan import watching_argv
from conftest import PIPPA
from hostprogram import install
from projects import make_project

pytestmark = pytest.mark.ssh

TOKEN = "tok-5e1f0c7a9d"  # the secret part of the webhook URL
PROG = ".config/pippa/alerts/agent.pyz"  # the host program, as `pippa up` links it for the alerts
FAKE_SMI = """#!/bin/sh
# two GPUs whose utilization is the number in ~/gpu-util
case "$1" in
  -L) echo "GPU 0: Fake GPU (UUID: GPU-0)"; echo "GPU 1: Fake GPU (UUID: GPU-1)";;
  -q) echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."; exit 9;;
  *) u=$(cat "$HOME/gpu-util" 2>/dev/null || echo 0); echo "$u"; echo "$u";;
esac
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    (r / ".gitignore").write_text(".env\n")
    make_project(r)
    return r


@pytest.fixture
def hook() -> Iterator[webhook.Webhook]:
    with webhook.serve() as h:
        yield h


def pippa(
    env: dict[str, str], repo: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PIPPA, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)


def configure(client_env: Any, name: str, extra: str) -> None:
    inv = client_env.personal_inventory
    inv.write_text(inv.read_text().replace(f"[hosts.{name}]\n", f"[hosts.{name}]\nsetup = []\n{extra}"))


@pytest.fixture
def restore_host() -> Iterator[Any]:
    """``use(h)``: what the test leaves on host user ``h`` is undone after it (the alerts directory and its
    watcher, ~/gpu-util, secrets.env as it was)."""
    used: dict[str, tuple[Any, bytes | None]] = {}

    def use(h: Any) -> Any:
        f = h.home / ".config" / "pippa" / "secrets.env"
        used[h.name] = (h, f.read_bytes() if f.exists() else None)
        return h

    yield use
    for h, saved in used.values():
        if (h.home / PROG).exists():
            h.run_as_user(["python3", "-S", "-I", str(h.home / PROG), "alerts", "watch-stop"])
        subprocess.run(
            [
                "rm",
                "-rf",
                str(h.home / ".config" / "pippa" / "alerts"),
                str(h.home / "gpu-util"),
                str(h.home / ".config" / "pippa" / "secret_prints.json"),
            ]
        )
        f = h.home / ".config" / "pippa" / "secrets.env"
        if saved is None:
            f.unlink(missing_ok=True)
        else:
            f.write_bytes(saved)


def started(out: str) -> str:
    return next(line.split()[1] for line in out.splitlines() if line.startswith("started "))


def wait_until(pred: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_finished_and_failed_runs_alert_from_the_host_with_every_field_and_no_secret(
    client_env, ssh_hosts, repo, hook, restore_host
) -> None:
    h = restore_host(ssh_hosts[1])
    env = client_env.env
    (repo / ".env").write_text(f"PIPPA_NOTIFY={hook.url(TOKEN)}\n")
    configure(client_env, h.name, "secrets = []\ncost_per_hour = 36\n")
    up, leaked = watching_argv(TOKEN, lambda: pippa(env, repo, "up", h.name))
    assert up.returncode == 0, up.stderr
    assert "configured (PIPPA_NOTIFY)" in up.stdout and TOKEN not in up.stdout + up.stderr
    assert not leaked, "the webhook token appeared in some process's argv"
    test = pippa(env, repo, "notify-test", h.name)
    assert test.returncode == 0 and test.stdout == f"{h.name}: test alert sent to PIPPA_NOTIFY\n", test.stderr
    sent = hook.wait_for(lambda p: p.fields.get("state") == "test")
    assert sent.json["title"] == f"pippa: test on {h.name}" and sent.fields["host"] == h.name

    def runs_and_their_alerts() -> tuple[Any, ...]:
        ok = pippa(env, repo, "run", "--host", h.name, "--name", "al-ok", "--cmd", "echo all good; sleep 1")
        bad = pippa(
            env, repo, "run", "--host", h.name, "--name", "al-bad", "--cmd", "echo 'ValueError: boom'; exit 3"
        )
        assert ok.returncode == 0 and bad.returncode == 0, ok.stderr + bad.stderr
        ok_id, bad_id = started(ok.stdout), started(bad.stdout)
        done = hook.wait_for(lambda p: p.fields.get("run") == ok_id)
        failed = hook.wait_for(lambda p: p.fields.get("run") == bad_id)
        return ok, bad, ok_id, bad_id, done, failed

    (ok, bad, ok_id, bad_id, done, failed), leaked = watching_argv(TOKEN, runs_and_their_alerts)
    assert not leaked, "the token appeared in the argv of a process of the runs or their delivery"
    outputs = [ok.stdout + ok.stderr, bad.stdout + bad.stderr]
    assert done.path == f"/hook/{TOKEN}"  # the secret is the target, so it is in the URL only
    f = done.fields
    # the run as its user knows it: session, recipe (here a command), short id
    ok_name, bad_name = f"al-ok (cmd, {ok_id.rsplit('-', 1)[1]})", f"al-bad (cmd, {bad_id.rsplit('-', 1)[1]})"
    assert done.json["title"] == f"pippa: finished {ok_name} on {h.name}" and done.json["type"] == "success"
    assert (f["host"], f["state"], f["recipe"]) == (h.name, "finished", "echo all good; sleep 1")
    assert f["look"] == f"pippa logs {ok_id} --host {h.name}"
    assert f["elapsed"].startswith("0m0") and "reason" not in f and "step" not in f
    run_dir = h.home / "pippa" / "runs" / ok_id
    t = float((run_dir / "exit_code").stat().st_mtime) - float((run_dir / "started").read_text())
    assert f["cost so far"].startswith("$")  # money, in the entry's currency ($ when unset)
    assert abs(float(f["cost so far"].removeprefix("$")) - 36 * t / 3600) < 0.011
    g = failed.fields
    assert (g["state"], g["reason"], failed.json["type"]) == ("failed", "ValueError: boom", "failure")
    assert failed.json["title"] == f"pippa: failed {bad_name} on {h.name}"

    for p in hook.posts:
        assert TOKEN not in p.body.decode()
    for rid in (ok_id, bad_id):
        d = h.home / "pippa" / "runs" / rid
        assert TOKEN not in (d / "output.log").read_text() + (d / "cmd.sh").read_text()
    ps = pippa(env, repo, "ps", "--json", "--host", h.name)
    # (another test's command may quote the target on purpose: only this test's runs are looked at)
    mine = [r for r in json.loads(ps.stdout)[h.name]["runs"] if r["run_id"] in (ok_id, bad_id)]
    assert len(mine) == 2
    for text in [*outputs, json.dumps(mine), ps.stderr]:
        assert TOKEN not in text
    log = (h.home / ".config" / "pippa" / "alerts" / "deliveries.jsonl").read_text().splitlines()
    assert [json.loads(x)["ok"] for x in log] == [True, True, True]


def test_jobs_never_see_pippa_notify_and_a_message_quoting_a_secret_is_redacted(
    client_env, ssh_hosts, repo, hook, restore_host
) -> None:
    """Only the delivery reads the target: a job printing its environment logs other secrets (that is
    the job's business) but not PIPPA_NOTIFY; a failed run whose last line quotes a secret or the target
    sends a message without either."""
    h = restore_host(ssh_hosts[1])
    env = client_env.env
    hf = "hf-secret-0b7d3e"
    (repo / ".env").write_text(f"PIPPA_NOTIFY={hook.url(TOKEN)}\nHF_TOKEN={hf}\n")
    configure(client_env, h.name, 'secrets = ["HF_TOKEN"]\n')
    assert pippa(env, repo, "up", h.name).returncode == 0
    runs = h.home / "pippa" / "runs"
    shown = started(pippa(env, repo, "run", "--host", h.name, "--name", "al-env", "--cmd", "env").stdout)
    wait_until(lambda: (runs / shown / "exit_code").exists())
    log = (runs / shown / "output.log").read_text()
    assert f"HF_TOKEN={hf}" in log, "the job still gets its secrets"
    assert "PIPPA_NOTIFY" not in log and TOKEN not in log

    # the line comes from a synced script, so the target is in no process's argv (tests beside this one
    # scan every process for it)
    (repo / "quote.sh").write_text(f'echo "ValueError: bad token $HF_TOKEN for {hook.url(TOKEN)}"; exit 3\n')
    quoted = pippa(env, repo, "run", "--host", h.name, "--name", "al-quote", "--cmd", "sh quote.sh")
    bad = started(quoted.stdout)
    failed = hook.wait_for(lambda p: p.fields.get("run") == bad)
    assert failed.fields["reason"] == "ValueError: bad token *** for ***"
    assert hf not in failed.body.decode() and TOKEN not in failed.body.decode()
    # the same one redaction for the reason lines of `ps` and `run` (where it saw the run end): the agent's
    ps = pippa({**env, "COLUMNS": "200"}, repo, "ps", "--host", h.name)
    assert "ValueError: bad token *** for ***" in ps.stdout, ps.stdout
    for out in (quoted.stdout + quoted.stderr, ps.stdout + ps.stderr):
        assert hf not in out and TOKEN not in out, out


def test_a_rotated_token_stays_redacted_everywhere_pippa_shows_it(
    client_env, ssh_hosts, repo, hook, restore_host
) -> None:
    """A token pushed, printed by a failing job, then removed from .env and from the host: pippa
    remembers its salted print, so ps, why, logs (-f too), run --follow and the alerts still show ***;
    only `logs --raw` gives the log's bytes as they are."""
    h = restore_host(ssh_hosts[1])
    env = {**client_env.env, "COLUMNS": "250"}
    hf = "hf_R0tatedAwayT0ken9xQ"
    (repo / ".env").write_text(f"PIPPA_NOTIFY={hook.url(TOKEN)}\nHF_TOKEN={hf}\n")
    configure(client_env, h.name, 'secrets = ["HF_TOKEN"]\n')
    assert pippa(env, repo, "up", h.name).returncode == 0
    runs = h.home / "pippa" / "runs"
    old = started(
        pippa(
            env, repo, "run", "--host", h.name, "--name", "al-rot", "--cmd", "echo token is $HF_TOKEN; exit 1"
        ).stdout
    )
    hook.wait_for(lambda p: p.fields.get("run") == old)
    (repo / ".env").write_text(f"PIPPA_NOTIFY={hook.url(TOKEN)}\n")  # rotated: gone from .env ...
    up = pippa(env, repo, "up", h.name)
    assert "setup: none (setup = [])" in up.stderr + up.stdout and "up to date" not in up.stdout, up.stdout
    assert hf not in (h.home / ".config" / "pippa" / "secrets.env").read_text()  # ... and from the host
    assert f"token is {hf}" in (runs / old / "output.log").read_text()  # the record itself is the job's
    # a job that prints the old line again after the rotation: its reason, alert and streamed log
    again = pippa(
        env,
        repo,
        "run",
        "--host",
        h.name,
        "--name",
        "al-rot2",
        "--follow",
        "--cmd",
        f"tail -n 1 {runs / old / 'output.log'}; exit 2",
    )
    new = started(again.stdout)
    alert = hook.wait_for(lambda p: p.fields.get("run") == new)
    assert alert.fields["reason"] == "token is ***", alert.fields
    shown = [again.stdout + again.stderr, alert.body.decode()]
    for args in (
        ("ps", "--all", "--host", h.name),
        ("ps", "--all", "--host", h.name, "--json"),
        ("why", old, "--host", h.name),
        ("why", new, "--host", h.name),
        ("logs", old, "--host", h.name),
        ("logs", new, "--host", h.name, "-f"),
    ):
        p = pippa(env, repo, *args)
        shown.append(p.stdout + p.stderr)
    assert "token is ***" in shown[2] and "token is " in shown[6], shown
    for out in shown:
        assert hf not in out, out
    raw = pippa(env, repo, "logs", old, "--host", h.name, "--raw")
    assert f"token is {hf}" in raw.stdout  # --raw: the bytes as they are


def test_no_message_at_all_when_alerts_are_not_configured(
    client_env, ssh_hosts, repo, hook, restore_host
) -> None:
    h = restore_host(ssh_hosts[1])
    env = client_env.env
    configure(client_env, h.name, "secrets = []\n")
    up = pippa(env, repo, "up", h.name, "--json")
    assert up.returncode == 0, up.stderr
    assert json.loads(up.stdout)["alerts"] == {"configured": False, "watcher": None, "watcher_error": None}
    run = pippa(env, repo, "run", "--host", h.name, "--name", "al-none", "--cmd", "true")
    run_dir = h.home / "pippa" / "runs" / started(run.stdout)
    wait_until(lambda: (run_dir / "exit_code").exists())
    # the same call the run's end made, in the foreground: it finds no target and sends nothing
    event = h.run_as_user(
        ["python3", "-S", "-I", str(h.home / PROG), "alerts", "event", "--run-dir", str(run_dir)]
    )
    assert json.loads(event.stdout) == {"sent": False, "configured": False}
    test = pippa(env, repo, "notify-test", h.name)
    assert test.returncode == 1 and "not configured" in test.stderr
    assert hook.posts == []
    assert not (h.home / ".config" / "pippa" / "alerts" / "deliveries.jsonl").exists()


@pytest.mark.parametrize("down", [False, True], ids=["http-500", "down"])
def test_a_failing_webhook_neither_fails_nor_slows_the_run_and_shows_in_hosts(
    client_env, ssh_hosts, repo, hook, restore_host, down: bool
) -> None:
    h = restore_host(ssh_hosts[2])
    env = client_env.env
    hook.status = 500
    url = hook.url(TOKEN)
    if down:  # a port nobody listens on
        with webhook.serve() as gone:
            url = gone.url(TOKEN)
    (repo / ".env").write_text(f"PIPPA_NOTIFY={url}\n")
    configure(client_env, h.name, "secrets = []\n")
    assert pippa(env, repo, "up", h.name).returncode == 0

    test = pippa(env, repo, "notify-test", h.name)
    assert test.returncode == 1
    assert ("error=500" if not down else "the test alert failed") in test.stderr and TOKEN not in test.stderr

    run = pippa(env, repo, "run", "--host", h.name, "--name", "al-slow", "--cmd", "echo done")
    run_id = started(run.stdout)
    run_dir = h.home / "pippa" / "runs" / run_id
    wait_until(lambda: (run_dir / "exit_code").exists())

    def session_gone() -> bool:
        r = h.run_as_user(["tmux", "has-session", "-t", "=al-slow"])
        return r.returncode != 0

    wait_until(session_gone)  # how soon after the exit is bench/bench_alerts.py's measure, not a test's
    assert (run_dir / "exit_code").read_text() == "0\n"
    deliveries = h.home / ".config" / "pippa" / "alerts" / "deliveries.jsonl"
    wait_until(lambda: deliveries.exists() and run_id in deliveries.read_text())
    hosts = pippa(env, repo, "hosts", "--json")
    row = next(r for r in json.loads(hosts.stdout) if r["name"] == h.name)
    assert row["alerts"]["failures"] >= 2 and row["alerts"]["last_failure"]["run_id"] == run_id
    table = pippa(env, repo, "hosts")
    assert "alerts failed: " in table.stdout and TOKEN not in table.stdout + hosts.stdout


def test_idle_gpus_alert_once_and_again_when_busy_and_the_watcher_follows_the_setting(
    client_env, ssh_hosts, repo, hook, restore_host
) -> None:
    h = restore_host(ssh_hosts[3])
    env = client_env.env
    h.install_bin("nvidia-smi", FAKE_SMI)
    (h.home / "gpu-util").write_text("0\n")
    (repo / ".env").write_text(f"PIPPA_NOTIFY={hook.url(TOKEN)}\n")
    configure(
        client_env, h.name, 'secrets = []\nidle_alert = "2s"\nidle_threshold = 5\ncost_per_gpu_hour = 3600\n'
    )
    up = pippa(env, repo, "up", h.name, "--json")
    assert up.returncode == 0, up.stderr
    pid = json.loads(up.stdout)["alerts"]["watcher"]
    assert isinstance(pid, int)
    again = pippa(env, repo, "up", h.name, "--json")
    assert json.loads(again.stdout)["alerts"]["watcher"] == pid, "one watcher per host user"

    idle = hook.wait_for(lambda p: p.fields.get("state") == "idle")
    f = idle.fields
    assert idle.json["title"] == f"pippa: idle GPUs on {h.name}" and f["host"] == h.name
    assert f["reason"].startswith("every GPU under 5% for 0m0")
    # two GPUs at 1 per GPU-second, idle for >= 2 s
    assert float(f["cost so far"].removeprefix("$")) >= 2 * 2 * 0.99
    hosts = json.loads(pippa(env, repo, "hosts", "--json").stdout)
    row = next(r for r in hosts if r["name"] == h.name)
    assert row["alerts"]["watcher"] == pid and row["alerts"]["idle_s"] >= 2

    (h.home / "gpu-util").write_text("80\n")
    busy = hook.wait_for(lambda p: p.fields.get("state") == "busy")
    assert busy.received >= idle.received
    assert sum(1 for p in hook.posts if p.fields.get("state") == "idle") == 1, "alerted once per idle period"

    inv = client_env.personal_inventory
    inv.write_text(inv.read_text().replace('idle_alert = "2s"\n', ""))
    kept = pippa(env, repo, "up", h.name, "--json")  # alerts still configured: it watches GPU faults
    assert json.loads(kept.stdout)["alerts"]["watcher"] == pid
    hosts = json.loads(pippa(env, repo, "hosts", "--json").stdout)
    assert next(r for r in hosts if r["name"] == h.name)["alerts"]["idle_alert_s"] is None
    (repo / ".env").write_text("")  # neither alerts nor idle_alert: the next `up` stops it
    stop = pippa(env, repo, "up", h.name, "--json")
    assert json.loads(stop.stdout)["alerts"]["watcher"] is None
    wait_until(lambda: not Path(f"/proc/{pid}").exists())
    assert TOKEN not in up.stdout + again.stdout + kept.stdout + stop.stdout


def test_ps_and_runs_show_cost_so_far_in_a_cost_column_in_the_hosts_currency(
    client_env, ssh_hosts, repo, restore_host
) -> None:
    h = restore_host(ssh_hosts[0])
    env = client_env.env
    h.install_bin("nvidia-smi", FAKE_SMI)
    configure(client_env, h.name, 'secrets = []\ncost_per_hour = 24\ncurrency = "EUR"\n')
    assert pippa(env, repo, "up", h.name).returncode == 0
    whole = started(pippa(env, repo, "run", "--host", h.name, "--name", "c-all", "--cmd", "sleep 1").stdout)
    # the words a `pippa run --gpus 0` recipe run records (sh -c ignores them: $0 and $1)
    half = started(
        pippa(
            env,
            repo,
            "run",
            "--host",
            h.name,
            "--name",
            "c-half",
            "--cmd",
            "sh -c 'sleep 1' --set launch.gpus=0",
        ).stdout
    )
    runs_dir = h.home / "pippa" / "runs"
    wait_until(lambda: all((runs_dir / r / "exit_code").exists() for r in (whole, half)))
    ps = pippa(env, repo, "ps", "--json", "--host", h.name)
    recs = {r["run_id"]: r for r in json.loads(ps.stdout)[h.name]["runs"]}
    for rid, share in ((whole, 1.0), (half, 0.5)):
        t = recs[rid]["duration_s"]
        assert t >= 1 and recs[rid]["cost"] == pytest.approx(24 * t / 3600 * share, abs=1e-3)
    for verb, width in (("ps", "80"), ("runs", "120")):  # a COST column in the host's currency
        table = pippa({**env, "COLUMNS": width}, repo, verb, "--host", h.name).stdout.splitlines()
        assert "COST" in table[0].split(), table
        text = "\n".join(table)
        assert f"€{recs[whole]['cost']:.2f}" in text and f"({recs[whole]['cost']:.2f})" not in text, table
    runs = pippa(env, repo, "runs", "--json", "--host", h.name)
    by_id = {r["run_id"]: r for r in json.loads(runs.stdout)["runs"]}
    assert by_id[half]["cost"] == pytest.approx(recs[half]["cost"], abs=1e-3)
    assert by_id[half]["currency"] == "EUR"

    inv = client_env.personal_inventory
    inv.write_text(inv.read_text().replace("cost_per_hour = 24\n", ""))
    ps = pippa(env, repo, "ps", "--json", "--host", h.name)
    assert all(r["cost"] is None for r in json.loads(ps.stdout)[h.name]["runs"]), "no rate, no cost"
    assert "COST" not in pippa({**env, "COLUMNS": "80"}, repo, "ps", "--host", h.name).stdout


def test_wait_notify_also_sends_to_pippa_notify_set_on_the_laptop(client_env, ssh_hosts, repo, hook) -> None:
    h = ssh_hosts[0]
    env = {**client_env.env, "PIPPA_NOTIFY": hook.url(TOKEN)}
    run = pippa(client_env.env, repo, "run", "--host", h.name, "--name", "al-wait", "--cmd", "exit 4")
    run_id = started(run.stdout)
    waited = pippa(env, repo, "wait", run_id, "--host", h.name, "--notify")
    assert waited.returncode == 4, waited.stderr
    post = hook.wait_for(lambda p: run_id in p.json["message"])
    assert post.json["title"] == "pippa" and "exit 4" in post.json["message"]
    assert TOKEN not in post.body.decode() + waited.stdout + waited.stderr


def test_a_run_ending_on_a_nearly_full_disk_also_says_so(tmp_path, small_fs, hook) -> None:
    """The host program itself, on this machine (the SSH path is the tests above): a run on a file
    system with under 5% free sends its own message and a ``disk low`` one."""
    home = tmp_path / "home"
    alerts = home / ".config" / "pippa" / "alerts"
    alerts.mkdir(parents=True)
    prog = install(home)
    (alerts / "config.json").write_text(json.dumps({"host": "hx", "python": [sys.executable]}))
    (home / ".config" / "pippa" / "secrets.env").write_text(f"PIPPA_NOTIFY='{hook.url(TOKEN)}'\n")
    run_dir = small_fs / "runs" / "r-disk"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"host": "hx", "command": "true"}))
    (run_dir / "exit_code").write_text("0\n")
    (small_fs / "fill").write_bytes(b"\0" * (4 * 1024 * 1024 - 64 * 1024))  # leaves < 5% of 4 MiB
    env = {**os.environ, "HOME": str(home)}
    argv = ["python3", "-S", "-I", str(prog), "alerts", "event", "--run-dir", str(run_dir)]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and json.loads(p.stdout)["sent"] is True, p.stderr
    low = hook.wait_for(lambda x: x.fields.get("state") == "disk low")
    assert low.json["title"] == f"pippa: disk low {small_fs / 'runs'} on hx"
    assert low.fields["reason"].endswith(f"% free on the file system of {small_fs / 'runs'}")
    assert float(low.fields["reason"].split("%")[0]) < 5
    hook.wait_for(lambda x: x.fields.get("run") == "r-disk")


PREVIOUS = Path(__file__).parents[1] / "fixtures" / "previous"  # files the previous version put on hosts


def test_up_replaces_the_alerts_program_a_previous_up_installed_and_stops_its_watcher(
    client_env, ssh_hosts, repo, hook, restore_host
) -> None:
    """Upgrade in place: the previous `pippa up` copied hostalerts.py to the host and started its idle
    watcher; the next `pippa up` leaves neither running beside the host program, and a run the previous
    version started still reaches PIPPA_NOTIFY at its end through the old path."""
    h = restore_host(ssh_hosts[2])
    env = client_env.env
    h.install_bin("nvidia-smi", FAKE_SMI)
    (h.home / "gpu-util").write_text("80\n")  # busy: the watchers alert nothing
    alerts = h.home / ".config" / "pippa" / "alerts"
    legacy = alerts / "hostalerts.py"
    assert h.run_as_user(["mkdir", "-p", "-m", "700", str(alerts)]).returncode == 0
    for name, text in (
        ("hostalerts.py", (PREVIOUS / "hostalerts.py").read_text()),
        ("config.json", json.dumps({"host": h.name, "idle_alert_s": 3600, "remote_dir": "~/pippa"})),
    ):
        (alerts / name).write_text(text)
        os.chown(alerts / name, h.uid, -1)
    started = h.run_as_user(["python3", "-S", str(legacy), "watch-ensure"])
    old = json.loads(started.stdout)["watcher"]
    assert isinstance(old, int), started

    (repo / ".env").write_text(f"PIPPA_NOTIFY={hook.url(TOKEN)}\n")
    configure(client_env, h.name, 'secrets = []\nidle_alert = "1h"\n')
    up = pippa(env, repo, "up", h.name, "--json")
    assert up.returncode == 0, up.stderr
    new = json.loads(up.stdout)["alerts"]["watcher"]
    wait_until(lambda: not Path(f"/proc/{old}").exists())
    assert isinstance(new, int) and new != old
    argv = Path(f"/proc/{new}/cmdline").read_bytes().split(b"\0")
    assert argv[argv.index(b"alerts") - 1].endswith(b".pyz") and b"watch" in argv
    assert "hostalerts" not in legacy.read_text().split("\n", 1)[1], "the previous program is gone"

    run_dir = h.home / "runs-previous" / "r-previous"
    run_dir.mkdir(parents=True)
    try:
        (run_dir / "run.json").write_text(json.dumps({"host": h.name, "command": "false"}))
        (run_dir / "exit_code").write_text("1\n")
        # the previous version's run-end line, as a run it started calls it
        event = h.run_as_user(["python3", "-S", str(legacy), "event", "--run-dir", str(run_dir)])
        assert json.loads(event.stdout)["sent"] is True, event
        msg = hook.wait_for(lambda x: x.fields.get("run") == "r-previous")
        assert msg.fields["state"] == "failed"
    finally:
        subprocess.run(["rm", "-rf", str(run_dir.parent)], check=True)


def test_pippa_up_gives_the_watcher_the_host_entrys_env_and_restarts_it_when_that_changes(
    client_env, ssh_hosts, repo, restore_host
) -> None:
    h = restore_host(ssh_hosts[3])
    env = client_env.env

    def environ(pid: int) -> dict[str, str]:
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        return dict(x.decode().split("=", 1) for x in raw if b"=" in x)

    def up() -> int:
        p = pippa(env, repo, "up", h.name, "--json")
        assert p.returncode == 0, p.stderr
        pid = json.loads(p.stdout)["alerts"]["watcher"]
        assert isinstance(pid, int), p.stdout
        return pid

    configure(client_env, h.name, 'secrets = []\nidle_alert = "1h"\nenv = { CUDA_VISIBLE_DEVICES = "0" }\n')
    first = up()
    assert environ(first)["CUDA_VISIBLE_DEVICES"] == "0"
    assert up() == first  # the same entry: the same watcher
    inv = client_env.personal_inventory
    inv.write_text(inv.read_text().replace('CUDA_VISIBLE_DEVICES = "0"', 'CUDA_VISIBLE_DEVICES = "1"'))
    second = up()
    assert second != first and environ(second)["CUDA_VISIBLE_DEVICES"] == "1"
    wait_until(lambda: not Path(f"/proc/{first}").exists())
