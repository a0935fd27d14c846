"""Small builders written as for ``torchrun`` on GPUs (the model on "cuda", DDP or fully_shard, the world read from
torch.distributed), for tests/test_distributed.py: gpusim runs them under its fake process group."""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

WIDTH, BATCH = 256, 64


def mlp(blocks=4):
    return nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))
                           for _ in range(blocks)], nn.Linear(WIDTH, 10))


def _data():
    x = torch.randn(BATCH, WIDTH, device="cuda")
    y = torch.randint(0, 10, (BATCH,), device="cuda")
    return x, y


def ddp_mlp(**ddp_kwargs):
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    model = DDP(mlp().cuda(), device_ids=[rank], **ddp_kwargs)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step, _data()


def ddp_mlp_view():
    return ddp_mlp(gradient_as_bucket_view=True, bucket_cap_mb=1)


def ddp_accumulate():
    """Two micro-batches, the first under no_sync (gradient accumulation)."""
    model = DDP(mlp().to("cuda"))
    opt = torch.optim.AdamW(model.parameters())

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        with model.no_sync():
            nn.functional.cross_entropy(model(x), y).backward()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step, _data()


def fsdp_mlp(reshard=None):
    assert dist.get_world_size() >= 1
    model = mlp().to("cuda")
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for blk in list(model)[:4]:
        fully_shard(blk, mp_policy=mp, reshard_after_forward=reshard)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step, _data()


def fsdp_mlp_keep():
    return fsdp_mlp(reshard=False)


def plain_mlp():
    model = mlp().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return step, _data()


def broken():
    raise RuntimeError("no GPU here")


class _PythonThenGemm(nn.Module):
    """A forward of many tiny ops on a small tensor (host-bound: Python and dispatch) before one large GEMM,
    whose backward is device-bound: GPT-2's and Llama's steps in miniature."""

    def __init__(self, width=8192):
        super().__init__()
        self.big = nn.Linear(width, width, bias=False)

    def forward(self, x, t):
        for _ in range(100):
            t = t * 1.01 + 0.5
        return self.big(x).float().mean() + t.sum()


def ddp_python_then_gemm():
    model = DDP(_PythonThenGemm().cuda())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16384, 8192, device="cuda")
    t = torch.randn(16, device="cuda")

    def step(x, t):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, t)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step, (x, t)
