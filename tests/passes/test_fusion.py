"""Fusion decisions, read off compiled graphs: one kernel for add+LayerNorm, one for softmax."""
import torch
import torch.nn.functional as F

import cherenkov
from cherenkov.backend import COMPILED


def compile_and_count(fn, *args):
    start = len(COMPILED)
    out = cherenkov.compile(fn, strict=True)(*args)
    torch.testing.assert_close(out, fn(*args), rtol=1e-5, atol=1e-5)
    infos = [info for _, info in COMPILED[start:]]
    assert infos, "nothing was compiled"
    return infos


def test_add_layernorm_forward_is_one_kernel():
    x, r = torch.randn(6, 80), torch.randn(6, 80)
    w, b = torch.randn(80), torch.randn(80)
    infos = compile_and_count(lambda x, r, w, b: F.layer_norm(x + r, (80,), w, b), x, r, w, b)
    assert len(infos[0].kernels) == 1
    assert infos[0].externs == [] and infos[0].library_calls == {}


def test_softmax_forward_is_one_kernel():
    infos = compile_and_count(lambda x: torch.softmax(x, -1), torch.randn(5, 37))
    assert len(infos[0].kernels) == 1


def test_pointwise_chain_is_one_kernel_with_views_folded():
    fn = lambda x, y: (x.t().sin() * 2 + y).relu().reshape(-1)  # noqa: E731
    infos = compile_and_count(fn, torch.randn(7, 5), torch.randn(5, 7))
    assert len(infos[0].kernels) == 1


def test_layernorm_backward_uses_few_kernels():
    x = torch.randn(9, 40, requires_grad=True)
    w = torch.randn(40, requires_grad=True)
    b = torch.randn(40, requires_grad=True)
    start = len(COMPILED)
    fn = lambda x, w, b: F.layer_norm(x, (40,), w, b)  # noqa: E731
    out = cherenkov.compile(fn, strict=True)(x, w, b)
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, (x, w, b), g)
    ref = torch.autograd.grad(fn(x, w, b), (x, w, b), g)
    for a, e in zip(grads, ref):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5)
    backward = [info for _, info in COMPILED[start:] if info.name.startswith("backward")]
    assert backward and len(backward[0].kernels) <= 3   # row reductions + column reductions


def test_transposed_operand_of_a_matmul_is_a_view_not_a_copy():
    """mm(x, gelu(y).t()): the gelu is stored once and the matmul reads it transposed."""
    fn = lambda x, y: x @ torch.nn.functional.gelu(y).t()  # noqa: E731
    infos = compile_and_count(fn, torch.randn(6, 8), torch.randn(5, 8))
    assert len(infos[0].kernels) == 1
    assert infos[0].kernels[0][2] == (5 * 8 * 4) * 2      # read y, write gelu(y): no transposed copy


def test_a_transposed_weight_cast_saved_for_backward_is_written_once():
    """Autocast's x @ w.t() with w cast (here to fp64): the forward saves the transposed cast
    for the backward and the matmul reads it; both are views of one stored cast (it was
    written twice, once per layout)."""
    x = torch.randn(6, 8, requires_grad=True)
    w = torch.randn(5, 8, requires_grad=True)
    fn = lambda x, w: x.double() @ w.double().t()  # noqa: E731
    start = len(COMPILED)
    out = cherenkov.compile(fn, strict=True)(x, w)
    torch.testing.assert_close(out, fn(x, w))
    got = torch.autograd.grad(out.sum(), (x, w))
    want = torch.autograd.grad(fn(x, w).sum(), (x, w))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    forward = [info for _, info in COMPILED[start:] if info.name.startswith("forward")][0]
    written = sum(k[2] for k in forward.kernels)
    assert written == (6 * 8 + 5 * 8) * (4 + 8)      # each input read once, each cast stored once


