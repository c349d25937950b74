"""The host-key policy, once, through both ways a command reaches a host: the connection keeper and
a connection of its own (``--no-reuse``, the fallback, ``pippa forward``). Both run the same asyncssh
connect (``transport.sshconn``), so each case must hold on both: known_hosts enforced, an unknown key
refused with its fingerprint until ``--accept-new`` records it, a changed key always refused (also
when a kept connection reconnects), hashed entries matched, the ProxyJump hop's key checked, a host
with several keys of which known_hosts holds one accepted; a refused client key is an auth failure."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from conftest import PIPPA, ClientEnv
from test_keeper import kept  # noqa: F401 (the fixture: reuse on, a private runtime dir)

from pippa_ops.errors import AuthFailed, ExitCode, HostKeyChanged, HostKeyUnknown
from pippa_ops.hosts.connect import connect
from pippa_ops.hosts.endpoint import endpoint
from pippa_ops.hosts.inventory import resolve
from pippa_ops.transport import reuse
from pippa_ops.transport.base import Transport
from pippa_ops.transport.keeper.client import KeeperTransport
from pippa_ops.transport.ssh import SSHTransport

pytestmark = pytest.mark.ssh
WAYS = ("keeper", "direct")


@pytest.fixture(params=WAYS)
def way(request: pytest.FixtureRequest, ssh_env: ClientEnv) -> str:
    """``keeper``: reuse on and a keeper started (the ``kept`` fixture); ``direct``: no keeper."""
    if request.param == "keeper":
        request.getfixturevalue("kept")
        assert reuse.start() is not None
    return str(request.param)


def _open(way: str, name: str, *, accept_new: bool = False) -> Transport:
    if way == "keeper":
        t = connect(name, accept_new=accept_new)[1]
        assert isinstance(t, KeeperTransport)
        return t
    return SSHTransport(endpoint(resolve(name)), accept_new=accept_new)


def _answered_by(way: str, t: Transport) -> None:
    """The answer (a refusal too) came from the way under test: the keeper's, not a direct fallback."""
    assert way == "direct" or (isinstance(t, KeeperTransport) and t.relayed)


def _fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


def _without(kh: Path, address: str, port: int, extra: tuple[str, ...] = ()) -> None:
    """known_hosts with no line for ``[address]:port``, plus ``extra`` lines."""
    mine = f"[{address}]:{port} "
    kept_lines = [ln for ln in kh.read_text().splitlines() if not ln.startswith(mine)]
    kh.write_text("".join(ln + "\n" for ln in [*kept_lines, *extra]))


def _other_key(tmp_path: Path, address: str, port: int) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    kind, b64 = (tmp_path / "k.pub").read_text().split()[:2]
    return f"[{address}]:{port} {kind} {b64}"


def _pippa(env: ClientEnv, way: str, *args: str) -> subprocess.CompletedProcess[str]:
    flags = [] if way == "keeper" else ["--no-reuse"]
    return subprocess.run([PIPPA, *flags, *args], env=env.env, capture_output=True, text=True, timeout=90)


def test_an_unknown_key_is_refused_with_its_fingerprint_until_accept_new_records_it(way, ssh_env, ssh_hosts):
    h = ssh_hosts[2]
    kh = ssh_env.known_hosts
    _without(kh, h.address, h.port)
    with pytest.raises(HostKeyUnknown, match="--accept-new") as err, _open(way, h.name) as t:
        t.run("true")
    _answered_by(way, t)
    assert _fingerprint(h.state_dir / "host_key.pub") in str(err.value)
    assert h.address not in kh.read_text()  # nothing recorded without the flag
    with _open(way, h.name, accept_new=True) as t:
        assert t.run("echo ok", check=True).stdout == "ok\n"
    _answered_by(way, t)
    assert f"[{h.address}]:{h.port} ssh-ed25519 " in kh.read_text()
    with _open(way, h.name) as t:  # now known: no flag needed
        assert t.run("echo ok", check=True).stdout == "ok\n"
    assert kh.read_text().count(h.address) == 1


