"""Launch an attention kernel with little Python once it is compiled for the arguments' kind.

`fn[grid](*args, **constexprs)` binds and specializes every argument on each call: with the
~40 arguments of an attention kernel that is tens of microseconds, and a decode call (two
launches over 0.14 ms of kernels) was bound by it. Here the compiled kernel is remembered per
specialization key -- what Triton specializes on: each tensor's dtype and 16-byte alignment,
each integer's being 1, its divisibility by 16 and its width -- and later calls with the same
key call the kernel's launcher directly, as Triton's own `run` does at its end. A call whose
non-tensor arguments are the very numbers of an earlier call (a training loop's, a decode
loop's) finds its kernel by those values first, without classifying each argument. (Argument
positions keep their types in the attention kernels, so 1 and True never meet in one slot.)

Before trusting the direct path, the first direct launch in the process runs both paths on
the same inputs and compares the outputs bit for bit (the compiler's launcher,
`runtime/triton_launch.py`, does the same and its verdict counts here too); a mismatch or an
error (a Triton whose launcher differs) keeps the regular path for good. Outputs too large to
copy for that check (B=4 H=16 S=4096 D=128: 64 MB and up) ask for the process-wide probe
instead (`triton_launch.verify_direct_launch`): without it, a process of only large calls
took Triton's path for every launch, 1.15-1.56 ms of host time per forward+backward on the H200
(bench/results/2026-12-01_attention_bwd_tiles_h200_a983a21.md). Host TensorDescriptor
arguments (the TMA kernels) key on their element type, block shape and rank; the compiled
kernel's launcher builds the TMA descriptor from them at each launch, on either path. Kernels
on the CPU interpreter always take the regular path.
"""
from __future__ import annotations

import functools
import logging

import torch

from cherenkov.runtime.triton_launch import TritonLaunch, same_bits, verify_direct_launch

log = logging.getLogger("cherenkov.attention")

CHECK_BYTES = 64 << 20          # outputs larger than this are not copied for the check
_MAX_KEYS = 256                 # specializations remembered per kernel before starting over
_state = {"direct": None}       # None: not yet checked, True: direct launches match, False: off


