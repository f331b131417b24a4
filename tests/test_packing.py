"""Packed pretraining (bert_tf.data.packing, run_pretraining.py --pack_sequences): the row layout, the
proof that packed and unpacked compute the same losses and gradients, the same eval metrics
(mirrored over 2 logical CPUs, gradient accumulation), exact input resume, and the script end to
end in bfloat16."""
import concurrent.futures
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import packing
from bert_tf.errors import BertTfError
from bert_tf.drivers import pretraining
from bert_tf.model import modeling
from bert_tf.model import objectives
from support.paths import REPO
from support.pretraining_runs import PREDS, SEQ, command, read_eval_results
from support.script_runner import run_script
from support.pretraining_runs import tiny_config, write_pretraining_records


@pytest.fixture(scope="module")
def short_records(tmp_path_factory):
  """Instances of 5 to 16 tokens at sequence length 16: several fit in a row."""
  return write_pretraining_records(str(tmp_path_factory.mktemp("packing") / "short.tfrecord"), 48,
                                   min_length=5)


def instances(record_file, count, left_to_right=False):
  """The first `count` instances of the file, as one unpacked batch."""
  fn = pretraining.input_fn([record_file], SEQ, PREDS, count, False, left_to_right=left_to_right)
  return next(iter(fn(tf.distribute.InputContext())))


