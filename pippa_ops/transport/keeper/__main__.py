"""``python -m pippa_ops.transport.keeper SOCKET``: the keeper process (``keeper.server``)."""

import sys

from pippa_ops.transport.keeper.server import main

sys.exit(main())
