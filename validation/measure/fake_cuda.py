"""Fake CUDA on a CPU-only machine: the patches under which PyTorch's memory tools (MemTracker, FSDPMemTracker) and the training steps they measure run as on a GPU, and the device's total memory they see."""

from __future__ import annotations


def fake_cuda(module, args, fake_mode, device="cuda"):
    """Replace ``module``'s parameters and buffers and the tensors in ``args`` (built on
    ``meta``) by fake ``cuda`` tensors (or ``device``'s) of the same shape, dtype and
    strides."""
    import torch
    dev = torch.device(device)

    def conv(t):
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=dev)
    with fake_mode:
        for m in module.modules():
            for k, p in list(m._parameters.items()):
                if p is not None:
                    m._parameters[k] = torch.nn.Parameter(conv(p), requires_grad=p.requires_grad)
            for k, b in list(m._buffers.items()):
                if b is not None:
                    m._buffers[k] = conv(b)
        args = tuple(conv(a) if isinstance(a, torch.Tensor) else a for a in args)
    return module, args


def _cuda_total(snapshot: dict, device_type: str = "cuda") -> int:
    """The tracker's total over cuda devices (it keys them ``cuda:0``; or over
    ``device_type``'s)."""
    return sum(s.get("Total", 0) for d, s in snapshot.items()
               if getattr(d, "type", "") == device_type)
