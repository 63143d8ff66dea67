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

A second set (2026-12-06), each with the fixed twin `--fixed` runs where the program has one:

- `resnet_fp16_scaler`: torchvision ResNet-50, fp16 autocast with a `GradScaler`, gradients unscaled and clipped
  (`--fixed`: bf16 autocast, no scaler);
- `hf_trainer`: a Hugging Face `Trainer` fine-tuning a 6-layer BERT classifier, `bf16=True`, the library's
  defaults otherwise (`--fixed`: `logging_nan_inf_filter=False`);
- `gpt2_accum_item`: HF GPT-2 (6 layers) with 4-step gradient accumulation that logs `loss.item()` every
  micro-batch (`--fixed`: accumulates `loss.detach()` and reads it once per optimizer step);
- `gpt2_ckpt`: HF GPT-2 (6 layers) trained with gradient checkpointing (`--fixed`: without it, for reference);
- `bert_dynpad`: HF BERT (6 layers) fed batches padded to their own longest sequence (lengths 32-256;
  `--fixed`: padded to a multiple of 64, four shapes);
- `compile_varlen`: a compiled transformer encoder fed four sequence lengths in turn (dynamic shapes);
- `resnet_varsize`: torchvision ResNet-50 with `cudnn.benchmark = True` fed images of a random size (160-288
  pixels) each batch (`--fixed`: every batch resized to 224);
- `sdpa_varlen` (synthetic): one bf16 QKV projection and causal SDPA, a random sequence length (64-512) each step
  (`--fixed`: padded to a multiple of 128).

A third set (2026-12-06), each with its fixed twin `--fixed` where it has one:

- `llama_eager`: HF Llama (4 layers, GQA) trained with `attn_implementation="eager"`, bf16 autocast, batch 8 x
  1024 (`--fixed`: `"sdpa"`);
- `ema_loop`: torchvision ResNet-50 with a timm-style EMA of its weights, updated tensor by tensor in a Python
  loop over the state dict (`--fixed`: `torch._foreach_lerp_` over the float tensors);
- `loader_pil`: torchvision ResNet-18 fed by a DataLoader whose workers (`--workers`, default 2) run torchvision's
  PIL transforms (random resized crop, flip, to-tensor, normalise) on 256 x 256 images;
- `per_sample_loss`: torchvision ResNet-18 whose loss is summed sample by sample in a Python loop (`--fixed`:
  one batched `cross_entropy`);
- `moe_naive`: a 4-layer transformer whose mixture-of-experts FFN dispatches tokens expert by expert with boolean
  indexing (`--fixed`: a fixed capacity per expert, scattered with one-hot positions and run as one `bmm`).

A fourth set (2026-12-06):

- `llama_generate`: HF Llama (8 layers, bf16) greedy generation at batch 1, 32 new tokens, the default dynamic
  cache (`--fixed`: `cache_implementation="static"` and the forward compiled with `mode="reduce-overhead"`);
- `resnet_bf16_nchw`: torchvision ResNet-50 under bf16 autocast in the default NCHW layout (`--fixed`:
  `channels_last` model and inputs);
- `gpu_augment_loop`: uint8 images already on the GPU, cropped, flipped at random and normalised image by image
  in a Python loop before a ResNet-18 (`--fixed`: the same augmentation batched with gathered crop indices).

A fifth set (2026-12-06), each with its fixed twin `--fixed`:

- `roberta_eager`: HF RoBERTa (8 layers) masked-LM training with `attn_implementation="eager"`, bf16 autocast,
  batch 16 x 384 with an attention mask (`--fixed`: `"sdpa"`);
- `opt_adamw_loop`: HF OPT (8 layers, 768 wide) causal-LM training, bf16 autocast, `AdamW(foreach=False)`
  (`--fixed`: `fused=True`);
- `resnet34_empty_cache`: torchvision ResNet-34, bf16 autocast, channels_last, `torch.cuda.empty_cache()` after
  every step (`--fixed`: without it);
- `vgg_fp32`: torchvision VGG-11-BN trained in FP32 (`--fixed`: bf16 autocast and channels_last);
- `resnext_bf16_nchw`: torchvision ResNeXt-50 32x4d under bf16 autocast in NCHW (`--fixed`: channels_last);
- `cutmix_loop`: a per-image CutMix on the GPU in a Python loop, pasting a random box from another image with
  probability 0.5, before a ResNet-18 (`--fixed`: the same boxes as one batched mask).

A sixth set (2026-12-06), each with its fixed twin `--fixed`:

- `hf_vit_eager`: HF ViT-B/16 image classification, bf16 autocast, batch 64, `attn_implementation="eager"`
  (`--fixed`: `"sdpa"`);
- `convnext_adamw_loop`: torchvision ConvNeXt-T, bf16 autocast, channels_last, `AdamW(foreach=False)`
  (`--fixed`: `fused=True`);
- `swin_empty_cache`: torchvision Swin-T, bf16 autocast, `torch.cuda.empty_cache()` after every step (`--fixed`:
  without it);
- `convnext_bf16_nchw`: torchvision ConvNeXt-T under bf16 autocast in NCHW, SGD (`--fixed`: channels_last).

A seventh set (2026-12-06, session 61), each with its fixed twin `--fixed`:

- `bart_empty_cache`: HF BART (6 + 6 layers, 768 wide) summarisation-style training, bf16 autocast, batch 16 x 256,
  `torch.cuda.empty_cache()` after every step (`--fixed`: without it);
- `pythia_adamw_loop`: HF GPT-NeoX (Pythia-160M sizes: 12 layers, 768 wide) causal-LM training, bf16 autocast,
  `AdamW(foreach=False)` (`--fixed`: `fused=True`);
- `qwen2_eager`: HF Qwen2 (6 layers, 1024 wide, GQA 16/4 heads) causal-LM training, bf16 autocast, batch 4 x 1024,
  `attn_implementation="eager"` (`--fixed`: `"sdpa"`);
- `electra_fp32`: HF ELECTRA-base discriminator pre-training in FP32, batch 32 x 128 (`--fixed`: bf16 autocast);
- `mobilenetv2_fp32`: torchvision MobileNetV2 trained in FP32, batch 64 (`--fixed`: bf16 autocast and
  channels_last).

An eighth set (2026-12-07, session 63), each with its fixed twin `--fixed`, recorded before any rule saw them:

- `pythia_eager`: HF GPT-NeoX (Pythia-160M sizes) causal-LM training, bf16 autocast, batch 8 x 512,
  `attn_implementation="eager"` (`--fixed`: `"sdpa"`);
- `wide_resnet_fp32`: torchvision Wide ResNet-50-2 trained in FP32, batch 32 (`--fixed`: bf16 autocast and
  channels_last);
- `t5_item`: HF T5 (t5-small sizes), bf16 autocast, `loss.item()` summed every step (`--fixed`: `loss.detach()`
  summed on the GPU);
- `resnet50_sgd_loop`: torchvision ResNet-50, bf16, channels_last, `SGD(momentum=0.9, foreach=False)` (`--fixed`:
  `foreach=True`);
- `regnet_empty_cache`: torchvision RegNetY-1.6GF, bf16 autocast, `torch.cuda.empty_cache()` after every step
  (`--fixed`: without it).

