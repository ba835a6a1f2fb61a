"""probe(): measure the live device once, cache the record on disk, merge it over the preset.

The record is JSON in `cache_dir` (default ~/.cache/cherenkov/probe/), one file per device
and software versions, so a new driver or torch build measures again:

    {"schema": 1, "key": {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "cuda": "13.0", ...},
     "preset": "h200", "when": "2026-11-29T10:00:00",
     "spec": {"measured_copy_bandwidth": 4.25e12, "measured_flops": {"bf16_tensor": 7.8e14, ...},
              "launch_overhead_s": 5.1e-06, "sm_count": 132, "l2_bytes": 62914560.0, ...},
     "details": {"l2_curve": [...], "l2_effect_bytes": ..., "matmul_n": {...}, "seconds": ...}}

`spec` holds DeviceSpec fields: merging replaces them on the preset. Datasheet peaks are
never overwritten; measured rates go into `measured_*`, which the cost model prefers.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import torch

from cherenkov.hw import catalog, live
from cherenkov.hw.spec import DeviceSpec

SCHEMA = 1


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "cherenkov" / "probe"


def cache_key(dev: torch.device) -> dict:
    """What a measurement depends on: the device's identity and the software stack."""
    key: dict[str, Any] = {"torch": torch.__version__}
    if dev.type == "cuda":
        key["device"] = torch.cuda.get_device_name(dev)
        key["cuda"] = torch.version.cuda
        key["hip"] = getattr(torch.version, "hip", None)
    else:
        key["device"] = live.host_name()
        key["cores"] = os.cpu_count()
    return key


def cache_path(dev: torch.device, cache_dir: str | os.PathLike | None = None) -> Path:
    key = cache_key(dev)
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    slug = re.sub(r"[^a-z0-9]+", "-", key["device"].lower()).strip("-")[:40] or "device"
    return Path(cache_dir or default_cache_dir()) / f"{slug}-{digest}.json"


def cached_probe(torch_device: Any = None, cache_dir: str | os.PathLike | None = None) -> dict | None:
    """The cached probe record for the device, or None if it was never probed (or is stale)."""
    path = cache_path(live.resolve(torch_device), cache_dir)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if record.get("schema") == SCHEMA else None


def _fit_keys(base: DeviceSpec, measured: dict[str, float]) -> dict[str, float]:
    """Measured rates under the preset's keys: fp64 DGEMM is 'fp64_tensor' where the preset
    lists tensor-core fp64, else 'fp64_vector' (same for any other format)."""
    fitted = {}
    for key, rate in measured.items():
        if key not in base.peak_flops:
            fmt, unit = key.rsplit("_", 1)
            other = f"{fmt}_{'vector' if unit == 'tensor' else 'tensor'}"
            if other in base.peak_flops and other not in measured:
                key = other
        fitted[key] = rate
    return fitted


def merge(base: DeviceSpec, record: dict) -> DeviceSpec:
    """The preset with the probe record's `spec` fields laid over it."""
    spec = dict(record.get("spec", {}))
    if "measured_flops" in spec:
        spec["measured_flops"] = {**base.measured_flops,
                                  **_fit_keys(base, spec["measured_flops"])}
    note = f"probed {record.get('when', '?')}"
    spec["notes"] = f"{base.notes}; {note}" if base.notes else note
    return base.replace(**spec)


def probe(torch_device: Any = None, cache_dir: str | os.PathLike | None = None, *,
          refresh: bool = False, quick: bool = False) -> DeviceSpec:
    """Measure the live device (or reuse the cached record), merge over its preset, return it.

    refresh: measure even when a cached record exists. quick: small sizes (tests, smoke runs).
    """
    dev = live.resolve(torch_device)
    record = None if refresh else cached_probe(dev, cache_dir)
    if record is None:
        if dev.type == "cuda":
            from cherenkov.hw import measure_cuda as measure
            spec, details = measure.measure(dev, quick=quick)
            preset = catalog.match_device_name(torch.cuda.get_device_name(dev))
        elif dev.type == "cpu":
            from cherenkov.hw import measure_cpu as measure
            spec, details = measure.measure(quick=quick)
            preset = "cpu"
        else:
            raise ValueError(f"probe: cannot measure device type {dev.type!r}")
        record = {"schema": SCHEMA, "key": cache_key(dev), "preset": preset,
                  "when": datetime.datetime.now().isoformat(timespec="seconds"),
                  "quick": quick, "spec": spec, "details": details}
        path = cache_path(dev, cache_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
        os.replace(tmp, path)
        live.forget()
    return merge(live.base_spec(dev), record)
