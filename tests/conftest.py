"""pytest configuration for the property tests.

Hypothesis profiles: ``ci`` (500 examples, no deadline) is loaded when the
environment variable ``CI`` is set, ``dev`` (100 examples) otherwise;
``HYPOTHESIS_PROFILE=<name>`` picks one explicitly.
"""

import os
import sys

from hypothesis import HealthCheck, settings

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:          # graphgen.py / invariants.py live beside the tests
    sys.path.insert(0, _HERE)

_COMMON = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("ci", max_examples=500, print_blob=True, **_COMMON)
settings.register_profile("dev", max_examples=100, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))
