"""The OpInfo sweep: PyTorch's own op database, compiled by Cherenkov and compared with eager.

For one OpInfo (`torch.testing._internal.common_methods_invocations.op_db`) and its first few
sample inputs, `sweep_op` compiles `fn(*tensors) = op(sample.input, *sample.args,
**sample.kwargs)` with `cherenkov.compile(fn, strict=True)` and compares with eager:

    fp32 forward      always (int64/bool for ops without fp32 support)
    fp32 backward     grads of the inputs, where the op supports autograd
    bf16 forward      where the op supports bf16

An op is "lowered" when at least one forward sample compiles with no `extern` node. A case
whose graphs hold an extern (a lowering declined: zero-element or complex tensors, an op with
no lowering) is counted as `extern`, not compared; one that Dynamo runs in eager (a graph
break around the whole op) is skipped. An op none of whose samples lowers is reported as
`extern` with the ops that ran as extern. `summary_table` prints passed/failed/skipped counts
by op; `sweep_report` is the same as a JSON-able dict. Standalone (CPU tensors run on the
default CPU backend; CHERENKOV_CPU_BACKEND=triton sweeps the Triton path, as the tests do;
`--device cuda` takes the samples on the GPU, where the Triton kernels are compiled for the
device; `--budget-s` stops starting ops after that many seconds, the report covering those run):

    CHERENKOV_CPU_BACKEND=triton python -m tests.lowering.opinfo_sweep --shard 0/2 --json a.json
    python -m tests.lowering.opinfo_sweep --device cuda --fast-first --budget-s 500 --json b.json
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass, field

import cherenkov  # noqa: F401 -- before anything imports triton: picks the interpreter on CPU
import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from cherenkov import backend

FP32_TOL = dict(rtol=1e-4, atol=1e-5)
BF16_TOL = dict(rtol=2e-2, atol=2e-2)
GRAD_TOL = dict(rtol=1e-3, atol=1e-4)

# representative ops run by default: (OpInfo name, variant_test_name)
FAST_OPS = [
    ("add", ""), ("mul", ""), ("div", "no_rounding_mode"), ("div", "trunc_rounding"),
    ("div", "floor_rounding"), ("exp", ""), ("tanh", ""), ("sigmoid", ""), ("where", ""),
    ("clamp", ""), ("sum", ""), ("mean", ""), ("amax", ""), ("argmax", ""), ("var", ""),
    ("softmax", ""), ("log_softmax", ""), ("nn.functional.layer_norm", ""),
    ("nn.functional.gelu", ""), ("nn.functional.silu", ""), ("cat", ""), ("stack", ""),
    ("permute", ""), ("transpose", ""), ("expand", ""), ("narrow", ""), ("slice", ""),
    ("index_select", ""), ("gather", ""), ("nn.functional.embedding", ""),
    ("constant_pad_nd", ""), ("flip", ""), ("repeat", ""), ("linalg.vector_norm", ""),
    ("nn.functional.normalize", ""), ("nn.functional.group_norm", ""),
]


@dataclass
class CaseResult:
    kind: str               # "fp32_forward" | "fp32_backward" | "bf16_forward" | ...
    sample: int
    status: str             # "pass" | "fail" | "skip" | "extern"
    reason: str = ""


@dataclass
class OpResult:
    name: str
    lowered: bool = False
    externs: set = field(default_factory=set)
    kernels: int = 0
    cases: list = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(c.status == status for c in self.cases)

    @property
    def verdict(self) -> str:
        if not self.lowered:
            return "extern" if self.externs else "skip"
        if self.count("fail"):
            return "fail"
        return "pass" if self.count("pass") else "skip"


def op_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def find_ops(names=None):
    """OpInfos by (name, variant) pairs; all of op_db when `names` is None."""
    from torch.testing._internal.common_methods_invocations import op_db
    if names is None:
        return list(op_db)
    by_key = {(op.name, op.variant_test_name): op for op in op_db}
    return [by_key[key] for key in names]


# ---- one case ----------------------------------------------------------------------------

def _as_function(op, sample, materialize: bool = False):
    """fn(*tensors) applying `op` to `sample`, and the sample's tensors in order.

    `materialize` multiplies each non-bool tensor output by 1: a view op's compiled graph
    otherwise computes nothing (AOTAutograd replays output views itself), and the product
    makes Cherenkov generate the kernel that reads through the view's index arithmetic."""
    leaves, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

    def fn(*tensors):
        filled = list(leaves)
        for i, t in zip(positions, tensors):
            filled[i] = t
        x, args, kwargs = tree_unflatten(filled, spec)
        out = sample.output_process_fn_grad(op(x, *args, **kwargs))
        return tree_map(_times_one, out) if materialize else out
    return fn, [leaves[i] for i in positions]


