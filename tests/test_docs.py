"""The README stays a two-minute read (at most 900 words), and no relative link of the documentation points nowhere."""

from __future__ import annotations

import re

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def relative_links(text: str) -> list[str]:
    """Targets of markdown links and images that are files of the repository (no URLs, no in-page anchors)."""
    text = re.sub(r"(?ms)^```.*?^```", "", text)  # code blocks hold no links
    targets = [m.group(1).split("#")[0] for m in LINK.finditer(text)]
    return [t for t in targets if t and not re.match(r"[a-z]+:", t)]


def test_readme_is_a_two_minute_read():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").split()) <= 900


def test_every_relative_link_points_to_a_file():
    broken = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in PAGES
        for target in relative_links(page.read_text(encoding="utf-8"))
        if not (page.parent / target).exists()
    ]
    assert not broken, "\n".join(broken)
    assert len(relative_links((ROOT / "README.md").read_text(encoding="utf-8"))) >= 6


def test_the_link_reader_sees_links_images_and_skips_urls_and_code():
    text = "[a](docs/x.md#part) ![p](runs/p.png) [u](https://e.org) [in](#here)\n```\n[c](no.md)\n```\n"
    assert relative_links(text) == ["docs/x.md", "runs/p.png"]
