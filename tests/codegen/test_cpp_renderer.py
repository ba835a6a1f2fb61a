"""The C++ renderer and build, against eager: each function is traced and lowered, fused, and
every kernel of its graph rendered to C++, built into one library and run through the same
execution plan (`CompiledGraph`) the Triton kernels use."""
import platform
import shutil
import subprocess

import pytest
import torch
import torch.nn.functional as F

import cherenkov
from torch.fx.experimental.proxy_tensor import make_fx

from cherenkov.capture.decompositions import decomposition_table
from cherenkov.codegen.cpp_ops import PRELUDE
from cherenkov.codegen import indexing as ix
from cherenkov.codegen.cpp_renderer import render_cpp
from cherenkov.codegen.kernel_ir import Buffer, Kernel, Load, Store
from cherenkov.compiler import LaunchableKernel
from cherenkov.lowering.from_fx import lower_fx
from cherenkov.passes.cse import eliminate_common_subexpressions
from cherenkov.passes.fusion import fuse
from cherenkov.runtime import cpp_build
from cherenkov.runtime.compiled_graph import CompiledGraph

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="no C++ compiler")


@pytest.fixture(autouse=True, scope="module")
def fresh_cache(tmp_path_factory):
    """Every run compiles from scratch into its own cache folder."""
    mp = pytest.MonkeyPatch()
    mp.setenv("CHERENKOV_CACHE_DIR", str(tmp_path_factory.mktemp("cherenkov_cache")))
    yield
    mp.undo()


def lower(fn, *args):
    gm = make_fx(fn, decomposition_table=decomposition_table())(*args)
    graph, _ = lower_fx(gm, list(args), strict=True)
    graph = eliminate_common_subexpressions(graph)
    return graph, fuse(graph)


def run_cpp(fn, *args):
    """fn(*args) with every kernel in C++; returns (outputs, kernels)."""
    graph, fusion = lower(fn, *args)
    kernels = [g.kernel for g in fusion.groups]
    built = cpp_build.compile_graph_kernels(kernels)
    plan = {}
    for g in fusion.groups:
        k = g.kernel
        plan[g] = LaunchableKernel(k.name, [b.name for b in k.inputs + k.outputs],
                                   built[k.name], built[k.name].source, k.fused_ops, k)
    outs = CompiledGraph(graph, fusion, plan, torch.device("cpu"))(list(args))
    return outs, kernels


def check(fn, *args, rtol=1e-5, atol=1e-5, reference=None):
    outs, kernels = run_cpp(fn, *args)
    expected = (reference or fn)(*args)
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    assert len(outs) == len(expected)
    for got, want in zip(outs, expected):
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    assert kernels, "nothing ran as a generated kernel"
    return kernels


# ---- pointwise ------------------------------------------------------------------------------

def test_pointwise_chain_with_views_is_one_kernel():
    fn = lambda x, y: (x.t().sin() * 2 + y).relu().reshape(-1)  # noqa: E731
    kernels = check(fn, torch.randn(7, 5), torch.randn(5, 7))
    assert len(kernels) == 1


def test_strided_input_with_storage_offset():
    base = torch.randn(9, 12)
    view = base[2:, 1::2]                          # offset 25, strides (12, 2)
    check(lambda v: v.exp() * 3 - 1, view)


def test_casts_round_and_compare():
    x = torch.randn(33) * 50
    fn = lambda x: ((x.to(torch.bfloat16).float() - x), (x > 0).to(torch.int32) + 3,  # noqa: E731
                    x.to(torch.int64), x.to(torch.float16).to(torch.float64))
    check(fn, x, rtol=0, atol=0)


def test_isnan_isinf_where_maximum_propagate_nan():
    x = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), -2.0, 0.5])
    y = torch.tensor([float("nan"), 2.0, 1.0, 0.0, -3.0, 0.25])
    fn = lambda x, y: (torch.where(torch.isnan(x) | torch.isinf(x), 0.0, x) * 2,  # noqa: E731
                       torch.maximum(x, y), torch.minimum(x, y), torch.sign(x))
    check(fn, x, y, rtol=0, atol=0)


