"""The Configuration's ``multiKueue`` section: Kueue's fields, its defaults, and errors
naming the field."""

from __future__ import annotations

import pytest

from admission.config.load import parse_config
from admission.config.multikueue import ALL_AT_ONCE, FITS, INCREMENTAL
from admission.config.schema import ConfigError


def section(**fields: object) -> dict[str, object]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "multiKueue": fields,
    }


def test_kueues_defaults_when_the_section_is_absent_or_empty() -> None:
    for doc in ({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"},
                section()):  # fmt: skip
        mk = parse_config(doc).multikueue
        assert (mk.gc_interval, mk.origin, mk.worker_lost_timeout) == (60.0, "multikueue", 900.0)
        assert mk.dispatcher == ALL_AT_ONCE and not mk.external and mk.step_size == 3


def test_kueues_fields_are_read() -> None:
    config = parse_config(
        section(
            gcInterval="30s",
            origin="mgr-a",
            workerLostTimeout="2m",
            dispatcherName=INCREMENTAL,
            incrementalDispatcherConfig={"stepSize": 2},
        )
    )
    mk = config.multikueue
    assert (mk.gc_interval, mk.origin, mk.worker_lost_timeout) == (30.0, "mgr-a", 120.0)
    assert (mk.dispatcher, mk.step_size) == (INCREMENTAL, 2)
    assert config.warnings == []  # the section is acted on, not "not implemented"


def test_gc_interval_zero_disables_collection_and_unknown_names_are_external() -> None:
    mk = parse_config(section(gcInterval="0", dispatcherName="example.com/mine")).multikueue
    assert mk.gc_interval == 0.0 and mk.external
    assert not parse_config(section(dispatcherName=FITS)).multikueue.external


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"gcInterval": "soon"}, "multiKueue.gcInterval"),
        ({"workerLostTimeout": "1 minute"}, "multiKueue.workerLostTimeout"),
        ({"incrementalDispatcherConfig": {"stepSize": 0}}, "stepSize"),
        ({"dispatcher": ALL_AT_ONCE}, "multiKueue.dispatcher"),
    ],
)
def test_bad_fields_are_errors_naming_the_field(fields: dict[str, object], path: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(section(**fields))
    assert path in str(err.value)


def test_what_is_parsed_but_not_acted_on_is_a_warning() -> None:
    config = parse_config(
        section(externalFrameworks=[{"name": "Foo.v1.example.com"}], clusterProfile={})
    )
    assert [w.split(": ")[1] for w in config.warnings] == [
        "multiKueue.externalFrameworks",
        "multiKueue.clusterProfile",
    ]
