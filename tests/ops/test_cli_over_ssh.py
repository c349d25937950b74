"""The first hour on real loopback OpenSSH hosts and real tmux (issue 26): `pippa run` fails loudly."""

from __future__ import annotations

import getpass
import json
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import PIPPA, ClientEnv
from projects import make_project
from sshd import SSHHost

from pippa_ops.runs.records.shortid import short_ids

pytestmark = pytest.mark.ssh
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    (r / "recipes").mkdir(parents=True)
    (r / "recipes" / "tiny.toml").write_text((REPO / "recipes" / "tiny.toml").read_text())
    make_project(r)
    return r


@pytest.fixture
def host(client_env: ClientEnv, ssh_hosts: list[SSHHost]) -> Iterator[SSHHost]:
    """Host t1 with a remote_dir of this test's own (removed after it)."""
    h = ssh_hosts[0]
    remote = f"first-hour-{uuid.uuid4().hex[:8]}"
    _set_entry(client_env, h, f'remote_dir = "~/{remote}"')
    yield h
    h.run_as_user(["rm", "-rf", str(h.home / remote)])


def _set_entry(client_env: ClientEnv, h: SSHHost, *lines: str) -> None:
    """Replace/add fields of host ``h``'s entry in the client's hosts.toml."""
    text = client_env.personal_inventory.read_text()
    head = f"[hosts.{h.name}]\n"
    for line in lines:
        key = line.split("=")[0].strip()
        block = text.split(head, 1)[1].split("\n\n", 1)[0]
        kept = [x for x in block.splitlines() if not x.startswith(key + " ")]
        text = text.replace(head + block, head + "\n".join([*kept, line]))
    client_env.personal_inventory.write_text(text)


def pippa(
    env: dict[str, str], repo: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PIPPA, *args], cwd=repo, env=env, input=stdin, capture_output=True, text=True, timeout=120
    )


def start(
    env: dict[str, str], repo: Path, h: SSHHost, name: str, cmd: str, *more: str
) -> subprocess.CompletedProcess[str]:
    """``pippa run --host H --name NAME --cmd CMD ...``"""
    return pippa(env, repo, "run", "--host", h.name, "--name", name, "--cmd", cmd, *more)


def _remote_dir(client_env: ClientEnv, h: SSHHost) -> Path:
    text = client_env.personal_inventory.read_text().split(f"[hosts.{h.name}]\n", 1)[1]
    match = re.search(r'remote_dir = "~/([^"]+)"', text.split("\n\n", 1)[0])
    assert match
    return h.home / match.group(1)


def _no_session(h: SSHHost, name: str) -> bool:
    return h.run_as_user(["tmux", "has-session", "-t", f"={name}"]).returncode != 0


def test_run_with_a_missing_python_names_it_and_pippa_up_and_starts_nothing(client_env, host, repo) -> None:
    _set_entry(client_env, host, 'python = "/opt/no-such/bin/python"')
    p = pippa(client_env.env, repo, "run", "tiny", "--host", host.name, "--name", "fh-nopy")
    assert p.returncode == 7, p.stderr
    assert p.stdout == "" and len(p.stderr.splitlines()) == 1
    assert "/opt/no-such/bin/python is not there" in p.stderr and f"`pippa up {host.name}`" in p.stderr
    runs = _remote_dir(client_env, host) / "runs"
    assert not runs.exists() or not list(runs.iterdir())
    assert _no_session(host, "fh-nopy")


def test_run_with_a_python_that_cannot_import_the_trainer_says_so(client_env, host, repo) -> None:
    _set_entry(client_env, host, f'python = "{host.python} -S"')  # no site-packages: no training_core
    p = pippa(client_env.env, repo, "run", "tiny", "--host", host.name, "--name", "fh-noimp")
    assert p.returncode == 7, p.stderr
    assert len(p.stderr.splitlines()) == 1
    assert "cannot import training_core (ModuleNotFoundError: No module named 'training_core')" in p.stderr
    assert f"`pippa up {host.name}`" in p.stderr and _no_session(host, "fh-noimp")


