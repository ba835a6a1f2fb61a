"""torch's FlexAttention, as Dynamo captures it, run by Cherenkov's kernels: two custom ops.

Dynamo turns a `flex_attention(q, k, v, score_mod, block_mask)` call into the higher-order op
`flex_attention(q, k, v, score_graph, block_mask_tuple, scale, kernel_options, score_buffers,
mask_buffers)`, whose score and mask mods are small torch-level GraphModules reading their
captured tensors as trailing arguments. `capture/flex_attention.py` replaces it before
AOTAutograd with `cherenkov::flex_attention` (this file), keyed by a `FlexSpec` that holds the
two graphs: AOTAutograd then sees one opaque op with a registered gradient
(`cherenkov::flex_attention_backward`), and the compiled graphs call our kernels.

The mods are traced once per spec with stand-in tensors for the buffers (the tracer reads a
captured tensor's values and sizes at run time, so the stand-ins only give dtype and rank);
each call passes the real buffers in the traced order. Outputs follow the HOP: `out` and
`lse` in log2 units, -inf on a query row with no key left (output 0 there). A gradient
reaching `lse` is folded into the backward's row term (d lse / d score = p).

The block mask's lists are used as given when their tiles are powers of two our kernel tiles
divide; FlexAttention's own "no block mask" (one huge partial tile) and any other tiling get
a block mask built from the mask graph (kept per shape when the mask reads no buffer). Mods
the tracer cannot render, float64, or no Triton: the math implementation, as eager flex.
"""
from __future__ import annotations

import functools
import itertools
import threading
import weakref
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from . import launch, launch_bwd, launch_decode
from .api import DECODE_MAX_Q, log_math_once
from .block_mask import DEFAULT_BLOCK, BlockMask, block_mask as build_block_mask
from .codegen import interpreter_dots_exact, kernel_mode, load_kernels
from .launch import LN2, unit_stride
from .reference import attention_math
from .render import FLOAT_INDEX_MAX_LEN
from .shape_cache import ShapeCache
from .trace import TraceError, trace_mods

HUGE_BLOCK = 1 << 30          # FlexAttention's block size for "no block mask"


def walks_lists(block) -> bool:
    """Whether our kernels walk a flex block mask of these tiles as given: powers of two
    >= 16, which every kernel tile divides (FlexAttention's "no block mask", HUGE_BLOCK, is
    not a tiling: the op builds its own)."""
    return all(16 <= s < HUGE_BLOCK and not s & (s - 1) for s in block)


