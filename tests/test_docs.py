"""The README, docs/ and BENCHMARKS.md as a reader meets them: short where they must be, every link
and anchor resolving, every command's flags the scripts' own, the flag reference current, and no
commit, date, load figure or issue number in the guide nor in bert_tf/'s comments, docstrings and
help texts (the dated history under benchmarks/ holds those). tests/test_readme.py runs the
commands themselves."""
import concurrent.futures
import os
import re

import pytest

from support.script_runner import run_script
from support import flag_reference as flag_reference_lib
from support import readme
from support.paths import REPO

README_MAX_LINES = 250
BENCHMARKS_ROW_MAX = 200

# What the guide never says, and the pattern that finds it. A version number (2.20, 1.0.4), a
# measured figure or a Unicode code point matches none of them.
HISTORY = {
    "a commit hash": r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b",
    "a date": r"\b(?:19|20)\d\d-[01]\d-[0-3]\d\b",
    "a load average": r"(?i)\bload average|\bload \d",
    "an issue number": r"(?i)\bissues? #?\d+",
}


def history_in(text):
  """[(line number, what, the text)] of a page's lines that carry history. Links into the dated
  history (their text is the file's date) and reference definitions are the allowed exceptions."""
  found = []
  for number, line in enumerate(text.splitlines(), 1):
    if re.match(r"^\[[^\]]+\]: ", line):
      continue
    line = re.sub(r"\[[^\]]*\]\(benchmarks/[^)]*\)", "", line)
    line = re.sub(r"\]\([^)]*\)", "]", line)
    for what, pattern in HISTORY.items():
      found += [(number, what, match.group(0)) for match in re.finditer(pattern, line)]
  return found


def test_the_readme_fits_five_minutes():
  with open(readme.README, encoding="utf-8") as f:
    lines = f.read().splitlines()
  assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_every_page_is_one_click_from_the_readme_and_in_the_run_order():
  pages = {page for page in readme.markdown_pages() if page.startswith("docs/")}
  assert pages == set(readme.PAGES) - {"README.md"}, (
      "tests/support/readme.py's PAGES must name every page of docs/, in the order its "
      "commands run")
  linked = {os.path.normpath(target.split("#")[0])
            for _, target in readme.links(readme.text_of("README.md"))}
  assert pages - linked == set(), "pages the README does not link to"


HISTORY_PAGES = sorted(f"benchmarks/{name}" for name in os.listdir(os.path.join(REPO, "benchmarks"))
                       if name.endswith(".md"))


@pytest.mark.parametrize("page", readme.markdown_pages() + HISTORY_PAGES)
def test_links_and_anchors_resolve(page):
  broken = []
  for number, target in readme.links(readme.text_of(page)):
    if re.match(r"^[a-z]+:", target):
      continue  # http(s), mailto: not followed
    path, _, anchor = target.partition("#")
    full = os.path.normpath(os.path.join(os.path.dirname(readme.path_of(page)), path)) \
        if path else readme.path_of(page)
    if not os.path.exists(full):
      broken.append(f"{page}:{number}: {target}: no such file")
    elif anchor and full.endswith(".md"):
      with open(full, encoding="utf-8") as f:
        if anchor not in readme.anchors(f.read()):
          broken.append(f"{page}:{number}: {target}: no such anchor")
  assert not broken, "\n".join(broken)


def test_benchmarks_is_one_table_whose_rows_fit_a_screen():
  text = readme.text_of("BENCHMARKS.md")
  rows = [line for line in text.splitlines() if line.startswith("|")]
  assert len(re.findall(r"^\|---", text, flags=re.M)) == 1, "one table"
  long_rows = [row[:80] for row in rows if len(row) > BENCHMARKS_ROW_MAX]
  assert not long_rows, f"rows over {BENCHMARKS_ROW_MAX} characters: {long_rows}"
  assert all(re.search(r'<a id="[\w-]+"></a>', row) for row in rows[2:]), "every row an anchor"


@pytest.mark.parametrize("page", readme.markdown_pages())
def test_the_guide_carries_no_history(page):
  found = history_in(readme.text_of(page))
  assert not found, "\n".join(f"{page}:{n}: {what}: {text!r}" for n, what, text in found)


def test_the_library_carries_no_history():
  """Comments, docstrings and --help texts in bert_tf/ say why the code is so, not when or where it
  was measured (a figure that is the reason points to BENCHMARKS.md); the scripts' --help texts
  are checked through docs/flags.md."""
  found = []
  for directory, _, names in os.walk(os.path.join(REPO, "bert_tf")):
    for name in sorted(n for n in names if n.endswith(".py")):
      path = os.path.join(directory, name)
      with open(path, encoding="utf-8") as f:
        found += [f"{os.path.relpath(path, REPO)}:{n}: {what}: {text!r}"
                  for n, what, text in history_in(f.read())]
  assert not found, "\n".join(found)


