"""Training steps of real-library models (Hugging Face GPT-2, BERT and Llama, torchvision classifiers) with the common mistakes as flags.

Each flag is one mistake or its fix, so two runs that differ in one flag are an eager/fixed twin whose
unprofiled step times (the collector's CUDA events) measure what the fix saves:

- `--attn eager|sdpa` (GPT-2): attention that materialises its scores (eager softmax(QK^T)) or SDPA's
  flash / memory-efficient kernels;
- `--amp` (bf16 autocast) vs FP32, `--precision highest|high` (TF32 off / on);
- `--optim single|foreach|fused` (AdamW implementation);
- `--sync-item`: read the loss back with `.item()` every step (a host sync), as a logging loop does;
- `--compile`: torch.compile the model; `--channels-last` (ResNet);
- `--cuda-graph`: the whole step (forward, backward, AdamW with `capturable=True`) captured once in a CUDA graph
  and replayed (the PyTorch docs' whole-network capture): one launch per step, the launch-bound fix;
- `--empty-cache`: torch.cuda.empty_cache() after every step (the allocator re-reserves its blocks each step).

Models are built from their configs with random weights (no download).

    traceview collect -- python -m collectors.examples.real_models --model gpt2 --attn eager
    traceview collect -- python -m collectors.examples.real_models --model resnet --amp --channels-last
"""

from __future__ import annotations

import argparse

import torch
from torch.nn import functional as F

from collectors.examples._common import StepTimer, capture_step, device


def build_gpt2(args: argparse.Namespace, dev: torch.device) -> tuple[torch.nn.Module, callable]:
    from transformers import AutoModelForCausalLM, GPT2Config

    cfg = GPT2Config(
        n_layer=args.layers, n_embd=args.d, n_head=args.heads, n_positions=args.seq, vocab_size=args.vocab or 50257
    )
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=args.attn).to(dev)
    tokens = torch.randint(0, min(args.vocab or 50257, 50257), (args.batch, args.seq), device=dev)

    def loss_fn(m: torch.nn.Module) -> torch.Tensor:
        logits = m(input_ids=tokens).logits
        return F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1)
        )

    return model, loss_fn


def build_bert(args: argparse.Namespace, dev: torch.device) -> tuple[torch.nn.Module, callable]:
    """HF BERT masked-LM training (random tokens, every position a target): an encoder, where GPT-2 decodes."""
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(num_hidden_layers=args.layers, hidden_size=args.d, num_attention_heads=args.heads,
                     intermediate_size=4 * args.d, max_position_embeddings=args.seq, vocab_size=args.vocab or 30522)
    model = BertForMaskedLM._from_config(cfg, attn_implementation=args.attn).to(dev)
    tokens = torch.randint(0, 30522, (args.batch, args.seq), device=dev)  # (a padded vocabulary's extra rows unused)

    def loss_fn(m: torch.nn.Module) -> torch.Tensor:
        logits = m(input_ids=tokens).logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens.reshape(-1))

    return model, loss_fn


