"""bench/chart.py: the time/memory-vs-size figure of bench/RESULTS.md is drawn from the run's rows."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from chart import scaling_svg  # noqa: E402
from run import chart_series  # noqa: E402

NS = "{http://www.w3.org/2000/svg}"
ROWS = [  # (name, MB of JSON, {case: (seconds, peak RSS MiB)}) as bench/run.py's cost-vs-size table holds them
    ("big.json.gz", 132.0, {"traceview": (1.4, 318.0), "orjson": (1.6, 700.0), "json": (2.1, 900.0)}),
    ("big.json.gz x8", 967.0, {"traceview": (6.6, 1314.0), "orjson": (10.3, 5000.0), "json": (16.0, 6000.0)}),
    ("10 M tiny events (tools/tiny_events.py)", 1590.0, {"traceview": (35.7, 3731.0)}),
]


def _points(svg: str, series: str) -> list[tuple[float, float]]:
    root = ET.fromstring(svg)
    return [(float(c.get("cx")), float(c.get("cy"))) for c in root.iter(f"{NS}circle")
            if c.get("data-series") == series]


def test_every_row_is_a_point_on_both_panels_and_hta_where_it_ran():
    svg = scaling_svg(chart_series(ROWS, [(132.0, 18.0, 2400.0)]))
    tv = _points(svg, "traceview")
    assert len(tv) == 4  # two sizes x (time, memory)
    assert len(_points(svg, "traceview, tiny events")) == 2
    assert len(_points(svg, "orjson.loads")) == 4  # the tiny-event row ran no decoder
    assert len(_points(svg, "HTA")) == 2


def test_log_axes_keep_order_and_ratios():
    svg = scaling_svg(chart_series(ROWS[:2], []))
    (x1, y1), (x2, y2) = _points(svg, "traceview")[:2]  # the time panel: larger trace right and higher
    assert x2 > x1 and y2 < y1
    oj = _points(svg, "orjson.loads")[:2]
    # log scale: equal ratios are equal distances (132 -> 967 MB spans the same x in every series)
    assert abs((oj[1][0] - oj[0][0]) - (x2 - x1)) < 0.2


def test_points_without_rss_stay_off_the_memory_panel():
    svg = scaling_svg({"traceview": [(132.0, 1.4, None), (967.0, 6.6, 1314.0)]})
    assert len(_points(svg, "traceview")) == 3
    ET.fromstring(svg)  # well-formed
