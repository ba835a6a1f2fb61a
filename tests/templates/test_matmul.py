"""The matmul template vs eager PyTorch (fp64 reference) in Triton's interpreter."""
import warnings

import pytest
import torch
import torch.nn.functional as F

from cherenkov.templates import EPILOGUES, MatmulSpec, TileConfig, matmul, render
from cherenkov.templates.matmul import cache_root

M, N, K = 37, 53, 29          # odd sizes: every block has a ragged edge, K is not a block multiple

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")


def _ref(a, b, epilogue=(), bias=None, residual=None, mul=None, scale=None, row_scale=None,
         col_scale=None):
    """The same computation in eager fp64."""
    a, b = a.double(), b.double()
    if row_scale is not None:
        a = a * row_scale.double().unsqueeze(-1)
    if col_scale is not None:
        a = a * col_scale.double()
    x = a @ b
    for name in epilogue:
        if name == "bias":
            x = x + bias.double()
        elif name == "gelu_tanh":
            x = F.gelu(x, approximate="tanh")
        elif name == "gelu_erf":
            x = F.gelu(x)
        elif name == "silu":
            x = F.silu(x)
        elif name == "relu":
            x = torch.relu(x)
        elif name == "scale":
            x = x * scale
        elif name == "residual":
            x = x + residual.double()
        elif name == "mul":
            x = x * mul.double()
    return x


def _operands(shape):
    return dict(bias=torch.randn(shape[-1]), residual=torch.randn(shape), mul=torch.randn(shape),
                scale=0.37)


def _needed(epilogue, ops):
    names = {"bias", "residual", "mul", "scale"}
    return {k: v for k, v in ops.items() if k in names and k in epilogue}


@pytest.mark.parametrize("name", sorted(EPILOGUES))
def test_each_epilogue_op_matches_eager(name):
    a, b = torch.randn(M, K), torch.randn(K, N)
    ops = _needed((name,), _operands((M, N)))
    out = matmul(a, b, (name,), **ops)
    assert out.shape == (M, N) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), _ref(a, b, (name,), **ops), rtol=1e-5, atol=1e-4)


def test_chained_epilogue_applies_in_order():
    a, b = torch.randn(M, K), torch.randn(K, N)
    ops = _operands((M, N))
    for chain in [("bias", "gelu_tanh", "scale", "residual"), ("scale", "residual", "relu"),
                  ("silu", "mul")]:
        kw = _needed(chain, ops)
        out = matmul(a, b, chain, **kw)
        torch.testing.assert_close(out.double(), _ref(a, b, chain, **kw), rtol=1e-5, atol=1e-4)


def test_rmsnorm_prologue_scales_rows_and_columns_of_a():
    a, b = torch.randn(M, K), torch.randn(K, N)
    rstd, w = torch.rand(M) + 0.5, torch.randn(K)
    out = matmul(a, b, ("bias",), bias=torch.zeros(N), row_scale=rstd, col_scale=w)
    torch.testing.assert_close(out.double(), _ref(a, b, row_scale=rstd, col_scale=w),
                               rtol=1e-5, atol=1e-4)
    only_rows = matmul(a, b, row_scale=rstd)
    torch.testing.assert_close(only_rows.double(), _ref(a, b, row_scale=rstd), rtol=1e-5, atol=1e-4)


def test_transposed_operands_use_strides_without_copies():
    w = torch.randn(N, K)                     # a Linear weight: y = x @ w.T
    x_t = torch.randn(K, M).t()               # column-major A
    assert not w.t().is_contiguous() and not x_t.is_contiguous()
    bias = torch.randn(2 * N)[::2]           # a strided bias vector too
    out = matmul(x_t, w.t(), ("bias",), bias=bias)
    torch.testing.assert_close(out.double(), _ref(x_t, w.t(), ("bias",), bias=bias),
                               rtol=1e-5, atol=1e-4)