def _times_one(value):
    if isinstance(value, torch.Tensor) and value.dtype != torch.bool:
        return value * 1
    return value


def _fresh(tensors):
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]


def _float_outputs(out):
    leaves, _ = tree_flatten(out)
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad
            and (t.dtype.is_floating_point or t.dtype.is_complex)]


def _grads(fn, tensors, cotangent_seed=0):
    out = fn(*tensors)
    outs = _float_outputs(out)
    wrt = [t for t in tensors if t.requires_grad]
    if not outs or not wrt:
        return None
    gen = torch.Generator().manual_seed(cotangent_seed)
    cot = [torch.randn(o.shape, generator=gen, dtype=torch.float32).to(o.device, o.dtype)
           for o in outs]
    grads = torch.autograd.grad(outs, wrt, cot, allow_unused=True)
    return [torch.zeros_like(w) if g is None else g for g, w in zip(grads, wrt)]


def run_case(op, sample, kind: str, index: int, materialize: bool = False):
    """Compile `op` on `sample`, compare with eager; returns the result and the CompileInfos."""
    fn, tensors = _as_function(op, sample, materialize)
    backward = kind.endswith("backward")
    tol = BF16_TOL if kind.startswith("bf16") else (GRAD_TOL if backward else FP32_TOL)
    run = _grads if backward else (lambda f, ts: f(*ts))
    try:
        expected = run(fn, _fresh(tensors))
    except Exception as e:  # noqa: BLE001 -- eager itself rejects this sample
        return CaseResult(kind, index, "skip", f"eager raises {type(e).__name__}"), []
    if backward and expected is None:
        return CaseResult(kind, index, "skip", "no differentiable output"), []
    torch._dynamo.reset()
    start = len(backend.COMPILED)
    try:
        compiled = cherenkov.compile(fn, strict=True)
        actual = run(compiled, _fresh(tensors))
    except Exception as e:  # noqa: BLE001
        infos = [info for _, info in backend.COMPILED[start:]]
        return CaseResult(kind, index, "fail", _short(e)), infos
    finally:
        torch._dynamo.reset()
    infos = [info for _, info in backend.COMPILED[start:]]
    if not infos:
        return CaseResult(kind, index, "skip", "no graph compiled (Dynamo ran it in eager)"), []
    if any(info.externs for info in infos):
        reasons = sorted({r for info in infos for _, r in info.externs})
        return CaseResult(kind, index, "extern", "; ".join(reasons)), infos
    try:
        assert_close(actual, expected, tol)
    except Exception as e:  # noqa: BLE001
        if kind.startswith("bf16") and _closer_to_fp32(fn, tensors, actual, expected):
            return CaseResult(kind, index, "pass", "closer to fp32 than eager"), infos
        return CaseResult(kind, index, "fail", _short(e)), infos
    return CaseResult(kind, index, "pass"), infos


def _closer_to_fp32(fn, tensors, actual, expected) -> bool:
    """Whether a 16-bit result that differs from eager's is at least as close as eager's to
    the op computed in fp32 from the same inputs: eager kernels that round every intermediate
    to bf16 (CUDA's cross product) lose to a kernel that rounds once, as Inductor's do."""
    up = [t.detach().float() if t.dtype in (torch.bfloat16, torch.float16) else t.detach()
          for t in tensors]
    try:
        reference = fn(*up)
    except Exception:  # noqa: BLE001
        return False
    got, want, ref = (tree_flatten(x)[0] for x in (actual, expected, reference))
    if not (len(got) == len(want) == len(ref)):
        return False
    for a, e, r in zip(got, want, ref):
        if not isinstance(a, torch.Tensor):
            if a != e:
                return False
            continue
        if not a.dtype.is_floating_point:
            if not torch.equal(a, e):
                return False
            continue
        err_ours = (a.float() - r.float()).abs().nan_to_num(0.0).max().item() if a.numel() else 0.0
        err_eager = (e.float() - r.float()).abs().nan_to_num(0.0).max().item() if e.numel() else 0.0
        if torch.isnan(a).ne(torch.isnan(e)).any() or err_ours > err_eager + 1e-3:
            return False
    return True


