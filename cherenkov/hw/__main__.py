"""Print hardware descriptions: `python -m cherenkov.hw [NAME-or-CLUSTER ...] [--probe]`.

    python -m cherenkov.hw                  the live device (preset + driver + cached probe)
    python -m cherenkov.hw h200 mi300x      presets
    python -m cherenkov.hw 16x8xH100-ib400  a cluster
    python -m cherenkov.hw --probe          measure the live device (cached afterwards)
"""
from __future__ import annotations

import argparse
import sys

from cherenkov import hw
from cherenkov.hw.spec import ClusterSpec, DeviceSpec


def describe_device(d: DeviceSpec) -> str:
    lines = [f"{d.name} ({d.vendor} {d.kind})",
             f"  memory      {d.memory_bytes / 2**30:.1f} GiB at {d.memory_bandwidth / 1e12:.2f} TB/s"
             + (f" (measured copy {d.measured_copy_bandwidth / 1e12:.2f} TB/s)"
                if d.measured_copy_bandwidth else ""),
             f"  on chip     {d.sm_count} SMs/CUs/cores, {d.sram_per_sm_bytes / 1024:.0f} KiB SRAM "
             f"and {d.registers_per_sm} registers each, L2 {d.l2_bytes / 2**20:.1f} MiB",
             f"  launch      {d.launch_overhead_s * 1e6:.1f} us"]
    for key in sorted(d.peak_flops):
        measured = d.measured_flops.get(key)
        lines.append(f"  {key:<12}{d.peak_flops[key] / 1e12:9.1f} TFLOP/s peak"
                     + (f", {measured / 1e12:.1f} measured" if measured else ""))
    if d.notes:
        lines.append(f"  notes       {d.notes}")
    return "\n".join(lines)


def describe_cluster(c: ClusterSpec) -> str:
    levels = [f"  intra-node  {c.intra.name}: {c.intra.bandwidth / 1e9:.0f} GB/s/dir per GPU, "
              f"{c.intra.latency_s * 1e6:.1f} us"]
    if c.inter is not None:
        levels.append(f"  inter-node  {c.inter.name}: {c.inter.bandwidth / 1e9:.1f} GB/s/dir per "
                      f"GPU, {c.inter.latency_s * 1e6:.1f} us")
    return "\n".join([f"{c.name}: {c.nodes} node(s) x {c.gpus_per_node} = {c.world_size} GPUs",
                      *levels, describe_device(c.device)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cherenkov.hw",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="device presets or cluster strings")
    parser.add_argument("--probe", action="store_true", help="measure the live device")
    parser.add_argument("--quick", action="store_true", help="with --probe: small sizes")
    args = parser.parse_args(argv)
    if args.probe:
        print(describe_device(hw.probe(refresh=True, quick=args.quick)))
    for name in args.names:
        try:
            text = describe_device(hw.device(name))
        except ValueError:
            text = describe_cluster(hw.cluster(name))
        print(text)
    if not args.names and not args.probe:
        print(describe_device(hw.current_device()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
