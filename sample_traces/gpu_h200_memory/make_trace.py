"""How memory_pressure_empty_cache.json.gz was recorded (NVIDIA H200, torch 2.11.0+cu130, 2026-12-01):
`OUT=DIR python3 make_trace.py`. 90 % of the device is held by one tensor; every step runs a new batch shape
through four fp32 Linear+ReLU layers, reads the loss on the host, then `torch.cuda.empty_cache()` hands the
cached blocks back, so the next step calls cudaMalloc/cudaFree again. The run printed: held 125.82 GiB,
max reserved 126.13 GiB of 139.80 GiB."""
import gzip
import os
import shutil

import torch
from torch.profiler import ProfilerActivity as A
from torch.profiler import profile, schedule

out = os.environ["OUT"]
free, total = torch.cuda.mem_get_info()
hold = torch.empty(int(total * 0.90), dtype=torch.uint8, device="cuda")  # 90 % of the device held
w = torch.randn(4096, 4096, device="cuda")


def step(i):
    n = 2048 + 512 * (i % 4)  # a new batch shape every step
    x = torch.randn(n, 4096, device="cuda")
    for _ in range(4):
        x = torch.relu(x @ w)
    x.sum().item()
    torch.cuda.empty_cache()  # hand cached blocks back: the next step calls cudaMalloc again


for i in range(3):
    step(i)
torch.cuda.synchronize()


def ready(p):
    f = out + "/memory_pressure_empty_cache.json"
    p.export_chrome_trace(f)
    with open(f, "rb") as a, gzip.open(f + ".gz", "wb") as b:
        shutil.copyfileobj(a, b)
    os.remove(f)


with profile(activities=[A.CPU, A.CUDA], profile_memory=True, record_shapes=True,
             schedule=schedule(wait=1, warmup=1, active=3), on_trace_ready=ready) as p:
    for i in range(6):
        step(i)
        p.step()
print(torch.__version__, torch.cuda.get_device_name(), "held GiB", hold.numel() / 2**30,
      "max reserved GiB", torch.cuda.max_memory_reserved() / 2**30, "total GiB", total / 2**30)