A ninth set (2026-12-07, session 68), each with its fixed twin `--fixed`, recorded before any rule saw them: serving
loops with no optimizer (their steps marked with `collectors.steps`), two models at once, a speech model and a
prefetching input pipeline:

- `bert_infer_fp32`: HF BERT-base sequence classification served in FP32 under `torch.inference_mode()`, batch 64
  x 128, each batch's predicted labels copied to the host (`--fixed`: bf16 autocast);
- `resnet50_infer_fp32`: torchvision ResNet-50 inference in FP32, batch 64, predictions copied to the host
  (`--fixed`: bf16 autocast and channels_last);
- `dcgan_fp32`: a DCGAN (64 x 64 images, transposed-conv generator, conv discriminator) trained in FP32 with two
  Adam optimizers, discriminator then generator each step (`--fixed`: bf16 autocast and channels_last);
- `whisper_eager`: HF Whisper (base sizes: 6 + 6 layers, 512 wide) speech-to-text training on 30 s of random
  log-mel features, bf16 autocast, batch 8, `attn_implementation="eager"` (`--fixed`: `"sdpa"`): self-attention
  over 1500 audio frames and cross-attention from 64 text tokens to them;
- `prefetch_stream`: torchvision ResNet-18 (bf16, channels_last, batch 64) fed pinned host batches copied on a side
  stream one step ahead (`non_blocking`, `wait_stream`, `record_stream`) — a negative control: its input costs
  nothing (`--fixed`: the batches already on the GPU).

A tenth set (2026-12-07, session 69), each with its fixed twin, recorded before any rule saw them: a segmentation
network, a recommender's embedding tables, a recurrent cell unrolled in Python, a loop that times its own steps and
an adapter fine-tune:

- `unet_fp32`: a four-level UNet (max-pool down, `ConvTranspose2d` up, skip concatenation) segmenting 16 images of
  256 x 256 into 2 classes in FP32, fused AdamW (`--fixed`: bf16 autocast and channels_last);
- `dlrm_embed`: a DLRM-style recommender: 8 `EmbeddingBag` tables of 500 000 x 64 (dense gradients), a bottom and a
  top MLP, pairwise dot interactions, batch 4096, bf16 autocast, AdamW with its default implementation (`--fixed`:
  `fused=True`);
- `gru_cell_loop`: a `GRUCell` sequence tagger unrolled over 64 time steps in a Python loop, batch 32, bf16
  autocast, fused AdamW (the fix: `--cuda-graph`, the whole step in one CUDA graph);
- `sync_timing_loop`: torchvision ResNet-18 (bf16, channels_last, batch 32, SGD) whose loop times each step as
  tutorials do, `torch.cuda.synchronize()` before `time.perf_counter()` (`--fixed`: no synchronize);
- `lora_llama`: HF Llama (4 layers, 1024 wide, SDPA) fine-tuned with rank-16 LoRA adapters on its attention
  projections, base weights frozen, bf16 autocast, batch 8 x 512, AdamW with its default implementation over the
  adapters (`--fixed`: `fused=True`).

An eleventh set (2026-12-07, session 69), recorded to check the tenth set's two fixes on programs they were not
developed on: the optimizer's default (foreach) path on models with many parameter tensors, whose tensor lists the
profiler records without shapes, and a second recurrent cell:

- `gpt2m_adamw_default`: HF GPT-2 medium sizes (24 layers, 1024 wide), bf16 autocast, AdamW's default path
  (`--fixed`: `fused=True`);
- `llama_bf16_adamw`: HF Llama (8 layers, 2048 wide) with bf16 weights (no autocast), AdamW's default path on the
  bf16 parameters (`--fixed`: `fused=True`);
- `resnet50_sgd_default`: torchvision ResNet-50 (bf16, channels_last), SGD with momentum on its default path
  (`--fixed`: `fused=True`);
- `effnet_adamw_default`: torchvision EfficientNet-B0 (213 small parameter tensors), AdamW's default path
  (`--fixed`: `fused=True`);
- `lstm_cell_loop`: an `LSTMCell` language model unrolled over 32 tokens in Python (the fix: `--cuda-graph`).

    traceview collect -- python -m collectors.examples.user_programs --prog t5
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.nn import functional as F

from collectors.examples._common import capture_step

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
OPTS: dict = {"amp": False, "workers": 2, "fixed": False, "static_only": False, "pad_vocab": False, "cuda_graph": False,
              "read": None, "sgd": None, "compile": False}

PROGS = ("t5", "distilbert_fp32", "swin_bf16", "regnet_loader", "lstm", "opt_generate", "lightning",
         "mixer_compile", "resnet_fp16_scaler", "hf_trainer", "gpt2_accum_item", "gpt2_ckpt", "bert_dynpad",
         "compile_varlen", "resnet_varsize", "sdpa_varlen", "llama_eager", "ema_loop", "loader_pil",
         "per_sample_loss", "moe_naive", "llama_generate", "resnet_bf16_nchw", "gpu_augment_loop",
         "roberta_eager", "opt_adamw_loop", "resnet34_empty_cache", "vgg_fp32", "resnext_bf16_nchw", "cutmix_loop",
         "hf_vit_eager", "convnext_adamw_loop", "swin_empty_cache", "convnext_bf16_nchw",
         "bart_empty_cache", "pythia_adamw_loop", "qwen2_eager", "electra_fp32", "mobilenetv2_fp32",
         "pythia_eager", "wide_resnet_fp32", "t5_item", "resnet50_sgd_loop", "regnet_empty_cache",
         "bert_infer_fp32", "resnet50_infer_fp32", "dcgan_fp32", "whisper_eager", "prefetch_stream",
         "unet_fp32", "dlrm_embed", "gru_cell_loop", "sync_timing_loop", "lora_llama",
         "gpt2m_adamw_default", "llama_bf16_adamw", "resnet50_sgd_default", "effnet_adamw_default", "lstm_cell_loop")


def train(model: nn.Module, opt: torch.optim.Optimizer, loss_of, steps: int, amp: bool) -> None:
    if OPTS["cuda_graph"]:
        graphed(model, opt, loss_of, steps, amp)
        return
    if OPTS["compile"]:  # (TV201's fix: Inductor fuses the elementwise chains; the first steps compile)
        model = torch.compile(model)
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = loss_of(model)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mark()


def graphed(model: nn.Module, opt: torch.optim.Optimizer, loss_of, steps: int, amp: bool) -> None:
    """`--cuda-graph`: the same training step (forward, backward, optimizer) captured once in a CUDA graph and
    replayed `steps` times: what TV101 (launch-bound) prices on a step whose GPU waits for the host's launches.
    Adam's step counters on the GPU (`capturable`)."""
    for g in opt.param_groups:
        if "capturable" in g:
            g["capturable"] = True

    graph, _ = capture_step(model, loss_of, opt, amp)
    for _ in range(steps):
        graph.replay()
        mark()