@functools.lru_cache(maxsize=None)
def descriptor_class():
    """Triton's host TensorDescriptor class, or None (looked up on first use: importing it
    imports triton.language, which must come after TRITON_INTERPRET is set)."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:          # a Triton without host-side descriptors
        return None
    return TensorDescriptor


@functools.lru_cache(maxsize=None)
def gluon_descriptor_class():
    """Gluon's Hopper TensorDescriptor class (a shared-memory layout beside the block shape),
    or None."""
    try:
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    except Exception:        # noqa: BLE001 -- a Triton without Gluon's Hopper language
        return None
    return TensorDescriptor


_VALIDATED: dict = {}     # (class, shape, strides, dtype, block shape, extra) -> fields


def descriptor(cls, base, shape, strides, block_shape, *extra):
    """cls(base, list(shape), list(strides), list(block_shape), *extra): a host
    TensorDescriptor (Triton's or Gluon's). Its validation (__post_init__: some twenty checks,
    microseconds a descriptor, several descriptors a call) runs once per kind; later ones copy
    the validated fields and take the new base, after checking the one thing validation reads
    off the base itself, its 16-byte alignment (a misaligned one goes to the constructor,
    which refuses it)."""
    key = (cls, shape, strides, base.dtype, tuple(block_shape), extra)
    try:
        fields = _VALIDATED.get(key)
    except TypeError:            # an unhashable extra (a layout of another Triton): as it was
        return cls(base, list(shape), list(strides), list(block_shape), *extra)
    if fields is None or base.data_ptr() % 16:
        d = cls(base, list(shape), list(strides), list(block_shape), *extra)
        if len(_VALIDATED) >= 1024:
            _VALIDATED.clear()
        _VALIDATED[key] = {k: v for k, v in vars(d).items() if k != "base"}
        return d
    d = cls.__new__(cls)
    d.__dict__.update(fields)
    d.base = base
    return d


def _descriptor_kind(d) -> tuple:
    """What a host TensorDescriptor argument's compiled kernel depends on: its element type,
    block shape and rank (the launcher builds the TMA descriptor from its base, shape and
    strides at every launch), Gluon's shared-memory layout, and, conservatively, its padding
    and rounding options."""
    return ("desc", d.base.dtype, tuple(d.block_shape), len(d.shape), d.padding,
            getattr(d, "round_f32_to_tf32", False), getattr(d, "layout", None))


def _is_descriptor(t: type) -> bool:
    return t is descriptor_class() or t is gluon_descriptor_class()


def _kind(a) -> object:
    """What Triton specializes a runtime argument on (conservatively)."""
    if isinstance(a, torch.Tensor):
        return a.dtype, a.data_ptr() % 16 == 0
    if _is_descriptor(type(a)):
        return _descriptor_kind(a)
    if isinstance(a, bool):
        return bool
    if isinstance(a, int):
        return a == 1, a % 16 == 0, -2 ** 31 <= a < 2 ** 31, a >= 2 ** 63
    if isinstance(a, float):
        return float
    if a is None:
        return None
    raise TypeError(type(a))


def _on_gpu(t) -> bool:
    """A CUDA tensor, or a descriptor over one (the Gluon kernels' first argument)."""
    t = getattr(t, "base", t)
    return isinstance(t, torch.Tensor) and t.is_cuda


def _raw_stream() -> int:
    return torch._C._cuda_getCurrentRawStream(torch.cuda.current_device())


def _runtime_knobs():
    try:
        from triton import knobs
        return knobs.runtime
    except Exception:  # noqa: BLE001 -- a Triton without knobs: nothing to honour
        return None


_RUNTIME = _runtime_knobs()


def _hooked() -> bool:
    """Triton debug mode or a launch hook (a profiler such as Proton) is on: launches then take
    Triton's own path, which honours them (the direct call passes no hooks)."""
    rt = _RUNTIME
    if rt is None:
        return False
    hooks = (getattr(rt, "launch_enter_hook", None), getattr(rt, "launch_exit_hook", None))
    return bool(getattr(rt, "debug", False)) or any(
        h is not None and getattr(h, "calls", True) for h in hooks)


def direct_ok() -> bool:
    return bool(_state["direct"] or TritonLaunch.verified) and _state["direct"] is not False


class Launcher:
    """Launches one @triton.jit kernel: `launcher(grid, args, constexprs, outputs, **options)`.

    `args` are the runtime arguments in parameter order, `constexprs` the constexpr ones (a
    dict in parameter order: they come last in every attention kernel), `outputs` the tensors
    the kernel only writes (for the one-time check; () when it accumulates into them).
    """

    def __init__(self, fn):
        self.fn = fn
        self.compiled: dict = {}        # specialization kinds -> compiled kernel
        self.by_value: dict = {}        # exact non-tensor arguments (+ tensor kinds) -> kernel

    def slow(self, grid, args, constexprs, options):
        # FMA contraction stated (every compile goes through here): Triton 3.9 warns that its
        # default turns off in 3.10, and the kernels' softmax counts on a*b+c being one
        # instruction
        return self.fn[grid](*args, **constexprs, **options, enable_fp_fusion=True)

    def __call__(self, grid, args, constexprs: dict, outputs=(), **options):
        if _state["direct"] is False or not _on_gpu(args[0]) or _hooked():
            return self.slow(grid, args, constexprs, options)
        # first by value (one pass, no call per argument: a repeated call's arguments are
        # the same numbers), then by kind (a new sequence length of an already compiled kind)
        Tensor, Descriptor, GluonDescriptor = (torch.Tensor, descriptor_class(),
                                               gluon_descriptor_class())
        device = torch.cuda.current_device()
        # (ints and floats, most of the arguments, first: a type check costs less than
        # isinstance against torch.Tensor)
        vkey = (device, tuple([a if (t := type(a)) is int or t is float or a is None
                               else (a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, Tensor)
                               else _descriptor_kind(a) if t is Descriptor
                               or t is GluonDescriptor
                               else a for a in args]),
                tuple(constexprs.values()), tuple(options.items()))
        try:
            kernel = self.by_value.get(vkey)
        except TypeError:                         # an unhashable argument: Triton decides
            return self.slow(grid, args, constexprs, options)
        if kernel is None:
            try:
                key = (device, tuple(map(_kind, args)),
                       tuple(constexprs.values()), tuple(options.items()))
            except TypeError:
                return self.slow(grid, args, constexprs, options)
            kernel = self.compiled.get(key)
            if len(self.by_value) >= _MAX_KEYS:
                self.by_value.clear()
            if kernel is None:
                if len(self.compiled) >= _MAX_KEYS:
                    self.compiled.clear()
                self.compiled[key] = self.by_value[vkey] = self.slow(grid, args, constexprs,
                                                                     options)
                return None
            self.by_value[vkey] = kernel
        if direct_ok():
            try:
                self._direct(kernel, grid, args, constexprs)
            except Exception as e:  # noqa: BLE001 -- an argument kind this Triton's launcher
                # does not take (host descriptors); it raises before launching
                log.info("cherenkov.attention: direct Triton launch failed (%s); using fn[grid]",
                         e)
                _state["direct"] = False
                self.slow(grid, args, constexprs, options)
        elif torch.cuda.is_current_stream_capturing():   # the check syncs: not while capturing
            self.slow(grid, args, constexprs, options)
        elif outputs and sum(o.numel() * o.element_size() for o in outputs) <= CHECK_BYTES:
            self._check(kernel, grid, args, constexprs, options, outputs)
        elif _state["direct"] is None and verify_direct_launch():
            self._direct(kernel, grid, args, constexprs)     # outputs too large to copy
        else:
            self.slow(grid, args, constexprs, options)
        return None

    @staticmethod
    def _direct(kernel, grid, args, constexprs):
        stream = _raw_stream()
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        kernel.run(grid[0], g1, g2, stream, kernel.function, kernel.packed_metadata, None,
                   None, None, *args, *constexprs.values())

    def _check(self, kernel, grid, args, constexprs, options, outputs):
        """Direct launch, then the regular one on the same inputs: the outputs must agree bit
        for bit (NaN payloads included). Only an error of the direct call itself (a Triton
        whose launcher differs) turns the direct path off; others propagate."""
        try:
            self._direct(kernel, grid, args, constexprs)
        except Exception as e:  # noqa: BLE001 -- a launcher of another calling convention
            log.info("cherenkov.attention: direct Triton launch unavailable (%s)", e)
            _state["direct"] = False
            self.slow(grid, args, constexprs, options)
            return
        direct = [o.clone() for o in outputs]
        self.slow(grid, args, constexprs, options)
        same = all(map(same_bits, direct, outputs))
        if not same:
            log.info("cherenkov.attention: direct Triton launch differs; using fn[grid]")
        _state["direct"] = same


_LAUNCHERS: dict = {}


def launcher(fn) -> Launcher:
    """The one Launcher of a kernel function (kept per function object)."""
    la = _LAUNCHERS.get(fn)
    if la is None:
        la = _LAUNCHERS[fn] = Launcher(fn)
    return la
