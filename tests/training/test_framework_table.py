"""The frameworks table (training/frameworks.py) is the one list of frameworks: a new framework is one row plus
its loop, and training, the deployer, the devtools, the Makefile and the tests pick it up from there."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from infra import REPO_ROOT
from training import frameworks

# A framework that does not exist anywhere else: its loop module lives in a temporary folder, its row is added
# to the table before anything reads it (as an edit of training/frameworks.py would), in its own image. (Its
# files do not exist: `.in`, not `.txt`, so that the layout test's check of cited paths passes them by.)
FAKE_ROW = """
JAXISH = Image("jaxish", requirements="training/requirements-jaxish.in", venv=".venv-jaxish",
               venv_requirements="training/requirements-jaxish.in", package="jaxish_pkg")
FRAMEWORKS["jax"] = Framework("jax", "fake_jax_loop", JAXISH, dist=("horovod", "ddp"), folder_reader="grain")
"""
FAKE_LOOP = """
import json
from pathlib import Path


def main(cfg):
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "trained.json").write_text(json.dumps({"framework": cfg.framework, "dist": cfg.dist, "steps": cfg.steps}))
    return 0
"""
# Run in a fresh interpreter after the row is added: every module reads the table as it is on import.
CHECKS = """
import contextlib, io, json, runpy, sys
from training import frameworks
exec(compile(open(sys.argv[1]).read(), "row", "exec"), vars(frameworks))
out, checks = sys.argv[2], {}

# python -m training train dispatches to the row's loop module, through the flags' own checks
sys.argv = ["training", "train", "--framework", "jax", "--dist", "ddp", "--steps", "3", "--output-dir", out]
try:
    runpy.run_module("training", run_name="__main__", alter_sys=True)
except SystemExit as done:
    checks["exit"] = done.code
checks["trained"] = json.load(open(out + "/trained.json"))

from training.config import check_args
from training.errors import UsageError
for argv in (["--framework", "tensorflow", "--dist", "ddp"], ["--framework", "jax", "--loader", "dali"]):
    try:
        check_args(argv)
    except UsageError as err:
        checks[argv[-1]] = str(err)

from infra.core.config import stack as config, schema as config_schema
checks["config"] = [list(config_schema.IMAGES), list(config_schema.IMAGE_OF_LOOP)]
base = {"allowedIpRanges": ["20.50.1.7/32"]}
config.parse("x", {**base, "frameworks": ["pytorch", "jaxish"], "trainingFramework": "jax"})
for values in ({"frameworks": ["pytorch"], "trainingFramework": "jax"}, {"trainingFramework": "nope"}):
    try:
        config.parse("x", {**base, **values})
    except config_schema.ConfigError as err:
        checks.setdefault("refused", []).append(str(err))

from infra.components import registry
checks["dockerfile"] = registry.DOCKERFILES.get("jaxish")
from infra.cli.main import main as infra_main
err = io.StringIO()
with contextlib.redirect_stderr(err):
    try:
        infra_main(["submit", "--stack", "dev", "--framework", "nope"])
    except SystemExit:
        pass
checks["submit"] = err.getvalue().strip().splitlines()[-1]
from devtools.rehearsal.run import VENVS
from devtools import benchmark
checks["rehearsal"] = VENVS.get("jax")
checks["benchmark"] = benchmark.distribution("ddp", "jax", horovod=True)
try:
    benchmark.chosen_loaders("pil", "jax")
except UsageError as err:
    checks["benchmark --loaders"] = str(err)
