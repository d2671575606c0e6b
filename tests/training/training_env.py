"""Running `python -m training` and 2-rank horovodrun from one training environment (.venv-torch, .venv-tf),
as real processes; each training test package's conftest binds one environment."""
import os
import subprocess

from infra import REPO_ROOT


class TrainingEnv:
    def __init__(self, venv: str, extra_env: dict[str, str] | None = None):
        bin_dir = REPO_ROOT / venv / "bin"
        self.python, self.horovodrun = str(bin_dir / "python"), str(bin_dir / "horovodrun")
        self.bin_dir = bin_dir
        self.extra_env = extra_env or {}

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONWARNINGS": "ignore", **self.extra_env}

    def training(self, *args, timeout=300, check=True):
        result = subprocess.run([self.python, "-m", "training", *map(str, args)], cwd=REPO_ROOT, env=self.env(),
                                capture_output=True, text=True, timeout=timeout)
        if check:
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result

    def devtools(self, *args, timeout=300):
        result = subprocess.run([self.python, "-m", "devtools", *map(str, args)], cwd=REPO_ROOT, env=self.env(),
                                capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result

    def horovod(self, *args, np=2, timeout=300, script=None):
        command = [self.horovodrun, "--gloo", "-np", str(np), "-H", f"localhost:{np}", self.python]
        command += [str(script), *map(str, args)] if script else ["-m", "training", *map(str, args)]
        result = subprocess.run(command, cwd=REPO_ROOT, env=self.env(), capture_output=True, text=True,
                                timeout=timeout)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result

    def synth_dataset(self, root):
        """4 learnable classes of real JPEG files, 16 train + 4 val each, 40 px."""
        self.devtools("synth-data", "--out", root, "--classes", "4", "--per-class", "16", "--val-per-class", "4",
                      "--size", "40")
        return root


def train_without_first_val_class(root):
    """A folder whose val/ lacks train/'s first class (cat): train/ cat, dog, ship and val/ dog, ship, 2 JPEGs
    each. Labelled by train/'s classes, val/ is dog 1, ship 2 (numbered by its own folders it was dog 0, ship 1)."""
    from PIL import Image

    for split, classes in (("train", ("cat", "dog", "ship")), ("val", ("dog", "ship"))):
        for shade, cls in enumerate(classes):
            (root / split / cls).mkdir(parents=True)
            for i in range(2):
                Image.new("RGB", (40, 40), (80 * shade, 40 * i, 0)).save(root / split / cls / f"{i}.jpg")
    return root
