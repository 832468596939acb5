"""Where the C API lives inside the installed package (docs/c_api.md).

A wheel installs the header ``emel/memory.h`` under ``emel/memory/include``
and the shared library ``emel_memory_c`` under ``emel/memory/lib``; a C or
C++ runtime compiles with ``-I<include_dir()>`` and links ``library_path()``::

    cc app.c -I"$(python -c 'import emel.memory.native as n; print(n.include_dir())')" \\
       "$(python -c 'import emel.memory.native as n; print(n.library_path())')" \\
       -Wl,-rpath,"$(python -c 'import emel.memory.native as n; print(n.library_dir())')"
"""

from __future__ import annotations

import os
import sys

__all__ = ["include_dir", "library_dir", "library_path"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_HINT = ("the C API is part of the built package: install it with `pip install .` "
         "(a source checkout or a build without the emel_memory_c target has no native files)")


def _library_name() -> str:
    if sys.platform == "win32":
        return "emel_memory_c.dll"
    if sys.platform == "darwin":
        return "libemel_memory_c.dylib"
    return "libemel_memory_c.so"


def include_dir() -> str:
    """The directory to pass as ``-I``: it holds ``emel/memory.h``."""
    path = os.path.join(_HERE, "include")
    if not os.path.isfile(os.path.join(path, "emel", "memory.h")):
        raise FileNotFoundError(f"emel C API header not found at "
                                f"{os.path.join(path, 'emel', 'memory.h')}; {_HINT}")
    return path


def library_dir() -> str:
    """The directory holding the shared library (for ``-L`` and ``-Wl,-rpath``)."""
    return os.path.dirname(library_path())


def library_path() -> str:
    """The full path of the shared library ``emel_memory_c``."""
    path = os.path.join(_HERE, "lib", _library_name())
    if not os.path.isfile(path):
        raise FileNotFoundError(f"emel C API library not found at {path}; {_HINT}")
    return path
