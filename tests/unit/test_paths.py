"""nri_cpumgr.paths: pathlib's spelling and answers without importing pathlib."""

from pathlib import Path

import pytest

from nri_cpumgr import paths

SPELLINGS = ["/var/lib/nri-cpumgr", "/var/lib/nri-cpumgr/", "state", "./state", "a//b",
             "a/./b", "a/../b", "/", "//", "///a", "//a/b", ".", "./", "", "a/.", "~/x",
             "/a/b/c.yaml", "a/b/", "..", "../a", "a/.hidden"]


@pytest.mark.parametrize("text", SPELLINGS)
def test_normal_is_str_of_a_path(text):
    assert paths.normal(text) == str(Path(text))
    assert paths.normal(Path(text)) == str(Path(text))


def test_is_file_and_exists_answer_as_pathlib(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for name in ("f", "d", "missing", "f/under-a-file", "loop", "dangling", "a\0b"):
        p = tmp_path / name if "\0" not in name else Path(str(tmp_path) + "/" + name)
        assert paths.is_file(str(p)) is p.is_file(), name
        assert paths.exists(str(p)) is p.exists(), name


def test_a_failure_other_than_absence_raises_as_pathlib(tmp_path):
    long = str(tmp_path / ("x" * 300))  # (ENAMETOOLONG: not an "absent" errno)
    with pytest.raises(OSError):
        Path(long).exists()
    with pytest.raises(OSError):
        paths.exists(long)
    with pytest.raises(OSError):
        paths.is_file(long)
