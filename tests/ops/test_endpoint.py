"""The Endpoint: a host resolved once (ssh config, ProxyJump hops) before any transport sees it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pippa_ops.errors import UnknownHost
from pippa_ops.hosts.connect import ssh_argv
from pippa_ops.hosts.endpoint import endpoint
from pippa_ops.hosts.inventory import resolve
from pippa_ops.transport.endpoint import Endpoint


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    team = tmp_path / "team.toml"
    team.write_text(
        '[hosts.gpu]\naddress = "10.0.0.9"\nuser = "ubuntu"\nproxy_jump = "alice@mid:2022,box"\n'
        '[hosts.mid]\naddress = "10.0.0.5"\nidentity_file = "~/.ssh/mid"\n'
    )
    monkeypatch.setenv("PIPPA_INVENTORY", str(team))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text(
        "Host box\n  HostName 10.1.2.3\n  User bob\n  Port 2200\n  IdentityFile ~/.ssh/box\n"
        "  ProxyJump bastion\n\nHost bastion\n  HostName 10.9.9.9\n\n"
        "Host loop1\n  ProxyJump loop2\n\nHost loop2\n  ProxyJump loop1\n"
    )
    return tmp_path


def test_every_hop_of_a_proxy_jump_chain_is_resolved_with_its_own_hops(home: Path) -> None:
    ep = endpoint(resolve("gpu"))
    assert (ep.name, ep.hostname, ep.port, ep.user, ep.proxy_jump) == (
        "gpu",
        "10.0.0.9",
        22,
        "ubuntu",
        "alice@mid:2022,box",
    )
    box = ep.jump
    assert box is not None  # the hop next to the target: box, with the hops before it (mid) ...
    assert (box.name, box.hostname, box.port, box.user, box.identity_files) == (
        "box",
        "10.1.2.3",
        2200,
        "bob",
        (str(home / ".ssh" / "box"),),
    )
    mid = box.jump
    assert mid is not None
    assert (mid.name, mid.hostname, mid.port, mid.user) == ("mid", "10.0.0.5", 2022, "alice")
    assert mid.identity_files == (str(home / ".ssh" / "mid"),) and mid.jump is None
    # ... and box's own ProxyJump from ~/.ssh/config is overridden by the chain (as with ``ssh -J``).
    assert box.proxy_jump == "alice@mid:2022"


def test_a_hop_named_in_ssh_config_alone_brings_its_own_proxy_jump(home: Path) -> None:
    box = endpoint(resolve("box"))
    assert box.jump is not None and (box.jump.name, box.jump.hostname) == ("bastion", "10.9.9.9")


def test_a_proxy_jump_loop_is_refused_not_followed_forever(home: Path) -> None:
    with pytest.raises(UnknownHost, match="hops"):
        endpoint(resolve("loop1"))


def test_ssh_argv_keeps_the_chain_as_written_for_openssh(home: Path) -> None:
    argv = ssh_argv(resolve("gpu"), tty=False)
    assert argv[argv.index("-J") + 1] == "alice@mid:2022,box" and argv[-2:] == ["--", "10.0.0.9"]


def test_an_endpoint_crosses_to_the_keeper_as_json_unchanged(home: Path) -> None:
    ep = endpoint(resolve("gpu"))
    assert Endpoint.from_json(json.loads(json.dumps(ep.as_json()))) == ep


@pytest.mark.parametrize(
    "bad",
    [
        None,
        {"name": "h", "hostname": "x", "port": "22", "user": None, "identity_files": [], "proxy_jump": None},
        {"name": "h", "hostname": "", "port": 22, "user": None, "identity_files": [], "proxy_jump": None},
        {"name": "h", "hostname": "x", "port": 22, "user": None, "identity_files": "k", "proxy_jump": None},
        {
            "name": "h",
            "hostname": "x",
            "port": 22,
            "user": None,
            "identity_files": [],
            "proxy_jump": None,
            "jump": {"name": "j"},
        },
    ],
)
def test_the_keeper_refuses_an_endpoint_it_cannot_read(bad: object) -> None:
    with pytest.raises(ValueError):
        Endpoint.from_json(bad)
