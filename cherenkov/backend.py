"""The torch.compile backend: Dynamo graph → AOTAutograd (forward, backward) → Cherenkov.

Each FX graph AOTAutograd hands us becomes a `ShapeSpecialized` callable: it compiles the graph
for the concrete shapes of its first call, and again (up to `config.cache_size` variants) when
shapes change, so a new batch size or sequence length never mis-indexes. Past the bound, or if
anything inside Cherenkov raises while compiling, that graph runs in eager with one warning
(`strict=True` raises instead).
"""
from __future__ import annotations

import contextlib
import functools
import logging
import sys
import time
import warnings
import weakref
from collections import OrderedDict

import torch
from torch._functorch.aot_autograd import aot_module_simplified
from torch._subclasses.fake_tensor import unset_fake_temporarily
from functorch.compile import min_cut_rematerialization_partition

from cherenkov.capture.decompositions import decomposition_table
from cherenkov.compiler import compile_fx
from cherenkov.config import Config, current
from cherenkov.runtime import unused_grads
from cherenkov.runtime.output_strides import output_strides

log = logging.getLogger("cherenkov")


def _signature(inputs) -> list:
    """The layout facts a compiled variant depends on. Compared as a list against the last
    variant used (cheaper than hashing), and as a tuple it keys the variant cache."""
    return [(x.shape, x.stride(), x.dtype, x.device, x.storage_offset())
            if isinstance(x, torch.Tensor) else
            ("scalar", type(x).__name__, x if isinstance(x, (int, bool)) else None)
            for x in inputs]


