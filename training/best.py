"""The run's best validation: its model kept, and exported instead of the last epoch's; and the line that says when
validation is at or near chance, with the fix.

On a small folder, validation swings from epoch to epoch (README's synthetic folder, 90 training images of 3 classes,
went from top-1 1.000 at epochs 8-9 to 0.750 at the last: issue 60), so the model worth exporting is the best one's,
as early stopping keeps it. Rank 0 saves the run's full state (the framework's own checkpoint format) as
OUT/best-model<suffix> whenever a validation beats the best so far (higher top-1; on a tie, lower loss), with
OUT/best.json saying which; a resumed run reads best.json and keeps comparing against it. At the end the runner
restores that state before the export when it is not the last step's. Pure apart from the two files.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BEST_JSON = "best.json"
# A validation within this many standard errors of chance (the binomial standard error of top-1 at chance, over
# the validation images) is "near chance": with 24 images and 3 classes, top-1 up to 0.53 is not told from guessing.
CHANCE_SIGMAS = 2.0
# However many images: within a quarter of chance above it (3 classes: up to 0.417) is near it as well.
CHANCE_RELATIVE = 0.25
PRETRAINED_FIX = ("fine-tune from ImageNet weights: add --pretrained (torchvision's IMAGENET1K_V2, 98 MB, fetched "
                  "once into TORCH_HOME, its SHA-256 prefix checked), or --init-from resnet50-11ad3fa6.pth where this "
                  "machine cannot reach download.pytorch.org (docs/training.md, fine-tuning)")


@dataclass(frozen=True)
class Best:
    step: int
    val_loss: float
    val_top1: float

    def beats(self, other: Best | None) -> bool:
        return (other is None or self.val_top1 > other.val_top1
                or (self.val_top1 == other.val_top1 and self.val_loss < other.val_loss))


class Keeper:
    """Rank 0's best validation so far and its saved state (OUT/best-model<suffix>)."""

    def __init__(self, out: Path, suffix: str, resumed: bool):
        self.json, self.model = out / BEST_JSON, out / f"best-model{suffix}"
        self.best: Best | None = None
        if resumed and self.json.is_file() and self.model.is_file():  # carried over a resume; else start afresh
            try:
                self.best = Best(**json.loads(self.json.read_text()))
            except (ValueError, TypeError):
                self.best = None

    def offer(self, step: int, val_loss: float, val_top1: float, state: Callable[[], Any],
              save: Callable[[Any, Path], None]) -> bool:
        """Save the run's state when this validation is the best so far; whether it was."""
        found = Best(step, float(val_loss), float(val_top1))
        if not (math.isfinite(found.val_loss) and found.beats(self.best)):
            return False
        tmp = self.model.with_name(self.model.name + ".tmp")
        save(state(), tmp)
        os.replace(tmp, self.model)  # never a half-written best model under its name
        self.json.write_text(json.dumps(asdict(found)) + "\n")
        self.best = found
        return True

    def restore_for_export(self, last_step: int, load: Callable[[Path], Any],
                           restore: Callable[[Any], None]) -> Best | None:
        """Put the best validation's state back when it is not the last step's; the Best restored, or None."""
        if self.best is None or self.best.step == last_step or not self.model.is_file():
            return None
        restore(load(self.model))
        return self.best


def kept_line(best: Best, last: tuple[float, float] | None, steps_per_epoch: int) -> str:
    """What the export says when it is the best validation's model, not the last epoch's."""
    then = f" (the last validation: top-1 {last[1]:.3f}, loss {last[0]:.4f})" if last else ""
    return (f"model: exported the best validation's, epoch {best.step / steps_per_epoch:.4g} (step {best.step}): "
            f"val top-1 {best.val_top1:.3f}, val loss {best.val_loss:.4f}{then}")


def near_chance(top1: float, classes: int, val_images: int | None) -> bool:
    chance = 1.0 / classes
    noise = CHANCE_SIGMAS * math.sqrt(chance * (1 - chance) / val_images) if val_images else 0.0
    return top1 <= chance + max(noise, CHANCE_RELATIVE * chance)


def chance_line(top1: float | None, classes: int, val_images: int | None, fine_tuned: bool) -> str | None:
    """The run's last line when its best validation is at or near chance, naming the fix; None otherwise."""
    if top1 is None or classes < 2 or not near_chance(top1, classes, val_images):
        return None
    chance = 1.0 / classes
    where = "at" if top1 <= chance + 1e-9 else "near"
    over = f" over {val_images} validation images" if val_images else ""
    fix = ("more images per class, more --epochs, or a lower --base-lr (the run started from pretrained weights)"
           if fine_tuned else PRETRAINED_FIX)
    return (f"warning: val top-1 {top1:.3f} is {where} chance for {classes} classes ({chance:.3f}){over}: this model "
            f"guesses; {fix}")


def val_images(data: str) -> int | None:
    """How many validation images a folder dataset has (the chance line's standard error), or None (synthetic data,
    a sharded dataset, no val/)."""
    if data == "synthetic":
        return None
    from training.data import folder

    try:
        root = Path(data)
        return None if folder.sharded(root) else len(folder.scan(root, "val", folder.class_names(root))[1])
    except Exception:  # noqa: BLE001 - no val/ or an unreadable one: the fixed margin applies
        return None