@dataclass(eq=False)
class FlexSpec:
    """What one captured flex_attention call needs beyond its tensors."""
    score_graph: Optional[Callable]      # (score, b, h, q_idx, kv_idx, *score_buffers)
    mask_graph: Optional[Callable]       # (b, h, q_idx, kv_idx, *mask_buffers)
    score_buffers: tuple                 # (shape, dtype, requires_grad) of each
    mask_buffers: tuple
    block: tuple[int, int]               # flex's (Q_BLOCK_SIZE, KV_BLOCK_SIZE)
    # kept per spec: the traced mods (or why they do not trace), their kernel modules, the
    # last conversion of flex's lists, block masks built from the mask graph, the last plan
    # (with its launch decisions: memo.py) per kernel module and scale
    _traced: object = field(default=None, repr=False)
    _kernels: dict = field(default_factory=dict, repr=False)
    _lists: tuple | None = field(default=None, repr=False)
    _masks: ShapeCache = field(default_factory=lambda: ShapeCache(16), repr=False)
    _plans: ShapeCache = field(default_factory=lambda: ShapeCache(16), repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def mods(self, score_bufs, mask_bufs):
        """(score_mod, mask_mod) reading the given buffers (None: identity / no mask)."""
        score = mask = None
        if self.score_graph is not None:
            graph = self.score_graph
            score = lambda s, b, h, q, kv: graph(s, b, h, q, kv, *score_bufs)  # noqa: E731
        if self.mask_graph is not None:
            graph_m = self.mask_graph
            mask = lambda b, h, q, kv: graph_m(b, h, q, kv, *mask_bufs)        # noqa: E731
        return score, mask

    def traced(self):
        """(TracedMods on stand-ins, where each capture comes from: ("s" | "m", index)), or
        a TraceError. The score graph of flex's identity and the mask graph of its no-op
        mask trace to nothing (no score_mod / no mask)."""
        with self._lock:
            if self._traced is None:
                self._traced = self._trace()
            result = self._traced
        if isinstance(result, TraceError):
            raise result
        return result

    def _trace(self):
        def stand_in(shape, dtype, requires_grad):
            t = torch.zeros(shape, dtype=dtype)
            return t.requires_grad_() if requires_grad and dtype.is_floating_point else t
        s_in = [stand_in(*e) for e in self.score_buffers]
        m_in = [stand_in(*e) for e in self.mask_buffers]
        score, mask = self.mods(s_in, m_in)
        try:
            traced = trace_mods(score, mask)
        except TraceError as e:
            return e
        if traced.score is not None and traced.score.op == "score":
            traced.score = None                       # flex's identity score_mod
        if traced.mask is not None and traced.mask.op == "const" and traced.mask.value is True:
            traced.mask = None                        # flex's no-op mask_mod
        where = {id(t): ("s", i) for i, t in enumerate(s_in)}
        where.update({id(t): ("m", i) for i, t in enumerate(m_in)})
        if any(id(t) not in where for t in traced.captured):
            # a tensor made inside the mod (torch.tensor(0.5), or arithmetic on a stand-in:
            # `S // 2` of a symbolic size) would be baked in with the stand-in's values
            return TraceError("the mods read a tensor they create (the math implementation "
                              "runs them)")
        return traced, [where[id(t)] for t in traced.captured]

    def grad_buffer(self, i: int) -> bool:
        """Whether score buffer i gets a gradient (it required grad when captured)."""
        _, dtype, requires_grad = self.score_buffers[i]
        return requires_grad and dtype.is_floating_point

    def kernels(self, interpret: bool, float_index: bool):
        """The kernel module, kept per spec: rendering and hashing its source on every call
        made flex through this op slow (softcap forward 1.74 ms at 3d1587d, 0.81 ms with the
        module kept at 75a74a2; cherenkov.attention's direct call 0.77)."""
        module = self._kernels.get((interpret, float_index))
        if module is None:
            traced, _ = self.traced()
            module = self._kernels[(interpret, float_index)] = load_kernels(
                traced, interpret, float_index)
        return module

    @functools.cached_property
    def mask_is_data(self) -> bool:
        """Whether block_mask builds a mask for each call: from a mask graph reading buffers
        (their values are data), where flex's lists cannot be walked as given. (Asked once
        the mods have traced.)"""
        traced, slots = self.traced()
        return not walks_lists(self.block) and traced.mask is not None \
            and any(kind == "m" for kind, _ in slots)

    def block_mask(self, blocks, B, H, Q_LEN, KV_LEN, mask_bufs, device) -> BlockMask:
        """Our BlockMask: flex's lists when our kernels can walk them, else one built from
        the mask graph (kept per shape unless the mask reads buffers: then it is data)."""
        shape = (B, H, Q_LEN, KV_LEN)
        if walks_lists(self.block):
            # the last answer, while the same list tensors come unmodified (a model's mask is
            # the same graph input every step): converting them was a third of the op's Python
            versions = tuple(-1 if t is None else t._version for t in blocks)
            last = self._lists
            if last is not None and last[1] == versions and last[2] == shape and all(
                    a is b for a, b in zip(last[0], blocks)):
                return last[3]
            mask = _from_flex_lists(blocks, self.block, shape)
            self._lists = (tuple(blocks), versions, shape, mask)
            return mask
        traced, slots = self.traced()
        mask_mod = None if traced.mask is None else self.mods((), mask_bufs)[1]
        if self.mask_is_data:
            return build_block_mask(mask_mod, *shape, DEFAULT_BLOCK, device)
        key = (*shape, str(device))
        mask = self._masks.get(key)
        if mask is None:
            mask = self._masks.put(key, build_block_mask(mask_mod, *shape, DEFAULT_BLOCK,
                                                         device))
        return mask


# key -> spec, held weakly: whoever may run a graph calling the ops holds its specs (the
# graph module the capture pass rewrote, the function the backend returns, each compiled
# forward / backward: `specs_in`), so a spec goes when the last graph using it goes
_SPECS: "weakref.WeakValueDictionary[int, FlexSpec]" = weakref.WeakValueDictionary()
_KEYS = itertools.count()
_SPECS_LOCK = threading.Lock()


def register(spec: FlexSpec) -> int:
    """The key the ops find `spec` by, for as long as something holds the spec."""
    with _SPECS_LOCK:
        key = next(_KEYS)
        _SPECS[key] = spec
        return key


def spec_of(key: int) -> FlexSpec:
    spec = _SPECS.get(key)
    if spec is None:
        raise RuntimeError(f"cherenkov::flex_attention: spec {key} is gone (the compiled graph "
                           "that recorded this call was freed; compile the function again)")
    return spec


def specs_in(gm: torch.fx.GraphModule) -> list[FlexSpec]:
    """The specs the flex ops of `gm` and its submodules use (to be held by whoever keeps
    `gm`, or a graph compiled from it, callable)."""
    ops = (torch.ops.cherenkov.flex_attention.default,
           torch.ops.cherenkov.flex_attention_backward.default)
    found = {}
    for module in gm.modules():
        if isinstance(module, torch.fx.GraphModule):
            for node in module.graph.nodes:
                if node.op == "call_function" and node.target in ops:
                    key = node.args[-1]
                    found[key] = spec_of(key)
    return list(found.values())


def _i32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.int32).contiguous()


