"""GpuStream, shared by ``pippa gpus --watch`` and the dashboard: stall timeout, close from another thread."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import fake_smi
import pytest

from pippa_ops.errors import HostUnreachable
from pippa_ops.gpu import Gpu, GpuStream
from pippa_ops.transport.base import LocalTransport


def _smi_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(text)
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_close_from_another_thread_ends_the_reading_loop_cleanly(tmp_path, monkeypatch) -> None:
    _smi_on_path(tmp_path, monkeypatch, fake_smi.script(gpus=2))
    stream = GpuStream(LocalTransport(), interval_s=1.0)
    samples: list[list[Gpu]] = []
    errors: list[BaseException] = []
    first = threading.Event()

    def reader() -> None:
        try:
            for s in stream.samples():
                samples.append(s)
                first.set()
        except BaseException as e:  # the test asserts there is none
            errors.append(e)

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    assert first.wait(20), "no sample"
    stream.close()
    th.join(10)
    assert not th.is_alive(), "close() from another thread ends samples()"
    assert errors == []
    assert [g.index for g in samples[0]] == [0, 1]


def test_a_silent_host_raises_host_unreachable_after_the_stall_timeout(tmp_path, monkeypatch) -> None:
    _smi_on_path(tmp_path, monkeypatch, "#!/bin/sh\nexec sleep 30\n")
    stream = GpuStream(LocalTransport(), interval_s=1.0, stall_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(HostUnreachable, match="no answer for"):
        list(stream.samples())
    assert time.monotonic() - t0 < 20  # the stall timeout, not the 30 s sleep
