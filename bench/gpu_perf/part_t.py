"""Part T (learns): runs shown learning on the GPU in the default precision, all through
``python -m training_core.train`` (HF generate; train.use_vllm = false), side by side:

- the tiny recipe, seeds 0-2: the last greedy accuracy on its 41 training sums against the best constant
  answer's on the same sums (the CPU suite's claim: a margin >= 0.3);
- a from-scratch ~25M-parameter model with the character tokenizer (built here; Qwen2-shaped): SFT on
  2-3-digit sums (bench/gpu_perf/sums_sft.toml), then Dr GRPO from its checkpoint at 1,024 completions
  per step (sums_grpo.toml); its greedy accuracy on held-out sums at each eval is kept as data (T.json,
  T-curve.json) and drawn in T-curve.png when matplotlib is installed.

Every run has the part's deadline: what ends in time is written, the rest is named as cut.
``--dry``: the CPU, seed 0 only, a toy model and a few steps of each run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _part

HERE = Path(__file__).resolve().parent
# ~25M parameters: 7 layers of 512 wide (attention 1.0M + MLP 2.4M each) and a 70-character vocabulary.
CHAR_SPEC: dict[str, Any] = {
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 7,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "max_position_embeddings": 32,
    "tie_word_embeddings": True,
}
TOY_SPEC = {
    **CHAR_SPEC,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
}
DEADLINE_S = 130.0  # inside bench/gpu_perf.sh's limit for T (145 s), so T.json is written before it
_DRY_DATA = ["data.params.n=256", "data.params.max_operand=99", "eval.interval=2", "eval.n=8"]
DRY_SETS = {  # a few steps of each run on the CPU, two-digit sums
    "tiny": ["train.max_steps=2", "train.per_device_train_batch_size=32", "eval.interval=2", "eval.n=8"],
    "sft": ["train.max_steps=2", "train.per_device_train_batch_size=16", "checkpoint.every=2", *_DRY_DATA],
    "grpo": [
        "train.max_steps=2",
        "train.per_device_train_batch_size=16",
        "train.gradient_accumulation_steps=1",
        "train.num_generations=4",
        *_DRY_DATA,
    ],
}


def _train(recipe: str, run_dir: Path, sets: list[str], deadline: float) -> dict[str, Any]:
    """One ``python -m training_core.train`` run, killed at ``deadline``; its eval records."""
    argv = [sys.executable, "-m", "training_core.train", recipe, "--run-dir", str(run_dir)]
    for s in ["train.use_vllm=false", "logging.progress=false", *sets]:
        argv += ["--set", s]
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(f"{run_dir}.log", "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=_part.ROOT)
        try:
            rc: int | str = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = "cut at the part's deadline"
    recs = []
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        recs = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    evals = [r for r in recs if r.get("type") == "eval"]
    header = next((r for r in recs if r.get("type") == "header"), {})
    platform = header.get("config", {}).get("platform", {})
    return {
        "rc": rc,
        "seconds": round(time.monotonic() - t0, 1),
        "precision": header.get("config", {}).get("config", {}).get("model", {}).get("precision"),
        "precision_choice": platform.get("precision"),
        "curve": [[r["step"], r["eval/accuracy"]] for r in evals],
        "constant_baseline": evals[-1].get("eval/constant_baseline") if evals else None,
        "log_tail": Path(f"{run_dir}.log").read_text()[-600:] if rc != 0 else "",
    }


def _char_model(target: Path, dry: bool) -> int:
    """The from-scratch model: Qwen2 of CHAR_SPEC (TOY_SPEC dry) with tiny's character tokenizer, saved
    where model.name can load it; its parameter count."""
    from training_core.models import shapes, tiny

    tok = tiny.build_tokenizer()
    model = shapes.build_model({**(TOY_SPEC if dry else CHAR_SPEC), "vocab_size": len(tok)}, seed=0)
    tok.save_pretrained(target)
    model.save_pretrained(target)
    return sum(p.numel() for p in model.parameters())


def _sums(runs: Path, model_dir: Path, dry: bool, deadline: float, out: dict[str, Any]) -> None:
    """SFT, then GRPO from its checkpoint (``model.from_run``): both runs' curves into ``out``."""
    sets = [f"model.name={model_dir}"]
    out["sft"] = _train(
        str(HERE / "sums_sft.toml"), runs / "sums-sft", sets + (DRY_SETS["sft"] if dry else []), deadline
    )
    if out["sft"]["rc"] == 0:
        grpo_sets = [*sets, "model.from_run=sums-sft", *(DRY_SETS["grpo"] if dry else [])]
        out["grpo"] = _train(str(HERE / "sums_grpo.toml"), runs / "sums-grpo", grpo_sets, deadline)


def _plot(curve: dict[str, Any], path: Path) -> str:
    """The held-out accuracy of the SFT and GRPO runs, one axis of optimizer steps; '' or why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: the curve is in T-curve.json"
    fig, ax = plt.subplots(figsize=(6, 3.5))
    sft = curve.get("sft", {}).get("curve", [])
    grpo = curve.get("grpo", {}).get("curve", [])
    last = sft[-1][0] if sft else 0
    if sft:
        ax.plot([s for s, _ in sft], [a for _, a in sft], "o-", label="SFT")
    if grpo:
        ax.plot(
            [last + s for s, _ in grpo], [a for _, a in grpo], "o-", label="Dr GRPO (1,024 completions/step)"
        )
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("greedy accuracy, held-out sums")
    ax.set_ylim(0, 1)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return ""


def main() -> None:
    a = _part.args(__doc__)
    t0 = time.monotonic()
    dev = _part.device(a.dry)
    deadline = t0 + DEADLINE_S
    seeds = [0] if a.dry else [0, 1, 2]
    tiny: dict[int, dict[str, Any]] = {}
    sums: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gpu-perf-t-") as tmp:
        runs = Path(tmp) / "runs"
        model_dir = Path(tmp) / "char-model"
        n_char = _char_model(model_dir, a.dry)

        def tiny_seed(seed: int) -> None:
            sets = [f"seed={seed}", "checkpoint.every=0", *(DRY_SETS["tiny"] if a.dry else [])]
            tiny[seed] = _train("tiny", runs / f"tiny-s{seed}", sets, deadline)

        threads = [threading.Thread(target=tiny_seed, args=(s,)) for s in seeds]
        threads.append(threading.Thread(target=_sums, args=(runs, model_dir, a.dry, deadline, sums)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for r in tiny.values():
        last = r["curve"][-1][1] if r["curve"] else None
        r["margin"] = (
            None
            if last is None or r["constant_baseline"] is None
            else round(last - r["constant_baseline"], 3)
        )
    curve = {"n_params": n_char, **sums}
    (a.out.parent / "T-curve.json").write_text(json.dumps(curve, indent=1) + "\n")
    plot = _plot(curve, a.out.parent / "T-curve.png")
    _part.write(
        a.out,
        "T",
        a.dry,
        t0,
        device=dev,
        tiny={str(s): tiny[s] for s in sorted(tiny)},
        char_model=curve,
        plot=plot or "T-curve.png",
    )
    margins = [tiny[s]["margin"] for s in sorted(tiny)]
    grpo = sums.get("grpo", {}).get("curve", [])
    print(
        f"tiny seeds {sorted(tiny)}: margin over the best constant answer {margins}; sums "
        f"({n_char / 1e6:.1f}M params) held-out accuracy after SFT+GRPO: {grpo[-1][1] if grpo else 'none'}"
    )


if __name__ == "__main__":
    main()