def test_integer_floor_division_and_remainder_with_negatives():
    a = torch.randint(-50, 50, (40,))
    b = torch.randint(1, 7, (40,)) * torch.where(torch.rand(40) < 0.5, -1, 1)
    fn = lambda a, b: (torch.div(a, b, rounding_mode="floor"), a % b,  # noqa: E731
                       torch.div(a, b, rounding_mode="trunc"), torch.fmod(a, b), a * b - 7)
    check(fn, a, b, rtol=0, atol=0)


def test_float_floor_division_and_remainder():
    a, b = torch.randn(64) * 10, torch.randn(64) * 3
    fn = lambda a, b: (torch.div(a, b, rounding_mode="floor"), torch.remainder(a, b),  # noqa: E731
                       torch.fmod(a, b))
    check(fn, a, b, rtol=1e-6, atol=1e-6)


def test_cat_and_pad_use_masked_loads():
    a, b = torch.randn(5, 3), torch.randn(5, 4)
    fn = lambda a, b: (torch.cat([a, b], 1) * 2, F.pad(a, (1, 2, 0, 1), value=3.0) + 1)  # noqa: E731
    check(fn, a, b)


def test_gather_and_index_with_runtime_indices():
    src = torch.randn(6, 10)
    idx = torch.randint(0, 10, (6, 4))
    rows = torch.tensor([5, -1, 0, 2, -6])          # negative indices wrap, as in eager
    fn = lambda s, i, r: (torch.gather(s, 1, i) + 1, s[r] * 2)  # noqa: E731
    check(fn, src, idx, rows)


def test_embedding_then_layernorm():
    table, ids = torch.randn(50, 24), torch.randint(0, 50, (3, 7))
    check(lambda t, i: F.layer_norm(F.embedding(i, t), (24,)), table, ids)


# ---- reductions -----------------------------------------------------------------------------

def test_softmax_and_log_softmax_non_power_of_two():
    x = torch.randn(5, 37)
    kernels = check(lambda x: (torch.softmax(x, -1), torch.log_softmax(x, -1)), x)
    assert any(k.R == 37 for k in kernels)


def test_layer_norm_forward():
    x, r = torch.randn(6, 80), torch.randn(6, 80)
    w, b = torch.randn(80), torch.randn(80)
    kernels = check(lambda x, r, w, b: F.layer_norm(x + r, (80,), w, b), x, r, w, b)
    assert len(kernels) == 1