def _from_flex_lists(blocks, block, shape) -> BlockMask:
    """Our BlockMask over flex's lists (no tile states: the op never needs them)."""
    kv_num, kv_idx, fkv_num, fkv_idx, q_num, q_idx, fq_num, fq_idx = blocks
    if fkv_num is None:                 # no full tiles: every listed tile is masked
        fkv_num, fkv_idx = torch.zeros_like(kv_num), kv_idx
    if q_num is None:   # compute_q_blocks=False: forward only (flex refuses its gradient;
        # the backward checks)
        return BlockMask(None, *(_i32(t) for t in (kv_num, kv_idx, fkv_num, fkv_idx)),
                         None, None, None, None, block=tuple(block), shape=tuple(shape))
    if fq_num is None:
        fq_num, fq_idx = torch.zeros_like(q_num), q_idx
    lists = [_i32(t) for t in (kv_num, kv_idx, fkv_num, fkv_idx, q_num, q_idx, fq_num, fq_idx)]
    return BlockMask(None, *lists, block=tuple(block), shape=tuple(shape))


def _kernels_or_reason(spec: FlexSpec, q: torch.Tensor, k: torch.Tensor):
    """("jit" | "interpret", kernels) or (None, reason)."""
    mode, reason = kernel_mode(q.device)
    if q.dtype == torch.float64:
        return None, "float64 inputs (the kernels compute in float32)"
    if mode is None:
        return None, reason
    try:
        spec.traced()
    except TraceError as e:
        return None, f"the mods cannot be traced ({e})"
    if mode == "interpret" and not interpreter_dots_exact(q.dtype):
        return mode, None           # run on float32 copies (interpret_16bit)
    float_index = max(q.shape[2], k.shape[2]) < FLOAT_INDEX_MAX_LEN
    return mode, spec.kernels(mode == "interpret", float_index)


def _plan(spec, kernels, q, k, blocks, score_bufs, mask_bufs, scale, interpret):
    traced, slots = spec.traced()
    captured = [(score_bufs if kind == "s" else mask_bufs)[i] for kind, i in slots]
    captured = [t.to(q.device) if t.device != q.device else t for t in captured]
    B, H, Q_LEN = q.shape[:3]
    mask = spec.block_mask(blocks, B, H, Q_LEN, k.shape[2], mask_bufs, q.device)
    plan = launch.Plan(kernels, traced, mask, scale, interpret) if spec.mask_is_data else \
        launch.kept_plan(spec._plans, kernels, traced, mask, scale, interpret)
    return plan, captured, slots


def _gqa(q, k) -> bool:
    return q.shape[1] != k.shape[1]


def _check(q, k, v) -> None:
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3] \
            or q.shape[1] % k.shape[1]:
        raise ValueError(f"flex_attention on Cherenkov's kernels: q {tuple(q.shape)}, k "
                         f"{tuple(k.shape)}, v {tuple(v.shape)}: k and v alike, one batch and "
                         "head dim, query heads a multiple of kv heads")


