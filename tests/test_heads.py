"""Task heads: output shapes and dtypes, original variable names, dropout only in training,
multiple-choice input layouts, and the encoder shared through `.encoder`."""
import numpy as np
import tensorflow as tf
import tf_keras

from bert_tf.model import heads
from support.models import HEADS_CONFIG as CONFIG


def _inputs(batch=2, length=8, seed=0):
  rng = np.random.RandomState(seed)
  mask = np.ones([batch, length], np.int32)
  mask[:, length - 2:] = 0
  return {"input_ids": tf.constant(rng.randint(1, 50, size=[batch, length]), tf.int32),
          "input_mask": tf.constant(mask),
          "segment_ids": tf.constant(np.zeros([batch, length], np.int32)),
          "label_ids": tf.constant(np.zeros([batch], np.int32))}


def _names(model):
  return [v.name for v in model.trainable_variables]


def test_classifier_shapes_names_and_dropout():
  tf.random.set_seed(1)
  model = heads.BertClassifier(CONFIG, num_labels=3)
  inputs = _inputs()
  logits = model(inputs)["logits"]
  assert logits.shape == (2, 3) and logits.dtype == tf.float32
  names = _names(model)
  # run_classifier.py's names, and the encoder's under bert/.
  assert names[-2:] == ["output_weights:0", "output_bias:0"], names
  assert "bert/embeddings/word_embeddings:0" in names
  assert model.variables[-2].shape == (3, 32)
  np.testing.assert_allclose(model(inputs)["logits"], logits)  # inference is deterministic
  assert not np.allclose(model(inputs, training=True)["logits"], logits)
  assert isinstance(model.encoder, tf_keras.Model)


def test_regression_has_one_output():
  model = heads.BertClassifier(CONFIG, num_labels=1)
  assert model(_inputs())["logits"].shape == (2, 1)


def test_span_labeler_original_names():
  model = heads.BertSpanLabeler(CONFIG)
  outputs = model(_inputs(length=10))
  assert outputs["start_logits"].shape == (2, 10)
  assert outputs["end_logits"].dtype == tf.float32
  names = _names(model)
  assert names[-2:] == ["cls/squad/output_weights:0", "cls/squad/output_bias:0"], names
  assert model.variables[-2].shape == (2, 32)


def test_token_classifier():
  model = heads.BertTokenClassifier(CONFIG, num_labels=5)
  assert model(_inputs())["logits"].shape == (2, 8, 5)


def test_multiple_choice_flat_and_3d_inputs_agree():
  model = heads.BertMultipleChoice(CONFIG, num_choices=4)
  flat = _inputs(batch=2, length=4 * 8)
  logits = model(flat)["logits"]
  assert logits.shape == (2, 4)
  stacked = {k: tf.reshape(v, [2, 4, 8]) for k, v in flat.items() if k != "label_ids"}
  np.testing.assert_allclose(model(stacked)["logits"], logits, rtol=1e-5, atol=1e-5)
  # Each choice is scored on its own: choice 0 of example 0 equals a classifier-style pass.
  single = {k: v[:1, :8] for k, v in flat.items() if k != "label_ids"}
  one = model.classifier(model.encoder(single)["pooled_output"])
  np.testing.assert_allclose(one[0, 0], logits[0, 0], rtol=1e-5, atol=1e-5)


def test_encoder_checkpoint_moves_between_task_models(tmp_path):
  source = heads.BertClassifier(CONFIG, num_labels=2)
  source(_inputs())
  path = tf.train.Checkpoint(model=source).save(str(tmp_path / "ckpt"))
  target = heads.BertSpanLabeler(CONFIG)
  target(_inputs())
  tf.train.Checkpoint(model=target).restore(path).expect_partial()
  for a, b in zip(source.encoder.variables, target.encoder.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_mixed_bfloat16_logits_are_float32():
  tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    model = heads.BertClassifier(CONFIG, num_labels=2)
    assert model(_inputs())["logits"].dtype == tf.float32
    model = heads.BertMultipleChoice(CONFIG, num_choices=2)
    assert model(_inputs(length=16))["logits"].dtype == tf.float32
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")


def test_trim_padding_gives_the_same_outputs_at_full_length():
  inputs = _inputs(batch=4, length=12)
  mask = inputs["input_mask"].numpy()
  mask[:, 7:] = 0  # the batch's longest sequence is 7 of 12 positions
  inputs["input_mask"] = tf.constant(mask)
  real = mask.astype(bool)
  for make in [lambda trim: heads.BertClassifier(CONFIG, num_labels=3, trim_padding=trim),
               lambda trim: heads.BertMultipleChoice(CONFIG, num_choices=2, trim_padding=trim),
               lambda trim: heads.BertSpanLabeler(CONFIG, trim_padding=trim),
               lambda trim: heads.BertTokenClassifier(CONFIG, num_labels=5, trim_padding=trim)]:
    full, trimmed = make(False), make(True)
    full(inputs)
    trimmed(inputs)
    trimmed.set_weights(full.get_weights())
    want, got = full(inputs), trimmed(inputs)
    for name in want:
      assert got[name].shape == want[name].shape, name
      per_position = want[name].shape[:2] == real.shape
      # Padded positions of per-position outputs are zeros when trimmed; only real ones must agree.
      np.testing.assert_allclose(got[name].numpy()[real] if per_position else got[name],
                                 want[name].numpy()[real] if per_position else want[name],
                                 atol=1e-5, err_msg=name)
