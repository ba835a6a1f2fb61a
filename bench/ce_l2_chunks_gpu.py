"""LM head + cross-entropy forward in row chunks small enough for L2: whether the CE kernel's
two reads of a chunk of logits hit L2 when it runs right after the matmul that wrote them.

(a) `full`: logits = x @ W.T for all rows (one cuBLAS call), then the CE rows kernel with its
gradient over them in place -- what a GPT-2 step runs now (templates/ce_forward_grad_op.py);
(b) `chunk R`: per R rows, the matmul into those rows of the same (N, V) buffer, then the CE
kernel on them. Same outputs (checked). Timed with do_bench (host launches included) and as
a CUDA graph replay (the GPU's own time).

    PYTHONPATH=. python3 bench/ce_l2_chunks_gpu.py OUT_DIR
"""
import sys

import torch

from cherenkov.bench.report import md_table, save_pair, script_meta
from cherenkov.bench.timing import cuda_median_s
from cherenkov.templates.cross_entropy_kernel import cross_entropy_rows

SHAPES = {"gpt2": (16384, 768, 50304), "llama": (8192, 2048, 32000)}
CHUNKS = (128, 256, 512, 1024, 2048, 4096)


def run(x, w, t, buf, loss, rows: int) -> None:
    n = x.shape[0]
    for s in range(0, n, rows):
        e = min(n, s + rows)
        torch.mm(x[s:e], w.t(), out=buf[s:e])
        cross_entropy_rows(buf[s:e], t[s:e], loss[s:e], -100, True)


def graphed_s(fn) -> float:
    from cherenkov.hw.measure_cuda import _graphed
    replay = _graphed(fn, 1)
    return cuda_median_s(replay) if replay is not None else float("nan")


def main(out_dir: str) -> None:
    dev = torch.device("cuda")
    table, data = [], []
    for name, (n, h, v) in SHAPES.items():
        torch.manual_seed(0)
        x = torch.randn(n, h, device=dev, dtype=torch.bfloat16)
        w = (torch.randn(v, h, device=dev) * h ** -0.5).to(torch.bfloat16)
        t = torch.randint(0, v, (n,), device=dev)
        buf, loss = torch.empty(n, v, device=dev, dtype=torch.bfloat16), torch.empty(n, device=dev)
        run(x, w, t, buf, loss, n)
        ref_grad, ref_loss = buf.clone(), loss.clone()
        for rows in (n,) + tuple(c for c in CHUNKS if c < n):
            label = "full" if rows == n else f"chunk {rows}"
            buf.zero_()
            run(x, w, t, buf, loss, rows)
            ok = max((buf.float() - ref_grad.float()).abs().max().item(),
                     (loss - ref_loss).abs().max().item())
            ms = cuda_median_s(lambda: run(x, w, t, buf, loss, rows)) * 1e3
            gms = graphed_s(lambda: run(x, w, t, buf, loss, rows)) * 1e3
            mm_ms = cuda_median_s(lambda: [torch.mm(x[s:s + rows], w.t(), out=buf[s:s + rows])
                                           for s in range(0, n, rows)]) * 1e3
            data.append({"shape": name, "variant": label, "rows": rows, "ms": ms,
                         "graphed_ms": gms, "matmuls_ms": mm_ms, "max_diff_vs_full": ok})
            table.append([name, label, f"{ms:.3f}", f"{gms:.3f}", f"{mm_ms:.3f}", f"{ok:.2e}"])
            print(table[-1], flush=True)
    meta = script_meta()
    text = "\n".join([
        f"# LM head + cross-entropy forward in L2-sized row chunks on {meta['gpu']}", "",
        f"{meta['date']}, torch {meta['torch']}, triton {meta['triton']}, commit "
        f"{meta['commit']}. bf16; (N, H) @ (V, H).T then the CE rows kernel with its gradient "
        "in place; `full` one matmul then one CE launch, `chunk R` both per R rows. ms: "
        "do_bench median; graphed: the same calls replayed from a CUDA graph; matmuls: the "
        "matmuls alone. diff: max |difference| of gradient and loss rows vs `full` (cuBLAS may "
        "pick another algorithm per row count).", "",
        *md_table(["shape", "variant", "ms", "graphed ms", "matmuls ms", "diff"], table)]) + "\n"
    save_pair(out_dir, "ce_l2_chunks", text, {"meta": meta, "rows": data})
    print(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")
