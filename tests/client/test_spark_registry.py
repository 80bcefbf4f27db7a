"""lakesession._sparkbind.SparkRegistry: the process-wide Spark bookkeeping, weakly keyed by Session."""

from __future__ import annotations

import gc

from lakesession._sparkbind import SparkRegistry


class _Holder:  # any object that can hold a SparkSession (a Session in real use)
    pass


class _Created:  # stands for the SparkSession lakesession created: only its stop() is observed here
    def __init__(self) -> None:
        self.stopped = 0

    def stop(self) -> None:
        self.stopped += 1


def test_spark_stops_with_the_last_holder_not_before() -> None:
    reg = SparkRegistry()
    a, b, created = _Holder(), _Holder(), _Created()
    reg.holders.add(a)
    reg.holders.add(b)
    reg.created = created
    reg.release(a)
    assert created.stopped == 0 and reg.created is created
    reg.release(a)  # twice: no effect
    reg.release(b)
    assert created.stopped == 1 and reg.created is None


def test_a_collected_session_drops_out_and_cannot_be_mistaken_for_a_new_one() -> None:
    reg = SparkRegistry()
    gone = _Holder()
    reg.holders.add(gone)
    reg.remote_bound.setdefault("sc://x:15002", type(reg.holders)()).add(gone)
    del gone
    gc.collect()
    assert len(reg.holders) == 0 and len(reg.remote_bound["sc://x:15002"]) == 0
    newcomer, created = _Holder(), _Created()  # may well get the collected object's id()
    reg.created = created
    reg.release(newcomer)  # never bound: releasing it must not stop Spark for anyone
    assert created.stopped == 0
