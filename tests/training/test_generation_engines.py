"""The generation engines (training_core.generation) through pippa's GRPO trainer on the CPU: each engine
writes the same greedy completions as HF generate(), sampling follows the same distribution, an engine
that fails falls back in one line and the run goes on, and ``auto`` keeps today's path on a CPU."""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("datasets")

from training_core.generation import engines  # noqa: E402
from training_core.hardware.platform import PlatformFacts  # noqa: E402
from training_core.models import shapes, tiny  # noqa: E402
from training_core.recipes import resolve  # noqa: E402
from training_core.run.flops import setup_for  # noqa: E402
from training_core.run.metrics import MetricsWriter, make_callback  # noqa: E402

NEW = 10  # completion tokens
# varied lengths: left padding of 0 to 17 tokens in one batch
PROMPTS = ["1+2=", "abc def ghi jkl mno", "7", "9*8-3=", "hello world, 12+3=?", "(4)"]


def _cfg(*sets: str) -> Any:
    fixed = [
        f"train.max_completion_length={NEW}",
        "data.max_prompt_length=24",
        "train.num_generations=2",
        "train.per_device_train_batch_size=12",
        "checkpoint.every=0",
        "eval.task=none",
        "train.max_steps=1",
    ]
    return resolve("tiny", [*fixed, *sets], PlatformFacts()).config


def _spread(model: Any, seed: int) -> Any:
    """Random weights of a larger scale: at the default init a random model repeats one token, which
    would make any two engines agree; these weights write varied completions."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) * 0.4)
    return model


def _models() -> dict[str, tuple[Any, Any]]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny.ensure()
    return {
        "tiny": (_spread(AutoModelForCausalLM.from_pretrained(path), 1), AutoTokenizer.from_pretrained(path)),
        "qwen2_toy": (
            _spread(shapes.build_model(shapes.QWEN2_TOY), 2),
            shapes.build_tokenizer(shapes.QWEN2_TOY["vocab_size"]),
        ),
    }


def _trainer(model: Any, tok: Any, cfg: Any, tmp: Path) -> Any:
    from training_core.methods.trainer import PippaGRPOTrainer, grpo_args

    def zero(completions: list[Any], **_: Any) -> list[float]:
        return [0.0] * len(completions)

    ds = datasets.Dataset.from_list([{"prompt": p} for p in PROMPTS * 4])
    return PippaGRPOTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=[zero],
        train_dataset=ds,
        args=grpo_args(cfg, tmp, ["none"], "t"),
        generation=engines.plan(cfg, cuda=False, vllm_importable=False),
    )


def _generate(trainer: Any, tok: Any, engine: str, seed: int = 0) -> list[list[int]]:
    engines.apply(trainer, engine, trainer.engine_plan)
    trainer.engine = engine
    ids = [tok(p)["input_ids"] for p in PROMPTS]
    torch.manual_seed(seed)
    completions, _ = trainer._generate_single_turn(ids, None, {}, 1)  # what the trainer calls per batch
    return [list(c) for c in completions]


@pytest.fixture(scope="module")
def trainers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Any]]:
    out = {}
    for name, (model, tok) in _models().items():
        out[name] = (_trainer(model, tok, _cfg(), tmp_path_factory.mktemp(name)), tok)
    return out


@pytest.mark.parametrize("model", ["tiny", "qwen2_toy"])
@pytest.mark.parametrize("engine", ["static", "paged"])
def test_greedy_completions_match_hf_generate(trainers: dict[str, Any], model: str, engine: str) -> None:
    trainer, tok = trainers[model]
    trainer.generation_config.do_sample = False
    try:
        want = _generate(trainer, tok, "hf")
        got = _generate(trainer, tok, engine)
        # the engine really ran: TRL's continuous-batching branch, or generate() on a static cache
        assert trainer.use_transformers_continuous_batching == (engine == "paged")
        assert (trainer.generation_config.cache_implementation == "static") == (engine == "static")
    finally:
        trainer.generation_config.do_sample = True
    assert len({tuple(c) for c in want}) > 2, "the prompts should get different completions"
    assert got == want


def test_the_compiled_static_engine_writes_hf_generates_greedy_completions(trainers: dict[str, Any]) -> None:
    """The compile path itself (torch.compile of the decode step over the static cache), with dynamo's
    eager backend: the tracing and graph breaks a GPU's inductor + CUDA graphs would get, at a CPU's cost
    (inductor's code generation on a CPU takes minutes)."""
    trainer, tok = trainers["qwen2_toy"]
    plan = trainer.engine_plan
    compiled = dataclasses.replace(plan, compile=True, compile_all_devices=True, compile_backend="eager")
    trainer.generation_config.do_sample = False
    try:
        want = _generate(trainer, tok, "hf")
        trainer.engine_plan = compiled
        got = _generate(trainer, tok, "static")
        assert trainer.generation_config.disable_compile is False
    finally:
        trainer.engine_plan = plan
        engines.apply(trainer, "hf", plan)
        trainer.generation_config.do_sample = True
    assert hasattr(trainer.model, "_compiled_call")  # transformers compiled the forward
    assert got == want


@pytest.mark.parametrize("model", ["tiny", "qwen2_toy"])
def test_static_engine_samples_the_same_tokens_for_one_seed(trainers: dict[str, Any], model: str) -> None:
    trainer, tok = trainers[model]
    want = _generate(trainer, tok, "hf", seed=3)
    assert _generate(trainer, tok, "static", seed=3) == want
    assert _generate(trainer, tok, "hf", seed=4) != want  # the seed matters: the comparison is not vacuous


def test_paged_engine_samples_the_policy_distribution(trainers: dict[str, Any]) -> None:
    """Continuous batching samples through its own code (no shared RNG stream with generate()): the first
    completion token over many requests follows the model's softmax as HF generate()'s does."""
    trainer, tok = trainers["tiny"]
    ids = tok("3+4=")["input_ids"]
    with torch.no_grad():
        probs = torch.softmax(trainer.model(torch.tensor([ids])).logits[0, -1].float(), -1)

    def first_tokens(engine: str) -> collections.Counter[int]:
        engines.apply(trainer, engine, trainer.engine_plan)
        torch.manual_seed(5)
        completions, _ = trainer._generate_single_turn([ids] * 400, None, {}, 1)
        return collections.Counter(c[0] for c in completions)

    for engine in ("hf", "paged"):
        counts = first_tokens(engine)
        tv = 0.5 * sum(abs(counts.get(i, 0) / 400 - float(p)) for i, p in enumerate(probs))
        assert tv < 0.15, (engine, tv)  # 400 draws of a ~20-way distribution: noise ~0.08


def test_auto_keeps_hf_on_a_cpu_and_picks_the_static_engine_on_cuda() -> None:
    cfg = _cfg()
    assert engines.plan(cfg, cuda=False, vllm_importable=True).chain == ("hf",)
    assert engines.plan(cfg, cuda=True, vllm_importable=False).chain == ("static", "hf")
    with_vllm = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, use_vllm=True))
    assert engines.plan(with_vllm, cuda=True, vllm_importable=True).chain == ("vllm",)
    p = engines.plan(_cfg('generation.engine="vllm"'), cuda=False, vllm_importable=False)
    assert p.chain == ("hf",) and p.notes == ("generation engine vllm: vLLM is not importable; using hf",)


