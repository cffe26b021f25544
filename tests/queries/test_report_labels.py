"""Labels that never overlap (queries/report_labels.py): the lanes' promise as properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from queries.report_labels import GAP, Lanes, Placed, text_width

words = st.text(alphabet="abcdefghij_0123456789 ", min_size=1, max_size=24)
labels = st.lists(st.tuples(st.floats(0, 1200), words, st.sampled_from(["start", "end"])),
                  max_size=40)


def span(p: Placed, lanes: Lanes) -> tuple[float, float]:
    w = text_width(p.text, lanes.size, lanes.bold)
    return (p.x, p.x + w) if p.anchor == "start" else (p.x - w, p.x)


@settings(max_examples=300, deadline=None)
@given(labels, st.integers(1, 3), st.booleans())
def test_placed_labels_of_a_lane_never_overlap_and_stay_inside(
        items: list[tuple[float, str, str]], count: int, bold: bool) -> None:
    lanes = Lanes(count, 50.0, 1150.0, bold=bold)
    placed = []
    for x, text, anchor in items:
        other = "end" if anchor == "start" else "start"
        p = lanes.put((text, text[:3]), ((anchor, x), (other, x)))
        if p is not None:
            assert p.text in (text, text[:3]) and 0 <= p.lane < count
            placed.append(p)
    for i, a in enumerate(placed):
        a0, a1 = span(a, lanes)
        assert a0 >= 50.0 and a1 <= 1150.0
        for b in placed[i + 1:]:
            if b.lane == a.lane:
                b0, b1 = span(b, lanes)
                assert a1 + GAP <= b0 or b1 + GAP <= a0, (a, b)


@given(st.floats(60, 900), words)
def test_a_label_that_fits_alone_is_always_placed_in_the_first_lane(x: float, text: str) -> None:
    p = Lanes(2, 50.0, 1150.0).put((text,), (("start", x),))
    assert p == Placed(text, 0, x, "start")


def test_a_crowded_label_takes_the_next_lane_then_its_short_form_then_none() -> None:
    lanes = Lanes(2, 0.0, 1000.0)
    first = lanes.put(("g1 started from step 20",), (("start", 100.0),))
    second = lanes.put(("g2 restarted from step 20", "g2"), (("start", 110.0),))
    third = lanes.put(("g3 restarted from step 20", "g3"), (("start", 120.0),))
    fourth = lanes.put(("g4 restarted", "g4"), (("start", 121.0),))
    assert (first and first.lane, second and second.lane) == (0, 1)
    # Both lanes hold a long label over x=120: g3's long form fits nowhere, its short
    # form neither (it starts inside both), so it is left out; so is g4.
    assert third is None and fourth is None
    far = lanes.put(("g5 restarted", "g5"), (("start", 600.0),))
    assert far == Placed("g5 restarted", 0, 600.0, "start")


def test_a_label_near_the_right_edge_flips_to_the_marks_other_side() -> None:
    lanes = Lanes(1, 0.0, 500.0)
    p = lanes.put(("worker_crash",), (("start", 495.0), ("end", 485.0)))
    assert p == Placed("worker_crash", 0, 485.0, "end")
