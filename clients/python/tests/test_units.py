"""Pure parts: filters, credit, metadata."""

from __future__ import annotations

import pytest

from zeronode import meta
from zeronode.credit import Credit, Violation, Window
from zeronode.filter import matches

OPTS = {"role": "worker", "load": 3, "tags": ["gpu", "eu"], "region": {"zone": "eu-1"}, "z": 0}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"role": "worker"}, True),
        ({"role": "other"}, False),
        ({"load": {"$gt": 2, "$lte": 3}}, True),
        ({"load": {"$gt": 3}}, False),
        ({"load": {"$eq": 3.0}}, True),
        ({"load": {"$aeq": "3"}}, True),
        ({"load": {"$between": [3, 5]}}, True),
        ({"load": {"$in": [1, 3]}}, True),
        ({"load": {"$nin": [1, 3]}}, False),
        ({"tags": {"$contains": "gpu"}}, True),
        ({"tags": {"$containsAny": ["cpu", "eu"]}}, True),
        ({"tags": {"$containsNone": ["cpu"]}}, True),
        ({"role": {"$regex": "^wor"}}, True),
        ({"region.zone": "eu-1"}, True),
        ({"missing": {"$ne": 1}}, False),  # a missing key fails every operator
        ({"missing": {"$nin": [1]}}, False),
        ({"z": 0}, True),  # 0 is a value, not absent
        ({"load": {"$gt": "a"}}, False),  # a number against a string never orders
        ({}, True),
    ],
)
def test_filter_operators(spec: dict[str, object], expected: bool) -> None:
    assert matches(spec, OPTS) is expected


def test_credit_never_lets_a_sender_pass_the_window() -> None:
    window = Window(8)
    credit = Credit()
    credit.receive(window.open())
    sent = 0
    held = 0
    for _ in range(1000):
        while credit.take():
            window.arrive(10)
            sent += 1
            held += 1
            assert held <= 8
        held -= 1
        grant = window.consume()
        if grant is not None:
            credit.receive(grant)
    assert sent > 900
    with pytest.raises(Violation):
        credit.receive((9).to_bytes(4, "big"))


def test_an_item_without_credit_is_a_violation() -> None:
    window = Window(2)
    window.open()
    window.arrive(1)
    window.arrive(1)
    with pytest.raises(Violation):
        window.arrive(1)


def test_metadata_budget_first_and_reserved_keys_refused() -> None:
    raw = meta.encode({"tenant": "acme", "blob": b"\x01"}, budget_us=5_000_000)
    entries = meta.parse(raw)
    assert meta.budget_us(entries) == 5_000_000
    assert meta.user_entries(entries) == {"tenant": "acme", "blob": b"\x01"}
    with pytest.raises(meta.MetaError):
        meta.encode({":budget": "x"})
    with pytest.raises(meta.MetaError) as over:
        meta.parse(meta.encode({f"k{i}": "v" for i in range(65)}))
    assert over.value.name == "TooLarge"
