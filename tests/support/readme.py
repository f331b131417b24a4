"""The README as the tests read it: its fenced blocks and their logical lines."""
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
