"""Training steps across GPUs, written as a user writes them for a real run: the model on "cuda",
wrapped in DDP or FSDP2's ``fully_shard``, its optimizer, autocast or a mixed-precision policy.

Each builder takes no argument and returns ``(step, args)``; it reads the world from
``torch.distributed``, which its caller has initialised: ``validation/measure/dist_run.py`` under
torchrun with NCCL on real GPUs, and gpusim's prediction under a fake process group of the world
asked (issue 33). The same code is measured and predicted.

- ``ddp_resnet50``: torchvision ResNet-50, 64 images of 224x224 a rank, bf16 autocast, SGD with
  momentum; DDP's defaults (``bucket_cap_mb`` 25).
- ``ddp_gpt2``: Hugging Face GPT-2 (124M, its default config), 8 sequences of 1024 tokens a rank,
  bf16 autocast, AdamW.
- ``fsdp_llama1b``: Hugging Face Llama at Llama-3.2-1B's config (1.24B parameters), ``fully_shard``
  on each decoder layer and at the root with ``MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32)``, AdamW, 2 sequences of 1024 tokens a rank.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def ddp_resnet50(batch: int = 64):
    import torchvision
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(torchvision.models.resnet50().cuda())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")

    def step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step, (x, y)


def ddp_gpt2(batch: int = 8, seq: int = 1024):
    from torch.nn.parallel import DistributedDataParallel as DDP
    from transformers import GPT2Config, GPT2LMHeadModel
    model = DDP(GPT2LMHeadModel(GPT2Config()).cuda())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 50257, (batch, seq), device="cuda")

    def step(ids):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step, (ids,)


def llama1b_config():
    from transformers import LlamaConfig
    return LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                       max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=True)


def fsdp_llama1b(batch: int = 2, seq: int = 1024):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import LlamaForCausalLM
    model = LlamaForCausalLM(llama1b_config()).cuda()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 128256, (batch, seq), device="cuda")

    def step(ids):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step, (ids,)


BUILDERS = {"ddp_resnet50": ddp_resnet50, "ddp_gpt2": ddp_gpt2, "fsdp_llama1b": fsdp_llama1b}
