"""Labels that never overlap, for the report's SVG charts.

A chart puts its labels through :class:`Lanes`: each label takes the first lane
(a row of text) where its span clears every label already there, on the first
side of its mark that keeps it inside the chart; it tries its short form when
the long one fits nowhere, and is left out (its mark keeps the hover title)
when neither fits. Spans are estimated from the text, with a width
per character generous enough for the bold sans-serif the page uses, so a label
that passed here does not touch its neighbour in a browser either
(tests/queries/test_report.py measures them in Chromium).

Tested in tests/queries/test_report_labels.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GAP = 6.0  # px between two labels of one lane
CHAR_EM = 0.62  # a character's advance, in ems; Chromium's sans-serif digits are ~0.56


def text_width(text: str, size: float, bold: bool = False) -> float:
    """An upper estimate of ``text``'s width at ``size`` px."""
    return len(text) * size * (CHAR_EM + (0.05 if bold else 0.0))


@dataclass(frozen=True, slots=True)
class Placed:
    """Where one label went: its text (long or short), lane, x and anchor."""

    text: str
    lane: int
    x: float
    anchor: str  # "start" or "end"


@dataclass(slots=True)
class Lanes:
    """``count`` rows of labels inside [lo, hi] px."""

    count: int
    lo: float
    hi: float
    size: float = 12.0
    bold: bool = False
    _taken: list[list[tuple[float, float]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._taken = [[] for _ in range(self.count)]

    def put(self, texts: tuple[str, ...], sides: tuple[tuple[str, float], ...]) -> Placed | None:
        """The first of ``texts`` (long to short) that fits a lane at one of ``sides``
        (an anchor, ``start`` or ``end``, and its x; in order of preference) within
        [lo, hi]; None when none fits anywhere."""
        for text in texts:
            w = text_width(text, self.size, self.bold)
            for anchor, x in sides:
                x0, x1 = (x, x + w) if anchor == "start" else (x - w, x)
                if x0 < self.lo or x1 > self.hi:
                    continue
                for lane, spans in enumerate(self._taken):
                    if all(x1 + GAP <= a or x0 >= b + GAP for a, b in spans):
                        spans.append((x0, x1))
                        return Placed(text, lane, x, anchor)
        return None