def test_layer_norm_backward_column_reductions():
    x, w, b, g = torch.randn(9, 40), torch.randn(40), torch.randn(40), torch.randn(9, 40)

    def grads(x, w, b, g):
        x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
        return torch.autograd.grad(F.layer_norm(x, (40,), w, b), (x, w, b), g)
    check(grads, x, w, b, g, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("R", [1, 7, 100, 1000])
def test_reductions_over_odd_lengths(R):
    x = torch.randn(3, R)
    fn = lambda x: (x.sum(-1), x.amax(-1), x.amin(-1), (x > 0).any(-1), (x > -3).all(-1),  # noqa: E731
                    (x * 0.1 + 1).prod(-1), x.mean(0), x.var(-1, unbiased=False))
    check(fn, x, rtol=1e-5, atol=1e-5)


def test_max_propagates_nan_and_integer_sum():
    x = torch.randn(4, 9)
    x[1, 3] = float("nan")
    n = torch.randint(-100, 100, (4, 9))
    check(lambda x, n: (x.amax(-1), x.amin(-1), n.sum(-1), n.amax(-1)), x, n, rtol=0, atol=0)


def test_argmax_argmin_take_the_first_extreme():
    x = torch.randint(0, 4, (6, 11)).float()        # many ties
    x[2, 5] = float("nan")                           # NaN wins, as in eager
    n = torch.randint(-3, 3, (6, 11))
    check(lambda x, n: (x.argmax(-1), x.argmin(-1), n.argmax(-1), n.argmin(-1)), x, n,
          rtol=0, atol=0)


def test_reduced_value_stored_at_every_element():
    x = torch.randn(4, 8)
    check(lambda x: (x - x.mean(-1, keepdim=True), x.sum(-1, keepdim=True) + torch.zeros(4, 8)), x)


# ---- low precision --------------------------------------------------------------------------

def test_bf16_inputs_accumulate_in_fp32_and_round_once():
    a, b = torch.randn(8, 50).bfloat16(), torch.randn(8, 50).bfloat16()
    fn = lambda a, b: ((a * b).sum(-1), torch.softmax(a, -1), (a.exp() + b) * 0.5)  # noqa: E731
    # fused, each output is rounded to bf16 once, from fp32 math on the bf16 inputs
    ref = lambda a, b: tuple(o.bfloat16() for o in fn(a.float(), b.float()))  # noqa: E731
    check(fn, a, b, reference=ref, rtol=1e-2, atol=1e-2)
    outs, _ = run_cpp(fn, a, b)
    torch.testing.assert_close(outs[2], ref(a, b)[2], rtol=0, atol=0)   # pointwise: exact


def test_fp16_and_bf16_conversions_are_exact_both_ways():
    """The helpers against PyTorch on every 16-bit pattern, with and without _Float16."""
    tc = cpp_build.find_toolchain()
    src = PRELUDE + '''
extern "C" void widen(const uint16_t* h, float* f16, float* bf16, int64_t n) {
  for (int64_t i = 0; i < n; ++i) { f16[i] = ck_f16_to_f(h[i]); bf16[i] = ck_bf16_to_f(h[i]); }
}
extern "C" void narrow(const float* f, uint16_t* f16, uint16_t* bf16, int64_t n) {
  for (int64_t i = 0; i < n; ++i) { f16[i] = ck_f_to_f16(f[i]); bf16[i] = ck_f_to_bf16(f[i]); }
}
'''
    bits = torch.arange(65536, dtype=torch.int32).to(torch.int16)
    floats = torch.cat([torch.randn(20000) * 10 ** torch.randint(-9, 6, (20000,)).float(),
                        torch.tensor([65504.0, 65520.0, 65519.99, 1e-8, -0.0, float("inf")])])
    for extra in ([], ["-DCK_NO_FLOAT16"]):
        folder = cpp_build.cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        cpp, lib = folder / f"conv{len(extra)}.cpp", folder / f"conv{len(extra)}.so"
        cpp.write_text(src)
        subprocess.run([tc.compiler, *tc.flags, *extra, str(cpp), "-o", str(lib)], check=True)
        dll = cpp_build.load_library(lib)
        f16, bf16 = torch.empty(65536), torch.empty(65536)
        dll.widen(*[ctypes_ptr(t) for t in (bits, f16, bf16)], 65536)
        torch.testing.assert_close(f16, bits.view(torch.float16).float(), rtol=0, atol=0,
                                   equal_nan=True)
        torch.testing.assert_close(bf16, bits.view(torch.bfloat16).float(), rtol=0, atol=0,
                                   equal_nan=True)
        n = len(floats)
        h, b = torch.empty(n, dtype=torch.int16), torch.empty(n, dtype=torch.int16)
        dll.narrow(*[ctypes_ptr(t) for t in (floats, h, b)], n)
        assert torch.equal(h, floats.half().view(torch.int16))
        assert torch.equal(b, floats.bfloat16().view(torch.int16))


def test_vectorizable_exp_and_tanh_match_eager():
    """ck_exp / ck_tanh (plain arithmetic, so loops vectorize) within 2 ulp of PyTorch."""
    tc = cpp_build.find_toolchain()
    src = PRELUDE + """
extern "C" void unary(const float* x, float* e, float* t, int64_t n) {
  for (int64_t i = 0; i < n; ++i) { e[i] = ck_exp(x[i]); t[i] = ck_tanh(x[i]); }
}
"""
    folder = cpp_build.cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "unary.cpp").write_text(src)
    subprocess.run([tc.compiler, *tc.flags, str(folder / "unary.cpp"), "-o",
                    str(folder / "unary.so")], check=True)
    dll = cpp_build.load_library(folder / "unary.so")
    x = torch.cat([torch.linspace(-110, 95, 200001), torch.randn(10000) * 1e-3,
                   torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"),
                                 88.72, 88.73, -87.4, -103.9, -104.0, 1e-30])])
    e, t = torch.empty_like(x), torch.empty_like(x)
    dll.unary(*[ctypes_ptr(v) for v in (x, e, t)], len(x))
    for got, want in ((e, x.exp()), (t, x.tanh())):
        ulp = (want.double().abs() * 2.0 ** -23).clamp_min(2.0 ** -149)
        err = ((got.double() - want.double()).abs() / ulp).nan_to_num(0.0)
        assert err.max() <= 2.0
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())


