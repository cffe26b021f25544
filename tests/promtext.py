"""Reading Prometheus metrics in tests: scrape or render, keyed by name and labels."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import TypeVar

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

T = TypeVar("T")
Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]


def samples(text: str) -> Samples:
    """Every sample of an exposition, keyed by name and sorted labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def render(metrics: list[Metric]) -> Samples:
    """What a scrape of exactly these families would read."""
    class Fixed(Collector):
        def collect(self) -> Iterator[Metric]:
            yield from metrics

    registry = CollectorRegistry()
    registry.register(Fixed())
    return samples(generate_latest(registry).decode())


def named(got: Samples, name: str) -> dict[Labels, float]:
    return {labels: v for (n, labels), v in got.items() if n == name}


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        return samples(response.read().decode())


def until(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got is not None:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