def assert_close(actual, expected, tol: dict) -> None:
    """Like torch.testing.assert_close, but 16-bit float outputs get bf16 tolerances."""
    got, want = tree_flatten(actual)[0], tree_flatten(expected)[0]
    assert len(got) == len(want), f"{len(got)} outputs, eager gives {len(want)}"
    for i, (a, e) in enumerate(zip(got, want)):
        low = isinstance(e, torch.Tensor) and e.dtype in (torch.bfloat16, torch.float16)
        torch.testing.assert_close(a, e, equal_nan=True, msg=lambda m: f"output {i}: {m}",
                                   **(BF16_TOL if low else tol))


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[:4])[:400]


def _is_random(op, fn, tensors) -> bool:
    """Ops whose eager output depends on the RNG (dropout, rand_like, ...) are not compared."""
    try:
        torch.manual_seed(1)
        a = fn(*_fresh(tensors))
        torch.manual_seed(2)
        b = fn(*_fresh(tensors))
        torch.testing.assert_close(a, b, equal_nan=True, rtol=0, atol=0)
    except AssertionError:
        return True
    except Exception:  # noqa: BLE001
        return False
    return False


# ---- one op ------------------------------------------------------------------------------

def _forward_dtype(op, device: str = "cpu") -> torch.dtype | None:
    for dtype in (torch.float32, torch.int64, torch.bool):
        if op.supports_dtype(dtype, device):
            return dtype
    return None


def _samples(op, dtype, requires_grad, limit, device: str = "cpu"):
    torch.manual_seed(0)
    out = []
    try:
        for sample in op.sample_inputs(device, dtype, requires_grad=requires_grad):
            out.append(sample)
            if len(out) == limit:
                break
    except Exception:  # noqa: BLE001 -- the OpInfo cannot make samples for this dtype
        pass
    return out


def sweep_op(op, samples_per_case: int = 2, backward: bool = True, bf16: bool = True,
             device: str = "cpu") -> OpResult:
    result = OpResult(op_name(op))
    dtype = _forward_dtype(op, device)
    if dtype is None:
        result.cases.append(CaseResult("forward", 0, "skip", "no fp32/int64/bool support"))
        return result
    kind = "fp32_forward" if dtype == torch.float32 else f"{str(dtype)[6:]}_forward"
    samples = _samples(op, dtype, False, samples_per_case, device)
    if not samples:
        result.cases.append(CaseResult(kind, 0, "skip", "no samples"))
        return result
    fn, tensors = _as_function(op, samples[0])
    if "empty" in op.name.split(".")[0]:
        # new_empty / empty_like / ...: their elements are whatever memory held; two eager
        # runs may agree by chance (the same freed block twice), so no run can be compared
        result.cases.append(CaseResult(kind, 0, "skip", "uninitialized output"))
        return result
    if _is_random(op, fn, tensors):
        result.cases.append(CaseResult(kind, 0, "skip", "random op"))
        return result
    materialize = False
    for attempt in range(2):
        for i, sample in enumerate(samples):
            case, infos = run_case(op, sample, kind, i, materialize)
            result.kernels += sum(len(info.kernels) for info in infos)
            result.externs |= {name for info in infos for name, _ in info.externs}
            result.cases.append(case)
        # lowered: one sample compiled with no extern (others may decline, e.g. empty ones)
        result.lowered = any(c.status in ("pass", "fail") for c in result.cases)
        if not result.lowered or result.kernels or attempt:
            break
        materialize = True          # a view op: compare again with its output materialized
        result.cases = []
    if not result.lowered:
        return result
    if backward and op.supports_autograd and dtype == torch.float32:
        for i, sample in enumerate(_samples(op, torch.float32, True, samples_per_case, device)):
            result.cases.append(run_case(op, sample, "fp32_backward", i, materialize)[0])
    if bf16 and op.supports_dtype(torch.bfloat16, device) and dtype == torch.float32:
        for i, sample in enumerate(_samples(op, torch.bfloat16, False, samples_per_case,
                                            device)):
            result.cases.append(run_case(op, sample, "bf16_forward", i, materialize)[0])
    return result


def sweep(ops, progress=None, budget_s: float | None = None, **kwargs) -> list[OpResult]:
    """sweep_op over `ops`; with `budget_s`, no op is started after that many seconds."""
    import time
    start = time.time()
    results = []
    for op in ops:
        if budget_s is not None and time.time() - start > budget_s:
            break
        try:
            r = sweep_op(op, **kwargs)
        except Exception:  # noqa: BLE001 -- a harness error is a failure of that op, not the sweep
            r = OpResult(op_name(op), lowered=True)
            r.cases.append(CaseResult("harness", 0, "fail", traceback.format_exc(limit=2)[-400:]))
        results.append(r)
        if progress:
            progress(r)
    return results