def test_residual_stream_is_stored_not_recomputed_by_every_layer():
    """x_k = x_{k-1} + layernorm(x_{k-1}) @ w_k, twelve times: each x_k feeds a matmul and the
    next layer. Inlining x_k into its consumers would make layer k re-read every earlier layer's
    inputs (quadratic); storing it bounds every kernel's reads."""
    torch.manual_seed(0)
    ws = [torch.randn(16, 16) * 0.1 for _ in range(12)]

    def fn(x, *ws):
        for w in ws:
            x = x + F.layer_norm(x, (16,)) @ w
        return x

    infos = compile_and_count(fn, torch.randn(8, 16), *ws)
    kernels = [k for info in infos for k in info.kernels]
    largest = max(k[2] for k in kernels)
    assert largest <= 4 * 8 * 16 * 4 + 2 * 8 * 4       # a few (8, 16) fp32 rows, not the chain


def test_pointwise_joins_its_column_reduction_in_the_reduction_s_element_order():
    """cat(q, k, v) feeding a matmul, and its column sum (a bias gradient): the cat joins the
    column sum, each element computed, stored and summed in the lane (x, r) = (column, row)
    that sums it -- every full-size access walks columns along x and rows along r, none mixes
    the two (x*R + r would be another element: // and % soup and double reads). Same results
    through the Triton interpreter and the C++ backend."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from cherenkov import hw
    from cherenkov.codegen.blocks import is_column_reduction
    from cherenkov.codegen.kernel_ir import Store, r_strides
    from cherenkov.ir.ops import Op
    from cherenkov.lowering.from_fx import lower_fx
    from cherenkov.passes.cse import eliminate_common_subexpressions
    from cherenkov.passes.fusion import fuse, mixed_access
    q, k, v, w = torch.randn(512, 8), torch.randn(512, 8), torch.randn(512, 8), torch.randn(24, 4)
    fn = lambda q, k, v, w: (torch.cat([q, k, v], 1) @ w, torch.cat([q, k, v], 1).sum(0))  # noqa
    graph, _ = lower_fx(make_fx(fn)(q, k, v, w), [q, k, v, w])
    fusion = fuse(eliminate_common_subexpressions(graph), device=hw.device("h200"))
    joined = [g for g in fusion.groups if any(m.op == Op.CAT for m in g.members)]
    assert len(joined) == 1 and joined[0].R > 1 and is_column_reduction(joined[0].kernel)
    kernel = joined[0].kernel
    assert not mixed_access(kernel) and set(r_strides(kernel)) == {24 // 3}
    full = [s for s in kernel.body if isinstance(s, Store) and "r" in str(s.index)]
    assert len(full) == 1                       # the cat, stored where its lane reads it
    # two equal cats (no CSE): the one the matmul reads is not what the column sum reads, so
    # it could only sit at x*R + r -- a walk along rows beside columns: kept apart
    for g in fuse(graph, device=hw.device("h200")).groups:
        assert g.kernel is None or not mixed_access(g.kernel)
    for backend in ("triton", "cpp"):
        out = cherenkov.compile(fn, strict=True, cpu_backend=backend)(q, k, v, w)
        for a, e in zip(out, fn(q, k, v, w)):
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


def test_bias_gradient_is_summed_where_the_gradient_is_computed():
    """bias + GeLU backward on the H200 preset (the column sum split into partial sums):
    the input gradient is computed, stored and summed into its column partials in one
    kernel -- it is never read back -- and the gradients match eager."""
    x = torch.randn(512, 64, requires_grad=True)
    b = torch.randn(64, requires_grad=True)
    fn = lambda x, b: F.gelu(x + b, approximate="tanh")  # noqa: E731
    start = len(COMPILED)
    out = cherenkov.compile(fn, strict=True, device="h200", cpu_backend="triton")(x, b)
    dy = torch.randn_like(out)
    gx, gb = torch.autograd.grad(out, (x, b), dy)
    ex, eb = torch.autograd.grad(fn(x, b), (x, b), dy)
    torch.testing.assert_close(gx, ex, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gb, eb, rtol=1e-4, atol=1e-4)
    backward = [info for _, info in COMPILED[start:] if info.name.startswith("backward")]
    assert backward
    moved = sum(k[2] for k in backward[0].kernels)
    # reads dy and x, writes dx (3 full tensors) plus small vectors: dx is not read again
    assert moved < 3.2 * x.numel() * 4, moved


def test_on_a_cpu_the_bias_gradient_stays_apart_from_the_gradient():
    """The C++ backend never joins a full-size pointwise kernel to a column reduction: its
    kernel would walk each column down the rows (a cache line per element)."""
    x = torch.randn(512, 64, requires_grad=True)
    b = torch.randn(64, requires_grad=True)
    fn = lambda x, b: F.gelu(x + b, approximate="tanh")  # noqa: E731
    start = len(COMPILED)
    out = cherenkov.compile(fn, strict=True, cpu_backend="cpp")(x, b)
    dy = torch.randn_like(out)
    gx, gb = torch.autograd.grad(out, (x, b), dy)
    ex, eb = torch.autograd.grad(fn(x, b), (x, b), dy)
    torch.testing.assert_close(gx, ex, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gb, eb, rtol=1e-4, atol=1e-4)
    backward = [info for _, info in COMPILED[start:] if info.name.startswith("backward")][0]
    assert len(backward.kernels) == 2
    assert min(k[1] for k in backward.kernels) == 1          # the column sum on its own


def test_broadcast_transcendental_tables_are_computed_once():
    """Rotary cos/sin tables computed from arange, broadcast over batch and heads: on the
    H200 preset (where recomputing pow/cos/sin per q element costs more than storing the
    (T, D/2) tables) each table is its own small kernel, and the result matches eager. (At
    a tenth of this size the recomputation costs less than a launch, and stays inlined.)"""
    from cherenkov.models.llama import apply_rope, rope_tables
    B, H, T, D = 4, 16, 1024, 64

    def fn(q):
        cos, sin = rope_tables(D, T, 10000.0, q.device)
        return apply_rope(q, cos, sin)

    q = torch.randn(B, H, T, D)
    start = len(COMPILED)
    out = cherenkov.compile(fn, strict=True, device="h200")(q)
    # cos/sin of angles up to ~1000 rad: libm and ATen's vectorized versions differ by ulps
    torch.testing.assert_close(out, fn(q), rtol=1e-4, atol=5e-4)
    info = COMPILED[start][1]
    table_bytes = T * (D // 2) * 4
    assert sum(1 for k in info.kernels if k[2] == table_bytes) == 2, [k[2] for k in info.kernels]


def test_a_returned_reshape_that_would_copy_is_stored_by_its_kernel():
    """(x * 2).transpose(1, 2).reshape(B, T, H * D) returned: no strided view of the stored
    product gives that layout, so the kernel stores the output itself (handing it out as a
    view would leave the runtime an ATen copy outside any kernel)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from cherenkov.lowering.from_fx import lower_fx
    from cherenkov.passes.fusion import fuse
    B, H, T, D = 2, 3, 4, 5

    def fn(x):
        y = x * 2
        return y.transpose(1, 2).reshape(B, T, H * D), y.transpose(1, 2)

    x = torch.randn(B, H, T, D)
    graph, _ = lower_fx(make_fx(fn)(x), [x], strict=True, name="g")
    fusion = fuse(graph)
    copied, viewed = graph.outputs
    assert copied in fusion.realized and copied not in fusion.views
    assert viewed in fusion.views                # a transpose alone is a view of the product
    out = cherenkov.compile(fn, strict=True)(x)
    for a, b in zip(out, fn(x)):
        torch.testing.assert_close(a, b)


