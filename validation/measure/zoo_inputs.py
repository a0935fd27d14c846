"""The zoo runs' models and inputs on the GPU: random inputs for a case, tensor and weight bytes, and the cache that keeps one built model across a model's sizes and modes."""

from __future__ import annotations
import gc
from validation.measure.zoo_plan import one_line


# ------------------------------------------------------------------------ inputs
def make_inputs(entry, module, sizes, device, dtype, channels_last, zoo_mod=None):
    """The inputs ``zoo.build`` makes for ``sizes``, for an already built module
    (``zoo_mod``: a module with ``inputs`` like :mod:`gpusim.models.zoo`'s, the default)."""
    if zoo_mod is None or not hasattr(zoo_mod, "inputs"):
        from gpusim.models import zoo as zoo_mod
    return zoo_mod.inputs(entry.name, module, device=device, dtype=dtype,
                          channels_last=channels_last, **sizes)


def tensor_bytes(objs) -> int:
    import torch
    seen, n = set(), 0
    for t in objs:
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            key = (t.untyped_storage().data_ptr(), t.device)
            if key in seen:
                continue
            seen.add(key)
            n += t.untyped_storage().nbytes()
    return n


def weight_bytes(module) -> int:
    return tensor_bytes(list(module.parameters()) + list(module.buffers()))


class ModelCache:
    """Built modules by (model, dtype, layout), least recently used evicted past a cap on
    their weight bytes; build failures are remembered."""

    def __init__(self, cap_bytes: int):
        self.cap = cap_bytes
        self.items = {}            # key -> (module, weight bytes) in use order
        self.failed = {}

    def get(self, key, build):
        if key in self.failed:
            raise RuntimeError(f"build failed earlier: {self.failed[key]}")
        if key in self.items:
            mod, nb = self.items.pop(key)
            self.items[key] = (mod, nb)
            return mod, None
        try:
            mod, args = build()
        except Exception as e:  # noqa: BLE001
            self.failed[key] = one_line(e)
            raise
        nb = weight_bytes(mod)
        self.items[key] = (mod, nb)
        self.evict(keep=key)
        return mod, args

    def evict(self, keep=None, all_=False):
        import torch
        freed = False
        while self.items and (all_ or sum(nb for _, nb in self.items.values()) > self.cap):
            k = next(iter(self.items))
            if k == keep:
                if len(self.items) == 1:
                    break
                self.items[k] = self.items.pop(k)
                continue
            del self.items[k]
            freed = True
        if freed:
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