# ---- reporting ---------------------------------------------------------------------------

def sweep_report(results: list[OpResult]) -> dict:
    lowered = [r for r in results if r.lowered]
    passed = [r for r in lowered if r.verdict == "pass"]
    failed = [r for r in lowered if r.verdict == "fail"]
    return {
        "ops": len(results),
        "lowered": len(lowered),
        "passed": len(passed),
        "failed": len(failed),
        "skipped": len([r for r in lowered if r.verdict == "skip"]),
        "extern": len([r for r in results if r.verdict == "extern"]),
        "lowered_with_kernels": len([r for r in lowered if r.kernels]),
        "pass_rate": len(passed) / max(len(passed) + len(failed), 1),
        "by_op": {
            r.name: {
                "verdict": r.verdict, "kernels": r.kernels, "externs": sorted(r.externs),
                "passed": r.count("pass"), "failed": r.count("fail"),
                "skipped": r.count("skip"), "extern_cases": r.count("extern"),
                "failures": [f"{c.kind}[{c.sample}]: {c.reason}" for c in r.cases
                             if c.status == "fail"],
                "skips": sorted({f"{c.kind}: {c.reason}" for c in r.cases if c.status == "skip"}),
            } for r in results
        },
    }


def summary_table(results: list[OpResult]) -> str:
    rows = [f"{'op':40} {'verdict':8} {'pass':>4} {'fail':>4} {'skip':>4} {'extn':>4} "
            f"{'kern':>4}  note"]
    for r in sorted(results, key=lambda r: (r.verdict, r.name)):
        note = ""
        if r.verdict == "fail":
            note = next(f"{c.kind}[{c.sample}]: {c.reason}" for c in r.cases if c.status == "fail")
        elif r.verdict == "extern":
            note = "extern: " + ", ".join(sorted(r.externs))
        elif r.verdict == "skip":
            note = next((c.reason for c in r.cases if c.status == "skip"), "")
        rows.append(f"{r.name:40} {r.verdict:8} {r.count('pass'):>4} {r.count('fail'):>4} "
                    f"{r.count('skip'):>4} {r.count('extern'):>4} {r.kernels:>4}  {note[:150]}")
    rep = sweep_report(results)
    rows.append(f"ops {rep['ops']}, lowered {rep['lowered']} ({rep['lowered_with_kernels']} "
                f"generate kernels): passed {rep['passed']}, failed "
                f"{rep['failed']}, skipped {rep['skipped']}; extern {rep['extern']}; "
                f"pass rate {100 * rep['pass_rate']:.1f}%")
    return "\n".join(rows)


def main(argv=None) -> int:
    """python -m tests.lowering.opinfo_sweep [--shard K/N] [--samples 3] [--json out] [op ...]"""
    import argparse
    import json
    import time
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("ops", nargs="*", help="OpInfo names, name.variant for variants")
    parser.add_argument("--shard", default="0/1", help="run every N-th op from the K-th")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--json", help="write the report here")
    parser.add_argument("--device", default="cpu", help="where the samples live (cpu, cuda)")
    parser.add_argument("--budget-s", type=float, help="start no op after this many seconds")
    parser.add_argument("--fast-first", action="store_true",
                        help="all of the default test's subset (FAST_OPS), then the shard")
    args = parser.parse_args(argv)
    ops = find_ops()
    if args.ops:
        ops = [op for op in ops if op_name(op) in args.ops]
    k, n = (int(v) for v in args.shard.split("/"))
    if args.fast_first:         # all of FAST_OPS, then the shard's others
        fast = set(FAST_OPS)
        ops = [op for op in ops if (op.name, op.variant_test_name) in fast] + \
            [op for op in ops[k::n] if (op.name, op.variant_test_name) not in fast]
    else:
        ops = ops[k::n]
    start = time.time()

    def progress(r: OpResult) -> None:
        print(f"{time.time() - start:7.1f}s {r.name:40} {r.verdict}", flush=True)
    results = sweep(ops, progress=progress, budget_s=args.budget_s,
                    samples_per_case=args.samples, device=args.device)
    print(summary_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(sweep_report(results), f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
