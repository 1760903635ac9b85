"""The compare page's similarity chart, computed server-side as SVG coordinates (no script, no inline
styles: each series has a CSS class)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from refine.models import RefinePass

WIDTH, HEIGHT, PAD = 480, 200, 30
SERIES = [
    ("original", "char", "char vs original"),
    ("original", "jaccard", "Jaccard vs original"),
    ("original", "embedding", "embedding vs original"),
    ("previous", "char", "char vs previous"),
    ("previous", "jaccard", "Jaccard vs previous"),
    ("previous", "embedding", "embedding vs previous"),
]


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    number: int
    value: float


@dataclass(frozen=True)
class Series:
    label: str
    css: str
    points: list[Point]

    @property
    def polyline(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    series: list[Series]
    x_ticks: list[tuple[float, int]]
    y_ticks: list[tuple[float, str]]
    plot_left: int
    plot_right: int
    plot_top: int
    plot_bottom: int


def _x(number: int, count: int) -> float:
    span = WIDTH - 2 * PAD
    return PAD + (span * (number - 1) / (count - 1) if count > 1 else span / 2)


def _y(value: float) -> float:
    return PAD + (HEIGHT - 2 * PAD) * (1 - max(0.0, min(1.0, value)))


def similarity_chart(passes: Sequence[RefinePass]) -> Chart:
    """One line per (comparison, scorer) with data, x = pass number, y = similarity 0..1."""
    count = len(passes)
    series = []
    for against, scorer, label in SERIES:
        points = [
            Point(_x(p.number, count), _y(value), p.number, value)
            for p in passes
            if (value := p.score(against, scorer)) is not None
        ]
        if points:
            series.append(Series(label, f"series-{against}-{scorer}", points))
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        series=series,
        x_ticks=[(_x(p.number, count), p.number) for p in passes],
        y_ticks=[(_y(v), f"{v:.2f}") for v in (0.0, 0.25, 0.5, 0.75, 1.0)],
        plot_left=PAD,
        plot_right=WIDTH - PAD,
        plot_top=PAD,
        plot_bottom=HEIGHT - PAD,
    )
