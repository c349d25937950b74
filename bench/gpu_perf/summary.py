"""The JSON summary of one bench/gpu_perf.sh run: every part's JSON found in OUT, in one list."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    out = Path(sys.argv[1])
    parts = []
    for f in sorted(out.glob("*.json")):
        if f.name == "summary.json":
            continue
        try:
            parts.append(json.loads(f.read_text()))
        except ValueError as e:
            parts.append({"part": f.stem, "error": f"unreadable: {e}"})
    print(json.dumps(parts, indent=1))


if __name__ == "__main__":
    main()
