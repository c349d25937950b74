"""The run configuration: dataclasses whose defaults are the documented base of every recipe.

Recipes (``recipes/*.toml``) and ``--set key=value`` override these fields by dotted key
(``train.learning_rate``); ``training_core.recipes`` does the merging and type checking. This module
imports no torch, trl or transformers so ``--dry-run`` and the laptop's tooling stay light.

Every class is frozen: a resolved config is never changed after ``resolve``. What a run settles only at
start (the precision the GPU can train in, ``model.from_run``'s checkpoint) becomes a new config made
with ``dataclasses.replace`` before the run header is written, so the header shows what ran.

Dr GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective") is the
default and every shipped recipe keeps it: ``loss_type="dr_grpo"`` (sum the per-token loss and
divide by the constant ``max_completion_length``), ``scale_rewards="none"`` (advantage = reward -
group mean, no division by the group's std) and ``beta=0.0`` (no KL penalty, no reference model).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

Precision = Literal["auto", "bf16", "bf16_amp", "bf16_kahan", "bf16_pure", "fp16", "fp32"]
Engine = Literal["auto", "hf", "static", "paged", "vllm"]


@dataclass(frozen=True)
class ModelConfig:
    name: str = "Qwen/Qwen2-0.5B-Instruct"  # HF hub id, local directory, or "tiny" (models.tiny)
    # Weights/compute dtype (docs/training.md, "Precision"). "auto": "bf16" where the GPU supports it (compute
    # capability >= 8.0), fp16 on older GPUs (V100, T4, RTX 20xx), fp32 on CPU. "bf16": bf16 compute with
    # every update kept, settled at start from the model's size and the GPUs' memory
    # (training_core.hardware.precision.choose) into "bf16_amp" (fp32 master weights under bf16 autocast, 16
    # bytes per parameter) or "bf16_kahan" (bf16 weights, Kahan-compensated AdamW from torch-optimi, 10
    # bytes). "bf16_pure": bf16 weights and plain AdamW (8 bytes; updates under ~1/256 of a weight round away:
    # a warning at small learning rates). "fp16": fp32 weights with fp16 autocast and loss scaling. A GPU
    # without bf16 gets fp16 instead at run time (training_core.hardware.platform.train_precision).
    precision: Precision = "auto"
    # Recompute activations in backward to fit bigger batches (A100/H100 presets turn it on). "auto": off
    # where the step's memory estimate fits the GPU without it (training_core.run.step_plan). Default off.
    gradient_checkpointing: bool | Literal["auto"] = False
    # LoRA rank; 0 = full fine-tuning (default). The code recipes use r=16, alpha=32 (recipes/code_*.toml).
    lora_r: int = 0
    lora_alpha: int = 32  # LoRA scaling alpha (unused when lora_r = 0)
    lora_dropout: float = 0.05  # LoRA dropout probability (unused when lora_r = 0)
    # Start from another run's newest checkpoint: a run id under this run's runs directory (e.g. an
    # `sft` run before GRPO). Replaces `name` when set; "" = off. A checkpoint path in `name` works too.
    from_run: str = ""


@dataclass(frozen=True)
class DataConfig:
    # Registered dataset name (training_core.data.loaders.DATASETS). Default: the 12 fixed arithmetic
    # questions.
    dataset: str = "arithmetic_fixed"
    # Split passed to the loader (GSM8K: "train" / "test"). Default "train".
    split: str = "train"
    # Keep only the first N rows; 0 = all rows (the overfit recipes use the first 20-100 GSM8K rows).
    n_rows: int = 0
    # "chat": prompts are message lists rendered with the tokenizer's chat template (instruct models);
    # "plain": raw text (the tiny model has no chat template). Default "chat".
    prompt_style: Literal["chat", "plain"] = "chat"
    # System message prepended in chat style; "" = none. Default "".
    system_prompt: str = ""
    # Prompt length limit in tokens; longer prompts are dropped with a count reported (TRL 1.x removed
    # max_prompt_length, so we filter ourselves). Default 64 (the baseline's value).
    max_prompt_length: int = 64
    # Extra keyword arguments for the dataset loader (e.g. synthetic arithmetic: n, seed, max_operand).
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RewardSpec:
    # Registered reward name (training_core.rewards.registry).
    name: str = ""
    # Weight in TRL's weighted sum of rewards. Default 1.0.
    weight: float = 1.0
    # Keyword arguments bound to the reward function (or passed to a reward factory).
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CallbackSpec:
    # Registered callback name (training_core.methods.callbacks.CALLBACKS), e.g. an extra eval.
    name: str = ""
    # Keyword arguments for the callback factory.
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainConfig:
    # TRL loss aggregation. "dr_grpo": sum over tokens / max_completion_length (Liu et al. 2025). TRL's
    # own default is "dapo", which is why the team's earlier script silently ran the wrong loss.
    loss_type: Literal["dr_grpo", "grpo", "bnpo", "dapo", "cispo", "sapo", "luspo", "vespo"] = "dr_grpo"
    # Reward scaling in the advantage. "none": A = r - mean(group), no std division (Liu et al. 2025).
    scale_rewards: Literal["none", "group", "batch"] = "none"
    # KL penalty coefficient; 0 = no reference model (Dr GRPO and the team's recipes). Default 0.0.
    beta: float = 0.0
    # Passes over the prompt set. Default 3 (baseline). Ignored when max_steps > 0.
    num_train_epochs: float = 3.0
    # Optimizer steps to run; -1 = derived from epochs. Default -1.
    max_steps: int = -1
    # Peak learning rate (AdamW). Default 5e-6 (baseline).
    learning_rate: float = 5e-6
    # Fraction of steps of linear warmup. Default 0.1 (baseline).
    warmup_ratio: float = 0.1
    # AdamW weight decay. Default 0.0 (baseline).
    weight_decay: float = 0.0
    # transformers scheduler name. Default "linear".
    lr_scheduler_type: str = "linear"
    # Gradient clipping norm. Default 1.0.
    max_grad_norm: float = 1.0
    # transformers optimizer name ("adamw_torch", "adamw_bnb_8bit" for 8-bit AdamW). Default "adamw_torch".
    optim: str = "adamw_torch"
    # Completions per device per micro-step (TRL counts completions, not prompts). Default 2 (baseline).
    # 0 = auto: the largest micro-batch the memory estimate fits, with accumulation making up
    # generation_batch_size (on-policy: one generation per optimizer step; training_core.run.step_plan).
    per_device_train_batch_size: int = 2
    # Micro-steps per optimizer step. Default 4 (baseline).
    gradient_accumulation_steps: int = 4
    # Completions per prompt (the GRPO group size G). Default 4 (baseline).
    num_generations: int = 4
    # Completions generated at once; 0 = TRL default (batch x grad acc). Must be a multiple of
    # num_generations; overfit_ultra_small needs 8 because its batch (4) is smaller than its group (8).
    generation_batch_size: int = 0
    # Completion length cap in tokens. Pinned: Dr GRPO divides the loss by this constant. Default 50.
    max_completion_length: int = 50
    # Sampling temperature. 0.7 keeps reward spread inside a group; too low gives no learning signal.
    temperature: float = 0.7
    # Nucleus sampling. Default 1.0 (off).
    top_p: float = 1.0
    # PPO-style clip range epsilon. Default 0.2 (TRL's).
    epsilon: float = 0.2
    # Policy updates per generation batch (mu in the GRPO paper). Default 1.
    num_iterations: int = 1
    # Generate with vLLM. "auto": on when vLLM is importable and a GPU is present. Default "auto".
    use_vllm: bool | Literal["auto"] = "auto"
    # vLLM placement: "colocate" shares the training GPU (one-GPU hosts), "server" uses `trl vllm-serve`.
    vllm_mode: Literal["colocate", "server"] = "colocate"
    # Fraction of GPU memory vLLM may take in colocate mode. Default 0.3.
    vllm_gpu_memory_utilization: float = 0.3
    # Zero truncated completions' loss. Default False.
    mask_truncated_completions: bool = False
    # DataLoader workers. Must stay 0: worker processes break TRL's generation batching.
    dataloader_num_workers: int = 0
    # Log (metrics.jsonl, W&B, stdout) every N optimizer steps. Default 1.
    logging_steps: int = 1

    @property
    def generation_batch(self) -> int:
        """Completions generated at once: generation_batch_size, or TRL's default batch x accumulation."""
        t = self
        return t.generation_batch_size or t.per_device_train_batch_size * t.gradient_accumulation_steps


