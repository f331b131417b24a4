"""bert_tf/data/check.py, `python -m bert_tf.data.check DIR`: the shared data passes whole, and
copies broken as a user's copy can be (a row short, a column missing, a wrong label or header, an
answer off its offset, a tag unknown, a file not UTF-8 or not there) are named, file and line."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from bert_tf.data import check
from support.paths import REPO, SHARED_DATA, shared_data


def problems_of(root, name):
  line, problems, missing = check.check(str(root), [name])[name]
  return line, problems, missing


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
  """A copy of the small shared data sets the docs' commands read (not GLUE's largest files)."""
  root = tmp_path_factory.mktemp("data")
  for name in ("glue/MRPC", "squad", "conll2003", "swag", "vocab"):
    shutil.copytree(shared_data(*name.split("/")), root / name)
  return root


@pytest.fixture
def broken(copy, tmp_path):
  """A fresh copy of `copy` to break."""
  root = tmp_path / "data"
  shutil.copytree(copy, root)
  return root


def test_the_shared_data_passes_whole_in_one_process_without_tensorflow():
  shared_data("glue", "MRPC")
  done = subprocess.run([sys.executable, "-c", "import sys; from bert_tf.data import check; "
                         "code = check.main(['check', sys.argv[1]]); "
                         "assert 'tensorflow' not in sys.modules; sys.exit(code)", SHARED_DATA],
                        cwd=REPO, capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, done.stdout + done.stderr
  lines = done.stdout.splitlines()
  assert re.match(r"\*{5} .*: 12 of 14 data sets there, no problem found \*{5}$", lines[0])
  report = dict(line.strip().split(": ", 1) for line in lines[1:])
  assert list(report) == check.data_sets()
  # The counts of ../shared/data/README.md.
  assert report["glue/MRPC"] == "train.tsv 3,668 rows, dev.tsv 408 rows, test.tsv 1,725 rows"
  assert report["conll2003"].startswith("train.txt 14,041 sentences, valid.txt 3,250 sentences")
  assert report["squad"].startswith("dev-v2.0.subset.json 14 questions (6 unanswerable)")
  assert report["swag"].startswith("allennlp-swag-regular-sample.csv 11 rows")
  assert report["glue/MNLI"] == report["glue/QQP"] == "not there"


def test_a_copy_of_the_needed_files_passes(copy):
  results = check.check(str(copy))
  assert all(not problems for _, problems, _ in results.values())
  # corpus/ was not copied: every page file it holds is missing, and its page named.
  line, _, missing = results["corpus"]
  assert line == "not there (docs/pretraining-data.md reads them)" and len(missing) == 10


def rewrite(path, edit):
  with open(path, encoding="utf-8", newline="") as f:
    text = f.read()
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write(edit(text))


def edit_lines(path, edit):
  rewrite(path, lambda text: "".join(edit(text.splitlines(keepends=True))))


def test_glue_rows_columns_labels_and_header(broken):
  mrpc = broken / "glue" / "MRPC"
  edit_lines(mrpc / "train.tsv", lambda lines: lines[:-1])
  edit_lines(mrpc / "dev.tsv", lambda lines: lines[:1] + ["7" + lines[1][1:],
                                                        lines[2].replace("\t", " ", 1)] + lines[3:])
  edit_lines(mrpc / "test.tsv", lambda lines: ["idx" + lines[0][5:]] + lines[1:])
  _, problems, _ = problems_of(broken, "glue/MRPC")
  assert problems == [
      "glue/MRPC/train.tsv: 3,667 rows, expected 3,668 (a whole copy's)",
      "glue/MRPC/dev.tsv: line 2: label '7' is not one of ('0', '1')",
      "glue/MRPC/dev.tsv: line 3 has 4 tab-separated columns, expected 5",
      "glue/MRPC/test.tsv: header 'idx\\t#1 ID\\t#2 ID\\t#1 String\\t#2 String', expected "
      "'index\\t#1 ID\\t#2 ID\\t#1 String\\t#2 String'"]


def test_squad_answer_offsets_and_counts(broken):
  path = broken / "squad" / "dev-v2.0.subset.json"
  data = json.loads(path.read_text(encoding="utf-8"))
  answer = next(a for p in data["data"][0]["paragraphs"] for q in p["qas"] for a in q["answers"])
  answer["answer_start"] += 1
  data["data"].pop()
  path.write_text(json.dumps(data), encoding="utf-8")
  _, problems, _ = problems_of(broken, "squad")
  assert len(problems) == 2 and "is not at answer_start" in problems[0]
  assert problems[1].endswith("1 article and 7 questions, expected 2 and 14 (a whole copy's)")


def test_conll_columns_tags_and_sentences(broken):
  edit_lines(broken / "conll2003" / "valid.txt", lambda lines: lines[:3] + [
      "- : O O extra\n", "LEICESTERSHIRE NNP B-NP B-ORGANIZATION\n"] + lines[5:])
  rewrite(broken / "conll2003" / "test.txt", lambda t: t.replace("\n\n", "\n", 2))
  _, problems, _ = problems_of(broken, "conll2003")
  assert problems == [
      "conll2003/valid.txt: line 4 has 5 columns, expected 4 (token POS chunk NER)",
      "conll2003/valid.txt: line 5: tag 'B-ORGANIZATION' is not O, B-/I- PER, ORG, LOC or MISC",
      "conll2003/test.txt: 3,452 sentences, expected 3,453 (a whole copy's)"]


def test_swag_labels_and_columns(broken):
  path = broken / "swag" / "allennlp-swag-regular-sample.csv"
  rewrite(path, lambda t: t[:-2] + "5\n")
  _, problems, _ = problems_of(broken, "swag")
  assert problems == ["swag/allennlp-swag-regular-sample.csv: line 12: label '5' is not 0, 1, "
                      "2 or 3"]


def test_vocabularies_utf16_and_special_ids(broken):
  path = broken / "vocab" / "bert-base-uncased-vocab.txt"
  text = path.read_text(encoding="utf-8")
  path.write_text(text.replace("[MASK]\n", "[MASK2]\n"), encoding="utf-8")
  cased = broken / "vocab" / "bert-base-cased-vocab.txt"
  cased.write_bytes(cased.read_text(encoding="utf-8").encode("utf-16"))
  _, problems, _ = problems_of(broken, "vocab")
  assert problems[0] == "vocab/bert-base-uncased-vocab.txt: [MASK] has id None, expected 103"
  assert problems[1].startswith("vocab/bert-base-cased-vocab.txt: UTF-16")


def test_the_command_names_what_is_missing_and_exits_1(broken, capsys):
  os.remove(broken / "glue" / "MRPC" / "dev.tsv")
  # Four sentences cut in two (the first " O" line is -DOCSTART-'s).
  rewrite(broken / "conll2003" / "train.txt", lambda t: t.replace(" O\n", " O\n\n", 5))
  assert check.main(["check", str(broken), "glue/MRPC", "conll2003"]) == 1
  out, err = capsys.readouterr()
  lines = out.splitlines()
  assert lines[0].endswith(": 2 of 2 data sets there, 2 with problems *****")
  assert lines[1] == ("  glue/MRPC: train.tsv 3,668 rows, test.tsv 1,725 rows; not there: "
                      "dev.tsv (docs/classification.md reads it)")
  assert lines[2].startswith("  conll2003: train.txt 14,045 sentences") and "1 problem" in lines[2]
  assert err.strip().endswith("2 data sets not as docs/data.md says (above)")
  assert check.main(["check", str(broken), "glue/FOO"]) == 1
  assert "glue/FOO: not a data set the docs use; known: glue/CoLA" in capsys.readouterr().err
  assert check.main(["check", str(broken / "nothing")]) == 1
  assert "nothing: not a directory" in capsys.readouterr().err
