"""The original release's harness (bert-tensorflow 1.0.4 on TF 2.20 in a tf.compat.v1 Session,
with TF 1.15's tensorflow.contrib.layers.layer_norm re-created), its tiny config and vocabulary,
and the inputs both sides are fed: test_original_oracle.py and test_original_training_oracle.py
run it (see test_original_oracle.py's docstring)."""
import numpy as np

# Tiny, but with weights large enough (initializer_range 0.3) that the GELU inputs spread over
# [-4, 4], where its forms differ. No dropout, so that our training forward can be compared too.
CONFIG = {"vocab_size": 23, "hidden_size": 16, "num_hidden_layers": 4, "num_attention_heads": 2,
          "intermediate_size": 24, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
          "attention_probs_dropout_prob": 0.0, "max_position_embeddings": 20,
          "type_vocab_size": 2, "initializer_range": 0.3}
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "is", "hairy", "jack",
         "##son", "##ville", "?", "no", "it", "not", ".", "a", "cat", "sat", "on", "mat", ","]

ORACLE = r'''
import os, sys, types
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf
tf1 = tf.compat.v1
tf1.disable_v2_tensorshape()  # TF 1.15's shapes: run_classifier.py reads shape[-1].value


def layer_norm(inputs, begin_norm_axis=1, begin_params_axis=-1, scope=None):
  """tf.contrib.layers.layer_norm of TF 1.15, with its defaults (center, scale, no activation)."""
  with tf1.variable_scope(scope, "LayerNorm", [inputs]):
    rank = inputs.shape.ndims
    params_shape = inputs.shape[begin_params_axis:]
    beta = tf1.get_variable("beta", params_shape, initializer=tf1.zeros_initializer())
    gamma = tf1.get_variable("gamma", params_shape, initializer=tf1.ones_initializer())
    norm_axes = list(range(begin_norm_axis % rank, rank))
    mean, variance = tf1.nn.moments(inputs, norm_axes, keep_dims=True)
    outputs = tf1.nn.batch_normalization(inputs, mean, variance, offset=beta, scale=gamma,
                                         variance_epsilon=1e-12)
    outputs.set_shape(inputs.shape)
    return outputs


contrib = types.ModuleType("tensorflow.contrib")
contrib.layers = types.ModuleType("tensorflow.contrib.layers")
contrib.layers.layer_norm = layer_norm
sys.modules["tensorflow.contrib"] = contrib
sys.modules["tensorflow.contrib.layers"] = contrib.layers
from absl import flags
from bert import modeling


def pretraining(work_dir):
  """Writes the original's checkpoint and its outputs, loss gradients included."""
  import bert.run_pretraining as run_pretraining
  flags.FLAGS.mark_as_parsed()
  config = modeling.BertConfig.from_json_file(os.path.join(work_dir, "bert_config.json"))
  with tf.Graph().as_default():
    tf1.set_random_seed(1234)
    f = {k: tf1.constant(v) for k, v in np.load(os.path.join(work_dir, "inputs.npz")).items()}
    model = modeling.BertModel(config, is_training=True, input_ids=f["input_ids"],
                               input_mask=f["input_mask"], token_type_ids=f["segment_ids"])
    mlm_loss, _, mlm_log_probs = run_pretraining.get_masked_lm_output(
        config, model.get_sequence_output(), model.get_embedding_table(),
        f["masked_lm_positions"], f["masked_lm_ids"], f["masked_lm_weights"])
    nsp_loss, _, nsp_log_probs = run_pretraining.get_next_sentence_output(
        config, model.get_pooled_output(), f["next_sentence_labels"])
    loss = mlm_loss + nsp_loss  # The original's model_fn's total_loss.
    tvars = tf1.trainable_variables()
    fetches = {"layer_%d" % i: t for i, t in enumerate(model.get_all_encoder_layers())}
    fetches.update(embedding_output=model.get_embedding_output(),
                   pooled_output=model.get_pooled_output(),
                   # The logits are what the original's log_softmax reads.
                   mlm_logits=mlm_log_probs.op.inputs[0],
                   nsp_logits=nsp_log_probs.op.inputs[0], loss=loss)
    fetches.update(("grad/" + v.op.name, g) for v, g in zip(tvars, tf1.gradients(loss, tvars)))
    rng = np.random.RandomState(5678)
    with tf1.Session() as session:
      session.run(tf1.global_variables_initializer())
      for v in tf1.global_variables():
        name = v.op.name
        if name.endswith(("/gamma", "/beta", "bias")):
          value = rng.normal(0.0, 0.5, v.shape.as_list())
          v.load((value + 1.0 if name.endswith("gamma") else value).astype(np.float32),
                 session)
      tf1.train.Saver().save(session, os.path.join(work_dir, "bert_model.ckpt"),
                             write_meta_graph=False, write_state=False)
      np.savez(os.path.join(work_dir, "original_outputs.npz"), **session.run(fetches))


def _randomize(session, rng):
  """Every LayerNorm, bias and task head value away from its initial 1, 0 or ~0.02 scale."""
  for v in tf1.global_variables():
    name = v.op.name
    if name.endswith(("/gamma", "/beta", "bias")) or name.endswith("output_weights"):
      value = rng.normal(0.0, 0.5, v.shape.as_list())
      v.load((value + 1.0 if name.endswith("gamma") else value).astype(np.float32), session)


def fine_tuned(work_dir, script):
  """A checkpoint as the original's run_classifier.py / run_squad.py leaves one after
  fine-tuning (model.ckpt-7 beside a `checkpoint` file, global_step included), made by its own
  create_model; for SQuAD, also its start and end logits on inputs.npz."""
  import importlib
  module = importlib.import_module("bert." + script)
  flags.FLAGS.mark_as_parsed()
  config = modeling.BertConfig.from_json_file(os.path.join(work_dir, "bert_config.json"))
  f = dict(np.load(os.path.join(work_dir, "inputs.npz")))
  with tf.Graph().as_default():
    tf1.set_random_seed(4321)
    args = (tf1.constant(f["input_ids"]), tf1.constant(f["input_mask"]),
            tf1.constant(f["segment_ids"]))
    if script == "run_classifier":
      module.create_model(config, False, *args, tf1.constant([0, 1, 0]), 2, False)
      fetches = {}
    else:
      start, end = module.create_model(config, False, *args, False)
      fetches = {"start_logits": start, "end_logits": end}
    global_step = tf1.train.get_or_create_global_step()
    with tf1.Session() as session:
      session.run(tf1.global_variables_initializer())
      _randomize(session, np.random.RandomState(91))
      global_step.load(7, session)
      out_dir = os.path.join(work_dir, script)
      tf1.train.Saver().save(session, os.path.join(out_dir, "model.ckpt"), global_step=7)
      np.savez(os.path.join(out_dir, "original_outputs.npz"), **session.run(fetches))


class Estimator:
  """The part of TPUEstimator that the original's extract_features main() uses: predict()
  runs its model_fn's graph in a Session over its input_fn's batches."""

  def __init__(self, model_fn, predict_batch_size, **unused):
    self.model_fn = model_fn
    self.batch_size = predict_batch_size

  def predict(self, input_fn, yield_single_examples=True):
    with tf.Graph().as_default():
      params = {"batch_size": self.batch_size}
      features = tf1.data.make_one_shot_iterator(input_fn(params)).get_next()
      spec = self.model_fn(features, None, tf1.estimator.ModeKeys.PREDICT, params)
      with tf1.Session() as session:
        session.run(tf1.global_variables_initializer())  # init_from_checkpoint's values
        while True:
          try:
            batch = session.run(spec.predictions)
          except tf.errors.OutOfRangeError:
            return
          for i in range(len(next(iter(batch.values())))):
            yield {name: value[i] for name, value in batch.items()}


def run_original_script(script, argv):
  """The original script's main() with --flags argv, on the stand-ins below."""
  import importlib
  module = importlib.import_module("bert." + script)
  tpu = types.SimpleNamespace(
      TPUEstimator=Estimator, RunConfig=lambda **kwargs: None, TPUConfig=lambda **kwargs: None,
      InputPipelineConfig=types.SimpleNamespace(PER_HOST_V2=2),
      TPUEstimatorSpec=lambda mode, predictions, scaffold_fn: types.SimpleNamespace(
          predictions=predictions))
  # TF 2 has no tf.estimator: the original's main() gets the stand-ins it calls.
  tf1.estimator = types.SimpleNamespace(tpu=tpu, ModeKeys=types.SimpleNamespace(
      TRAIN="train", EVAL="eval", PREDICT="infer"))
  flags.FLAGS([script + ".py"] + argv)
  module.main(None)


if sys.argv[1] == "pretraining":
  pretraining(sys.argv[2])
elif sys.argv[1] == "fine_tuned":
  fine_tuned(sys.argv[2], sys.argv[3])
else:
  run_original_script(sys.argv[1], sys.argv[2:])
'''


def inputs(batch=3, seq=14, predictions=5, seed=1):
  rng = np.random.RandomState(seed)
  input_mask = np.ones((batch, seq), np.int32)
  input_mask[1, 9:] = 0
  input_mask[2, 4:] = 0
  segment_ids = np.zeros((batch, seq), np.int32)
  segment_ids[:, 6:] = 1
  weights = np.ones((batch, predictions), np.float32)
  weights[2, 3:] = 0.0
  return {"input_ids": rng.randint(0, CONFIG["vocab_size"], (batch, seq)).astype(np.int32),
          "input_mask": input_mask, "segment_ids": segment_ids * input_mask,
          "masked_lm_positions": rng.randint(0, seq, (batch, predictions)).astype(np.int32),
          "masked_lm_ids": rng.randint(0, CONFIG["vocab_size"], (batch, predictions)).astype(
              np.int32),
          "masked_lm_weights": weights,
          "next_sentence_labels": rng.randint(0, 2, (batch, 1)).astype(np.int32)}
