"""What a machine is, as three frozen records: DeviceSpec (one chip), LinkSpec (one level of
interconnect) and ClusterSpec (chips × nodes joined by an intra-node and an inter-node link).

Every figure is checked when a record is built; a bad one raises ValueError naming the field:

    >>> LinkSpec("nvlink4", bandwidth=-1.0, latency_s=2e-6)
    Traceback (most recent call last):
    ...
    ValueError: LinkSpec 'nvlink4': field 'bandwidth' must be a positive finite number, got -1.0

Units: bytes, bytes/s, FLOP/s, seconds. Link bandwidth is per GPU, one direction.
Peak figures are datasheet figures; `measured_*` fields hold what a probe achieved on the live
card, and the cost model prefers them when present (`achievable_*`).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

# Keys of DeviceSpec.peak_flops: "<format>_<unit>", unit "tensor" (tensor/matrix cores) or
# "vector" (CUDA cores, SIMD lanes).
FLOP_FORMATS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
FLOP_UNITS = ("tensor", "vector")
FLOP_KEYS = tuple(f"{f}_{u}" for f in FLOP_FORMATS for u in FLOP_UNITS)
KINDS = ("gpu", "cpu")


def dtype_format(dtype: Any) -> str:
    """'bf16', 'fp32', ... for a torch.dtype or a string such as 'bfloat16', 'bf16', 'tf32'."""
    text = str(dtype).removeprefix("torch.").lower()
    aliases = {
        "float64": "fp64", "double": "fp64", "fp64": "fp64",
        "float32": "fp32", "float": "fp32", "fp32": "fp32",
        "tf32": "tf32", "tensorfloat32": "tf32",
        "bfloat16": "bf16", "bf16": "bf16",
        "float16": "fp16", "half": "fp16", "fp16": "fp16",
        "int8": "int8", "uint8": "int8",
    }
    if text in aliases:
        return aliases[text]
    if text.startswith("float8") or text == "fp8":
        return "fp8"
    raise ValueError(f"no FLOP rate is known for dtype {dtype!r}")


def _fail(owner: str, name: str, field_name: str, message: str):
    raise ValueError(f"{owner} {name!r}: field {field_name!r} {message}")


def _positive(owner, name, field_name, value, *, allow_zero=False):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        what = "a non-negative" if allow_zero else "a positive"
        _fail(owner, name, field_name, f"must be {what} finite number, got {value!r}")


def _positive_int(owner, name, field_name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        _fail(owner, name, field_name, f"must be a positive integer, got {value!r}")


def _text(owner, name, field_name, value):
    if not isinstance(value, str) or not value.strip():
        _fail(owner, name, field_name, f"must be a non-empty string, got {value!r}")


def _rates(owner, name, field_name, value, *, allow_empty):
    if not isinstance(value, Mapping) or (not value and not allow_empty):
        _fail(owner, name, field_name, f"must be a non-empty table of FLOP/s, got {value!r}")
    for key, rate in value.items():
        if key not in FLOP_KEYS:
            _fail(owner, name, f"{field_name}.{key}", f"is not a known rate; known: {FLOP_KEYS}")
        _positive(owner, name, f"{field_name}.{key}", rate)


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator (or CPU socket), with datasheet peaks and optional measured figures."""
    name: str
    vendor: str
    kind: str                      # "gpu" | "cpu"
    peak_flops: dict[str, float]   # "bf16_tensor" -> FLOP/s, see FLOP_KEYS
    memory_bytes: float
    memory_bandwidth: float        # bytes/s, datasheet peak
    l2_bytes: float                # last on-chip cache shared by all SMs
    sram_per_sm_bytes: float       # shared memory (LDS) one SM/CU can give its blocks
    sm_count: int                  # SMs, CUs, or CPU cores
    registers_per_sm: int          # 32-bit registers per SM/CU
    max_threads_per_sm: int
    warp_size: int                 # 32 on NVIDIA, 64 on AMD CDNA, SIMD fp32 lanes on a CPU
    launch_overhead_s: float       # host cost of launching one kernel
    measured_copy_bandwidth: float | None = None         # bytes/s (read + written) a copy reached
    measured_flops: dict[str, float] = field(default_factory=dict)  # same keys as peak_flops
    notes: str = ""

    def __post_init__(self):
        own, nm = "DeviceSpec", self.name
        _text(own, nm, "name", self.name)
        _text(own, nm, "vendor", self.vendor)
        if self.kind not in KINDS:
            _fail(own, nm, "kind", f"must be one of {KINDS}, got {self.kind!r}")
        _rates(own, nm, "peak_flops", self.peak_flops, allow_empty=False)
        for f in ("memory_bytes", "memory_bandwidth", "l2_bytes", "sram_per_sm_bytes"):
            _positive(own, nm, f, getattr(self, f))
        for f in ("sm_count", "registers_per_sm", "max_threads_per_sm", "warp_size"):
            _positive_int(own, nm, f, getattr(self, f))
        _positive(own, nm, "launch_overhead_s", self.launch_overhead_s, allow_zero=True)
        if self.measured_copy_bandwidth is not None:
            _positive(own, nm, "measured_copy_bandwidth", self.measured_copy_bandwidth)
        _rates(own, nm, "measured_flops", self.measured_flops, allow_empty=True)
        if not isinstance(self.notes, str):
            _fail(own, nm, "notes", f"must be a string, got {self.notes!r}")
        # Own plain-dict copies, so a caller's later edits cannot reach a frozen record.
        object.__setattr__(self, "peak_flops", dict(self.peak_flops))
        object.__setattr__(self, "measured_flops", dict(self.measured_flops))

    def __hash__(self):
        return hash((self.name, tuple(sorted(self.peak_flops.items())), self.memory_bandwidth,
                     self.measured_copy_bandwidth, tuple(sorted(self.measured_flops.items()))))

    def __str__(self):
        return self.name

    def replace(self, **changes) -> "DeviceSpec":
        return dataclasses.replace(self, **changes)

    # -- rates ---------------------------------------------------------------------------
    def _key(self, dtype, tensor_core: bool, table: Mapping[str, float]) -> str | None:
        """The best matching key in `table` for dtype on the asked unit, or None."""
        fmt = dtype_format(dtype)
        candidates = []
        if tensor_core:
            candidates.append(f"{fmt}_tensor")
            if fmt == "fp32":          # fp32 matmul on tensor cores runs as TF32
                candidates.append("tf32_tensor")
        candidates.append(f"{fmt}_vector")
        if fmt in ("bf16", "fp16", "tf32", "fp8", "int8"):
            candidates.append("fp32_vector")   # no rate of its own: CUDA cores at fp32 speed
        return next((k for k in candidates if k in table), None)

    def flops(self, dtype: Any, tensor_core: bool = True) -> float:
        """Peak FLOP/s for dtype: the tensor-core rate if asked and listed, else the vector rate."""
        key = self._key(dtype, tensor_core, self.peak_flops)
        if key is None:
            raise ValueError(f"DeviceSpec {self.name!r}: field 'peak_flops' has no rate for "
                             f"{dtype_format(dtype)} (tensor_core={tensor_core}); "
                             f"has {sorted(self.peak_flops)}")
        return self.peak_flops[key]

    def achievable_flops(self, dtype: Any, tensor_core: bool = True) -> float:
        """Measured FLOP/s for the same key `flops` picks when a probe measured it, else peak."""
        key = self._key(dtype, tensor_core, self.peak_flops)
        if key is not None and key in self.measured_flops:
            return self.measured_flops[key]
        return self.flops(dtype, tensor_core)

    @property
    def achievable_bandwidth(self) -> float:
        """Copy bandwidth a probe measured (bytes read + written per second), else the peak."""
        return self.measured_copy_bandwidth or self.memory_bandwidth


