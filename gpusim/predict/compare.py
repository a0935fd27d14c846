"""One model on several GPUs: the question people ask before renting one.

The graph is captured once and predicted on each GPU with the same host profile, so the
table compares GPUs, not guessed hosts. Speed-ups are over the first GPU named.
"""

from __future__ import annotations

from gpusim.util.errors import UserError
from gpusim.util.fmt import table


def parse_gpus(text: str) -> list[str]:
    """``"a100,v100"`` -> ``["a100", "v100"]``; one clear error for empty or repeated names."""
    names = [g.strip() for g in str(text).split(",")]
    if any(not g for g in names):
        raise UserError(f"--gpu {text!r} has an empty name; give GPU names separated by commas "
                        "(e.g. a100,v100,h100)")
    seen = set()
    for g in names:
        if g.lower() in seen:
            raise UserError(f"--gpu {text!r} names {g} twice; name each GPU once")
        seen.add(g.lower())
    return names


def compare(graph, gpus, mode: str = "eager", **kw) -> list:
    """Predict ``graph`` on each GPU of ``gpus`` (names, aliases or spec paths), in order;
    ``kw`` goes to :func:`gpusim.predict` (the host, say) unchanged for every GPU."""
    from gpusim.predict.pipeline import predict
    return [predict(graph, gpu=g, mode=mode, **kw) for g in gpus]


def compare_rows(preds) -> list[dict]:
    """One row per GPU: device and end-to-end time, memory, whether it fits, and the
    speed-up over the first GPU (end to end; device time where the first does not fit)."""
    from gpusim.sim.memory import capacity_bytes
    base = preds[0]
    rows = []
    for p in preds:
        need = p.memory.total_bytes
        rows.append({
            "gpu": p.gpu, "name": p.spec.display_name, "fits": p.fits,
            "device_us": p.device_us, "end_to_end_us": p.end_to_end_us,
            "memory_bytes": need, "capacity_bytes": capacity_bytes(p.spec),
            "speedup_device": base.device_us / p.device_us if p.device_us else float("nan"),
            "speedup_end_to_end": (base.end_to_end_us / p.end_to_end_us
                                   if p.end_to_end_us else float("nan")),
        })
    return rows


def compare_text(preds) -> str:
    """The comparison table ``gpusim predict MODEL --gpu a,b,c`` prints."""
    rows = compare_rows(preds)
    first = rows[0]["gpu"]
    body = [[r["gpu"], r["name"], f"{r['device_us']:.1f}", f"{r['end_to_end_us']:.1f}",
             f"{r['memory_bytes'] / 2**30:.2f} / {r['capacity_bytes'] / 2**30:.0f}",
             "yes" if r["fits"] else "NO",
             f"{r['speedup_device']:.2f}x", f"{r['speedup_end_to_end']:.2f}x"] for r in rows]
    p0 = preds[0]
    head = (f"{p0.graph.name}, mode {p0.mode}: {len(preds)} GPUs "
            f"(speed-up over {first}; memory = weights + inputs + activation peak, GiB)")
    return head + "\n" + table(body, ["gpu", "GPU", "device us", "end-to-end us",
                                      "memory GiB", "fits", "device x", "end-to-end x"],
                               "llrrrlrr")
