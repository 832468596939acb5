"""python -m emel.memory: the emel-plan command."""

import sys

from .cli import main

sys.exit(main())
