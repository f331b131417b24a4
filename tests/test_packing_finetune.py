"""Packed fine-tuning (bert_tf.data.packing_finetune, --pack_sequences): the row layout, and the proof
that packed rows give every example the same logits (classifier, NER tokens, SWAG choices), that
one packed step has the loss and gradients of the same examples unpacked (split over replicas and
micro-batches too), and that predictions come back in input order."""
import os
import types

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import packing_finetune
from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.drivers import finetune_options
from bert_tf.model import heads
from bert_tf.tasks import conll
from bert_tf.tasks import glue
from bert_tf.tasks import swag
from bert_tf.training import loop
from bert_tf.training import scalars
from support.pretraining_runs import VOCAB, tiny_config
from support.script_runner import run_script

SEQ = 16  # tiny_config's max_position_embeddings


def _token_rows(rng, n, seq, num_sequences=1, min_length=3):
  """input_ids, input_mask, segment_ids [n, num_sequences * seq]: random lengths, [CLS] first."""
  ids, mask, segments = (np.zeros([n, num_sequences, seq], np.int64) for _ in range(3))
  for i in range(n):
    for c in range(num_sequences):
      length = rng.randint(min_length, seq + 1)
      ids[i, c, :length] = rng.randint(5, VOCAB, size=length)
      ids[i, c, 0] = 2
      mask[i, c, :length] = 1
      segments[i, c, length // 2:length] = 1
  return [a.reshape(n, -1) for a in (ids, mask, segments)]


def write_records(path, kind, n, seed=0):
  """A record file of `kind` (classifier, tagging or multiple_choice) and its schema."""
  rng = np.random.RandomState(seed)
  choices = 4 if kind == "multiple_choice" else 1
  ids, mask, segments = _token_rows(rng, n, SEQ, choices)
  dicts = []
  for i in range(n):
    d = {"input_ids": ids[i], "input_mask": mask[i], "segment_ids": segments[i]}
    if kind == "tagging":
      d["label_ids"] = rng.randint(0, 3, size=SEQ) * mask[i]
      d["label_weights"] = (mask[i] * (rng.rand(SEQ) < 0.7)).astype(np.float32).tolist()
    else:
      d["label_ids"] = [rng.randint(0, choices if choices > 1 else 2)]
      d["is_real_example"] = [1]
    dicts.append({k: list(v) if not isinstance(v, list) else v for k, v in d.items()})
  records.write_records(path, dicts)
  schema = {"classifier": glue.classifier_features(SEQ),
            "tagging": conll.tagging_features(SEQ),
            "multiple_choice": swag.multiple_choice_features(SEQ, 4)}[kind]
  return schema, choices


MODELS = {
    "classifier": lambda: heads.BertClassifier(tiny_config(0.0), num_labels=2, trim_padding=True),
    "tagging": lambda: heads.BertTokenClassifier(tiny_config(0.0), num_labels=3,
                                                 trim_padding=True),
    "multiple_choice": lambda: heads.BertMultipleChoice(tiny_config(0.0), num_choices=4,
                                                        trim_padding=True),
}


def test_rows_hold_each_example_at_its_offset():
  # Examples of 3, 2 and 4 tokens, rows of 6: first fit decreasing puts 4 + 2 in row 0.
  ids = [[7, 1, 1, 0, 0, 0], [8, 2, 0, 0, 0, 0], [9, 3, 3, 3, 0, 0]]
  features = {"input_ids": tf.constant(ids),
              "input_mask": tf.constant([[int(t > 0) for t in row] for row in ids]),
              "segment_ids": tf.constant([[0, 1, 1, 0, 0, 0], [0, 1, 0, 0, 0, 0],
                                          [0, 0, 1, 1, 0, 0]]),
              "label_ids": tf.constant([1, 0, 1]), "is_real_example": tf.constant([1, 1, 1]),
              "example_index": tf.constant([0, 1, 2])}
  layout = packing_finetune.Layout(glue.classifier_features(6), 6, max_instances=3)
  rows = {k: v.numpy().tolist() for k, v in layout.pack(features).items()}
  assert rows["input_ids"] == [[9, 3, 3, 3, 8, 2], [7, 1, 1, 0, 0, 0]]
  assert rows["input_mask"] == [[1] * 6, [1, 1, 1, 0, 0, 0]]
  assert rows["segment_ids"] == [[0, 0, 1, 1, 0, 1], [0, 1, 1, 0, 0, 0]]
  assert rows["position_ids"] == [[0, 1, 2, 3, 0, 1], [0, 1, 2, 0, 0, 0]]
  assert rows["instance_ids"] == [[1, 1, 1, 1, 2, 2], [1, 1, 1, 0, 0, 0]]
  assert rows["cls_positions"] == [[0, 4, 0], [0, 0, 0]]
  assert rows["label_ids"] == [[1, 0, 0], [1, 0, 0]]
  assert rows["example_weights"] == [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
  assert rows["example_index"] == [[2, 1, -1], [0, -1, -1]]
  # Two sequences per example (multiple choice): both in one row, each its own instance.
  pairs = packing_finetune.Layout(swag.multiple_choice_features(3, 2), 3, 2, max_instances=1)
  two = {"input_ids": tf.constant([[5, 6, 0, 7, 0, 0]]),
         "input_mask": tf.constant([[1, 1, 0, 1, 0, 0]]),
         "segment_ids": tf.constant([[0, 1, 0, 0, 0, 0]]), "label_ids": tf.constant([1]),
         "is_real_example": tf.constant([1])}
  rows = {k: v.numpy().tolist() for k, v in pairs.pack(two).items()}
  assert rows["input_ids"] == [[5, 6, 7, 0, 0, 0]]
  assert rows["position_ids"] == [[0, 1, 0, 0, 0, 0]]
  assert rows["instance_ids"] == [[1, 1, 2, 0, 0, 0]]
  assert rows["cls_positions"] == [[[0, 2]]]
  with pytest.raises(BertTfError, match="--max_instances_per_row: expected 1 to 3"):
    packing_finetune.Layout(glue.classifier_features(6), 6, max_instances=4)


def test_progress_lines_count_examples_not_rows():
  figures = {"steps_per_second": 2.0, "examples_per_row": 3.0, "real_tokens_per_row": 10.0}
  scalars._add_rates(figures, 4)  # 4 rows a step
  assert figures["examples_per_second"] == 24.0
  assert figures["real_tokens_per_second"] == 80.0


def _unpacked_predictions(model, path, schema, batch_size):
  input_fn = records.records_input_fn([path], schema, batch_size, is_training=False)
  return list(loop.predict(tf.distribute.get_strategy(), model, input_fn))


@pytest.mark.parametrize("kind", ["classifier", "tagging", "multiple_choice"])
def test_packed_predictions_equal_unpacked_in_input_order(kind, tmp_path):
  path = str(tmp_path / "records.tf_record")
  schema, choices = write_records(path, kind, 37)
  tf.keras.utils.set_random_seed(1)
  model = MODELS[kind]()
  layout = packing_finetune.Layout(schema, SEQ, choices, max_instances=4)
  expected = _unpacked_predictions(model, path, schema, 8)
  strategy = tf.distribute.get_strategy()
  packed = loop.predict(strategy, model, layout.predict_input_fn(path, 3))
  got = list(layout.unpack(packed, path, 8))
  assert layout.count_rows(path) < 37 * (1 if kind != "multiple_choice" else 2)
  assert len(got) == len(expected) == 5
  for a, b in zip(got, expected):
    assert set(a) == set(b)
    np.testing.assert_array_equal(a["input_ids"], b["input_ids"])  # the same examples, in order
    mask = b["input_mask"].astype(bool)
    if kind == "tagging":  # each token's logits, at the example's own positions
      np.testing.assert_allclose(a["logits"][mask], b["logits"][mask], rtol=1e-5, atol=1e-5)
    else:
      np.testing.assert_allclose(a["logits"], b["logits"], rtol=1e-5, atol=1e-5)


def _loss_and_gradients(model, loss_fn, features):
  with tf.GradientTape() as tape:
    loss = loss_fn(features, model(features, training=True))
  grads = tape.gradient(loss, model.trainable_variables)
  return float(loss), [tf.convert_to_tensor(g).numpy() if g is not None else 0.0 for g in grads]


class _Task:  # the losses of glue.GlueTask and conll.NerTask, without their data
  def __init__(self, kind):
    self.kind = kind

  def loss_fn(self, features, outputs):
    if self.kind == "tagging":
      losses = tf.nn.sparse_softmax_cross_entropy_with_logits(features["label_ids"],
                                                              outputs["logits"])
      return packing_finetune.mean_loss(features, losses, features["label_weights"])
    return glue.GlueTask.loss_fn(types.SimpleNamespace(regression=False), features, outputs)


@pytest.mark.parametrize("kind", ["classifier", "tagging"])
def test_one_packed_step_has_the_loss_and_gradients_of_the_same_examples(kind, tmp_path):
  path = str(tmp_path / "records.tf_record")
  schema, _ = write_records(path, kind, 24, seed=3)
  tf.keras.utils.set_random_seed(2)
  model = MODELS[kind]()
  loss_fn = _Task(kind).loss_fn
  weights = "label_weights" if kind == "tagging" else packing_finetune.EXAMPLE_WEIGHTS
  layout = packing_finetune.Layout(schema, SEQ, max_instances=4)
  rows = layout.count_rows(path)
  # One optimizer step over every row, as 2 replicas x 2 micro-batches would see it.
  step_rows = rows - rows % 4
  fn = layout.train_input_fn(path, step_rows, seed=5, shuffle_buffer_size=24,
                             loss_weights=weights)
  micro_batches = []
  for replica in range(2):  # each replica's share of the step, split as the training loop does
    share = next(iter(fn(tf.distribute.InputContext(2, replica, 2))))
    half = int(share["input_ids"].shape[0]) // 2
    micro_batches += [{name: t[:half] for name, t in share.items()},
                      {name: t[half:] for name, t in share.items()}]
  whole = next(iter(layout.train_input_fn(path, step_rows, seed=5, shuffle_buffer_size=24,
                                          loss_weights=weights)(tf.distribute.InputContext())))
  # The replicas' micro-batches are the step's rows.
  np.testing.assert_array_equal(
      np.sort(np.concatenate([m["input_ids"] for m in micro_batches]), axis=0),
      np.sort(whole["input_ids"].numpy(), axis=0))
  total, grads = 0.0, None
  for micro in micro_batches:  # the training loop scales each by 1 / (replicas x accumulation)
    loss, g = _loss_and_gradients(model, loss_fn, micro)
    total += loss / 4
    grads = g if grads is None else [a + b for a, b in zip(grads, g)]
  grads = [g / 4 for g in grads]
  # The same examples unpacked, in one batch: those of the whole step (its rows' examples).
  packed_loss, packed_grads = _loss_and_gradients(model, loss_fn, whole)
  assert total == pytest.approx(packed_loss, rel=1e-5)
  for a, b in zip(grads, packed_grads):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  unpacked = _examples_of(whole, schema)
  loss, unpacked_grads = _loss_and_gradients(model, loss_fn, unpacked)
  assert packed_loss == pytest.approx(loss, rel=1e-5)
  for a, b in zip(packed_grads, unpacked_grads):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def _examples_of(rows, schema):
  """The examples packed in rows (one sequence each), unpacked and padded to SEQ."""
  rows = {k: v.numpy() for k, v in rows.items()}
  examples = {name: [] for name in schema}
  for r, k in zip(*np.nonzero(rows["example_weights"])):
    ids = rows["instance_ids"][r]
    length = int(np.sum(ids == k + 1))
    start = int(rows["cls_positions"][r, k])
    for name, spec in schema.items():
      if spec.shape == []:
        examples[name].append(rows[name][r, k])
      else:
        value = np.zeros([SEQ], rows[name].dtype)
        value[:length] = rows[name][r, start:start + length]
        examples[name].append(value)
  return {name: tf.constant(np.stack(values)) for name, values in examples.items()}


# Mirrored over 2 logical CPUs with 2 micro-batches a step, against one device: packed steps are
# the same steps (every pipeline packs the same rows and keeps its share; the loss is normalized
# over the step), the mirrored run with its step-4 checkpoint removed (as a kill after step 2's
# save leaves it) resumes to the same weights, and mirrored prediction unpacks to the unpacked
# logits in file order. Run by run_script's pre-imported server: TensorFlow's import is not paid.
_WORKER = r"""
import os, sys
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, TESTS)
from bert_tf.data import packing_finetune
from bert_tf.data import records
from bert_tf.training import loop
from bert_tf.training import runtime
from bert_tf.training.options import Schedule, TrainLoopOptions
import test_packing_finetune as t
path, output_dir = sys.argv[1:3]
schema, _ = t.write_records(path, "classifier", 64, seed=4)
layout = packing_finetune.Layout(schema, t.SEQ, max_instances=4)
loss_fn = t._Task("classifier").loss_fn
metric_fn = packing_finetune.with_row_statistics(None)

def train(strategy_name, accumulation, name):
  strategy = runtime.get_strategy(strategy_name, num_gpus=0)
  runtime.set_seed(7)
  model = loop.train(strategy, t.MODELS["classifier"], loss_fn,
                     layout.train_input_fn(path, 8, 3, 64),
                     Schedule(4, 1e-3, 1, 8), os.path.join(output_dir, name),
                     TrainLoopOptions(log_steps=1, gradient_accumulation_steps=accumulation,
                                      save_checkpoints_steps=2),
                     metric_fn=metric_fn)
  assert loop.global_step(model) == 4
  print(name, model.train_summary["examples_per_row"], flush=True)
  return strategy, model, [v.numpy() for v in model.trainable_variables]

one = train("one_device", 1, "one")[2]
strategy, model, mirrored = train("mirrored", 2, "mirrored")
for name in tf.io.gfile.glob(os.path.join(output_dir, "mirrored", "model.ckpt-4.*")):
  tf.io.gfile.remove(name)
resumed = train("mirrored", 2, "mirrored")[2]  # from step 2: input position and all
for a, b, c in zip(one, mirrored, resumed):
  np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
  np.testing.assert_array_equal(c, b)
# Mirrored prediction: the packed rows come back unpacked, in file order, with the same logits.
unpacked = list(loop.predict(strategy, model, records.records_input_fn([path], schema, 8,
                                                                       False)))
packed = layout.unpack(loop.predict(strategy, model, layout.predict_input_fn(path, 4)),
                       path, 8)
for a, b in zip(packed, unpacked):
  np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
  np.testing.assert_allclose(a["logits"], b["logits"], rtol=1e-5, atol=1e-5)
print("SAME", flush=True)
# Done: skip the interpreter's teardown, where TensorFlow's tf.data can wait on an autotune
# thread's sleep for the iterators still alive (16 s seen here; past the timeout once in CI).
os._exit(0)
"""


def test_mirrored_packed_training_equals_one_device_resumes_and_predicts_in_order(tmp_path):
  tests = os.path.dirname(os.path.abspath(__file__))
  script = tmp_path / "worker.py"
  script.write_text(_WORKER.replace("TESTS", repr(tests)))
  out = run_script(str(script), str(tmp_path / "records.tf_record"), str(tmp_path),
                   timeout=900)
  assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
  assert "SAME" in out.stdout
  assert float(out.stdout.split("one ")[1].split()[0]) > 1  # several examples a row


def test_a_bilstm_head_refuses_packed_rows():
  model = heads.BertClassifier(tiny_config(0.0), num_labels=2, bilstm_units=4)
  rows = {name: tf.ones([1, SEQ], tf.int32) for name in ("input_ids", "input_mask",
                                                          "segment_ids", "position_ids",
                                                          "instance_ids")}
  with pytest.raises(BertTfError, match="--pack_sequences: not with --bilstm_head"):
    model(dict(rows, cls_positions=tf.zeros([1, 2], tf.int32)))


@pytest.mark.parametrize("flag", ["bilstm_head", "left_to_right"])
def test_packing_refuses_heads_that_read_across_or_pool_the_last_token(flag):
  with pytest.raises(BertTfError, match=f"--pack_sequences: not with --{flag}"):
    finetune_options.FinetuneOptions(output_dir="out", bert_config_file="c", vocab_file="v",
                                     do_train=True, max_seq_length=SEQ, pack_sequences=True,
                                     **{flag: True})