def forward(q, k, v, blocks, score_bufs, mask_bufs, scale, key):
    """(out, lse in log2 units, -inf on empty rows)."""
    _check(q, k, v)
    spec = spec_of(key)
    mode, kernels = _kernels_or_reason(spec, q, k)
    if mode is None:
        log_math_once(kernels)
        score_mod, mask_mod = spec.mods(score_bufs, mask_bufs)
        out, lse = attention_math(q, k, v, score_mod, mask_mod, scale, _gqa(q, k), True)
        return out, lse / LN2
    if kernels is None:                 # 16-bit on the CPU interpreter: float32 copies
        out, lse = forward(q.float(), k.float(), v.float(), blocks,
                           [b.float() if b.is_floating_point() else b for b in score_bufs],
                           mask_bufs, scale, key)
        return out.to(q.dtype), lse
    q, k, v = unit_stride(q), unit_stride(k), unit_stride(v)
    plan, captured, _ = _plan(spec, kernels, q, k, blocks, score_bufs, mask_bufs, scale,
                              mode == "interpret")
    if q.shape[2] <= DECODE_MAX_Q and plan.mask.state is not None \
            and k.shape[2] >= 4 * plan.mask.block[1]:
        out, lse = launch_decode.decode(plan, q, k, v, captured)       # a few query rows, long KV
    else:
        out, lse = launch.forward(plan, q, k, v, captured)
    return out, torch.where(torch.isinf(lse), float("-inf"), lse)


def backward(q, k, v, out, lse, dout, dlse, blocks, score_bufs, mask_bufs, scale, key):
    """(dq, dk, dv, [gradient of each score buffer, or None])."""
    spec = spec_of(key)
    mode, kernels = _kernels_or_reason(spec, q, k)
    if mode is None or kernels is None:
        return _backward_math(spec, q, k, v, dout, dlse, score_bufs, mask_bufs, scale)
    q, k, v = unit_stride(q), unit_stride(k), unit_stride(v)
    plan, captured, slots = _plan(spec, kernels, q, k, blocks, score_bufs, mask_bufs, scale,
                                  mode == "interpret")
    if plan.mask.q_num_blocks is None:
        raise RuntimeError("flex_attention backward needs the block mask's q lists (a BlockMask "
                           "made with compute_q_blocks=True)")
    lse2 = torch.where(torch.isinf(lse), float("inf"), lse).contiguous()
    drow = None if dlse is None else (dlse.float() / LN2)
    wants = [kind == "s" and spec.grad_buffer(i) for kind, i in slots]
    dq, dk, dv, cgrads = launch_bwd.backward(plan, q, k, v, out.contiguous(), lse2, dout,
                                             captured, wants, drow)
    grads = [None] * len(score_bufs)
    for (kind, i), g in zip(slots, cgrads):
        if kind == "s" and g is not None:
            grads[i] = g
    return dq, dk, dv, grads


def _backward_math(spec, q, k, v, dout, dlse, score_bufs, mask_bufs, scale):
    """Gradients through the math implementation (what eager flex computes), by autograd in
    a thread of its own: inside a custom op's implementation this thread's dispatcher skips
    autograd (thread-local), and a new thread starts without that exclusion."""
    from concurrent.futures import ThreadPoolExecutor
    stream = torch.cuda.current_stream(q.device) if q.is_cuda else None

    def run():
        if stream is None:
            return _backward_math_autograd(spec, q, k, v, dout, dlse, score_bufs, mask_bufs,
                                           scale)
        with torch.cuda.device(q.device), torch.cuda.stream(stream):   # the caller's stream
            return _backward_math_autograd(spec, q, k, v, dout, dlse, score_bufs, mask_bufs,
                                           scale)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def _backward_math_autograd(spec, q, k, v, dout, dlse, score_bufs, mask_bufs, scale):
    with torch.enable_grad():
        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
        sb = [b.detach().float().requires_grad_() if spec.grad_buffer(i) else b
              for i, b in enumerate(score_bufs)]
        score_mod, mask_mod = spec.mods(sb, mask_bufs)
        out, lse = attention_math(qq.float(), kk.float(), vv.float(), score_mod, mask_mod,
                                  scale, _gqa(q, k), True, lse_grad=dlse is not None)
        outs, grads_in = [out], [dout.float()]
        if dlse is not None:
            finite = torch.isfinite(lse)
            outs.append(torch.where(finite, lse, 0.0) / LN2)
            grads_in.append(torch.where(finite, dlse.float(), 0.0))
        wrt = [qq, kk, vv] + [b for b in sb if b.requires_grad]
        got = torch.autograd.grad(outs, wrt, grads_in, allow_unused=True)
    dq, dk, dv = (g.to(t.dtype) if g is not None else torch.zeros_like(t)
                  for g, t in zip(got[:3], (q, k, v)))
    rest = iter(got[3:])
    grads = [next(rest) if spec.grad_buffer(i) else None for i in range(len(sb))]
    grads = [g.to(b.dtype) if g is not None else None for g, b in zip(grads, score_bufs)]
    return dq, dk, dv, grads


