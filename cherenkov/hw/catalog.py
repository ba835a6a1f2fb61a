"""The preset catalogue: devices, links and nodes read from the TOML files in `hw/presets/`.

Names are case-insensitive and spaces/underscores count as hyphens, so "H200", "h200-sxm" and
"A100 80GB" all find their preset. Tables written by users (a cluster TOML file) go through the
same converters, so a bad or missing figure fails the same way, naming the field:

    >>> device_from_table({"preset": "h200", "memory_bandwidth": -1}, origin="my.toml")
    Traceback (most recent call last):
    ...
    ValueError: DeviceSpec 'H200': field 'memory_bandwidth' must be a positive finite number, got -1.0
"""
from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from cherenkov.hw.spec import DeviceSpec, LinkSpec

PRESET_DIR = Path(__file__).parent / "presets"
# Keys a preset table may carry besides the record's own fields.
_CATALOGUE_KEYS = {"aliases", "match", "preset"}


def normalize(name: str) -> str:
    return re.sub(r"[\s_]+", "-", str(name).strip().lower())


def load_toml(path: str | Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: {e}") from None


class _Catalogue:
    """name -> table, with an alias index; one per kind of preset."""

    def __init__(self, what: str, tables: dict[str, dict]):
        self.what, self.tables, self.index = what, tables, {}
        for key, table in tables.items():
            for alias in [key, table.get("name", key), *table.get("aliases", [])]:
                self.index[normalize(alias)] = key

    def key(self, name: str) -> str:
        found = self.index.get(normalize(name))
        if found is None:
            raise ValueError(f"unknown {self.what} preset {name!r}; known: {sorted(self.tables)}")
        return found

    def has(self, name: str) -> bool:
        return normalize(name) in self.index


@functools.cache
def _devices() -> _Catalogue:
    tables = {p.stem: load_toml(p) for p in sorted((PRESET_DIR / "devices").glob("*.toml"))}
    return _Catalogue("device", tables)


@functools.cache
def _links() -> _Catalogue:
    return _Catalogue("link", load_toml(PRESET_DIR / "links.toml"))


@functools.cache
def _nodes() -> _Catalogue:
    return _Catalogue("node", load_toml(PRESET_DIR / "nodes.toml"))


# -- converting tables to records ---------------------------------------------------------
def _from_table(cls, table: Mapping[str, Any], base: Mapping[str, Any], origin: str):
    owner = cls.__name__
    names = {f.name: f for f in dataclasses.fields(cls)}
    merged = {k: v for k, v in base.items() if k not in _CATALOGUE_KEYS}
    merged.update({k: v for k, v in table.items() if k not in _CATALOGUE_KEYS})
    label = merged.get("name", "?")
    for key in merged:
        if key not in names:
            raise ValueError(f"{owner} {label!r} ({origin}): unknown field {key!r}; "
                             f"known: {sorted(names)}")
    for f in names.values():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in merged:
            raise ValueError(f"{owner} {label!r} ({origin}): field {f.name!r} is missing")
    for key, value in merged.items():
        if names[key].type in ("float", "float | None") and isinstance(value, int) \
                and not isinstance(value, bool):
            merged[key] = float(value)
        elif key in ("peak_flops", "measured_flops") and isinstance(value, Mapping):
            merged[key] = {k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v
                           for k, v in value.items()}
    return cls(**merged)


def device_from_table(table: Mapping[str, Any], origin: str = "table") -> DeviceSpec:
    """A DeviceSpec from a TOML table; `preset = "h200"` starts from that preset's figures."""
    base = _devices().tables[_devices().key(table["preset"])] if "preset" in table else {}
    return _from_table(DeviceSpec, table, base, origin)


def link_from_table(table: Mapping[str, Any], origin: str = "table") -> LinkSpec:
    """A LinkSpec from a TOML table; `preset = "ib400"` starts from that preset's figures."""
    if "preset" in table:
        key = _links().key(table["preset"])
        base = {"name": key, **_links().tables[key]}
    else:
        base = {}
    return _from_table(LinkSpec, table, base, origin)


# -- public lookups -----------------------------------------------------------------------
def device(name: str) -> DeviceSpec:
    """The preset device called `name` (case-insensitive; aliases such as "h100", "a100-80gb")."""
    key = _devices().key(name)
    return device_from_table(_devices().tables[key], origin=f"presets/devices/{key}.toml")


def device_names() -> list[str]:
    return sorted(_devices().tables)


def device_key(name: str) -> str:
    """The preset file stem for a device name or alias ("H200" -> "h200")."""
    return _devices().key(name)


def is_device(name: str) -> bool:
    return _devices().has(name)


def match_device_name(live_name: str) -> str | None:
    """The preset whose `match` substrings best fit a live device name (longest match wins),
    e.g. "NVIDIA H200" -> "h200", "NVIDIA A100-SXM4-80GB" -> "a100-80gb"; None if none fits."""
    best, best_len = None, 0
    for key, table in _devices().tables.items():
        for pattern in table.get("match", []):
            if pattern.lower() in live_name.lower() and len(pattern) > best_len:
                best, best_len = key, len(pattern)
    return best


def link(name: str) -> LinkSpec:
    """The preset link called `name` ("nvlink4", "ib400", "ndr", "xgmi", ...)."""
    key = _links().key(name)
    return link_from_table({"name": key, **_links().tables[key]}, origin="presets/links.toml")


def link_names() -> list[str]:
    return sorted(_links().tables)


def is_link(name: str) -> bool:
    return _links().has(name)


@dataclass(frozen=True)
class NodePreset:
    """A typical node: `gpus_per_node` devices joined by `intra`; `inter` is its usual fabric."""
    name: str
    device: str
    gpus_per_node: int
    intra: str
    inter: str


def node(name: str) -> NodePreset:
    """The preset node called `name` ("dgx-h100", "mi300x-platform", ...)."""
    key = _nodes().key(name)
    table = {k: v for k, v in _nodes().tables[key].items() if k not in _CATALOGUE_KEYS}
    return NodePreset(name=key, **table)


def node_names() -> list[str]:
    return sorted(_nodes().tables)


def is_node(name: str) -> bool:
    return _nodes().has(name)


def node_for_device(device_name: str) -> NodePreset:
    """The typical node built from this device (the first preset node that holds it)."""
    key = device_key(device_name)
    for node_key in sorted(_nodes().tables):
        if device_key(_nodes().tables[node_key]["device"]) == key:
            return node(node_key)
    raise ValueError(f"no node preset holds device {device_name!r}; "
                     f"give the links in a cluster TOML file")
