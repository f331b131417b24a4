"""bert_tf.serving.tflite and what uses it: the converted model gives the Keras model's outputs at
any batch size and length (one interpreter resized between calls), a task model's trim_padding
does not leak into the file, export --tflite writes assets.extra/model.tflite inside the new
version (with what rebuilds its server), and predictor.load(..., backend="tflite") gives the
SavedModel's results, from an export (SQuAD and NER too: test_predictor) and from an output_dir;
the misuses end in one-line errors. Tiny models."""
import json
import os
import types

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.drivers import finetune_options
from bert_tf.model.config import BertConfig
from bert_tf.model import modeling
from bert_tf.serving import export
from bert_tf.serving import predictor
from bert_tf.serving import tflite
from bert_tf.tasks import base
from support import models
from support import tiny

WORDS = tiny.WORDS + ["he", "said", "so", "anna", "met", "tom", "in", "paris", ".", "?"]
SEQ = 24
# The trim test's classifier: one layer, as converting a model costs seconds a layer.
ONE_LAYER = BertConfig(**dict(tiny.TINY, vocab_size=len(WORDS), num_hidden_layers=1))
PAIRS = [("the movie was good", "he said so"), ("Anna met Tom", "Tom met Anna in Paris ."),
         ("bad", ""), ("a very very really awful plot , the story", "acting ?"),
         ("good " * 30, "fine")]


def _ids(shape, lengths, seed=0):
  """int32 ids, mask and segments [B, T]; row b has lengths[b] real positions."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(5, len(WORDS), shape).astype(np.int32)
  mask = (np.arange(shape[1])[None, :] < np.array(lengths)[:, None]).astype(np.int32)
  segments = ((np.arange(shape[1])[None, :] >= np.array(lengths)[:, None] // 2) * mask)
  return ids * mask, mask, segments.astype(np.int32)


@pytest.fixture(scope="module")
def encoder():
  """A tiny encoder and its file, giving the sequence and pooled outputs (one conversion for the
  tests of the runner)."""
  tf.random.set_seed(0)
  model = modeling.BertModel(tiny.bert_config(len(WORDS)))
  return model, tflite.convert(model, ["sequence_output", "pooled_output"])


def test_runner_matches_the_encoder_at_every_shape(encoder):
  model, blob = encoder
  runner = tflite.Runner(blob)
  for shape, lengths in [((1, 5), [5]), ((3, 17), [17, 9, 1]), ((2, 32), [32, 20]),
                         ((1, 5), [3])]:  # back to an earlier shape: the one interpreter resized
    ids, mask, segments = _ids(shape, lengths)
    want = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments},
                 training=False)
    got = runner(ids, mask, segments)
    assert sorted(got) == ["pooled_output", "sequence_output"]
    for key in got:
      np.testing.assert_allclose(got[key], want[key].numpy(), atol=2e-5, err_msg=str(shape))


def test_a_big_batch_runs_in_passes_with_the_same_outputs(encoder):
  """A call over tokens_per_pass runs as passes of tokens_per_pass // T rows (here 2, 2 and 1 of
  5 rows): each row's outputs are those of one pass over the whole batch, and of the model."""
  model, blob = encoder
  ids, mask, segments = _ids((5, 17), [17, 9, 1, 12, 17], seed=4)
  whole = tflite.Runner(blob, tokens_per_pass=None)
  split = tflite.Runner(blob, tokens_per_pass=40)
  calls = []
  run = split._run
  split._run = lambda **arrays: calls.append(arrays["input_ids"].shape) or run(**arrays)
  got, want = split(ids, mask, segments), whole(ids, mask, segments)
  assert calls == [(2, 17), (2, 17), (1, 17)]
  keras = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments}, training=False)
  for key in ("sequence_output", "pooled_output"):
    assert got[key].shape == want[key].shape == keras[key].shape
    np.testing.assert_allclose(got[key], want[key], atol=1e-6)
    np.testing.assert_allclose(got[key], keras[key].numpy(), atol=2e-5)
  with pytest.raises(ValueError, match="tokens_per_pass"):
    tflite.Runner(blob, tokens_per_pass=0)


def test_a_task_models_trim_padding_stays_out_of_the_file():
  """trim_padding cuts to the batch's longest input, a shape XNNPACK cannot plan for: convert()
  traces without it (every output is the same) and gives the model its setting back."""
  tf.random.set_seed(1)
  model = export.build_model("classifier", ONE_LAYER, num_labels=3)
  model.trim_padding = True
  blob = tflite.convert(model)
  assert model.trim_padding is True
  runner = tflite.Runner(blob)
  ids, mask, segments = _ids((4, 16), [16, 3, 7, 1], seed=2)
  want = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments},
               training=False)["logits"].numpy()
  np.testing.assert_allclose(runner(ids, mask, segments)["logits"], want, atol=2e-5)
  with pytest.raises(ValueError, match="quantize should be one of"):
    tflite.convert(model, quantize="int4")