import tests.conftest
checks["tests"] = tests.conftest.NEEDS.get("tests/training/jaxish")
print(json.dumps(checks))
"""


def test_a_new_framework_is_one_row_plus_its_loop(tmp_path):
    pytest.importorskip("pulumi", reason="the deployer's side needs .venv")
    (tmp_path / "fake_jax_loop.py").write_text(FAKE_LOOP)
    (tmp_path / "row.py").write_text(FAKE_ROW)
    (tmp_path / "checks.py").write_text(CHECKS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(tmp_path)])}
    result = subprocess.run([sys.executable, str(tmp_path / "checks.py"), str(tmp_path / "row.py"),
                             str(tmp_path / "run")], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    checks = json.loads(result.stdout.splitlines()[-1])
    assert checks["exit"] == 0 and checks["trained"] == {"framework": "jax", "dist": "ddp", "steps": 3}
    # The refusals name whoever accepts the value, from the rows
    assert checks["ddp"] == "--dist ddp applies to pytorch, jax only; --framework tensorflow takes --dist horovod|native"
    assert checks["dali"] == "--loader dali applies to pytorch only (jax reads folders with grain)"
    assert checks["config"] == [["pytorch", "tensorflow", "jaxish"], ["pytorch", "tensorflow", "keras", "jax"]]
    assert checks["refused"] == [
        "config key 'trainingFramework': jax runs in the jaxish image, which frameworks ['pytorch'] does not build; "
        "add it there",
        "config key 'trainingFramework': 'nope' is not one of pytorch, tensorflow, keras, jax"]
    assert checks["dockerfile"] == "images/" + "jaxish.Dockerfile"  # (split: a path that does not exist)
    assert checks["submit"].endswith("invalid choice: 'nope' (choose from 'pytorch', 'tensorflow', 'keras', 'jax')")
    assert (checks["rehearsal"], checks["benchmark"]) == (".venv-jaxish", "ddp")
    assert checks["benchmark --loaders"] == "--loaders applies to pytorch only; jax reads JPEG files with grain"
    assert checks["tests"] == ["jaxish_pkg", ".venv-jaxish"]


def test_the_makefile_builds_each_tables_environment_and_demos_each_framework(tmp_path):
    """The Makefile as it is, over a copy of the table with one more row: its environments and demo follow."""
    shutil.copytree(REPO_ROOT / "training", tmp_path / "training", ignore=shutil.ignore_patterns("__pycache__"))
    table = tmp_path / "training" / "frameworks.py"
    table.write_text(table.read_text().replace('\n\ndef names()', FAKE_ROW + '\n\ndef names()', 1))
    (tmp_path / "training" / "requirements-jaxish.in").write_text("-r requirements-tf.txt\njaxish_pkg==1.0\n")

    def make(*args):
        result = subprocess.run(["make", "-f", str(REPO_ROOT / "Makefile"), "-pn", "help", *args], cwd=tmp_path,
                                capture_output=True, text=True, timeout=60, env=AS_FROM_A_SHELL)
        assert result.returncode == 0, result.stderr
        return result.stdout

    database = make()
    assert re.search(r"^setup: \.venv/\.installed \.venv-torch/\.installed \.venv-tf/\.installed "
                     r"\.venv-jaxish/\.installed ", database, re.M)
    assert re.search(r"^\.venv-jaxish/\.installed: training/requirements-jaxish\.in training/requirements-tf\.txt "
                     r"requirements-dev\.txt images/build_horovod\.sh$", database, re.M)
    assert ("\tbash images/build_horovod.sh --python $(1)/bin/python --framework $(IMAGE_$(1)) --ops gloo"
            in database)
    assert re.search(r"^IMAGE_\.venv-jaxish := jaxish$", database, re.M)
    assert re.search(r"^demo: \.venv/\.installed \.venv-jaxish/\.installed ", make("FRAMEWORK=jax"), re.M)
    assert re.search(r"^demo: \.venv/\.installed \.venv-tf/\.installed ", make("FRAMEWORK=keras"), re.M)


# `make test` runs this file inside make: its MAKELEVEL/MAKEFLAGS would make these makes sub-makes (printing
# "Entering directory", inheriting -j and --output-sync). Each make here runs as a user's would, from a shell.
AS_FROM_A_SHELL = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}


def test_make_prints_each_environments_recipe_from_the_table():
    for image in frameworks.images():
        result = subprocess.run(["make", "-n", "-B", f"{image.venv}/.installed"], cwd=REPO_ROOT, capture_output=True,
                                text=True, timeout=60, env=AS_FROM_A_SHELL)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [
            f"python3 -m venv {image.venv}",
            f"{image.venv}/bin/pip install --quiet --disable-pip-version-check -r {image.venv_requirements} "
            "-r requirements-dev.txt",
            f"bash images/build_horovod.sh --python {image.venv}/bin/python --framework {image.name} --ops gloo",
            f"touch {image.venv}/.installed"]


def test_an_unknown_make_framework_stops_in_one_line():
    result = subprocess.run(["make", "-n", "demo-local", "FRAMEWORK=jax"], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=60, env=AS_FROM_A_SHELL)
    assert result.returncode != 0 and result.stdout == ""
    assert "FRAMEWORK=jax is not a training framework; use one of pytorch tensorflow keras" in result.stderr


def _listed(description: str) -> list[str]:
    """The names a description lists first, in parentheses: "(pytorch, tensorflow; ...)" -> [pytorch, tensorflow]."""
    return re.search(r"\(([^);]*)", description).group(1).split(", ")


def test_pulumi_yaml_names_exactly_the_tables_frameworks():
    keys = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())["config"]
    images = [image.name for image in frameworks.images()]
    assert keys["frameworks"]["default"] == images
    assert _listed(keys["frameworks"]["description"]) == images
    assert _listed(keys["trainingFramework"]["description"]) == list(frameworks.names())
    assert keys["trainingFramework"]["default"] == frameworks.names()[0]
    for f in frameworks.FRAMEWORKS.values():
        if f.name != f.image.name:  # a framework in another's image says so in both descriptions
            assert f"{f.name} uses {f.image.name}" in keys["trainingFramework"]["description"]
            assert f"the {f.image.name} image also serves {f.name}" in keys["frameworks"]["description"].lower()


def test_the_table_is_whole_and_light():
    for f in frameworks.FRAMEWORKS.values():
        assert (REPO_ROOT / f.loop.replace(".", "/")).with_suffix(".py").is_file(), f.loop
        assert (REPO_ROOT / f.image.dockerfile).is_file() and (REPO_ROOT / f.image.requirements).is_file()
        assert (REPO_ROOT / f.image.venv_requirements).is_file()
        assert f.compiler in ("", "compile", "xla") and set(f.dist) <= {"horovod", "ddp", "native"}
    assert sorted(p.name for p in (REPO_ROOT / "images").glob("*.Dockerfile")) == sorted(
        image.name + ".Dockerfile" for image in frameworks.images())
    with pytest.raises(frameworks.UsageError, match="--framework 'mxnet' is not one of pytorch, tensorflow, keras"):
        frameworks.get("mxnet")
    # Stdlib only: the Makefile reads it with the system python3, before any environment exists (-S: no
    # site-packages at all).
    printed = subprocess.run([sys.executable, "-S", "-m", "training.frameworks", "--make"], cwd=REPO_ROOT,
                             capture_output=True, text=True, check=True).stdout
    assert "VENV_keras := .venv-tf" in printed.splitlines()