# the unfused Cephes exp the renderer used before ck_exp was restructured (clamp, then selects)
_CEPHES_EXP = """
static inline float ref_ldexp2(float y, int32_t k) {
    int32_t k1 = k >> 1, k2 = k - k1;
    return y * CK_BIT_CAST(float, (k1 + 127) << 23) * CK_BIT_CAST(float, (k2 + 127) << 23);
}
static inline float ref_exp(float x) {
    float xc = x > 88.8f ? 88.8f : (x < -104.0f ? -104.0f : x);
    xc = x != x ? 0.0f : xc;
    float k = std::floor(xc * 1.44269504088896341f + 0.5f);
    float r = xc - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f; p = p * r + 8.3334519073e-3f; p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f; p = p * r + 5.0000001201e-1f;
    float y = ref_ldexp2(p * r * r + r + 1.0f, static_cast<int32_t>(k));
    y = x > 88.72283935546875f ? std::numeric_limits<float>::infinity() : y;
    y = x < -103.972084045410f ? 0.0f : y;
    return x != x ? x : y;
}
extern "C" void exps(const float* x, float* got, float* ref, int64_t n) {
  #pragma omp simd
  for (int64_t i = 0; i < n; ++i) got[i] = ck_exp(x[i]);
  for (int64_t i = 0; i < n; ++i) ref[i] = ref_exp(x[i]);
}
"""


def test_exp_is_the_cephes_formula_fused_or_not():
    """ck_exp built without FMA is the unfused formula bit for bit; built as the backend
    builds it (with FMA where -march=native has it), within 1 ulp of it, with the same
    infinities, zeros and NaNs. On every float near the overflow and underflow edges and on
    random bit patterns (NaN payloads, subnormals, huge values)."""
    tc = cpp_build.find_toolchain()

    def floats(first_bits, n):                 # n consecutive float bit patterns
        b = torch.arange(first_bits, first_bits + n, dtype=torch.int64)
        return torch.where(b >= 2 ** 31, b - 2 ** 32, b).to(torch.int32).view(torch.float32)
    # [88.7, 88.8], [-104.05, -103.9], +inf and NaNs, -inf and NaNs
    edges = [floats(0x42B16666, 0x3340), floats(0xC2CFCCCD, 0x4CD0), floats(0x7F800000, 4),
             floats(0xFF800000, 4)]
    x = torch.cat(edges + [torch.randint(-2 ** 31, 2 ** 31 - 1, (1 << 18,), dtype=torch.int32)
                           .view(torch.float32), torch.linspace(-110, 95, 10001)])
    bits = lambda t: t.view(torch.int32).long()  # noqa: E731
    folder = cpp_build.cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "exps.cpp").write_text(PRELUDE + _CEPHES_EXP)
    builds = {"default": []}
    if platform.machine() in ("x86_64", "AMD64"):
        builds["no_fma"] = ["-mno-fma"]
    for name, extra in builds.items():
        lib = folder / f"exps_{name}.so"
        subprocess.run([tc.compiler, *tc.flags, *extra, str(folder / "exps.cpp"), "-o", str(lib)],
                       check=True)
        got, ref = torch.empty_like(x), torch.empty_like(x)
        cpp_build.load_library(lib).exps(*[ctypes_ptr(t) for t in (x, got, ref)], len(x))
        nan = x.isnan()
        assert torch.equal(bits(got[nan]), bits(x[nan]))           # NaN in, same NaN out
        if name == "no_fma":
            assert torch.equal(bits(got), bits(ref))
        else:                   # same sign, so the bit patterns are ordered like the values
            assert (bits(got[~nan]) - bits(ref[~nan])).abs().max() <= 1
            assert torch.equal(got[~nan].isinf(), ref[~nan].isinf())
            assert torch.equal(got[~nan] == 0, ref[~nan] == 0)


