"""The attention kernels' source for programmatic dependent launch (codegen.with_pdl): the two
PDL instructions open each forward / backward kernel, after its docstring, and nothing else
changes; the interpreter's source never has them. (That they compile for sm_90 with
launch_pdl: test_compile_sm90.py; that they run right: the GPU tests.)"""
import ast

import pytest

from cherenkov.attention import codegen, mods
from cherenkov.attention.trace import trace_mods


def _kernel_bodies(text: str) -> dict:
    tree = ast.parse(text)
    return {f.name: f.body for f in tree.body if isinstance(f, ast.FunctionDef)}


def test_pdl_instructions_open_the_forward_and_backward_kernels():
    traced = trace_mods(mods.alibi(__import__("torch").randn(4)), mods.causal)
    plain = codegen.kernel_source(traced, "cuda", True, pdl=False)
    pdl = codegen.kernel_source(traced, "cuda", True, pdl=True)
    assert "gdc_wait" not in plain
    assert "from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait" in pdl
    before, after = _kernel_bodies(plain), _kernel_bodies(pdl)
    assert before.keys() == after.keys()
    for name, body in after.items():
        if name not in codegen.PDL_KERNELS:
            assert ast.dump(ast.Module(body, [])) == ast.dump(ast.Module(before[name], []))
            continue
        calls = [ast.unparse(s) for s in body if isinstance(s, ast.Expr)
                 and isinstance(s.value, ast.Call)][:2]
        assert calls == ["gdc_launch_dependents()", "gdc_wait()"], name
        docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        first = 1 if docstring else 0
        assert ast.unparse(body[first]) == "gdc_launch_dependents()"
        assert ast.unparse(body[first + 1]) == "gdc_wait()"
        # the rest of the kernel as it was
        assert ast.dump(ast.Module(body[:first] + body[first + 2:], [])) == \
            ast.dump(ast.Module(before[name], []))


def test_interpreter_and_unknown_kernels():
    traced = trace_mods(None, mods.causal)
    module = codegen.load_kernels(traced, interpret=True, pdl=True)   # never in the interpreter
    assert not module.PDL
    assert "gdc_wait" not in open(module.SOURCE_PATH).read()
    with pytest.raises(ValueError, match="_attn_nowhere"):
        codegen.with_pdl("def _attn_fwd(a):\n    pass\n", ("_attn_fwd", "_attn_nowhere"))
    assert not codegen.pdl_wanted(True)