def _vision(arch: str, batch: int, fmt: torch.memory_format = torch.contiguous_format):
    """torchvision's `arch` (random weights) on the GPU in `fmt`, `batch` random 224 x 224 images in `fmt`, labels."""
    import torchvision

    model = getattr(torchvision.models, arch)().cuda().to(memory_format=fmt)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=fmt)
    return model, x, torch.randint(0, 1000, (batch,), device="cuda")


def _layout_twin(arch: str, steps: int) -> None:
    """`arch` at batch 64 under bf16 autocast with SGD, in NCHW (`--fixed`: channels_last model and inputs)."""
    model, x, y = _vision(arch, 64, torch.channels_last if OPTS["fixed"] else torch.contiguous_format)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train(model, opt, lambda m: F.cross_entropy(m(x), y), steps, amp=True)


def _empty_cache_each_step(model: nn.Module, loss_of, opt: torch.optim.Optimizer, steps: int) -> None:
    """bf16 training that calls `torch.cuda.empty_cache()` after every step ("free the memory", as forum answers
    suggest; `--fixed`: without it, as `train`)."""
    if OPTS["fixed"]:
        train(model, opt, loss_of, steps, amp=True)
        return
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_of(model)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del loss
        torch.cuda.empty_cache()
        mark()


def _t5(batch: int, src_len: int, tgt_len: int):
    """HF T5 at t5-small sizes on the GPU, random source/target ids and fused AdamW: (model, src, tgt, opt)."""
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(d_model=512, d_ff=2048, num_layers=6, num_heads=8, vocab_size=32128, decoder_start_token_id=0,
                   pad_token_id=0)
    model = T5ForConditionalGeneration(cfg).cuda()
    src = torch.randint(0, 32128, (batch, src_len), device="cuda")
    tgt = torch.randint(0, 32128, (batch, tgt_len), device="cuda")
    return model, src, tgt, torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)


def t5(steps: int) -> None:
    model, src, tgt, opt = _t5(16, 256, 64)
    train(model, opt, lambda m: m(input_ids=src, labels=tgt).loss, steps, amp=True)


def distilbert_fp32(steps: int) -> None:
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    model = DistilBertForSequenceClassification(DistilBertConfig(num_labels=4)).cuda()
    ids = torch.randint(0, 30522, (32, 256), device="cuda")
    labels = torch.randint(0, 4, (32,), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
    train(model, opt, lambda m: m(input_ids=ids, labels=labels).loss, steps, amp=OPTS["amp"])


def swin_bf16(steps: int) -> None:
    model, x, y = _vision("swin_t", 32)
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


def resnet_fp16_scaler(steps: int) -> None:
    model, x, y = _vision("resnet50", 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    bf16 = OPTS["fixed"]
    scaler = torch.amp.GradScaler("cuda", enabled=not bf16)
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16 if bf16 else torch.float16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        mark()


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, labels: int) -> None:
        self.n, self.seq, self.labels = n, seq, labels

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 30522, (self.seq,), generator=g),
                "attention_mask": torch.ones(self.seq, dtype=torch.long), "labels": i % self.labels}


def hf_trainer(steps: int) -> None:
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    class Mark(TrainerCallback):
        def on_step_end(self, *_: object, **__: object) -> None:
            mark()

    model = BertForSequenceClassification(BertConfig(num_hidden_layers=6, num_labels=4))
    args = TrainingArguments(output_dir="/tmp/tv_hf_trainer", per_device_train_batch_size=32, max_steps=steps,
                             bf16=True, logging_steps=10, report_to=[], save_strategy="no", disable_tqdm=True,
                             logging_nan_inf_filter=not OPTS["fixed"])
    Trainer(model=model, args=args, train_dataset=_Tokens(32 * (steps + 2), 128, 4), callbacks=[Mark()]).train()


def _gpt2(layers: int = 6):
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_layer=layers, n_positions=1024)).cuda()


