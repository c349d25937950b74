"""Real OpenSSH servers on loopback for the test suite (and the benchmarks).

Each host is its own ``sshd -D`` (so one can be stopped and restarted mid-test) listening on its own
127.0.0.x address and a free port, with its own ed25519 host key, and its own throw-away Unix user
(own HOME, so its own tmux server). A client directory holds the key authorized on every host user,
``~/.ssh/config`` aliases, ``known_hosts`` and a generated personal inventory
(``~/.config/pippa/hosts.toml``), so pippa runs against these hosts with ``HOME`` pointed there.

Users and homes are unique per pytest session (several engineers run suites at once on one machine);
``World.close`` removes them, and a later session removes what a crashed one left behind.
Needs root and /usr/sbin/sshd; ``why_unavailable()`` says why not, for a skip.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"
BASE = Path("/tmp/pippa-sshd")
START_TIMEOUT_S = 10.0


def why_unavailable() -> str | None:
    """A reason to skip the SSH tests, or None when they can run."""
    if os.geteuid() != 0:
        return "loopback SSH hosts need root (they create Unix users and run sshd)"
    if not os.access(SSHD, os.X_OK):
        return f"{SSHD} missing: install openssh-server (scripts/setup --test-deps)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen missing: install openssh-client"
    return None


def venv_python() -> str:
    """The interpreter of the venv running the tests."""
    return str(Path(sys.prefix) / "bin" / "python")


def _reachable_by_others(path: Path) -> bool:
    """Whether a user who is not the owner can reach ``path``: x on every ancestor directory."""
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents] if p.is_dir())


def _link_tree(src: Path, dst: Path, skip: frozenset[str] = frozenset()) -> None:
    """Copy a read-only tree as hard links (instant, no extra disk), as copies across file systems."""

    def link_or_copy(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(
        src,
        dst,
        symlinks=True,
        copy_function=link_or_copy,
        ignore=lambda d, names: [n for n in names if n in skip and Path(d) == src],
    )


def reachable_python(dest: Path) -> str:
    """The tests' venv as an interpreter that any Unix user can run (test host users, the hostile
    suite's throw-away user), without changing the mode of any system path.

    A pyenv interpreter lives under /root (mode 0700 on a new machine). Where the venv and its base
    interpreter are already reachable, that is the venv's own python; otherwise ``dest`` gets a
    copy of the base interpreter (its standard library hard-linked, the binary copied with its
    RUNPATH made relative by patchelf, since it names the base's ``lib/``) and a venv around it whose
    site-packages is the tests' venv's (linked, or hard-linked where that is unreachable too).
    ``dest`` must itself be reachable (a directory under /tmp, mode 0755); its owner removes it.
    """
    venv, base = Path(sys.prefix), Path(sys.base_prefix)
    python = Path(venv_python())
    if _reachable_by_others(venv) and _reachable_by_others(Path(os.path.realpath(python)).parent):
        return str(python)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    real_bin = Path(os.path.realpath(sys.executable))
    dest.mkdir(mode=0o755, parents=True, exist_ok=True)
    copy = dest / "base"
    (copy / "bin").mkdir(parents=True)
    (copy / "lib").mkdir()
    for lib in base.glob("lib/libpython*"):
        shutil.copy2(lib, copy / "lib" / lib.name, follow_symlinks=False)
    _link_tree(base / "lib" / ver, copy / "lib" / ver, frozenset({"site-packages", "test", "idlelib"}))
    exe = copy / "bin" / ver
    shutil.copy2(real_bin, exe)  # a real copy: patchelf edits it in place
    patchelf = shutil.which("patchelf")
    needs_runpath = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
    if str(base) in needs_runpath:
        if patchelf is None:
            raise RuntimeError(
                "patchelf missing: install it (scripts/setup --test-deps) to give test users "
                f"a copy of {real_bin}, whose directory they cannot reach"
            )
        subprocess.run([patchelf, "--set-rpath", "$ORIGIN/../lib", str(exe)], check=True, capture_output=True)
    env = dest / "venv"
    (env / "bin").mkdir(parents=True)
    (env / "lib" / ver).mkdir(parents=True)
    (env / "pyvenv.cfg").write_text(
        f"home = {copy / 'bin'}\ninclude-system-site-packages = false\n"
        f"version = {'.'.join(map(str, sys.version_info[:3]))}\n"
    )
    for name in ("python", "python3", ver):
        (env / "bin" / name).symlink_to(exe)
    for tool in ("py-spy",):  # what `uv sync` puts beside a host's python (the train extra's binaries)
        if (venv / "bin" / tool).is_file():
            shutil.copy2(venv / "bin" / tool, env / "bin" / tool)
    site = venv / "lib" / ver / "site-packages"
    if _reachable_by_others(site):
        (env / "lib" / ver / "site-packages").symlink_to(site)
    else:
        _link_tree(site, env / "lib" / ver / "site-packages")
    for d in [dest, *[p for p in dest.rglob("*") if p.is_dir() and not p.is_symlink()]]:
        os.chmod(d, 0o755)
    return str(env / "bin" / "python")


def _free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def _keygen(path: Path, comment: str) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return _pub(path)


def _pub(path: Path) -> str:
    return Path(f"{path}.pub").read_text().strip()


@dataclass
class SSHHost:
    """One loopback host: its sshd, its user, and how the client reaches it."""

    name: str  # inventory entry in the generated hosts.toml (python set): pass this to pippa
    ssh_alias: str  # a ~/.ssh/config alias for the same host (HostName/Port/User/IdentityFile)
    address: str
    port: int
    user: str
    home: Path
    state_dir: Path  # sshd config, host key, pid, log
    python: str
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def alias(self) -> str:
        return self.name

    @property
    def host_key_line(self) -> str:
        """The known_hosts line for this host (``[addr]:port keytype base64``)."""
        kind, b64 = _pub(self.state_dir / "host_key").split()[:2]
        return f"[{self.address}]:{self.port} {kind} {b64}"

    @property
    def uid(self) -> int:
        return pwd.getpwnam(self.user).pw_uid

    def start(self) -> None:
        """Start (or restart) this host's sshd and wait until it accepts connections."""
        if self._proc is not None and self._proc.poll() is None:
            return
        log = open(self.state_dir / "sshd.log", "ab")  # noqa: SIM115 - handed to the child
        self._proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.state_dir / "sshd_config")],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                log_text = (self.state_dir / "sshd.log").read_text()
                raise RuntimeError(f"sshd for {self.name} exited: {log_text}")
            with contextlib.suppress(OSError), socket.create_connection((self.address, self.port), 0.5):
                return
            time.sleep(0.05)
        raise RuntimeError(f"sshd for {self.name} not listening after {START_TIMEOUT_S}s")

    def stop(self) -> None:
        """Stop the listener: new connections are refused (established sessions live on)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def drop(self) -> None:
        """Go away as a host does (network gone, laptop asleep): stop the listener AND kill the
        established sessions (the per-connection sshd processes below the listener).

        The listener is frozen first, so no connection is accepted or forked while its tree is read;
        the tree is then frozen level by level (a monitor may be forking its session process) until
        no new sshd process shows up, and only then killed. Read once and killed later, a connection
        made in between once survived the drop."""
        if self._proc is None:
            return
        listener = self._proc.pid
        os.kill(listener, signal.SIGSTOP)
        frozen: set[int] = set()
        while True:
            tree = _sshd_descendants(listener)
            new = tree - frozen
            if not new:
                break
            for pid in new:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            frozen |= new
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._proc.kill()  # a stopped process takes SIGKILL (not SIGTERM) at once
        self._proc.wait()
        self._proc = None

    def install_bin(self, name: str, script_text: str) -> Path:
        """Put an executable on this user's PATH, for non-interactive ssh commands too."""
        path = self.home / "bin" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(script_text)
        os.chmod(path, 0o755)
        os.chown(path.parent, self.uid, -1)
        os.chown(path, self.uid, -1)
        return path

    def run_as_user(self, argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        """Run a command on the host as its user, without SSH (for test setup and inspection)."""
        return subprocess.run(
            ["runuser", "-u", self.user, "--", "env", f"HOME={self.home}", f"PATH={self.path_env}", *argv],
            capture_output=True,
            text=True,
            cwd=self.home,
            **kw,  # type: ignore[call-overload]
        )

    @property
    def path_env(self) -> str:
        return f"{self.home}/bin:/usr/local/bin:/usr/bin:/bin"


def give_back_home(h: SSHHost) -> list[Path]:
    """Whatever in the host user's home is not the user's (a test writes as root) becomes the user's
    again; returns what it changed. The product runs as the user and cannot make such files: a
    directory left root-owned (``~/.config/pippa``) made a later test's `pippa up` fail to write its
    secrets file there."""
    uid = h.uid
    changed = []
    for top, dirs, files in os.walk(h.home):
        for name in [*dirs, *files]:
            path = Path(top) / name
            with contextlib.suppress(FileNotFoundError):
                if path.lstat().st_uid != uid:
                    os.lchown(path, uid, -1)
                    changed.append(path)
    return changed


@dataclass
class World:
    """The hosts of one pytest session plus the template client directory."""

    token: str
    root: Path
    hosts: list[SSHHost]
    client_template: Path  # copy it per test: tests change known_hosts

    def close(self) -> None:
        for h in self.hosts:
            h.stop()
        _remove_users([h.user for h in self.hosts])
        shutil.rmtree(self.root, ignore_errors=True)


def _kill_user_processes(uid: int) -> None:
    """End the processes our throw-away test user left (tmux servers, jobs), one pid at a time."""
    for _ in range(3):
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if entry.stat().st_uid == uid:
                        pids.append(int(entry.name))
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _remove_users(users: list[str]) -> None:
    for user in users:
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            continue
        _kill_user_processes(uid)
        subprocess.run(["userdel", "-f", "-r", user], capture_output=True)


STALE_WITHOUT_OWNER_S = 600


def _clean_stale() -> None:
    """Remove users and dirs of earlier sessions whose pytest process is gone."""
    if not BASE.exists():
        return
    for d in BASE.iterdir():
        try:
            owner = int((d / "owner").read_text())
            os.kill(owner, 0)
            continue  # still running
        except FileNotFoundError:
            # no owner yet: another xdist worker may have just made it and not yet written its owner
            # (removed in that gap, its world was gone mid-setup); a world that died there goes later
            with contextlib.suppress(OSError):
                if time.time() - d.stat().st_mtime < STALE_WITHOUT_OWNER_S:
                    continue
        except (OSError, ValueError):
            pass
        users = (d / "users").read_text().split() if (d / "users").exists() else []
        _remove_users(users)
        shutil.rmtree(d, ignore_errors=True)


def _sshd_config(h: SSHHost, authorized: Path) -> str:
    return "\n".join(
        [
            f"Port {h.port}",
            f"ListenAddress {h.address}",
            f"HostKey {h.state_dir / 'host_key'}",
            f"PidFile {h.state_dir / 'sshd.pid'}",
            f"AuthorizedKeysFile {authorized}",
            f"AllowUsers {h.user}",
            "StrictModes no",
            "UsePAM no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "PrintMotd no",
            "MaxSessions 64",
            "MaxStartups 64:30:128",
            "ClientAliveInterval 0",
            f"SetEnv PATH={h.path_env}",
            "Subsystem sftp internal-sftp",
            "LogLevel ERROR",
            "",
        ]
    )


def start_world(n_hosts: int = 4) -> World:
    """Create ``n_hosts`` users, keys and sshds, and the client template; all started."""
    _clean_stale()
    BASE.mkdir(mode=0o755, exist_ok=True)
    token = secrets.token_hex(2)
    root = BASE / token
    root.mkdir(mode=0o755)
    (root / "owner").write_text(str(os.getpid()))
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    python = reachable_python(root / "python")

    client = root / "client"
    ssh_dir = client / ".ssh"
    ssh_dir.mkdir(parents=True, mode=0o700)
    client_key = ssh_dir / "id_ed25519"
    _keygen(client_key, "pippa-tests")
    authorized = root / "authorized_keys"
    authorized.write_text(_pub(client_key) + "\n")
    os.chmod(authorized, 0o644)

    hosts: list[SSHHost] = []
    users = [f"pippa-{token}-{i}" for i in range(1, n_hosts + 1)]
    (root / "users").write_text("\n".join(users))
    base_octet = 10 + int(token, 16) % 200
    for i, user in enumerate(users, start=1):
        address = f"127.0.{base_octet}.{i + 1}"
        home = root / "home" / user
        home.parent.mkdir(exist_ok=True, mode=0o755)
        subprocess.run(
            ["useradd", "-M", "-d", str(home), "-s", "/bin/bash", "-p", "*", user],
            check=True,
            capture_output=True,
        )
        home.mkdir(mode=0o755)
        pw = pwd.getpwnam(user)
        os.chown(home, pw.pw_uid, pw.pw_gid)
        state = root / f"host{i}"
        state.mkdir(mode=0o700)
        _keygen(state / "host_key", f"host{i}")
        h = SSHHost(
            name=f"t{i}",
            ssh_alias=f"ssh-t{i}",
            address=address,
            port=_free_port(address),
            user=user,
            home=home,
            state_dir=state,
            python=python,
        )
        (state / "sshd_config").write_text(_sshd_config(h, authorized))
        hosts.append(h)

    (ssh_dir / "config").write_text(
        "".join(
            f"Host {h.ssh_alias}\n  HostName {h.address}\n  Port {h.port}\n  User {h.user}\n"
            f"  IdentityFile {client_key}\n  IdentitiesOnly yes\n\n"
            for h in hosts
        )
    )
    (ssh_dir / "known_hosts").write_text("".join(h.host_key_line + "\n" for h in hosts))
    conf = client / ".config" / "pippa"
    conf.mkdir(parents=True)
    (conf / "hosts.toml").write_text(
        "".join(
            f'[hosts.{h.name}]\naddress = "{h.address}"\nport = {h.port}\nuser = "{h.user}"\n'
            f'identity_file = "~/.ssh/id_ed25519"\npython = "{h.python}"\n\n'
            for h in hosts
        )
    )
    (client / "team-pippa.toml").write_text("# team inventory of the tests (empty)\n")
    world = World(token=token, root=root, hosts=hosts, client_template=client)
    try:
        for h in hosts:
            h.start()
    except BaseException:
        world.close()
        raise
    return world


def client_vars(client_home: Path) -> dict[str, str]:
    """Environment that points pippa (and ssh/rsync) at a client directory made by ``start_world``."""
    return {
        "HOME": str(client_home),
        "PIPPA_INVENTORY": str(client_home / "team-pippa.toml"),
        "XDG_CONFIG_HOME": str(client_home / ".config"),
    }


def client_subprocess_env(client_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env.update(client_vars(client_home))
    return env


def _sshd_descendants(root: int) -> set[int]:
    """The sshd processes (``sshd``, ``sshd-session``, ...) anywhere below ``root``."""
    parent_of: dict[int, int] = {}
    name_of: dict[int, str] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            head, rest = stat.read_text().rsplit(")", 1)
            pid = int(stat.parent.name)
            parent_of[pid] = int(rest.split()[1])
            name_of[pid] = head.split("(", 1)[1]
    found: set[int] = set()
    level = {root}
    while level:
        level = {p for p, parent in parent_of.items() if parent in level and name_of[p].startswith("sshd")}
        level -= found
        found |= level
    return found
