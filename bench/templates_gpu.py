"""Matmul templates and fused linear cross-entropy on one GPU, vs cuBLAS+eager and torch.compile.

    python bench/templates_gpu.py OUT_DIR          # CHERENKOV_COMMIT=<sha> to record the commit
    python bench/templates_gpu.py OUT_DIR --smoke  # tiny shapes on CPU: checks the script runs

(a) Matmul + epilogue, bf16, GPT-2 MLP and Llama shapes (weights are Linear weights used
    through a transposed view, as nn.Linear does): cuBLAS + eager epilogue (what the module
    runs), torch.compile of the same function, and the template: every autotune candidate
    timed, the winner (template or cuBLAS) recorded and cached. Correctness first: the tuned
    template vs an fp32 reference (max error relative to the reference's max).
(b) linear_cross_entropy for 16384 tokens x 768 x 50304 and 8192 x 2048 x 32000, bf16:
    forward+backward time and peak memory above the inputs, vs eager
    F.cross_entropy(x @ W.T, t) and torch.compile of it; loss and gradients vs an fp32 reference.

Times are `triton.testing.do_bench` medians. Writes OUT_DIR/templates_gpu.md and .json and prints
the table. Each case is wrapped in try/except; a budget (~5.5 min) skips what no longer fits.
"""
from __future__ import annotations

import datetime
import importlib
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOKE = "--smoke" in sys.argv
if SMOKE:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

from cherenkov.templates import MatmulSpec, linear_cross_entropy, should_fuse_linear_ce  # noqa: E402
from cherenkov.templates import autotune  # noqa: E402
lce_module = importlib.import_module("cherenkov.templates.linear_cross_entropy")  # the module,
# not the function of the same name that cherenkov.templates exports
from cherenkov.templates.linear_cross_entropy import choose_chunk_size  # noqa: E402
from cherenkov.templates.matmul import launch  # noqa: E402
from cherenkov.bench.report import commit  # noqa: E402

START = time.time()
BUDGET_S = 330
DEV = "cpu" if SMOKE else "cuda"
DT = torch.float32 if SMOKE else torch.bfloat16
MATMULS: list[dict] = []
LCE: list[dict] = []
ERRORS: list[dict] = []


def left() -> float:
    return BUDGET_S - (time.time() - START)


def bench_ms(fn, grad_to_none=None) -> float:
    if SMOKE:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    from triton.testing import do_bench
    return do_bench(fn, warmup=10, rep=50, grad_to_none=grad_to_none, return_mode="median")


def compiled(fn):
    if SMOKE:
        return None
    torch._dynamo.reset()
    return torch.compile(fn)


def rel_err(x, ref) -> float:
    return ((x.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-6)).item()


def randn(*shape, scale=1.0):
    return torch.randn(*shape, device=DEV, dtype=DT) * scale


# -- (a) matmul + epilogue ------------------------------------------------------------------
def matmul_cases():
    s = 32 if SMOKE else 1
    M1, D1, F1 = 16384 // s, 768 // s, 3072 // s
    M2, D2, F2, QKV = 8192 // s, 2048 // s, 5632 // s, 6144 // s
    return [
        ("gpt2 c_fc: x@W.T+b, gelu_tanh", M1, D1, F1, ("bias", "gelu_tanh"), False),
        ("gpt2 c_proj: x@W.T+b+residual", M1, F1, D1, ("bias", "residual"), False),
        ("llama gate: silu(x@Wg.T)*up", M2, D2, F2, ("silu", "mul"), False),
        ("llama down: x@Wd.T+residual", M2, F2, D2, ("residual",), False),
        ("llama qkv: rmsnorm(x)@Wqkv.T (prologue)", M2, D2, QKV, (), True),
        ("llama attn out: 0.5*(x@Wo.T)+residual", M2, D2, D2, ("scale", "residual"), False),
    ]


def eager_fn(epilogue, prologue):
    """The module-style eager code for this case (bf16 ops after cuBLAS)."""
    def fn(x, w, bias, other, scale, rstd, nw):
        if prologue:
            x = (x.float() * rstd[:, None] * nw.float()).to(x.dtype)
        y = F.linear(x, w, bias if "bias" in epilogue else None)
        for name in epilogue:
            if name == "gelu_tanh":
                y = F.gelu(y, approximate="tanh")
            elif name == "silu":
                y = F.silu(y)
            elif name == "residual":
                y = y + other
            elif name == "mul":
                y = y * other
            elif name == "scale":
                y = y * scale
        return y
    return fn


