"""The planner's per-layer op list: a tiny dataflow graph derived from a model config.

Until the graph IR is ready, the planner works on this representation. A `LayerGraph` is a
list of `LayerOp`s over named `Value`s; each op has a kind from a small vocabulary
(`matmul`, `attention`, `elementwise`, `norm`, `embedding`, `cross_entropy`) that keys the
sharding rules in `cherenkov.parallel.rules`. Activations are `[batch, seq, features]`,
weights `[in, out]`; FLOPs and bytes are for the whole (unsharded) op in the forward pass.
`saved` names the inputs an op keeps for its backward; `cheap` marks ops whose output is
recomputed under selective recompute instead of being kept by its consumers.

Three graphs describe a model: `embedding_graph` (first pipeline stage), `layer_graph` (one
transformer block, solved once and repeated) and `head_graph` (last stage: final norm, LM
head, cross-entropy). A layer prints as

    layer gpt b=1 s=1024 in=x out=h2
      ln1  = norm(x) w=[ln1.w]
      qkv  = matmul(ln1) w=[qkv.w]
      ...
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from cherenkov.models.config import ModelConfig

KINDS = ("matmul", "attention", "elementwise", "norm", "embedding", "cross_entropy")
ATTENTION_TILE = 128  # query/key tile of flash-attention kernels (FlashAttention-2: 128 x 128)


def causal_tile_overhead(seq: int, tile: int = ATTENTION_TILE) -> float:
    """FLOPs a tiled causal kernel executes over the causal half's: 1 + tile/seq."""
    return 1.0 + min(tile, seq) / seq


def attention_flops(batch: int, seq: int, heads: int, head_dim: int, causal: bool) -> float:
    """QK^T and PV: 4*b*s*s*heads*head_dim; if causal, the causal half plus the masked half of
    the diagonal tiles, which a flash kernel computes whole."""
    full = 4.0 * batch * seq * seq * heads * head_dim
    return full / 2 * causal_tile_overhead(seq) if causal else full


@dataclass(frozen=True, slots=True)
class Value:
    name: str
    shape: tuple[int, ...]
    itemsize: int = 2          # bf16 activations and weights by default
    weight: bool = False

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


@dataclass(frozen=True, slots=True)
class LayerOp:
    name: str
    kind: str
    inputs: tuple[str, ...]
    output: str
    weights: tuple[str, ...] = ()
    flops: float = 0.0          # forward FLOPs of the whole op
    bytes: float = 0.0          # forward HBM bytes read + written by the whole op
    saved: tuple[str, ...] = ()  # inputs kept for the backward pass
    cheap: bool = False          # output is recomputed under selective recompute
    attrs: tuple[tuple[str, int], ...] = ()

    def attr(self, key: str, default=None):
        return dict(self.attrs).get(key, default)


@dataclass(frozen=True)
class LayerGraph:
    name: str
    values: dict[str, Value]
    ops: tuple[LayerOp, ...]
    input: str
    output: str
    repeat_io: bool = False  # True for transformer layers: output placement must equal input's

    def consumers(self, value: str) -> list[tuple[LayerOp, int]]:
        return [(op, k) for op in self.ops for k, name in enumerate(op.inputs) if name == value]

    def producer(self, value: str) -> LayerOp | None:
        return next((op for op in self.ops if op.output == value), None)

    @property
    def param_count(self) -> int:
        return sum(v.numel for v in self.values.values() if v.weight)

    @property
    def flops(self) -> float:
        return sum(op.flops for op in self.ops)

    def __str__(self) -> str:
        lines = [f"{self.name} in={self.input} out={self.output}"]
        for op in self.ops:
            w = f" w=[{', '.join(op.weights)}]" if op.weights else ""
            shape = "x".join(map(str, self.values[op.output].shape))
            lines.append(f"  {op.output:<6} = {op.kind}({', '.join(op.inputs)}){w}  [{shape}]")
        return "\n".join(lines)


