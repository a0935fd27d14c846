"""Mistral-7B-v0.1 at its real size (32 layers, 4096 wide, 32 heads / 8 KV heads, SwiGLU 14336,
32000-token vocabulary, sliding window 4096): for ``gpusim generate benchmarks/mistral_7b_full.py:model``.
The zoo's hf:mistral-7b keeps 4 of the 32 layers."""

import transformers


def model():
    cfg = transformers.MistralConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                                     num_hidden_layers=32, num_attention_heads=32,
                                     num_key_value_heads=8, max_position_embeddings=32768,
                                     rms_norm_eps=1e-5, sliding_window=4096, rope_theta=10000.0,
                                     eos_token_id=2, bos_token_id=1)
    return transformers.MistralForCausalLM(cfg)