def test_cast_to_16_bit_float_then_store_rounds_once():
    """A value cast to the output's bf16/fp16 is stored from the cast's fp32 source: one
    rounding in the source, the same bits as eager."""
    x = torch.randn(16, 48).to(torch.bfloat16)
    fn = lambda x: ((x.float() * 3 + 1).to(torch.bfloat16),  # noqa: E731
                    torch.softmax(x.float(), -1).half())
    outs, kernels = run_cpp(fn, x)
    want = fn(x)
    assert outs[0].dtype == torch.bfloat16 and torch.equal(outs[0], want[0])   # same fp32 math
    torch.testing.assert_close(outs[1], want[1], rtol=1e-3, atol=1e-5)        # our exp, not ATen's
    stores = [line for k in kernels for line in render_cpp(k).splitlines()
              if line.strip().startswith("out_")]
    assert stores and all(line.count("ck_f_to_") == 1 and "_to_f(" not in line for line in stores)


def ctypes_ptr(t):
    import ctypes
    return ctypes.c_void_p(t.data_ptr())


# ---- source, build cache and errors ---------------------------------------------------------

def test_source_is_readable_openmp_cpp():
    _, fusion = lower(lambda x: torch.softmax(x, -1), torch.randn(256, 300))
    source = render_cpp(fusion.groups[0].kernel)
    assert 'extern "C" void k0(const float* __restrict in_0, float* __restrict out_0)' in source
    assert "#pragma omp parallel for" in source and "#pragma omp simd reduction(+:" in source
    assert source.count("for (int64_t r = 0; r < 300; ++r)") == 3      # max, sum, store


def test_second_build_compiles_nothing():
    _, fusion = lower(lambda x: x.cos() + 2, torch.randn(10))
    kernels = [g.kernel for g in fusion.groups]
    cpp_build.compile_graph_kernels(kernels)
    before = dict(cpp_build.STATS)
    built = cpp_build.compile_graph_kernels(kernels)
    assert cpp_build.STATS["compiled"] == before["compiled"]
    assert cpp_build.STATS["loaded_from_disk"] == before["loaded_from_disk"] + 1
    x, out = torch.randn(10), torch.empty(10)
    built[kernels[0].name](x, out)
    torch.testing.assert_close(out, x.cos() + 2)


def test_missing_compiler_is_a_clear_error():
    _, fusion = lower(lambda x: x + 1, torch.randn(4))
    with pytest.raises(cpp_build.CppBuildError, match=r"no C\+\+ compiler found"):
        cpp_build.compile_graph_kernels([g.kernel for g in fusion.groups],
                                        compiler="/nonexistent/g++")


def test_failing_compiler_is_a_clear_error():
    _, fusion = lower(lambda x: x + 1, torch.randn(4))
    with pytest.raises(cpp_build.CppBuildError, match="cannot build"):
        cpp_build.compile_graph_kernels([g.kernel for g in fusion.groups], compiler="false")


def test_wrong_arguments_are_rejected():
    _, fusion = lower(lambda x: x + 1, torch.randn(4))
    k = fusion.groups[0].kernel
    fn = cpp_build.compile_graph_kernels([k])[k.name]
    with pytest.raises(TypeError, match="expected a CPU"):
        fn(torch.randn(4).double(), torch.empty(4))
    with pytest.raises(ValueError, match="storage"):
        fn(torch.randn(3), torch.empty(4))


