"""emel.memory: tensor memory planning for ML computation graphs."""

from .errors import FAILURE_CODES, PlanError

__all__ = ["FAILURE_CODES", "PlanError"]
