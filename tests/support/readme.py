"""The README and docs/ as the tests read them: pages, fenced blocks, logical lines, links, anchors.

The pages whose commands run, in the order they run (one shell, as a user who follows the README's
set-up and then the pages): PAGES. A page of docs/ that is not named here fails tests/test_docs.py,
so that a new page's commands are placed in the run.
"""
import os
import re
import shlex

from support.flag_reference import SCRIPTS
from support.paths import REPO

README = os.path.join(REPO, "README.md")
BENCHMARKS = os.path.join(REPO, "BENCHMARKS.md")
DOCS = os.path.join(REPO, "docs")
# The README's set-up first; then each page after the pages whose outputs its commands read.
PAGES = ("README.md", "docs/checkpoints.md", "docs/pretraining-data.md", "docs/pretraining.md",
         "docs/vocabularies.md", "docs/fine-tuning.md", "docs/classification.md",
         "docs/distillation.md", "docs/swag.md", "docs/squad.md", "docs/ner.md", "docs/feature-extraction.md", "docs/embeddings.md", "docs/serving.md",
         "docs/ablations.md", "docs/distributed.md", "docs/runs.md", "docs/troubleshooting.md",
         "docs/compatibility.md", "docs/adding-a-task.md", "docs/flags.md")
# Written before a fenced block, this keeps it out of the run: its flags are still checked against
# the scripts' --help (blocks that need Google Cloud, several machines or a TPU are never run).
FLAGS_ONLY = "<!-- flags only -->"


def path_of(page):
  return os.path.join(REPO, page)


def text_of(page):
  with open(path_of(page), encoding="utf-8") as f:
    return f.read()


def blocks(page):
  """[(language, code, flags_only)] of a page's fenced blocks, in order."""
  found = []
  for match in re.finditer(r"^```(\w*)\n(.*?)^```", text_of(page), flags=re.M | re.S):
    before = text_of(page)[:match.start()].rstrip("\n").splitlines()[-1:] or [""]
    found.append((match.group(1), match.group(2), before[0].strip() == FLAGS_ONLY))
  return found


def readme_blocks():
  """[(language, code)] of the README's fenced blocks, in order."""
  return [(language, code) for language, code, _ in blocks("README.md")]


def logical_lines(code):
  return code.replace("\\\n", " ").splitlines()


def markdown_pages():
  """README.md, BENCHMARKS.md and every page of docs/, as paths relative to the repository."""
  pages = ["README.md", "BENCHMARKS.md"]
  pages += sorted(f"docs/{name}" for name in os.listdir(DOCS) if name.endswith(".md"))
  return pages


def slug(heading):
  """GitHub's anchor for a heading: markup and punctuation dropped, lower case, spaces to '-'."""
  text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
  text = re.sub(r"<[^>]+>", "", text).lower()
  text = re.sub(r"[^\w\- ]", "", text)
  return text.replace(" ", "-")


def anchors(text):
  """Every anchor a page offers: its headings' (numbered when repeated, as GitHub does) and its
  explicit <a id=...> / <a name=...> ones. Fenced blocks hold no headings."""
  found, seen = set(), {}
  prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
  for heading in re.findall(r"^#{1,6} (.+?)\s*#*$", prose, flags=re.M):
    base = slug(heading)
    found.add(base if base not in seen else f"{base}-{seen[base]}")
    seen[base] = seen.get(base, 0) + 1
  found.update(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", text))
  return found


def links(text):
  """[(line number, target)] of a page's inline and reference links, outside fenced blocks."""
  found = []
  in_block = False
  for number, line in enumerate(text.splitlines(), 1):
    if line.startswith("```"):
      in_block = not in_block
      continue
    if in_block:
      continue
    prose = re.sub(r"`[^`]*`", "", line)
    found += [(number, target) for target in re.findall(r"\]\(([^)\s]+)\)", prose)]
    found += [(number, target) for target in re.findall(r"^\[[^\]]+\]: (\S+)", prose)]
  return found


def runnable(language, code, flags_only=False):
  """Whether test_readme runs a block: bash and python ones, but the opening `make demo` / `make
  test`, blocks marked flags-only, and blocks that need what a test machine lacks (Google Cloud,
  several GPUs or workers, a TPU: their commands hold `gs://` or `...`)."""
  if flags_only:
    return False
  if language == "bash":
    return "make demo" not in code and "gs://" not in code and "..." not in code
  return language == "python"


def run_blocks():
  """[(page, language, code)] of the blocks test_readme runs, in the order it runs them."""
  return [(page, language, code) for page in PAGES
          for language, code, flags_only in blocks(page) if runnable(language, code, flags_only)]


def script_commands(code, variables):
  """[(script, [flag names])] of the lines of a bash block that run one of the top-level scripts;
  `$NAME` is expanded from `variables` (NAME="..." lines, which this also records)."""
  found = []
  for line in logical_lines(code):
    assigned = re.match(r"^(\w+)=\"([^\"$]*)\"$", line.strip())
    if assigned:
      variables[assigned.group(1)] = assigned.group(2)
      continue
    line = re.sub(r"\$(\w+)", lambda m: variables.get(m.group(1), m.group(0)), line)
    try:
      words = shlex.split(line, comments=True)
    except ValueError:
      words = line.split()
    scripts = [i for i, word in enumerate(words) if os.path.basename(word) in SCRIPTS]
    if not scripts:
      continue
    flags = []
    for word in words[scripts[0] + 1:]:
      if word in ("&&", ";", "|", "||") or word.startswith(">"):
        break
      if word.startswith("--"):
        flags.append(word[2:].split("=", 1)[0])
    found.append((os.path.basename(words[scripts[0]]), flags))
  return found