@dataclass(frozen=True)
class GenerationSettings:
    """How GRPO generates completions (training_core.generation; docs/training.md, "Generation engines")."""

    # "hf": TRL's HF generate(). "static": a static KV cache, its decode step torch.compile'd into CUDA
    # graphs. "paged": transformers' continuous batching. "vllm": TRL's vLLM (train.vllm_mode). "auto"
    # (default): vLLM where train.use_vllm resolves true, else "static" on CUDA, else "hf" (the CPU path).
    # An engine that fails on a host falls back to "hf" in one printed line and the run goes on.
    engine: Engine = "auto"
    # torch.compile of the static engine's decode step. "auto": on CUDA only (where transformers compiles);
    # "on": on every device (slow on a CPU); "off": the static cache alone. Default "auto".
    compile: Literal["auto", "on", "off"] = "auto"
    compile_backend: str = "inductor"  # torch.compile backend of the static engine
    compile_mode: str = "reduce-overhead"  # torch.compile mode; "reduce-overhead" = CUDA graphs


@dataclass(frozen=True)
class EvalConfig:
    # Registered eval task (training_core.eval.tasks.EVAL_TASKS) or "none". Default "arithmetic".
    task: str = "arithmetic"
    # Evaluate every N optimizer steps; 0 = only at start and end. Default 25.
    interval: int = 25
    # Distinct problems per evaluation, each scored once; 0 = every problem the task has. Default 12.
    n: int = 12
    # Greedy generation cap; 0 = train.max_completion_length. Default 0.
    max_new_tokens: int = 0
    # Evaluate before the first step (the baseline to compare against). Default True.
    at_start: bool = True
    # Evaluate after the last step. Default True.
    at_end: bool = True
    # Extra keyword arguments for the eval task (e.g. seed, split).
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointConfig:
    # Save every N optimizer steps into <run-dir>/checkpoints; 0 = never. A kill loses at most N steps.
    every: int = 50
    # Checkpoints kept (oldest removed first). Default 2.
    keep: int = 2


