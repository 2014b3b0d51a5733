"""Whatever bytes a package file holds, loading reports problems and never raises."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clawtower.core.experts.package import load_package

from .conftest import ACME

TARGETS = ["expert.yaml", "functions/classify-ticket.md", "processes/ticket-triage.md",
           "tools/helpdesk.yaml", "state/queue.md", "knowledge/severity-matrix.md"]
YAMLISH = st.text(alphabet=st.sampled_from(list("abc:-[]{}&*!|>'\"#\n ---.0123456789\\%@`")),
                  max_size=300)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=st.sampled_from(TARGETS),
       content=st.one_of(st.binary(max_size=300), YAMLISH.map(str.encode),
                         YAMLISH.map(lambda t: ("---\n" + t + "\n---\nbody\n").encode())))
def test_any_file_content_is_reported_not_raised(target: str, content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "pkg"
        shutil.copytree(ACME, root)
        (root / target).write_bytes(content)
        pkg = load_package(root)
        for p in pkg.problems:
            assert p.file and p.field and p.message
