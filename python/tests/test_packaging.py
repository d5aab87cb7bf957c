"""The package as installed: `pip install .` from the repository root and `pip install ./python`
describe the same package, and the typing files ship with it."""

from __future__ import annotations

import pathlib
import sys

import tcptail

if sys.version_info >= (3, 11):
    import tomllib
else:  # scripts/test-python installs tomli for older interpreters
    import tomli as tomllib

PYTHON_DIR = pathlib.Path(__file__).resolve().parent.parent
ROOT = PYTHON_DIR.parent


def load(path: pathlib.Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def test_root_and_python_pyprojects_describe_the_same_package():
    root = load(ROOT / "pyproject.toml")
    inner = load(PYTHON_DIR / "pyproject.toml")
    assert root["build-system"] == inner["build-system"]
    assert root["project"] == inner["project"]
    root_maturin, inner_maturin = root["tool"]["maturin"], inner["tool"]["maturin"]
    # Paths are relative to each file; they must name the same crate and sources.
    assert (ROOT / root_maturin["manifest-path"]).resolve() == (PYTHON_DIR / inner_maturin["manifest-path"]).resolve()
    assert (ROOT / root_maturin["python-source"]).resolve() == (PYTHON_DIR / inner_maturin["python-source"]).resolve()
    for key in ("module-name", "features"):
        assert root_maturin[key] == inner_maturin[key], key


def test_typing_files_are_installed():
    package = pathlib.Path(tcptail.__file__).parent
    assert (package / "py.typed").is_file()
    assert (package / "_native.pyi").is_file()
