"""The README and docs/ as the tests read them: pages, fenced blocks, logical lines, links, anchors.

The pages whose commands run, in the order they run (one shell, as a user who follows the README's
set-up and then the pages): PAGES. A page of docs/ that is not named here fails tests/test_docs.py,
so that a new page's commands are placed in the run.
"""
import ast
import os
import re
import shlex

from support.flag_reference import is_script
from support.paths import REPO

README = os.path.join(REPO, "README.md")
BENCHMARKS = os.path.join(REPO, "BENCHMARKS.md")
DOCS = os.path.join(REPO, "docs")
# The README's set-up first; then each page after the pages whose outputs its commands read.
PAGES = ("README.md", "docs/data.md", "docs/checkpoints.md", "docs/pretraining-data.md",
         "docs/pretraining.md", "docs/vocabularies.md", "docs/multilingual.md",
         "docs/fine-tuning.md", "docs/classification.md", "docs/distillation.md", "docs/swag.md",
         "docs/squad.md", "docs/ner.md", "docs/feature-extraction.md", "docs/serving.md",
         "docs/python-api.md", "docs/ablations.md", "docs/distributed.md", "docs/tpu-vm.md",
         "docs/runs.md", "docs/troubleshooting.md", "docs/faq.md", "docs/compatibility.md",
         "docs/adding-a-task.md", "docs/flags.md")
# Written before a fenced block, this keeps it out of the run: its flags are still checked against
# the scripts' --help (blocks that need Google Cloud, several machines or a TPU are never run).
FLAGS_ONLY = "<!-- flags only -->"
# The languages of command blocks, and of the block after one that shows what it printed.
COMMANDS = ("bash", "python")
OUTPUT = "text"


def path_of(page):
  return os.path.join(REPO, page)


def text_of(page):
  with open(path_of(page), encoding="utf-8") as f:
    return f.read()


def fenced(page):
  """[(language, code, flags_only, the text between it and the block before)] of a page's fenced
  blocks, in order."""
  found, text, end = [], text_of(page), 0
  for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S):
    before = text[end:match.start()]
    last_line = before.rstrip("\n").splitlines()[-1:] or [""]
    found.append((match.group(1), match.group(2), last_line[0].strip() == FLAGS_ONLY, before))
    end = match.end()
  return found


def blocks(page):
  """[(language, code, flags_only)] of a page's fenced blocks, in order."""
  return [(language, code, flags_only) for language, code, flags_only, _ in fenced(page)]


def with_outputs(page):
  """[(language, code, flags_only, output, before)] of a page's blocks but its output blocks: a
  ```text block right after a command block is that command's output (what it printed), and
  `before` the prose between them (which says how long the command took); None when there is
  none."""
  found = []
  for language, code, flags_only, before in fenced(page):
    if language == OUTPUT and found and found[-1][0] in COMMANDS and found[-1][3] is None:
      found[-1] = found[-1][:3] + (code, before)
    else:
      found.append((language, code, flags_only, None, None))
  return found


# A line of a script's log: its own time stamp, or absl's prefix (with --verbosity=1).
_LOG_PREFIX = re.compile(r"^(?:\d\d:\d\d:\d\d |[IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\] )")
_CLOSING_TITLE = re.compile(r"^\*{5} (.*) \*{5}$")


def _normal(line):
  """A printed line with its numbers (and a time stamp's digits) as # and its runs of spaces as
  one (columns padded to the numbers' widths): what any run of the command prints."""
  return re.sub(r"\s+", " ", re.sub(r"\d+(?:[.,:]\d+)*(?:e-?\d+)?", "#", line.strip()))


def closing_shape(text):
  """The shape of what a shell command block printed: [("title", title) or ("key", name) or
  ("line", text)], numbers as #. A closing summary (`***** title *****`, then indented
  `what: path` and `name = value` lines) gives its title and names; any other line its text."""
  shape, in_summary = [], False
  for line in text.splitlines():
    line = _LOG_PREFIX.sub("", line)
    title = _CLOSING_TITLE.match(line)
    if title:
      shape.append(("title", _normal(title.group(1))))
      in_summary = True
    elif in_summary and line.startswith("  "):
      name = re.match(r"^\s+(.+?)(?: = |: )", line)
      shape.append(("key", _normal(name.group(1) if name else line)))
    elif line.strip():
      in_summary = False
      shape.append(("line", _normal(line)))
  return shape


def literal_shape(line):
  """The shape of a line a Python block printed: a Python literal's structure (dict keys, list
  lengths, value types), or the line with its numbers as #."""
  def shape(value):
    if isinstance(value, dict):
      return {key: shape(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
      return [type(value).__name__] + [shape(item) for item in value]
    return type(value).__name__
  try:
    return shape(ast.literal_eval(line.strip()))
  except (ValueError, SyntaxError):
    return _normal(line)


def _sections(shape):
  """The closing summaries of a closing_shape: [[title, names...]]."""
  found = []
  for kind, text in shape:
    if kind == "title":
      found.append([text])
    elif kind == "key" and found:
      found[-1].append(text)
  return found


def shape_difference(language, shown, printed):
  """How what a page shows a command printed differs in shape from what it prints now, or None.
  A shell block: each summary shown (`***** title *****` and the names of its lines) is one
  printed, with the same names in the same order (the summaries shown in the order printed; a
  page may leave out the ones before its closing lines), and each other line shown is printed,
  in order. A Python block: the same lines, each of the same
  literal shape."""
  if language == "python":
    want = [literal_shape(line) for line in shown.splitlines() if line.strip()]
    got = [literal_shape(line) for line in printed.splitlines() if line.strip()]
    return None if want == got else f"shown {want}\nprinted {got}"
  want, got = closing_shape(shown), closing_shape(printed)
  sections = iter(_sections(got))
  for section in _sections(want):
    same_title = next((s for s in sections if s[0] == section[0]), None)
    if same_title != section:
      return (f"closing summary shown {section}\nprinted "
              f"{same_title or 'none of that title (after those shown before it)'}")
  lines = iter(text for kind, text in got if kind == "line")
  missing = [text for kind, text in want if kind == "line" and text not in lines]
  return f"lines shown but not printed (in this order): {missing}" if missing else None


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


def headings(text):
  """[(line index, level, anchor)] of a page's headings, outside fenced blocks, anchors numbered
  when repeated as GitHub numbers them."""
  found, seen, in_block = [], {}, False
  for index, line in enumerate(text.splitlines()):
    if line.startswith("```"):
      in_block = not in_block
    heading = None if in_block else re.match(r"^(#{1,6}) (.+?)\s*#*$", line)
    if heading:
      base = slug(heading.group(2))
      found.append((index, len(heading.group(1)), base if base not in seen else
                    f"{base}-{seen[base]}"))
      seen[base] = seen.get(base, 0) + 1
  return found


def section(text, anchor):
  """The text of the section a heading's anchor opens (to the next heading of its level or
  above), or None."""
  lines, found = text.splitlines(), headings(text)
  for k, (index, level, name) in enumerate(found):
    if name == anchor:
      end = next((i for i, l, _ in found[k + 1:] if l <= level), len(lines))
      return "\n".join(lines[index:end])
  return None


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
  return [(page, language, code) for page, language, code, _, _ in runs()]


def runs():
  """[(page, language, code, output, before)] of the blocks test_readme runs, in order, each with
  its output block and the prose before that (with_outputs)."""
  return [(page, language, code, output, before) for page in PAGES
          for language, code, flags_only, output, before in with_outputs(page)
          if runnable(language, code, flags_only)]


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
    scripts = [i for i, word in enumerate(words) if is_script(word)]
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
