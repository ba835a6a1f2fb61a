"""CPU buffers reused between calls (runtime/alloc.Recycler): a buffer comes back only when
nobody holds it, so reuse never changes an answer someone still has."""
import gc

import torch

import cherenkov
from cherenkov.runtime.alloc import RECYCLE_MIN_BYTES, Recycler, allocator

N = 512 * 1024          # 2 MB of fp32: above the recycling threshold


def test_a_dropped_output_is_reused_and_a_held_one_never_is():
    from cherenkov.backend import COMPILED
    start = len(COMPILED)
    fn = cherenkov.compile(lambda x: (x * 2).relu() + 1, strict=True, cpu_backend="cpp")
    x = torch.randn(N)
    first = fn(x)
    ptr = first.data_ptr()
    (recycler,) = [cg.empty for sp, _ in COMPILED[start:] for cg in sp.cache.values()]
    # the pool holds first's storage, so no fresh allocation can land at `ptr`
    assert [s.data_ptr() for pool in recycler.pools.values() for s in pool.storages] == [ptr]
    expect = (x * 2).relu() + 1
    second = fn(-x)                                   # `first` still held: a new buffer
    assert second.data_ptr() != ptr
    torch.testing.assert_close(first, expect)         # untouched by the second call
    torch.testing.assert_close(second, (-x * 2).relu() + 1)
    del first
    third = fn(x)                                     # `first`'s buffer is free again
    assert third.data_ptr() == ptr
    torch.testing.assert_close(third, expect)
    view = third[10:20]
    del third
    fourth = fn(-x)                                   # a view keeps the buffer held
    assert fourth.data_ptr() != ptr
    torch.testing.assert_close(view, expect[10:20])


def test_training_steps_with_recycled_buffers_match_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(),
                                torch.nn.LayerNorm(1024), torch.nn.Linear(1024, 512))
    ref = [p.detach().clone() for p in model.parameters()]
    compiled = cherenkov.compile(model, strict=True, cpu_backend="cpp")
    x = torch.randn(640, 512)
    for _ in range(3):
        model.zero_grad()
        compiled(x).square().mean().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        # eager with the same weights
        eager = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(),
                                    torch.nn.LayerNorm(1024), torch.nn.Linear(1024, 512))
        for p, r in zip(eager.parameters(), ref):
            p.data.copy_(r)
        eager(x).square().mean().backward()
        for g, p in zip(grads, eager.parameters()):
            torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)
        gc.collect()


def test_limits_bound_what_is_kept():
    r = Recycler(allocator(torch.device("cpu")))
    big = ((N,), (1,), torch.float32)
    small = ((16,), (1,), torch.float32)
    r.set_limits([big, big, big, small], [big])
    # one output of that layout, plus one
    assert {k: p.limit for k, p in r.pools.items()} == {big: 2}
    held = [r(*big) for _ in range(4)]                # all held: fresh each, two kept
    assert len({t.data_ptr() for t in held}) == 4 and len(r.pools[big].storages) == 2
    kept = {s.data_ptr() for s in r.pools[big].storages}
    del held
    again = [r(*big), r(*big), r(*big)]
    assert {t.data_ptr() for t in again[:2]} == kept and again[2].data_ptr() not in kept
    assert r(*small).numel() == 16 and small not in r.pools
    assert RECYCLE_MIN_BYTES <= N * 4


def test_a_storage_shrunk_by_its_holder_is_not_handed_out():
    r = Recycler(allocator(torch.device("cpu")))
    big = ((N,), (1,), torch.float32)
    r.set_limits([big], [big])
    t = r(*big)
    t.untyped_storage().resize_(0)          # what FSDP-style code does to free a buffer
    del t
    again = r(*big)
    assert again.untyped_storage().nbytes() == N * 4
    again.fill_(1.0)                        # writable over its whole extent
    assert float(again.sum()) == N
