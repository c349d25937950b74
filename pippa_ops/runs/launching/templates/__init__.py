"""The host artifacts a launch writes (``cmd.sh``, ``job.sbatch``) as template files beside this
module, filled by ``render``: ``{{name}}`` placeholders, each given exactly once, values already
quoted for sh by the caller (tests/ops/golden holds their expected output)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


@functools.cache
def _text(name: str) -> str:
    return (Path(__file__).parent / name).read_text(encoding="utf-8")


def render(name: str, **values: str) -> str:
    """The template ``name`` with every placeholder replaced; a missing or unused value is a bug."""
    text = _text(name)
    wanted = set(_PLACEHOLDER.findall(text))
    if wanted != set(values):
        raise KeyError(
            f"template {name}: missing {sorted(wanted - set(values))}, unused {sorted(set(values) - wanted)}"
        )
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)
