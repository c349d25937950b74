"""A sandbox for model-written Python: bubblewrap namespaces, cgroup caps, no network, no survivors.

Use ``run_python`` for one program or ``SandboxPool`` for many in parallel. Without real isolation
``detect()`` raises ``SandboxUnavailable`` unless unsafe mode was asked for (``allow_unsafe``).
"""

from training_core.sandbox.isolation import Isolation, SandboxUnavailable, allow_unsafe, detect
from training_core.sandbox.pool import SandboxPool, default_pool
from training_core.sandbox.runner import SandboxLimits, SandboxResult, Status, run_python
from training_core.sandbox.values import Opaque

__all__ = ["Isolation", "Opaque", "SandboxLimits", "SandboxPool", "SandboxResult", "SandboxUnavailable",
           "Status", "allow_unsafe", "default_pool", "detect", "run_python"]
