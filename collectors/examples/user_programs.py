"""Held-out programs written the way users write them, on models no twin of traceview's was developed on.

Each `--prog` is one training (or serving) loop as a tutorial would write it, with no traceview-specific code
except where a loop has no optimizer step (generation marks its steps with `collectors.steps`). They are
recorded with `traceview collect` and analysed as they come: the replay's fidelity, the profiler-cost estimate
against the collector's unprofiled step, and whether the verdict and findings are what an engineer would say.

- `t5`: HF T5 (t5-small sizes) sequence-to-sequence training, bf16 autocast, fused AdamW;
- `distilbert_fp32`: HF DistilBERT sequence classification in FP32 (no autocast, TF32 off);
- `swin_bf16`: torchvision Swin-T, bf16 autocast, SGD with momentum;
- `regnet_loader`: torchvision RegNetY-800MF fed by a DataLoader whose 2 workers crop and normalise uint8
  images in NumPy (the input pipeline a user writes first);
- `lstm`: a two-layer LSTM language model (cuDNN RNN kernels), FP32, Adam;
- `opt_generate`: HF OPT-125M-sized greedy generation at batch 1 with the default dynamic cache;
- `lightning`: a Lightning `Trainer.fit` of a small transformer classifier, bf16-mixed, CPU tensors moved by
  Lightning each step;
- `mixer_compile`: an MLP-Mixer trained under `torch.compile` (default mode).

    traceview collect -- python -m collectors.examples.user_programs --prog t5
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.nn import functional as F

#: `--time`: every step's end as a CUDA event, the steps' times printed at the end (`STEP_MS [...]`): the program
#: alone, without the collector, to compare with what the collector measured
EVENTS: list = []


def mark() -> None:
    if EVENTS is not None and TIMING:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        EVENTS.append(e)


TIMING = False
#: the fixes the analyzer priced, as options: `--precision high` (TF32) and `--amp` (bf16 autocast) for the FP32
#: programs, `--workers N` for the DataLoader-fed one (each run alone with `--time`: a fixed twin)
OPTS: dict = {"amp": False, "workers": 2}

PROGS = ("t5", "distilbert_fp32", "swin_bf16", "regnet_loader", "lstm", "opt_generate", "lightning",
         "mixer_compile")


def train(model: nn.Module, opt: torch.optim.Optimizer, loss_of, steps: int, amp: bool) -> None:
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = loss_of(model)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mark()


def t5(steps: int) -> None:
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(d_model=512, d_ff=2048, num_layers=6, num_heads=8, vocab_size=32128, decoder_start_token_id=0,
                   pad_token_id=0)
    model = T5ForConditionalGeneration(cfg).cuda()
    src = torch.randint(0, 32128, (16, 256), device="cuda")
    tgt = torch.randint(0, 32128, (16, 64), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    train(model, opt, lambda m: m(input_ids=src, labels=tgt).loss, steps, amp=True)


def distilbert_fp32(steps: int) -> None:
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    model = DistilBertForSequenceClassification(DistilBertConfig(num_labels=4)).cuda()
    ids = torch.randint(0, 30522, (32, 256), device="cuda")
    labels = torch.randint(0, 4, (32,), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
    train(model, opt, lambda m: m(input_ids=ids, labels=labels).loss, steps, amp=OPTS["amp"])


def swin_bf16(steps: int) -> None:
    import torchvision

    model = torchvision.models.swin_t().cuda()
    x = torch.randn(32, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (32,), device="cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    train(model, opt, lambda m: F.cross_entropy(m(x), y), steps, amp=True)


class Crops(torch.utils.data.Dataset):
    """uint8 images cropped, flipped and normalised in NumPy, as a first input pipeline does."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        import numpy as np

        rng = np.random.default_rng(i)
        img = rng.integers(0, 255, (256, 256, 3), dtype=np.uint8)
        y0, x0 = rng.integers(0, 32, 2)
        crop = img[y0:y0 + 224, x0:x0 + 224]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        x = (crop.astype(np.float32) / 255.0 - 0.45) / 0.225
        return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1))), int(i % 1000)


