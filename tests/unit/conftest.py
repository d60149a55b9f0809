"""Hypothesis runs derandomized by default, so a property test gives the same verdict on every run
(CI and locally); ``HYPOTHESIS_PROFILE=explore`` draws fresh random examples to hunt for new cases."""
from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("k3lab", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", derandomize=False, deadline=None, print_blob=True, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "k3lab"))
