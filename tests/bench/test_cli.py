"""cherenkov/bench/cli.py: the `cherenkov bench` subcommand, through cherenkov.cli.main."""
import json
import subprocess

import pytest
import torch

from cherenkov.bench import report
from cherenkov.cli import main


def test_without_a_gpu_it_says_so_and_exits_0(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "memory", "--out", str(tmp_path)]) == 0
    assert "no CUDA GPU" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_list_shows_full_size_cases(capsys):
    assert main(["bench", "memory", "--list"]) == 0
    out = capsys.readouterr().out
    assert "32768x4096 bfloat16" in out and "16384x128256 bfloat16" in out
    assert "(8, 4096, 32, 128)" in out


def test_cpu_run_writes_results(tmp_path, capsys):
    code = main(["bench", "memory", "--cpu", "--smoke", "--cases", "swiglu",
                 "--out", str(tmp_path)])
    assert code == 0
    [js] = tmp_path.glob("*_memory_cpu.json")
    data = json.loads(js.read_text())
    assert [(r["case"], r["mode"]) for r in data["rows"]] == [
        ("SwiGLU silu(a)*b", "fwd"), ("SwiGLU silu(a)*b", "fwd+bwd")]
    for r in data["rows"]:
        assert set(r["impls"]) == {"eager", "cherenkov"}
        assert r["impls"]["cherenkov"]["check"]["passed"]
        assert r["predicted_s"] > 0 and r["impls"]["cherenkov"]["GBps"] > 0
    assert data["summary"]["measured"] == 2
    assert "SwiGLU" in capsys.readouterr().out


def test_unknown_implementation_is_refused(tmp_path):
    assert main(["bench", "memory", "--cpu", "--smoke", "--impls", "tvm",
                 "--out", str(tmp_path)]) == 2


def test_time_budget_skips_what_has_not_started(tmp_path):
    main(["bench", "memory", "--cpu", "--smoke", "--cases", "softmax", "--time-budget", "-1",
          "--out", str(tmp_path)])
    [js] = tmp_path.glob("*.json")
    rows = json.loads(js.read_text())["rows"]
    assert len(rows) == 2 and all(r["skipped"] == "time budget spent" for r in rows)


def test_commit_falls_back_to_the_environment(monkeypatch):
    def no_git(*args, **kwargs):
        raise OSError("no git here")
    monkeypatch.setattr(subprocess, "run", no_git)
    monkeypatch.setenv("CHERENKOV_COMMIT", "feedbee")
    assert report.commit() == "feedbee"
    monkeypatch.delenv("CHERENKOV_COMMIT")
    assert report.commit() == "unknown"


@pytest.mark.parametrize("argv", [["demo", "--steps", "0"], ["demo", "--heads", "-1"],
                                  ["demo", "--device", "bogus"],
                                  ["bench", "train", "--cpu", "--smoke", "--steps", "-5"]])
def test_bad_counts_and_devices_are_argparse_errors(argv):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2


def test_demo_rejects_heads_not_dividing_hidden(capsys):
    assert main(["demo", "--device", "cpu", "--hidden", "64", "--heads", "3"]) == 2
    assert "divisible" in capsys.readouterr().err


def test_bench_checks_its_output_folder_before_running(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["bench", "memory", "--cpu", "--smoke", "--out", str(blocker / "out")]) == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.parametrize("suite", ["memory", "train"])
def test_a_cases_pattern_matching_nothing_is_an_error(suite, tmp_path, capsys):
    assert main(["bench", suite, "--cpu", "--smoke", "--cases", "nomatch",
                 "--out", str(tmp_path)]) == 2
    assert "no case matches" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_attention_suite_runs_in_the_interpreter(tmp_path, capsys):
    """`cherenkov bench attention --cpu --smoke`: our kernels checked against the math
    reference and timed (SDPA and flex skipped at these sizes), targets listed, files dated."""
    code = main(["bench", "attention", "--cpu", "--smoke", "--cases", "softcap", "decode",
                 "--out", str(tmp_path)])
    assert code == 0
    [js] = tmp_path.glob("*_attention_cpu-smoke.json")
    data = json.loads(js.read_text())
    ours = [r for r in data["results"] if r["impl"] == "cherenkov"]
    assert {r["case"] for r in ours} == {"causal+softcap30", "decode B8 Hq32 Hkv4 KV32k D128"}
    assert all("error" not in r for r in ours)
    assert all(r["fwd_ms"] > 0 for r in ours)
    assert [c["ok"] for c in data["checks"] if "ok" in c] == [True]
    assert any("softcap fwd+bwd vs flex" in t for t in data["targets"])
    assert (tmp_path / js.name.replace(".json", ".md")).exists()


def test_attention_suite_lists_and_rejects_unknown_cases(tmp_path, capsys):
    assert main(["bench", "attention", "--list"]) == 0
    assert "document block mask" in capsys.readouterr().out
    assert main(["bench", "attention", "--cases", "nomatch", "--out", str(tmp_path)]) == 2


def test_attention_suite_time_budget_skips_everything(tmp_path):
    assert main(["bench", "attention", "--cpu", "--smoke", "--time-budget", "-1",
                 "--out", str(tmp_path)]) == 0
    [js] = tmp_path.glob("*_attention_*.json")
    rows = json.loads(js.read_text())["results"]
    assert rows and all(r.get("error") == "skipped: time budget" for r in rows)


def test_attention_suite_times_both_sdpa_backends_for_causal(tmp_path):
    """The causal case times SDPA's flash backend (the issue's comparator) and SDPA's own
    choice (cuDNN on Hopper), and the targets compare ours with the issue's 447 TFLOP/s."""
    assert main(["bench", "attention", "--cpu", "--smoke", "--cases", "causal",
                 "--out", str(tmp_path)]) == 0
    [js] = tmp_path.glob("*_attention_cpu-smoke.json")
    data = json.loads(js.read_text())
    impls = {r["impl"] for r in data["results"] if r["case"] == "causal"}
    assert {"sdpa_flash", "sdpa_default", "cherenkov"} <= impls
    assert all("error" not in r and r["fwd_bwd_ms"] > 0 for r in data["results"]
               if r["case"] == "causal" and r["impl"] != "flex")     # flex: skipped in smoke
    assert any("447 TFLOP/s" in t for t in data["targets"])
    assert any("SDPA's default backend" in t for t in data["targets"])
