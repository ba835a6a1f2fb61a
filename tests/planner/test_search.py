

def test_shortlist_keeps_the_best_estimate_of_every_zero_stage_and_schedule():
    """The closed-form estimate can over-rate one family (ZeRO-3's overlapped gathers); the
    simulated set still holds the best-estimated plan of every other family."""
    from types import SimpleNamespace

    from cherenkov.planner.result import shortlist

    def plan(zero, schedule):
        return SimpleNamespace(choice=SimpleNamespace(zero_stage=zero, schedule=schedule))
    ranked = [(1.0, plan(3, "none")), (1.1, plan(3, "none")), (1.2, plan(3, "none")),
              (1.3, plan(2, "none")), (1.4, plan(2, "none")), (1.5, plan(3, "1f1b"))]
    chosen = shortlist(ranked, 2)
    assert chosen[:2] == ranked[:2]
    assert ranked[3] in chosen and ranked[5] in chosen and ranked[4] not in chosen