def test_the_history_patterns_find_what_they_are_for():
  text = ("took 5 min at commit 1231fd4\non 2026-11-26\nat load average 15\nat load 4-7\n"
          "(issue 37)\n[2026-11-26](benchmarks/2026-11-26.md) TensorFlow 2.20, 1.0.4, 9.5e-7, "
          "U+2028, 0.044715, 12,641 instances\n[run]: benchmarks/2026-11-26.md#x-2026-11-26\n")
  assert [(n, what) for n, what, _ in history_in(text)] == [
      (1, "a commit hash"), (2, "a date"), (3, "a load average"), (4, "a load average"),
      (5, "an issue number")]


# A measured figure: a number with a decimal point or a unit, or a run of them that shares one
# ("1.09-1.28x", "23.1 / 41.3 ms"). Whole numbers alone (lengths, steps, counts) are a command's
# settings, not measurements, and so are the values in `code`.
_NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?"
_UNIT = r"x|%|ms|s|min|h|KB|MB|GB|points?"
FIGURES = re.compile(rf"(?<![\w.]){_NUMBER}(?:\s?(?:-|/)\s?{_NUMBER})*(?:\s?({_UNIT})\b)?")


# A version is no figure: "TensorFlow 2.20", "Python 3.10", "bert-tensorflow 1.0.4".
VERSIONS = re.compile(r"\b(Python|TensorFlow|TF|torch|Beam|transformers|bert-tensorflow|"
                      r"capability)\s+\d+(?:\.\d+)+|\d+\.\d+\.\d+")


def figures(text):
  """[(number, unit)] of the figures in a text (inline code, link targets and versions left
  out)."""
  text = re.sub(r"\]\([^)]*\)", "]", re.sub(r"`[^`]*`", "", text))
  text = VERSIONS.sub("", text)
  found = []
  for match in FIGURES.finditer(text):
    unit = (match.group(1) or "").replace("points", "point")
    for number in re.findall(_NUMBER, match.group(0)[:match.start(1) - match.start(0)]
                             if match.group(1) else match.group(0)):
      number = number.lstrip("+-").replace(",", "")
      if unit or "." in number:
        found.append((number, unit))
  return found


def same_figure(figure, row_figures):
  """Whether a page's figure is one of its row's, as written or rounded to the page's digits (a
  figure written without its unit, beside one that has it, takes the row's)."""
  number, unit = figure
  digits = len(number.split(".")[1]) if "." in number and "e" not in number else 0
  for value, row_unit in row_figures:
    if row_unit in (unit, unit or row_unit) and (value == number or "e" not in value + number and
                             round(float(value), digits) == float(number)):
      return True
  return False


def sentences(text):
  """The prose sentences and table rows of a page, outside fenced blocks."""
  found = []
  for paragraph in re.split(r"\n\s*\n", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)):
    lines = paragraph.strip().splitlines()
    if lines and all(line.startswith("|") for line in lines):
      found += lines
    else:
      found += re.split(r"(?<=[.!?:])\s+(?=[A-Z(\[`])", " ".join(line.strip() for line in lines))
  return found


def benchmarks_rows():
  """{anchor: row} of BENCHMARKS.md's table."""
  return {re.search(r'<a id="([\w-]+)"', row).group(1): row
          for row in readme.text_of("BENCHMARKS.md").splitlines() if row.startswith("| <a id")}


def figures_not_in_their_rows(text, rows):
  """'figure (anchors): sentence' for every figure of a sentence that links BENCHMARKS.md rows
  and is in none of them."""
  wrong = []
  for sentence in sentences(text):
    anchors = re.findall(r"BENCHMARKS\.md#([\w-]+)", sentence)
    if not anchors:
      continue
    row_figures = [figure for anchor in anchors for figure in figures(rows.get(anchor, ""))]
    wrong += [f"{''.join(figure)} ({', '.join(anchors)}): {sentence[:120]}"
              for figure in figures(sentence) if not same_figure(figure, row_figures)]
  return wrong


@pytest.mark.parametrize("page", [p for p in readme.markdown_pages() if p != "BENCHMARKS.md"])
def test_every_figure_next_to_a_benchmarks_link_is_its_rows(page):
  """A figure the README or a page states in the sentence (or table row) that links a row of
  BENCHMARKS.md is that row's figure (rounded to the digits written): one source for each."""
  wrong = figures_not_in_their_rows(readme.text_of(page), benchmarks_rows())
  assert not wrong, f"{page}:\n" + "\n".join(wrong)


def test_the_figure_check_finds_what_a_row_lacks():
  rows = {"a": "| <a id=\"a\"></a>x | 1.09-1.28x faster; 23.1 / 41.3 ms; 8 min 18 s | -0.8 points |"}
  text = ("Faster, 1.2-1.28x, at 41 ms and `--lr=0.5` after 8 min 18 s, within 0.8 points "
          "([B](BENCHMARKS.md#a)). Not linked: 9.9x.\n\n| [m](BENCHMARKS.md#a) | 1.3x, 40 ms |\n")
  assert figures_not_in_their_rows(text, rows) == [
      "1.2x (a): Faster, 1.2-1.28x, at 41 ms and `--lr=0.5` after 8 min 18 s, within 0.8 points "
      "([B](BENCHMARKS.md#a)).", "40ms (a): | [m](BENCHMARKS.md#a) | 1.3x, 40 ms |"]


