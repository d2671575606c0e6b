"""What makes the project adoptable, checked: an MIT LICENSE that keeps the NCCL topology files' own notice, a
CHANGELOG whose newest release has a version and a date, and an upgrade page naming the pins as they are now."""
import re

from infra import REPO_ROOT
from infra.backends.batch.cluster import BATCH_API_KEPT_FROM, BATCH_API_VERSION
from infra.preview.pulumi_private import PULUMI_VERSION


def _pin(package: str) -> str:
    return re.search(rf"^{re.escape(package)}==(\S+)", (REPO_ROOT / "requirements.txt").read_text(), re.M)[1]


def test_license_is_mit_and_the_third_party_files_keep_their_notice():
    text = (REPO_ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Permission is hereby granted, free of charge" in text
    notice = REPO_ROOT / "images" / "nccl-topology" / "LICENSE"
    assert "Microsoft Corporation" in notice.read_text() and "images/nccl-topology/LICENSE" in text


def test_changelog_names_a_released_version_with_its_date():
    text = (REPO_ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", text, re.M)
    assert releases, "CHANGELOG.md: no '## [X.Y.Z] - YYYY-MM-DD' section"
    versions = [tuple(map(int, v.split("."))) for v, _ in releases]
    assert versions == sorted(versions, reverse=True), "newest release first"
    assert "## [Unreleased]" in text.split(f"## [{releases[0][0]}]")[0]


def test_upgrade_page_names_the_pins_as_they_are():
    text = (REPO_ROOT / "docs" / "upgrade.md").read_text()
    assert _pin("pulumi") == PULUMI_VERSION
    for pin in (f"Pulumi {PULUMI_VERSION}", f"pulumi=={PULUMI_VERSION}",
                f"azure-native {_pin('pulumi-azure-native')}", f"pulumi-azure-native=={_pin('pulumi-azure-native')}",
                f"today {BATCH_API_VERSION}", f"before {BATCH_API_KEPT_FROM}", f"`azure-batch` {_pin('azure-batch')}"):
        assert pin in text, f"docs/upgrade.md does not say {pin!r}: move it with the pin"
    for path in re.findall(r"\b((?:infra|tests)/[\w/]+\.py)\b", text):
        assert (REPO_ROOT / path).is_file(), f"docs/upgrade.md names {path}, which is not here"