def regnet_loader(steps: int) -> None:
    import torchvision

    model = torchvision.models.regnet_y_800mf().cuda()
    loader = torch.utils.data.DataLoader(Crops(64 * (steps + 4)), batch_size=64, num_workers=OPTS["workers"],
                                         shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mark()


class LSTMLM(nn.Module):
    def __init__(self, vocab: int = 10000, d: int = 512, hidden: int = 1024) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.rnn = nn.LSTM(d, hidden, num_layers=2, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.emb(ids))
        return self.out(h)


def lstm(steps: int) -> None:
    model = LSTMLM().cuda()
    ids = torch.randint(0, 10000, (32, 129), device="cuda")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    train(model, opt, lambda m: F.cross_entropy(m(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten()), steps,
          OPTS["amp"])


def opt_generate(steps: int) -> None:
    from transformers import OPTConfig, OPTForCausalLM

    import collectors

    model = OPTForCausalLM(OPTConfig()).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, 50272, (1, 64), device="cuda")
    kw = {"max_new_tokens": 48, "min_new_tokens": 48, "do_sample": False, "pad_token_id": 1}
    with torch.no_grad():
        model.generate(ids, **kw)
        for _ in collectors.steps(range(steps)):
            model.generate(ids, **kw)
            mark()


def lightning(steps: int) -> None:
    import lightning as L

    class Classifier(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(384, 6, 1536, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 4)
            self.head = nn.Linear(384, 10)

        def training_step(self, batch: list[torch.Tensor], _: int) -> torch.Tensor:
            x, y = batch
            return F.cross_entropy(self.head(self.enc(x).mean(1)), y)

        def on_train_batch_end(self, *_: object) -> None:
            mark()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=3e-4)

    data = torch.utils.data.TensorDataset(torch.randn(32 * (steps + 2), 128, 384), torch.randint(0, 10, (32 * (steps + 2),)))
    trainer = L.Trainer(accelerator="gpu", devices=1, max_steps=steps, precision="bf16-mixed", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Classifier(), torch.utils.data.DataLoader(data, batch_size=32))


class Mixer(nn.Module):
    def __init__(self, patches: int = 196, d: int = 512, depth: int = 8) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, d, 16, 16)
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"n1": nn.LayerNorm(d), "tok": nn.Sequential(nn.Linear(patches, 256), nn.GELU(), nn.Linear(256, patches)),
                           "n2": nn.LayerNorm(d), "ch": nn.Sequential(nn.Linear(d, 2048), nn.GELU(), nn.Linear(2048, d))})
            for _ in range(depth))
        self.head = nn.Linear(d, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x).flatten(2).transpose(1, 2)
        for b in self.blocks:
            x = x + b["tok"](b["n1"](x).transpose(1, 2)).transpose(1, 2)
            x = x + b["ch"](b["n2"](x))
        return self.head(x.mean(1))


def mixer_compile(steps: int) -> None:
    model = torch.compile(Mixer().cuda())
    x = torch.randn(64, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train(model, opt, lambda m: F.cross_entropy(m(x), y), steps, amp=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prog", choices=PROGS, required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--time", action="store_true", help="print every step's time (CUDA events)")
    ap.add_argument("--precision", choices=["highest", "high"], default="highest", help="float32 matmul precision")
    ap.add_argument("--amp", action="store_true", help="bf16 autocast for the FP32 programs (distilbert_fp32, lstm)")
    ap.add_argument("--workers", type=int, default=2, help="regnet_loader's DataLoader workers")
    args = ap.parse_args()
    torch.set_float32_matmul_precision(args.precision)
    OPTS.update(amp=args.amp, workers=args.workers)
    global TIMING
    TIMING = args.time
    torch.manual_seed(0)
    mark()
    globals()[args.prog](args.steps)
    if TIMING:
        torch.cuda.synchronize()
        print("STEP_MS", [round(a.elapsed_time(b), 2) for a, b in zip(EVENTS, EVENTS[1:], strict=False)])


if __name__ == "__main__":
    main()
