"""The dashboard's chart: queue depth and throughput over the last hour, drawn as inline SVG.

Drawn on the server, so the page shows it with JavaScript off; the page's script fetches a
fresh copy (``GET /admin/chart.svg``) on each refresh. Numbers only, no text from a job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any

WIDTH, PANEL_HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 760, 150, 48, 110, 22, 22
COLORS = {"embed": "#2f6fde", "bulk": "#7a5bc4", "fast": "#d9772b"}
WINDOW_MS = 3600 * 1000


def _nice_max(value: float) -> float:
    """The smallest 1-2-5 step at or above ``value`` (at least 1), so axis labels read well."""
    if value <= 1:
        return 1.0
    exponent = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * exponent:
            return float(step * exponent)
    return float(10 * exponent)


def _panel(title: str, points: dict[str, list[tuple[int, float]]], now_ms: int, top: int, unit: str) -> list[str]:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, PANEL_HEIGHT - TOP - BOTTOM
    peak = _nice_max(max((v for series in points.values() for _, v in series), default=0))
    x0, y0 = LEFT, top + TOP

    def x(t: int) -> float:
        return x0 + plot_w * (1 - (now_ms - t) / WINDOW_MS)

    def y(v: float) -> float:
        return y0 + plot_h * (1 - v / peak)

    parts = [f'<text x="{x0}" y="{top + 15}" class="chart-title">{escape(title)}</text>']
    for fraction in (0, 0.5, 1):
        gy = y(peak * fraction)
        parts.append(f'<line x1="{x0}" y1="{gy:.1f}" x2="{x0 + plot_w}" y2="{gy:.1f}" class="grid"/>')
        parts.append(f'<text x="{x0 - 6}" y="{gy + 4:.1f}" text-anchor="end" class="axis">{peak * fraction:g}</text>')
    for minutes in range(0, 61, 10):
        gx = x(now_ms - minutes * 60_000)
        label = "now" if minutes == 0 else f"-{minutes}m"
        parts.append(f'<text x="{gx:.1f}" y="{y0 + plot_h + 15}" text-anchor="middle" class="axis">{label}</text>')
    for i, (queue, series) in enumerate(sorted(points.items())):
        color = COLORS.get(queue, "#555")
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in series if now_ms - t <= WINDOW_MS)
        if coords:
            parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2" data-queue="{escape(queue)}"/>')
        last = f"{series[-1][1]:g} {unit}" if series else "no data"
        ly = y0 + 14 + 18 * i
        parts.append(f'<rect x="{x0 + plot_w + 12}" y="{ly - 9}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{x0 + plot_w + 27}" y="{ly}" class="legend">{escape(queue)}: {escape(last)}</text>')
    return parts


def chart_svg(samples: Sequence[dict[str, Any]], now_ms: int) -> str:
    """Two panels, depth (queued + deferred + running) and throughput, one line per queue."""
    queues = sorted({name for sample in samples for name in sample["queues"]}) or ["bulk", "embed", "fast"]
    depth: dict[str, list[tuple[int, float]]] = {q: [] for q in queues}
    rate: dict[str, list[tuple[int, float]]] = {q: [] for q in queues}
    for sample in samples:
        for queue, counts in sample["queues"].items():
            depth[queue].append((sample["t"], float(counts["queued"] + counts["deferred"] + counts["in_progress"])))
            value = sample.get("throughput_per_min", {}).get(queue)
            if value is not None:
                rate[queue].append((sample["t"], float(value)))
    height = 2 * PANEL_HEIGHT
    body = _panel("Queue depth (jobs waiting or running)", depth, now_ms, 0, "jobs")
    body += _panel("Throughput (jobs finished per minute)", rate, now_ms, PANEL_HEIGHT, "/min")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="100%" role="img" '
        f'aria-label="Queue depth and throughput over the last hour" data-samples="{len(samples)}">'
        "<style>.grid{stroke:#ddd}.axis{font:10px sans-serif;fill:#666}.legend{font:11px sans-serif;fill:#222}"
        ".chart-title{font:bold 12px sans-serif;fill:#222}</style>" + "".join(body) + "</svg>"
    )