def test_identical_layers_share_probe_kernels_and_fuse_the_same(monkeypatch):
    """Fusion probes a candidate merge by building its kernel; a group shaped like one probed
    before (the next layer's) reuses that probe. Decisions are the same as building every
    probe, and far fewer kernels are built."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from cherenkov import hw
    from cherenkov.lowering.from_fx import lower_fx
    from cherenkov.passes import fusion

    def layer(x, w, b):
        h = F.layer_norm(x + 1.0, (x.shape[-1],), w, b)
        return x + F.gelu(h, approximate="tanh") * 0.5

    def model(x, w, b):
        for _ in range(4):
            x = layer(x, w, b).softmax(-1) * 2
        return x
    from cherenkov.capture.decompositions import decomposition_table
    args = (torch.randn(8, 32), torch.randn(32), torch.randn(32))
    gm = make_fx(model, decomposition_table=decomposition_table())(*args)
    graph, _ = lower_fx(gm, list(args), strict=True)
    spec = hw.device("h200")
    builds = []
    real_build = fusion.build_kernel

    def counting(*a, **k):
        builds.append(a[2])
        return real_build(*a, **k)
    monkeypatch.setattr(fusion, "build_kernel", counting)
    order = {n: i for i, n in enumerate(graph.nodes())}
    shared = fusion.fuse(graph, device=spec)
    probes_shared = builds.count("probe")
    builds.clear()
    monkeypatch.setattr(fusion, "structure_key", lambda *a: None)
    alone = fusion.fuse(graph, device=spec)
    probes_alone = builds.count("probe")
    members = lambda r: sorted(tuple(order[n] for n in g.members) for g in r.groups)  # noqa: E731
    assert members(shared) == members(alone)
    assert probes_shared * 2 < probes_alone, (probes_shared, probes_alone)


def test_transpose_of_a_stored_reshape_is_a_view_for_the_matmul():
    """A head-merging reshape that must copy (permute then reshape) is stored for one matmul;
    its transpose, read by another matmul (a weight gradient), is a view of that buffer, not
    a second, transposed copy (Llama's backward wrote 2 such 67 MB copies per layer at 0.6
    TB/s)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from cherenkov import hw
    from cherenkov.ir.ops import Op
    from cherenkov.lowering.from_fx import lower_fx
    from cherenkov.passes.cse import eliminate_common_subexpressions
    from cherenkov.passes.fusion import fuse

    def fn(x, w1, w2):
        r = (x * 2).permute(0, 2, 1, 3).reshape(4 * 32, 128)
        return r @ w1, r.t() @ w2
    x, w1, w2 = torch.randn(4, 16, 32, 8), torch.randn(128, 8), torch.randn(128, 8)
    graph, _ = lower_fx(make_fx(fn)(x, w1, w2), [x, w1, w2])
    fusion = fuse(eliminate_common_subexpressions(graph), device=hw.device("h200"))
    assert len(fusion.groups) == 1
    assert not any(m.op == Op.PERMUTE and m.shape == (128, 128) for m in fusion.groups[0].members)
    assert any(v.op == Op.PERMUTE and b.op == Op.RESHAPE for v, b in fusion.views.items())
    for backend in ("triton", "cpp"):
        out = cherenkov.compile(fn, strict=True, cpu_backend=backend)(x, w1, w2)
        for a, e in zip(out, fn(x, w1, w2)):
            torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)


