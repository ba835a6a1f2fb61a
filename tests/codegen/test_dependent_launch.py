"""codegen/dependent_launch.py: programmatic dependent launch for generated kernels -- where
the instructions go, that the compiler applies it only where it can run (CUDA sm_90+), and
that a generated kernel so rewritten compiles for sm_90 with both griddepcontrol
instructions ahead of its memory accesses (Triton and ptxas on the CPU)."""
import os
import re

import pytest
import torch

import cherenkov
from cherenkov import backend
from cherenkov.codegen.combo import render_combo
from cherenkov.codegen.dependent_launch import CALLS, IMPORT, with_dependent_launch
from cherenkov.codegen.triton_renderer import RenderedKernel
from cherenkov.config import Config
from tests.sm90_compiling import needs_nvidia_backend, run_script

SIMPLE = '''@triton.jit
def kernel(in_0, out_0, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(out_0 + xindex, tl.load(in_0 + xindex))
'''


def test_instructions_open_the_kernel_and_the_import_leads():
    out = with_dependent_launch(SIMPLE)
    lines = out.splitlines()
    assert lines[0] == IMPORT
    at = lines.index("def kernel(in_0, out_0, XBLOCK: tl.constexpr):")
    assert tuple(lines[at + 1: at + 3]) == CALLS
    assert lines[at + 3].strip().startswith("xindex")
    with pytest.raises(ValueError, match="def kernel"):
        with_dependent_launch(SIMPLE.replace("def kernel(", "def other("))


def test_a_combo_gets_them_in_its_kernel_not_in_its_parts():
    part = RenderedKernel("k0", SIMPLE.replace("def kernel(", "def k0("), ["in_0", "out_0"],
                          4, 4)
    combo = render_combo([(part, 128, 1), (part, 128, 1)], "kernel")
    out = with_dependent_launch(combo.source)
    assert out.count("gdc_wait()") == 1
    kernel_def = re.search(r"^def kernel\(.*\):$", out, re.MULTILINE)
    assert out[kernel_def.end():].lstrip("\n").startswith("\n".join(CALLS))
    assert "def p_" in out[:kernel_def.start()]          # the part functions are untouched


def test_config_flag_and_cpu_compiles_without_it():
    assert Config().pdl is True                      # on by default (CUDA sm_90+ only)
    assert Config.from_env({"CHERENKOV_PDL": "0"}).pdl is False
    start = len(backend.COMPILED)
    f = cherenkov.compile(lambda x: torch.relu(x) * 2 + 1, strict=True, pdl=True)
    x = torch.randn(300)
    torch.testing.assert_close(f(x), torch.relu(x) * 2 + 1)
    sources = [k[3] for _, info in backend.COMPILED[start:] for k in info.kernels]
    assert sources and not any("gdc_wait" in s for s in sources)      # CPU: no PDL


@needs_nvidia_backend
def test_a_generated_kernel_compiles_for_sm90_with_the_wait_before_memory(tmp_path):
    start = len(backend.COMPILED)
    f = cherenkov.compile(lambda x: torch.sigmoid(x) * x, strict=True)
    f(torch.randn(1000))
    source = next(k[3] for _, info in backend.COMPILED[start:] for k in info.kernels)
    name = re.search(r"^def (k_\w+)\(", source, re.MULTILINE).group(1)
    path = tmp_path / "kernel.py"
    path.write_text(source)
    done = run_script(os.path.join(os.path.dirname(__file__), "pdl_sm90.py"), str(path),
                      name, "*fp32,*fp32")
    assert done.stdout.strip().splitlines()[-1] == (
        '{"wait": true, "launch_dependents": true, "wait_before_memory": true, '
        '"launch_pdl": true}')
