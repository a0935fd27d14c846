"""Llama-3.1-8B at its real size (32 layers, 4096 wide, 32 heads / 8 KV heads, SwiGLU 14336,
128256-token vocabulary, rope theta 500000 with the llama3 frequency scaling, untied head): for
``gpusim generate benchmarks/llama_8b_full.py:model``. Figures from the model's published
config.json (meta-llama/Llama-3.1-8B); random weights on meta, nothing downloaded."""

import transformers


def model():
    cfg = transformers.LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                                   num_hidden_layers=32, num_attention_heads=32,
                                   num_key_value_heads=8, max_position_embeddings=131072,
                                   rms_norm_eps=1e-5, rope_theta=500000.0,
                                   rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 8192},
                                   tie_word_embeddings=False, bos_token_id=128000,
                                   eos_token_id=128001)
    return transformers.LlamaForCausalLM(cfg)
