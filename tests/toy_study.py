"""The smallest object that meets the study contract ``runs.sweep`` relies on, for tests."""

from dataclasses import dataclass

import pandas as pd

from structattn_lite.records import RunRecord, config_dict, config_hash


@dataclass(frozen=True)
class Toy:
    seed: int = 0
    lr: float = 0.1


class ToyStudy:
    EXPERIMENT = "toy"
    Config = Toy

    def __init__(self, fail_on=()):
        self.calls, self.progress, self.fail_on = [], [], set(fail_on)

    def run(self, cfg, progress=False, callbacks=(), device="cpu", checkpoint=None):
        self.calls.append(cfg)
        self.progress.append(progress)
        if cfg.lr in self.fail_on:
            raise RuntimeError(f"boom at lr={cfg.lr}")
        history = pd.DataFrame({"epoch": [1, 2], "test_acc": [0.5, cfg.lr]})
        return RunRecord("toy", config_hash("toy", cfg), config_dict(cfg), history)
