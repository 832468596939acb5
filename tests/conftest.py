"""pytest configuration for the property tests.

Hypothesis profiles: ``ci`` (500 examples, no deadline) is loaded when the
environment variable ``CI`` is set, ``dev`` (100 examples) otherwise;
``HYPOTHESIS_PROFILE=<name>`` picks one explicitly (``quick``: 20 examples, no shrinking).
"""

import os

from hypothesis import HealthCheck, Phase, settings

_COMMON = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("ci", max_examples=500, print_blob=True, **_COMMON)
settings.register_profile("dev", max_examples=100, **_COMMON)
# A quick pass while iterating: few examples and no shrinking, so a broken
# property fails in seconds (HYPOTHESIS_PROFILE=quick); rerun with dev for the minimal example.
settings.register_profile("quick", max_examples=20,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate], **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


# -- the repository's data (tests/repo_data.py, data/README.md) -----------------------------

import pytest  # noqa: E402

import repo_data  # noqa: E402


@pytest.fixture(scope="session")
def model_graph_path():
    """name -> path of a model graph of data/graphs (llama-tiny-training, ...)."""
    return repo_data.graph_path


@pytest.fixture(scope="session")
def model_documents():
    """path -> the parsed emel.graph/1 document of every model graph of data/graphs
    (read once per session; tests must not modify them)."""
    import json
    return {path: json.loads(path.read_text()) for path in repo_data.GRAPH_FILES}


@pytest.fixture(scope="session")
def challenging_instance():
    """name (A-K) -> (lower, upper, size) of MiniMalloc's challenging instance."""
    import emel.memory as mm

    def load(name):
        _, lower, upper, size = mm.read_buffers_csv(repo_data.challenging_path(name))
        return lower, upper, size
    return load


@pytest.fixture(scope="session")
def idealloc_instance():
    """name (pangu_2.6B, S_1, Y_1) -> (lower, upper, size) of an idealloc trace."""
    import emel.memory as mm

    def load(name):
        _, lower, upper, size = mm.read_buffers_csv(repo_data.IDEALLOC / f"{name}.csv")
        return lower, upper, size
    return load
