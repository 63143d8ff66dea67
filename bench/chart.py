"""Time and memory vs size, as one SVG with two log-log panels (bench/run.py writes bench/scaling.svg).

No plotting library: the figure is a few lines and polylines, so the benchmark runs where only the analyzer's
own dependencies are installed (the GPU host gets wheels carried in). Each series is a list of
(MB of JSON, seconds, peak RSS MiB) points; a series with one point is drawn as a marker.
"""

from __future__ import annotations

import math
from html import escape

COLORS = {"traceview": "#1f77b4", "traceview, tiny events": "#17becf", "orjson.loads": "#2ca02c",
          "json.loads": "#7f7f7f", "HTA": "#d62728"}
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 420, 300, 62, 12, 28, 42


def _ticks(lo: float, hi: float) -> list[float]:
    """Decades and their 2x / 5x between lo and hi (log axis labels)."""
    out = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        out += [m * 10**e for m in (1, 2, 5) if lo <= m * 10**e <= hi]
    return out or [lo, hi]


def _fmt(v: float) -> str:
    return f"{v:g}" if v >= 1 else f"{v:.2g}"


def _panel(x0: float, series: dict[str, list[tuple[float, float]]], title: str, ylabel: str,
           diagonal: str | None = None) -> list[str]:
    pts = [p for s in series.values() for p in s if p[0] > 0 and p[1] > 0]
    if not pts:
        return []
    xlo, xhi = min(p[0] for p in pts) / 1.3, max(p[0] for p in pts) * 1.3
    ylo, yhi = min(p[1] for p in pts) / 1.5, max(p[1] for p in pts) * 1.5
    if diagonal:  # y = x (MiB vs MB: 1 MiB = 1.048576 MB) in range
        ylo, yhi = min(ylo, xlo / 1.048576), max(yhi, xhi / 1.048576)
    iw, ih = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def sx(v: float) -> float:
        return x0 + PAD_L + iw * (math.log(v) - math.log(xlo)) / (math.log(xhi) - math.log(xlo))

    def sy(v: float) -> float:
        return PAD_T + ih * (1 - (math.log(v) - math.log(ylo)) / (math.log(yhi) - math.log(ylo)))

    out = [f'<text x="{x0 + W / 2:.1f}" y="16" text-anchor="middle" font-weight="bold">{escape(title)}</text>',
           f'<rect x="{x0 + PAD_L}" y="{PAD_T}" width="{iw}" height="{ih}" fill="none" stroke="#333"/>']
    for t in _ticks(xlo, xhi):
        out.append(f'<line x1="{sx(t):.1f}" y1="{PAD_T}" x2="{sx(t):.1f}" y2="{PAD_T + ih}" stroke="#eee"/>')
        out.append(f'<text x="{sx(t):.1f}" y="{PAD_T + ih + 14}" text-anchor="middle">{_fmt(t)}</text>')
    for t in _ticks(ylo, yhi):
        out.append(f'<line x1="{x0 + PAD_L}" y1="{sy(t):.1f}" x2="{x0 + PAD_L + iw}" y2="{sy(t):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 + PAD_L - 4}" y="{sy(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    out.append(f'<text x="{x0 + PAD_L + iw / 2:.1f}" y="{H - 6}" text-anchor="middle">MB of JSON</text>')
    out.append(f'<text x="{x0 + 12}" y="{PAD_T + ih / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 {x0 + 12} {PAD_T + ih / 2:.1f})">{escape(ylabel)}</text>')
    if diagonal:
        a, b = xlo, xhi
        out.append(f'<line class="diagonal" x1="{sx(a):.1f}" y1="{sy(a / 1.048576):.1f}" x2="{sx(b):.1f}" '
                   f'y2="{sy(b / 1.048576):.1f}" stroke="#999" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{sx(b) - 4:.1f}" y="{sy(b / 1.048576) + 12:.1f}" text-anchor="end" fill="#777">'
                   f'{escape(diagonal)}</text>')
    for name, s in series.items():
        s = sorted(p for p in s if p[0] > 0 and p[1] > 0)
        if not s:
            continue
        c = COLORS.get(name, "#000")
        if len(s) > 1:
            xy = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
            out.append(f'<polyline data-series="{escape(name)}" points="{xy}" fill="none" stroke="{c}" '
                       'stroke-width="2"/>')
        out += [f'<circle data-series="{escape(name)}" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{c}"/>'
                for x, y in s]
    return out


def scaling_svg(series: dict[str, list[tuple[float, float, float | None]]], note: str = "") -> str:
    """Two panels, seconds and peak RSS MiB against MB of JSON (log-log), one line per series; the memory panel
    leaves out points without an RSS (a decoder timed in memory reports its process's RSS, which is kept)."""
    time_s = {k: [(mb, s) for mb, s, _ in v] for k, v in series.items()}
    rss = {k: [(mb, r) for mb, _, r in v if r] for k, v in series.items()}
    body = _panel(0, time_s, "Time vs size", "seconds")
    body += _panel(W, rss, "Peak RSS vs size", "peak RSS MiB", diagonal="RSS = the JSON")
    names = [k for k, v in series.items() if v]
    legend = []
    for i, k in enumerate(names):
        x = 10 + 160 * (i % 5)
        y = H + 14 + 16 * (i // 5)
        legend.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{COLORS.get(k, "#000")}"/>'
                      f'<text x="{x + 14}" y="{y}">{escape(k)}</text>')
    height = H + 24 + 16 * ((len(names) - 1) // 5 + 1) + (16 if note else 0)
    if note:
        legend.append(f'<text x="10" y="{height - 6}" fill="#555">{escape(note)}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{height}" '
            f'font-family="sans-serif" font-size="11">'
            f'<rect width="100%" height="100%" fill="white"/>' + "".join(body + legend) + "</svg>\n")
