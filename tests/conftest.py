"""Every test starts from the settings its own environment gives (k3lab/settings.py reads them once).

A test that sets a variable with ``monkeypatch.setenv`` before the code reads it sees it; one that
changes a setting for a block uses ``settings.patched(field=value)``.
"""
from __future__ import annotations

import pytest

from k3lab import settings


@pytest.fixture(autouse=True)
def _fresh_settings():
    settings.reset()
    yield
    settings.reset()
