"""Compile one generated kernel for sm_90 with programmatic dependent launch, without a GPU.

    python pdl_sm90.py SOURCE_FILE KERNEL_NAME ARGS     (ARGS: comma-separated "*fp32"-style)

Run in a fresh process without TRITON_INTERPRET (test_dependent_launch.py does). The source
gets codegen/dependent_launch.py's instructions, is compiled through Triton and ptxas for
sm_90 with launch_pdl, and the script prints whether the PTX holds both griddepcontrol
instructions, ahead of every global load and store, and the compiled metadata's launch_pdl.
"""
import importlib.util
import json
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from cherenkov.codegen.dependent_launch import with_dependent_launch


def main() -> int:
    path, name, args = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    source = with_dependent_launch(open(path).read(), name)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("pdl_kernel", f.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name)
    signature = dict(zip(fn.arg_names, args + ["constexpr"] * (len(fn.arg_names) - len(args))))
    constexprs = {(i,): 128 for i, n in enumerate(fn.arg_names) if signature[n] == "constexpr"}
    kernel = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs),
                            target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": 4, "launch_pdl": True})
    ptx = kernel.asm["ptx"]
    body = ptx[ptx.index(".entry"):]
    wait = body.find("griddepcontrol.wait")
    memory = [i for i in (body.find("ld.global"), body.find("st.global")) if i >= 0]
    print(json.dumps({"wait": wait >= 0,
                      "launch_dependents": "griddepcontrol.launch_dependents" in body,
                      "wait_before_memory": wait >= 0 and all(wait < i for i in memory),
                      "launch_pdl": bool(kernel.metadata.launch_pdl)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
