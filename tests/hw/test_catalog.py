"""Presets load from the TOML files, by name or alias, with their datasheet figures."""
import pytest

from cherenkov import hw
from cherenkov.hw import catalog


def test_every_preset_loads():
    for name in hw.device_names():
        assert hw.device(name).peak_flops
    for name in hw.link_names():
        assert hw.link(name).bandwidth > 0
    for name in hw.node_names():
        node = hw.node(name)
        assert hw.device(node.device) and hw.link(node.intra) and hw.link(node.inter)
    assert {"h100", "h200", "b200", "a100-40gb", "a100-80gb", "mi300x", "l40s", "cpu"} \
        <= set(hw.device_names())


@pytest.mark.parametrize("alias,name", [
    ("H200", "H200"), ("h100", "H100"), ("a100-80gb", "A100-80GB"), ("A100 80GB", "A100-80GB"),
    ("mi300x", "MI300X"), ("cpu", "CPU"), ("l40s", "L40S"), ("B200", "B200"),
])
def test_aliases_are_case_insensitive(alias, name):
    assert hw.device(alias).name == name


def test_h200_figures_from_the_datasheet_and_our_card():
    d = hw.device("h200")
    assert d.memory_bandwidth == 4.8e12
    assert d.sm_count == 132
    assert d.peak_flops["bf16_tensor"] == 989.5e12
    assert d.peak_flops["fp32_vector"] == 67e12
    assert d.sram_per_sm_bytes == 228 * 1024
    assert d.l2_bytes == 60 * 2**20
    assert d.memory_bytes == 141 * 2**30
    assert d.measured_copy_bandwidth == 4.22e12                  # this workplace's card
    assert d.achievable_flops("bf16") == 780e12
    assert d.flops("bf16") == 989.5e12


def test_links_are_one_direction_per_gpu():
    assert hw.link("nvlink4").bandwidth == 450e9
    assert hw.link("nvlink3").bandwidth == 300e9
    assert hw.link("ib400").bandwidth == 50e9 == hw.link("ndr").bandwidth
    assert hw.link("ib200").bandwidth == 25e9
    assert hw.node("dgx-h200").intra == "nvlink4"


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown device preset 'h900'.*h200"):
        hw.device("h900")
    with pytest.raises(ValueError, match="unknown link preset"):
        hw.link("carrier-pigeon")


def test_tables_validate_like_presets():
    with pytest.raises(ValueError, match="field 'memory_bytes' is missing"):
        catalog.device_from_table({"name": "x", "vendor": "v", "kind": "gpu",
                                   "peak_flops": {"fp32_vector": 1e12}}, origin="t")
    with pytest.raises(ValueError, match="unknown field 'bandwith'"):
        catalog.link_from_table({"preset": "ib400", "bandwith": 1e9})
    with pytest.raises(ValueError, match="field 'memory_bandwidth' must be a positive"):
        catalog.device_from_table({"preset": "h200", "memory_bandwidth": -1})
    custom = catalog.device_from_table({"preset": "h100", "name": "H100-slow",
                                        "memory_bandwidth": 2e12})
    assert custom.memory_bandwidth == 2e12 and custom.sm_count == 132


@pytest.mark.parametrize("live,key", [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("AMD Instinct MI300X", "mi300x"), ("NVIDIA L40S", "l40s"), ("NVIDIA B200", "b200"),
    ("NVIDIA GeForce GTX 1080", None),
])
def test_live_names_match_presets(live, key):
    assert catalog.match_device_name(live) == key


def test_every_figure_in_the_preset_files_cites_its_source():
    files = sorted((catalog.PRESET_DIR).rglob("*.toml"))
    assert len(files) >= 10
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            value = code.split("=", 1)[1].strip() if "=" in code else ""
            if value[:1].isdigit():
                assert "#" in line, f"{path.name}:{number} gives a figure without its source"
