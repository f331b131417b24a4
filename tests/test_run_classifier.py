"""run_classifier.py end to end (subprocess): a learnable synthetic task (its output_dir, the
original's layout, what a run shows), STS-B-style regression, and bad input. A slice of real
MRPC runs through the README's command (tests/test_readme.py)."""
import os
import random
import types

import numpy as np
import pytest

from bert_tf.cli import flags as bert_flags
from bert_tf.errors import BertTfError
from bert_tf.drivers import finetuning
from bert_tf.tasks import glue
from bert_tf.training import scalars
from support.script_runner import run_script
from support.task_data import synthetic_sst2
from support.tiny import WORDS, common_args, read_results, write_config, write_vocab


def test_synthetic_task_is_learned(tmp_path):
  vocab = write_vocab(tmp_path)
  config = write_config(tmp_path / "bert_config.json", len(WORDS))
  synthetic_sst2(tmp_path / "data", seed=1, n=256)
  output_dir = tmp_path / "out"
  result = run_script(
      "run_classifier.py", *common_args(tmp_path / "data", vocab, config, output_dir),
      "--task_name=SST-2", "--do_train", "--do_eval", "--do_predict", "--train_batch_size=16",
      "--num_train_epochs=4", "--learning_rate=2e-3", "--warmup_proportion=0.1",
      "--eval_batch_size=32", "--save_checkpoints_steps=20", "--keep_checkpoint_max=0",
      "--export_tf1_checkpoint")
  assert result.returncode == 0, result.stderr[-3000:]
  assert "No --init_checkpoint" in result.stderr
  results = read_results(output_dir)
  assert results["eval_accuracy"] >= 0.9, results
  submission = (output_dir / "SST-2.tsv").read_text().splitlines()
  assert len(submission) == 17
  # What a user reads: no example dumps by default, where the TensorBoard logs are, and a closing
  # summary naming what was written and the headline figures.
  assert "*** Example ***" not in result.stderr
  assert f"tensorboard --logdir={output_dir}" in result.stderr
  summary = result.stderr[result.stderr.index("***** Finished in"):]
  for written in ("model.ckpt-64", "eval_results.txt", "test_results.tsv", "SST-2.tsv", "curves.png"):
    assert f"{output_dir}{os.sep}{written}" in summary, summary
  assert f"eval_accuracy = {results['eval_accuracy']:.4g}" in summary
  assert "train.tf_record" not in summary
  # A curve of 64 points (one a step: fewer than CURVE_POINTS steps), the dev metrics beside it,
  # and the picture.
  assert len(scalars.read_scalars(str(output_dir / "train"))["loss"]) == 64
  evaluation = scalars.read_scalars(str(output_dir / "eval"))
  assert evaluation["eval_accuracy"] == [(64, pytest.approx(results["eval_accuracy"]))]
  assert (output_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  # The original's layout: model.ckpt-N (all kept with --keep_checkpoint_max=0), and a complete
  # model directory: the final weights alone, bert_config.json and vocab.txt side by side.
  names = set(os.listdir(output_dir))
  assert {f"model.ckpt-{step}.index" for step in (20, 40, 60, 64)} <= names, sorted(names)
  assert {"bert_model.ckpt.index", "bert_config.json", "vocab.txt"} <= names
  assert (output_dir / "vocab.txt").read_text() == open(vocab).read()
  weights_only = run_script(
      "run_classifier.py", *common_args(tmp_path / "data", output_dir / "vocab.txt",
                                        output_dir / "bert_config.json", tmp_path / "again"),
      "--task_name=SST-2", "--do_predict", f"--init_checkpoint={output_dir}/bert_model.ckpt")
  assert weights_only.returncode == 0, weights_only.stderr[-3000:]
  np.testing.assert_allclose(np.loadtxt(tmp_path / "again" / "test_results.tsv"),
                             np.loadtxt(output_dir / "test_results.tsv"), atol=1e-6)


def test_regression_task_writes_pearson_and_spearman(tmp_path):
  vocab = write_vocab(tmp_path)
  config = write_config(tmp_path / "bert_config.json", len(WORDS))
  data_dir = tmp_path / "stsb"
  data_dir.mkdir()
  header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
  rng = random.Random(0)
  for split, count in (("train", 16), ("dev", 8), ("test", 4)):
    lines = [header + ("\tscore" if split != "test" else "")]
    for i in range(count):
      row = f"{i}\tmain\tx\t2012\t{i}\tnone\tnone\tthe movie was good\tthe film is fine"
      lines.append(row + (f"\t{rng.uniform(0, 5):.3f}" if split != "test" else ""))
    (data_dir / f"{split}.tsv").write_text("\n".join(lines) + "\n")
  output_dir = tmp_path / "out"
  result = run_script("run_classifier.py", *common_args(data_dir, vocab, config, output_dir),
                      "--task_name=STS-B", "--do_train", "--do_eval", "--do_predict",
                      "--train_batch_size=8", "--num_train_epochs=1")
  assert result.returncode == 0, result.stderr[-3000:]
  assert {"eval_pearson", "eval_spearman", "eval_loss", "eval_accuracy", "global_step"} == set(
      read_results(output_dir))
  scores = np.loadtxt(output_dir / "test_results.tsv")
  assert scores.shape == (4,)
  assert (output_dir / "STS-B.tsv").read_text().startswith("index\tprediction\n0\t")


def _flags(tmp_path, **overrides):
  values = dict(do_train=True, do_eval=False, do_predict=False, do_lower_case=True,
                init_checkpoint=None, bert_config_file=write_config(tmp_path / "c.json", 20),
                max_seq_length=32, vocab_file=write_vocab(tmp_path), task_name="mrpc",
                output_dir=str(tmp_path / "out"), data_dir=str(tmp_path), seed=1)
  values.update(overrides)
  return types.SimpleNamespace(**values)


def _run_glue(values):
  """finetuning.run of run_classifier.py's flag values, through the script's door."""
  finetuning.run(glue.GlueTask, bert_flags.finetune_options(glue.GlueTask, values))


def test_bad_input_is_reported_before_any_work(tmp_path):
  with pytest.raises(BertTfError, match="at least one must be True"):
    _run_glue(_flags(tmp_path, do_train=False))
  with pytest.raises(BertTfError, match="--max_seq_length: cannot use sequence length 100"):
    _run_glue(_flags(tmp_path, max_seq_length=100))
  with pytest.raises(BertTfError, match="--vocab_file: .*missing.txt not found"):
    _run_glue(_flags(tmp_path, vocab_file=str(tmp_path / "missing.txt")))
  with pytest.raises(BertTfError, match="unknown task 'nope'; known tasks: cola, sst-2"):
    _run_glue(_flags(tmp_path, task_name="nope"))
  with pytest.raises(BertTfError, match="--train_batch_size: 2 training examples make no full batch of 32"):
    finetuning.finetuning_steps(_flags(tmp_path, train_batch_size=32, num_train_epochs=3.0), 2,
                                  "training examples")
  with pytest.raises(BertTfError, match="--do_lower_case"):
    _run_glue(_flags(tmp_path, do_lower_case=False,
                     init_checkpoint="x/uncased_L-12_H-768_A-12/bert_model.ckpt"))


def test_script_prints_one_line_error(tmp_path):
  result = run_script("run_classifier.py", "--task_name=nope", f"--data_dir={tmp_path}",
                      f"--vocab_file={write_vocab(tmp_path)}",
                      f"--bert_config_file={write_config(tmp_path / 'c.json', 20)}",
                      f"--output_dir={tmp_path / 'out'}", "--max_seq_length=32", "--do_train")
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1].startswith("error: --task_name: unknown task")
  assert not (tmp_path / "out").exists()