def test_a_gather_does_not_count_as_walking_rows():
    """Cross-entropy's loss partials gather each row's target logit; on the H200 preset they
    share a kernel with the target mask and count over the same rows (a gather walks neither
    along nor across rows, so it never makes a merge 'mixed')."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from cherenkov import hw
    from cherenkov.capture.decompositions import decomposition_table
    from cherenkov.ir.ops import Op
    from cherenkov.lowering.from_fx import lower_fx
    from cherenkov.passes.cse import eliminate_common_subexpressions
    from cherenkov.passes.fusion import fuse
    from cherenkov.passes.split_reductions import split_reductions

    def fn(logits, targets):
        return F.cross_entropy(logits.float(), targets)
    logits, targets = torch.randn(2048, 100), torch.randint(0, 100, (2048,))
    gm = make_fx(fn, decomposition_table=decomposition_table())(logits, targets)
    graph, _ = lower_fx(gm, [logits, targets])
    spec = hw.device("h200")
    graph = split_reductions(eliminate_common_subexpressions(graph), spec.sm_count)
    fusion = fuse(graph, device=spec)
    with_mask = [g for g in fusion.groups if any(m.op == Op.NE for m in g.members)]
    assert len(with_mask) == 1
    assert sum(m.op == Op.SUM for m in with_mask[0].members) == 2    # count and loss partials
    out = cherenkov.compile(fn, strict=True, device="h200", cpu_backend="triton")(logits,
                                                                                   targets)
    torch.testing.assert_close(out, fn(logits, targets), rtol=1e-5, atol=1e-5)
