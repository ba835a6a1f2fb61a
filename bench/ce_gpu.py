"""Cross-entropy forward on the GPU, taken apart: where do the suite's ~10% over the
logsumexp kernel's own time go? For V in 50304 and 128256 (16384 tokens, bf16): the compiled
call timed by CUDA-graph replay and by plain calls, each generated kernel timed by events
(cherenkov.profile_next_call), and the variant sweep's hand-written logsumexp for reference.

    PYTHONPATH=. python3 bench/ce_gpu.py OUT_DIR
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

import cherenkov
from cherenkov.bench.timing import copy_bandwidth, cuda_median_s, graph_replay_median_s

sys.path.insert(0, os.path.dirname(__file__))
from variants_gpu import lse_block  # noqa: E402


def ce(logits, targets):
    return F.cross_entropy(logits.float(), targets)


def reference_lines(x, copy_bw) -> list[str]:
    """The variant sweep's hand-written logsumexp over the rows of x (4 warps; 4096- and
    8192-element chunks): its time and % of copy bandwidth."""
    (T, V), nbytes = x.shape, x.numel() * x.element_size()
    out = torch.empty(T, device=x.device)
    lines = []
    for rb in (4096, 8192):
        s = cuda_median_s(lambda: lse_block[(T,)](x, out, V, rb, num_warps=4))
        lines.append(f"V={V} lse_block R{rb} w4 alone: {s*1e6:.1f} us "
                     f"({100*nbytes/s/copy_bw:.1f}%)")
    return lines


def write_lines(out_dir, name, lines) -> None:
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out_dir, name), "w") as f:
        f.write(text + "\n")


def main(out_dir):
    copy_bw = copy_bandwidth(torch.device("cuda"), 1 << 30)
    rows, lines = [], [f"copy {copy_bw / 1e9:.0f} GB/s"]
    for V in (50304, 128256):
        T = 16384
        x = (torch.randn(T, V, device="cuda") * 2).to(torch.bfloat16)
        t = torch.randint(0, V, (T,), device="cuda")
        nbytes = x.numel() * 2
        want = ce(x, t)
        for name, fn in (("torch.compile", torch.compile(ce)),
                         ("cherenkov", cherenkov.compile(ce))):
            got = fn(x, t)
            ok = abs(got.item() - want.item()) < 1e-3 * abs(want.item()) + 1e-4
            plain = cuda_median_s(lambda: fn(x, t))
            graph = graph_replay_median_s(lambda ins: fn(*ins), [(x, t)], torch.device("cuda"))
            rows.append(dict(V=V, impl=name, ok=ok, plain_us=plain * 1e6, graph_us=graph * 1e6,
                             plain_pct=100 * nbytes / plain / copy_bw,
                             graph_pct=100 * nbytes / graph / copy_bw))
            lines.append(f"V={V} {name}: ok={ok} plain {plain*1e6:.1f} us "
                         f"({100*nbytes/plain/copy_bw:.1f}%), graph {graph*1e6:.1f} us "
                         f"({100*nbytes/graph/copy_bw:.1f}%)")
        xg = x.detach().requires_grad_(True)
        g = cherenkov.compile(ce)

        def fwd_bwd(ins):
            return torch.autograd.grad(g(*ins), [ins[0]])
        fwd_bwd((xg, t))
        plain = cuda_median_s(lambda: fwd_bwd((xg, t)))
        fresh = lambda ins: (ins[0].detach().requires_grad_(True), ins[1])  # noqa: E731
        graph = graph_replay_median_s(fwd_bwd, [(xg, t)], torch.device("cuda"), fresh=fresh)
        lines.append(f"V={V} cherenkov fwd+bwd: plain {plain*1e6:.1f} us "
                     f"({300*nbytes/plain/copy_bw:.1f}%), graph {graph*1e6:.1f} us "
                     f"({300*nbytes/graph/copy_bw:.1f}%)")
        cherenkov.profile_next_call()
        fwd_bwd((xg, t))
        torch.cuda.synchronize()
        for gname, report in cherenkov.cost_reports().items():
            lines.append(f"V={V} profile of {gname}:\n{report}")
        cherenkov.reset_cost_reports() if hasattr(cherenkov, "reset_cost_reports") else None
        lines += reference_lines(x, copy_bw)
        del x
    write_lines(out_dir, "ce_gpu.txt", lines)
    with open(os.path.join(out_dir, "ce_gpu.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
