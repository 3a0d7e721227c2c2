"""The docs site (issue 42, item 9): `mkdocs build --strict` of mkdocs.yml over docs/, as `make docs` runs it, once
per test run, into a temporary directory. Any warning fails it: a broken link between pages or to a heading, a page
missing from the nav or a nav entry without its page, a docstring mkdocstrings cannot read."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip(
    "mkdocs", reason="the [docs] extra is not installed (make test installs it: pip install -e '.[docs]')"
)
pytest.importorskip("mkdocstrings", reason="the [docs] extra is not installed (make test installs it)")

BUILD_SECONDS = 240  # a build takes a few seconds; the deadline is for a loaded box


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` through the real CLI (what `make docs` runs), in the checkout's root."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_SECONDS,
    )


def nav_pages(nav) -> list:
    """Every page a nav (mkdocs.yml's list of titles and pages, nested) names."""
    pages = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built once for this module's tests."""
    out = tmp_path_factory.mktemp("site")
    build = mkdocs_build(ROOT / "mkdocs.yml", out)
    output = build.stdout + build.stderr
    warnings = [line for line in output.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)]
    assert build.returncode == 0 and not warnings, (
        f"`mkdocs build --strict` exited {build.returncode}; fix these "
        f"in docs/ or mkdocs.yml:\n" + "\n".join(warnings or [output[-3000:]])
    )
    return out


def test_the_site_builds_without_a_warning_and_holds_every_page(site):
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"))
    assert config["theme"].name == "material" and config["strict"] is True
    pages = nav_pages(config["nav"])
    for page in pages:
        html = site / ("index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html")
        assert html.is_file(), f"{page} is in mkdocs.yml's nav but the build made no {html}"
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert set(pages) == on_disk, f"pages outside the nav: {sorted(on_disk - set(pages))}"


def test_the_api_reference_is_generated_from_the_docstrings(site):
    """mkdocstrings rendered the modules people import: each name has its anchor and its docstring's words."""
    html = (site / "reference" / "index.html").read_text()
    for name in [
        "parallel_rl.after.api.load_policy",
        "parallel_rl.after.api.train",
        "parallel_rl.worker.SampleSerialCollector",
        "parallel_rl.errors.ConfigError",
    ]:
        assert f'id="{name}"' in html, f"the API reference has no entry for {name}"
    from parallel_rl.after.api import TrainRun

    phrase = "the run directory holding its checkpoints"
    assert phrase in " ".join(TrainRun.__doc__.split()), "pick another phrase of TrainRun's docstring"
    assert phrase in " ".join(re.sub(r"<[^>]+>", " ", html).split()), "TrainRun's docstring is not on the page"


def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    """mkdocs.yml's settings make a link to a missing page or heading an error (so the build above can fail): a
    config that inherits them (`INHERIT`), over two small pages, builds; one broken link of each kind fails it."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (tmp_path / "mkdocs.yml").write_text(
        f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: docs\nplugins: [search]\nnav: [index.md, other.md]\n"
    )
    (docs / "other.md").write_text("# Other\n\n## A heading: (with) `code`\n\ntext\n")
    (docs / "index.md").write_text("# Home\n\n[fine](other.md#a-heading-with-code)\n")
    build = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert build.returncode == 0, build.stderr[-3000:]
    (docs / "index.md").write_text("# Home\n\n[gone](missing.md) and [no heading](other.md#no-such-heading)\n")
    build = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site2")
    assert build.returncode != 0
    assert "missing.md" in build.stderr and "no-such-heading" in build.stderr, build.stderr[-3000:]