@dataclass(frozen=True)
class LinkSpec:
    """One level of interconnect, seen from one GPU: bandwidth per GPU per direction, and the
    per-message latency (alpha) of one step of a collective over it."""
    name: str
    bandwidth: float     # bytes/s per GPU, one direction
    latency_s: float     # alpha: start-up cost of one message / one algorithm step
    kind: str = ""       # "nvswitch", "nvlink", "xgmi", "pcie", "infiniband", "roce", "shm"
    notes: str = ""

    def __post_init__(self):
        _text("LinkSpec", self.name, "name", self.name)
        _positive("LinkSpec", self.name, "bandwidth", self.bandwidth)
        _positive("LinkSpec", self.name, "latency_s", self.latency_s, allow_zero=True)

    def __str__(self):
        return self.name

    def replace(self, **changes) -> "LinkSpec":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class ClusterSpec:
    """`nodes` nodes of `gpus_per_node` identical devices; `intra` joins the GPUs of a node,
    `inter` joins nodes (one NIC rail per GPU; None only for a single node)."""
    device: DeviceSpec
    gpus_per_node: int
    nodes: int
    intra: LinkSpec
    inter: LinkSpec | None = None
    name: str = ""

    def __post_init__(self):
        nm = self.name or f"{self.nodes}x{self.gpus_per_node}x{getattr(self.device, 'name', '?')}"
        object.__setattr__(self, "name", nm)
        if not isinstance(self.device, DeviceSpec):
            _fail("ClusterSpec", nm, "device", f"must be a DeviceSpec, got {self.device!r}")
        _positive_int("ClusterSpec", nm, "gpus_per_node", self.gpus_per_node)
        _positive_int("ClusterSpec", nm, "nodes", self.nodes)
        if not isinstance(self.intra, LinkSpec):
            _fail("ClusterSpec", nm, "intra", f"must be a LinkSpec, got {self.intra!r}")
        if self.inter is not None and not isinstance(self.inter, LinkSpec):
            _fail("ClusterSpec", nm, "inter", f"must be a LinkSpec or None, got {self.inter!r}")
        if self.nodes > 1 and self.inter is None:
            _fail("ClusterSpec", nm, "inter", f"is required when nodes > 1 (nodes={self.nodes})")

    def __str__(self):
        return self.name

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.nodes

    def level_for(self, group_size: int, spans_nodes: bool) -> LinkSpec:
        """The slowest link a group of `group_size` GPUs crosses: the intra-node link when the
        group fits in one node and is placed there, else the inter-node one."""
        _positive_int("ClusterSpec", self.name, "group_size", group_size)
        if group_size > self.world_size:
            _fail("ClusterSpec", self.name, "group_size",
                  f"is {group_size}, more than the world size {self.world_size}")
        if spans_nodes and self.nodes == 1:
            _fail("ClusterSpec", self.name, "nodes", "is 1: a group cannot span nodes")
        if spans_nodes or group_size > self.gpus_per_node:
            return self.inter
        return self.intra