def test_a_run_that_dies_at_once_is_reported_with_its_reason_and_a_failure_code(
    client_env, host, repo
) -> None:
    cmd = "python3 -c 'import no_such_module_x'"
    p = start(client_env.env, repo, host, "fh-dies", cmd, "--wait", "60")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert p.stdout.startswith("started ")  # it did start: the id to look it up with
    (line,) = p.stderr.splitlines()
    assert re.search(r"failed \(exit 1\) after \d+s: ", line), line
    assert "ModuleNotFoundError: No module named 'no_such_module_x'" in line
    assert f"`pippa up {host.name}`" in line

    quiet = start(client_env.env, repo, host, "fh-nw", cmd, "--no-wait")
    assert quiet.returncode == 0 and quiet.stderr == ""  # --no-wait: started, nothing watched


def test_a_healthy_run_is_watched_for_the_default_few_seconds_then_returns(client_env, host, repo) -> None:
    env = {k: v for k, v in client_env.env.items() if k != "PIPPA_RUN_WAIT_S"}  # the default watch
    p = pippa(env, repo, "run", "--host", host.name, "--name", "fh-ok", "--cmd", "sleep 60")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("started ") and not _no_session(host, "fh-ok")
    host.run_as_user(["tmux", "kill-session", "-t", "=fh-ok"])


def _ps_json(env: dict[str, str], repo: Path, h: SSHHost, *args: str) -> list[dict[str, object]]:
    p = pippa(env, repo, "ps", "--json", "--host", h.name, *args)
    assert p.returncode == 0, p.stderr
    return list(json.loads(p.stdout)[h.name]["runs"])


