"""What the report package's HTML pages share: escaping, embedded plots, the verdict's colours, the
base CSS and the atomic write.

Invariant: a page built from these parts is self-contained (inline CSS, plots as PNG data URIs, no
external URL), every piece of text it shows is HTML-escaped, and a page is never left half-written.
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imsave
from matplotlib.ticker import FuncFormatter, NullFormatter

from loadtests.judge.gates import FAIL, INCONCLUSIVE, PASS

MISSING = "—"

VERDICT_COLOURS: dict[str, str] = {PASS: "#2e7d32", FAIL: "#c62828", INCONCLUSIVE: "#ef6c00"}
"""Each verdict word's colour, on every page (a verdict's CSS class is its word in lower case)."""

CSS = (
    """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #212121;
       max-width: 1100px; margin: 24px auto; padding: 0 16px; }
h1 { margin: 0 0 8px; } h2 { margin: 28px 0 4px; border-bottom: 1px solid #ddd; padding-bottom: 2px; }
p.how { color: #555; margin: 2px 0 10px; font-style: italic; }
.verdict { display: inline-block; font-size: 26px; font-weight: 700; color: #fff; padding: 4px 18px;
           border-radius: 6px; margin: 4px 0 10px; }
"""
    + "".join(f".verdict.{word.lower()} {{ background: {colour}; }}\n" for word, colour in VERDICT_COLOURS.items())
    + """.note { background: #fff8e1; border-left: 4px solid #ffb300; padding: 6px 10px; margin: 8px 0; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f5f5f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
img.plot { max-width: 100%; border: 1px solid #eee; }
.empty { color: #777; }
"""
)
"""The CSS every page starts with: text, headings, tables, plots and the verdict's block."""


def write_atomically(path: Path, write: Callable[[Path], Any]) -> None:
    """``write`` to a temporary name, renamed into place; when the disk refuses (``OSError``, raised),
    the temporary file is removed: a failed write leaves the file as it was and nothing beside it."""
    temporary = path.with_name(path.name + ".tmp")
    try:
        write(temporary)
        temporary.replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise


def number(value: Any) -> float | None:
    """The value as a finite float; None when it is not a number or not finite."""
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return result if math.isfinite(result) else None


def missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, (list, tuple, dict, set, np.ndarray)):
        return False
    return bool(pd.isna(value))


def text(value: Any) -> str:
    """Escaped text of a value; a dash for a missing one."""
    if missing(value):
        return MISSING
    if isinstance(value, (list, tuple)):
        return html.escape(" ".join(str(item) for item in value))
    return html.escape(str(value))


def section(title: str, how: str, body: str, level: int = 2, anchor: str = "") -> str:
    """A titled section: ``how`` says in one paragraph how to read it; ``anchor`` (a safe id) links to it."""
    identity = f' id="{anchor}"' if anchor else ""
    heading = f"<h{level}{identity}>{html.escape(title)}</h{level}>"
    return f'<section>{heading}<p class="how">{html.escape(how)}</p>\n{body}</section>'


def empty(message: str) -> str:
    return f'<p class="empty">{html.escape(message)}</p>'


def seconds_tick(value: float, _position: object = None) -> str:
    """A tick of a seconds axis in the unit it is read in: ``0.1 ms``, ``10 ms``, ``2 s``."""
    if value <= 0:
        return "0"
    return f"{value * 1000:g} ms" if value < 1 else f"{value:g} s"


def count_tick(value: float, _position: object = None) -> str:
    """A tick of a count axis: ``1``, ``100``, ``10k``, ``1M``."""
    for size, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:g}{suffix}"
    return f"{value:g}"


def plain_log_ticks(axis: Axis, label: Callable[[float, object], str]) -> None:
    """Label a log (or symlog) axis's decades with ``label`` and leave its minor ticks unlabelled:
    plain text, not matplotlib's ``10^n`` in mathtext, whose grammar costs a report 0.1-0.2 s of
    CPU to build. Call it after setting the scale (which resets the formatters)."""
    axis.set_major_formatter(FuncFormatter(label))
    axis.set_minor_formatter(NullFormatter())


def png(figure: Figure, levels: int | None = None) -> str:
    """The figure as an embedded PNG. The figure is left as drawn: no pyplot state holds it, so it
    goes with its last reference (clearing it built every axes' ticks anew, 5% of a report's CPU).
    ``levels``: that many shades per colour channel (black and white kept), for a page of many plots:
    16 makes a dense plot's PNG about 45% smaller, its colours within 1/30 of their own."""
    buffer = io.BytesIO()
    canvas = FigureCanvasAgg(figure)
    if levels is None:
        canvas.print_png(buffer)
    else:
        canvas.draw()
        step = 255.0 / (levels - 1)
        rgb = np.asarray(canvas.buffer_rgba())[..., :3]
        imsave(buffer, (np.rint(rgb / step) * step).round().astype(np.uint8), format="png", dpi=figure.dpi)
    encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img class="plot" alt="plot" src="data:image/png;base64,{encoded}">'