@pytest.fixture(scope="module")
def mrpc(tmp_path_factory):
  """A tiny pair classifier: its fake run_classifier output_dir and its export with --tflite."""
  tmp = tmp_path_factory.mktemp("tflite_mrpc")
  config = BertConfig(**dict(tiny.TINY, vocab_size=len(WORDS)))
  out = tmp / "out"
  out.mkdir()
  (out / "bert_config.json").write_text(json.dumps(config.to_dict()))
  (out / "vocab.txt").write_text("\n".join(WORDS) + "\n")
  tf.random.set_seed(3)
  model = export.build_model("classifier", config, num_labels=2)
  models.randomize(model, seed=3)  # weights of a trained model's spread: outputs that differ
  tf.train.Checkpoint(model=model).save(str(out / "ckpt"))
  task_class = base.get("glue")
  options = types.SimpleNamespace(output_dir=str(out), do_lower_case=True, max_seq_length=SEQ,
                                  task=task_class.options_class(task_name="MRPC"))
  task = task_class.__new__(task_class)
  vars(task).update(options=options)
  (out / "task_config.json").write_text(json.dumps(task.task_config()))
  version = export.export("classifier", config, str(out / "vocab.txt"), True, str(out),
                          str(tmp / "export"), SEQ, tflite=True, label_list=["0", "1"], pair=True)
  return types.SimpleNamespace(tmp=tmp, output_dir=str(out), export_dir=str(tmp / "export"),
                               version=version, config=config)


def _assert_same(got, want):
  assert [r["label"] for r in got] == [r["label"] for r in want]
  for g, w in zip(got, want):
    assert g["scores"] == pytest.approx(w["scores"], abs=2e-5)


def test_export_tflite_and_the_predictor_backend(mrpc):
  assert os.path.getsize(os.path.join(mrpc.version, export.TFLITE_FILE)) > 10_000
  assert not [name for name in os.listdir(mrpc.export_dir) if name.startswith(".tmp")]
  saved = predictor.load(mrpc.export_dir, backend="savedmodel")
  want = saved(PAIRS)
  # backend="auto" on such an export (both opened, timed, the faster kept): tests/test_backends.py
  assert predictor.load(mrpc.output_dir).backend == "savedmodel"  # auto: no conversion unasked
  assert np.ptp([r["scores"]["1"] for r in want]) > 0.05
  _assert_same(predictor.load(mrpc.export_dir, backend="tflite", batch_size=2)(PAIRS), want)
  from_run = predictor.load(mrpc.output_dir, backend="tflite")  # converted on loading
  _assert_same(from_run(PAIRS), want)
  _assert_same(from_run([a for a, _ in PAIRS], text_b=[b for _, b in PAIRS]), want)


def test_tflite_misuse_is_one_line(mrpc, tmp_path):
  with pytest.raises(BertTfError, match="backend: expected one of auto, savedmodel, tflite, "
                                        "openvino, got 'onnx'"):
    predictor.load(mrpc.export_dir, backend="onnx")
  plain = export.export("classifier", mrpc.config, os.path.join(mrpc.output_dir, "vocab.txt"),
                        True, mrpc.output_dir, str(tmp_path / "plain"), SEQ,
                        label_list=["0", "1"], pair=True)
  assert not os.path.exists(os.path.join(plain, export.TFLITE_FILE))
  assert predictor.load(str(tmp_path / "plain")).backend == "savedmodel"
  with pytest.raises(BertTfError, match="backend='tflite': .* holds no assets.extra/model.tflite "
                                        r"\(export with --tflite\)"):
    predictor.load(str(tmp_path / "plain"), backend="tflite")
  with pytest.raises(BertTfError, match="--tflite: exports a float32 model only"):
    export.export("classifier", mrpc.config, os.path.join(mrpc.output_dir, "vocab.txt"), True,
                  mrpc.output_dir, str(tmp_path / "bf16"), SEQ, tflite=True, dtype="bfloat16",
                  label_list=["0", "1"], pair=True)
  assert not os.path.exists(tmp_path / "bf16")  # refused before anything was written
  with pytest.raises(BertTfError, match="--tflite: only with --export_dir"):
    finetune_options.FinetuneOptions(output_dir="out", bert_config_file="c", vocab_file="v",
                                     do_train=True, tflite=True)