def run_matmul_case(name, m, k, n, epilogue, prologue):
    x, w = randn(m, k), randn(n, k, scale=k ** -0.5)         # w: Linear weight (out, in)
    bias, other = randn(n), randn(m, n)
    scale = 0.5
    rstd = (torch.rand(m, device=DEV) + 0.5) if prologue else None
    nw = randn(k) if prologue else None
    args = (x, w, bias, other, scale, rstd, nw)
    fn = eager_fn(epilogue, prologue)
    spec = MatmulSpec(epilogue, prologue, prologue)
    ops = [bias if e == "bias" else scale if e == "scale" else other if e in ("residual", "mul")
           else None for e in epilogue]
    row = {"case": name, "M": m, "K": k, "N": n, "epilogue": "+".join(epilogue) or "-",
           "prologue": "rmsnorm" if prologue else "-"}
    flops = 2.0 * m * n * k
    ref = eager_fn(epilogue, prologue)(*(a.float() if isinstance(a, torch.Tensor) else a
                                         for a in args))
    row["eager_ms"] = bench_ms(lambda: fn(*args))
    if left() > 60:
        cfn = compiled(fn)
        if cfn is not None:
            cfn(*args)
            row["compile_ms"] = bench_ms(lambda: cfn(*args))
    if SMOKE:
        from cherenkov.templates import matmul
        out = matmul(x, w.t(), epilogue, bias=bias, residual=other, mul=other, scale=scale,
                     row_scale=rstd, col_scale=nw)
        row["template_rel_err"] = rel_err(out, ref)
        row["template_ms"] = bench_ms(lambda: matmul(x, w.t(), epilogue, bias=bias,
                                                     residual=other, mul=other, scale=scale,
                                                     row_scale=rstd, col_scale=nw))
        row["tuned"] = "interpreter config"
    else:
        result = autotune.tune(spec, x, w.t(), ops, rstd, nw, DT)
        autotune._store(result.key, result.best)
        row["cublas_plus_epilogue_kernel_ms"] = result.timings_ms.get("cublas")
        templ = {c: t for c, t in result.timings_ms.items() if c != "cublas"}
        row["tuned"] = str(result.best)
        row["rejected"] = result.rejected
        row["all_ms"] = result.timings_ms
        if templ:
            best_cfg = min(templ, key=templ.get)
            row["template_ms"], row["template_config"] = templ[best_cfg], best_cfg
            cfg = result.configs[best_cfg]
            out = torch.empty(m, n, device=DEV, dtype=DT)
            launch(spec, cfg, x, w.t(), out, ops, rstd, nw)
            row["template_rel_err"] = rel_err(out, ref)
    row["eager_rel_err"] = rel_err(fn(*args), ref)
    for key in ("eager_ms", "compile_ms", "template_ms"):
        if row.get(key):
            row[key.replace("_ms", "_tflops")] = flops / (row[key] * 1e-3) / 1e12
    MATMULS.append(row)


# -- (b) linear cross-entropy ----------------------------------------------------------------
def peak_mb(fn) -> float:
    if SMOKE:
        fn()
        return float("nan")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def run_lce_case(tokens, hidden, vocab):
    x = randn(tokens, hidden).requires_grad_()
    w = randn(vocab, hidden, scale=hidden ** -0.5).requires_grad_()
    t = torch.randint(0, vocab, (tokens,), device=DEV)
    t[::17] = -100
    params = [x, w]
    row = {"tokens": tokens, "hidden": hidden, "vocab": vocab}
    from cherenkov.hw import current_device
    spec = current_device(x.device)
    row["should_fuse"] = should_fuse_linear_ce(tokens, vocab, hidden, DT, spec)
    row["chunk_size"] = choose_chunk_size(tokens, vocab, hidden, DT, spec)

    def ours():
        linear_cross_entropy(x, w, t).backward()

    def eager_loss(x, w, t):
        return F.cross_entropy(x @ w.T, t)

    def eager():
        eager_loss(x, w, t).backward()

    # correctness vs fp32 reference
    xf, wf = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    ref = eager_loss(xf, wf, t)
    ref.backward()
    loss = linear_cross_entropy(x, w, t)
    gx, gw = torch.autograd.grad(loss, params)
    row["grad_weight_path"] = ",".join(sorted(set(lce_module.LAST_GRAD_WEIGHT_PATH)))
    row["loss_abs_err"] = abs(loss.float().item() - ref.item())
    row["grad_x_rel_err"], row["grad_w_rel_err"] = rel_err(gx, xf.grad), rel_err(gw, wf.grad)
    el = eager_loss(x, w, t)
    ex, ew = torch.autograd.grad(el, params)
    row["eager_loss_abs_err"] = abs(el.float().item() - ref.item())
    row["eager_grad_x_rel_err"], row["eager_grad_w_rel_err"] = \
        rel_err(ex, xf.grad), rel_err(ew, wf.grad)
    del xf, wf, ref, gx, gw, ex, ew, el
    for p in params:
        p.grad = None
    row["ours_peak_mb"] = peak_mb(ours)
    row["ours_ms"] = bench_ms(ours, grad_to_none=params)
    for p in params:
        p.grad = None
    row["eager_peak_mb"] = peak_mb(eager)
    row["eager_ms"] = bench_ms(eager, grad_to_none=params)
    if left() > 45 and not SMOKE:
        closs = compiled(eager_loss)
        cstep = lambda: closs(x, w, t).backward()  # noqa: E731
        cstep()
        for p in params:
            p.grad = None
        row["compile_peak_mb"] = peak_mb(cstep)
        row["compile_ms"] = bench_ms(cstep, grad_to_none=params)
    for p in params:
        p.grad = None
    flops = 6.0 * tokens * hidden * vocab
    for key in ("ours_ms", "eager_ms", "compile_ms"):
        if row.get(key):
            row[key.replace("_ms", "_tflops")] = flops / (row[key] * 1e-3) / 1e12
    LCE.append(row)