def test_scatter_add_and_index_put_accumulate():
    base, src = torch.randn(5, 6), torch.randn(8, 6)
    rows = torch.tensor([0, 4, 4, 1, 0, 4, 2, -1])         # repeated rows accumulate
    idx = torch.randint(0, 5, (8, 6))
    fn = lambda b, s, r, i: (b.index_put((r,), s, accumulate=True),  # noqa: E731
                             torch.scatter_add(b, 0, i, s))
    kernels = check(fn, base, src, rows, idx)
    assert any(getattr(s, "atomic_add", False) for k in kernels for s in k.body)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int32, torch.float64])
def test_hand_built_scatter_add_kernel(dtype):
    """out[idx[x]] += val[x]: atomic for 32/64-bit elements (many rows, all threads, heavy
    collisions), a serial row loop for 16-bit ones (few rows: bf16 sums stay exact)."""
    n = 40 if dtype == torch.bfloat16 else 1 << 16
    x = ix.var("x", n)
    k = Kernel("scatter", n, 1, inputs=[Buffer("idx", torch.int64, n), Buffer("val", dtype, n)],
               outputs=[Buffer("out", dtype, 7)])
    k.body = [Load("i", "idx", x), Load("v", "val", x),
              Store("out", ix.dyn("i", 0, 6), "v", scatter="add")]
    k.dtypes = {"i": torch.int64, "v": dtype}
    k.levels = {"i": "x", "v": "x"}
    source = render_cpp(k)
    assert ("#pragma omp atomic" in source) == (dtype != torch.bfloat16)
    fn = cpp_build.compile_graph_kernels([k])["scatter"]
    idx = torch.randint(0, 7, (n,))
    val = torch.randint(-4, 5, (n,)).to(dtype)          # small integers: exact in every dtype
    out = torch.ones(7, dtype=dtype)
    fn(idx, val, out)
    expected = torch.ones(7, dtype=torch.float64).index_add(0, idx, val.double())
    assert torch.equal(out.double(), expected)


def test_broadcast_operand_splits_the_pointwise_loop():
    """x % d reads (a bias along the last dim) become the inner loop's own index."""
    x = torch.randn(8, 64).to(torch.bfloat16)
    b = torch.randn(64).to(torch.bfloat16)
    fn = lambda x, b: torch.nn.functional.gelu(x + b, approximate="tanh")  # noqa: E731
    outs, kernels = run_cpp(fn, x, b)
    torch.testing.assert_close(outs[0], fn(x, b), rtol=1e-2, atol=1e-2)
    source = render_cpp(kernels[0])
    code = source[source.index("extern"):]
    assert "x1 < 64" in code and "% 64" not in code


def test_transcendental_row_values_are_kept_between_passes():
    """softmax's exp is computed once per element: kept in a row buffer for the last pass."""
    x = torch.randn(6, 300)
    fn = lambda x: torch.softmax(x, -1)  # noqa: E731
    outs, kernels = run_cpp(fn, x)
    torch.testing.assert_close(outs[0], fn(x))
    code = render_cpp(kernels[0])
    code = code[code.index("extern"):]
    assert "_row[300]" in code and code.count("ck_exp(") == 1


def test_column_reductions_loop_over_rows_outside_and_match_eager():
    """Sums, products, max/min (with a NaN) down the columns of a (1024, 64) tensor: rendered
    with rows outside and columns inside (contiguous), per-thread partial rows combined."""
    from cherenkov.backend import COMPILED
    torch.manual_seed(0)
    x = torch.randn(1024, 64)
    x[5, 3] = float("nan")
    w = torch.randn(64)
    fn = lambda x, w: ((x * w).sum(0) * 2 + w, x.amax(0), x.amin(0),  # noqa: E731
                       (1 + x[:, :8] * 1e-3).prod(0))
    start = len(COMPILED)
    got = cherenkov.compile(fn, strict=True, cpu_backend="cpp")(x, w)
    want = fn(x.double(), w.double())
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e.float(), rtol=1e-5, atol=1e-5, equal_nan=True)
    sources = [k[3] for _, info in COMPILED[start:] for k in info.kernels]
    assert any("column reduction: rows split across threads" in s for s in sources)


