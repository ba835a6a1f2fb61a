"""`cherenkov bench`: suites of cases compared eager vs torch.compile vs Cherenkov in one process.

    case.py     what a case is (function, inputs, minimal bytes per mode)
    check.py    correctness against a high-precision reference, judged by eager's own error
    timing.py   median CUDA-event (or CPU) time, input rotation, copy bandwidth
    harness.py  check then time each implementation of each (case, mode)
    report.py   markdown + JSON with GB/s, % of copy, speedups, predicted vs measured
    suites/     the named suites (`memory`)
    cli.py      the `cherenkov bench` subcommand
"""
