"""Named benchmark suites: name -> function(scale, dtype) returning a list of Cases.

    from cherenkov.bench.suites import SUITES
    SUITES["memory"]("smoke")      # the memory-bound kernels at tiny shapes

A suite listed in RUNNERS (`train`: whole training steps; `attention`: cherenkov.attention
vs SDPA and FlexAttention) runs itself: `cherenkov bench`
hands it the parsed arguments instead of driving its cases through the kernel harness.
"""
from __future__ import annotations

from cherenkov.bench.suites import attention, memory, train

SUITES = {"memory": memory.cases, "train": train.cases, "attention": attention.cases}
# suites that run whole programs rather than (case, mode) kernels: name -> run(args)
RUNNERS = {"train": train.run, "attention": attention.run}