def test_bf16_column_sum_accumulates_in_float_or_better():
    torch.manual_seed(0)
    x = torch.randn(2048, 32).to(torch.bfloat16)
    got = cherenkov.compile(lambda x: x.float().sum(0), strict=True, cpu_backend="cpp")(x)
    want = x.double().sum(0)
    assert (got.double() - want).abs().max() < 1e-4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_backward_scatters_rows_with_threads_owning_columns(dtype):
    """Token gradients added into their vocabulary rows (repeated tokens collide on a row):
    threads own disjoint column ranges, so no atomics and no lost updates, any element type."""
    from cherenkov.backend import COMPILED
    torch.manual_seed(0)
    idx = torch.randint(0, 40, (6, 64))          # 384 tokens into 40 rows: many collisions
    idx[0, :5] = -1                              # padding_idx rows are skipped
    g = torch.randn(6, 64, 128).to(dtype)
    fn = lambda g: torch.ops.aten.embedding_dense_backward(g, idx, 40, -1, False)  # noqa: E731
    start = len(COMPILED)
    got = cherenkov.compile(fn, strict=True, cpu_backend="cpp")(g)
    want = torch.ops.aten.embedding_dense_backward(g.double(), idx, 40, -1, False)
    tol = 1e-5 if dtype == torch.float32 else 5e-2
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    sources = [k[3] for _, info in COMPILED[start:] for k in info.kernels]
    assert any("each thread owns a range of columns" in s for s in sources)


def test_scatter_into_single_elements_keeps_atomic_adds():
    torch.manual_seed(0)
    index = torch.randint(0, 50, (40000,))
    src = torch.randn(40000)
    fn = lambda src: torch.zeros(50).index_add(0, index, src)  # noqa: E731
    got = cherenkov.compile(fn, strict=True, cpu_backend="cpp")(src)
    torch.testing.assert_close(got, fn(src), rtol=1e-4, atol=1e-4)


def test_any_all_row_reductions_fold_int_flags():
    """any/all over rows (with an inf, a NaN and an all-true row) match eager; the flags are
    ints folded with | and & (a bool ||/&& reduction does not vectorize)."""
    from cherenkov.backend import COMPILED
    torch.manual_seed(0)
    x = torch.randn(64, 1000)
    x[3, 5], x[4, 9] = float("inf"), float("nan")
    x[7] = 0.5
    fn = lambda x: ((x > 2.5).any(-1), (x < 3.0).all(-1), torch.isfinite(x).all(-1))  # noqa
    start = len(COMPILED)
    for got, want in zip(cherenkov.compile(fn, strict=True, cpu_backend="cpp")(x), fn(x)):
        assert torch.equal(got, want)
    source = "".join(k[3] for _, info in COMPILED[start:] for k in info.kernels)
    assert "reduction(|:" in source and "||:" not in source and "&&:" not in source


def test_padded_broadcast_reads_keep_the_source_range(tmp_path):
    """A pad reads its source only where the source is selected: there the source index lies
    in [0, size), so a broadcast table behind a slice is addressed without division or modulo
    (RoPE's backward: those int64 divisions kept the loop from vectorizing, 1.7 -> 1.1 ms)."""
    import glob
    import torch.nn.functional as F
    import cherenkov
    B, T, H, D = 2, 8, 3, 16
    g, s = torch.randn(B, T, H, D), torch.randn(T, D)
    fn = lambda g, s: F.pad((g * s[None, :, None, :])[..., D // 2:], (0, D // 2))  # noqa: E731
    f = cherenkov.compile(fn, strict=True, cpu_backend="cpp", dump_dir=str(tmp_path))
    torch.testing.assert_close(f(g, s), fn(g, s))
    loads = [line for p in glob.glob(f"{tmp_path}/*/kernel_k*.cpp") for line in open(p)
             if "in_1[" in line and "=" in line]
    assert loads and all("% 16" not in line and "/ 16" not in line for line in loads), loads
