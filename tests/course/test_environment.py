"""environment.yml (conda, Binder) and pyproject.toml (pip) must declare the same dependencies."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONDA_NAMES = {"pytorch": "torch"}  # conda-forge name -> PyPI name


def _name(spec: str) -> str:
    return re.split(r"[<>=!~ \[]", spec.strip(), maxsplit=1)[0].lower()


def _pyproject() -> set[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = data["project"]
    specs = project["dependencies"] + [d for group in project["optional-dependencies"].values() for d in group]
    return {_name(s) for s in specs}


def _conda() -> set[str]:
    names = set()
    text = (ROOT / "environment.yml").read_text()
    for line in text.split("dependencies:", 1)[1].splitlines():
        m = re.match(r"^  - ([A-Za-z0-9_.\-]+.*)$", line)
        if m and not line.strip().startswith("- pip:"):
            name = _name(m.group(1))
            if name not in {"python", "pip"}:
                names.add(CONDA_NAMES.get(name, name))
    return names


def test_environment_yml_declares_same_packages_as_pyproject():
    assert _conda() == _pyproject(), (
        f"only in environment.yml: {_conda() - _pyproject()}; only in pyproject: {_pyproject() - _conda()}"
    )


def test_environment_yml_installs_the_project_itself():
    assert '-e ".[dev]"' in (ROOT / "environment.yml").read_text()


def test_torch_is_declared_as_a_range_not_a_pin():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    torch_spec = next(d for d in deps if _name(d) == "torch")
    assert ">=" in torch_spec and "==" not in torch_spec


def test_declared_python_and_torch_ranges_are_exactly_what_ci_legs_test():
    """pyproject's requires-python and torch floor, environment.yml and the README say what .ci/run's legs run."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    # Pythons: the legs use the default python3 (3.11 on the CI machine) and pyenv's 3.12
    legs = re.findall(r'^run_leg (\w+) "[^"]*"(?: "(\$\w+)")?', ci, flags=re.M)
    assert {name for name, _ in legs} == {"py312", "cpu", "default"}, legs
    assert "versions/3.12" in ci
    assert project["requires-python"] == ">=3.11,<3.13"
    assert "python>=3.11,<3.13" in (ROOT / "environment.yml").read_text()
    assert "with Python 3.11 or 3.12 (the two CI tests)" in readme
    # torch: the floor is the oldest pinned leg, and the README names it
    (torch_spec,) = [d for d in project["dependencies"] if _name(d) == "torch"]
    floor = torch_spec.split(">=")[1]
    pinned = re.findall(r'^run_leg \w+ "torch==([0-9.]+)"', ci, flags=re.M)
    assert min(pinned, key=lambda v: tuple(map(int, v.split(".")))).startswith(floor + "."), (floor, pinned)
    assert f"The course needs `torch>={floor}`" in readme and all(f"torch {v}" in readme for v in pinned)