@dataclass(frozen=True)
class LoggingConfig:
    # W&B project; "" = $WANDB_PROJECT or "pippa". W&B is online with WANDB_API_KEY, offline with
    # WANDB_MODE=offline, off otherwise.
    wandb_project: str = ""
    # W&B entity; "" = $WANDB_ENTITY or the key's default.
    wandb_entity: str = ""
    # Print one progress line per logged step to stdout (what `pippa logs -f` shows). Default True.
    progress: bool = True


@dataclass(frozen=True)
class SamplesConfig:
    """What the model wrote, in <run-dir>/samples.jsonl (docs/samples.md; GRPO and self-play)."""

    # Record a sample of the batch every N optimizer steps; 0 = a tenth of train.max_steps (every 10
    # steps when the run counts epochs instead); -1 = never. Evaluations are sampled whenever they run.
    every: int = 0
    # Rows kept of each sampled batch or evaluation (the first ones, a spread of the groups). Default 8.
    per_step: int = 8
    # samples.jsonl (and its superseded rows) stay under this many MB: the oldest steps are thinned
    # first, the newest never. Default 20.
    cap_mb: float = 20.0


@dataclass(frozen=True)
class AlarmsConfig:
    """Thresholds of the alarms that curves hide (pippa_contract.alarms; docs/samples.md)."""

    # No learning signal: reward/frac_zero_std at or above this share of groups... Default 0.9.
    zero_std_threshold: float = 0.9
    # ...for this many logged steps in a row. Default 10.
    zero_std_steps: int = 10
    # Length collapse: the mean completion length under this share of its early value. Default 0.5.
    length_ratio: float = 0.5
    # Steps averaged for "early" and for "now" (and truncated in a row to count as pinned). Default 10.
    length_window: int = 10
    # Reward without substance: eval accuracy this far under its best while the reward rose. Default 0.1.
    substance_drop: float = 0.1


