"""One typed configuration object for Cherenkov, with environment-variable overrides.

Every option lives in `Config`; every environment variable is read here and nowhere else
(the way Triton's `knobs.py` does it). Precedence: explicit `cherenkov.compile(**options)`
> environment > defaults.

| variable                    | field          | meaning                                              |
|-----------------------------|----------------|------------------------------------------------------|
| CHERENKOV_STRICT=1          | strict         | raise instead of falling back to eager               |
| CHERENKOV_DUMP=dir          | dump_dir       | write every stage of every compiled graph under dir  |
| CHERENKOV_LOG=1             | log_fallbacks  | log each extern op / eager fallback with its reason  |
| CHERENKOV_FUSION=0          | fusion         | one kernel per op (for debugging fusion)             |
| CHERENKOV_CUDA_GRAPHS=mode  | cuda_graphs    | replay plans with CUDA graphs: "auto" (default:      |
|                             |                | small plans measured launch-bound), "on" (1), "off"  |
|                             |                | (0); True/False mean on/off (graph_policy.py)        |
| CHERENKOV_CUDA_GRAPHS_POOLED| cuda_graphs_   | a training graph's graphed forward/backward warm up  |
| =1                          | pooled         | in their shared pool and capture before running (off:|
|                             |                | no faster, more memory on Llama; cuda_graphs.py)     |
| CHERENKOV_INTERPRET=1       | interpret      | run Triton kernels in the interpreter (CPU tensors   |
|                             |                | always do)                                           |
| CHERENKOV_CACHE_SIZE=n      | cache_size     | recompiles kept per graph for static shapes          |
| CHERENKOV_DEVICE=name       | device         | hardware preset to plan for ("auto" = probe)         |
| CHERENKOV_CPU_BACKEND=name  | cpu_backend    | CPU tensors: "cpp" (compiled C++, default) or        |
|                             |                | "triton" (Triton's interpreter)                      |
| CHERENKOV_ATTENTION=name    | attention      | "cherenkov": SDPA calls run our attention kernels;   |
|                             |                | "sdpa": PyTorch's own                                |
| CHERENKOV_PARTITIONER=name  | partitioner    | recompute vs save: "cherenkov" (cost-model min-cut,  |
|                             |                | default) or "torch" (min-cut rematerialization)      |
| CHERENKOV_MEMORY_BUDGET=x   | memory_budget  | saved activations: GB if x > 1, else a fraction of   |
|                             |                | device memory (cherenkov partitioner only)           |
| CHERENKOV_COMPILE_WORKERS=n | compile_workers| processes compiling Triton kernels in parallel (0:   |
|                             |                | none; default -1: all CPU cores but one, <= 16)      |
| CHERENKOV_FP_CONTRACT=0     | fp_contract    | GPU kernels without FMA contraction (a*b+c rounded   |
|                             |                | twice): the same bits fused or not, more instructions|
| CHERENKOV_LINEAR_CE=mode    | linear_ce      | LM head + cross-entropy fused (logits never held):   |
|                             |                | "auto" (cost model decides), "on", "off"             |
| CHERENKOV_CE_FORWARD_GRAD=m | ce_forward_grad| a cross-entropy the fusion above left makes its      |
|                             |                | gradient in the forward (one read of the logits      |
|                             |                | fewer): "auto" (CUDA), "on", "off"                   |
| CHERENKOV_ROW_LOOPS=0       | row_loops      | (GPU, Triton) row kernels take in the column partials|
|                             |                | of the same elements (norm backward's weight         |
|                             |                | gradients): one read instead of two; 0 turns it off  |
| CHERENKOV_ROW_LOOP_ROWS=n   | row_loop_rows  | rows a row-loop program covers at most (its column   |
|                             |                | partials: rows / n of them); default 32              |
| CHERENKOV_COMBINE_CASTS=1   | combine_casts  | (Triton) small kernels each reading one graph input  |
|                             |                | (autocast's weight casts) share one launch; off by   |
|                             |                | default: GPT-2's step ran 30.4 vs 30.5 ms with it    |
| CHERENKOV_PDL=0             | pdl            | (CUDA sm_90+) generated kernels launched with        |
|                             |                | programmatic dependent launch: each may start while  |
|                             |                | the kernel before it finishes (codegen/              |
|                             |                | dependent_launch.py); on by default, 0 turns it off  |
| CHERENKOV_COMBINE_UPDATES=0 | combine_updates| (Triton) small kernels writing values back into graph |
|                             |                | inputs (a compiled optimizer step's per-parameter    |
|                             |                | updates) share launches: a multi-tensor step         |
| CHERENKOV_UNUSED_GRADS=0    | unused_grads   | the gradient of an output the loss never used is     |
|                             |                | zeros written by autograd, read by the backward (by  |
|                             |                | default the backward is compiled with it as zeros)   |
| CHERENKOV_MATMUL_TEMPLATES= | matmul_templates| a matmul and the elementwise work reading its result |
|   mode                      |                | as one Triton template kernel: "auto" (with autotune |
|                             |                | on: where tuning measured it faster than cuBLAS + a  |
|                             |                | kernel), "on" (wherever it applies), "off"           |
| CHERENKOV_AUTOTUNE=1        | autotune       | time the candidates of a choice not yet tuned (the   |
|                             |                | matmul templates' tile configs vs cuBLAS) while      |
|                             |                | compiling; results cached on disk. Off: untuned      |
|                             |                | problems take the default (cuBLAS)                   |
| CHERENKOV_MATMUL_ALGOS=1    | matmul_algos   | (CUDA) plain mm / addmm / fp32-out mm.dtype run      |
|                             |                | cuBLASLt's fastest algorithm for their problem, timed|
|                             |                | on their first run (templates/matmul_algos.py; cached|
|                             |                | on disk). Off by default: GPT-2's step 0.3 ms faster,|
|                             |                | Llama's 1.4-2.3 ms slower (four runs, 2026-12-02)    |
| CHERENKOV_MATMUL_ALGOS_MIN_MS| matmul_algos_min_ms| with matmul_algos: only matmuls taking at least  |
|   =ms                       |                | this long at the device's matmul rate (0: all)       |
| CHERENKOV_COMPILE_AHEAD=0   | compile_ahead  | static-shape graphs compile when AOTAutograd hands   |
|                             |                | them over (a training graph's backward too, before   |
|                             |                | the forward first runs: its kernels compile in the   |
|                             |                | workers meanwhile); 0: each at its first call        |
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields


def _flag(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={text!r}: expected 1/true/yes/on or 0/false/no/off")


# annotation -> (accepted types, as the error names them); a bool is no number here
_TYPES = {"bool": (bool, "True or False"), "int": (int, "an integer"),
          "float": ((int, float), "a number (GB, or a fraction)"),
          "str": ((str, os.PathLike), "a string")}          # dump_dir may be a Path


def _graph_mode(value):
    """cuda_graphs: "auto" / "on" / "off"; True / False and the usual flag spellings too."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            return text
        try:
            return "on" if _flag("CHERENKOV_CUDA_GRAPHS", text) else "off"
        except ValueError:
            raise ValueError(f"cuda_graphs={value!r}: expected 'auto', 'on' or 'off' "
                             "(or True / False)") from None
    return value        # the type check reports it


