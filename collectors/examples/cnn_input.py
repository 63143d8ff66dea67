"""A small CNN (torchvision ResNet-18) trained on images decoded and augmented on the CPU, per sample.

The Dataset turns a random uint8 array into a PIL image and runs a torchvision augmentation pipeline
(RandomResizedCrop, flip, ColorJitter, ToTensor, Normalize) in `__getitem__`. With `--workers 0` the main
process does all of it between steps and the GPU waits: input-bound. `--workers N` moves it to N worker
processes (the fix). pin_memory stays off in both, so the worker count is the only difference. Without
torchvision (smoke runs on a bare CPU box) a hand-written conv net and tensor ops stand in.

    traceview collect --shapes -- python -m collectors.examples.cnn_input --workers 0
    traceview collect --shapes -- python -m collectors.examples.cnn_input --workers 8
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from collectors.examples._common import StepTimer, device

try:
    import torchvision
    from PIL import Image
    from torchvision import transforms as T
except ImportError:  # pragma: no cover - the device image has torchvision
    torchvision = None


class SmallConvNet(nn.Module):
    """Stand-in when torchvision is missing."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.c1, self.c2, self.c3 = (
            nn.Conv2d(3, 32, 3, 2, 1),
            nn.Conv2d(32, 64, 3, 2, 1),
            nn.Conv2d(64, 128, 3, 2, 1),
        )
        self.bn1, self.bn2, self.bn3 = nn.BatchNorm2d(32), nn.BatchNorm2d(64), nn.BatchNorm2d(128)
        self.fc = nn.Linear(128, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.c1(x)))
        x = F.relu(self.bn2(self.c2(x)))
        x = F.relu(self.bn3(self.c3(x)))
        return self.fc(x.mean((2, 3)))


class AugmentedImages(torch.utils.data.Dataset):
    def __init__(self, n: int, size: int, crop: int, classes: int) -> None:
        self.n, self.size, self.crop, self.classes = n, size, crop, classes
        if torchvision is not None:
            self.tf = T.Compose(
                [
                    T.RandomResizedCrop(crop),
                    T.RandomHorizontalFlip(),
                    T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                    T.ToTensor(),
                    T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
                ]
            )

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(i)
        pixels = rng.integers(0, 256, (self.size, self.size, 3), dtype=np.uint8)  # a "decoded" image
        if torchvision is not None:
            img = self.tf(Image.fromarray(pixels))
        else:
            img = torch.from_numpy(pixels).permute(2, 0, 1).float().div(255)[:, : self.crop, : self.crop]
        return img, int(rng.integers(self.classes))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=256, help="source image side")
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--classes", type=int, default=100)
    args = ap.parse_args()
    torch.set_float32_matmul_precision("high")
    dev = device()
    torch.manual_seed(0)
    if torchvision is not None:
        model = torchvision.models.resnet18(num_classes=args.classes)
    else:
        model = SmallConvNet(args.classes)
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)  # its step() marks the boundaries
    ds = AugmentedImages(args.steps * args.batch, args.size, args.crop, args.classes)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=args.batch, shuffle=False, num_workers=args.workers, pin_memory=False
    )
    timer = StepTimer(dev)
    timer.mark()
    for images, labels in loader:
        images, labels = images.to(dev), labels.to(dev)
        loss = F.cross_entropy(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        timer.mark()
    timer.report(f"cnn_input_nw{args.workers}")
    print(f"torchvision {getattr(torchvision, '__version__', None)} loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