class _Builder:
    """Accumulates values and ops; each helper adds one op with its FLOPs, bytes and saves."""

    def __init__(self):
        self.values: dict[str, Value] = {}
        self.ops: list[LayerOp] = []

    def value(self, name, shape, itemsize=2, weight=False) -> str:
        self.values[name] = Value(name, tuple(shape), itemsize, weight)
        return name

    def _io_bytes(self, names) -> int:
        return sum(self.values[n].nbytes for n in names)

    def matmul(self, name, x, n_out, attrs=()):
        b, s, k = self.values[x].shape
        w = self.value(f"{name}.w", (k, n_out), weight=True)
        y = self.value(name, (b, s, n_out))
        self.ops.append(LayerOp(name, "matmul", (x,), y, (w,), flops=2.0 * b * s * k * n_out,
                                bytes=self._io_bytes((x, w, y)), saved=(x,), attrs=attrs))
        return y

    def norm(self, name, x, bias: bool):
        h = self.values[x].shape[-1]
        ws = (self.value(f"{name}.w", (h,), weight=True),)
        if bias:
            ws += (self.value(f"{name}.b", (h,), weight=True),)
        y = self.value(name, self.values[x].shape)
        self.ops.append(LayerOp(name, "norm", (x,), y, ws, flops=8.0 * self.values[x].numel,
                                bytes=self._io_bytes((x, y)), saved=(x,), cheap=True))
        return y

    def elementwise(self, name, inputs, saved=(), cheap=False, flops_per_elem=1.0):
        shape = self.values[inputs[0]].shape
        y = self.value(name, shape)
        self.ops.append(LayerOp(name, "elementwise", tuple(inputs), y,
                                flops=flops_per_elem * prod(shape),
                                bytes=self._io_bytes((*inputs, y)), saved=tuple(saved),
                                cheap=cheap))
        return y


def layer_graph(cfg: ModelConfig, batch: int, seq: int) -> LayerGraph:
    """One transformer block for a microbatch of `batch` sequences of length `seq`."""
    g = _Builder()
    h, d = cfg.hidden, cfg.head_dim
    q_dim, kv_dim = cfg.heads * d, cfg.kv_heads * d
    x = g.value("x", (batch, seq, h))
    gpt = cfg.arch == "gpt"
    ln1 = g.norm("ln1", x, bias=gpt)
    heads = (("heads", cfg.heads), ("kv_heads", cfg.kv_heads), ("head_dim", d))
    qkv = g.matmul("qkv", ln1, q_dim + 2 * kv_dim, attrs=heads)
    if not gpt:
        # Rotary embeddings on q and k (v passes through): read and write b*s*(q+kv) elements,
        # ~3 FLOPs each; the backward rotates dy the other way (cos/sin tables are tiny).
        rotated = batch * seq * (q_dim + kv_dim)
        roped = g.value("rope", (batch, seq, q_dim + 2 * kv_dim))
        g.ops.append(LayerOp("rope", "elementwise", (qkv,), roped, flops=3.0 * rotated,
                             bytes=2.0 * rotated * g.values[qkv].itemsize))
        qkv = roped
    # Attention core (flash style: saves q, k, v and the log-sum-exp, not the score matrix).
    attn = g.value("attn", (batch, seq, q_dim))
    causal_flops = attention_flops(batch, seq, cfg.heads, d, causal=True)
    g.ops.append(LayerOp("attn", "attention", (qkv,), attn, flops=causal_flops,
                         bytes=g._io_bytes((qkv, attn)), saved=(qkv,), attrs=heads))
    proj = g.matmul("proj", attn, h)
    h1 = g.elementwise("h1", (x, proj), flops_per_elem=1.0 + (2.0 if cfg.dropout else 0.0))
    ln2 = g.norm("ln2", h1, bias=gpt)
    if gpt:
        fc1 = g.matmul("fc1", ln2, cfg.ffn)
        act = g.elementwise("gelu", (fc1,), saved=(fc1,), cheap=True, flops_per_elem=8.0)
    else:
        # Gate and up projections fused into one [h, 2*ffn] matmul (each device's slice holds
        # matching gate and up columns), then silu(gate) * up: [b, s, 2f] -> [b, s, f].
        gate_up = g.matmul("gate_up", ln2, 2 * cfg.ffn)
        act = g.value("swiglu", (batch, seq, cfg.ffn))
        g.ops.append(LayerOp("swiglu", "elementwise", (gate_up,), act,
                             flops=6.0 * batch * seq * cfg.ffn,
                             bytes=g._io_bytes((gate_up, act)), saved=(gate_up,), cheap=True))
    fc2 = g.matmul("fc2", act, h)
    h2 = g.elementwise("h2", (h1, fc2), flops_per_elem=1.0 + (2.0 if cfg.dropout else 0.0))
    if gpt:  # GPT adds biases to every matmul: count them as weights of the matmul ops
        for name, n in (("qkv", q_dim + 2 * kv_dim), ("proj", h), ("fc1", cfg.ffn), ("fc2", h)):
            g.value(f"{name}.bias", (n,), weight=True)
        g.ops = [_with_bias(op, g) for op in g.ops]
    return LayerGraph(f"layer {cfg.arch} b={batch} s={seq}", g.values, tuple(g.ops), x, h2,
                      repeat_io=True)


