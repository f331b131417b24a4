"""run_swag.py end to end (subprocess): the real 11-row SWAG sample, and a synthetic SWAG-format
set whose right ending is learnable. Accuracy on the real SWAG is not measured here."""
import csv
import os
import shutil

import numpy as np
import pytest

from support.script_runner import run_script
from support.paths import shared_data
from support import terminal
from support.task_data import synthetic_swag
from support.tiny import WORDS, common_args, read_results, write_config, write_vocab


def test_real_swag_sample(tmp_path):
  sample = os.path.join(shared_data("swag"), "allennlp-swag-regular-sample.csv")
  vocab = os.path.join(shared_data("vocab"), "bert-base-uncased-vocab.txt")
  data_dir = tmp_path / "swag"
  data_dir.mkdir()
  for name in ("train.csv", "val.csv", "test.csv"):
    shutil.copy(sample, data_dir / name)
  output_dir = tmp_path / "out"
  result = run_script("run_swag.py", *common_args(data_dir, vocab,
                                                  write_config(tmp_path / "c.json", 30522),
                                                  output_dir),
                      "--do_train", "--do_eval", "--do_predict", "--train_batch_size=4",
                      "--num_train_epochs=1")
  assert result.returncode == 0, result.stderr[-3000:]
  results = read_results(output_dir)
  assert set(results) == {"eval_accuracy", "eval_loss", "global_step"}
  assert results["global_step"] == 2  # int(11 / 4 * 1)
  with open(output_dir / "test_results.tsv") as f:
    rows = list(csv.reader(f, delimiter="\t"))
  assert rows[0] == ["guid", "prob0", "prob1", "prob2", "prob3", "prediction"]
  assert len(rows) == 12 and rows[1][0] == "swag-0"
  probabilities = np.array([[float(p) for p in row[1:5]] for row in rows[1:]])
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)


def test_synthetic_swag_is_learned(tmp_path):
  data_dir = tmp_path / "swag"
  data_dir.mkdir()
  for name, seed, n in (("train.csv", 1, 192), ("val.csv", 2, 48), ("test.csv", 3, 8)):
    synthetic_swag(data_dir / name, seed, n)
  output_dir = tmp_path / "out"
  result = run_script("run_swag.py", *common_args(data_dir, write_vocab(tmp_path),
                                                  write_config(tmp_path / "c.json", len(WORDS)),
                                                  output_dir),
                      "--do_train", "--do_eval", "--train_batch_size=16", "--num_train_epochs=4",
                      "--learning_rate=2e-3", "--eval_batch_size=16", "--max_seq_length=16")
  assert result.returncode == 0, result.stderr[-3000:]
  assert read_results(output_dir)["eval_accuracy"] >= 0.9
  # The run ends with its accuracy, as eval_results.txt has it, and no chatter before.
  assert terminal.chatter(result.stderr) == []
  figures = terminal.closing_figures(result.stderr)
  assert float(figures["eval_accuracy"]) == pytest.approx(
      read_results(output_dir)["eval_accuracy"], rel=1e-3)
