"""A sandbox for model-written Python: bubblewrap namespaces, a seccomp filter, cgroup caps, no
network, no survivors.

Use ``run_python`` for one program or ``SandboxPool`` for many in parallel. Where the sandbox cannot
apply what it promises ``detect()`` raises ``SandboxUnavailable`` unless a weaker level was asked for
by name (``set_level("rlimits")`` or ``"unsafe"``, the recipe's ``sandbox.isolation``).
``set_level("gvisor")`` runs each program in a gVisor sandbox of its own (``gvisor``), and is refused
where runsc does not run.
"""

from training_core.sandbox.isolation import allow_unsafe, detect, set_level
from training_core.sandbox.launcher import Isolation, SandboxUnavailable
from training_core.sandbox.pool import SandboxPool, default_pool, resident
from training_core.sandbox.results import SandboxLimits, SandboxResult, Status
from training_core.sandbox.runner import run_python
from training_core.sandbox.values import Opaque

__all__ = [
    "Isolation",
    "Opaque",
    "SandboxLimits",
    "SandboxPool",
    "SandboxResult",
    "SandboxUnavailable",
    "Status",
    "allow_unsafe",
    "default_pool",
    "detect",
    "resident",
    "run_python",
    "set_level",
]
