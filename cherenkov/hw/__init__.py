"""Cherenkov's hardware model: what the chips and links of a machine can do.

    >>> from cherenkov import hw
    >>> hw.device("H200").memory_bandwidth        # datasheet: 4.8 TB/s
    4800000000000.0
    >>> hw.cluster("128x8xH100-ib400").world_size
    1024

Presets are TOML data files under `cherenkov/hw/presets/` (one per device, plus `links.toml`
and `nodes.toml`), each figure with its source in a comment. `probe()` measures the live
device and caches the result; `current_device()` is the cheap query every pass uses.
"""
from __future__ import annotations

from cherenkov.hw.spec import ClusterSpec, DeviceSpec, LinkSpec, dtype_format
from cherenkov.hw.catalog import device, device_names, link, link_names, node, node_names
from cherenkov.hw.cluster import cluster
from cherenkov.hw.probing import probe, cached_probe
from cherenkov.hw.live import current_device, device_for_config

__all__ = [
    "DeviceSpec", "LinkSpec", "ClusterSpec", "dtype_format",
    "device", "device_names", "link", "link_names", "node", "node_names",
    "cluster", "probe", "cached_probe", "current_device", "device_for_config",
]