def build_llama(args: argparse.Namespace, dev: torch.device) -> tuple[torch.nn.Module, callable]:
    """HF Llama causal-LM training: RMSNorm, rotary embeddings, SwiGLU MLP and grouped-query attention (`--kv-heads`
    key/value heads shared by `--heads` query heads), untied 32000-token head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=args.d, intermediate_size=args.ffn or -(-8 * args.d // (3 * 256)) * 256,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads or args.heads, max_position_embeddings=args.seq,
                      vocab_size=args.vocab or 32000)
    model = LlamaForCausalLM._from_config(cfg, attn_implementation=args.attn).to(dev)
    tokens = torch.randint(0, args.vocab or 32000, (args.batch, args.seq), device=dev)

    def loss_fn(m: torch.nn.Module) -> torch.Tensor:
        logits = m(input_ids=tokens).logits
        return F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1)
        )

    return model, loss_fn


#: torchvision classifiers `--model` takes (resnet: ResNet-18)
TORCHVISION = ["resnet", "resnet50", "vit_b_16", "convnext_tiny", "mobilenet_v3_small", "efficientnet_b0", "swin_t",
               "densenet121", "regnet_y_800mf"]


def build_resnet(args: argparse.Namespace, dev: torch.device) -> tuple[torch.nn.Module, callable]:
    import torchvision

    arch = "resnet18" if args.model == "resnet" else args.model
    model = getattr(torchvision.models, arch)(num_classes=100).to(dev)
    images = torch.randn(args.batch, 3, args.size, args.size, device=dev)
    labels = torch.randint(0, 100, (args.batch,), device=dev)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        images = images.contiguous(memory_format=torch.channels_last)

    def loss_fn(m: torch.nn.Module) -> torch.Tensor:
        return F.cross_entropy(m(images).float(), labels)

    return model, loss_fn


#: `--optim` -> torch.optim.AdamW's keyword arguments
OPTIM_IMPL = {"single": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def model_args(ap: argparse.ArgumentParser) -> None:
    """The model, its size and the training options (the ones ab_real_models.py shares)."""
    ap.add_argument("--model", choices=["gpt2", "bert", "llama", *TORCHVISION], default="gpt2")
    ap.add_argument("--attn", choices=["eager", "sdpa"], default="sdpa")
    ap.add_argument("--amp", action="store_true", help="bf16 autocast")
    ap.add_argument("--optim", choices=list(OPTIM_IMPL), default="foreach")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=None, help="Llama's key/value heads (default: --heads)")
    ap.add_argument("--ffn", type=int, default=None, help="Llama's MLP width (default: 8/3 d rounded up to 256)")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=None, help="vocabulary (default: GPT-2's 50257, BERT's 30522)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=224, help="ResNet image side")


def main() -> None:
    ap = argparse.ArgumentParser()
    model_args(ap)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--precision", choices=["highest", "high"], default="highest")
    ap.add_argument("--sync-item", action="store_true", help="loss.item() every step")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--empty-cache", action="store_true", help="torch.cuda.empty_cache() every step")
    ap.add_argument("--cuda-graph", action="store_true", help="capture the whole step in one CUDA graph")
    args = ap.parse_args()
    torch.set_float32_matmul_precision(args.precision)
    dev = device()
    torch.manual_seed(0)
    model, loss_fn = {"gpt2": build_gpt2, "bert": build_bert, "llama": build_llama}.get(args.model, build_resnet)(args, dev)
    capturable = {"capturable": True} if args.cuda_graph else {}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **OPTIM_IMPL[args.optim], **capturable)  # its step() marks the collector's steps
    run = torch.compile(model) if args.compile else model
    if args.cuda_graph:
        graphed_steps(args, dev, run, loss_fn, opt)
        return

    timer = StepTimer(dev)
    timer.mark()
    logged = []
    for _ in range(args.steps):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.amp):
            loss = loss_fn(run)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.sync_item:
            logged.append(loss.item())  # the host waits for the whole step's GPU work
        else:
            logged.append(loss.detach())
        if args.empty_cache and dev.type == "cuda":
            torch.cuda.empty_cache()
        timer.mark()
    name = f"{args.model}_{args.attn if args.model in ('gpt2', 'bert', 'llama') else 'conv'}"
    timer.report(name)
    print(f"loss {float(logged[-1]):.3f}")


def graphed_steps(args: argparse.Namespace, dev: torch.device, model: torch.nn.Module, loss_fn: callable,
                  opt: torch.optim.Optimizer) -> None:
    """The training loop as one CUDA graph per step: warm-up on a side stream, capture forward, backward and
    the optimizer step once (inputs are static tensors already), then replay it `--steps` times."""
    graph, static_loss = capture_step(model, loss_fn, opt, args.amp)
    timer = StepTimer(dev)
    timer.mark()
    for _ in range(args.steps):
        graph.replay()
        timer.mark()
    timer.report(f"{args.model}_cuda_graph")
    print(f"loss {float(static_loss):.3f}")


if __name__ == "__main__":
    main()
