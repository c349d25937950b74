"""Write SkyPilot's own JSON schemas for a task YAML (task, resources, storage) into
tests/fixtures/skypilot/, from its wheel, without installing SkyPilot or its dependencies.

    pip download skypilot==0.14.1 --no-deps -d /tmp/sky
    python scripts/skypilot_schema.py /tmp/sky/skypilot-0.14.1-py3-none-any.whl

sky/utils/schemas.py builds the schemas from three small modules: sky/skylet/constants.py and
sky/utils/kubernetes_enums.py run as they are (the first needs ``packaging``); of sky/skylet/autostop_lib.py
(which imports SkyPilot's runtime) only its ``AutostopWaitFor`` enum is taken. The output records the
wheel's name and sha256; tests/ops/test_export.py validates pippa's export against it with jsonschema.
"""

from __future__ import annotations

import ast
import enum
import hashlib
import json
import sys
import types
import typing
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "skypilot"


def _module(name: str, source: str | None = None, **attrs: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    if source is not None:
        exec(compile(source, name, "exec"), mod.__dict__)
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, mod)
    return mod


def _classes(name: str, source: str, *classes: str) -> types.ModuleType:
    """A module holding only the named classes (enums) of ``source``: the rest imports SkyPilot's runtime."""
    nodes = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name in classes]
    text = "\n\n".join(str(ast.get_source_segment(source, n)) for n in nodes)
    return _module(name, text, enum=enum, List=list, Dict=dict, Optional=typing.Optional)


def main(wheel: str) -> None:
    z = zipfile.ZipFile(wheel)
    src = {n: z.read(n).decode() for n in z.namelist() if n.startswith("sky/") and n.endswith(".py")}
    version = Path(wheel).name.split("-")[1]
    for pkg in ("sky", "sky.setup_files", "sky.skylet", "sky.utils", "sky.data", "sky.server"):
        _module(pkg, __path__=[], __version__=version)
    _module("sky.setup_files.dependencies", src["sky/setup_files/dependencies.py"])
    _module("sky.skylet.constants", src["sky/skylet/constants.py"])
    _module("sky.utils.kubernetes_enums", src["sky/utils/kubernetes_enums.py"])
    _classes("sky.skylet.autostop_lib", src["sky/skylet/autostop_lib.py"], "AutostopWaitFor")
    _classes("sky.data.storage", src["sky/data/storage.py"], "StoreType", "StorageMode", "FileMountType")
    # the API server's view: every plugin loaded (strict additionalProperties), no internal daemons listed
    _module("sky.server.plugins", plugins_loaded=lambda: True)
    _module("sky.server.daemons", INTERNAL_REQUEST_DAEMONS=[])
    schemas = _module("sky.utils.schemas", src["sky/utils/schemas.py"])
    doc = {
        "source": {
            "wheel": Path(wheel).name,
            "sha256": hashlib.sha256(Path(wheel).read_bytes()).hexdigest(),
            "module": "sky/utils/schemas.py",
        },
        "task": schemas.get_task_schema(),
        "resources": schemas.get_resources_schema(),
        "storage": schemas.get_storage_schema(),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"schemas-{version}.json"
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(out)


if __name__ == "__main__":
    main(sys.argv[1])
