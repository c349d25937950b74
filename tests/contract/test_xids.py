"""The one GPU-fault model (pippa_contract.xids): the doctor, the alert watcher and the failure classifier
read every Xid the same way, the docs' tables are the catalog's, and no other module keeps an Xid list or a
kernel-log reader of its own."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pippa_contract import failures as fc
from pippa_contract import xids

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("pippa_agent", "pippa_contract", "pippa_ops", "training_core")
BUS = "00000000:3B:00.0"


def line(xid: int, at: float = 500.0) -> str:
    return f"[{at:12.6f}] NVRM: Xid (PCI:0000:3b:00): {xid}, pid=4242, name=python, something happened"


@pytest.mark.parametrize("xid", [*sorted(xids.CATALOG), 999])
def test_the_classifier_the_doctor_and_the_watcher_agree_on_every_xid(xid: int, tmp_path: Path) -> None:
    from pippa_agent.doctor import gpu_checks
    from pippa_agent.doctor.watch import GpuHealthWatch

    row = xids.info(xid)
    verdict = fc.classify(fc.AttemptFacts(exit_code=137, kernel_lines=[line(xid)], log_tail=["Killed"]))
    assert (verdict.cls == fc.GPU_FAULT) == (row.kind == xids.HARDWARE), verdict

    gpus = [{"index": 3, "bus_id": BUS, "uuid": "u3", "ecc_uncorrected_volatile": 0}]
    (check,) = gpu_checks.xid_checks(gpus, xids.events([line(xid)]))  # type: ignore[arg-type]
    assert check["status"] == row.status and check["gpu"] == 3 and row.meaning in check["detail"]

    watch = GpuHealthWatch()
    assert watch.sample(["boot"], gpus, "tiny-a3f9", boot=0.0) == []  # type: ignore[arg-type]
    (alert,) = watch.sample(["boot", line(xid)], gpus, "tiny-a3f9", boot=0.0)  # type: ignore[arg-type]
    kind = "GPU fault" if row.kind == xids.HARDWARE else "program fault on the GPU"
    assert alert == ("GPU 3", f"GPU 3: {kind}: Xid {xid} ({row.meaning}) at " + alert[1].split(" at ")[1])
    assert [e.xid for e in watch.found] == [xid]


def test_an_xid_the_watcher_alerts_is_in_the_hosts_doctor_history(tmp_path: Path) -> None:
    """What the dashboard's badge, `pippa hosts`, `doctor --history` and `--failover` read."""
    from pippa_agent.alerts.watch import record_faults
    from pippa_agent.doctor import history

    gpus = [{"index": 3, "bus_id": BUS}]
    record_faults(xids.events([line(13)]), gpus, str(tmp_path))
    record_faults(xids.events([line(79, 600.0)]), gpus, str(tmp_path))
    newest, older = history.load(str(tmp_path), 5)
    assert (newest["verdict"], newest["source"], older["verdict"]) == ("fail", "watcher", "warn")
    assert [c["check"] for c in newest["checks"]] == ["xid"] and "Xid 79 (fallen off the bus)" in (
        newest["checks"][0]["detail"]
    )
    from pippa_ops.doctor import refusal

    refused = refusal(newest)
    assert refused is not None and "its alert watcher saw a GPU fault (xid)" in refused.line()
    assert refusal(older) is None  # a program's Xid is a warn: runs still start


def test_dmesg_stamps_and_pci_addresses_are_read_one_way() -> None:
    assert xids.logged_at("[  12.500000] NVRM: x", boot=1000.0) == 1012.5
    assert xids.logged_at("Nov 29 03:00:00 host kernel: NVRM: x", boot=1000.0) is None
    assert xids.logged_at("[  12.500000] NVRM: x", boot=None) is None
    keys = {xids.pci_key(a) for a in ("0000:3b:00", "PCI:0000:3b:00", "00000000:3B:00.0")}
    assert keys == {"3B:00"}
    (e,) = xids.events(["junk", line(79)])
    assert (e.pci, e.xid, e.hardware) == ("0000:3b:00", 79, True) and e.line.startswith("[")


def _table_rows(doc: str, header: str) -> list[list[str]]:
    text = (REPO / "docs" / doc).read_text()
    start = text.index(header)
    rows = []
    for ln in text[start:].splitlines()[2:]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip("|").split("|")])
    return rows


def test_the_docs_xid_tables_are_the_catalog() -> None:
    rows = _table_rows("doctor.md", "| Xid | kind | doctor | meaning | what to do |")
    documented = {int(r[0]): (r[1], r[2].strip("`"), r[3], r[4]) for r in rows}
    assert documented == {x: (i.kind, i.status, i.meaning, i.todo) for x, i in xids.CATALOG.items()}
    failures = (REPO / "docs" / "failures.md").read_text()
    m = re.search(r"\| `gpu-fault` \| a new hardware Xid \(([\d, ]+);", failures)
    assert m, "docs/failures.md's gpu-fault row lists the hardware Xids"
    hardware = {x for x, i in xids.CATALOG.items() if i.kind == xids.HARDWARE}
    assert {int(x) for x in m.group(1).split(",")} == hardware


def _production_files() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))]


def _offences(source: str, where: str) -> list[str]:
    catalog, found = set(xids.CATALOG), []
    tree = ast.parse(source)
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    stamp = re.compile(r"\\\[\\s\*\(\\d\+")  # a dmesg stamp's regex: \[\s*(\d+
    for node in ast.walk(tree):
        text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""
        if id(node) not in docstrings and ("NVRM" in text or stamp.search(text)):
            found.append(f"{where}:{node.lineno}: {text[:60]!r}")
        if isinstance(node, ast.Set | ast.List | ast.Tuple):
            ints = {e.value for e in node.elts if isinstance(e, ast.Constant) and type(e.value) is int}
            if len(ints) >= 3 and ints <= catalog and len(ints) == len(node.elts):
                found.append(f"{where}:{node.lineno}: Xid numbers {sorted(ints)}")
    return found


def test_no_module_but_the_catalog_keeps_an_xid_list_or_a_kernel_log_pattern() -> None:
    """A regex on Xid lines or dmesg stamps, or a collection of three or more catalog Xids, lives in
    pippa_contract/xids.py only: a second copy is how the doctor and the classifier came to disagree."""
    found = []
    for path in _production_files():
        if path != REPO / "pippa_contract" / "xids.py":
            found += _offences(path.read_text(), str(path.relative_to(REPO)))
    assert found == []


def test_the_rule_above_sees_what_it_forbids() -> None:
    bad = 'import re\nX = re.compile(r"NVRM: Xid (.*)")\nT = re.compile(r"^\\[\\s*(\\d+\\.\\d+)\\]")\n'
    bad += "HW = frozenset({48, 79, 95})\nOK = (1, 2, 3)\n"
    assert [f.split(":")[1] for f in _offences(bad, "bad.py")] == ["2", "3", "4"]
    assert _offences((REPO / "pippa_contract" / "xids.py").read_text(), "xids.py"), "the catalog itself"
