"""The job verbs' inputs, typed: what a backend's jobs face (infra/backends/__init__.py: RunsJobs.submit, status,
logs, download, cancel; register_model where it has a model registry) is handed, never the command line's parsed flags.
The command line builds them from its flags (infra/cli/main.py), the job SDK (infra/jobs.py) hands them on, and
the tests and tools build them directly.

Pure: no Azure client, no command-line parsing.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from infra.core.config.sections import parse_training_args

if TYPE_CHECKING:
    from infra.backends.shared import StackOutputs
    from infra.core.config.stack import StackConfig


@dataclass(frozen=True)
class Submit:
    """Start a training job; each None takes the stack's default."""
    framework: str | None = None  # default: trainingFramework
    nodes: int | None = None  # default: maxNodes
    args: str | None = None  # train flags as one string, instead of trainingArgs (the stack config's refusals apply)
    skip_data_check: bool = False  # submit even when `data` is empty or not reported staged
    dataset: str | None = None  # which dataset of `data` (training/data/datasets.py); default: `default`, its root

    def check(self, cfg: StackConfig) -> None:
        """Refuse what is wrong whatever Azure says (nodes outside 1..maxNodes, --args the job or the training command
        line refuses, a bad dataset name), before the outputs are read, anyone signs in or a request goes out."""
        from training.data.datasets import check_name
        from training.errors import UsageError

        most = cfg.nodes.max_nodes
        if self.nodes is not None and not 1 <= self.nodes <= most:
            raise UsageError(f"--nodes {self.nodes}: give 1 to {most} (maxNodes in Pulumi.{cfg.stack}.yaml; the "
                             "pool or cluster grows to it at most)")
        if self.args is not None:
            _refuse_shell_operators(self.args)
        self.train_args(cfg)
        if self.dataset is not None:
            check_name(self.dataset)

    def train_args(self, cfg: StackConfig) -> tuple[str, ...] | None:
        """`args` as the job's train flags, with the stack config's refusals of trainingArgs and the training
        command line's own parser (None: the stack's trainingArgs)."""
        if self.args is None:
            return None
        return parse_training_args(self.framework or cfg.training.framework, self.args, key="--args")


def _refuse_shell_operators(text: str) -> None:
    """--args is split into words (shlex) and each word is quoted on the node: a `;`, `|`, `&`, `<`, `>` or `$(`
    outside quotes would never run as the user meant, so it is named and refused (quoted, it is a plain value)."""
    import shlex

    from training.errors import UsageError

    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>()")
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return  # unbalanced quotes: parse_training_args names them
    operators = [word for word in words if word and set(word) <= set(";&|<>()")]
    if operators or "`" in text:
        raise UsageError(f"--args {text!r}: {(operators or ['`'])[0]!r} is a shell operator, and the job runs the "
                         "train flags as words, never through a shell; remove it (quote a value that contains it)")


@dataclass(frozen=True)
class Status:
    job: str | None = None  # default: the stack's newest job


@dataclass(frozen=True)
class Logs:
    job: str | None = None
    follow: bool = False  # keep printing until the task ends
    stderr: bool = False  # stderr.txt instead of stdout.txt (Batch)


@dataclass(frozen=True)
class Download:
    job: str | None = None
    dest: Path = Path("results")  # files land in DEST/JOB


@dataclass(frozen=True)
class Cancel:
    job: str | None = None


@dataclass(frozen=True)
class RegisterModel:
    job: str | None = None
    dest: Path = Path("results")  # where the model is fetched to first
    name: str | None = None  # default: resnet50-STACK


JobVerb = Union[Submit, Status, Logs, Download, Cancel, RegisterModel]

# Each verb's command name: `python -m infra NAME`, and the key of a backend's refused_verbs.
VERB_NAMES: dict[type, str] = {Submit: "submit", Status: "status", Logs: "logs", Download: "download",
                               Cancel: "cancel", RegisterModel: "register-model"}


def verb_name(verb: JobVerb) -> str:
    return VERB_NAMES[type(verb)]


@dataclass(frozen=True)
class JobContext:
    """What a backend's job verb works with besides its inputs: the stack config, its typed outputs, how its job
    service is reached from them (`connect(outputs)`) and the data check (`staged(data_url, status_url)`,
    infra/backends/staging.py: data_ready)."""
    cfg: StackConfig
    outputs: StackOutputs
    connect: Callable[[StackOutputs], Any]
    staged: Callable[[str, str], Any]
    stack_flags: str = ""  # how the user named the stack, for the commands a verb prints next (default --stack NAME)