def _check_names(names) -> None:
    known = [f.name for f in fields(Config)]
    unknown = set(names) - set(known)
    if unknown:
        raise TypeError(f"unknown Cherenkov option(s): {sorted(unknown)}; known: {known}")


@dataclass(frozen=True)
class Config:
    strict: bool = field(default=False, metadata={"env": "CHERENKOV_STRICT"})
    dump_dir: str | None = field(default=None, metadata={"env": "CHERENKOV_DUMP"})
    log_fallbacks: bool = field(default=False, metadata={"env": "CHERENKOV_LOG"})
    fusion: bool = field(default=True, metadata={"env": "CHERENKOV_FUSION"})
    cuda_graphs: str = field(default="auto", metadata={"env": "CHERENKOV_CUDA_GRAPHS"})
    interpret: bool = field(default=False, metadata={"env": "CHERENKOV_INTERPRET"})
    cache_size: int = field(default=8, metadata={"env": "CHERENKOV_CACHE_SIZE"})
    device: str = field(default="auto", metadata={"env": "CHERENKOV_DEVICE"})
    attention: str = field(default="cherenkov", metadata={"env": "CHERENKOV_ATTENTION"})
    cpu_backend: str = field(default="cpp", metadata={"env": "CHERENKOV_CPU_BACKEND"})
    partitioner: str = field(default="cherenkov", metadata={"env": "CHERENKOV_PARTITIONER"})
    memory_budget: float | None = field(default=None,
                                        metadata={"env": "CHERENKOV_MEMORY_BUDGET"})
    compile_workers: int = field(default=-1, metadata={"env": "CHERENKOV_COMPILE_WORKERS"})
    fp_contract: bool = field(default=True, metadata={"env": "CHERENKOV_FP_CONTRACT"})
    row_loops: bool = field(default=True, metadata={"env": "CHERENKOV_ROW_LOOPS"})
    row_loop_rows: int = field(default=32, metadata={"env": "CHERENKOV_ROW_LOOP_ROWS"})
    combine_casts: bool = field(default=False, metadata={"env": "CHERENKOV_COMBINE_CASTS"})
    combine_updates: bool = field(default=True, metadata={"env": "CHERENKOV_COMBINE_UPDATES"})
    pdl: bool = field(default=True, metadata={"env": "CHERENKOV_PDL"})
    cuda_graphs_pooled: bool = field(default=False,
                                     metadata={"env": "CHERENKOV_CUDA_GRAPHS_POOLED"})
    linear_ce: str = field(default="auto", metadata={"env": "CHERENKOV_LINEAR_CE"})
    ce_forward_grad: str = field(default="auto", metadata={"env": "CHERENKOV_CE_FORWARD_GRAD"})
    unused_grads: bool = field(default=True, metadata={"env": "CHERENKOV_UNUSED_GRADS"})
    matmul_templates: str = field(default="auto", metadata={"env": "CHERENKOV_MATMUL_TEMPLATES"})
    autotune: bool = field(default=False, metadata={"env": "CHERENKOV_AUTOTUNE"})
    matmul_algos: bool = field(default=False, metadata={"env": "CHERENKOV_MATMUL_ALGOS"})
    matmul_algos_min_ms: float = field(default=0.0,
                                       metadata={"env": "CHERENKOV_MATMUL_ALGOS_MIN_MS"})
    compile_ahead: bool = field(default=True, metadata={"env": "CHERENKOV_COMPILE_AHEAD"})

    def __post_init__(self):
        object.__setattr__(self, "cuda_graphs", _graph_mode(self.cuda_graphs))
        for f in fields(self):            # types first: "false" is a true string, 2.5 no count
            value = getattr(self, f.name)
            kind, _, optional = f.type.partition(" | ")     # "float | None": a float or None
            if value is None and optional:
                continue
            accepted, what = _TYPES[kind]
            if isinstance(value, bool) != (kind == "bool") or not isinstance(value, accepted):
                raise TypeError(f"{f.name}={value!r}: expected {what}")
        if self.device != "auto":
            from cherenkov.hw import catalog
            if not catalog.is_device(self.device):
                raise ValueError(f"device={self.device!r}: expected 'auto' or a hardware preset "
                                 f"({', '.join(catalog.device_names())})")
        if self.compile_workers < -1:
            raise ValueError(f"compile_workers={self.compile_workers}: -1 (automatic), 0 (none) "
                             "or a count")
        if self.attention not in ("cherenkov", "sdpa"):
            raise ValueError(f"attention={self.attention!r}: expected 'cherenkov' or 'sdpa'")
        if self.cpu_backend not in ("cpp", "triton"):
            raise ValueError(f"cpu_backend={self.cpu_backend!r}: expected 'cpp' or 'triton'")
        if self.linear_ce not in ("auto", "on", "off"):
            raise ValueError(f"linear_ce={self.linear_ce!r}: expected 'auto', 'on' or 'off'")
        if self.ce_forward_grad not in ("auto", "on", "off"):
            raise ValueError(f"ce_forward_grad={self.ce_forward_grad!r}: expected 'auto', "
                             "'on' or 'off'")
        if self.matmul_templates not in ("auto", "on", "off"):
            raise ValueError(f"matmul_templates={self.matmul_templates!r}: expected 'auto', "
                             "'on' or 'off'")
        if self.partitioner not in ("torch", "cherenkov"):
            raise ValueError(f"partitioner={self.partitioner!r}: expected 'torch' or 'cherenkov'")
        if self.memory_budget is not None and not self.memory_budget >= 0:
            raise ValueError(f"memory_budget={self.memory_budget!r}: must be non-negative")
        if self.memory_budget is not None and self.partitioner != "cherenkov":
            raise ValueError(f"memory_budget={self.memory_budget!r} is the Cherenkov "
                             "partitioner's (partitioner='cherenkov', the default); torch's "
                             "ignores it")
        if self.cache_size < 1:
            raise ValueError(f"cache_size={self.cache_size}: must be at least 1")

    def replace(self, **changes) -> "Config":
        _check_names(changes)
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ=os.environ, **overrides) -> "Config":
        """The environment's settings, then `overrides` (an explicit option wins over a bad
        environment value of the same option)."""
        _check_names(overrides)
        values = {}
        for f in fields(cls):
            raw = environ.get(f.metadata["env"])
            if raw is None or raw == "" or f.name in overrides:
                continue
            if f.type in ("bool", bool):
                values[f.name] = _flag(f.metadata["env"], raw)
            elif f.type in ("int", int):
                try:
                    values[f.name] = int(raw)
                except ValueError:
                    raise ValueError(f"{f.metadata['env']}={raw!r}: expected an integer") from None
            elif f.type in ("float | None", "float"):
                try:
                    values[f.name] = float(raw)
                except ValueError:
                    raise ValueError(f"{f.metadata['env']}={raw!r}: expected a number") from None
            else:
                values[f.name] = raw
        return cls(**values, **overrides)


def current(**overrides) -> Config:
    """The configuration in force: environment over defaults, then explicit overrides."""
    return Config.from_env(**overrides)
