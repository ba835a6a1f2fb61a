"""Built-in models: eager forward/loss on tiny configs, presets' sizes, HF reader, counts."""
import json

import pytest
import torch
import torch.nn.functional as F

from cherenkov.models import (PRESETS, ModelConfig, build_model, from_hf_config,
                              matmul_param_count, meta_forward_flops, meta_param_count,
                              param_count, preset, training_flops_per_token)


@pytest.mark.parametrize("name", ["tiny", "tiny-llama"])
def test_forward_shapes_and_loss(name):
    torch.manual_seed(0)
    cfg = preset(name)
    model = build_model(cfg).eval()
    idx = torch.randint(0, cfg.vocab, (2, 16))
    logits = model(idx)
    assert logits.shape == (2, 16, cfg.vocab)
    targets = torch.randint(0, cfg.vocab, (2, 16))
    logits2, loss = model(idx, targets)
    torch.testing.assert_close(logits, logits2)
    ref = F.cross_entropy(logits.reshape(-1, cfg.vocab).float(), targets.reshape(-1))
    torch.testing.assert_close(loss, ref)
    # A freshly initialised model predicts close to uniform.
    assert abs(loss.item() - torch.log(torch.tensor(float(cfg.vocab))).item()) < 0.5


@pytest.mark.parametrize("name", ["tiny", "tiny-llama"])
def test_causal(name):
    """Changing a later token never changes earlier logits."""
    torch.manual_seed(0)
    cfg = preset(name)
    model = build_model(cfg).eval()
    idx = torch.randint(0, cfg.vocab, (1, 12))
    idx2 = idx.clone()
    idx2[0, 8] = (idx[0, 8] + 1) % cfg.vocab
    a, b = model(idx), model(idx2)
    torch.testing.assert_close(a[:, :8], b[:, :8])
    assert not torch.allclose(a[:, 8:], b[:, 8:])


def test_backward_reaches_every_parameter():
    torch.manual_seed(0)
    for name in ("tiny", "tiny-llama"):
        model = build_model(preset(name))
        idx = torch.randint(0, 256, (2, 8))
        _, loss = model(idx, idx)
        loss.backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_analytic_param_count_matches_meta_module(name):
    cfg = PRESETS[name]
    assert param_count(cfg) == meta_param_count(cfg)


def test_published_sizes():
    assert param_count(preset("gpt2")) == 124_439_808           # GPT-2 small, tied head
    assert abs(param_count(preset("llama3-8b")) / 8.03e9 - 1) < 0.01
    assert abs(param_count(preset("llama3-70b")) / 70.6e9 - 1) < 0.01
    assert abs(param_count(preset("llama3-405b")) / 405.9e9 - 1) < 0.01
    assert 0.95e12 < param_count(preset("llama-1t")) < 1.1e12


@pytest.mark.parametrize("name", ["tiny", "tiny-llama"])
def test_flop_formula_matches_flop_counter(name):
    """Forward FLOPs counted on the meta module = 2*N_matmul + 4*L*H*D*T per token (full attention)."""
    cfg = preset(name)
    B, T = 2, 16
    counted = meta_forward_flops(cfg, B, T)
    expected = B * T * (2 * matmul_param_count(cfg) + 4 * cfg.layers * cfg.heads * cfg.head_dim * T)
    assert counted == expected
    assert training_flops_per_token(cfg, T) * B * T == 3 * expected


def test_hf_reader(tmp_path):
    gpt2 = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
            "vocab_size": 50257, "n_positions": 1024, "n_inner": None, "resid_pdrop": 0.1}
    cfg = from_hf_config(gpt2)
    assert (cfg.arch, cfg.layers, cfg.hidden, cfg.ffn, cfg.tie_embeddings) == ("gpt", 12, 768, 3072, True)
    assert param_count(cfg) == param_count(preset("gpt2"))
    llama = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
             "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
             "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0,
             "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(llama))
    cfg = from_hf_config(tmp_path)  # a directory holding config.json
    assert param_count(cfg) == param_count(preset("llama3-8b"))
    with pytest.raises(ValueError, match="unsupported HF model_type"):
        from_hf_config({"model_type": "bert"})


def test_config_validation():
    with pytest.raises(ValueError, match="not divisible"):
        ModelConfig("llama", layers=1, hidden=64, heads=4, kv_heads=3, vocab=10, seq=8)
    assert ModelConfig("gpt", layers=1, hidden=64, heads=4, vocab=10, seq=8).ffn == 256