# -- report -----------------------------------------------------------------------------------
def fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1e-2 else f"{v:.{digits}f}"
    return str(v)


def write(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (smoke)"
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "gpu": gpu,
            "torch": torch.__version__, "triton": triton.__version__,
            "commit": commit(), "smoke": SMOKE,
            "wall_s": round(time.time() - START, 1)}
    with open(os.path.join(out_dir, "templates_gpu.json"), "w") as f:
        json.dump({"meta": meta, "matmul": MATMULS, "linear_cross_entropy": LCE,
                   "errors": ERRORS}, f, indent=1, default=str)
    lines = [f"# Matmul templates and fused linear cross-entropy ({gpu})", "",
             " | ".join(f"{k}: {v}" for k, v in meta.items()), "",
             "## (a) matmul + epilogue, bf16 (ms, TFLOP/s)", "",
             "| case | MxKxN | eager ms | compile ms | template ms (best cfg) | cuBLAS+epi kernel ms "
             "| tuned winner | template rel err |", "|---|---|---|---|---|---|---|---|"]
    for r in MATMULS:
        lines.append(f"| {r['case']} | {r['M']}x{r['K']}x{r['N']} | {fmt(r.get('eager_ms'))} "
                     f"({fmt(r.get('eager_tflops'), 0)}) | {fmt(r.get('compile_ms'))} "
                     f"({fmt(r.get('compile_tflops'), 0)}) | {fmt(r.get('template_ms'))} "
                     f"({fmt(r.get('template_tflops'), 0)}, {r.get('template_config', '-')}) | "
                     f"{fmt(r.get('cublas_plus_epilogue_kernel_ms'))} | {r.get('tuned')} | "
                     f"{fmt(r.get('template_rel_err'))} |")
    lines += ["", "## (b) linear cross-entropy, bf16, forward+backward", "",
              "| tokens x hidden x vocab | ours ms | eager ms | compile ms | ours MB | eager MB | "
              "compile MB | chunk | fuse? | loss err ours/eager | grad_x rel err ours/eager | "
              "grad_W rel err ours/eager | grad_W path |", "|" + "---|" * 13]
    for r in LCE:
        lines.append(
            f"| {r['tokens']}x{r['hidden']}x{r['vocab']} | {fmt(r.get('ours_ms'))} | "
            f"{fmt(r.get('eager_ms'))} | {fmt(r.get('compile_ms'))} | {fmt(r.get('ours_peak_mb'), 0)} | "
            f"{fmt(r.get('eager_peak_mb'), 0)} | {fmt(r.get('compile_peak_mb'), 0)} | "
            f"{r['chunk_size']} | {r['should_fuse']} | {fmt(r.get('loss_abs_err'))}/"
            f"{fmt(r.get('eager_loss_abs_err'))} | {fmt(r.get('grad_x_rel_err'))}/"
            f"{fmt(r.get('eager_grad_x_rel_err'))} | {fmt(r.get('grad_w_rel_err'))}/"
            f"{fmt(r.get('eager_grad_w_rel_err'))} | {r.get('grad_weight_path')} |")
    if ERRORS:
        lines += ["", "## errors", ""] + [f"- {e['case']}: {e['error']}" for e in ERRORS]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "templates_gpu.md"), "w") as f:
        f.write(text)
    print(text)


def attempt(name, fn, *args):
    if left() < 20:
        ERRORS.append({"case": name, "error": "skipped: time budget"})
        return
    try:
        fn(*args)
    except Exception as e:
        ERRORS.append({"case": name, "error": f"{type(e).__name__}: {e}"[:500]})
        traceback.print_exc()
    if not SMOKE:
        torch.cuda.empty_cache()


def main():
    out_dir = next((a for a in sys.argv[1:] if not a.startswith("--")), "bench/results")
    torch.manual_seed(0)
    s = 64 if SMOKE else 1
    lce_cases = [(16384 // s, 768 // s, 50304 // s), (8192 // s, 2048 // s, 32000 // s)]
    for tokens, hidden, vocab in lce_cases:      # the memory-heavy cases first, on a clean card
        attempt(f"lce {tokens}x{hidden}x{vocab}", run_lce_case, tokens, hidden, vocab)
    for case in matmul_cases():
        attempt(case[0], run_matmul_case, *case)
    write(out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
