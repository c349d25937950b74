"""Prompt templates shared by training_core.rl, the data loaders and the recipes (torch-free).

R1_ZERO_PROMPT is DeepSeek-R1-Zero's (DeepSeek-AI 2025) as CS336 spring 2025 assignment 5 uses it: the
prompt ends inside an opened ``<think>``, so a completion looks like ``... </think> <answer> ... </answer>``.
ALPACA_TEMPLATE is the Alpaca instruction format (Taori et al. 2023) used for SFT and the DPO loss.
"""

from training_core.errors import UsageError

R1_ZERO_PROMPT = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant solves it. "
    "The Assistant first thinks about the reasoning process in the mind and then provides the User with "
    "the answer. The reasoning process is enclosed within <think> </think> and answer is enclosed within "
    "<answer> </answer> tags, respectively, i.e., <think> reasoning process here </think> "
    "<answer> answer here </answer>.\nUser: {question}\nAssistant: <think>"
)

ALPACA_TEMPLATE = (
    "Below is an instruction that describes a task. Write a response that appropriately completes the "
    "request.\n\n### Instruction:\n{instruction}\n\n### Response:\n{response}"
)

# Named question templates of the MATH and GSM8K loaders (training_core.data).
TEMPLATES: dict[str, str] = {"r1_zero": R1_ZERO_PROMPT, "plain": "{question}"}


def render(question: str, template: str) -> str:
    """``question`` in a named template ("r1_zero", "plain") or a format string with ``{question}``."""
    fmt = TEMPLATES.get(template, template)
    if "{question}" not in fmt:
        raise UsageError(
            f"template must be one of {', '.join(TEMPLATES)} or contain {{question}}: {template!r}"
        )
    return fmt.replace("{question}", question)
