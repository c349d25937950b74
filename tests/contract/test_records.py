"""attempts.json is written whole (tmp, fsync, rename) with a journal line per write; a torn one is
repaired from the journal, or, for a run from before journals, rebuilt from the supervisor's lines in
output.log, and written back whole, so the attempts it held stay in ``ps`` and ``why``."""

from __future__ import annotations

import json
from pathlib import Path

from pippa_agent.supervise.supervisor import Supervisor
from pippa_contract.records import JOURNAL_SUFFIX, attempts_from_log, read_record, write_record
from pippa_contract.runfacts import run_facts

STOPPED = {"attempt": 1, "outcome": "stopped", "class": "stopped", "exit_code": 130, "reason": None}


def _tear(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_torn_record_is_repaired_from_its_journal_and_written_back_whole(tmp_path: Path) -> None:
    path = tmp_path / "attempts.json"
    write_record(str(path), {"attempts": []})
    write_record(str(path), {"attempts": [STOPPED]})
    assert json.loads(path.read_text()) == {"attempts": [STOPPED]}
    _tear(path)
    with open(str(path) + JOURNAL_SUFFIX, "ab") as f:
        f.write(b'{"attempts": [{"attem')  # a journal line a full disk cut: passed over
    assert read_record(str(path)) == {"attempts": [STOPPED]}
    assert json.loads(path.read_text()) == {"attempts": [STOPPED]}  # repaired on disk
    assert read_record(str(tmp_path / "none.json")) is None


def test_a_torn_record_without_a_journal_is_rebuilt_from_output_log(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text(
        "step 1\npippa: attempt 1/3 crash: KeyError 'answer' at x.py:3 (exit 1); retrying; attempt 2 in 1s\n"
        "pippa: ===== attempt 2/3 from step 4 =====\nstep 5\n"
        "pippa: attempt 2/3 stopped (exit 130): not retried\n"
    )
    doc = attempts_from_log(str(log))
    assert doc is not None
    a1, a2 = doc["attempts"]
    assert (a1["class"], a1["exit_code"], a1["reason"]) == ("crash", 1, "KeyError 'answer' at x.py:3")
    assert (a2["class"], a2["outcome"], a2["exit_code"], a2["resumed_from_step"]) == (
        "stopped",
        "stopped",
        130,
        4,
    )
    assert doc["max_attempts"] == 3
    assert attempts_from_log(str(tmp_path / "missing.log")) is None


def test_the_supervisor_and_the_listing_keep_the_attempts_of_a_torn_record(tmp_path: Path) -> None:
    run = tmp_path / "20261129-030000-tiny-ab12"
    run.mkdir()
    (run / "run.json").write_text(
        json.dumps({"recipe": "tiny", "command": "true", "restart": {"max_attempts": 1}})
    )
    (run / "output.log").write_text("")
    write_record(str(run / "attempts.json"), {"max_attempts": 1, "attempts": [STOPPED]})
    _tear(run / "attempts.json")
    facts = run_facts(str(run))  # what the agent answers ps and why with
    assert facts is not None and facts["attempts"]["attempts"] == [STOPPED]
    _tear(run / "attempts.json")
    sup = Supervisor(str(run))  # a resume's supervisor: the stopped attempt stays the first
    assert sup.doc["attempts"] == [STOPPED]
