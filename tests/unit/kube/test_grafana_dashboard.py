"""The Grafana dashboard queries only metrics the service exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from admission.kube.control.metrics import Metrics

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "manifests" / "grafana" / "quartermaster-dashboard.json"
PROMQL_WORDS = {"sum", "by", "rate", "max", "min", "avg", "histogram_quantile", "le",
                "without", "count", "increase", "irate"}  # fmt: skip


def exported_series() -> set[str]:
    """Every sample name the registry exposes (counters' ``_total``, histograms'
    ``_bucket``/``_sum``/``_count``, info's ``_info``)."""
    names: set[str] = set()
    for family in Metrics().registry.collect():
        names.add(family.name)
        for sample in family.samples:
            names.add(sample.name)
        if family.type == "histogram":
            names.update(f"{family.name}{s}" for s in ("_bucket", "_sum", "_count"))
        if family.type == "counter":
            names.add(f"{family.name}_total")
    return names


def queried_metrics(expr: str) -> set[str]:
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r'"[^"]*"', "", expr)
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    labels = set()
    for grouping in re.findall(r"(?:by|without)\s*\(([^)]*)\)", expr):
        labels.update(x.strip() for x in grouping.split(","))
    return {n for n in names - PROMQL_WORDS - labels if not re.fullmatch(r"\d+", n)}


def test_every_metric_the_dashboard_queries_is_exported() -> None:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 15
    exported = exported_series()
    queried = set().union(*(queried_metrics(e) for e in exprs))
    assert queried, "no metric found in the dashboard"
    assert sorted(queried - exported) == []
    # and every family the service exports is on the dashboard (build info aside)
    families = {f.name for f in Metrics().registry.collect()} - {"kueue_build"}
    on_dashboard = {q.removesuffix("_total").removesuffix("_bucket") for q in queried}
    assert sorted(families - on_dashboard) == []


def test_the_check_catches_a_metric_that_does_not_exist() -> None:
    assert queried_metrics("sum by (cluster_queue) (rate(kueue_nope_total[5m]))") == {
        "kueue_nope_total"
    }
    assert "kueue_nope_total" not in exported_series()
