import gc

from lab.metrics.gc_pauses import GcPauses


def test_each_collection_inside_is_timed_and_none_after():
    with GcPauses() as meter:
        gc.collect(0)
        gc.collect(2)
    gc.collect()
    assert [gen for gen, _ in meter.pauses] == [0, 2]
    assert all(ms >= 0 for _, ms in meter.pauses)
    summary = meter.summary()
    assert summary["gc_collections"] == 2 and summary["gc_full"] == 1
    assert summary["gc_ms_total"] >= summary["gc_ms_max"] >= summary["gc_full_ms_max"] > 0
