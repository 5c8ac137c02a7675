"""The fits dispatcher's choice among workers (queues.multikueue_fit.choose)."""

from __future__ import annotations

from fractions import Fraction

from queues.multikueue_fit import Fit, choose, unfit


def fit(worker: str, borrowed: int = 0, room: str = "0") -> Fit:
    return Fit(worker, True, Fraction(borrowed), Fraction(room), "fits")


def test_the_least_borrowing_wins_then_the_most_room() -> None:
    names, reasons = choose([fit("a", 2), fit("b", 0, "1/4"), fit("c", 0, "1/2")], ["a", "b", "c"])
    assert names == ["c"]
    assert reasons[0] == "nominated c"
    assert choose([fit("a", 2), fit("b", 1)], ["a", "b"])[0] == ["b"]


def test_a_worker_that_needs_preemption_is_never_chosen_while_one_fits() -> None:
    names, _ = choose([unfit("a", "does not fit"), fit("b", 5)], ["a", "b"])
    assert names == ["b"]


def test_when_none_fits_every_connected_worker_is_nominated() -> None:
    names, reasons = choose([unfit("b", "no"), unfit("a", "no"), unfit("z", "is not connected")],
                            ["b", "a"])  # fmt: skip
    assert names == ["a", "b"]
    assert reasons == ("no worker fits now: nominated every connected worker",
                       "b: no", "a: no", "z: is not connected")  # fmt: skip


def test_ties_keep_the_config_order() -> None:
    assert choose([fit("w2", 0, "1/2"), fit("w1", 0, "1/2")], ["w1", "w2"])[0] == ["w2"]
