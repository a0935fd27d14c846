"""PyTorch's own memory tools on the data-parallel steps of dist_steps.py, run the way torchtitan's memory
estimation runs them: a fake process group (``FakeStore``) of ``world`` ranks, the device mesh made before
``FakeTensorMode``, the model built on ``meta`` and turned into fake ``cuda`` tensors (validation/measure/fake_cuda.py),
wrapped (``fully_shard`` per decoder layer and the root; ``DistributedDataParallel``), then two training steps inside
the tracker (``FSDPMemTracker(mod, optm)`` with ``track_inputs`` for FSDP2, ``MemTracker`` with ``track_external``
for DDP), its module statistics reset after the first; the peak is the tracker's ``Total`` on the cuda device.

    python3 -m validation.measure.dist_memtracker --out validation/results/dist/memtracker-<where>.jsonl \\
        [--cases ddp_resnet50,ddp_gpt2,fsdp_llama1b] [--worlds 1,2,4]

Each (case, world) runs in its own process (a fake group per process), a row per attempt: ``peak_bytes`` or
``error`` (type and first line), where it ran (GPU name, or CPU-only), torch's version, seconds. DDP's constructor
checks parameters across ranks on their data (``_verify_params_across_processes``), which fake tensors have not: a
second attempt skips that check (``workaround``). Lab code: never imported by gpusim.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

CASES = ("ddp_resnet50", "ddp_gpt2", "fsdp_llama1b")


def where() -> str:
    import torch
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"CPU only ({platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__})"


def build(case: str, world: int, fm, mesh):
    """(model, optimizer, inputs, step) of ``case`` on fake cuda tensors."""
    import torch
    import torch.nn.functional as F

    from validation.measure.dist_steps import llama1b_config
    from validation.measure.fake_cuda import fake_cuda
    with torch.device("meta"):
        if case == "ddp_resnet50":
            import torchvision
            model = torchvision.models.resnet50()
            args = (torch.empty(64, 3, 224, 224), torch.zeros(64, dtype=torch.long))
        elif case == "ddp_gpt2":
            from transformers import GPT2Config, GPT2LMHeadModel
            model = GPT2LMHeadModel(GPT2Config())
            args = (torch.zeros(8, 1024, dtype=torch.long),)
        else:
            from transformers import LlamaForCausalLM
            model = LlamaForCausalLM(llama1b_config())
            args = (torch.zeros(2, 1024, dtype=torch.long),)
    model, args = fake_cuda(model, args, fm)
    with fm:
        if case.startswith("fsdp"):
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for layer in model.model.layers:
                fully_shard(layer, mp_policy=mp, mesh=mesh)
            fully_shard(model, mp_policy=mp, mesh=mesh)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

            def step(ids):
                model(input_ids=ids, labels=ids).loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            return model, opt, args, step
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
        if case == "ddp_resnet50":
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

            def step(x, y):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

            def step(ids):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        return model, opt, args, step


def run_one(case: str, world: int, workaround: bool) -> dict:
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    mesh = None
    if case.startswith("fsdp"):
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cuda", (world,))
    if workaround:
        import torch.nn.parallel.distributed as ddp_mod
        ddp_mod.dist._verify_params_across_processes = lambda *a, **k: None
    fm = FakeTensorMode()
    model, opt, args, step = build(case, world, fm, mesh)
    with fm:
        if case.startswith("fsdp"):
            from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
            mt = FSDPMemTracker(mod=model, optm=opt)
            mt.track_inputs(args)
        else:
            from torch.distributed._tools.mem_tracker import MemTracker
            mt = MemTracker()
            mt.track_external(model, opt, *args)
        with mt:
            for i in range(2):
                step(*args)
                if i == 0:
                    mt.reset_mod_stats()
        snap = mt.get_tracker_snapshot("peak")
    peak = sum(s.get("Total", 0) for d, s in snap.items() if getattr(d, "type", "") == "cuda")
    return {"peak_bytes": int(peak)}


def attempt(case: str, world: int, workaround: bool, timeout_s: int) -> dict:
    """One run in a fresh process (a fake group per process)."""
    t0 = time.time()
    cmd = [sys.executable, "-m", "validation.measure.dist_memtracker", "--one", case, str(world)]
    if workaround:
        cmd.append("--workaround")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        row = json.loads(lines[-1]) if lines else {"error": "no result: " + (p.stderr.strip().splitlines() or
                                                                              ["(no output)"])[-1][:200]}
    except subprocess.TimeoutExpired:
        row = {"error": f"TimeoutExpired: over {timeout_s} s"}
    row.update({"kind": "memtracker", "case": case, "world": world,
                "tool": "FSDPMemTracker" if case.startswith("fsdp") else "MemTracker",
                "workaround": "DDP's _verify_params_across_processes skipped" if workaround else None,
                "seconds": round(time.time() - t0, 1)})
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--worlds", default="1,2,4")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--one", nargs=2, metavar=("CASE", "WORLD"), help=argparse.SUPPRESS)
    ap.add_argument("--workaround", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        try:
            row = run_one(a.one[0], int(a.one[1]), a.workaround)
        except Exception as e:  # noqa: BLE001 - the row says why the tool failed
            msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
            row = {"error": f"{type(e).__name__}: {msg}"}
        print(json.dumps(row), flush=True)
        return 0
    if not a.out:
        ap.error("--out is required")
    import torch
    env = {"kind": "environment", "where": where(), "torch": torch.__version__,
           "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "command": "python3 -m validation.measure.dist_memtracker " + " ".join(argv or sys.argv[1:])}
    with open(a.out, "a") as f:
        f.write(json.dumps(env) + "\n")
    for case in a.cases.split(","):
        for w in (int(x) for x in a.worlds.split(",")):
            rows = [attempt(case, w, False, a.timeout)]
            if "error" in rows[0] and case.startswith("ddp"):
                rows.append(attempt(case, w, True, a.timeout))
            with open(a.out, "a") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
                    print(case, w, r.get("peak_bytes", r.get("error")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
