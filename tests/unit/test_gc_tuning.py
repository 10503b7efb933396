"""The served stack's collector tuning (app.dev.stack): what exists at start-up is frozen out of the
cyclic collector, and young collections run less often."""

from __future__ import annotations

import gc

from app.dev import stack


def test_startup_objects_are_frozen_and_young_collections_are_rarer() -> None:
    before = gc.get_threshold()
    try:
        stack._exempt_startup_objects_from_gc()
        assert gc.get_freeze_count() > 10_000  # modules, the schema, the mappers, ...
        assert gc.get_threshold() == (stack.GC_THRESHOLD_0, *before[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
