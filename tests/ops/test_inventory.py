"""Inventory loading and host-name resolution (no SSH needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pippa_ops.errors import UnknownHost, UsageError
from pippa_ops.hosts.inventory import DEFAULT_REMOTE_DIR, DEFAULT_SECRETS, load_inventory, resolve


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    team = tmp_path / "team.toml"
    team.write_text(
        '[hosts.h100-a]\naddress = "192.222.52.59"\nuser = "ubuntu"\nsetup = "make"\n'
        '[hosts.h100-b]\naddress = "10.0.0.2"\nremote_dir = "/data/pippa"\nenv = {HF_HOME = "/data/hf"}\n'
    )
    monkeypatch.setenv("PIPPA_INVENTORY", str(team))
    (tmp_path / ".config" / "pippa").mkdir(parents=True)
    (tmp_path / ".config" / "pippa" / "hosts.toml").write_text(
        '[hosts.h100-a]\nidentity_file = "~/.ssh/lab"\nsecrets = ["HF_TOKEN"]\n'
    )
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text(
        "Host box\n  HostName 10.1.2.3\n  User alice\n  Port 2200\n  IdentityFile ~/.ssh/box\n"
        "  ProxyJump bastion\n\nHost *.lab\n  User bob\n"
    )
    return tmp_path


def test_personal_inventory_wins_field_by_field_over_team(home: Path) -> None:
    a = resolve("h100-a")
    assert (a.address, a.user, a.identity_file, a.secrets, a.setup) == (
        "192.222.52.59",
        "ubuntu",
        "~/.ssh/lab",
        ("HF_TOKEN",),
        ("make",),
    )
    b = load_inventory()["h100-b"]
    assert (b.remote_dir, b.env, b.secrets, b.python) == (
        "/data/pippa",
        {"HF_HOME": "/data/hf"},
        DEFAULT_SECRETS,
        None,
    )


def test_ssh_config_alias_brings_hostname_user_port_identity_and_jump(home: Path) -> None:
    s = resolve("box")
    assert (s.address, s.user, s.port, s.proxy_jump, s.source) == (
        "10.1.2.3",
        "alice",
        2200,
        "bastion",
        "ssh_config",
    )
    assert s.identity_file is not None and s.identity_file.endswith("/.ssh/box")
    assert s.remote_dir == DEFAULT_REMOTE_DIR


def test_bare_address_and_user_at_address(home: Path) -> None:
    assert (resolve("192.222.52.60").address, resolve("192.222.52.60").user) == ("192.222.52.60", None)
    s = resolve("ubuntu@gpu.example.com")
    assert (s.address, s.user, s.source) == ("gpu.example.com", "ubuntu", "address")


def test_local_uses_the_repo_root_as_remote_dir(home: Path) -> None:
    s = resolve("local")
    assert s.is_local and (Path(s.remote_dir) / "pyproject.toml").is_file()


@pytest.mark.parametrize("name", ["nope", "x;touch /tmp/pwned", "a@b c"])
def test_unknown_or_hostile_names_are_refused_listing_known_hosts(home: Path, name: str) -> None:
    with pytest.raises(UnknownHost, match="known: local, h100-a, h100-b, box"):
        resolve(name)


def test_unknown_inventory_key_is_one_clear_error(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = home / "bad.toml"
    bad.write_text('[hosts.x]\naddres = "1.2.3.4"\n')
    monkeypatch.setenv("PIPPA_INVENTORY", str(bad))
    with pytest.raises(UsageError, match="unknown key 'addres'"):
        resolve("x")


def test_a_key_from_a_newer_pippa_is_one_warning_and_every_host_still_works(home: Path) -> None:
    """A teammate's newer pippa wrote a setting this version does not know: a near miss of a known key is
    still the one-line error with its suggestion; anything else is one warning naming it and the entry."""
    import json
    import subprocess
    import sys

    team = home / "team.toml"
    team.write_text(team.read_text().replace('user = "ubuntu"\n', 'user = "ubuntu"\npreemptible = true\n'))
    env = {"HOME": str(home), "PIPPA_INVENTORY": str(team), "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    cli = [sys.executable, "-m", "pippa_ops", "hosts", "--json"]
    p = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert {"h100-a", "h100-b"} <= {h["name"] for h in json.loads(p.stdout)}
    warning = (
        f"pippa: warning: {team}: hosts.h100-a: unknown key 'preemptible' ignored (a newer pippa's setting?)"
    )
    assert p.stderr.splitlines() == [warning], p.stderr
    team.write_text(team.read_text().replace("preemptible = true", 'adress = "1.2.3.4"'))
    p = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    assert "hosts.h100-a: unknown key 'adress' (did you mean 'address'?" in p.stderr


def test_the_users_ssh_alias_beats_a_team_entry_of_the_same_name_for_connection_fields(
    home: Path,
) -> None:
    cfg = home / ".ssh" / "config"
    cfg.write_text("Host h100-a\n  HostName 10.9.9.9\n  User me\n  Port 2222\n\n" + cfg.read_text())
    a = resolve("h100-a")
    # address/user/port: ~/.ssh/config over pippa.toml; identity_file: hosts.toml over both;
    # setup (not a connection field): pippa.toml, as nothing personal sets it.
    assert (a.address, a.user, a.port, a.identity_file, a.setup) == (
        "10.9.9.9",
        "me",
        2222,
        "~/.ssh/lab",
        ("make",),
    )
    assert a.origins == {
        "address": "ssh_config",
        "user": "ssh_config",
        "port": "ssh_config",
        "identity_file": "hosts.toml",
        "secrets": "hosts.toml",
        "setup": "pippa.toml",
    }
    (home / ".config" / "pippa" / "hosts.toml").write_text('[hosts.h100-a]\nuser = "mine"\n')
    assert resolve("h100-a").user == "mine"  # the personal file beats the ssh alias


def test_unknown_host_lists_each_known_name_once(home: Path) -> None:
    (home / ".ssh" / "config").write_text("Host h100-a\n  HostName 10.9.9.9\n")
    with pytest.raises(UnknownHost) as e:
        resolve("nope")
    assert str(e.value).endswith("known: local, h100-a, h100-b")


def test_default_host_comes_from_the_personal_file_else_local(home: Path) -> None:
    from pippa_ops.hosts.inventory import default_host

    assert default_host() == "local"
    personal = home / ".config" / "pippa" / "hosts.toml"
    personal.write_text('default_host = "h100-a"\n' + personal.read_text())
    assert default_host() == "h100-a" and resolve("h100-a").address == "192.222.52.59"
