"""Replay a compiled graph's plan through a CUDA graph (static shapes, CUDA only).

Inputs whose storage stays put between calls (parameters, optimizer-updated in place) are
used directly; the others are copied into static buffers before each replay. Outputs are
cloned after replay, so callers never see a buffer that the next replay overwrites. If capture
fails (a sync inside an extern op, say), the plan runs without graphs, with the reason logged.
"""
from __future__ import annotations

import logging

import torch

log = logging.getLogger("cherenkov")


class GraphedPlan:
    def __init__(self, run_plan, name: str):
        self.run_plan = run_plan        # callable(list of inputs) -> list of outputs
        self.name = name
        self.calls = 0
        self.first_ptrs: list | None = None
        self.graph = None
        self.disabled = False
        self.static_inputs: list = []
        self.static_slots: list[bool] = []
        self.static_outputs: list = []

    def __call__(self, inputs: list):
        if self.disabled:
            return self.run_plan(inputs)
        self.calls += 1
        ptrs = [t.data_ptr() if isinstance(t, torch.Tensor) else None for t in inputs]
        if self.calls == 1:                      # warm-up; remember where inputs live
            self.first_ptrs = ptrs
            return self.run_plan(inputs)
        if self.graph is None:
            self._capture(inputs, ptrs)
            if self.disabled:
                return self.run_plan(inputs)
        for i, t in enumerate(inputs):
            if not isinstance(t, torch.Tensor):
                continue
            if self.static_slots[i]:
                if ptrs[i] != self.static_inputs[i].data_ptr():
                    self.graph = None               # a "static" input moved: capture again
                    return self(inputs)
            else:
                self.static_inputs[i].copy_(t)
        self.graph.replay()
        return [o.clone() if isinstance(o, torch.Tensor) else o for o in self.static_outputs]

    def _capture(self, inputs, ptrs) -> None:
        self.static_slots = [p is not None and p == q for p, q in zip(ptrs, self.first_ptrs)]
        self.static_inputs = [t if (not isinstance(t, torch.Tensor) or keep) else t.clone()
                              for t, keep in zip(inputs, self.static_slots)]
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self.run_plan(self.static_inputs)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.static_outputs = self.run_plan(self.static_inputs)
            self.graph = graph
        except Exception as e:  # noqa: BLE001 -- capture is an optimization, never a failure
            log.warning("cherenkov: CUDA graph capture of %s failed (%s); running without",
                        self.name, e)
            self.disabled = True
            self.graph = None