class ShapeSpecialized:
    """Compiles `gm` per input signature (LRU-bounded); runs the FX graph in eager on failure."""

    def __init__(self, gm: torch.fx.GraphModule, config: Config, name: str):
        self.gm = gm
        self.flex_specs = _flex_specs(gm)          # held while this graph can run
        self.config = config
        self.name = name
        self.cache: OrderedDict = OrderedDict()
        self.info_of: dict = {}                   # input signature -> CompileInfo
        self.failed_reason: str | None = None
        self.profile_next = False                 # time each kernel on the next call
        self.last = None                          # (signature, compiled) of the last call
        self.tangents = unused_grads.tangent_positions(gm)    # a backward's; () otherwise
        self.zeroed: dict = {}                    # tangents given as None -> their variant
        self.unrun: set = set()                   # keys of variants compiled ahead, not yet run

    def __call__(self, inputs: list):
        if self.tangents:
            zeros = tuple(i for i in self.tangents if inputs[i] is None)
            if zeros:
                return self._call_zeroed(inputs, zeros)
        if self.failed_reason is not None:
            return self.gm(*inputs)
        signature = _signature(inputs)
        last = self.last
        if last is not None and not self.profile_next and signature == last[0]:
            return last[1](inputs)                # the common case: same layouts as last call
        key = tuple(signature)
        compiled = self.cache.get(key)
        new = None                                # the CompileInfo of a variant compiled now
        if key in self.unrun:                     # compiled ahead: this is its first run
            self.unrun.discard(key)
            new = self.info_of[key]
        elif compiled is None:
            if len(self.cache) >= self.config.cache_size:
                self._fallback(f"more than cache_size={self.config.cache_size} shape variants")
                return self.gm(*inputs)
            try:
                compiled, new = compile_fx(self.gm, inputs, self.config,
                                           f"{self.name}_v{len(self.cache)}")
            except Exception as e:  # noqa: BLE001 -- the failure policy: eager, one warning
                if self.config.strict:
                    raise
                self._fallback(f"{type(e).__name__}: {e}")
                return self.gm(*inputs)
            self.cache[key] = compiled
            self.info_of[key] = new
            COMPILED.append(Compiled(self, new))
        self.cache.move_to_end(key)
        self.last = (signature, compiled)
        if self.profile_next:
            from cherenkov.runtime.profile import predicted_report, profiled_run
            self.profile_next = False
            info = self.info_of[key]
            info.report = predicted_report(compiled, self.device_spec(inputs))
            return profiled_run(compiled, inputs, info.report)
        if new is None:
            return compiled(inputs)
        from cherenkov.runtime.triton_launch import TritonLaunch
        t0, launches = time.perf_counter(), TritonLaunch.first_launch_s
        held = list(inputs)                       # the plan may release the caller's list
        saved = None if self.config.strict else _snapshot(held, compiled.graph.mutations)
        try:
            out = compiled(inputs)                # the first run loads every kernel
        except Exception as e:  # noqa: BLE001 -- a variant that cannot run: eager, unless
            # it may have written into an input already and nothing was kept to undo that
            # (eager would then apply the update twice)
            if self.config.strict or (compiled.graph.mutations and saved is None):
                raise
            with torch.no_grad():
                for target, before in saved or ():
                    target.copy_(before)
            del self.cache[key]
            self.last = None
            self._fallback(f"first run failed: {type(e).__name__}: {e}")
            return self.gm(*held)
        loads = TritonLaunch.first_launch_s - launches
        new.seconds["first run"] = time.perf_counter() - t0 - loads
        if loads:
            new.seconds["first kernel launches"] = loads
        return out

    def compile_ahead(self, example_inputs: list) -> bool:
        """Compile the variant for AOTAutograd's example inputs (fake tensors laid out as
        traced) now, before the first call, so its kernels compile in the workers while the
        caller goes on (a training graph's backward compiles before its forward first runs).
        Only static shapes, and only where compiling needs no real values (plans chosen by
        timing on the inputs do); a failure here leaves the compile to the first call."""
        if not ahead_of_time(example_inputs, self.config):
            return False
        zeros = self._likely_zeros(example_inputs)
        if zeros:
            variant = self._zeroed_variant(zeros)
            return variant is not None and variant.compile_ahead(
                [x for i, x in enumerate(example_inputs) if i not in zeros])
        key = tuple(_signature(example_inputs))
        if key in self.cache:
            return True
        try:
            # AOTAutograd calls its compilers under its fake mode: outside it, as at a first
            # call, the passes' meta-tensor work runs at its own speed (Llama's passes and
            # plan took 3-5x longer under it on the H200)
            with unset_fake_temporarily():
                compiled, info = compile_fx(self.gm, list(example_inputs), self.config,
                                            f"{self.name}_v{len(self.cache)}")
        except Exception as e:  # noqa: BLE001 -- the first call compiles (and falls back) then
            log.info("cherenkov: graph %s not compiled ahead (%s: %s); it compiles at its "
                     "first call", self.name, type(e).__name__, e)
            return False
        self.cache[key] = compiled
        self.info_of[key] = info
        self.unrun.add(key)
        COMPILED.append(Compiled(self, info))
        _report_output_strides(self.gm, compiled)
        return True

    def _likely_zeros(self, example_inputs: list) -> tuple:
        """The tangents a training loop's backward call will likely get as None (with
        `unused_grads`): where the forward returned a scalar -- a loss -- the gradients of
        its other, non-scalar outputs (logits returned beside the loss). Only the guess of
        which variant to compile ahead: another pattern compiles at its first call."""
        if not self.config.unused_grads or not self.tangents:
            return ()
        shapes = {i: getattr(example_inputs[i], "shape", None) for i in self.tangents}
        if not any(s == () for s in shapes.values()):
            return ()
        return tuple(i for i, s in shapes.items() if s != ())

    def _call_zeroed(self, inputs: list, zeros: tuple):
        """A backward call given None for the gradients of unused outputs (at `zeros`): its
        graph without those inputs, zeros in their place (runtime/unused_grads.py)."""
        variant = self._zeroed_variant(zeros)
        if variant is None or self.failed_reason is not None:
            args = unused_grads.filled(self.gm, inputs, zeros)
            inputs.clear()
            return self.gm(*args)
        rest = [x for i, x in enumerate(inputs) if i not in zeros]
        inputs.clear()                            # the variant frees what it no longer needs
        return variant(rest)

    def _zeroed_variant(self, zeros: tuple) -> "ShapeSpecialized | None":
        """This graph without the tangent inputs at `zeros` (zeros in their place), made
        once; None where it cannot be made (that pattern then runs in eager)."""
        variant = self.zeroed.get(zeros, False)
        if variant is False:
            try:
                variant = ShapeSpecialized(unused_grads.zeroed(self.gm, zeros), self.config,
                                           f"{self.name}_zero{'_'.join(map(str, zeros))}")
            except Exception as e:  # noqa: BLE001 -- this pattern in eager, real zeros
                if self.config.strict:
                    raise
                variant = None
                msg = f"cherenkov: graph {self.name} with zero gradients at {zeros} runs in " \
                      f"eager: {type(e).__name__}: {e}"
                warnings.warn(msg, stacklevel=4)
                log.warning(msg)
            self.zeroed[zeros] = variant
        return variant

    def device_spec(self, inputs):
        from cherenkov.hw import device_for_config
        from cherenkov.lowering.from_fx import graph_device
        return device_for_config(self.config.device, graph_device(inputs))

    def _fallback(self, reason: str) -> None:
        self.failed_reason = reason
        warnings.warn(f"cherenkov: graph {self.name} runs in eager: {reason}", stacklevel=3)
        log.warning("cherenkov: graph %s runs in eager: %s", self.name, reason)


