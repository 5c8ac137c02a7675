"""The webhook server's Prometheus series (controller-runtime's names, plus the denials).

Requests are counted in plain integers on the event loop and turned into metric
families only when ``/metrics`` is scraped.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Metric
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class _PathStats:
    __slots__ = ("codes", "buckets", "total", "sum", "denials")

    def __init__(self) -> None:
        self.codes: dict[int, int] = {}
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # last one: +Inf only
        self.total = 0
        self.sum = 0.0
        self.denials = 0


class WebhookMetrics:
    """Prometheus series of one app, in its own registry (controller-runtime's names).

    Requests are counted in plain integers on the event loop (no locks on the hot path)
    and turned into metric families only when ``/metrics`` is scraped.
    """

    def __init__(self, registry: CollectorRegistry, paths: Iterable[str]) -> None:
        self.registry = registry
        self._stats = {p: _PathStats() for p in paths}
        registry.register(self)

    def observe(self, path: str, status: int, seconds: float, denied: bool) -> None:
        st = self._stats[path]
        st.codes[status] = st.codes.get(status, 0) + 1
        st.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        st.total += 1
        st.sum += seconds
        if denied:
            st.denials += 1

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "controller_runtime_webhook_requests",
            "Admission requests served, by webhook path and HTTP status code.",
            labels=["webhook", "code"],
        )
        latency = HistogramMetricFamily(
            "controller_runtime_webhook_latency_seconds",
            "Time to answer an admission request, by webhook path.",
            labels=["webhook"],
        )
        denials = CounterMetricFamily(
            "quartermaster_webhook_denials",
            "Admission requests answered with allowed=false, by webhook path.",
            labels=["webhook"],
        )
        for path, st in self._stats.items():
            for code, n in sorted(st.codes.items()):
                requests.add_metric([path, str(code)], n)
            cumulative, running = [], 0
            for bound, n in zip((*LATENCY_BUCKETS, float("inf")), st.buckets, strict=True):
                running += n
                cumulative.append((floatToGoString(bound), running))
            latency.add_metric([path], cumulative, st.sum)
            denials.add_metric([path], st.denials)
        yield requests
        yield latency
        yield denials
