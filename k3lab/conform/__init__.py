"""The conformance suite (``k3lab.conform``): a pytest plugin (``plugin.py``, registered through the
``pytest11`` entry point) and the checks run against a live deployment (``test_*.py``)."""
