"""A real Lightning PyTorchProfiler trace on CPU: a tiny MLP, 8 training steps, schedule wait=1 warmup=1 active=3."""
import sys

import lightning as L
import torch
from lightning.pytorch.profilers import PyTorchProfiler

out = sys.argv[1]
torch.manual_seed(0)


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


data = torch.utils.data.TensorDataset(torch.randn(512, 64), torch.randint(0, 8, (512,)))
loader = torch.utils.data.DataLoader(data, batch_size=64)
prof = PyTorchProfiler(dirpath=out, filename="perf", schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1))
trainer = L.Trainer(max_steps=8, profiler=prof, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Tiny(), loader)
