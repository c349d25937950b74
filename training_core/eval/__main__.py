"""``python -m training_core.eval``: see training_core.eval.cli."""

import sys

from training_core.eval.cli import main

sys.exit(main())
