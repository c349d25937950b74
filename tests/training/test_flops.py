"""The FLOP count behind perf/mfu and perf/hfu (training_core.run.flops) on known numbers, and the
per-phase figures the metrics callback writes from a GRPO trainer's logged step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training_core.run.flops import (
    Setup,
    Shape,
    StepCounts,
    figures,
    hardware_flops,
    model_flops,
    old_logprob_forward,
)

H100 = 989e12
# Qwen2-0.5B: 494,032,768 weights, of which the tied embedding/head is 151,936 x 896
QWEN2_0_5B = Shape(body=494_032_768 - 151_936 * 896, head=151_936 * 896)


def test_the_shape_of_qwen2_0_5b_splits_off_its_tied_embedding_once() -> None:
    torch = pytest.importorskip("torch")
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from training_core.models.shapes import QWEN2_0_5B as SPEC
    from training_core.run.flops import shape_of

    with torch.device("meta"):
        tied = Qwen2ForCausalLM(Qwen2Config(**SPEC))
        untied = Qwen2ForCausalLM(Qwen2Config(**{**SPEC, "tie_word_embeddings": False}))
    assert shape_of(tied) == QWEN2_0_5B
    assert shape_of(untied) == QWEN2_0_5B  # an untied head's weights are the head, not the body


def test_corrected_mfu_of_the_measured_h100_step() -> None:
    """bench_max_gpu's H100 figure: 64 completions of 256 tokens after 200-token prompts, train phase
    80,423 tok/s. 6N on every token said 24.1%; the body on every token and the head on the scored
    completion tokens only is 21.2%."""
    tokens, scored = 64 * (200 + 256), 64 * 256
    seconds = tokens / 80_423
    old = 6 * 494_032_768 * 80_423 / H100
    new = model_flops(QWEN2_0_5B, tokens, scored) / seconds / H100
    assert old == pytest.approx(0.2410, abs=1e-4)
    assert new == pytest.approx(0.2119, abs=1e-4)


def test_hardware_flops_add_recompute_the_old_logprob_forward_and_generation() -> None:
    s = Shape(body=10, head=3)
    assert model_flops(s, tokens=5, scored=2) == 6 * 10 * 5 + 6 * 3 * 2  # 336
    bare = hardware_flops(
        s, 5, 2, gen_prompt_tokens=0, gen_tokens=0, recompute=False, old_logprob_forward=False
    )
    assert bare == 336
    assert hardware_flops(s, 5, 2, 0, 0, recompute=True, old_logprob_forward=False) == 336 + 2 * 10 * 5
    assert hardware_flops(s, 5, 2, 0, 0, recompute=False, old_logprob_forward=True) == 336 + 100 + 12
    # prefill of 3 prompt tokens and 2 decode steps: the body on 5 tokens, the head on the 2 generated
    assert hardware_flops(s, 5, 2, 3, 2, recompute=False, old_logprob_forward=False) == 336 + 100 + 12


def test_figures_split_the_step_into_generation_and_training() -> None:
    c = StepCounts(
        seconds=5.0, gen_seconds=4.0, tokens=3000, scored=2000, gen_prompt_tokens=1000, gen_tokens=2000
    )
    s = Shape(body=1_000_000, head=100_000)
    f = figures(c, Setup(s), peak=1e12)
    assert f["perf/gen_share"] == pytest.approx(0.8)
    assert f["perf/gen_tokens_per_s"] == pytest.approx(500.0)
    assert f["perf/train_tokens_per_s"] == pytest.approx(3000.0)
    need = 6e6 * 3000 + 6e5 * 2000
    assert f["perf/mfu"] == pytest.approx(need / 1.0 / 1e12)
    assert f["perf/mfu_step"] == pytest.approx(need / 5.0 / 1e12)
    assert f["perf/hfu"] == pytest.approx((need + 2e6 * 3000 + 2e5 * 2000) / 5.0 / 1e12)
    assert "perf/mfu" not in figures(c, Setup(s), peak=None)  # no known card: no MFU claimed


def test_the_old_logprob_forward_runs_only_off_policy_or_under_vllm() -> None:
    assert not old_logprob_forward(
        per_device=8, accumulation=4, generation_batch=32, num_iterations=1, vllm=False
    )
    assert old_logprob_forward(8, 1, 64, 1, False)  # one generation feeds 8 optimizer steps
    assert old_logprob_forward(8, 4, 32, 2, False)  # mu = 2 updates per generation
    assert old_logprob_forward(8, 4, 32, 1, True)  # vLLM's importance-sampling correction


def test_the_metrics_callback_writes_the_phase_figures_of_a_grpo_step(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from transformers import TrainerControl, TrainerState

    from training_core.run.metrics import MetricsWriter, make_callback

    writer = MetricsWriter(tmp_path / "metrics.jsonl")
    cb = make_callback(writer, progress=False, n_params=1, setup=Setup(Shape(10, 3)))
    cb.on_train_begin(None, TrainerState(num_input_tokens_seen=0), TrainerControl())
    cb.last_time -= 2.0  # the interval: two seconds, half of them generating
    logs = {"loss": 0.1, "num_tokens": 300.0, "perf/gen_time_s": 1.0, "perf/gen_tokens": 200.0}
    cb.on_log(None, TrainerState(global_step=1, max_steps=2), TrainerControl(), logs=logs)
    writer.close()
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert row["perf/gen_share"] == pytest.approx(0.5, abs=0.05)
    assert row["perf/gen_tokens_per_s"] == pytest.approx(200.0, rel=0.1)
    assert row["perf/train_tokens_per_s"] == pytest.approx(300.0, rel=0.1)
