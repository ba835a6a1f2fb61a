"""Built-in models: GPT-2 and Llama families, their presets, an HF config reader, and counts."""
from cherenkov.models.config import PRESETS, ModelConfig, from_hf_config, preset
from cherenkov.models.counting import (build_model, matmul_param_count, meta_forward_flops,
                                       meta_param_count, param_count, training_flops_per_token)
from cherenkov.models.gpt import GPT
from cherenkov.models.llama import Llama

__all__ = ["PRESETS", "ModelConfig", "from_hf_config", "preset", "build_model", "param_count",
           "matmul_param_count", "meta_param_count", "meta_forward_flops",
           "training_flops_per_token", "GPT", "Llama"]
