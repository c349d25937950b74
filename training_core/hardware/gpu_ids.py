"""GPU id lists as launch.gpus and launch.vllm_gpus spell them ("0-6", "0,2,4-5"): the launcher and the
vLLM server split both read them."""

from __future__ import annotations

import re

from training_core.errors import BadSetting

_GPUS_RE = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def parse_gpus(spec: str) -> list[int]:
    """``"0-6"`` / ``"0,2,4-5"`` -> GPU ids in order, each once; "" -> [] (every GPU)."""
    spec = spec.replace(" ", "")
    if not spec:
        return []
    if not _GPUS_RE.match(spec):
        raise BadSetting(f"bad GPU list {spec!r}: expected ids and ranges such as 0-6 or 0,2,5")
    ids: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first:
            raise BadSetting(f"bad GPU range {part!r}: the end is below the start")
        ids += [i for i in range(first, last + 1) if i not in ids]
    return ids
