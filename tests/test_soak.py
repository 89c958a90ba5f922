"""A short soak of `peach dev` (benchmarks/soak.py): a few seconds, a few clients, every kind
of call, a notebook edited meanwhile; nothing unexpected, nothing leaked."""

from __future__ import annotations

import re
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import pytest  # noqa: E402
import soak  # noqa: E402


@pytest.mark.slow
@pytest.mark.serial  # its rate and memory figures
def test_a_short_soak_loses_nothing_and_leaks_nothing(tmp_path):
    report = soak.run_soak(clients=8, seconds=5, rate=10, edit_every=1.5, workdir=tmp_path)
    print(report.summary())
    assert report.unexpected == []
    assert report.answered + report.disconnected == report.sent
    assert report.sent > 100
    # every kind of call was made and answered the way it asked for
    assert set(report.by_kind) == {kind for kind, _ in soak.MIX}
    assert {200, 500, 504} <= set(report.by_status)
    assert report.edits >= 2 and report.versions_seen >= 2  # hot reloads served
    assert report.start is not None and report.end is not None
    assert report.end.fds <= report.start.fds
    assert report.end.children == report.start.children
    assert report.end.replicas == report.start.replicas
    assert report.gateway_growth <= soak.RSS_GROWTH_LIMIT
    assert report.replica_growth <= soak.RSS_GROWTH_LIMIT
    assert report.exit_code == 0 and report.leftover == []


def test_results_section_is_replaced_and_other_sections_kept(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Startup\n\nfigures\n")
    sample = soak.Sample(50 << 20, 200 << 20, 4, 4, 30)
    report = soak.Report(2, 1.0, 5.0, 1.0, sent=3, answered=3, start=sample, end=sample)
    report.exit_code = 0
    for _ in range(2):
        soak.write_results(report, "python benchmarks/soak.py --clients 2", results)
    text = results.read_text()
    assert text.count(soak.SECTION_START) == 1 and text.count(soak.SECTION_END) == 1
    assert "## Startup\n\nfigures" in text
    assert "all targets met" in text and "python benchmarks/soak.py --clients 2" in text
    assert re.search(r"on \d{4}-\d\d-\d\d, commit [0-9a-f]{7,}", text)  # which run it was
    section = text.split(soak.SECTION_START)[1].split(soak.SECTION_END)[0]
    assert not re.search(r"^- ", section, re.M)  # no list of claims the run did not measure
    report.unexpected.append("normal: status 502")
    soak.write_results(report, "cmd", results)
    assert "targets missed: 1 unexpected errors" in results.read_text()
