"""Clusters from short strings or TOML files.

A string is `[NODES x] GPUS x DEVICE [-FABRIC]`, or a bare device for one chip:

    "8xH200"              one DGX H200: 8 GPUs over NVLink4/NVSwitch
    "128x8xH100-ib400"    128 nodes of 8 H100, one 400 Gb/s NDR rail per GPU between nodes
    "64x8xA100-80gb"      64 DGX A100 nodes with their usual fabric (HDR 200 Gb/s)
    "4x8xdgx-h200-ib800"  a node preset name works in place of the device

A TOML file names presets or gives tables (any table may start from `preset = "..."`):

    name = "lab"
    nodes = 16
    gpus_per_node = 8
    device = "h200"                       # or [device] with preset = "h200" and overrides
    intra = "nvlink4"                     # or [intra] with name, bandwidth, latency_s
    inter = "ib400"                       # omit for one node
    # node = "dgx-h200"                   # alternatively: device, gpus_per_node, links from a node
"""
from __future__ import annotations

import os
import re
from typing import Any

from cherenkov.hw import catalog
from cherenkov.hw.spec import ClusterSpec, DeviceSpec, LinkSpec

_STRING = re.compile(r"^\s*(?:(\d+)\s*[xX*]\s*)?(?:(\d+)\s*[xX*]\s*)?([A-Za-z].*?)\s*$")
_FILE_KEYS = {"name", "nodes", "gpus_per_node", "device", "intra", "inter", "node"}


def cluster(text: str) -> ClusterSpec:
    """A ClusterSpec from a string such as "128x8xH100-ib400", or from a path to a .toml file."""
    if str(text).endswith(".toml") or os.path.isfile(str(text)):
        return cluster_from_file(text)
    return cluster_from_string(text)


def _split_hardware(tail: str) -> tuple[str, str | None]:
    """'A100-80gb-ib200' -> ('A100-80gb', 'ib200'): the longest device/node name, then a fabric."""
    parts = tail.split("-")
    for i in range(len(parts), 0, -1):
        head, rest = "-".join(parts[:i]), "-".join(parts[i:])
        if catalog.is_device(head) or catalog.is_node(head):
            return head, (rest or None)
    raise ValueError(f"cluster {tail!r}: unknown device or node preset; known devices: "
                     f"{catalog.device_names()}, nodes: {catalog.node_names()}")


def cluster_from_string(text: str) -> ClusterSpec:
    m = _STRING.match(str(text))
    if not m:
        raise ValueError(f"cluster {text!r}: expected '[NODES x] GPUS x DEVICE[-FABRIC]', "
                         f"e.g. '8xH200' or '128x8xH100-ib400'")
    first, second, tail = m.groups()
    if second is not None:
        nodes, gpus = int(first), int(second)
    else:
        nodes, gpus = 1, (int(first) if first is not None else 1)
    hardware, fabric = _split_hardware(tail)
    if catalog.is_device(hardware):
        node = catalog.node_for_device(hardware)
        device = catalog.device(hardware)
    else:
        node = catalog.node(hardware)
        device = catalog.device(node.device)
    if gpus > node.gpus_per_node:
        raise ValueError(f"cluster {text!r}: field 'gpus_per_node' is {gpus}, but node "
                         f"{node.name!r} holds {node.gpus_per_node}")
    if fabric is not None and not catalog.is_link(fabric):
        raise ValueError(f"cluster {text!r}: unknown fabric {fabric!r}; "
                         f"known links: {catalog.link_names()}")
    inter = catalog.link(fabric or node.inter) if nodes > 1 or fabric else None
    name = f"{nodes}x{gpus}x{device.name}" + (f"-{inter.name}" if inter else "")
    return ClusterSpec(device=device, gpus_per_node=gpus, nodes=nodes,
                       intra=catalog.link(node.intra), inter=inter, name=name)


def _device_field(value: Any, origin: str) -> DeviceSpec:
    if isinstance(value, str):
        return catalog.device(value)
    if isinstance(value, dict):
        return catalog.device_from_table(value, origin)
    raise ValueError(f"{origin}: field 'device' must be a preset name or a table, got {value!r}")


def _link_field(value: Any, field_name: str, origin: str) -> LinkSpec:
    if isinstance(value, str):
        return catalog.link(value)
    if isinstance(value, dict):
        return catalog.link_from_table(value, f"{origin}, [{field_name}]")
    raise ValueError(f"{origin}: field {field_name!r} must be a preset name or a table, "
                     f"got {value!r}")


def cluster_from_file(path: str | os.PathLike) -> ClusterSpec:
    origin = str(path)
    if not os.path.isfile(origin):
        raise ValueError(f"cluster file {origin!r} does not exist")
    table = catalog.load_toml(origin)
    return cluster_from_table(table, origin)


def cluster_from_table(table: dict, origin: str = "table") -> ClusterSpec:
    unknown = set(table) - _FILE_KEYS
    if unknown:
        raise ValueError(f"{origin}: unknown field(s) {sorted(unknown)}; known: {sorted(_FILE_KEYS)}")
    values = dict(table)
    for key in ("nodes", "gpus_per_node"):
        if key in values and (isinstance(values[key], bool) or not isinstance(values[key], int)):
            raise ValueError(f"{origin}: field {key!r} must be an integer, got {values[key]!r}")
    if not isinstance(values.get("name", ""), str):
        raise ValueError(f"{origin}: field 'name' must be a string, got {values['name']!r}")
    if "node" in values:
        node = catalog.node(values.pop("node"))
        if values.get("gpus_per_node", node.gpus_per_node) != node.gpus_per_node:
            raise ValueError(f"{origin}: field 'gpus_per_node' = {values['gpus_per_node']} "
                             f"contradicts node preset {node.name!r} "
                             f"({node.gpus_per_node} per node)")
        values.setdefault("device", node.device)
        values.setdefault("gpus_per_node", node.gpus_per_node)
        values.setdefault("intra", node.intra)
        if values.get("nodes", 1) > 1:
            values.setdefault("inter", node.inter)
    for required in ("device", "gpus_per_node", "intra"):
        if required not in values:
            raise ValueError(f"{origin}: field {required!r} is missing")
    inter = values.get("inter")
    return ClusterSpec(
        device=_device_field(values["device"], origin),
        gpus_per_node=values["gpus_per_node"],
        nodes=values.get("nodes", 1),
        intra=_link_field(values["intra"], "intra", origin),
        inter=None if inter is None else _link_field(inter, "inter", origin),
        name=values.get("name", ""),
    )
