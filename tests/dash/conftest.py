"""Dashboard tests run Textual's Pilot under anyio's pytest plugin (asyncio backend)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
