"""attention/shape_cache.py: bounded per-shape caches never drop what a CUDA graph captured."""
from cherenkov.attention import shape_cache
from cherenkov.attention.shape_cache import ShapeCache


def test_bounded_and_pins_entries_handed_out_while_capturing(monkeypatch):
    cache = ShapeCache(3)
    capturing = [False]
    monkeypatch.setattr(shape_cache, "capturing", lambda: capturing[0])
    cache.put("a", 1)
    capturing[0] = True
    assert cache.get("a") == 1            # used inside a capture: pinned
    cache.put("b", 2)                     # built inside a capture: pinned
    capturing[0] = False
    cache.put("c", 3)
    cache.put("d", 4)                     # full: drops the unpinned ones only
    assert set(cache.items) == {"a", "b", "d"}
    for key in "efgh":
        cache.put(key, key)
    assert {"a", "b"} <= set(cache.items) and len(cache) <= 3
    cache.clear()
    assert set(cache.items) == {"a", "b"}
    assert cache.get("zz") is None
