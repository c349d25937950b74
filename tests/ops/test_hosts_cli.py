"""The real `pippa` CLI in a subprocess: hosts --json with a host down; one-line errors, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PIPPA
from projects import make_project

from pippa_ops.errors import ExitCode

pytestmark = pytest.mark.ssh


def pippa(client_env, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PIPPA, *args], env=client_env.env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    (r / "a.txt").write_text("a\n")
    make_project(r)
    return r


def _one_line_error(p: subprocess.CompletedProcess[str], code: ExitCode) -> str:
    assert p.returncode == code, p.stderr
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pippa: "), p.stderr
    return lines[0]


def test_hosts_json_reports_every_host_with_one_down(client_env, ssh_hosts):
    ssh_hosts[1].stop()
    p = pippa(client_env, "hosts", "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["name"]: r for r in json.loads(p.stdout)}
    aliases = {"ssh-t1", "ssh-t2", "ssh-t3", "ssh-t4"}  # ~/.ssh/config aliases are listed too
    assert set(rows) == {"local", "t1", "t2", "t3", "t4", *aliases}
    assert {rows[a]["source"] for a in aliases} == {"ssh_config"} and not rows["ssh-t2"]["reachable"]
    assert rows["t1"]["origins"]["address"] == "hosts.toml"
    assert [rows[n]["reachable"] for n in ("local", "t1", "t2", "t3", "t4")] == [
        True,
        True,
        False,
        True,
        True,
    ]
    assert "connection refused" in rows["t2"]["error"]
    assert rows["t3"]["address"] == ssh_hosts[2].address and rows["t3"]["port"] == ssh_hosts[2].port


def test_unknown_host_key_refused_then_accept_new_records_it(client_env, ssh_hosts, repo):
    h = ssh_hosts[2]
    kh = client_env.known_hosts
    kh.write_text("".join(f"{line}\n" for line in kh.read_text().splitlines() if h.address not in line))
    listed = pippa(client_env, "hosts", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {r["name"]: r["down_as"] for r in json.loads(listed.stdout)}[h.name] == "key unknown"
    shown = pippa(client_env, "hosts")  # it answered: not "down"
    assert shown.returncode == 0, shown.stderr
    line = [ln for ln in shown.stdout.splitlines() if ln.startswith(f"{h.name} ")]
    assert len(line) == 1 and line[0].endswith("key unknown"), (shown.stdout, shown.stderr)
    refused = pippa(client_env, "sync", h.name, cwd=repo)
    line = _one_line_error(refused, ExitCode.HOST_KEY)
    assert "SHA256:" in line and "--accept-new" in line
    assert "sending" not in refused.stdout + refused.stderr  # it was printed before the refusal
    ok = pippa(client_env, "sync", h.name, "--accept-new", cwd=repo)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("sending ")  # once the host answered
    assert f"[{h.address}]:{h.port} ssh-ed25519" in kh.read_text()


def test_changed_host_key_refused_even_with_accept_new(client_env, ssh_hosts, repo):
    h = ssh_hosts[3]
    other = ssh_hosts[0].host_key_line.split()[1:]
    kh = client_env.known_hosts
    kh.write_text(
        "".join(
            f"[{h.address}]:{h.port} {' '.join(other)}\n" if h.address in line else f"{line}\n"
            for line in kh.read_text().splitlines()
        )
    )
    line = _one_line_error(pippa(client_env, "sync", h.name, "--accept-new", cwd=repo), ExitCode.HOST_KEY)
    assert "CHANGED" in line


def test_auth_failure_unreachable_and_unknown_host_are_one_line_each(client_env, ssh_hosts, repo):
    h = ssh_hosts[0]
    # An ssh alias with a user the host does not know: its key is refused.
    cfg = client_env.home / ".ssh" / "config"
    cfg.write_text(
        cfg.read_text() + f"Host wronguser\n  HostName {h.address}\n  Port {h.port}\n  User nobody\n"
    )
    line = _one_line_error(pippa(client_env, "sync", "wronguser", cwd=repo), ExitCode.AUTH)
    assert "authentication failed for nobody@" in line
    ssh_hosts[1].stop()
    line = _one_line_error(pippa(client_env, "sync", ssh_hosts[1].name, cwd=repo), ExitCode.UNREACHABLE)
    assert "connection refused" in line
    line = _one_line_error(pippa(client_env, "sync", f"me@{h.address}", cwd=repo), ExitCode.UNREACHABLE)
    assert f"cannot reach {h.address}:22" in line  # a bare address: port 22, where nothing listens
    line = _one_line_error(pippa(client_env, "sync", "no-such-host", cwd=repo), ExitCode.UNKNOWN_HOST)
    assert "known: local, t1, t2, t3, t4" in line


def test_sync_cli_dry_run_lists_files_and_json_reports(client_env, ssh_hosts, repo):
    dry = pippa(client_env, "sync", "t1", "--dry-run", cwd=repo)
    assert dry.returncode == 0 and "send a.txt" in dry.stdout
    done = pippa(client_env, "sync", "t1", "--json", cwd=repo)
    assert json.loads(done.stdout)["sent"] == ["a.txt"]
    assert (ssh_hosts[0].home / "pippa" / "a.txt").read_text() == "a\n"


def test_ps_fails_for_a_named_host_that_fails_and_still_lists_the_others(client_env, ssh_hosts, repo):
    p = pippa(client_env, "ps", "--host", "local", "--host", "no-such-host", "--json", cwd=repo)
    assert p.returncode == ExitCode.UNKNOWN_HOST, p.stderr
    table = json.loads(p.stdout)
    assert "runs" in table["local"] and "unknown host" in table["no-such-host"]["error"]
    ssh_hosts[1].stop()
    p = pippa(client_env, "ps", "--host", ssh_hosts[1].name, cwd=repo)
    assert p.returncode == ExitCode.UNREACHABLE and "unreachable" in p.stdout
    assert pippa(client_env, "ps", "--host", ssh_hosts[0].name, cwd=repo).returncode == 0


def test_hosts_explain_says_where_each_field_came_from(client_env, ssh_hosts):
    p = pippa(client_env, "hosts", "--explain")
    assert p.returncode == 0, p.stderr
    assert "address from hosts.toml" in p.stdout and "address from ssh_config" in p.stdout


def test_gpus_over_several_hosts_in_one_process_one_down(client_env, ssh_hosts):
    sys.path.insert(0, str(Path(__file__).parents[1] / "dash"))
    import fake_smi

    for h in ssh_hosts[:3]:
        h.install_bin("nvidia-smi", fake_smi.script(gpus=2, python=h.python))
    try:
        ssh_hosts[1].stop()
        p = pippa(client_env, "gpus", "t1", "t2", "t3", "--json")
        assert p.returncode == ExitCode.UNREACHABLE, p.stderr
        rows = {r["host"]: r for r in json.loads(p.stdout)}
        assert [len(rows[n]["gpus"]) for n in ("t1", "t3")] == [2, 2]
        assert "connection refused" in rows["t2"]["error"]
        p = pippa(client_env, "gpus", "t1", "t3")
        assert p.returncode == 0 and "t1" in p.stdout and "t3" in p.stdout, p.stderr
        p = pippa(client_env, "gpus", "--json")  # none named: every inventory host
        assert {r["host"] for r in json.loads(p.stdout)} == {"t1", "t2", "t3", "t4"}
    finally:
        for h in ssh_hosts[:3]:
            (h.home / "bin" / "nvidia-smi").unlink()