def test_even_k_path():
    a, b = torch.randn(M, 64), torch.randn(64, N)           # K a multiple of the 32-wide K block
    torch.testing.assert_close(matmul(a, b).double(), _ref(a, b), rtol=1e-5, atol=1e-4)


def test_batched_with_broadcast_weight_and_residual():
    a = torch.randn(3, 19, K)
    b3, b2 = torch.randn(3, K, 21), torch.randn(K, 21)
    res = torch.randn(3, 19, 21)
    out = matmul(a, b3, ("residual",), residual=res)
    torch.testing.assert_close(out.double(), _ref(a, b3, ("residual",), residual=res),
                               rtol=1e-5, atol=1e-4)
    rstd = torch.rand(3, 19) + 0.5
    out = matmul(a, b2, ("bias", "silu"), bias=torch.ones(21), row_scale=rstd)
    torch.testing.assert_close(out.double(), _ref(a, b2, ("bias", "silu"), bias=torch.ones(21),
                                                  row_scale=rstd), rtol=1e-5, atol=1e-4)


def test_persistent_programs_loop_over_all_tiles():
    a, b = torch.randn(70, K), torch.randn(K, 40)        # 3 x 3 = 9 tiles of 32, 2 programs
    cfg = TileConfig(32, 16, 16, group_m=2, num_warps=1, num_stages=1, persistent=True)
    res = torch.randn(70, 40)
    out = matmul(a, b, ("residual",), residual=res, config=cfg)
    torch.testing.assert_close(out.double(), _ref(a, b, ("residual",), residual=res),
                               rtol=1e-5, atol=1e-4)


def test_fp16_inputs_and_output_cast():
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    bias = torch.randn(N, dtype=torch.float16)
    out = matmul(a, b, ("bias", "gelu_erf"), bias=bias)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.double(), _ref(a, b, ("bias", "gelu_erf"), bias=bias),
                               rtol=2e-3, atol=2e-3)
    f32 = torch.randn(M, K), torch.randn(K, N)
    down = matmul(*f32, out_dtype=torch.float16)            # fp32 accumulate, cast on store
    assert down.dtype == torch.float16
    torch.testing.assert_close(down, _ref(*f32).half(), rtol=1e-3, atol=1e-3)


def test_cublas_config_runs_the_eager_alternative():
    a, b, bias = torch.randn(M, K), torch.randn(K, N), torch.randn(N)
    out = matmul(a, b, ("bias", "relu"), bias=bias, config="cublas")
    torch.testing.assert_close(out.double(), _ref(a, b, ("bias", "relu"), bias=bias),
                               rtol=1e-5, atol=1e-4)


def test_rendered_source_fuses_epilogue_in_order_and_is_cached_on_disk():
    spec = MatmulSpec(("bias", "gelu_tanh", "residual"), row_scale=True)
    src = render(spec)
    body = src[src.index("tl.dot"):]
    assert body.index("acc + v[None, :]") < body.index("tl.sigmoid") < body.index("acc + v\n")
    assert "rs_ptr" in src and "cs_ptr" not in src
    assert "for tile in range(pid" in render(spec, persistent=True)
    matmul(torch.randn(5, 7), torch.randn(7, 3), ("bias", "gelu_tanh", "residual"),
           bias=torch.randn(3), residual=torch.randn(5, 3), row_scale=torch.ones(5))
    files = list((cache_root() / "templates").glob("matmul_bias_gelu_tanh_residual_rowscale_*.py"))
    assert len(files) == 1 and files[0].read_text() == src


def test_bad_requests_raise():
    a, b = torch.randn(4, 5), torch.randn(5, 6)
    with pytest.raises(ValueError, match="unknown epilogue"):
        matmul(a, b, ("softplus",))
    with pytest.raises(ValueError, match="needs the `bias=` argument"):
        matmul(a, b, ("bias",))
    with pytest.raises(ValueError, match="do not match"):
        matmul(a, torch.randn(4, 6))
