"""run_ner.py end to end on tiny synthetic CoNLL data: fine-tuning and feature-based training,
eval_results.txt, test_predictions.txt in conlleval's format (scored again with seqeval), windows
for long sentences, restoring from output_dir, and one-line errors for bad input."""
import os
import re
import types

import pytest
from seqeval import metrics as seqeval_metrics

from support.script_runner import run_script
from support.task_data import with_layers
from support import terminal


def _run(*args):
  return run_script("run_ner.py", *args, timeout=600)


def _results(path):
  with open(path) as f:
    return {k: v for k, v in (line.strip().split(" = ") for line in f)}


@pytest.fixture(scope="module")
def data(conll_data):
  """conftest's tiny CoNLL data with a 1-layer copy of its 4-layer config: it learns the data as
  well, and each run traces every layer again. The feature-based run takes conll_data's own four
  (--feature_layers=concat_last_four)."""
  return types.SimpleNamespace(tmp=conll_data.tmp, data_dir=conll_data.data_dir,
                               common=with_layers(conll_data.common, conll_data.tmp, 1))


@pytest.fixture(scope="module")
def fine_tuned(data):
  output_dir = data.tmp / "fine_tuned"
  # Each split in one batch: a batch of another shape is one more trace of the predict step.
  result = _run(*data.common, f"--output_dir={output_dir}", "--do_train", "--do_eval",
                "--do_predict", "--num_train_epochs=6", "--predict_batch_size=32")
  assert result.returncode == 0, result.stderr[-3000:]
  return types.SimpleNamespace(output_dir=output_dir, log=result.stderr)


def test_fine_tuning_learns_and_writes_eval_results(fine_tuned):
  assert "tag scheme IOB2" in fine_tuned.log
  results = _results(fine_tuned.output_dir / "eval_results.txt")
  assert float(results["eval_f1"]) > 0.6
  assert {"eval_precision", "eval_recall", "eval_accuracy", "eval_loss", "eval_PER_f1",
          "eval_LOC_support", "global_step"} <= set(results)
  assert results["global_step"] == "120"
  labels = (fine_tuned.output_dir / "label_list.txt").read_text().split()
  assert labels == ["O", "B-LOC", "B-PER", "I-PER"]


def test_the_log_reads_plainly_and_ends_with_dev_and_test_f1(fine_tuned):
  log = fine_tuned.log
  assert terminal.chatter(log) == []
  # Each split's scores once, as conlleval's table (overall, then a line per type), not a line
  # per metric: those are in the results files.
  assert log.count("\naccuracy: ") == 2 and log.count("      PER: precision:") == 2
  before_the_summary = log[:log.index("***** Finished")]
  assert re.findall(r"(?:eval|test)_\w+ = ", before_the_summary) == []
  # The closing lines hold both splits' F1, precision and recall, as the files have them.
  figures = terminal.closing_figures(log)
  for prefix, name in (("eval", "eval_results.txt"), ("test", "test_results.txt")):
    results = _results(fine_tuned.output_dir / name)
    for metric in ("f1", "precision", "recall"):
      key = f"{prefix}_{metric}"
      assert float(figures[key]) == pytest.approx(float(results[key]), rel=1e-3), key
  assert log.rstrip().splitlines()[-1].split(" ", 1)[1].startswith("  test_")


def test_predictions_file_is_conlleval_format_and_scores_as_seqeval(fine_tuned, data):
  assert "split into windows" in fine_tuned.log
  source = (data.data_dir / "test.txt").read_text().splitlines()
  written = (fine_tuned.output_dir / "test_predictions.txt").read_text().splitlines()
  assert len(written) == len(source)
  # Every input line comes back with one more column, the predicted tag; sentences as conlleval
  # reads them (a blank line ends one).
  gold, predicted, g, p = [], [], [], []
  for line, out in zip(source + [""], written + [""]):
    assert out == line == "" or (out.startswith(line + " ") and len(out.split()) == 5)
    if out and not out.startswith("-DOCSTART-"):
      g.append(out.split()[3])
      p.append(out.split()[4])
    elif g:
      gold.append(g)
      predicted.append(p)
      g, p = [], []
  assert len(gold) == 21 and len(gold[0]) == 40
  results = _results(fine_tuned.output_dir / "test_results.txt")
  assert float(results["test_f1"]) == pytest.approx(seqeval_metrics.f1_score(gold, predicted))