def _wait_for(predicate: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _started(out: str) -> str:
    return next(line.split()[1] for line in out.splitlines() if line.startswith("started "))


def test_ps_and_runs_fit_80_columns_with_short_ids_that_every_verb_accepts(client_env, host, repo) -> None:
    env = client_env.env
    long_cmd = "echo output-of-b; echo this command line is much too long for any eighty column table; exit 3"
    a = _started(start(env, repo, host, "fh-a", "sleep 120").stdout)
    b = _started(start(env, repo, host, "fh-b", long_cmd).stdout)
    _wait_for(lambda: any(r["run_id"] == b and r["state"] == "failed" for r in _ps_json(env, repo, host)))
    short = short_ids([str(r["run_id"]) for r in _ps_json(env, repo, host)])
    assert len(short[a]) < len(a) and len(short[b]) < len(b)

    narrow = {**env, "COLUMNS": "80"}
    p = pippa(narrow, repo, "ps", "--host", host.name)
    assert p.returncode == 0, p.stderr
    table = [ln for ln in p.stdout.splitlines() if not ln.startswith(f"{host.name} {short[b]}:")]
    assert all(len(ln) <= 80 for ln in table), p.stdout
    assert a not in p.stdout and f" {short[a]} " in p.stdout and f" {short[b]} " in p.stdout
    assert f"{host.name} {short[b]}: failed (exit 3): " in p.stdout  # why it failed, whole, by its short id
    wide = pippa(narrow, repo, "ps", "--host", host.name, "-v")
    assert a in wide.stdout and b in wide.stdout  # -v: whole ids
    runs = pippa(narrow, repo, "runs", "--host", host.name)
    assert runs.returncode == 0 and all(len(ln) <= 80 for ln in runs.stdout.splitlines()), runs.stdout

    logs = pippa(env, repo, "logs", short[b])  # found on its host without --host
    assert logs.returncode == 0 and logs.stdout.startswith("output-of-b\n"), logs.stderr
    stop = pippa(env, repo, "stop", short[a], "--host", host.name, "--grace", "10")
    assert stop.returncode == 0 and f"run {a}" in stop.stdout, stop.stderr


def test_ps_shows_running_and_the_last_ten_ended_and_prune_rm_never_touch_a_running_run(
    client_env, host, repo
) -> None:
    env = client_env.env
    live = _started(start(env, repo, host, "fh-live", "sleep 900").stdout)  # outlives 12 launches under load
    ended = [_started(start(env, repo, host, f"fh-e{i}", f"exit {i % 2}").stdout) for i in range(12)]
    _wait_for(lambda: sum(r["state"] in ("finished", "failed") for r in _ps_json(env, repo, host)) == 12)

    text = pippa(env, repo, "ps", "--host", host.name, "-v").stdout
    assert live in text and all(e in text for e in ended[2:]) and not any(e in text for e in ended[:2])
    assert "(2 older ended runs not shown: --all or --last N)" in text
    assert all(e in pippa(env, repo, "ps", "--host", host.name, "-v", "--all").stdout for e in ended)
    assert [r["run_id"] for r in _ps_json(env, repo, host, "--last", "1")] == [live, ended[-1]]
    assert {r["run_id"] for r in _ps_json(env, repo, host, "--state", "failed")} == set(ended[1::2])

    refused = pippa(env, repo, "rm", live, "--host", host.name, "--yes")
    assert refused.returncode == 8 and len(refused.stderr.splitlines()) == 1
    assert "pippa stop" in refused.stderr
    no = pippa(env, repo, "rm", ended[0], "--host", host.name, stdin="n\n")
    assert no.returncode == 1 and ended[0] in no.stdout and "nothing removed" in no.stdout
    runs_dir = _remote_dir(client_env, host) / "runs"
    assert (runs_dir / ended[0]).is_dir()
    yes = pippa(env, repo, "rm", ended[0], "--host", host.name, stdin="y\n")
    assert yes.returncode == 0 and "removed 1 run" in yes.stdout and not (runs_dir / ended[0]).exists()

    host.run_as_user(["mkdir", "-p", str(runs_dir / ended[1] / "checkpoints" / "checkpoint-5")])
    prune = ("prune", "--older-than", "0s", "--host", host.name, "--keep-checkpoints")
    dry = pippa(env, repo, *prune, "--dry-run")
    assert dry.returncode == 0 and "would remove 10 runs" in dry.stdout and ended[1] not in dry.stdout
    assert all((runs_dir / e).is_dir() for e in ended[1:])  # a dry run removes nothing
    done = pippa(env, repo, *prune, "--yes")
    assert done.returncode == 0 and "removed 10 runs" in done.stdout, done.stdout
    kept = sorted(p.name for p in runs_dir.iterdir() if not p.name.startswith("."))  # .launch.lock stays
    assert kept == sorted([live, ended[1]])  # running + checkpointed
    host.run_as_user(["tmux", "kill-session", "-t", "=fh-live"])


def test_hosts_fits_80_columns_and_prints_an_unknown_keys_fingerprint_whole(
    client_env, ssh_hosts, repo
) -> None:
    h = ssh_hosts[1]
    kh = client_env.known_hosts
    kh.write_text("".join(ln for ln in kh.read_text().splitlines(True) if ln.strip() != h.host_key_line))
    p = pippa({**client_env.env, "COLUMNS": "80"}, repo, "hosts")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    below = [ln for ln in lines if ln.startswith((f"{h.name}: ", f"{h.ssh_alias}: "))]
    assert all(len(ln) <= 80 for ln in lines if ln not in below), p.stdout
    assert lines[0].split()[:2] == ["HOST", "ADDRESS"] and lines[0].split()[-1] == "STATUS"
    err = next(ln for ln in below if ln.startswith(f"{h.name}: "))
    assert not err.startswith(f"{h.name}: {h.name}:")
    assert re.search(r"SHA256:[A-Za-z0-9+/]{43}\)", err), err  # the fingerprint, whole
    assert f"`pippa up {h.name} --accept-new` records it" in err


def _read_until(proc: subprocess.Popen[str], text: str, timeout: float = 60) -> str:
    """What ``proc`` wrote on stdout until ``text`` appeared (fails after ``timeout``)."""
    import selectors

    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    seen, deadline = "", time.monotonic() + timeout
    while text not in seen:
        assert time.monotonic() < deadline, f"no {text!r} in {seen!r}"
        if sel.select(timeout=0.5):
            line = proc.stdout.readline()
            assert line, f"stdout ended before {text!r}: {seen!r}"
            seen += line
    return seen


def test_ctrl_c_stops_following_or_waiting_and_says_the_run_goes_on(client_env, host, repo, tmp_path) -> None:
    env = client_env.env
    run_id = _started(start(env, repo, host, "fh-cc", "echo tick; sleep 120").stdout)
    goes_on = (
        f"; {run_id} goes on in session fh-cc on {host.name} (`pippa stop fh-cc --host {host.name}` stops it)"
    )
    follow = subprocess.Popen(
        [PIPPA, "logs", run_id, "--host", host.name, "-f"],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _read_until(follow, "tick\n")
    follow.send_signal(signal.SIGINT)
    _, err = follow.communicate(timeout=60)
    assert follow.returncode == 130 and err == f"pippa: stopped following{goes_on}\n"

    log = tmp_path / "wait.log"  # (its notes: it says when it has found the run)
    wait = subprocess.Popen(
        [PIPPA, "wait", run_id, "--host", host.name, "--log", str(log)],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(lambda: log.exists() and f"watching {run_id}" in log.read_text())
    wait.send_signal(signal.SIGINT)
    _, err = wait.communicate(timeout=60)
    assert wait.returncode == 130 and err == f"pippa: stopped waiting{goes_on}\n"
    (rec,) = [r for r in _ps_json(env, repo, host) if r["run_id"] == run_id]
    assert rec["state"] == "running"  # the truth: it goes on

    stop = pippa(env, repo, "stop", "fh-cc", "--host", host.name, "--grace", "10")
    assert stop.returncode == 0 and "Ctrl-C to " + run_id in stop.stderr
    again = pippa(env, repo, "stop", run_id, "--host", host.name)
    assert again.returncode == 0 and "Ctrl-C" not in again.stderr
    assert f"run {run_id} had already ended: stopped (exit 130); nothing to stop" in again.stdout
    missing = pippa(env, repo, "stop", "no-such-run", "--host", host.name)
    assert missing.returncode == 9 and len(missing.stderr.splitlines()) == 1
    assert "Ctrl-C" not in missing.stderr


@pytest.mark.slow
def test_resume_without_a_checkpoint_says_it_restarts_from_step_0_and_takes_set(
    client_env, host, repo
) -> None:
    env = client_env.env
    p = pippa(
        env,
        repo,
        "run",
        "tiny",
        "--host",
        host.name,
        "--name",
        "fh-res",
        "--no-wait",
        "--set",
        'model.name="no-such-org/no-such-model"',
        "--set",
        "train.max_steps=2",
    )
    assert p.returncode == 0, p.stderr
    run_id = _started(p.stdout)

    def state() -> object:
        return next(x["state"] for x in _ps_json(env, repo, host) if x["run_id"] == run_id)

    _wait_for(lambda: state() == "failed", timeout=240)  # the model cannot be found
    r = pippa(env, repo, "resume", run_id, "--host", host.name, "--set", 'model.name="tiny"', "--follow")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr)
    assert r.stdout.startswith(f"resumed {run_id}: no checkpoint: restarting from step 0\n")
    (rec,) = [x for x in _ps_json(env, repo, host) if x["run_id"] == run_id]
    assert (rec["state_text"], rec["last_step"]) == ("finished (exit 0)", 2)


def test_hosts_reports_a_python_setting_that_names_a_missing_program(client_env, host, repo) -> None:
    _set_entry(client_env, host, 'python = "~/no-such-venv/bin/python"')
    p = pippa({**client_env.env, "COLUMNS": "80"}, repo, "hosts")
    assert p.returncode == 0, p.stderr
    row = next(ln for ln in p.stdout.splitlines() if ln.startswith(f"{host.name} "))
    assert row.endswith(", no python")
    assert (
        f"{host.name}: its python ~/no-such-venv/bin/python is not there: run `pippa up {host.name}`"
        in p.stdout
    )
    others = [ln for ln in p.stdout.splitlines() if ln.startswith(("t2 ", "t3 ", "local "))]
    assert others and not any("no python" in ln for ln in others)  # their python (the tests' venv) is there


def test_accept_new_says_which_key_it_recorded_where(client_env, host, repo) -> None:
    from pippa_ops.hosts.knownhosts import fingerprint

    kh = client_env.known_hosts
    kh.write_text("".join(ln for ln in kh.read_text().splitlines(True) if ln.strip() != host.host_key_line))
    refused = pippa(client_env.env, repo, "ps", "--host", host.name)
    fp = fingerprint(host.host_key_line.split()[2])
    assert refused.returncode == 6 and fp in refused.stderr
    assert f"`pippa up {host.name} --accept-new` records it" in refused.stderr
    p = pippa(client_env.env, repo, "sync", host.name, "--accept-new")
    assert p.returncode == 0, p.stderr
    name = host.host_key_line.split()[0]
    assert p.stderr == f"pippa: {host.name}: recorded ssh-ed25519 key {fp} for {name} in {kh}\n"
    again = pippa(client_env.env, repo, "sync", host.name, "--accept-new")
    assert again.returncode == 0 and again.stderr == ""  # nothing new recorded, nothing said


def test_user_at_address_colon_port_reaches_the_host_and_auth_failure_names_the_user(
    client_env, ssh_hosts, repo
) -> None:
    h = ssh_hosts[2]
    p = pippa(client_env.env, repo, "ps", "--json", "--host", f"{h.user}@{h.address}:{h.port}")
    assert p.returncode == 0, p.stderr
    assert "runs" in json.loads(p.stdout)[f"{h.user}@{h.address}:{h.port}"]
    bad = pippa(client_env.env, repo, "ps", "--host", f"nobody-here@{h.address}:{h.port}")
    assert bad.returncode == 5, bad.stderr
    assert f"authentication failed for nobody-here@{h.address}" in bad.stderr
    anon = pippa(client_env.env, repo, "ps", "--host", f"{h.address}:{h.port}")  # no user: the local one
    assert anon.returncode == 5, anon.stderr
    assert f"authentication failed for {getpass.getuser()}@{h.address} (no user set)" in anon.stderr


def test_the_background_watcher_keeps_reconnect_notes_out_of_the_terminal(
    client_env, host, repo, tmp_path
) -> None:
    """What `pippa run --notify` starts (`pippa wait ... --notify --log FILE`): across a dropped
    connection, stderr (the user's terminal) gets only the bell and the final line; the notes go to
    the log."""
    env, flag = client_env.env, f"go-{uuid.uuid4().hex[:6]}"
    cmd = f"while [ ! -e ~/{flag} ]; do sleep 0.2; done; exit 2"
    run_id = _started(start(env, repo, host, "fh-watch", cmd).stdout)
    log = tmp_path / "watch.log"
    watcher = subprocess.Popen(
        [PIPPA, "wait", run_id, "--host", host.name, "--notify", "--log", str(log)],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: log.exists() and f"watching {run_id}" in log.read_text())  # found, now followed
        host.drop()  # the connection goes away, as when the laptop sleeps
        _wait_for(lambda: log.exists() and "reconnecting" in log.read_text())
        host.start()
        host.run_as_user(["touch", str(host.home / flag)])
        _, err = watcher.communicate(timeout=120)
    finally:
        if watcher.poll() is None:
            watcher.kill()
        host.run_as_user(["rm", "-f", str(host.home / flag)])
    assert watcher.returncode == 2
    assert err.startswith(f"\apippa: {host.name}: run {run_id} (") and err.count("\n") == 1, err
    assert "failed (exit 2)" in err and "reconnecting" not in err


def test_logs_without_a_name_shows_the_newest_run_and_tail_keeps_the_last_lines(
    client_env, host, repo
) -> None:
    env = client_env.env
    start(env, repo, host, "fh-old", "echo old")
    new = _started(start(env, repo, host, "fh-new", "for i in 1 2 3 4 5; do echo line$i; done").stdout)
    _wait_for(lambda: any(r["run_id"] == new and r["state"] == "finished" for r in _ps_json(env, repo, host)))
    whole = pippa(env, repo, "logs", "--host", host.name)
    assert whole.returncode == 0 and whole.stdout == "line1\nline2\nline3\nline4\nline5\n", whole.stderr
    last = pippa(env, repo, "logs", new, "--tail", "2")
    assert last.returncode == 0 and last.stdout == "line4\nline5\n"

    live = _started(start(env, repo, host, "fh-tail", "echo a; echo b; echo c; sleep 4; echo d").stdout)
    _wait_for(lambda: pippa(env, repo, "logs", live, "--host", host.name).stdout == "a\nb\nc\n")
    followed = pippa(env, repo, "logs", live, "--host", host.name, "--tail", "1", "-f")
    assert followed.returncode == 0 and followed.stdout in ("c\nd\n", "d\n")  # -f: the tail, then what comes


def test_sync_reports_real_bytes_on_a_dry_run_delete_removes_emptied_dirs_and_a_terminal_sees_progress(
    client_env, host, repo
) -> None:
    env = client_env.env
    (repo / "docs" / "deep").mkdir(parents=True)
    (repo / "docs" / "deep" / "x.md").write_text("x" * 3000)
    (repo / "big.bin").write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    dry = pippa(env, repo, "sync", host.name, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    files = [p for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts]
    assert json.loads(dry.stdout)["send_size"] == sum(p.stat().st_size for p in files)
    assert "(1.0 MB)" in pippa(env, repo, "sync", host.name, "--dry-run").stdout

    # On a terminal (script(1) gives it one): a byte-progress line while it sends, then the summary.
    shown = subprocess.run(
        ["script", "-qec", f"{PIPPA} sync {host.name}", "/dev/null"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stdout
    assert "sending" in shown.stdout and "on the wire" in shown.stdout
    remote = _remote_dir(client_env, host)
    assert (remote / "docs" / "deep" / "x.md").is_file()

    subprocess.run(["git", "rm", "-qf", "docs/deep/x.md"], cwd=repo, check=True)
    gone = pippa(env, repo, "sync", host.name, "--delete")
    assert gone.returncode == 0 and "deleted 1" in gone.stdout, gone.stdout
    assert not (remote / "docs").exists() and (remote / "big.bin").is_file()  # emptied dirs go too


def test_wait_on_a_terminal_shows_one_status_line_with_step_of_total(client_env, host, repo) -> None:
    import shlex

    header = json.dumps({"type": "header", "config": {"config": {"train": {"max_steps": 10}}}})
    step = json.dumps({"type": "step", "step": 3, "reward/mean": 0.5})
    metrics = '"$PIPPA_RUN_DIR/metrics.jsonl"'
    cmd = f'printf "%s\\n%s\\n" {shlex.quote(header)} {shlex.quote(step)} > {metrics}; sleep 6'
    run_id = _started(start(client_env.env, repo, host, "fh-status", cmd).stdout)
    wait = f"{PIPPA} wait {run_id} --host {host.name}"
    shown = subprocess.run(
        ["script", "-qec", wait, "/dev/null"],
        cwd=repo,
        env=client_env.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stdout
    short = short_ids([run_id])[run_id]
    assert f"\x1b[K{short} on {host.name}: step 3/10 · running · 0m0" in shown.stdout  # (\r read as \n)
    assert f"{host.name}: run {run_id} " in shown.stdout and "finished (exit 0)" in shown.stdout


@pytest.mark.slow
def test_a_stop_that_saved_names_the_checkpoint_and_resume_continues_from_it(client_env, host, repo) -> None:
    env = client_env.env
    p = pippa(
        env,
        repo,
        "run",
        "tiny",
        "--host",
        host.name,
        "--name",
        "fh-save",
        "--no-wait",
        "--set",
        "train.max_steps=100000",
        "--set",
        "eval.interval=100000",
    )
    assert p.returncode == 0, p.stderr
    run_id = _started(p.stdout)

    def rec() -> dict[str, object]:
        return next(x for x in _ps_json(env, repo, host) if x["run_id"] == run_id)

    _wait_for(lambda: rec()["last_step"] is not None, timeout=240)  # it trains
    stop = pippa(env, repo, "stop", run_id, "--host", host.name, "--grace", "120")
    assert stop.returncode == 0, stop.stderr
    saved = rf"checkpoint: runs/{run_id}/checkpoints/(checkpoint-\d+) \(`pippa resume {run_id}`"
    match = re.search(saved, stop.stdout)
    assert match, stop.stdout
    r = pippa(env, repo, "resume", run_id, "--host", host.name)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"resumed {run_id} from runs/{run_id}/checkpoints/{match[1]}\n")
    _wait_for(lambda: rec()["state"] == "running", timeout=120)
    assert pippa(env, repo, "stop", run_id, "--host", host.name, "--grace", "120").returncode == 0


def test_logs_follow_of_a_run_that_has_printed_nothing_yet_waits_for_its_output(
    client_env, host, repo
) -> None:
    """``pippa logs RUN -f`` right after the start of a run that prints nothing for a while follows it
    to its end (its output, then its exit code), as for a run that has output already."""
    env = client_env.env
    run_id = _started(
        pippa(env, repo, "run", "--host", host.name, "--cmd", "sleep 3; echo late; exit 4").stdout
    )
    r = pippa(env, repo, "logs", run_id, "--host", host.name, "-f")
    assert (r.returncode, r.stdout, r.stderr) == (4, "late\n", "")
