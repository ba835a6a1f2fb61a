"""Does a CUDA-graphed plan whose kernels use programmatic dependent launch run? One process
per setting (pdl on/off x cuda_graphs on/off), each with a deadline: iterations done, the
first difference from eager, and a Python stack if it stalls.

    PYTHONPATH=. python3 bench/pdl_graph_probe_gpu.py [pdl cuda_graphs]
"""
import faulthandler
import subprocess
import sys
import time

import torch


def one(pdl: bool, graphs: str) -> None:
    import cherenkov
    faulthandler.dump_traceback_later(40, exit=True)
    torch.manual_seed(0)
    norms = torch.nn.ModuleList(torch.nn.LayerNorm(1536) for _ in range(8)).cuda()

    def model(x):
        for n in norms:
            x = x + torch.nn.functional.gelu(n(x)) * 0.5
        return x.sum(dim=0)

    f = cherenkov.compile(model, strict=True, dynamic=False, cuda_graphs=graphs, pdl=pdl)
    for i in range(8):
        x = torch.randn(4096, 1536, device="cuda", requires_grad=True)
        t0 = time.perf_counter()
        y = f(x)
        y.backward(torch.ones_like(y))
        torch.cuda.synchronize()
        ref = model(x.detach())
        print(f"pdl={pdl} graphs={graphs} iter {i}: {time.perf_counter() - t0:.3f} s, "
              f"max diff {(y - ref).abs().max().item():.2e}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        one(sys.argv[1] == "1", sys.argv[2])
    else:
        for pdl in ("0", "1"):
            for graphs in ("off", "on"):
                r = subprocess.run([sys.executable, __file__, pdl, graphs], capture_output=True,
                                   text=True, timeout=120)
                print(f"--- pdl={pdl} graphs={graphs}: rc {r.returncode}")
                print(r.stdout[-1500:])
                print(r.stderr[-2500:])
