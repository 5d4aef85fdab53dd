"""nri_cpumgr.standin: logging imported without linecache, tokenize and textwrap; the first
traceback still shows its source lines and an exception group its indentation, and the
modules that took the stand-ins end up holding the real modules (issue 34)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]


def test_logging_without_the_rare_modules_until_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "failing.py").write_text(
        "def boom():\n    raise ValueError('the line of the raise')  # marker\n")
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from nri_cpumgr import standin
        standin.import_with("logging", ("linecache", "textwrap"))
        print(sorted(m for m in ("linecache", "textwrap", "tokenize") if m in sys.modules))
        import logging, traceback
        from failing import boom
        logging.basicConfig(stream=sys.stdout, format="%(message)s")
        try:
            boom()
        except ValueError:
            logging.exception("failed")
        try:
            raise ExceptionGroup("group", [KeyError("k")])
        except ExceptionGroup:
            traceback.print_exc(file=sys.stdout)
        import linecache, textwrap
        print(traceback.linecache is linecache, traceback.textwrap is textwrap,
              type(linecache).__name__)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=TOP, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == "[]"
    assert "    raise ValueError('the line of the raise')  # marker" in lines
    assert "  | ExceptionGroup: group (1 sub-exception)" in lines
    assert "    | KeyError: 'k'" in lines
    assert lines[-1] == "True True module"


def test_an_imported_module_is_returned_as_it_is() -> None:
    import logging

    from nri_cpumgr import standin

    assert standin.import_with("logging", ("textwrap",)) is logging
    assert type(sys.modules["textwrap"]).__name__ == "module"
