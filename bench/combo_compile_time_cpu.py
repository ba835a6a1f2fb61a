"""Triton compile time of a combo kernel against its number of parts, for the GPU (sm_90) but
compiled on this machine (no GPU needed: Triton ships ptxas): the part is the kernel a compiled
AdamW step makes for one parameter (reads p, g, m, v and the step; writes p, m, v), repeated
with distinct sizes as combine_updates would put them in one launch. Sets MAX_UPDATE_PARTS.

    PYTHONPATH=. python3 bench/combo_compile_time_cpu.py OUT_DIR
"""
import os

os.environ["TRITON_INTERPRET"] = "0"      # compile for the GPU target (cherenkov sets 1 on CPU)

import datetime  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from cherenkov.codegen.combo import render_combo  # noqa: E402
from cherenkov.codegen.triton_renderer import RenderedKernel  # noqa: E402

DUMP = """
import torch, cherenkov
from cherenkov.backend import COMPILED
p = torch.nn.Parameter(torch.randn(16)); p.grad = torch.randn_like(p)
opt = torch.optim.AdamW([p], lr=0.01, foreach=True)
cherenkov.compile(opt.step, strict=True, cpu_backend="triton", combine_updates=False)()
print(next(k[3] for k in COMPILED[-1][1].kernels if "xmask = xindex < 16" in k[3]))
"""


def adamw_part_source() -> str:
    """The per-parameter AdamW kernel's source (made in a process of its own: the
    interpreter's settings stay there)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, "-c", DUMP], env=env, capture_output=True,
                          text=True, check=True).stdout


def compile_seconds(source: str, name: str, n_pointers: int) -> float:
    path = os.path.join(tempfile.mkdtemp(), "combo.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(f"combo_{abs(hash(source))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name)
    signature = {a: "*fp32" for a in fn.arg_names}
    t0 = time.perf_counter()
    triton.compile(ASTSource(fn=fn, signature=signature, constexprs={}),
                   target=GPUTarget("cuda", 90, 32))
    assert len(fn.arg_names) == n_pointers
    return time.perf_counter() - t0


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    src = adamw_part_source()
    name = re.findall(r"def (k_\w+)\(", src)[-1]
    at = src.index(f"@triton.jit\ndef {name}")
    head, body = src[:at], src[at:]
    args = [a for a in re.search(rf"def {name}\((.*?)\)", body).group(1).split(", ")
            if "constexpr" not in a]
    rows = []
    for k in (1, 2, 4, 8, 16, 32):
        parts = [(RenderedKernel(name, head + body.replace("xindex < 16",
                                                         f"xindex < {1000003 + 7919 * i}"),
                                 [f"b{i}_{a}" for a in args], 977, 4), 1024, 3)
                 for i in range(k)]
        combo = render_combo(parts, "combo")
        s = compile_seconds(combo.source, "combo", len(combo.arg_names))
        rows.append({"parts": k, "seconds": s, "seconds_per_part": s / k})
        print(rows[-1], flush=True)
    commit = os.environ.get("CHERENKOV_COMMIT", "unknown")
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "triton": triton.__version__, "target": "cuda sm_90", "cpus": os.cpu_count(),
            "commit": commit}
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, f"{datetime.date.today()}_combo_compile_time_cpu_{commit}")
    with open(stem + ".json", "w") as f:
        json.dump({**meta, "rows": rows}, f, indent=1)
    lines = [f"# Combo kernel compile time (AdamW parts, {meta['target']}, triton "
             f"{meta['triton']}, {meta['cpus']} CPUs, commit {commit})", "",
             "| parts | seconds | seconds per part |", "|---|---|---|"]
    lines += [f"| {r['parts']} | {r['seconds']:.2f} | {r['seconds_per_part']:.2f} |"
              for r in rows]
    with open(stem + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
