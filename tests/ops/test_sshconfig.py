"""~/.ssh/config as pippa reads it (asyncssh's reader, ``transport/sshconfig.py``) against OpenSSH's
own answer (``ssh -G``): the same HostName, User, Port, IdentityFiles and ProxyJump for each name,
through ``Include``, ``Match host``/``Match exec`` and first-value-wins, and the same ``Host`` names."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pippa_ops.transport.sshconfig import SSHConfig, read_ssh_config, ssh_aliases

FIELDS = ("hostname", "user", "port", "identityfile", "proxyjump")


def _openssh(config: Path, name: str) -> dict[str, list[str]]:
    """What ``ssh -G`` says of ``name``: FIELDS only, every value as text (IdentityFile repeats)."""
    out = subprocess.run(
        ["ssh", "-G", "-F", str(config), name], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    found: dict[str, list[str]] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        if key in FIELDS:
            found.setdefault(key, []).append(value)
    return found


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's ssh")
def test_every_name_resolves_as_openssh_resolves_it(tmp_path: Path) -> None:
    ran = tmp_path / "match-exec-ran"
    (tmp_path / "inc.conf").write_text("Host inc-*\n  User incuser\n  Port 2300\n")
    config = tmp_path / "config"
    config.write_text(
        # the tests' own shapes (tests/sshd.py's aliases, test_endpoint's hops), then the harder rules
        "Host t1-alias\n  HostName 127.0.0.2\n  Port 2201\n  User pippa-t1\n"
        f"  IdentityFile {tmp_path}/id_ed25519\n  IdentitiesOnly yes\n\n"
        "Host box\n  HostName 10.1.2.3\n  User bob\n  Port 2200\n"
        f"  IdentityFile {tmp_path}/box\n  ProxyJump bastion\n\n"
        f"Host bastion\n  HostName 10.9.9.9\n\nInclude {tmp_path}/inc.conf\n\n"
        f'Match host 10.1.2.* exec "touch {ran}"\n  IdentityFile {tmp_path}/second\n  User ignored\n\n'
        'Match exec "false"\n  User never\n\n'
        f"Host *\n  User fallback\n  IdentityFile {tmp_path}/default\n  Port 22\n"
    )
    ours = SSHConfig(config)
    for name in ("t1-alias", "box", "bastion", "inc-a", "10.1.2.7", "elsewhere"):
        want = _openssh(config, name)
        got = ours.lookup(name)
        have = {k: [str(v) for v in got[k]] if k == "identityfile" else [str(got[k])] for k in got}
        assert have == want, name
    assert ran.exists()  # Match exec ran its command
    assert ssh_aliases(ours) == ["bastion", "box", "t1-alias"]  # patterns left out
    assert "inc-*" in ours.get_hostnames()  # an included file's Host line is read


def test_a_relative_include_is_read_from_the_users_ssh_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    ssh = tmp_path / ".ssh"
    (ssh / "conf.d").mkdir(parents=True)
    (ssh / "conf.d" / "gpu.conf").write_text("Host gpu1\n  HostName 10.0.0.1\n  Port 2222\n")
    (ssh / "config").write_text("Include conf.d/*.conf\n\nHost laptop\n  HostName 127.0.0.1\n")
    config = read_ssh_config()
    assert ssh_aliases(config) == ["gpu1", "laptop"]
    assert config.lookup("gpu1") == {"hostname": "10.0.0.1", "port": 2222}


def test_no_file_answers_the_name_itself(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    config = read_ssh_config()
    assert config.get_hostnames() == set() and config.lookup("h") == {"hostname": "h"}