def test_a_changed_key_is_always_refused_also_when_a_connection_reconnects(way, ssh_env, ssh_hosts, tmp_path):
    h = ssh_hosts[3]
    with _open(way, h.name) as t:  # connected once with the right key (the keeper keeps it)
        t.run("true", check=True)
    _without(ssh_env.known_hosts, h.address, h.port, (_other_key(tmp_path, h.address, h.port),))
    h.drop()  # a kept connection dies: the keeper must connect again, and check the key again
    h.start()
    time.sleep(0.3)
    for accept_new in (False, True):
        with pytest.raises(HostKeyChanged, match="CHANGED"), _open(way, h.name, accept_new=accept_new) as t:
            t.run("true")
        _answered_by(way, t)
    r = _pippa(ssh_env, way, "ps", "--host", h.name)
    assert r.returncode == int(ExitCode.HOST_KEY) and "HOST KEY CHANGED" in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr


def test_a_hashed_known_hosts_entry_is_matched(way, ssh_env, ssh_hosts):
    h = ssh_hosts[1]
    kh = ssh_env.known_hosts
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(kh)], check=True, capture_output=True)
    assert h.address not in kh.read_text()  # every name hashed (HashKnownHosts)
    with _open(way, h.name) as t:
        assert t.run("echo ok", check=True).stdout == "ok\n"
    _answered_by(way, t)
    assert h.address not in kh.read_text()  # found by its hashed name: nothing recorded


def test_the_proxy_jump_hops_key_is_checked_too(way, ssh_env, ssh_hosts, tmp_path):
    target, hop = ssh_hosts[0], ssh_hosts[1]
    inventory = ssh_env.personal_inventory
    entry = inventory.read_text().split(f"[hosts.{target.name}]\n", 1)[1].split("\n\n", 1)[0]
    inventory.write_text(inventory.read_text() + f'\n[hosts.tj]\n{entry}\nproxy_jump = "{hop.name}"\n')
    with _open(way, "tj") as t:
        assert t.run("whoami", check=True).stdout.strip() == target.user
    _without(ssh_env.known_hosts, hop.address, hop.port, (_other_key(tmp_path, hop.address, hop.port),))
    hop.drop()  # the hop's kept connection goes: the next connect goes through the hop again
    hop.start()
    time.sleep(0.3)
    with pytest.raises(HostKeyChanged, match=rf"{hop.name}: HOST KEY CHANGED"), _open(way, "tj") as t:
        t.run("true")
    _answered_by(way, t)


def test_a_host_with_several_keys_is_accepted_by_the_one_known_hosts_holds(way, ssh_env, ssh_hosts, tmp_path):
    """A host offers ed25519, ECDSA and RSA keys, and known_hosts often holds one of them: the client
    asks for the known one first (as OpenSSH does), so the host is not refused as changed."""
    h = ssh_hosts[1]
    config = h.state_dir / "sshd_config"
    original = config.read_text()
    lines = {"ed25519": h.host_key_line}
    for kind in ("rsa", "ecdsa"):
        key = tmp_path / f"host_key_{kind}"
        subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(key)], check=True)
        key_type, b64 = Path(f"{key}.pub").read_text().split()[:2]
        lines[kind] = f"[{h.address}]:{h.port} {key_type} {b64}"
        config.write_text(config.read_text() + f"\nHostKey {key}\n")
    kh = ssh_env.known_hosts
    try:
        for kind, line in lines.items():
            _without(kh, h.address, h.port, (line,))
            h.drop()  # a kept connection goes: the next command connects, and checks, again
            h.start()
            time.sleep(0.3)
            with _open(way, h.name) as t:
                assert t.run("echo ok", check=True).stdout == "ok\n", kind
            _answered_by(way, t)
            assert kh.read_text().count(h.address) == 1  # nothing recorded
    finally:
        config.write_text(original)
        h.drop()
        h.start()


def test_a_client_key_the_host_refuses_is_an_auth_failure(way, ssh_env, ssh_hosts):
    key = ssh_env.home / ".ssh" / "id_ed25519"
    key.unlink()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    with pytest.raises(AuthFailed, match="authentication failed"), _open(way, ssh_hosts[0].name) as t:
        t.run("true")
    _answered_by(way, t)
