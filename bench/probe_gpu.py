"""Probe the live GPU with cherenkov.hw.probe() and write what it measured as JSON.

    python bench/probe_gpu.py out.json            # full probe (~10-30 s on an H200)
    python bench/probe_gpu.py out.json --quick    # small sizes, a smoke run

Always measures afresh (refresh=True) into a throw-away cache folder unless --cache-dir is
given, so the result reflects this run. The JSON holds the merged DeviceSpec, the raw probe
record (L2 curve, matmul sizes) and the preset's datasheet figures for comparison.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time

import torch

from cherenkov import hw
from cherenkov.hw import catalog


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="path of the JSON file to write")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--cache-dir", default=None,
                        help="probe cache folder (default: a temporary one)")
    args = parser.parse_args(argv)

    if not torch.cuda.is_available():
        print("no CUDA device: probing the CPU instead", file=sys.stderr)
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="cherenkov-probe-")
    t0 = time.perf_counter()
    spec = hw.probe(cache_dir=cache_dir, refresh=True, quick=args.quick)
    seconds = time.perf_counter() - t0
    record = hw.cached_probe(cache_dir=cache_dir)
    preset_key = record.get("preset") if record else None
    preset = dataclasses.asdict(catalog.device(preset_key)) if preset_key else None

    result = {"spec": dataclasses.asdict(spec), "record": record, "preset": preset,
              "probe_seconds": seconds,
              "versions": {"torch": torch.__version__, "cuda": torch.version.cuda}}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)

    print(f"device: {spec.name} ({record['key']['device'] if record else '?'}), "
          f"probe took {seconds:.1f} s")
    print(f"copy bandwidth (read + write): {spec.measured_copy_bandwidth / 1e12:.3f} TB/s "
          f"(datasheet peak {spec.memory_bandwidth / 1e12:.2f} TB/s)")
    for key, rate in sorted(spec.measured_flops.items()):
        peak = spec.peak_flops.get(key)
        ratio = f" ({rate / peak:.0%} of datasheet {peak / 1e12:.1f})" if peak else ""
        print(f"matmul {key}: {rate / 1e12:.1f} TFLOP/s{ratio}")
    print(f"launch overhead: {spec.launch_overhead_s * 1e6:.2f} us per tiny eager kernel")
    details = (record or {}).get("details", {})
    if "l2_curve" in details:
        print(f"L2 reported {spec.l2_bytes / 2**20:.0f} MiB; copy faster than HBM up to a "
              f"working set of {details['l2_effect_bytes'] / 2**20:.0f} MiB")
        for point in details["l2_curve"]:
            print(f"  working set {point['working_set_bytes'] / 2**20:8.0f} MiB: "
                  f"{point['copy_bandwidth'] / 1e12:6.2f} TB/s")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