# What a run's section under benchmarks/ must hold, so that the row's figure can be checked: the
# command that made it, the commit it ran at and the CPU it ran on.
RUN_HOLDS = {
    "a command": r"`[^`]*(?:\.py|\.sh|\bbash |\bmake |pytest|python|\bpip )[^`]*`",
    "a commit": HISTORY["a commit hash"] + r"|(?i:commit|library|code)\s+[0-9a-f]{7,40}\b",
    "the CPU": r"(?i)epyc|xeon|\bavx2\b|avx-?512|\bamx\b",
}


def test_every_benchmarks_row_links_a_run_with_its_command_commit_and_cpu():
  text = readme.text_of("BENCHMARKS.md")
  definitions = dict(re.findall(r"^\[([^\]]+)\]: (\S+)$", text, flags=re.M))
  lacking = []
  for anchor, row in benchmarks_rows().items():
    runs = re.findall(r"\]\[([^\]]+)\]", row) + re.findall(r"\]\((benchmarks/[^)]+)\)", row)
    if not runs:
      lacking.append(f"{anchor}: links no run")
    for run in runs:
      path, _, heading = definitions.get(run, run).partition("#")
      if not path.startswith("benchmarks/"):
        lacking.append(f"{anchor}: {run} is not a section under benchmarks/")
        continue
      held = readme.section(readme.text_of(path), heading) or ""
      lacking += [f"{anchor}: {run} has no {what}" for what, pattern in RUN_HOLDS.items()
                  if not re.search(pattern, held)]
  assert not lacking, "\n".join(lacking)


def test_every_link_definition_of_benchmarks_is_used():
  text = readme.text_of("BENCHMARKS.md")
  defined = set(re.findall(r"^\[([^\]]+)\]: ", text, flags=re.M))
  used = set(re.findall(r"\]\[([^\]]+)\]", text))
  assert defined <= used, f"unused link definitions: {sorted(defined - used)}"


def test_every_command_block_shows_what_it_printed_and_how_long_it_took():
  """Every block tests/test_readme.py runs is followed by what it printed (a ```text block, whose
  shape test_readme checks against what the command prints now), and the prose between them says
  how long it took, linking the BENCHMARKS.md row that holds that time."""
  lacking = []
  for page, _, code, output, before in readme.runs():
    block = f"{page}, the block starting {code.strip().splitlines()[0][:50]!r}"
    if output is None:
      lacking.append(f"{block}: no output block after it")
    elif not re.search(r"\d+ (?:min|s|h)\b", before) or "BENCHMARKS.md#" not in before:
      lacking.append(f"{block}: no time and BENCHMARKS.md row before its output block")
  assert not lacking, "\n".join(lacking)


def flag_reference():
  with open(os.path.join(REPO, "docs", "flags.md"), encoding="utf-8") as f:
    return flag_reference_lib.flags_by_script(f.read())


def unknown_flags(pages):
  """'page: script --flag' for every flag of a command in these pages that its script lacks."""
  known, variables, unknown = flag_reference(), {}, []
  for page in pages:
    for language, code, _ in readme.blocks(page):
      if language != "bash":
        continue
      for script, flags in readme.script_commands(code, variables):
        unknown += [f"{page}: {script} --{flag}" for flag in flags if flag not in known[script]]
  return unknown


def test_every_command_uses_only_its_scripts_flags():
  """Blocks that run and blocks marked flags-only alike: a flag the script does not define fails."""
  assert set(flag_reference()) == set(flag_reference_lib.scripts())
  assert not unknown_flags(readme.PAGES)


def test_a_flag_a_script_lacks_is_found(tmp_path, monkeypatch):
  page = tmp_path / "page.md"
  page.write_text('```bash\nMODEL="--bert_config_file=c.json --init_chekpoint=m"\n'
                  "$PY run_classifier.py $MODEL --task_name=MRPC --do_trian \\\n"
                  "  --output_dir=out  # --not_a_flag in a comment\n```\n", encoding="utf-8")
  monkeypatch.setattr(readme, "path_of", lambda _: str(page))
  assert unknown_flags(["page.md"]) == ["page.md: run_classifier.py --init_chekpoint",
                                        "page.md: run_classifier.py --do_trian"]


def test_the_flag_reference_is_current():
  """docs/flags.md is what the scripts' --help prints now (each a fork of the script runner's one
  process: no TensorFlow import of its own)."""
  scripts = flag_reference_lib.scripts()
  with concurrent.futures.ThreadPoolExecutor(len(scripts)) as pool:
    done = dict(zip(scripts, pool.map(lambda script: run_script(script, "--help", timeout=300),
                                      scripts)))
  for script, result in done.items():
    assert result.returncode in (0, 1) and "flags:" in result.stdout, f"{script}: {result.stderr}"
  page = flag_reference_lib.page({script: result.stdout for script, result in done.items()})
  with open(flag_reference_lib.PAGE, encoding="utf-8") as f:
    assert f.read() == page, "docs/flags.md is out of date: python tests/support/flag_reference.py"