def test_eval_restored_from_output_dir_gives_the_same_results(fine_tuned, data):
  before = _results(fine_tuned.output_dir / "eval_results.txt")
  os.remove(fine_tuned.output_dir / "eval_results.txt")
  result = _run(*data.common, f"--output_dir={fine_tuned.output_dir}", "--do_eval",
                "--eval_batch_size=3")
  assert result.returncode == 0, result.stderr[-3000:]
  after = _results(fine_tuned.output_dir / "eval_results.txt")
  for key in ("eval_f1", "eval_precision", "eval_recall", "global_step"):
    assert float(after[key]) == pytest.approx(float(before[key]), abs=1e-6)


def test_feature_based_trains_only_the_bilstm(conll_data):
  output_dir = conll_data.tmp / "feature_based"
  result = _run(*conll_data.common, f"--output_dir={output_dir}", "--do_train", "--do_eval",
                "--num_train_epochs=1", "--feature_based", "--feature_layers=concat_last_four",
                "--lstm_units=8", "--dtype=bfloat16", "--eval_batch_size=32")
  assert result.returncode == 0, result.stderr[-3000:]
  results = _results(output_dir / "eval_results.txt")
  assert 0.0 <= float(results["eval_f1"]) <= 1.0 and results["global_step"] == "20"


def test_unknown_eval_tag_and_docstart_inside_sentence_are_reported(data, fine_tuned):
  data_dir = data.tmp / "odd_data"
  data_dir.mkdir()
  (data_dir / "train.txt").write_text((data.data_dir / "train.txt").read_text())
  (data_dir / "valid.txt").write_text("John NN I-NP B-PER\n-DOCSTART- -X- -X- O\n"
                                      "Paris NN I-NP B-CITY\n\n\n\nrome NN I-NP B-LOC\n")
  # Evaluated from the fine-tuned weights: the label set is still read from train.txt.
  result = _run(*data.common, f"--data_dir={data_dir}", f"--output_dir={data.tmp / 'odd'}",
                f"--init_checkpoint={fine_tuned.output_dir}", "--do_eval")
  assert result.returncode == 0, result.stderr[-3000:]
  assert "tags not in the training label set" in result.stderr and "'B-CITY' x1" in result.stderr
  assert "-DOCSTART- line(s) inside a sentence" in result.stderr
  results = _results(data.tmp / "odd" / "eval_results.txt")
  assert int(results["eval_entities"]) == 3


@pytest.mark.parametrize("file_text,flag,message", [
    ("John NN B-PER\nParis B-LOC\n", None, "train.txt:2: expected 3 columns (as on line 1), got 2"),
    (None, "--max_seq_length=128", "--max_seq_length: cannot use sequence length 128"),
    (None, "--do_train=false", "--do_train/--do_eval/--do_predict: at least one must be True"),
])
def test_bad_input_is_one_line_error(data, file_text, flag, message):
  data_dir = data.data_dir
  if file_text:
    data_dir = data.tmp / "bad_data"
    data_dir.mkdir(exist_ok=True)
    (data_dir / "train.txt").write_text(file_text)
  args = [*data.common, f"--data_dir={data_dir}", f"--output_dir={data.tmp / 'bad'}",
          "--do_train"]
  result = _run(*args, *([flag] if flag else []))
  assert result.returncode == 1
  assert message in result.stderr.strip().splitlines()[-1]
  assert "Traceback" not in result.stderr