def gpt2_accum_item(steps: int) -> None:
    model = _gpt2()
    ids = torch.randint(0, 50257, (4, 512), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    logged = []
    for _ in range(steps):
        running = torch.zeros((), device="cuda") if OPTS["fixed"] else 0.0
        for _micro in range(4):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss / 4
            loss.backward()
            running += loss.detach() if OPTS["fixed"] else loss.item()
        opt.step()
        opt.zero_grad(set_to_none=True)
        logged.append(running)
        mark()
    if OPTS["fixed"]:
        logged = [float(v) for v in logged]


def gpt2_ckpt(steps: int) -> None:
    model = _gpt2()
    if not OPTS["fixed"]:
        model.gradient_checkpointing_enable()
    model.config.use_cache = False
    ids = torch.randint(0, 50257, (16, 512), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    train(model, opt, lambda m: m(input_ids=ids, labels=ids).loss, steps, amp=True)


def bert_dynpad(steps: int) -> None:
    from transformers import BertConfig, BertForSequenceClassification

    model = BertForSequenceClassification(BertConfig(num_hidden_layers=6, num_labels=4)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=True)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        lens = torch.randint(32, 257, (32,), generator=g)
        n = -(-int(lens.max()) // 64) * 64 if OPTS["fixed"] else int(lens.max())
        ids = torch.randint(0, 30522, (32, n), generator=g)
        mask = (torch.arange(n)[None, :] < lens[:, None]).long()
        batch = {"input_ids": ids.cuda(), "attention_mask": mask.cuda(), "labels": torch.randint(0, 4, (32,)).cuda()}
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mark()


def compile_varlen(steps: int) -> None:
    layer = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    model = nn.Sequential(nn.Embedding(8000, 512), nn.TransformerEncoder(layer, 6), nn.Linear(512, 8000)).cuda()
    cmodel = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    batches = [torch.randint(0, 8000, (32, n), device="cuda") for n in (128, 192, 256, 160)]
    for s in range(steps):
        ids = batches[s % 4]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(cmodel(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mark()


def resnet_varsize(steps: int) -> None:
    import torchvision

    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        size = 224 if OPTS["fixed"] else int(torch.randint(20, 37, (1,), generator=g)) * 8
        x = torch.randn(32, 3, size, size, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (32,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mark()


def sdpa_varlen(steps: int) -> None:
    proj = nn.Linear(512, 3 * 512).cuda().to(torch.bfloat16)
    opt = torch.optim.SGD(proj.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        n = int(torch.randint(64, 513, (1,), generator=g))
        n = -(-n // 128) * 128 if OPTS["fixed"] else n
        x = torch.randn(16, n, 512, device="cuda", dtype=torch.bfloat16)
        q, k, v = proj(x).view(16, n, 3, 8, 64).permute(2, 0, 3, 1, 4)
        F.scaled_dot_product_attention(q, k, v, is_causal=True).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        mark()


def _gqa_lm_eager(family: str, layers: int, batch: int, steps: int) -> None:
    """HF `family` (Llama or Qwen2: 1024 wide, GQA 16/4 heads) causal-LM training at `layers` layers, batch x 1024
    tokens, bf16 autocast, `attn_implementation="eager"` (`--fixed`: `"sdpa"`)."""
    import transformers

    cfg = getattr(transformers, f"{family}Config")(
        vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=layers, num_attention_heads=16,
        num_key_value_heads=4, max_position_embeddings=2048, attn_implementation="sdpa" if OPTS["fixed"] else "eager")
    model = getattr(transformers, f"{family}ForCausalLM")(cfg).cuda()
    print("attention:", model.config._attn_implementation)
    ids = torch.randint(0, 32000, (batch, 1024), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    train(model, opt, lambda m: m(input_ids=ids, labels=ids).loss, steps, amp=True)


def llama_eager(steps: int) -> None:
    _gqa_lm_eager("Llama", 4, 8, steps)


def ema_loop(steps: int) -> None:
    import copy

    import torchvision

    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    ema = copy.deepcopy(model).eval().requires_grad_(False)
    x = torch.randn(32, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (32,), device="cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    decay = 0.999
    pairs = [(e, m) for e, m in zip(ema.state_dict().values(), model.state_dict().values(), strict=True)
             if e.dtype.is_floating_point]
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            if OPTS["fixed"]:
                torch._foreach_lerp_([e for e, _ in pairs], [m for _, m in pairs], 1.0 - decay)
            else:  # timm's ModelEmaV2 before its foreach version
                for e, m in pairs:
                    e.copy_(e * decay + (1.0 - decay) * m)
        mark()


class _Images(torch.utils.data.Dataset):
    """256 x 256 RGB images made in the worker (the decode's stand-in) and augmented with torchvision's PIL
    transforms, as an ImageNet recipe does."""

    def __init__(self, n: int) -> None:
        import torchvision.transforms as T

        self.n = n
        self.tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                             T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import numpy as np
        from PIL import Image

        img = Image.fromarray(np.random.default_rng(i).integers(0, 256, (256, 256, 3), dtype=np.uint8))
        return self.tf(img), i % 1000


def loader_pil(steps: int) -> None:
    import torchvision

    model = torchvision.models.resnet18().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = torch.utils.data.DataLoader(_Images(64 * (steps + 4)), batch_size=64, shuffle=True,
                                         num_workers=OPTS["workers"], pin_memory=True, persistent_workers=True)
    for x, y in loader:
        x = x.cuda(non_blocking=True).to(memory_format=torch.channels_last)
        y = y.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mark()
        steps -= 1
        if steps == 0:
            break


def per_sample_loss(steps: int) -> None:
    model, x, y = _vision("resnet18", 64, torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
        if OPTS["fixed"]:
            loss = F.cross_entropy(logits.float(), y)
        else:  # a per-sample loss, as a detection or metric-learning loss is often first written
            loss = sum(F.cross_entropy(logits[i:i + 1].float(), y[i:i + 1]) for i in range(len(y))) / len(y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mark()


class _MoE(nn.Module):
    def __init__(self, d: int, experts: int = 8, hidden: int = 1024) -> None:
        super().__init__()
        self.gate = nn.Linear(d, experts)
        self.w1 = nn.Parameter(torch.randn(experts, d, hidden) * d ** -0.5)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, d) * hidden ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape, x = x.shape, x.reshape(-1, x.shape[-1])
        probs = self.gate(x).softmax(-1)
        weight, expert = probs.topk(2, dim=-1)
        out = torch.zeros_like(x)
        e_count = self.w1.shape[0]
        if not OPTS["fixed"]:
            for e in range(e_count):  # tokens routed to expert e: a data-dependent shape
                tok, slot = torch.where(expert == e)
                h = F.gelu(x[tok] @ self.w1[e]) @ self.w2[e]
                out.index_add_(0, tok, h * weight[tok, slot, None])
            return out.reshape(shape)
        cap = 2 * x.shape[0] // e_count  # a fixed capacity per expert (overflowing tokens dropped)
        onehot = F.one_hot(expert.reshape(-1), e_count)
        pos = (onehot.cumsum(0) - 1) * onehot
        keep = (pos < cap) & (onehot > 0)
        slot_of = (expert.reshape(-1) * cap + pos.sum(-1)).masked_fill(~keep.any(-1), e_count * cap)
        tok = torch.arange(x.shape[0], device=x.device).repeat_interleave(2)
        buf = x.new_zeros(e_count * cap + 1, x.shape[-1]).index_copy(0, slot_of, x[tok])
        h = torch.bmm(F.gelu(torch.bmm(buf[:-1].view(e_count, cap, -1), self.w1)), self.w2)
        h = torch.cat([h.reshape(e_count * cap, -1), h.new_zeros(1, h.shape[-1])])
        out.index_add_(0, tok, h[slot_of] * weight.reshape(-1, 1))
        return out.reshape(shape)


def moe_naive(steps: int) -> None:
    d = 512
    blocks = []
    for _ in range(4):
        blocks += [nn.LayerNorm(d), nn.MultiheadAttention(d, 8, batch_first=True), nn.LayerNorm(d), _MoE(d)]

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.blocks, self.head = nn.Embedding(8000, d), nn.ModuleList(blocks), nn.Linear(d, 8000)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            h = self.emb(ids)
            for i in range(0, len(self.blocks), 4):
                n1, att, n2, moe = self.blocks[i:i + 4]
                a = n1(h)
                h = h + att(a, a, a, need_weights=False)[0]
                h = h + moe(n2(h))
            return self.head(h)

    model = Net().cuda()
    ids = torch.randint(0, 8000, (16, 256), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    train(model, opt, lambda m: F.cross_entropy(m(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten()), steps,
          amp=True)


def llama_generate(steps: int) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    import collectors

    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                      num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048)
    model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, 32000, (1, 32), device="cuda")
    kw = {"max_new_tokens": 32, "min_new_tokens": 32, "do_sample": False, "pad_token_id": 0}
    if OPTS["fixed"]:
        kw["cache_implementation"] = "static"
        if not OPTS["static_only"]:  # (the recipe of Hugging Face's docs; `--static-only`: generate's own compile)
            model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for _ in range(3 if OPTS["fixed"] else 1):  # (the compiled forward's warm-up and graph capture)
            model.generate(ids, **kw)
        for _ in collectors.steps(range(steps)):
            model.generate(ids, **kw)
            mark()


def resnet_bf16_nchw(steps: int) -> None:
    _layout_twin("resnet50", steps)


_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)


def _augment_each(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Image by image, as a first GPU augmentation is written: a random 224 crop, a random flip, normalised."""
    import random

    mean = torch.tensor(_MEAN, device=x.device).view(3, 1, 1)
    std = torch.tensor(_STD, device=x.device).view(3, 1, 1)
    out = []
    for i in range(x.shape[0]):
        t, left = (int(v) for v in torch.randint(0, 33, (2,), generator=g))
        img = x[i, :, t:t + 224, left:left + 224]
        if random.random() < 0.5:
            img = img.flip(-1)
        out.append((img.float() / 255 - mean) / std)
    return torch.stack(out)


def _augment_batched(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """The same augmentation for the whole batch: per-image crop offsets and flips as gathered indices."""
    b = x.shape[0]
    t, left = torch.randint(0, 33, (2, b), generator=g).to(x.device)
    flip = torch.rand(b, generator=g).to(x.device) < 0.5
    ar = torch.arange(224, device=x.device)
    rows = (t[:, None] + ar)[:, None, :, None]
    cols = torch.where(flip[:, None], left[:, None] + 223 - ar, left[:, None] + ar)[:, None, None, :]
    img = x[torch.arange(b, device=x.device)[:, None, None, None], torch.arange(3, device=x.device)[None, :, None, None],
            rows, cols]
    mean = torch.tensor(_MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(_STD, device=x.device).view(1, 3, 1, 1)
    return (img.float() / 255 - mean) / std


def gpu_augment_loop(steps: int) -> None:
    import random

    import torchvision

    random.seed(0)
    g = torch.Generator().manual_seed(0)
    model = torchvision.models.resnet18().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    raw = torch.randint(0, 256, (64, 3, 256, 256), dtype=torch.uint8, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")
    aug = _augment_batched if OPTS["fixed"] else _augment_each
    for _ in range(steps):
        x = aug(raw, g).contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mark()


def roberta_eager(steps: int) -> None:
    from transformers import RobertaConfig, RobertaForMaskedLM

    impl = "sdpa" if OPTS["fixed"] else "eager"
    # (`--pad-vocab`: the vocabulary padded from 50265 to 50304, a multiple of 64, attention left as it is)
    cfg = RobertaConfig(num_hidden_layers=8, max_position_embeddings=514, attn_implementation=impl,
                        vocab_size=50304 if OPTS["pad_vocab"] else 50265)
    model = RobertaForMaskedLM(cfg).cuda()
    print("attention:", model.config._attn_implementation)
    ids = torch.randint(3, 50265, (16, 384), device="cuda")
    mask = torch.ones_like(ids)
    mask[::2, 320:] = 0  # (half the batch padded)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    train(model, opt, lambda m: m(input_ids=ids, attention_mask=mask, labels=ids).loss, steps, amp=True)


def opt_adamw_loop(steps: int) -> None:
    from transformers import OPTConfig, OPTForCausalLM

    cfg = OPTConfig(vocab_size=50272, hidden_size=768, num_hidden_layers=8, ffn_dim=3072, num_attention_heads=12,
                    max_position_embeddings=2048)
    model = OPTForCausalLM(cfg).cuda()
    ids = torch.randint(0, 50272, (8, 512), device="cuda")
    kw = {"fused": True} if OPTS["fixed"] else {"foreach": False}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **kw)
    train(model, opt, lambda m: m(input_ids=ids, labels=ids).loss, steps, amp=True)


def resnet34_empty_cache(steps: int) -> None:
    model, x, y = _vision("resnet34", 64, torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _empty_cache_each_step(model, lambda m: F.cross_entropy(m(x), y), opt, steps)


def vgg_fp32(steps: int) -> None:
    model, x, y = _vision("vgg11_bn", 32, torch.channels_last if OPTS["fixed"] else torch.contiguous_format)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    train(model, opt, lambda m: F.cross_entropy(m(x), y), steps, amp=OPTS["fixed"])


def resnext_bf16_nchw(steps: int) -> None:
    _layout_twin("resnext50_32x4d", steps)


def _cutmix_each(x: torch.Tensor, boxes: torch.Tensor, perm: torch.Tensor, use: list[bool]) -> torch.Tensor:
    """Image by image, as a first CutMix is written: paste another image's box into this one half the time."""
    out = x.clone()
    for i in range(x.shape[0]):
        if use[i]:
            t, left, h, w = (int(v) for v in boxes[i])
            out[i, :, t:t + h, left:left + w] = x[perm[i], :, t:t + h, left:left + w]
    return out


def _cutmix_batched(x: torch.Tensor, boxes: torch.Tensor, perm: torch.Tensor, use: list[bool]) -> torch.Tensor:
    """The same boxes as one mask over the batch."""
    b = boxes.to(x.device)
    ar = torch.arange(x.shape[-1], device=x.device)
    rows = (ar[None, :] >= b[:, 0:1]) & (ar[None, :] < b[:, 0:1] + b[:, 2:3])
    cols = (ar[None, :] >= b[:, 1:2]) & (ar[None, :] < b[:, 1:2] + b[:, 3:4])
    m = rows[:, :, None] & cols[:, None, :] & torch.tensor(use, device=x.device)[:, None, None]
    return torch.where(m[:, None], x[perm.to(x.device)], x)


def cutmix_loop(steps: int) -> None:
    import random

    import torchvision

    random.seed(0)
    g = torch.Generator().manual_seed(0)
    model = torchvision.models.resnet18().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x0 = torch.randn(64, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")
    mix = _cutmix_batched if OPTS["fixed"] else _cutmix_each
    for _ in range(steps):
        hw = torch.randint(32, 113, (64, 2), generator=g)
        tl = (torch.rand(64, 2, generator=g) * (224 - hw)).long()
        boxes = torch.cat([tl, hw], 1)
        perm = torch.randperm(64, generator=g)
        use = [random.random() < 0.5 for _ in range(64)]
        x = mix(x0, boxes, perm, use).contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mark()


def hf_vit_eager(steps: int) -> None:
    from transformers import ViTConfig, ViTForImageClassification

    impl = "sdpa" if OPTS["fixed"] else "eager"
    model = ViTForImageClassification(ViTConfig(num_labels=1000, attn_implementation=impl)).cuda()
    print("attention:", model.config._attn_implementation)
    x = torch.randn(64, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    train(model, opt, lambda m: m(pixel_values=x, labels=y).loss, steps, amp=True)


def convnext_adamw_loop(steps: int) -> None:
    model, x, y = _vision("convnext_tiny", 64, torch.channels_last)
    kw = {"fused": True} if OPTS["fixed"] else {"foreach": False}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **kw)
    train(model, opt, lambda m: F.cross_entropy(m(x), y), steps, amp=True)


def swin_empty_cache(steps: int) -> None:
    model, x, y = _vision("swin_t", 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    _empty_cache_each_step(model, lambda m: F.cross_entropy(m(x), y), opt, steps)


def convnext_bf16_nchw(steps: int) -> None:
    _layout_twin("convnext_tiny", steps)


def bart_empty_cache(steps: int) -> None:
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(vocab_size=50265, d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
                     decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072)
    model = BartForConditionalGeneration(cfg).cuda()
    src = torch.randint(3, 50265, (16, 256), device="cuda")
    tgt = torch.randint(3, 50265, (16, 64), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    _empty_cache_each_step(model, lambda m: m(input_ids=src, labels=tgt).loss, opt, steps)


def pythia_adamw_loop(steps: int) -> None:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    cfg = GPTNeoXConfig(vocab_size=50304, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072, max_position_embeddings=2048)
    model = GPTNeoXForCausalLM(cfg).cuda()
    ids = torch.randint(0, 50304, (8, 512), device="cuda")
    kw = {"fused": True} if OPTS["fixed"] else {"foreach": False}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **kw)
    train(model, opt, lambda m: m(input_ids=ids, labels=ids).loss, steps, amp=True)


def qwen2_eager(steps: int) -> None:
    _gqa_lm_eager("Qwen2", 6, 4, steps)


def electra_fp32(steps: int) -> None:
    from transformers import ElectraConfig, ElectraForPreTraining

    cfg = ElectraConfig(vocab_size=30522, embedding_size=768, hidden_size=768, num_hidden_layers=12,
                        num_attention_heads=12, intermediate_size=3072)
    model = ElectraForPreTraining(cfg).cuda()
    ids = torch.randint(0, 30522, (32, 128), device="cuda")
    labels = torch.randint(0, 2, (32, 128), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    train(model, opt, lambda m: m(input_ids=ids, labels=labels).loss, steps, amp=OPTS["fixed"])


def mobilenetv2_fp32(steps: int) -> None:
    model, x, y = _vision("mobilenet_v2", 64, torch.channels_last if OPTS["fixed"] else torch.contiguous_format)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    train(model, opt, lambda m: F.cross_entropy(m(x), y), steps, amp=OPTS["fixed"])



def pythia_eager(steps: int) -> None:
    """HF GPT-NeoX (Pythia-160M sizes, partial rotary, fused QKV), bf16 autocast, fused AdamW, batch 8 x 512,
    `attn_implementation="eager"` (`--fixed`: `"sdpa"`)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    cfg = GPTNeoXConfig(vocab_size=50304, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072, max_position_embeddings=2048,
                        attn_implementation="sdpa" if OPTS["fixed"] else "eager")
    model = GPTNeoXForCausalLM(cfg).cuda()
    print("attention:", model.config._attn_implementation)
    ids = torch.randint(0, 50304, (8, 512), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    train(model, opt, lambda m: m(input_ids=ids, labels=ids).loss, steps, amp=True)


def wide_resnet_fp32(steps: int) -> None:
    """torchvision Wide ResNet-50-2 trained in FP32, batch 32, SGD with momentum (`--fixed`: bf16 autocast and
    channels_last)."""
    model, x, y = _vision("wide_resnet50_2", 32, torch.channels_last if OPTS["fixed"] else torch.contiguous_format)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    train(model, opt, lambda m: F.cross_entropy(m(x), y), steps, amp=OPTS["fixed"])


def t5_item(steps: int) -> None:
    """HF T5 (t5-small sizes), bf16 autocast, fused AdamW, batch 8 x 128, summing `loss.item()` every step for its
    log line (`--fixed`: the losses summed on the GPU with `loss.detach()`, read once at the end). `--read` picks
    how the loss is read, to tell what the fixed run's pace comes from: `item` (the problem), `detach` (the fix),
    `none` (not read at all), `sync` (summed on the GPU, then `torch.cuda.synchronize()` every step)."""
    model, src, tgt, opt = _t5(8, 128, 32)
    read = OPTS["read"] or ("detach" if OPTS["fixed"] else "item")
    running = torch.zeros((), device="cuda") if read != "item" else 0.0
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=src, labels=tgt).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if read == "item":
            running += loss.item()
        elif read in ("detach", "sync"):
            running += loss.detach()
            if read == "sync":
                torch.cuda.synchronize()
        mark()
    print("mean loss", float(running) / max(steps, 1))


def resnet50_sgd_loop(steps: int) -> None:
    """torchvision ResNet-50, bf16 autocast, channels_last, batch 32, `SGD(momentum=0.9, foreach=False)`: one
    parameter at a time (`--fixed`: `foreach=True`; `--sgd` picks single, foreach or fused)."""
    model, x, y = _vision("resnet50", 32, torch.channels_last)
    impl = OPTS["sgd"] or ("foreach" if OPTS["fixed"] else "single")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=impl == "foreach",
                          fused=impl == "fused" or None)
    train(model, opt, lambda m: F.cross_entropy(m(x), y), steps, amp=True)


def regnet_empty_cache(steps: int) -> None:
    """torchvision RegNetY-1.6GF, bf16 autocast, batch 64, SGD, `torch.cuda.empty_cache()` after every step
    (`--fixed`: without it)."""
    model, x, y = _vision("regnet_y_1_6gf", 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    _empty_cache_each_step(model, lambda m: F.cross_entropy(m(x), y), opt, steps)

def _serve(model: nn.Module, batch_of, steps: int, amp: bool) -> None:
    """An inference loop as a service writes it: each batch's predicted labels copied to the host (the caller reads
    them), under `torch.inference_mode()`, its steps marked for the collector (no optimizer steps)."""
    import collectors

    model.eval()
    got = []
    with torch.inference_mode():
        for i in collectors.steps(range(steps)):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                out = model(batch_of(i))
            logits = out.logits if hasattr(out, "logits") else out
            got.append(logits.argmax(-1).cpu())
            mark()


def bert_infer_fp32(steps: int) -> None:
    """HF BERT-base classification served in FP32, batch 64 x 128 (`--fixed`: bf16 autocast)."""
    from transformers import BertConfig, BertForSequenceClassification

    model = BertForSequenceClassification(BertConfig(num_labels=3)).cuda()
    ids = torch.randint(0, 30522, (64, 128), device="cuda")
    _serve(model, lambda i: ids, steps, amp=OPTS["fixed"])


def resnet50_infer_fp32(steps: int) -> None:
    """torchvision ResNet-50 inference in FP32, batch 64 (`--fixed`: bf16 autocast and channels_last)."""
    model, x, _ = _vision("resnet50", 64, torch.channels_last if OPTS["fixed"] else torch.contiguous_format)
    _serve(model, lambda i: x, steps, amp=OPTS["fixed"])


def dcgan_fp32(steps: int) -> None:
    """DCGAN at 64 x 64 (nz 100, 64 feature maps), batch 128, Adam(2e-4, betas (0.5, 0.999)) for each network, the
    discriminator's step on real and fake images then the generator's (`--fixed`: bf16 autocast, channels_last)."""
    nz, nf = 100, 64
    gen = nn.Sequential(
        nn.ConvTranspose2d(nz, nf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(nf * 8), nn.ReLU(True),
        nn.ConvTranspose2d(nf * 8, nf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(nf * 4), nn.ReLU(True),
        nn.ConvTranspose2d(nf * 4, nf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(nf * 2), nn.ReLU(True),
        nn.ConvTranspose2d(nf * 2, nf, 4, 2, 1, bias=False), nn.BatchNorm2d(nf), nn.ReLU(True),
        nn.ConvTranspose2d(nf, 3, 4, 2, 1, bias=False), nn.Tanh())
    disc = nn.Sequential(
        nn.Conv2d(3, nf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True),
        nn.Conv2d(nf, nf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(nf * 2), nn.LeakyReLU(0.2, True),
        nn.Conv2d(nf * 2, nf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(nf * 4), nn.LeakyReLU(0.2, True),
        nn.Conv2d(nf * 4, nf * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(nf * 8), nn.LeakyReLU(0.2, True),
        nn.Conv2d(nf * 8, 1, 4, 1, 0, bias=False), nn.Flatten())
    fmt = torch.channels_last if OPTS["fixed"] else torch.contiguous_format
    gen, disc = gen.cuda().to(memory_format=fmt), disc.cuda().to(memory_format=fmt)
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real = torch.randn(128, 3, 64, 64, device="cuda").to(memory_format=fmt)
    ones, zeros = torch.ones(128, 1, device="cuda"), torch.zeros(128, 1, device="cuda")
    bce = nn.BCEWithLogitsLoss()
    amp = OPTS["fixed"]
    for _ in range(steps):
        noise = torch.randn(128, nz, 1, 1, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            fake = gen(noise)
            loss_d = bce(disc(real), ones) + bce(disc(fake.detach()), zeros)
        opt_d.zero_grad(set_to_none=True)
        loss_d.backward()
        opt_d.step()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss_g = bce(disc(fake), ones)
        opt_g.zero_grad(set_to_none=True)
        loss_g.backward()
        opt_g.step()
        mark()


def whisper_eager(steps: int) -> None:
    """HF Whisper at base sizes trained on random log-mel features (batch 8 x 80 x 3000) and 64-token labels, bf16
    autocast, fused AdamW, `attn_implementation="eager"` (`--fixed`: `"sdpa"`)."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    cfg = WhisperConfig(vocab_size=51865, d_model=512, encoder_layers=6, decoder_layers=6,
                        encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
                        decoder_ffn_dim=2048, attn_implementation="sdpa" if OPTS["fixed"] else "eager")
    model = WhisperForConditionalGeneration(cfg).cuda()
    print("attention:", model.config._attn_implementation)
    feats = torch.randn(8, 80, 3000, device="cuda")
    labels = torch.randint(0, 51865, (8, 64), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    train(model, opt, lambda m: m(input_features=feats, labels=labels).loss, steps, amp=True)


def prefetch_stream(steps: int) -> None:
    """torchvision ResNet-18 (bf16 autocast, channels_last, batch 64, SGD) fed pinned host batches copied to the GPU
    on a side stream one step ahead, as NVIDIA's data prefetcher does (`--fixed`: the batches already on the GPU)."""
    model, _, _ = _vision("resnet18", 64, torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    host = [torch.randn(64, 3, 224, 224).pin_memory() for _ in range(4)]
    labels = [torch.randint(0, 1000, (64,)).pin_memory() for _ in range(4)]
    if OPTS["fixed"]:
        dev = [(h.cuda().to(memory_format=torch.channels_last), y.cuda()) for h, y in zip(host, labels, strict=True)]
        batches = (dev[i % 4] for i in range(steps))
    else:
        side = torch.cuda.Stream()

        def prefetch(i: int):
            with torch.cuda.stream(side):
                x = host[i % 4].cuda(non_blocking=True).to(memory_format=torch.channels_last)
                return x, labels[i % 4].cuda(non_blocking=True)

        def gen():
            nxt = prefetch(0)
            for i in range(steps):
                torch.cuda.current_stream().wait_stream(side)
                x, y = nxt
                x.record_stream(torch.cuda.current_stream())
                y.record_stream(torch.cuda.current_stream())
                nxt = prefetch(i + 1)
                yield x, y
        batches = gen()
    for x, y in batches:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mark()


class _UNet(nn.Module):
    """A four-level UNet: two 3x3 convolutions (batch norm, ReLU) per level, max-pool down, `ConvTranspose2d` up,
    each decoder level on its encoder's output concatenated, a 1x1 head."""

    def __init__(self, cin: int = 3, classes: int = 2, width: int = 32, levels: int = 4) -> None:
        super().__init__()

        def block(a: int, b: int) -> nn.Module:
            return nn.Sequential(nn.Conv2d(a, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True),
                                 nn.Conv2d(b, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True))

        ws = [width * 2 ** k for k in range(levels + 1)]
        self.down = nn.ModuleList([block(cin, ws[0])] + [block(ws[k], ws[k + 1]) for k in range(levels)])
        self.up = nn.ModuleList([nn.ConvTranspose2d(ws[k + 1], ws[k], 2, stride=2) for k in reversed(range(levels))])
        self.dec = nn.ModuleList([block(2 * ws[k], ws[k]) for k in reversed(range(levels))])
        self.head = nn.Conv2d(ws[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for k, b in enumerate(self.down):
            x = b(x if k == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        skips.pop()
        for up, dec in zip(self.up, self.dec, strict=True):
            x = dec(torch.cat([up(x), skips.pop()], dim=1))
        return self.head(x)


def unet_fp32(steps: int) -> None:
    """A UNet segmenting 16 images of 256 x 256 into 2 classes, FP32, fused AdamW (`--fixed`: bf16 autocast and
    channels_last)."""
    fmt = torch.channels_last if OPTS["fixed"] else torch.contiguous_format
    model = _UNet().cuda().to(memory_format=fmt)
    x = torch.randn(16, 3, 256, 256, device="cuda").to(memory_format=fmt)
    y = torch.randint(0, 2, (16, 256, 256), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    train(model, opt, lambda m: F.cross_entropy(m(x), y), steps, amp=OPTS["fixed"])


class _DLRM(nn.Module):
    """DLRM's shape: dense features through a bottom MLP, one `EmbeddingBag` (sum) per sparse feature, the pairwise
    dot products of the 9 vectors beside the bottom MLP's output into a top MLP, one logit."""

    def __init__(self, tables: int = 8, rows: int = 500_000, dim: int = 64, dense: int = 13) -> None:
        super().__init__()
        self.emb = nn.ModuleList([nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables)])
        self.bot = nn.Sequential(nn.Linear(dense, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, dim),
                                 nn.ReLU())
        n = tables + 1
        self.top = nn.Sequential(nn.Linear(dim + n * (n - 1) // 2, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                                 nn.Linear(256, 1))
        self.register_buffer("iu", torch.triu_indices(n, n, offset=1), persistent=False)

    def forward(self, dense: torch.Tensor, ids: list[torch.Tensor]) -> torch.Tensor:
        b = self.bot(dense)
        z = torch.stack([b] + [e(i) for e, i in zip(self.emb, ids, strict=True)], dim=1)
        dots = torch.bmm(z, z.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top(torch.cat([b, dots], dim=1)).squeeze(1)


def dlrm_embed(steps: int) -> None:
    """A DLRM-style recommender (8 tables of 500 000 x 64, 20 ids a sample each, dense gradients), batch 4096, BCE,
    bf16 autocast, AdamW with its default implementation (`--fixed`: `fused=True`)."""
    model = _DLRM().cuda()
    dense = torch.randn(4096, 13, device="cuda")
    ids = [torch.randint(0, 500_000, (4096, 20), device="cuda") for _ in model.emb]
    y = torch.randint(0, 2, (4096,), device="cuda").float()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **({"fused": True} if OPTS["fixed"] else {}))
    train(model, opt, lambda m: F.binary_cross_entropy_with_logits(m(dense, ids).float(), y), steps, amp=True)


class _GRUTagger(nn.Module):
    """A `GRUCell` unrolled over the sequence in Python (as a custom recurrence is written), a tag per time step."""

    def __init__(self, vocab: int = 10_000, dim: int = 256, hidden: int = 512, tags: int = 32) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.cell = nn.GRUCell(dim, hidden)
        self.out = nn.Linear(hidden, tags)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        h = x.new_zeros(ids.shape[0], self.cell.hidden_size)
        outs = []
        for t in range(ids.shape[1]):
            h = self.cell(x[:, t], h)
            outs.append(self.out(h))
        return torch.stack(outs, dim=1)


def gru_cell_loop(steps: int) -> None:
    """A `GRUCell` tagger over 64 time steps, batch 32, bf16 autocast, fused AdamW (TV101's fix: `--cuda-graph`)."""
    model = _GRUTagger().cuda()
    ids = torch.randint(0, 10_000, (32, 64), device="cuda")
    tags = torch.randint(0, 32, (32, 64), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    train(model, opt, lambda m: F.cross_entropy(m(ids).flatten(0, 1).float(), tags.flatten()), steps, amp=True)


def sync_timing_loop(steps: int) -> None:
    """torchvision ResNet-18 (bf16 autocast, channels_last, batch 32, SGD) timing each step as tutorials do:
    `torch.cuda.synchronize()` then `time.perf_counter()`, the step's milliseconds kept for a log (`--fixed`: no
    synchronize, the log kept from the host's clock alone)."""
    import time

    model, x, y = _vision("resnet18", 32, torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    log = []
    t0 = time.perf_counter()
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if not OPTS["fixed"]:
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        log.append(1e3 * (t1 - t0))
        t0 = t1
        mark()


class _LoRA(nn.Module):
    """A frozen `Linear` plus a trainable rank-`r` update `B(A(x)) * alpha / r` (B starts at zero)."""

    def __init__(self, base: nn.Linear, r: int = 16, alpha: int = 32) -> None:
        super().__init__()
        self.base, self.scale = base, alpha / r
        self.a = nn.Linear(base.in_features, r, bias=False)
        self.b = nn.Linear(r, base.out_features, bias=False)
        nn.init.zeros_(self.b.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.b(self.a(x)) * self.scale


def lora_llama(steps: int) -> None:
    """HF Llama (4 layers, 1024 wide, GQA 16/4, SDPA) with rank-16 LoRA on q/k/v/o, base frozen, bf16 autocast,
    batch 8 x 512, AdamW over the adapters with its default implementation (`--fixed`: `fused=True`)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                      num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048,
                      attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg).cuda()
    model.requires_grad_(False)
    for layer in model.model.layers:
        att = layer.self_attn
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(att, name, _LoRA(getattr(att, name)).cuda())
    params = [p for p in model.parameters() if p.requires_grad]
    print("trainable", sum(p.numel() for p in params), "in", len(params), "tensors")
    ids = torch.randint(0, 32000, (8, 512), device="cuda")
    opt = torch.optim.AdamW(params, lr=1e-4, **({"fused": True} if OPTS["fixed"] else {}))
    train(model, opt, lambda m: m(input_ids=ids, labels=ids).loss, steps, amp=True)


def gpt2m_adamw_default(steps: int) -> None:
    """HF GPT-2 medium sizes (24 layers, 1024 wide, SDPA), batch 8 x 512, bf16 autocast, AdamW with its default
    implementation (`--fixed`: `fused=True`)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=24, n_embd=1024, n_head=16, n_positions=1024, attn_implementation="sdpa")
    model = GPT2LMHeadModel(cfg).cuda()
    ids = torch.randint(0, cfg.vocab_size, (8, 512), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if OPTS["fixed"] else {}))
    train(model, opt, lambda m: m(input_ids=ids, labels=ids).loss, steps, amp=True)


def llama_bf16_adamw(steps: int) -> None:
    """HF Llama (8 layers, 2048 wide, GQA 16/4, SDPA) with its weights in bf16 (`model.to(torch.bfloat16)`, no
    autocast), batch 4 x 1024, AdamW with its default implementation on the bf16 parameters (`--fixed`:
    `fused=True`)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
                      num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048,
                      attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16)
    ids = torch.randint(0, 32000, (4, 1024), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if OPTS["fixed"] else {}))
    train(model, opt, lambda m: m(input_ids=ids, labels=ids).loss, steps, amp=False)


def resnet50_sgd_default(steps: int) -> None:
    """torchvision ResNet-50, bf16 autocast, channels_last, batch 64, SGD with momentum and its default
    implementation (`--fixed`: `fused=True`)."""
    model, x, y = _vision("resnet50", 64, torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, **({"fused": True} if OPTS["fixed"] else {}))
    train(model, opt, lambda m: F.cross_entropy(m(x), y), steps, amp=True)


def effnet_adamw_default(steps: int) -> None:
    """torchvision EfficientNet-B0 (213 parameter tensors, 5.3 M parameters), bf16 autocast, channels_last, batch 64,
    AdamW with its default implementation (`--fixed`: `fused=True`)."""
    model, x, y = _vision("efficientnet_b0", 64, torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **({"fused": True} if OPTS["fixed"] else {}))
    train(model, opt, lambda m: F.cross_entropy(m(x), y), steps, amp=True)


class _LSTMLM(nn.Module):
    """An `LSTMCell` language model unrolled over the sequence in Python, the next token predicted at each step."""

    def __init__(self, vocab: int = 8000, dim: int = 512, hidden: int = 1024) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.cell = nn.LSTMCell(dim, hidden)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        h = x.new_zeros(ids.shape[0], self.cell.hidden_size)
        c = h
        outs = []
        for t in range(ids.shape[1]):
            h, c = self.cell(x[:, t], (h, c))
            outs.append(h)
        return self.out(torch.stack(outs, dim=1))


def lstm_cell_loop(steps: int) -> None:
    """An `LSTMCell` language model over 32 tokens, batch 64, bf16 autocast, fused AdamW (TV101's fix:
    `--cuda-graph`)."""
    model = _LSTMLM().cuda()
    ids = torch.randint(0, 8000, (64, 33), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    train(model, opt, lambda m: F.cross_entropy(m(ids[:, :-1]).flatten(0, 1).float(), ids[:, 1:].flatten()),
          steps, amp=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prog", choices=PROGS, required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--time", action="store_true", help="print every step's time (CUDA events)")
    ap.add_argument("--precision", choices=["highest", "high"], default="highest", help="float32 matmul precision")
    ap.add_argument("--amp", action="store_true", help="bf16 autocast for the FP32 programs (distilbert_fp32, lstm)")
    ap.add_argument("--workers", type=int, default=2, help="regnet_loader's DataLoader workers")
    ap.add_argument("--fixed", action="store_true", help="the second set's fixed twin (see each program)")
    ap.add_argument("--no-cudnn-sdpa", action="store_true", help="SDPA without its cuDNN backend")
    ap.add_argument("--static-only", action="store_true", help="llama_generate --fixed: the static cache alone")
    ap.add_argument("--pad-vocab", action="store_true", help="roberta_eager: the vocabulary padded to 50304")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="programs that train with train(): the whole step captured in one CUDA graph (TV101's fix)")
    ap.add_argument("--compile", action="store_true", help="programs that train with train(): the model compiled")
    ap.add_argument("--read", choices=["item", "detach", "none", "sync"], help="t5_item: how the loss is read")
    ap.add_argument("--sgd", choices=["single", "foreach", "fused"], help="resnet50_sgd_loop: the SGD implementation")
    args = ap.parse_args()
    torch.set_float32_matmul_precision(args.precision)
    if args.no_cudnn_sdpa:
        torch.backends.cuda.enable_cudnn_sdp(False)
    OPTS.update({k: getattr(args, k) for k in OPTS})  # (each option's default is its argparse default)
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
