"""Library-call templates: the fast filler builds exactly what the general walk builds."""
from cherenkov.lowering.library import Slot, fill_template, template_filler


def test_fast_filler_matches_the_general_walk():
    values = ["a", "b", "c", "d"]
    templates = [
        (Slot(0), 3, [Slot(1), None, Slot(2)], (Slot(3), 1.5)),          # cat / index lists
        (Slot(0), [[Slot(1)], 2], {"k": Slot(2)}),                      # deeper nesting
        {"dim": 1, "src": Slot(3), "dims": (Slot(0), Slot(1))},          # kwargs
        (),
    ]
    for template in templates:
        fast = template_filler(template)(values)
        slow = fill_template(template, values)
        assert (fast == slow) if isinstance(template, dict) else (list(fast) == list(slow))