def test_a_failing_engine_falls_back_in_one_line_and_the_run_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The static engine with a torch.compile backend this host lacks: its first generate() raises inside
    transformers' compile, the trainer says so in one line and trains its step with HF generate()."""
    model, tok = _models()["tiny"]
    cfg = _cfg('generation.engine="static"', 'generation.compile="on"', 'generation.compile_backend="absent"')
    trainer = _trainer(model, tok, cfg, tmp_path)
    assert trainer.engine == "static"
    writer = MetricsWriter(tmp_path / "metrics.jsonl")
    trainer.add_callback(make_callback(writer, False, 1, setup=setup_for(cfg, model)))
    capsys.readouterr()
    trainer.train()
    writer.close()
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "generation engine" in ln]
    assert lines == [
        "generation engine static failed (InvalidBackend: Invalid backend: 'absent', see "
        "`torch._dynamo.list_backends()` for available backends.); using hf"
    ]
    assert trainer.engine == "hf" and trainer.state.global_step == 1
    # the step's figures: the generation share and tokens/s of the (fallen back) engine, in metrics.jsonl
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert row["perf/gen_tokens"] == pytest.approx(12 * row["completions/mean_length"])
    assert 0 < row["perf/gen_share"] < 1
    assert row["perf/gen_tokens_per_s"] > 0 and row["perf/train_tokens_per_s"] > 0
    assert trainer.gen_clock.completion_tokens == 0  # taken into the logged step


def test_an_explicit_engine_and_use_vllm_true_are_refused() -> None:
    from training_core.errors import BadSetting
    from training_core.methods.grpo import GrpoMethod

    with pytest.raises(BadSetting, match=r"conflicts with generation\.engine = static"):
        GrpoMethod().validate(_cfg('generation.engine="static"', "train.use_vllm=true"))
