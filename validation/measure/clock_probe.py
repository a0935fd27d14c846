"""The SM clock and board power while a large bf16 GEMM runs back to back for 15 s, against
the idle clock, and then while a 1 GiB device copy runs back to back for 10 s: whether a
GPU's large-GEMM fraction of its datasheet peak is set by its power limit (the clock it can
hold under load) rather than by its tensor rate alone, and whether memory-bound work sees
the same clock. Prints the sustained TFLOP/s and GB/s and the nvidia-smi samples (SM MHz,
max SM MHz, W, limit W, C).

    python3 validation/measure/clock_probe.py > validation/sweeps/<gpu>-gemm-clocks.txt
"""
import subprocess, threading, time, torch
def sample(out, stop):
    while not stop.is_set():
        r = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.strip()
        out.append(r); time.sleep(0.5)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
for _ in range(5): a @ b
torch.cuda.synchronize()
idle = []; s = threading.Event(); t = threading.Thread(target=sample, args=(idle, s)); t.start(); time.sleep(2); s.set(); t.join()
load = []; s = threading.Event(); t = threading.Thread(target=sample, args=(load, s)); t.start()
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
t_end = time.time() + 15; n = 0; e0.record()
while time.time() < t_end:
    for _ in range(20): a @ b
    n += 20; torch.cuda.synchronize()
e1.record(); torch.cuda.synchronize(); s.set(); t.join()
ms = e0.elapsed_time(e1)
print("device", torch.cuda.get_device_name(), "torch", torch.__version__)
print("bf16 8192^3 matmul sustained TFLOP/s", round(2 * 8192**3 * n / (ms / 1e3) / 1e12, 1), "over", n, "GEMMs")
print("idle (sm MHz, max sm MHz, W, limit W, C):", idle)
print("under load:", load)
x = torch.empty(2**28, device="cuda", dtype=torch.float32); y = torch.randn_like(x)
for _ in range(5): x.copy_(y)
torch.cuda.synchronize()
copy = []; s = threading.Event(); t = threading.Thread(target=sample, args=(copy, s)); t.start()
e0.record(); t_end = time.time() + 10; n = 0
while time.time() < t_end:
    for _ in range(50): x.copy_(y)
    n += 50; torch.cuda.synchronize()
e1.record(); torch.cuda.synchronize(); s.set(); t.join()
ms = e0.elapsed_time(e1)
print("1 GiB copy sustained GB/s (read + write)", round(2 * x.numel() * 4 * n / (ms / 1e3) / 1e9), "over", n, "copies")
print("under the copy:", copy)

