"""One image build for the fleet (issue 49): once a stack here imports the platform's images (sharedImages),
`new-team` gives a new team the same ones by default and its plan builds no image; `--own-images` builds them
instead; `teams` says which stacks import and which build."""
import json
import shutil

import pytest

from infra import REPO_ROOT
from infra.cli import teams
from infra.cli.new_team import fleet_shared_images, new_team
from infra.cli.main import main
from infra.core.config import stack as config

PLATFORM = ("/subscriptions/11111111-1111-1111-1111-111111111111/resourceGroups/platform-images/providers/"
            "Microsoft.ContainerRegistry/registries/dltrainplatform")
TORCH = "dltrain/pytorch@sha256:" + "a" * 64
TF = "dltrain/tensorflow@sha256:" + "b" * 64


def _share(folder, stack, **images):
    """Append sharedImages to a stack file, in block style (as a platform engineer would write it)."""
    lines = [f"  azure-dl-training:sharedImages:", f"    registry: {PLATFORM}",
             *(f"    {name}: {value}" for name, value in images.items())]
    path = folder / f"Pulumi.{stack}.yaml"
    path.write_text(path.read_text().rstrip("\n") + "\n" + "\n".join(lines) + "\n")


@pytest.fixture
def project(tmp_path):
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path)
    for stack in config.stack_names():
        shutil.copy(REPO_ROOT / f"Pulumi.{stack}.yaml", tmp_path)
    _share(tmp_path, "vision", pytorch=TORCH)  # vision runs pytorch only
    return tmp_path


def test_a_new_team_imports_the_fleets_images_and_its_plan_builds_none(project, capsys):
    assert main(["new-team", "speech", "--project-dir", str(project)]) == 0  # from trial: pytorch
    out = capsys.readouterr().out
    assert "images: the fleet's shared images, imported by digest from dltrainplatform as 1 other stack(s) here " \
           "do (vision; 1 imported)" in out
    cfg = config.from_stack_file("speech", project)
    assert cfg.registry.shared_images.registry_id == PLATFORM
    assert [i.source for i in cfg.registry.shared_images.images] == [TORCH]
    assert main(["plan", "--stack", "speech", "--project-dir", str(project)]) == 0
    plan = capsys.readouterr().out
    assert "docker-build:index:Image" not in plan and "built here by `up`" not in plan
    assert "pytorch: imported by digest from the platform registry dltrainplatform" in plan
    assert f"imageRefs: {{'pytorch': 'crspeech" in plan and f"/pytorch@sha256:{'a' * 64}'}}" in plan


def test_own_images_builds_them_here(project, capsys):
    _share(project, "trial", pytorch=TORCH)  # the template's own sharedImages is dropped too
    assert main(["new-team", "speech", "--own-images", "--project-dir", str(project)]) == 0
    assert "images: built here by `up` (--own-images: no sharedImages)" in capsys.readouterr().out
    assert config.from_stack_file("speech", project).registry.shared_images is None
    assert "sharedImages" not in (project / "Pulumi.speech.yaml").read_text()


def test_without_shared_images_here_a_new_team_builds_its_own(tmp_path, capsys):
    shutil.copy(REPO_ROOT / "Pulumi.yaml", tmp_path)
    shutil.copy(REPO_ROOT / "Pulumi.trial.yaml", tmp_path)
    assert main(["new-team", "speech", "--project-dir", str(tmp_path)]) == 0
    assert "images: built here by `up` (no stack here sets sharedImages" in capsys.readouterr().out
    assert config.from_stack_file("speech", tmp_path).registry.shared_images is None


def test_the_most_used_shared_images_win_and_only_the_new_stacks_frameworks_are_written(project):
    _share(project, "nlp", pytorch="dltrain/pytorch@sha256:" + "c" * 64)  # an older digest, one stack
    _share(project, "dev", pytorch=TORCH, tensorflow=TF)  # dev runs both
    shared, users = fleet_shared_images(teams.Fleet(project), ("pytorch",))
    assert [i.source for i in shared.images] == [TORCH] and users == ["dev", "vision"]
    result = new_team("speech", "trial", root=project)
    assert [i.framework for i in result.config.registry.shared_images.images] == ["pytorch"]


def test_teams_says_which_stacks_import_and_which_build(project, capsys, monkeypatch):
    from infra.cli import plan
    from infra.preview import offline

    monkeypatch.setattr(offline, "evaluate", lambda cfg, *a, **k: None)  # the checks are test_teams.py's
    monkeypatch.setattr(plan, "verdicts", lambda evaluation: [])
    monkeypatch.setattr(plan, "service_verdicts", lambda evaluation: [])
    rows = {r["stack"]: r for r in json.loads(json.dumps(teams.team_rows(project)))}
    assert rows["vision"]["images"] == {"pytorch": f"dltrainplatform/{TORCH}"}
    assert rows["dev"]["images"] == {"pytorch": "built", "tensorflow": "built"}
    others = ", ".join(sorted(s for s in rows if s != "vision"))
    assert (f"Images: 1 stack(s) import the platform's images by digest (from dltrainplatform); "
            f"{len(rows) - 1} build their own at `up` ({others})") in teams.table(list(rows.values()))


def _verb(project, *extra):
    return main(["shared-images", "--registry", PLATFORM, "--image", f"pytorch=dltrain/pytorch@sha256:{'c' * 64}",
                 "--image", f"tensorflow=dltrain/tensorflow@sha256:{'d' * 64}", *extra, "--project-dir", str(project)])


def test_shared_images_prints_the_value_and_writes_it_per_stack(project, capsys):
    assert _verb(project) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("azure-dl-training:sharedImages: {registry: ") and f"sha256:{'d' * 64}" in line
    assert _verb(project, "--write", "vision", "--write", "dev") == 0  # vision sets it (block style), dev not
    out = capsys.readouterr().out
    assert f"wrote sharedImages in Pulumi.vision.yaml (was: pytorch dltrainplatform/{TORCH})" in out
    assert "wrote sharedImages in Pulumi.dev.yaml (was: pytorch built, tensorflow built)" in out
    vision, dev = (config.from_stack_file(s, project).registry.shared_images for s in ("vision", "dev"))
    assert [i.source for i in vision.images] == [f"dltrain/pytorch@sha256:{'c' * 64}"]  # vision runs pytorch only
    assert [i.framework for i in dev.images] == ["pytorch", "tensorflow"]
    text = (project / "Pulumi.vision.yaml").read_text()
    assert text.count("sharedImages") == 1 and TORCH not in text
    assert text.startswith((REPO_ROOT / "Pulumi.vision.yaml").read_text().split("\nconfig:")[0])  # its comments kept


def test_shared_images_refuses_in_one_line_and_writes_nothing(project, capsys):
    before = {p.name: p.read_text() for p in project.glob("Pulumi.*.yaml")}
    assert main(["shared-images", "--registry", PLATFORM, "--image", "pytorch=dltrain/pytorch:latest", "--write",
                 "dev", "--project-dir", str(project)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "config key 'sharedImages': pytorch: 'dltrain/pytorch:latest' is not pinned" in err
    # All or none: vision would take it, trial runs pytorch too, but a stack running none of the images stops all.
    only_tf = ["shared-images", "--registry", PLATFORM, "--image", f"tensorflow=dltrain/tensorflow@sha256:{'d' * 64}",
               "--write", "dev", "--write", "vision", "--project-dir", str(project)]
    assert main(only_tf) == 2
    assert "--write: vision runs pytorch, none of the images given; leave it out" in capsys.readouterr().err
    assert {p.name: p.read_text() for p in project.glob("Pulumi.*.yaml")} == before
