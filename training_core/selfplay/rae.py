"""Role-conditioned advantage estimation (SPIRAL, arXiv 2506.24119, section 3.3): one exponential moving
average of the return per (game, role), starting at 0. For each finished game and role the baseline is
read first, then updated with that game's return, and the advantage is the return minus the value
read: b ← α·b + (1−α)·R comes after A = R − b_old, so a game's own return never leaks into its baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RoleBaselines:
    decay: float = 0.95  # α; SPIRAL's role_baseline_ema_gamma
    values: dict[str, float] = field(default_factory=dict)  # "game/role" -> b

    def __post_init__(self) -> None:
        if not 0.0 < self.decay < 1.0:
            raise ValueError(f"the baseline decay must be in (0, 1), got {self.decay}")

    def get(self, game: str, role: int) -> float:
        return self.values.get(f"{game}/{role}", 0.0)

    def advantage(self, game: str, role: int, ret: float) -> float:
        """A = R − b for this game's return R, then b ← α·b + (1−α)·R."""
        key = f"{game}/{role}"
        b = self.values.get(key, 0.0)
        self.values[key] = self.decay * b + (1.0 - self.decay) * ret
        return ret - b

    def state_dict(self) -> dict[str, object]:
        return {"decay": self.decay, "values": dict(self.values)}

    def load_state_dict(self, state: dict[str, object]) -> None:
        values = state["values"]
        assert isinstance(values, dict)
        self.values = {str(k): float(v) for k, v in values.items()}