# ----------------------------------------------------------------------------------------------
# the custom ops AOTAutograd traces (blocks: flex's eight list tensors, None where absent)
@torch.library.custom_op("cherenkov::flex_attention", mutates_args=())
def flex_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      kv_num: torch.Tensor, kv_idx: torch.Tensor,
                      full_kv_num: Optional[torch.Tensor], full_kv_idx: Optional[torch.Tensor],
                      q_num: Optional[torch.Tensor], q_idx: Optional[torch.Tensor],
                      full_q_num: Optional[torch.Tensor], full_q_idx: Optional[torch.Tensor],
                      score_bufs: list[torch.Tensor], mask_bufs: list[torch.Tensor],
                      scale: float, key: int) -> tuple[torch.Tensor, torch.Tensor]:
    blocks = (kv_num, kv_idx, full_kv_num, full_kv_idx, q_num, q_idx, full_q_num, full_q_idx)
    out, lse = forward(q, k, v, blocks, list(score_bufs), list(mask_bufs), scale, key)
    return out.contiguous(), lse.float().contiguous()


@flex_attention_op.register_fake
def _(q, k, v, *rest):
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            q.new_empty(q.shape[:3], dtype=torch.float32))


@torch.library.custom_op("cherenkov::flex_attention_backward", mutates_args=())
def flex_attention_backward_op(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
        lse: torch.Tensor, dout: torch.Tensor, dlse: Optional[torch.Tensor],
        kv_num: torch.Tensor, kv_idx: torch.Tensor,
        full_kv_num: Optional[torch.Tensor], full_kv_idx: Optional[torch.Tensor],
        q_num: Optional[torch.Tensor], q_idx: Optional[torch.Tensor],
        full_q_num: Optional[torch.Tensor], full_q_idx: Optional[torch.Tensor],
        score_bufs: list[torch.Tensor], mask_bufs: list[torch.Tensor], scale: float,
        key: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """dq, dk, dv and one gradient per score buffer (empty where it gets none)."""
    blocks = (kv_num, kv_idx, full_kv_num, full_kv_idx, q_num, q_idx, full_q_num, full_q_idx)
    dq, dk, dv, grads = backward(q, k, v, out, lse, dout, dlse, blocks, list(score_bufs),
                                 list(mask_bufs), scale, key)
    grads = [g.contiguous() if g is not None else b.new_empty(0)
             for g, b in zip(grads, score_bufs)]
    return dq.contiguous(), dk.contiguous(), dv.contiguous(), grads


@flex_attention_backward_op.register_fake
def _(q, k, v, out, lse, dout, dlse, *rest):
    score_bufs, key = rest[8], rest[11]
    spec = spec_of(key)
    grads = [torch.empty_like(b, memory_format=torch.contiguous_format) if spec.grad_buffer(i)
             else b.new_empty(0) for i, b in enumerate(score_bufs)]
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty_like(k, memory_format=torch.contiguous_format),
            torch.empty_like(v, memory_format=torch.contiguous_format), grads)


def _setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    blocks = inputs[3:11]
    score_bufs, mask_bufs, scale, key = inputs[11], inputs[12], inputs[13], inputs[14]
    out, lse = output
    # an output nobody reads gets None, not a materialized zero tensor (lse mostly: its zeros
    # would cost an allocation and two element-wise passes in every backward)
    ctx.set_materialize_grads(False)
    ctx.key, ctx.scale, ctx.n_score = key, scale, len(score_bufs)
    ctx.present = tuple(b is not None for b in blocks)
    ctx.save_for_backward(q, k, v, out, lse, *(b for b in blocks if b is not None),
                          *score_bufs, *mask_bufs)


