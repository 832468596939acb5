"""Units and number formatting shared by every layer (bottom layer: standard library only).

``format_bytes`` used to live in ``emel.memory.planning``; it is re-exported
there, so ``emel.memory.planning.format_bytes`` keeps working.
"""

from __future__ import annotations

__all__ = ["format_bytes", "format_percent", "format_ratio"]


def format_bytes(n: int) -> str:
    """Human units, binary: 1536 -> '1.5 KiB'. Past what a float holds (a
    400-digit budget), the exact count."""
    if n >= 2**1000:
        return f"{n} B"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def format_percent(value: float | None) -> str:
    """0.125 -> '12.5%'; None -> '-'."""
    return "-" if value is None else f"{value:.1%}"


def format_ratio(ratio: float | None) -> str:
    """1.0625 -> '1.062' (three decimals); None -> ''."""
    return "" if ratio is None else f"{ratio:.3f}"
