"""The README as the tests (and bench/bench_readme.py) read it: its fenced blocks, which of them
run, and their logical lines."""
import os
import re

from support.paths import REPO

README = os.path.join(REPO, "README.md")


def readme_blocks():
  """[(language, code)] of the README's fenced blocks, in order."""
  with open(README, encoding="utf-8") as f:
    return re.findall(r"^```(\w+)\n(.*?)^```", f.read(), flags=re.M | re.S)


def logical_lines(code):
  return code.replace("\\\n", " ").splitlines()


def runnable(language, code):
  """Whether a block runs on a test machine: not the opening `make demo` / `make test`, nor what
  needs Google Cloud, several GPUs or workers, or a TPU (`gs://` or `...` in it)."""
  if language == "bash":
    return "make demo" not in code and "gs://" not in code and "..." not in code
  return language == "python"
