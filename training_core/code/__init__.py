"""Code tasks: MBPP, this repo's test problems, the code game, and their datasets/eval/callbacks.

Importing the package registers its datasets (and, once present, eval tasks and callbacks) in
training_core's tables; training_core.data and training_core.eval_tasks list it as a provider.
Programs written by the model run only through ``training_core.sandbox``.
"""

from training_core.code import datasets as datasets

__all__ = ["datasets"]
