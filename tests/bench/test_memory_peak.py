"""The peak-memory replay: live set at the peak, grouped by who allocated."""
from cherenkov.bench.memory_peak import markdown, peak_live, site

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
