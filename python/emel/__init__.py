"""emel: memory planning for ML computation graphs (see emel.memory)."""

__version__ = "0.1.0"
