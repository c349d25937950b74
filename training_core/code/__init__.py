"""Code tasks: MBPP, this repo's test problems, the code game, and their datasets/eval/callbacks.

Importing the package registers its datasets, the ``mbpp`` eval task and the ``mbpp_eval`` callback
in training_core's tables, which list this package as a provider.
Programs written by the model run only through ``training_core.sandbox``.
"""

from training_core.code import datasets as datasets
from training_core.code import mbpp_eval as mbpp_eval

__all__ = ["datasets", "mbpp_eval"]