@dataclass(frozen=True)
class SandboxConfig:
    # How model-written code (code rewards, MBPP eval) is isolated. "strict": bubblewrap namespaces, a
    # seccomp filter, and cgroup caps on all of a run's processes together (root); the run refuses to
    # start without them. "rlimits": the same but memory and processes capped per process (rlimits),
    # what an ordinary user or root without writable cgroups gets. "unsafe": rlimits only, the program
    # sees the host's file system and network with the trainer's rights. "gvisor": each program in a
    # gVisor sandbox of its own (runsc: a kernel of its own, no host counters; ~6x strict's CPU per
    # program), refused in one line where runsc is missing or fails. The run header shows which.
    isolation: Literal["gvisor", "strict", "rlimits", "unsafe"] = "strict"


@dataclass(frozen=True)
class LaunchConfig:
    # Training processes per host: 1 = one plain `python -m training_core.train` (the default; no
    # accelerate). N > 1 = `accelerate launch` with N ranks (one per GPU; gloo ranks on a CPU host).
    processes: int = 1
    # How the ranks share the model. "ddp": a full replica per rank, gradients all-reduced; "zero2":
    # DeepSpeed ZeRO-2 (optimizer state and gradients sharded); "zero3": ZeRO-3 (weights sharded too, for
    # models whose training state does not fit one GPU; the team's 7-GPU runs). Rajbhandari et al. 2020.
    strategy: Literal["ddp", "zero2", "zero3"] = "ddp"
    # accelerate's mixed precision. "auto": from model.precision (any bf16 mode -> "bf16", fp16 ->
    # "fp16", fp32 -> "no"); an explicit value must agree with it (one precision per run).
    mixed_precision: Literal["auto", "no", "bf16", "fp16"] = "auto"
    # GPU ids this run may use (CUDA_VISIBLE_DEVICES), e.g. "0-6" or "0,2"; "" = every GPU. Lets several
    # runs share one 8-GPU host; with processes = 1 it only pins the GPU.
    gpus: str = ""
    # vLLM server mode (train.use_vllm = true, train.vllm_mode = "server"): the GPUs, out of the run's, that
    # run `trl vllm-serve`; the others train (training_core.generation.vllm_server). E.g. "7" beside
    # processes = 7.
    vllm_gpus: str = ""
    # Tensor-parallel size of the server; 0 = every server GPU. Must divide their number.
    vllm_tensor_parallel: int = 0
    # Port of the server on 127.0.0.1 (the trainer connects there). Default 8000 (TRL's).
    vllm_port: int = 8000
    # Seconds to wait for the server's /health before the run fails (model download and load). Default 600.
    vllm_timeout_s: float = 600.0
    # Extra `trl vllm-serve` arguments, e.g. ["--max-model-len", "8192"] (the team's code runs).
    vllm_args: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SFTSettings:
    # Row column holding the target response; the loss is taken on its tokens only (TRL's
    # prompt-completion format). Default "answer" (the arithmetic loaders' answer; GSM8K's worked
    # solution is "solution").
    response_column: str = "answer"


@dataclass(frozen=True)
class DPOSettings:
    # Strength of the pull towards the reference (initial) model (Rafailov et al. 2023). Default 0.1.
    beta: float = 0.1
    # TRL's DPO loss: "sigmoid" is the paper's; "ipo" (Azar et al. 2023) and "hinge" for comparison.
    loss_type: Literal["sigmoid", "ipo", "hinge"] = "sigmoid"
    # Row column holding the preferred response. Default "answer" (the right answer).
    chosen_column: str = "answer"
    # Row column holding the dispreferred one; a row without it gets another row's different chosen
    # value (a wrong answer), drawn with the run's seed. Default "rejected".
    rejected_column: str = "rejected"


