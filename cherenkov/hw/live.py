"""The device this process runs on, cheaply: the matching preset, corrected with what the
driver reports (SM count, L2, memory, ...), merged with a cached probe when one exists.

Nothing here measures anything; `probe()` does, and `current_device()` picks its result up
from the on-disk cache afterwards. Unknown GPUs get rough figures built from the driver's
properties (and a note saying so) rather than an error, so compiling never stops here.
"""
from __future__ import annotations

import functools
import os
from typing import Any

import torch

from cherenkov.hw import catalog
from cherenkov.hw.spec import DeviceSpec


def resolve(torch_device: Any = None) -> torch.device:
    """torch.device for the argument; None means the current CUDA device, else the CPU."""
    if torch_device is None:
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    dev = torch.device(torch_device) if not isinstance(torch_device, int) \
        else torch.device("cuda", torch_device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def host_facts() -> dict:
    """Figures of this host that replace the generic CPU preset's placeholders."""
    facts: dict[str, Any] = {"sm_count": os.cpu_count() or 1}
    try:
        facts["memory_bytes"] = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    return facts


def host_name() -> str:
    """The CPU model name ("AMD EPYC 7R13 Processor"), or the platform's best guess."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine() or "cpu"


def cuda_facts(dev: torch.device) -> dict:
    """Figures the driver reports for a CUDA/HIP device (exact for this card, unlike datasheets)."""
    props = torch.cuda.get_device_properties(dev)
    facts: dict[str, Any] = {
        "sm_count": props.multi_processor_count,
        "memory_bytes": float(props.total_memory),
    }
    optional = {  # torch property name -> DeviceSpec field; absent on some torch builds
        "L2_cache_size": ("l2_bytes", float),
        "max_threads_per_multi_processor": ("max_threads_per_sm", int),
        "regs_per_multiprocessor": ("registers_per_sm", int),
        "shared_memory_per_multiprocessor": ("sram_per_sm_bytes", float),
        "warp_size": ("warp_size", int),
    }
    for prop, (field_name, convert) in optional.items():
        value = getattr(props, prop, None)
        if value:
            facts[field_name] = convert(value)
    return facts


def unknown_gpu(dev: torch.device) -> DeviceSpec:
    """Rough figures for a GPU no preset matches: enough to plan with, flagged in `notes`."""
    props = torch.cuda.get_device_properties(dev)
    facts = cuda_facts(dev)
    sms = facts["sm_count"]
    fp32 = sms * 128 * 2 * 1.5e9          # 128 FMA lanes per SM at ~1.5 GHz
    return DeviceSpec(
        name=props.name, vendor="amd" if getattr(torch.version, "hip", None) else "nvidia",
        kind="gpu", peak_flops={"fp32_vector": fp32, "bf16_tensor": 8 * fp32,
                                "fp16_tensor": 8 * fp32, "tf32_tensor": 4 * fp32},
        memory_bytes=facts["memory_bytes"], memory_bandwidth=1e12,
        l2_bytes=facts.get("l2_bytes", 4 * 2**20),
        sram_per_sm_bytes=facts.get("sram_per_sm_bytes", 48 * 2**10),
        sm_count=sms, registers_per_sm=facts.get("registers_per_sm", 65536),
        max_threads_per_sm=facts.get("max_threads_per_sm", 2048),
        warp_size=facts.get("warp_size", 32), launch_overhead_s=5e-6,
        notes="unknown device: rough placeholder figures; run cherenkov.hw.probe()",
    )


def base_spec(dev: torch.device) -> DeviceSpec:
    """Preset (or rough spec) for the live device, corrected by the driver's/host's figures."""
    if dev.type == "cuda":
        key = catalog.match_device_name(torch.cuda.get_device_name(dev))
        if key is None:
            return unknown_gpu(dev)
        return catalog.device(key).replace(**cuda_facts(dev))
    return host_spec()


def host_spec() -> DeviceSpec:
    """The generic CPU preset resized to this host: its core count and memory, and peak
    FLOP/s scaled from the preset's cores to this host's (a probe measures the real rates)."""
    preset = catalog.device("cpu")
    facts = host_facts()
    scale = facts["sm_count"] / preset.sm_count
    peaks = {k: v * scale for k, v in preset.peak_flops.items()}
    return preset.replace(peak_flops=peaks, **facts)


@functools.lru_cache(maxsize=None)
def _current(dev: torch.device, cache_dir: str | None) -> DeviceSpec:
    from cherenkov.hw.probing import cached_probe, merge
    spec = base_spec(dev)
    record = cached_probe(dev, cache_dir)
    return merge(spec, record) if record else spec


def current_device(torch_device: Any = None, cache_dir: str | None = None) -> DeviceSpec:
    """The live device's spec: preset + driver figures + cached probe. Never measures."""
    return _current(resolve(torch_device), None if cache_dir is None else str(cache_dir))


def forget() -> None:
    """Drop remembered answers of current_device (probe() calls this after measuring)."""
    _current.cache_clear()


def device_for_config(name: str = "auto", torch_device: Any = None) -> DeviceSpec:
    """The spec a compile should plan for: `Config.device` is a preset name, or "auto" for the
    live device (current_device: preset merged with any cached probe)."""
    if name in (None, "", "auto"):
        return current_device(torch_device)
    return catalog.device(name)
