"""Redaction from remembered fingerprints (pippa_contract.secretprints): a secret is found wherever it
sits in a text after its value is gone, and nothing else is touched."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from pippa_contract.secretprints import Prints, Redactor, StreamMasker, load, remember

HF = "hf_R0tatedAwayT0ken9xQ"
B64 = "dGhpcyBpcyBhIHNlY3JldA/+=="


def _rotated(tmp_path: Path, values: dict[str, str]) -> Redactor:
    path = str(tmp_path / "prints.json")
    remember(values, path)
    return Redactor({}, load(path))  # the values themselves are gone


def test_the_file_holds_salted_hashes_never_a_value_and_is_private(tmp_path: Path) -> None:
    remember({"HF_TOKEN": HF}, str(tmp_path / "p.json"))
    text = (tmp_path / "p.json").read_text()
    assert HF not in text and HF[:6] not in text
    assert stat.S_IMODE((tmp_path / "p.json").stat().st_mode) == 0o600
    salt = json.loads(text)["salt"]
    remember({"OTHER": "another-secret-value"}, str(tmp_path / "p.json"))  # added, never replaced
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["salt"] == salt and len(doc["prints"]) == 2


def test_a_remembered_token_is_found_glued_quoted_or_in_a_url(tmp_path: Path) -> None:
    r = _rotated(tmp_path, {"HF_TOKEN": HF, "KEY": B64})
    assert r.line(f"token is {HF}") == "token is ***"
    assert r.line(f"HF_TOKEN={HF}, at step 3") == "HF_TOKEN=***, at step 3"
    assert r.line(f"GET https://x.io/{HF}/v1?k={B64}") == "GET https://x.io/***/v1?k=***"
    assert r.line(f"x{HF}y") == "x***y"  # glued to other word characters
    plain = "nothing secret here, step 12, hf_Other0neT0ken"
    assert r.line(plain) == plain


def test_a_log_is_masked_to_the_same_length_across_chunks(tmp_path: Path) -> None:
    r = _rotated(tmp_path, {"HF_TOKEN": HF})
    data = f"start\ntoken is {HF}\nprogress 50%\rprogress 100%\n".encode()
    m = StreamMasker(r)
    out = b"".join(m.feed(data[i : i + 7]) for i in range(0, len(data), 7)) + m.close()
    assert len(out) == len(data) and HF.encode() not in out
    assert out == data.replace(HF.encode(), b"*" * len(HF))


def test_todays_values_are_masked_without_a_print_and_short_pieces_are_not_remembered(tmp_path: Path) -> None:
    now = Redactor({"HF_TOKEN": HF}, Prints("", set()))
    assert now.mask(f"token is {HF}\n".encode()) == f"token is {'*' * len(HF)}\n".encode()
    remember({"PIN": "1234"}, str(tmp_path / "p.json"))
    assert load(str(tmp_path / "p.json")).prints == set()
