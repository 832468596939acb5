"""python -m emel.memory: the emel-plan command."""

from .cli import entry

entry()