def test_rows_hold_each_instance_at_its_offset():
  # Three instances of 3, 2 and 4 tokens, rows of 6: [CLS]-first instances 7, 8 and 9.
  ids = [[7, 1, 1, 0, 0, 0], [8, 2, 0, 0, 0, 0], [9, 3, 3, 3, 0, 0]]
  features = {
      "input_ids": tf.constant(ids),
      "input_mask": tf.constant([[int(t > 0) for t in row] for row in ids]),
      "segment_ids": tf.constant([[0, 1, 1, 0, 0, 0], [0, 1, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0]]),
      "masked_lm_positions": tf.constant([[2, 0], [1, 0], [1, 3]]),
      "masked_lm_ids": tf.constant([[11, 0], [12, 0], [13, 14]]),
      "masked_lm_weights": tf.constant([[1.0, 0.0], [1.0, 0.0], [1.0, 1.0]]),
      "next_sentence_labels": tf.constant([[1], [0], [1]]),
  }
  rows = {k: v.numpy().tolist() for k, v in packing.pack_window(features, 3, 3).items()}
  # First fit decreasing: the 4 tokens open row 0, the 3 open row 1, the 2 join the 4.
  assert rows["input_ids"] == [[9, 3, 3, 3, 8, 2], [7, 1, 1, 0, 0, 0]]
  assert rows["input_mask"] == [[1] * 6, [1, 1, 1, 0, 0, 0]]
  assert rows["segment_ids"] == [[0, 0, 1, 1, 0, 1], [0, 1, 1, 0, 0, 0]]
  assert rows["position_ids"] == [[0, 1, 2, 3, 0, 1], [0, 1, 2, 0, 0, 0]]
  assert rows["instance_ids"] == [[1, 1, 1, 1, 2, 2], [1, 1, 1, 0, 0, 0]]
  assert rows["masked_lm_positions"] == [[1, 3, 5], [2, 0, 0]]
  assert rows["masked_lm_ids"] == [[13, 14, 12], [11, 0, 0]]
  assert rows["masked_lm_weights"] == [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
  assert rows["next_sentence_positions"] == [[0, 4, 0], [0, 0, 0]]
  assert rows["next_sentence_labels"] == [[1, 0, 0], [1, 0, 0]]
  assert rows["next_sentence_weights"] == [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
  # A full prediction budget (2) or instance count (1) starts a new row.
  assert packing.pack_window(features, 3, 2)["input_ids"].numpy().tolist() == [
      [9, 3, 3, 3, 0, 0], [7, 1, 1, 8, 2, 0]]
  assert len(packing.pack_window(features, 1, 4)["input_ids"]) == 3


def _losses_and_gradients(model, features, use_nsp):
  with tf.GradientTape() as tape:
    outputs = model(features, training=True)
    loss = pretraining.loss_fn(objectives.Objective(no_nsp=not use_nsp))(features, outputs)
  gradients = tape.gradient(loss, model.trainable_variables)
  mlm = pretraining._cross_entropy(outputs["mlm_logits"], features["masked_lm_ids"]).numpy()
  labels, _ = pretraining._next_sentence_labels(features)
  nsp = pretraining._cross_entropy(outputs["nsp_logits"], labels).numpy()
  return float(loss), [None if g is None else tf.convert_to_tensor(g).numpy()
                       for g in gradients], mlm, nsp


@pytest.mark.parametrize("left_to_right", [False, True], ids=["bert", "left_to_right"])
def test_packed_and_unpacked_give_the_same_losses_and_gradients(short_records, left_to_right):
  batch = instances(short_records, 12, left_to_right)
  max_predictions = SEQ if left_to_right else 8
  rows = packing.pack_window(batch, 4, max_predictions)
  assert len(rows["input_ids"]) < 12  # packed: fewer rows than instances
  model = modeling.BertPretrainer(tiny_config(0.0), causal=left_to_right)
  use_nsp = not left_to_right
  loss, gradients, mlm, nsp = _losses_and_gradients(model, batch, use_nsp)
  packed_loss, packed_gradients, packed_mlm, packed_nsp = _losses_and_gradients(model, rows,
                                                                                use_nsp)
  np.testing.assert_allclose(packed_loss, loss, rtol=1e-5)
  # Per instance: its next-sentence loss at its own [CLS], its masked-LM losses at its offset.
  lengths = tf.reduce_sum(batch["input_mask"], axis=1)
  counts = tf.reduce_sum(tf.cast(batch["masked_lm_weights"] > 0, tf.int32), axis=1)
  placement = packing.first_fit_decreasing(lengths, SEQ, 4, counts, max_predictions).numpy()
  for i, (row, _, slot, prediction_offset) in enumerate(placement):
    if use_nsp:  # a causal (left-to-right) encoder pools its last token, and has no NSP loss
      np.testing.assert_allclose(packed_nsp[row, slot], nsp[i], rtol=1e-4, atol=1e-6)
    n = int(counts[i])
    np.testing.assert_allclose(packed_mlm[row, prediction_offset:prediction_offset + n],
                               mlm[i, :n], rtol=1e-4, atol=1e-6)
  for variable, g, packed_g in zip(model.trainable_variables, gradients, packed_gradients):
    if g is None:  # the next-sentence head without its loss
      assert packed_g is None and not use_nsp, variable.name
      continue
    np.testing.assert_allclose(packed_g, g, rtol=1e-3, atol=1e-6, err_msg=variable.name)


def test_input_resumes_at_the_same_row(short_records):
  fn = packing.input_fn([short_records], SEQ, PREDS, 4, True, 4, 8, seed=5, window=16)
  iterator = iter(fn(tf.distribute.InputContext()))
  for _ in range(3):
    next(iterator)
  checkpoint = tf.train.Checkpoint(iterator=iterator)
  path = checkpoint.write(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"it{os.getpid()}"))
  straight = [next(iterator)["input_ids"].numpy() for _ in range(12)]
  resumed_iterator = iter(fn(tf.distribute.InputContext()))
  tf.train.Checkpoint(iterator=resumed_iterator).read(path).assert_consumed()
  resumed = [next(resumed_iterator)["input_ids"].numpy() for _ in range(12)]
  np.testing.assert_array_equal(np.stack(resumed), np.stack(straight))
  # The same seed packs the same rows; another seed another order.
  again = [b["input_ids"].numpy() for b in fn(tf.distribute.InputContext()).take(15)]
  np.testing.assert_array_equal(np.stack(again[3:]), np.stack(straight))
  other = packing.input_fn([short_records], SEQ, PREDS, 4, True, 4, 8, seed=6, window=16)
  first = next(iter(other(tf.distribute.InputContext())))["input_ids"].numpy()
  assert not np.array_equal(first, again[0])


def test_row_limits_are_checked():
  masking = objectives.Masking(max_predictions_per_seq=20)
  mlm, left_to_right = objectives.Objective(masking=masking), objectives.Objective(
      left_to_right=True, masking=masking)
  assert packing.row_limits(128, mlm) == (8, 24)
  assert packing.row_limits(128, left_to_right) == (8, 128)
  with pytest.raises(BertTfError, match="--max_predictions_per_row: 100 is less than"):
    packing.row_limits(128, left_to_right, max_predictions_per_row=100)
  with pytest.raises(BertTfError, match="--max_predictions_per_seq"):
    packing.row_limits(128, mlm, max_predictions_per_row=19)
  with pytest.raises(BertTfError, match="--max_instances_per_row"):
    packing.row_limits(128, mlm, max_instances_per_row=-1)


# Mirrored over 2 logical CPUs: 2 steps packed with gradient accumulation, then the same
# evaluation packed and unpacked.
_WORKER = r"""
import os, sys, json
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, TESTS)
from bert_tf.drivers import pretraining
from bert_tf.model import modeling
from bert_tf.training import loop
from bert_tf.training import runtime
from bert_tf.training.options import RuntimeOptions, Schedule, TrainLoopOptions
from support import pretraining_runs as t
record_file, output_dir = sys.argv[1:3]
strategy = runtime.get_strategy("mirrored", num_gpus=0)
runtime.set_seed(7)
limits = (4, 8)
train_fn = pretraining.input_fn([record_file], t.SEQ, t.PREDS, 8, True, seed=3,
                                row_limits=limits)
model = loop.train(strategy, lambda: modeling.BertPretrainer(t.tiny_config(0.1)),
                   pretraining.loss_fn(), train_fn, Schedule(2, 1e-3, 1, 8), output_dir,
                   TrainLoopOptions(log_steps=1, gradient_accumulation_steps=2),
                   RuntimeOptions(seed=None),  # seeded above: not again
                   metric_fn=pretraining.metric_fn(row_statistics=True))
print("TRAIN", json.dumps(dict(model.train_summary)))
for packed in (False, True):
  eval_fn = pretraining.input_fn([record_file], t.SEQ, t.PREDS, 6, False,
                                 row_limits=limits if packed else None, eval_steps=5)
  result = loop.evaluate(strategy, model, eval_fn, pretraining.metric_fn(row_statistics=packed),
                             pretraining.loss_fn(), steps=None if packed else 5)
  print("PACKED" if packed else "UNPACKED", json.dumps(result))
"""


def _run_worker(tmp_path, record_file, output_dir):
  """The worker as a script of its own, forked from the script runner's server (TensorFlow
  imported, its runtime not yet started: the worker still sets up its 2 logical CPUs)."""
  path = tmp_path / "mirrored_worker.py"
  path.write_text(_WORKER.replace("TESTS", repr(os.path.join(REPO, "tests"))))
  return run_script(str(path), record_file, output_dir, timeout=300)


def test_mirrored_accumulated_training_and_the_same_eval_metrics_packed_or_not(
    short_records, tmp_path):
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    worker = pool.submit(_run_worker, tmp_path, short_records, str(tmp_path / "mirrored"))
    # Meanwhile, the script end to end: bfloat16, packed train and eval.
    output_dir = str(tmp_path / "script")
    script = run_script(*command(tmp_path, output_dir, "--do_train", "--do_eval",
                                 "--pack_sequences", "--num_train_steps=2", "--dtype=bfloat16",
                                 "--max_instances_per_row=3", records=short_records)[1:],
                        timeout=240)
    mirrored = worker.result()
  log = script.stdout + script.stderr
  assert script.returncode == 0, log[-3000:]
  assert "Packing up to 3 instances and 5 masked-LM predictions per row" in log
  results = read_eval_results(output_dir)
  assert results["instances"] == "24"  # --max_eval_steps=3 x --eval_batch_size=8
  assert 1 < float(results["instances_per_row"]) <= 3
  assert 0 < int(results["real_tokens"]) <= 24 * SEQ
  assert "real_tokens_per_second" in log and "instances_per_second" in log

  out = mirrored.stdout
  assert mirrored.returncode == 0, (out + mirrored.stderr)[-3000:]
  lines = {line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
           for line in out.splitlines() if line.startswith(("TRAIN ", "PACKED ", "UNPACKED "))}
  assert lines["TRAIN"]["instances_per_row"] > 1
  assert lines["TRAIN"]["real_tokens_per_second"] > 0
  unpacked, packed = lines["UNPACKED"], lines["PACKED"]
  for name in ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
               "next_sentence_loss"):
    assert packed[name] == pytest.approx(unpacked[name], rel=1e-5), name
  # The loss is a mean of per-batch losses: the batches differ, the value barely.
  assert packed["loss"] == pytest.approx(unpacked["loss"], rel=0.05)
