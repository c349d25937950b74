"""Part E (env): the machine the other parts ran on: ``nvidia-smi -q -x`` (kept whole beside the JSON),
the GPU's name, memory and driver, torch / transformers / TRL / accelerate / peft versions, and which
attention backends torch offers here (flash, memory-efficient, cuDNN, math; flash-attn the package)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import subprocess
import time

import _part


def _version(pkg: str) -> str | None:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def _smi(out_xml: str) -> dict[str, str]:
    """The first GPU's name, memory and driver from ``nvidia-smi -q -x`` (the whole XML is kept)."""
    if shutil.which("nvidia-smi") is None:
        return {}
    xml = subprocess.run(["nvidia-smi", "-q", "-x"], capture_output=True, text=True, timeout=30).stdout
    with open(out_xml, "w") as f:
        f.write(xml)
    import xml.etree.ElementTree as ET

    root = ET.fromstring(xml)
    gpu = root.find("gpu")
    facts = {"driver": root.findtext("driver_version") or "", "cuda": root.findtext("cuda_version") or ""}
    if gpu is not None:
        facts["name"] = gpu.findtext("product_name") or ""
        facts["memory_total"] = gpu.findtext("fb_memory_usage/total") or ""
    facts["gpus"] = str(len(root.findall("gpu")))
    return facts


def main() -> None:
    a = _part.args(__doc__)
    t0 = time.monotonic()
    import torch

    backends: dict[str, bool] = {"math": True}
    if torch.cuda.is_available():
        from torch.backends import cuda as bc

        backends["flash_sdp"] = bool(bc.is_flash_attention_available())
        backends["mem_efficient_sdp"] = bool(bc.mem_efficient_sdp_enabled())
        backends["cudnn_sdp"] = bool(bc.cudnn_sdp_enabled())
    backends["flash_attn_package"] = importlib.util.find_spec("flash_attn") is not None
    smi = {} if a.dry else _smi(str(a.out.with_suffix(".xml")))
    pkgs = ("torch", "transformers", "trl", "accelerate", "peft", "torchao", "vllm")
    versions = {p: _version(p) for p in pkgs}
    facts = {
        "cuda_available": torch.cuda.is_available(),
        "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "bf16_supported": bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported()),
    }
    _part.write(a.out, "E", a.dry, t0, smi=smi, versions=versions, backends=backends, torch_facts=facts)
    print(
        f"{facts['device_name']}, torch {versions['torch']}, transformers {versions['transformers']}, "
        f"trl {versions['trl']}, flash sdp {backends.get('flash_sdp', False)}"
    )


if __name__ == "__main__":
    main()