def _report_output_strides(gm: torch.fx.GraphModule, compiled) -> None:
    """Tell AOTAutograd, while it compiles a forward, the strides its outputs will have (as
    Inductor does): a saved activation returned as a view (an expand's stride 0, a
    transpose) differs from the traced layout, and the backward's example inputs are
    restrided to match -- the backward compiled ahead for them is the one its calls use."""
    ctx = torch._guards.TracingContext.try_get()
    if ctx is None or ctx.output_strides is None or ctx.output_strides:
        return
    returned = next(iter(gm.graph.find_nodes(op="output"))).args[0]
    count = len(returned) if isinstance(returned, (tuple, list)) else 1
    strides = output_strides(compiled)
    if len(strides) >= count:
        ctx.output_strides.extend(strides[:count])


def ahead_of_time(example_inputs, config: Config) -> bool:
    """Whether a graph can compile from its example inputs: config `compile_ahead`, every
    input a tensor of static shape and layout or a plain number, and no plan choice that
    times the real inputs (`runtime/plan_choice.wanted`)."""
    if not config.compile_ahead or not example_inputs:
        return False
    from cherenkov.lowering.from_fx import graph_device
    from cherenkov.runtime import plan_choice
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            if not all(isinstance(d, int) for d in (*x.shape, *x.stride(),
                                                      x.storage_offset())):
                return False
        elif not isinstance(x, (int, float, bool)):        # a SymInt, a SymFloat, None
            return False
    return not plan_choice.wanted(config, graph_device(example_inputs))


SNAPSHOT_MAX_BYTES = 1 << 28


def _snapshot(inputs: list, mutations: list) -> list | None:
    """Copies of the inputs a graph updates (target, copy), taken before its first run so a
    failed run can be undone and replayed in eager; [] when it updates none, None when they
    are too big to copy (over SNAPSHOT_MAX_BYTES: an optimizer step's whole state)."""
    targets = list({id(inputs[i]): inputs[i] for i, _ in mutations}.values())
    if sum(t.numel() * t.element_size() for t in targets) > SNAPSHOT_MAX_BYTES:
        return None
    return [(t, t.detach().clone()) for t in targets]


class Compiled:
    """One entry of COMPILED: unpacks as (graph, info). The graph is held weakly -- a compiled
    graph owns its buffers and CUDA-graph pools, which must go when Dynamo drops the graph
    (torch._dynamo.reset(), the model deleted); `graph` is then None and only the info stays."""
    __slots__ = ("_graph", "info")

    def __init__(self, graph: "ShapeSpecialized", info):
        self._graph = weakref.ref(graph)
        self.info = info

    def __iter__(self):
        return iter((self._graph(), self.info))

    def __getitem__(self, i: int):
        return (self._graph(), self.info)[i]


# every (graph, info) compiled in this process, for reports and tests
COMPILED: "list[Compiled]" = []


