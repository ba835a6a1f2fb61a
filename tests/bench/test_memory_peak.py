"""The peak-memory replay: live set at the peak, grouped by who allocated."""
from cherenkov.bench.memory_peak import markdown, peak_live, segment_growth, site

RUNTIME = [{"filename": "/x/c10/alloc.cpp", "line": 1, "name": "malloc"},
           {"filename": "/repo/cherenkov/runtime/compiled_graph.py", "line": 140, "name": "run"}]
MODEL = [{"filename": "/repo/cherenkov/models/gpt.py", "line": 90, "name": "forward"}]
BACKWARD = RUNTIME + [{"filename": "/t/torch/_functorch/runtime_wrappers.py", "line": 9,
                       "name": "backward"}]


def test_site_names_the_first_informative_frame():
    assert site(RUNTIME) == "cherenkov/runtime/compiled_graph.py:140 run"
    assert site([]) == "(no stack)"


def test_live_set_at_the_peak():
    events = [
        {"action": "alloc", "addr": 1, "size": 100, "frames": RUNTIME},
        {"action": "alloc", "addr": 2, "size": 50, "frames": MODEL},
        {"action": "free_requested", "addr": 1, "size": 100},
        {"action": "free_completed", "addr": 1, "size": 100},    # counted once
        {"action": "alloc", "addr": 3, "size": 70, "frames": RUNTIME},
        {"action": "alloc", "addr": 4, "size": 40, "frames": BACKWARD},  # peak: 50 + 70 + 40
        {"action": "free_requested", "addr": 4, "size": 40},
        {"action": "free_requested", "addr": 99, "size": 1000},  # allocated before recording
    ]
    r = peak_live(events)
    assert r["peak_bytes"] == 160 and r["at_event"] == 5 and r["phase"] == "backward"
    assert [b for b, _ in r["largest"]] == [70, 50, 40]
    assert r["by_size"] == [(70, 1), (50, 1), (40, 1)]
    assert r["sites"] == [("cherenkov/runtime/compiled_graph.py:140 run", 110, 2),
                          ("cherenkov/models/gpt.py:90 forward", 50, 1)]
    text = "\n".join(markdown(r, 10**9))
    assert "+0.00 GB" in text and "| 2 |" in text and "backward pass" in text


def test_segment_growth_says_what_was_cached_free_when_the_allocator_grew():
    events = [
        {"action": "segment_alloc", "addr": 0, "size": 1000},
        {"action": "alloc", "addr": 0, "size": 600, "frames": RUNTIME},
        {"action": "alloc", "addr": 600, "size": 300, "frames": MODEL},
        {"action": "free_requested", "addr": 0, "size": 600},
        {"action": "free_completed", "addr": 0, "size": 600},
        # step 1: 700 cached free, yet a 650 request needs a new segment (split: 600 + 100)
        {"action": "segment_alloc", "addr": 5000, "size": 2000},
        {"action": "alloc", "addr": 5000, "size": 650, "frames": BACKWARD},
        {"action": "segment_free", "addr": 5000, "size": 2000},
    ]
    r = segment_growth(events, marks=(5,))
    first, second = r["grown"]
    assert (first["step"], first["cached_free"], first["request"]) == (0, 0, 600)
    assert (second["step"], second["reserved"], second["allocated"]) == (1, 3000, 300)
    assert second["cached_free"] == 700 and second["request"] == 650
    assert second["site"] == "cherenkov/runtime/compiled_graph.py:140 run"
    assert r["max_reserved"] == 3000 and r["allocated_at_max_reserved"] == 300
    assert r["max_allocated"] == 950