def _with_bias(op: LayerOp, g: _Builder) -> LayerOp:
    bias = f"{op.name}.bias"
    if op.kind == "matmul" and bias in g.values:
        from dataclasses import replace
        return replace(op, weights=op.weights + (bias,))
    return op


def embedding_graph(cfg: ModelConfig, batch: int, seq: int) -> LayerGraph:
    """Token (and position) embedding lookup: idx[b, s] -> x[b, s, h]."""
    g = _Builder()
    idx = g.value("idx", (batch, seq), itemsize=8)
    w = g.value("wte", (cfg.vocab, cfg.hidden), weight=True)
    ws = (w,)
    if cfg.arch == "gpt":
        ws += (g.value("wpe", (cfg.seq, cfg.hidden), weight=True),)
    x = g.value("x", (batch, seq, cfg.hidden))
    g.ops.append(LayerOp("embed", "embedding", (idx,), x, ws, flops=0.0,
                         bytes=2.0 * g.values[x].nbytes + g.values[idx].nbytes))
    return LayerGraph(f"embedding b={batch} s={seq}", g.values, tuple(g.ops), idx, x)


def head_graph(cfg: ModelConfig, batch: int, seq: int) -> LayerGraph:
    """Final norm, LM head and cross-entropy: x[b, s, h] -> per-token loss[b, s]."""
    g = _Builder()
    x = g.value("x", (batch, seq, cfg.hidden))
    lnf = g.norm("lnf", x, bias=cfg.arch == "gpt")
    b, s, h = batch, seq, cfg.hidden
    w = g.value("lm_head.w", (h, cfg.vocab), weight=not cfg.tie_embeddings)
    logits = g.value("logits", (b, s, cfg.vocab))
    g.ops.append(LayerOp("lm_head", "matmul", (lnf,), logits, (w,), flops=2.0 * b * s * h * cfg.vocab,
                         bytes=g._io_bytes((lnf, w, logits)), saved=(lnf,)))
    loss = g.value("loss", (b, s), itemsize=4)
    # Two passes over the logits (row max, then sum of exp and the target's logit); the loss
    # and the row statistics are tiny. The backward reads the logits and writes dlogits.
    g.ops.append(LayerOp("xent", "cross_entropy", (logits,), loss, flops=5.0 * b * s * cfg.vocab,
                         bytes=2.0 * g.values[logits].nbytes, saved=(logits,)))
    return LayerGraph(f"head b={batch} s={seq}", g.values, tuple(g.ops), x, loss)
