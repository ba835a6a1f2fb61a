"""Cluster strings and TOML files."""
import pytest

from cherenkov import hw


@pytest.mark.parametrize("text,nodes,gpus,device,intra,inter", [
    ("8xH200", 1, 8, "H200", "nvlink4", None),
    ("128x8xH100-ib400", 128, 8, "H100", "nvlink4", "ib-ndr400"),
    ("64x8xA100-80gb", 64, 8, "A100-80GB", "nvlink3", "ib-hdr200"),     # node's usual fabric
    ("64x8xA100-80gb-ib400", 64, 8, "A100-80GB", "nvlink3", "ib-ndr400"),
    ("2x8xMI300X", 2, 8, "MI300X", "xgmi-mi300x", "roce400"),
    ("4x8xdgx-b200", 4, 8, "B200", "nvlink5", "ib-ndr400"),
    ("4xH100", 1, 4, "H100", "nvlink4", None),
    ("h200", 1, 1, "H200", "nvlink4", None),
])
def test_cluster_strings(text, nodes, gpus, device, intra, inter):
    c = hw.cluster(text)
    assert (c.nodes, c.gpus_per_node, c.device.name, c.intra.name) == (nodes, gpus, device, intra)
    assert (c.inter.name if c.inter else None) == inter
    assert c.world_size == nodes * gpus


@pytest.mark.parametrize("text,match", [
    ("0xH200", "field 'gpus_per_node'"),
    ("16xH200", "field 'gpus_per_node' is 16"),
    ("2x8xH900", "unknown device or node"),
    ("2x8xH100-ib9000", "unknown fabric 'ib9000'"),
    ("8x", "expected"),
])
def test_bad_cluster_strings(text, match):
    with pytest.raises(ValueError, match=match):
        hw.cluster(text)


def test_cluster_from_toml(tmp_path):
    path = tmp_path / "lab.toml"
    path.write_text('name = "lab"\nnodes = 4\ngpus_per_node = 8\n'
                    '[device]\npreset = "h200"\nmeasured_copy_bandwidth = 4.3e12\n'
                    '[intra]\npreset = "nvlink4"\nlatency_s = 1e-6\n'
                    '[inter]\nname = "my-ib"\nbandwidth = 4e10\nlatency_s = 7e-6\n')
    c = hw.cluster(str(path))
    assert c.name == "lab" and c.world_size == 32
    assert c.device.achievable_bandwidth == 4.3e12
    assert c.intra.bandwidth == 450e9 and c.intra.latency_s == 1e-6
    assert c.inter.name == "my-ib" and c.inter.bandwidth == 4e10


def test_cluster_from_toml_node(tmp_path):
    path = tmp_path / "n.toml"
    path.write_text('node = "dgx-a100"\nnodes = 2\n')
    c = hw.cluster(str(path))
    assert (c.device.name, c.gpus_per_node, c.inter.name) == ("A100-80GB", 8, "ib-hdr200")


@pytest.mark.parametrize("body,match", [
    ('nodes = 2\ngpus_per_node = 8\ndevice = "h100"\nintra = "nvlink4"\n', "field 'inter'"),
    ('gpus_per_node = 8\nintra = "nvlink4"\n', "field 'device' is missing"),
    ('device = "h100"\ngpus_per_node = 0\nintra = "nvlink4"\n', "field 'gpus_per_node'"),
    ('device = "h100"\ngpus_per_node = 8\nintra = "nvlink4"\nspeed = 3\n', "unknown field"),
    ('device = "h100"\ngpus_per_node = 8\n[intra]\nname = "x"\nlatency_s = 1e-6\n',
     "field 'bandwidth' is missing"),
    ('device = [1, 2]\ngpus_per_node = 8\nintra = "nvlink4"\n', "field 'device'"),
    ('device = "h100"\ngpus_per_node = 8\nintra = "nvlink4"\nnodes = = 2\n', "not valid TOML"),
])
def test_bad_cluster_files(tmp_path, body, match):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(ValueError, match=match):
        hw.cluster(str(path))


def test_missing_cluster_file():
    with pytest.raises(ValueError, match="does not exist"):
        hw.cluster("/nonexistent/cluster.toml")