def caller_outputs(gm: torch.fx.GraphModule) -> None:
    """Record in gm.meta how many of a forward graph's outputs reach the caller -- updated
    inputs, the user's outputs and their bases -- before the activations saved for the
    backward (AOTAutograd's metadata, in the tracing context only while it compiles). Two
    caller outputs must never share memory unless they alias in eager; saved activations
    may."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    count = getattr(meta, "num_forward_returns", None)
    if isinstance(count, int):
        gm.meta["cherenkov_caller_outputs"] = count + len(getattr(meta, "tokens", None) or ())


def _make_compiler(config: Config, kind: str, group=None):
    """AOTAutograd's compiler for `kind` graphs; `group`: the CUDA graph pool a forward and its
    backward share (runtime/cuda_graphs.PoolGroup)."""
    counter = [0]

    def compiler(gm: torch.fx.GraphModule, example_inputs):
        counter[0] += 1
        if group is not None:
            gm.meta["cherenkov_pool_group"] = group
        if kind == "forward":
            caller_outputs(gm)
        fn = ShapeSpecialized(gm, config, f"{kind}{counter[0]}")
        try:
            fn.compile_ahead(example_inputs)
        except Exception as e:  # noqa: BLE001 -- AOTAutograd would raise it (its backward is
            # handed over eagerly): the graph compiles at its first call instead
            if config.strict:
                raise
            log.info("cherenkov: graph %s not compiled ahead (%s: %s)", fn.name,
                     type(e).__name__, e)

        def run(args: list):
            # boxed call: take the caller's list and empty it, so an input nobody else holds
            # (a saved activation in a backward) is freed after its last use in the plan
            inputs = list(args)
            args.clear()
            return fn(inputs)
        run._boxed_call = True
        if kind == "forward" and config.unused_grads and unused_grads.static(example_inputs):
            # its autograd node may skip zero-filling (runtime/unused_grads.py): its backward
            # can compile the zeros in (their shape is static)
            setattr(run, unused_grads.MARK, True)
        return run
    return compiler


def _partition_fn(config: Config):
    """torch's min-cut partitioner, or Cherenkov's cost-model one (`config.partitioner`)."""
    if config.partitioner != "cherenkov":
        return min_cut_rematerialization_partition
    from cherenkov.hw import device_for_config
    from cherenkov.passes.partition import cherenkov_partition
    return functools.partial(cherenkov_partition, device_spec=device_for_config(config.device),
                             memory_budget=config.memory_budget)


def _cross_entropy_rewrite(gm: torch.fx.GraphModule, example_inputs, config: Config,
                           mode: str, rewrite, what: str) -> None:
    """One of the cross-entropy rewrites on Dynamo's graph: `rewrite(gm, mode, device)` under
    mode "on", or "auto" on CUDA (off the GPU their Triton kernels would run interpreted); a
    failure leaves the graph as it was (the rewrites edit only once a match is complete)."""
    from cherenkov.lowering.from_fx import graph_device
    device = graph_device(list(example_inputs))
    if mode == "off" or mode == "auto" and device.type != "cuda":
        return
    try:
        rewrite(gm, mode, device)
    except Exception as e:  # noqa: BLE001
        if config.strict:
            raise
        log.warning("cherenkov: %s: %s: %s", what, type(e).__name__, e)


def _cross_entropy_rewrites(gm: torch.fx.GraphModule, example_inputs, config: Config):
    """The LM head + cross-entropy fusion (capture/linear_ce.py), then, for the
    cross-entropies it left, the gradient made in the forward (capture/ce_forward_grad.py)."""
    from cherenkov.capture.ce_forward_grad import use_ce_forward_grad
    from cherenkov.capture.linear_ce import fuse_linear_cross_entropy
    from cherenkov.hw import device_for_config

    def fuse(gm, mode, device):
        fuse_linear_cross_entropy(gm, mode, device_for_config(config.device, device))
    _cross_entropy_rewrite(gm, example_inputs, config, config.linear_ce, fuse,
                           "LM head + cross-entropy not fused")
    _cross_entropy_rewrite(gm, example_inputs, config, config.ce_forward_grad,
                           lambda gm, mode, device: use_ce_forward_grad(gm, mode),
                           "cross-entropy gradient not moved to the forward")


def _flex_attention(gm: torch.fx.GraphModule, config: Config):
    """FlexAttention calls (capture/flex_attention.py) run by our kernels (whatever
    `attention` says of SDPA calls: cherenkov.attention is recorded as this op); a failure
    leaves the graph as it was for that call (its graph then runs in eager)."""
    from cherenkov.capture.flex_attention import use_cherenkov_flex_attention
    try:
        use_cherenkov_flex_attention(gm)
    except Exception as e:  # noqa: BLE001
        if config.strict:
            raise
        log.warning("cherenkov: flex_attention not taken: %s: %s", type(e).__name__, e)


def _flex_specs(gm: torch.fx.GraphModule) -> list:
    """The FlexSpecs `gm`'s flex-attention ops use (attention/flex_op.py keeps them only as
    long as a holder does)."""
    flex_op = sys.modules.get("cherenkov.attention.flex_op")   # it defines the ops: no module,
    return flex_op.specs_in(gm) if flex_op is not None else []  # no flex op in any graph


def _returned(gm: torch.fx.GraphModule, compiled, config: Config, example_inputs):
    """What the backend hands Dynamo for `gm`: AOTAutograd's `compiled`, holding the specs of
    `gm`'s flex calls for as long as Dynamo keeps it, and -- with `unused_grads`, for static
    shapes -- watching each call's outputs so that its backward is handed None, not filled
    zeros, for the gradients of unused outputs (runtime/unused_grads.py)."""
    specs = _flex_specs(gm)
    if config.unused_grads and unused_grads.static(example_inputs):
        watch = unused_grads.watch

        @functools.wraps(compiled)
        def watching(*args, **kwargs):
            outs = compiled(*args, **kwargs)
            watch(outs)
            return outs
        watching._cherenkov_flex_specs = specs
        return watching
    if not specs:
        return compiled
    try:
        compiled._cherenkov_flex_specs = specs
        return compiled
    except (AttributeError, TypeError):
        @functools.wraps(compiled)
        def holding(*args, **kwargs):
            return compiled(*args, **kwargs)
        holding._cherenkov_flex_specs = specs
        return holding


def _backward_ahead(config: Config):
    """With `compile_ahead`: AOTAutograd hands over a training graph's backward right after
    its forward (its `force_non_lazy_backward_lowering`, where this torch has it), instead
    of at the first backward call, so both compile before the forward first runs."""
    from torch._functorch import config as functorch_config
    if not config.compile_ahead or not hasattr(functorch_config,
                                                 "force_non_lazy_backward_lowering"):
        return contextlib.nullcontext()
    return functorch_config.patch(force_non_lazy_backward_lowering=True)


def cherenkov_backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None,
                      **kwargs):
    """Entry point registered as torch.compile(backend="cherenkov"); torch.compile's
    `options={...}` arrive as one dict, cherenkov.compile's as keywords."""
    config = current(**{**(options or {}), **kwargs})
    if any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in example_inputs) \
            and not config.interpret:
        from cherenkov.runtime import parallel_compile
        parallel_compile.warm(config.compile_workers)   # workers start while AOT traces
    _cross_entropy_rewrites(gm, example_inputs, config)
    _flex_attention(gm, config)
    from cherenkov.runtime.cuda_graphs import PoolGroup
    pool = PoolGroup(pooled=config.cuda_graphs_pooled)
    try:
        with _backward_ahead(config):
            compiled = aot_module_simplified(
                gm, example_inputs,
                fw_compiler=_make_compiler(config, "forward", pool),
                bw_compiler=_make_compiler(config, "backward", pool),
                inference_compiler=_make_compiler(config, "inference"),
                decompositions=decomposition_table(),
                partition_fn=_partition_fn(config),
                keep_inference_input_mutations=True)
        return _returned(gm, compiled, config, example_inputs)
    except Exception as e:  # noqa: BLE001
        if config.strict:
            raise
        warnings.warn(f"cherenkov: capture failed, running in eager: {type(e).__name__}: {e}")
        return gm.forward
