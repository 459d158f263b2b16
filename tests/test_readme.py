"""The README is a front page: short, every link into the repository resolving, each picture there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_a_front_page_whose_links_and_pictures_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    targets = [t for t in LINK.findall(text) if not t.startswith(("http://", "https://"))]
    assert any(t.startswith("docs/images/") for t in targets) and any(t.endswith(".md") for t in targets)
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert missing == []
    assert "1280×720" in text, "it says what the window shows on a small screen"
    assert text.count("```sh") == 2, "two set-up commands"


def test_every_link_of_the_docs_into_the_repository_resolves():
    missing = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if not target.startswith(("http://", "https://", "mailto:")) and not (page.parent / target).exists():
                missing.append(f"{page.name}: {target}")
    assert missing == []
