"""`pippa ssh` and `pippa forward` through real OpenSSH hosts (tests/sshd.py): the same host resolution,
known_hosts policy and identity as every verb; a port on the host reached through a local forward."""

from __future__ import annotations

import functools
import http.server
import os
import pty
import re
import secrets
import select
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import PIPPA

pytestmark = pytest.mark.ssh


def pippa(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PIPPA, *args], env=env, capture_output=True, text=True, timeout=timeout)


def test_ssh_runs_one_command_with_pippas_keys_and_refuses_an_unknown_host_key(ssh_hosts, client_env) -> None:
    env, h = client_env.env, ssh_hosts[0]
    p = pippa(env, "ssh", h.name, "--", "echo hi; whoami; exit 3")  # one word: a shell line
    assert (p.returncode, p.stdout) == (3, f"hi\n{h.user}\n"), p.stderr
    p = pippa(env, "ssh", h.ssh_alias, "--", "printf", "%s|", "a b", "$HOME")  # several: exact words
    assert (p.returncode, p.stdout) == (0, "a b|$HOME|"), p.stderr
    client_env.known_hosts.write_text("")
    p = pippa(env, "ssh", h.name, "--", "true")
    assert p.returncode == 255 and "Host key verification failed" in p.stderr


def test_ssh_without_a_command_is_an_interactive_shell(ssh_hosts, client_env) -> None:
    h = ssh_hosts[0]
    pid, fd = pty.fork()
    if pid == 0:  # the child: pippa ssh on a real terminal
        os.execve(PIPPA, [PIPPA, "ssh", h.name], client_env.env)
    out = b""
    try:
        deadline = time.monotonic() + 30
        os.write(fd, b"echo $((6*7))-$(tty | cut -c1-8); exit\n")
        while time.monotonic() < deadline and b"42-/dev/pts" not in out:
            if select.select([fd], [], [], 1)[0]:
                try:
                    out += os.read(fd, 4096)
                except OSError:
                    break
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert b"42-/dev/pts" in out, out  # the host's shell ran it, on a terminal of its own
    assert os.waitstatus_to_exitcode(status) == 0


def test_forward_reaches_a_port_on_the_host_until_ctrl_c(ssh_hosts, client_env, tmp_path: Path) -> None:
    token = secrets.token_hex(16)
    (tmp_path / "hello.txt").write_text(token)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    proc = subprocess.Popen(
        [PIPPA, "forward", ssh_hosts[0].name, f"{port}:0"],
        env=client_env.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.match(rf"forwarding 127\.0\.0\.1:(\d+) -> {ssh_hosts[0].name}:localhost:{port}$", line.strip())
        assert m, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        local = int(m.group(1))
        assert local != port  # LOCALPORT 0: a free port of its own
        for _ in range(2):  # two connections, one channel each
            with urllib.request.urlopen(f"http://127.0.0.1:{local}/hello.txt", timeout=20) as r:
                assert r.read().decode() == token
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0 and "stopped forwarding" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("args", "why"), [(["abc"], "bad port 'abc'"), (["70000"], "ports are 1-65535")])
def test_forward_refuses_a_bad_port_in_one_line(args: list[str], why: str, tmp_path: Path) -> None:
    p = subprocess.run([PIPPA, "forward", "local", *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and why in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_ssh_uses_pippas_own_key_where_home_is_not_the_passwd_home(ssh_hosts, client_env, tmp_path) -> None:
    """The tests' HOME is not root's passwd home, as in containers and CI: the system ssh gets the key
    pippa found (-i), not whatever the passwd home holds; a resolved one with IdentitiesOnly."""
    env, h = client_env.env, ssh_hosts[1]
    inv = client_env.personal_inventory
    entry = f'[hosts.noid]\naddress = "{h.address}"\nport = {h.port}\nuser = "{h.user}"\n'  # no identity_file
    inv.write_text(inv.read_text() + entry)
    p = pippa(env, "ssh", "noid", "--", "echo hi")
    assert (p.returncode, p.stdout) == (0, "hi\n"), p.stderr

    start = [PIPPA, "run", "--host", h.name, "--cmd", "sleep 30", "--no-wait", "--name"]
    run = subprocess.run(
        [*start, "short"],
        env={**env, "COLUMNS": "80"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert all(len(line) <= 80 for line in run.stdout.splitlines()), run.stdout  # no raw ssh line
    assert "pippa attach short" in run.stdout and "ssh " not in run.stdout
    verbose = subprocess.run(
        [*start, "short2", "-v"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    ssh_line = next(ln for ln in verbose.stdout.splitlines() if ln.strip().startswith("ssh:"))
    assert "IdentitiesOnly=yes" in ssh_line and "-i " in ssh_line, ssh_line
    for session in ("short", "short2"):
        h.run_as_user(["tmux", "kill-session", "-t", f"={session}"])