@dataclass(frozen=True)
class SelfPlayConfig:
    """SPIRAL self-play (Liu et al. 2025, arXiv 2506.24119); used when ``method = "selfplay"``. The
    update reads train.learning_rate, max_grad_norm, temperature, top_p, max_completion_length (generation
    cap and the Dr GRPO divisor), num_iterations (PPO epochs), epsilon (clip range), max_steps,
    warmup_ratio, lr_scheduler_type and weight_decay; eval.interval / eval.n schedule the game eval."""

    # The game; only "tictactoe" (TextArena TicTacToe-v0's rules and wording) for now.
    game: Literal["tictactoe"] = "tictactoe"
    # "spiral": SPIRAL's instruction + TextArena observation, answer in \boxed{} (chat template per
    # data.prompt_style). "board": the nine cells and the player's mark, for the tiny model. Default "spiral".
    prompt: Literal["spiral", "board"] = "spiral"
    # Turn samples per optimizer step: games are played until this many non-zero-advantage turns exist,
    # then this many are drawn from them (SPIRAL: rollout_batch_size 128). Default 128.
    samples_per_step: int = 128
    # Games generated together in one batch of HF generate calls. Default 16.
    parallel_games: int = 16
    # Turns (both players') after which a game is stopped and scored a draw (SPIRAL: max_turns 50).
    max_turns: int = 50
    # EMA decay α of the per-role baselines, b ← α·b + (1−α)·R (SPIRAL: 0.95).
    rae_decay: float = 0.95
    # Drop turn samples whose advantage is exactly 0: they carry no gradient (SPIRAL: filter_zero_adv).
    drop_zero_advantage: bool = True
    # Sequences per forward/backward pass (gradient accumulation inside a step). Default 8.
    micro_batch_size: int = 8
    # Sampling of the evaluation games (SPIRAL: eval_temperature 0.6, eval_top_p 0.95); 0 = greedy.
    eval_temperature: float = 0.6
    eval_top_p: float = 0.95


Method = Literal["grpo", "sft", "dpo", "selfplay"]


@dataclass(frozen=True)
class RunConfig:
    # One line shown by `pippa recipes`.
    description: str = ""
    # Seed for data shuffling, sampling and init. Default 42 (the team's).
    seed: int = 42
    # Which trainer runs: "grpo" (TRL's GRPOTrainer with the rewards, Dr GRPO), "sft" (SFTTrainer, loss on
    # the response only), "dpo" (DPOTrainer on chosen/rejected pairs) or "selfplay" (SPIRAL self-play on a
    # game in pippa's own loop, training_core.selfplay). Default "grpo".
    method: Method = "grpo"
    # Extra modules imported before resolving names (they register datasets, rewards, evals, callbacks).
    plugins: list[str] = field(default_factory=list)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    # Reward functions with weights (TRL sums them weighted). Default: the baseline's two.
    rewards: list[RewardSpec] = field(
        default_factory=lambda: [
            RewardSpec("baseline_correctness", 1.0),
            RewardSpec("baseline_length_penalty", 0.3),
        ]
    )
    train: TrainConfig = field(default_factory=TrainConfig)
    # The GRPO generation engine (GRPO only; the other methods ignore it).
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    samples: SamplesConfig = field(default_factory=SamplesConfig)
    alarms: AlarmsConfig = field(default_factory=AlarmsConfig)
    # Extra trainer callbacks by registered name (e.g. the MBPP eval of the code recipes).
    callbacks: list[CallbackSpec] = field(default_factory=list)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    # Settings of the sft and dpo methods (GRPO ignores them).
    sft: SFTSettings = field(default_factory=SFTSettings)
    dpo: DPOSettings = field(default_factory=DPOSettings)
    # Settings of the selfplay method.
    selfplay: SelfPlayConfig = field(default_factory=SelfPlayConfig)
    # How many processes train and where (training_core.launch reads it; the trainer only records it).
    launch: LaunchConfig = field(default_factory=LaunchConfig)


@dataclass(frozen=True)
class Resolved:
    """A recipe resolved against a platform: the config a run trains with and where each value came from."""

    recipe: str
    recipe_path: str
    config: RunConfig
    platform: dict[str, Any]  # name, facts, preset changes ({key: {"from", "to"}})

    def as_dict(self) -> dict[str, Any]:
        cfg = dataclasses.asdict(self.config)
        return {
            "recipe": self.recipe,
            "recipe_path": self.recipe_path,
            "platform": self.platform,
            "dr_grpo": {
                k: cfg["train"][k] for k in ("loss_type", "scale_rewards", "beta", "max_completion_length")
            },
            "config": cfg,
        }

    def with_model(self, **changes: Any) -> Resolved:
        """This resolution with ``model`` settings replaced (what a run settles at start)."""
        model = dataclasses.replace(self.config.model, **changes)
        return dataclasses.replace(self, config=dataclasses.replace(self.config, model=model))
