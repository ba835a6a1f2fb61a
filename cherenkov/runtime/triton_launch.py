"""Launching a generated Triton kernel with little Python per call.

`fn[grid](*args)` re-binds and re-specializes the arguments on every call (tens of
microseconds). After the first launch has compiled the kernel, we call the compiled kernel's
launcher directly, as Triton's own `run` does at its end. The second call checks the direct
path against the regular one on the same inputs (outputs must match bit for bit); if they
differ, or the direct call raises (another Triton version), the regular path is kept.

The check keeps a copy of the outputs, so it runs only on kernels with small outputs: a copy
of a 1.6 GB logit gradient once raised a GPT-2 step's peak memory by 4 GB. A kernel with
large outputs takes the direct path once some kernel's check has passed in this process (what
the check guards against -- a launcher whose calling convention differs -- is the same for all
kernels; every pointer is passed 16-byte aligned, so no kernel is specialized differently),
or, where none has yet, once a tiny probe kernel launched both ways agreed
(`verify_direct_launch`): a process whose every launch is large (attention at B=4 H=16
S=4096) otherwise never left the regular path -- 1.15-1.56 ms of host time per attention
forward+backward on the H200, more than the document mask's kernels take
(bench/results/2026-12-01_attention_bwd_tiles_h200_a983a21.md).
"""
from __future__ import annotations

import logging
import time

import torch

log = logging.getLogger("cherenkov")


class TritonLaunch:
    # the raw CUDA stream of the plan being run: `CompiledGraph.run_plan` sets it once per call
    # (torch.cuda.current_stream() per launch cost ~8 us of Python each, ~10 ms a GPT-2 step)
    stream: int | None = None
    CHECK_BYTES = 16 << 20            # outputs larger than this are not copied for the check
    verified = False                  # the direct path matched the regular one on some kernel
    first_launch_s = 0.0              # wall time of every kernel's first launch in this process
                                      # (waiting for its worker and loading it, or compiling
                                      # it when no worker did)
    probed = False                    # verify_direct_launch's probe ran (verdict in `verified`)

    def __init__(self, fn, grid: int, constexprs: tuple, options: dict, n_outputs: int,
                 accumulates: bool):
        self.fn = fn
        self.grid = (grid,)
        self.constexprs = constexprs          # XBLOCK (, RBLOCK), in parameter order
        self.options = options                # num_warps, enable_fp_fusion
        self.n_outputs = n_outputs
        self.kernel = None
        self.direct = None if not accumulates else False   # None: not yet checked
        self.pending = None           # the compile worker's job for this kernel, if any

    def slow(self, *args):
        names = ("XBLOCK", "RBLOCK")[: len(self.constexprs)]
        return self.fn.run(*args, grid=self.grid, warmup=False,
                           **dict(zip(names, self.constexprs)), **self.options)

    def fast(self, *args):
        k = self.kernel
        stream = TritonLaunch.stream
        if stream is None:
            stream = torch.cuda.current_stream().cuda_stream
        k.run(self.grid[0], 1, 1, stream, k.function, k.packed_metadata, None, None, None,
              *args, *self.constexprs)

    def __call__(self, *args):
        if self.kernel is None:
            t0 = time.perf_counter()
            if self.pending is not None:      # compiled by a worker: wait for it, then load
                from cherenkov.runtime.parallel_compile import wait_for
                wait_for(self.pending)
                self.pending = None
            self.kernel = self.slow(*args)
            TritonLaunch.first_launch_s += time.perf_counter() - t0
            return
        if self.direct is False:
            self.slow(*args)
            return
        if self.direct:
            self.fast(*args)
            return
        outputs = args[len(args) - self.n_outputs:]
        if sum(o.numel() * o.element_size() for o in outputs) > TritonLaunch.CHECK_BYTES:
            if verify_direct_launch():
                self.direct = True
                self.fast(*args)
            else:
                self.slow(*args)               # decided on a later call
            return
        # an output written in place over an input (an optimizer's update) must not be
        # applied twice: its storage is put back before the regular launch
        saved = _storages_written_in_place(args[: len(args) - self.n_outputs], outputs)
        try:                                   # second call: check the direct path once
            self.fast(*args)
            outs = [a.clone() for a in outputs]
            for storage, before in saved:
                storage.copy_(before)
            self.slow(*args)
            same = all(map(same_bits, outs, outputs))
        except Exception as e:  # noqa: BLE001 -- a Triton whose launcher differs: stay slow
            log.info("cherenkov: direct Triton launch unavailable (%s)", e)
            same = False
            for storage, before in saved:
                storage.copy_(before)
            self.slow(*args)
        self.direct = same
        TritonLaunch.verified = TritonLaunch.verified or same


def verify_direct_launch() -> bool:
    """Whether direct launches are trusted in this process: some kernel's own check passed, or
    a probe kernel (runtime/launch_probe.py), launched both ways once per process, wrote the
    same bits. False on a machine without CUDA and while a CUDA graph is captured (the probe
    compares on the host), where it is asked again later."""
    if TritonLaunch.verified:
        return True
    if TritonLaunch.probed or not torch.cuda.is_available() \
            or torch.cuda.is_current_stream_capturing():
        return False
    TritonLaunch.probed = True
    try:
        from .launch_probe import direct_launch_matches
        TritonLaunch.verified = direct_launch_matches(torch.cuda.current_device())
    except Exception as e:  # noqa: BLE001 -- a Triton whose launcher differs: stay slow
        log.info("cherenkov: direct Triton launch unavailable (%s)", e)
    if not TritonLaunch.verified:
        log.info("cherenkov: direct Triton launches off (the probe disagreed or failed)")
    return TritonLaunch.verified


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes and bytes: NaN equals NaN of the same payload (and only it), -0.0 is not
    0.0 -- the same kernel binary launched two ways writes the same bits."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
        a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def _storages_written_in_place(inputs, outputs) -> list:
    """(whole storage as bytes, its saved copy) for each output sharing storage with an input."""
    read = {a.untyped_storage().data_ptr() for a in inputs if isinstance(a, torch.Tensor)}
    saved = []
    for o in outputs:
        if isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() in read:
            whole = torch.empty(0, dtype=torch.uint8, device=o.device).set_(o.untyped_storage())
            saved.append((whole, whole.clone()))
    return saved
