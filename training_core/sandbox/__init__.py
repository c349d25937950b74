"""A sandbox for model-written Python: separate process, limits, no network, no survivors.

Use ``run_python`` for one program or ``SandboxPool`` for many in parallel.
"""

from training_core.sandbox.isolation import Isolation, detect
from training_core.sandbox.pool import SandboxPool, default_pool
from training_core.sandbox.runner import SandboxLimits, SandboxResult, Status, run_python

__all__ = ["Isolation", "SandboxLimits", "SandboxPool", "SandboxResult", "Status", "default_pool", "detect",
           "run_python"]
