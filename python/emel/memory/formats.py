"""Units and number formatting shared by every layer (bottom layer: standard library only).

``format_bytes`` used to live in ``emel.memory.planning``; it is re-exported
there, so ``emel.memory.planning.format_bytes`` keeps working.
"""

from __future__ import annotations

__all__ = ["format_bytes", "format_bytes_exact", "format_percent", "format_ratio", "fit_sentence"]


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


def format_bytes_exact(n: int) -> str:
    """Human units and the exact count: near a budget, 12.0 MiB and 12.0 MiB may differ."""
    return f"{format_bytes(n)} = {n:,} B" if n >= 1024 else f"{n} B"


def fit_sentence(dim: str, budget: int, value, needs, next_value, next_needs, who: str = "plan") -> str:
    """A fit search's answer in words (emel-fit): the value, what it needs, what the next one needs."""
    if value is None:
        return f"nothing fits in {format_bytes_exact(budget)}: {dim}={next_value} already needs " \
               f"{format_bytes_exact(next_needs)}"
    text = f"largest {dim} that fits in {format_bytes_exact(budget)}: {value} ({who} needs {format_bytes_exact(needs)}"
    if next_value is None:
        return text + f"; {value} is the largest value searched)"
    return text + f"; {dim}={next_value} needs {format_bytes_exact(next_needs)})"