def _backward(ctx, dout, dlse):
    q, k, v, out, lse, *rest = ctx.saved_tensors
    it = iter(rest)
    blocks = [next(it) if present else None for present in ctx.present]
    rest = list(it)
    score_bufs, mask_bufs = rest[:ctx.n_score], rest[ctx.n_score:]
    if dout is None:
        dout = torch.zeros_like(out)
    dq, dk, dv, grads = flex_attention_backward_op(q, k, v, out, lse, dout, dlse, *blocks,
                                                   score_bufs, mask_bufs, ctx.scale, ctx.key)
    spec = spec_of(ctx.key)
    grads = [g if spec.grad_buffer(i) else None for i, g in enumerate(grads)]
    return (dq, dk, dv) + (None,) * 8 + (grads, [None] * len(mask_bufs), None, None)


flex_attention_op.register_autograd(_backward, setup_context=_setup_context)


# ----------------------------------------------------------------------------------------------
# compile jobs: the launches a call will make, for the compile workers
def _recording_mask(spec: FlexSpec, blocks, B, H, Q_LEN, KV_LEN, device) -> BlockMask:
    """A BlockMask laid out as the run's will be, on the meta device: flex's lists, or the
    one block_mask() builds (dims the mask does not read kept at size 1)."""
    if walks_lists(spec.block):
        return _from_flex_lists(blocks, spec.block, (B, H, Q_LEN, KV_LEN))
    from .trace import depends_on
    traced, _ = spec.traced()
    deps = depends_on(traced.mask) if traced.mask is not None else set()
    Bm, Hm = (B if "b" in deps else 1), (H if "h" in deps else 1)
    nq, nk = -(-Q_LEN // DEFAULT_BLOCK[0]), -(-KV_LEN // DEFAULT_BLOCK[1])

    def lists(rows, cols):
        return (torch.empty(Bm, Hm, rows, dtype=torch.int32, device="meta"),
                torch.empty(Bm, Hm, rows, cols, dtype=torch.int32, device="meta"))
    return BlockMask(None, *lists(nq, nk), *lists(nq, nk), *lists(nk, nq), *lists(nk, nq),
                     block=DEFAULT_BLOCK, shape=(B, H, Q_LEN, KV_LEN))


def compile_jobs(key, q, k, v, blocks, score_bufs, mask_bufs, scale, device,
                 grads=None) -> tuple[list, list]:
    """(forward jobs, backward jobs) for a call on meta tensors laid out as the run's, on
    `device`; `grads` = (out, lse, dout, dlse) for the backward's. Empty when the kernels
    would not run (math implementation, decode)."""
    spec = spec_of(key)
    mode, _ = kernel_mode(device)
    if mode is None or q.dtype == torch.float64 or q.shape[2] <= DECODE_MAX_Q:
        return [], []
    try:
        traced, slots = spec.traced()
    except TraceError:
        return [], []
    module = spec.kernels(mode == "interpret", max(q.shape[2], k.shape[2]) < FLOAT_INDEX_MAX_LEN)
    captured = [(score_bufs if kind == "s" else mask_bufs)[i] for kind, i in slots]
    q, k, v = unit_stride(q), unit_stride(k), unit_stride(v)
    B, H, Q_LEN = q.shape[:3]
    rec = launch.Recorder()
    plan = launch.Plan(rec, traced, _recording_mask(spec, blocks, B, H, Q_LEN, k.shape[2],
                                                    device), scale, mode == "interpret")
    launch.forward(plan, q, k, v, captured)
    n_forward = len(rec.calls)
    if grads is not None:
        out, lse, dout, dlse = grads
        if plan.mask.q_num_blocks is not None:
            wants = [kind == "s" and spec.grad_buffer(i) for kind, i in slots]
            launch_bwd.backward(plan, q, k, v, out.contiguous(), lse.contiguous(), dout,
                                captured, wants, None if dlse is None else dlse.float())
    jobs = launch.recorded_jobs(module, rec.calls)
    return jobs[:n_forward], jobs[n_forward:]
