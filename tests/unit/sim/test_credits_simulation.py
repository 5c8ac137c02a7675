"""Cohort credits on a simulated day: a team that was idle gets first call on idle
capacity when both teams want to borrow it at the same moment (issue 4).

Two teams with equal weights share a cohort: 2 GPUs of nominal quota each plus one GPU
the cohort itself owns. In the first half team-a keeps everything busy while team-b is
idle. At the half-way mark both submit four identical jobs at the same instant: each
team gets its nominal 2, and the one shared GPU goes to a borrower. Without credits the
tie goes to the older name (team-a); with credits team-b, which used nothing lately,
borrows it first. Nominal quota is never affected.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from admission.cli.simulate import load_scenario, simulate_summary
from admission.config.load import parse_config

HALF = 3600  # seconds


def _trace(tmp: Path) -> Path:
    objects = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "gpu"},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {"name": "lab"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "gpu",
                                "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 1}],
                            }
                        ],
                    }
                ]
            },
        },
    ]
    for team in ("team-a", "team-b"):
        objects.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": team},
                "spec": {
                    "cohortName": "lab",
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": "gpu",
                                    "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}],
                                }
                            ],
                        }
                    ],
                },
            }
        )
        objects.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "q", "namespace": team},
                "spec": {"clusterQueue": team},
            }
        )
    trace = []
    # First half: team-a alone keeps all 5 GPUs busy (its 2 plus 3 borrowed).
    for i in range(5):
        trace.append(
            {
                "name": f"a-early-{i}",
                "namespace": "team-a",
                "localQueue": "q",
                "arrival": 0,
                "runtime": HALF - 1,
                "priority": 0,
                "podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}}],
            }
        )
    # Half-way: both teams ask for 4 GPUs at the same instant.
    for team in ("team-a", "team-b"):
        for i in range(4):
            trace.append(
                {
                    "name": f"{team[-1]}-late-{i}",
                    "namespace": team,
                    "localQueue": "q",
                    "arrival": HALF,
                    "runtime": HALF,
                    "priority": 0,
                    "podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}}],
                }
            )
    path = tmp / "trace.yaml"
    path.write_text(yaml.safe_dump_all([*objects, {"trace": trace}], sort_keys=False))
    return path


def _borrower(tmp: Path, config: dict) -> str:
    scenario = load_scenario(str(_trace(tmp)))
    _summary, result = simulate_summary(scenario, config=parse_config(config))
    # Workloads admitted in the first minute after the half-way mark.
    late = [
        r.cluster_queue
        for r in result.records
        if r.admitted_us is not None and HALF <= r.admitted_us / 1_000_000 < HALF + 60
    ]
    per_team = {t: late.count(t) for t in ("team-a", "team-b")}
    assert sorted(per_team.values()) == [2, 3], per_team  # nominal for both, one borrower
    return max(per_team, key=per_team.get)


def test_without_credits_the_tie_goes_to_the_older_name(tmp_path: Path) -> None:
    assert _borrower(tmp_path, {}) == "team-a"


def test_with_credits_the_team_that_was_idle_borrows_first(tmp_path: Path) -> None:
    config = {"cohortCredits": {"usageHalfLifeTime": "30m", "usageSamplingInterval": "1m"}}
    assert _borrower(tmp_path, config) == "team-b"
