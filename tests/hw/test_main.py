"""`python -m cherenkov.hw` prints presets and clusters."""
from cherenkov.hw.__main__ import main


def test_prints_presets_and_clusters(capsys):
    assert main(["h200", "2x8xH100-ib400"]) == 0
    out = capsys.readouterr().out
    assert "H200 (nvidia gpu)" in out and "989.5 TFLOP/s peak, 780.0 measured" in out
    assert "2x8xH100-ib-ndr400: 2 node(s) x 8 = 16 GPUs" in out
    assert "ib-ndr400: 50.0 GB/s/dir per GPU" in out


def test_prints_the_live_device(capsys):
    assert main([]) == 0
    assert "memory" in capsys.readouterr().out
