"""bert_tf.modeling and bert_tf.optimization are the original's modules: every public name of
google-research/bert's last commit and of bert-tensorflow 1.0.4, with their signatures, and the
original's numbers, against bert-tensorflow 1.0.4 itself.

TF1-style graph mode (v2 behaviour off, Sessions, tf.gradients) is process-wide, so one
subprocess runs it for every check (support/original_modules.py: the oracle harness writes the
original's checkpoint, then each case on both sides, the original's own unit tests on ours, and a
head trained from that checkpoint through get_assignment_map_from_checkpoint). This process runs
the same cases on ours eagerly and inside tf.function with the original's weights, and checks
BertModel against our Keras encoder.
"""
import glob
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bert_tf import modeling
from bert_tf import optimization
from bert_tf.model import checkpoints
from bert_tf.model import modeling as keras_modeling
from bert_tf.model import tf1_variables
from bert_tf.model.config import BertConfig as OurBertConfig
from bert_tf.training import optimization as keras_optimization
from support import original_modules
from support.oracle import CONFIG, inputs
from support.paths import REPO

TOLERANCE = 1e-5
tf1 = tf.compat.v1

# google-research/bert's last commit: its modeling.py's public names (bert-tensorflow 1.0.4, whose
# names the subprocess reads, adds dense_layer_3d, dense_layer_3d_proj, dense_layer_2d and
# BertModel.get_word_embedding_output) and optimization.py's (the same in 1.0.4)...
COMMIT_NAMES = {
    "modeling": [
        "BertConfig", "BertConfig.from_dict", "BertConfig.from_json_file", "BertConfig.to_dict",
        "BertConfig.to_json_string", "BertModel", "BertModel.get_pooled_output",
        "BertModel.get_sequence_output", "BertModel.get_all_encoder_layers",
        "BertModel.get_embedding_output", "BertModel.get_embedding_table", "gelu",
        "get_activation", "get_assignment_map_from_checkpoint", "dropout", "layer_norm",
        "layer_norm_and_dropout", "create_initializer", "embedding_lookup",
        "embedding_postprocessor", "create_attention_mask_from_input_mask", "attention_layer",
        "transformer_model", "get_shape_list", "reshape_to_matrix", "reshape_from_matrix",
        "assert_rank"],
    "optimization": ["create_optimizer", "AdamWeightDecayOptimizer",
                     "AdamWeightDecayOptimizer.apply_gradients"]}
# ... and the commit's attention_layer, which 1.0.4 changed (no do_return_2d_tensor; it returns
# [B, F, N, H]): ours is the commit's.
COMMIT_ATTENTION_LAYER = [
    ["from_tensor", "<required>"], ["to_tensor", "<required>"], ["attention_mask", "None"],
    ["num_attention_heads", "1"], ["size_per_head", "512"], ["query_act", "None"],
    ["key_act", "None"], ["value_act", "None"], ["attention_probs_dropout_prob", "0.0"],
    ["initializer_range", "0.02"], ["do_return_2d_tensor", "False"], ["batch_size", "None"],
    ["from_seq_length", "None"], ["to_seq_length", "None"]]
PACKAGE_ONLY = {"dense_layer_3d", "dense_layer_3d_proj", "dense_layer_2d",
                "BertModel.get_word_embedding_output"}


@pytest.fixture(autouse=True, scope="module")
def _stateful_dropout():
  """The original's dropout is stateful (tf.nn.dropout): Keras's own, not the tf.random.Generator
  that a run's set-up in this process (bert_tf.training.runtime) may have turned on, whose
  variable a tf.function would make on a later trace."""
  was = tf_keras.backend.experimental.is_tf_random_generator_enabled()
  tf_keras.backend.experimental.disable_tf_random_generator()
  yield
  if was:
    tf_keras.backend.experimental.enable_tf_random_generator()


def max_diff(a, b):
  return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
  """(work dir with the original's bert_model.ckpt, the subprocess's report, its arrays)."""
  work_dir = tmp_path_factory.mktemp("original_modules")
  (work_dir / "bert_config.json").write_text(json.dumps(CONFIG))
  np.savez(work_dir / "inputs.npz", **inputs())
  result = subprocess.run(
      [sys.executable, "-c", original_modules.SCRIPT, "pretraining", str(work_dir)],
      capture_output=True, text=True, cwd=REPO, timeout=900,
      env=dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_USE_LEGACY_KERAS="1"))
  assert result.returncode == 0, result.stderr[-4000:]
  report = json.loads((work_dir / "graph.json").read_text())
  return work_dir, report, dict(np.load(work_dir / "graph.npz"))


def arrays_of(arrays, prefix):
  return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}


def assert_close(ours, theirs, what):
  assert sorted(ours) == sorted(theirs), what
  diffs = {k: max_diff(ours[k], theirs[k]) for k in theirs}
  print(f"{what}: max abs diff {max(diffs.values()):.2g}")
  assert max(diffs.values()) < TOLERANCE, (what, diffs)


# --- Names and signatures ----------------------------------------------------------------------

def resolve(module, name):
  value = module
  for part in name.split("."):
    value = getattr(value, part)
  return value.__init__ if isinstance(value, type) else value


def test_every_public_name_of_the_commit_and_the_package_with_its_signature(graph):
  """bert-tensorflow 1.0.4's public names (read from its modules by the subprocess) are the
  commit's and its own four; ours has each, with its signature (attention_layer the commit's)."""
  _, report, _ = graph
  for module_name, module in (("modeling", modeling), ("optimization", optimization)):
    package = report["api"][module_name]
    added = PACKAGE_ONLY if module_name == "modeling" else set()
    assert set(package) == set(COMMIT_NAMES[module_name]) | added
    for name, expected in package.items():
      if name == "attention_layer":
        expected = COMMIT_ATTENTION_LAYER
      assert original_modules.signature(resolve(module, name)) == expected, name


def test_the_originals_own_unit_tests_pass_on_ours(graph):
  """bert-tensorflow 1.0.4's modeling_test.py (BertModel with its getters in a Session, every op
  reachable from the outputs; to_json_string) and optimization_test.py (AdamWeightDecayOptimizer
  .apply_gradients in a Session), run on bert_tf.modeling and bert_tf.optimization."""
  _, report, _ = graph
  assert report["unit_tests"] == {"run": 3, "failed": []}


# --- Graph mode, against the original ----------------------------------------------------------

@pytest.mark.parametrize("variant", ["inference", "one_hot_training"])
def test_bert_model_in_a_session_is_the_originals(graph, variant):
  """From the original's checkpoint through get_assignment_map_from_checkpoint: the same
  variables, map, shapes and values of every getter."""
  _, report, arrays = graph
  theirs, ours = (report[f"{side}/bert_model/{variant}"] for side in ("theirs", "ours"))
  assert ours == theirs
  loaded = dict(theirs["assignment_map"])
  assert sorted(loaded) == [name for name in theirs["names"] if name != "output_weights"]
  assert_close(arrays_of(arrays, f"ours/bert_model/{variant}/"),
               arrays_of(arrays, f"theirs/bert_model/{variant}/"), f"BertModel, {variant}")


def test_the_originals_pretraining_heads_on_our_bert_model_are_the_originals(graph):
  """Code written against the original: its run_pretraining.py's get_masked_lm_output and
  get_next_sentence_output (modeling.layer_norm, get_activation, create_initializer,
  get_shape_list) on our BertModel's getters, from its checkpoint: every layer, the logits, the
  loss and every variable's tf.gradients within 1e-5 (relative above 1) of its own."""
  work_dir, _, arrays = graph
  ours = arrays_of(arrays, "pretraining_heads/")
  theirs = dict(np.load(work_dir / "original_outputs.npz"))
  assert sorted(ours) == sorted(theirs)
  worst = {k: max_diff(ours[k], theirs[k]) / max(1.0, float(np.abs(theirs[k]).max()))
           for k in theirs}
  print(f"the original's heads on ours: largest diff {max(worst.values()):.2g}")
  assert max(worst.values()) < TOLERANCE, worst


def test_variable_scopes_and_reuse_are_the_originals(graph):
  _, report, _ = graph
  names = report["ours/variable_names"]
  assert sorted(names) == sorted(report["theirs/variable_names"])
  assert {name.split("/")[0] for name in names} == {"bert", "bert_1", "teacher"}


@pytest.mark.parametrize("case", sorted(original_modules.CASES))
def test_each_function_in_a_session_is_the_originals(graph, case):
  _, report, arrays = graph
  their_names, our_names = report[f"case/{case}/names"]
  assert our_names == their_names
  assert_close(arrays_of(arrays, f"ours/case/{case}/"), arrays_of(arrays, f"theirs/case/{case}/"),
               f"{case} in a Session")


def test_errors_shapes_initializer_dropout_and_config_are_the_originals(graph):
  _, report, _ = graph
  ours, theirs = report["ours/facts"], report["theirs/facts"]
  dropped = ours.pop("dropout"), theirs.pop("dropout")
  assert ours == theirs
  assert {ours[k] for k in ours if k not in ("shape_kinds", "dynamic_batch", "initializer",
                                             "config")} == {"ValueError"}
  assert ours["shape_kinds"][1:] == [7, 6] and ours["dynamic_batch"] == 3
  for fraction, largest in dropped:  # 20,000 values at rate 0.3: 6 standard deviations
    assert abs(fraction - 0.3) < 0.02 and largest == pytest.approx(1 / 0.7)


def test_a_head_trained_in_a_session_from_an_original_checkpoint_is_the_originals(graph):
  """A classifier head on get_pooled_output, its model initialised from the original's
  checkpoint by get_assignment_map_from_checkpoint + init_from_checkpoint, four steps of
  create_optimizer (warmup, then decay; the clip; weight decay), on the same batches."""
  _, report, arrays = graph
  ours, theirs = report["ours/training"], report["theirs/training"]
  assert ours["step"] == theirs["step"] == 4
  assert ours["names"] == theirs["names"] and "output_bias/adam_v" in ours["names"]
  np.testing.assert_allclose(ours["losses"], theirs["losses"], atol=TOLERANCE, rtol=TOLERANCE)
  start = arrays_of(arrays, "ours/training/start/")
  # The checkpoint's values on both sides (random ones would differ), and the same head.
  their_start = arrays_of(arrays, "theirs/training/start/")
  assert sorted(start) == sorted(their_start)
  assert all(np.array_equal(start[k], their_start[k]) for k in start)
  end = arrays_of(arrays, "ours/training/end/")
  assert_close(end, arrays_of(arrays, "theirs/training/end/"), "a head trained 4 steps")
  moved = {k: max_diff(end[k], start[k]) for k in end}
  assert min(moved["output_weights"], moved["bert/pooler/dense/kernel"]) > 50 * TOLERANCE


def test_create_optimizer_with_use_tpu_shards_as_the_originals(graph):
  _, report, _ = graph
  assert "CrossReplicaSum" in report["ours/tpu_ops"]
  assert "CrossReplicaSum" in report["theirs/tpu_ops"]


# --- Eagerly and inside tf.function ------------------------------------------------------------

class Tf1Style(tf_keras.layers.Layer):
  """build(bert_tf.modeling, inputs) as a TF2 layer, as TensorFlow's migration guide wraps TF1
  code: track_tf1_style_variables keeps its get_variable variables from one call to the next."""

  def __init__(self, build):
    super().__init__()
    self.build_case = build

  @tf1.keras.utils.track_tf1_style_variables
  def call(self, x):
    # Entering the root scope restarts its default names (LayerNorm, LayerNorm_1, ...), which
    # eagerly count over the whole process, as each graph of the original's counts its own.
    with tf1.variable_scope(tf1.get_variable_scope()):
      return self.build_case(modeling, x)


def run_eagerly(build, x, values):
  """(eager outputs, tf.function outputs, variable names) with the variables set to values."""
  layer = Tf1Style(build)
  layer(x)
  names = sorted(tf1_variables.variable_name(v.name) for v in layer.variables)
  for variable in layer.variables:
    variable.assign(values[tf1_variables.variable_name(variable.name)])
  return layer(x), tf.function(layer)(x), names


def attention_2d(m, x):
  """The commit's do_return_2d_tensor on 2-D inputs, with the attention case's variables."""
  mask = m.create_attention_mask_from_input_mask(x["from"], x["to_mask"])
  B, F, T = original_modules.B, original_modules.F, original_modules.T  # noqa: N806
  context = m.attention_layer(
      m.reshape_to_matrix(x["from"]), m.reshape_to_matrix(x["to"]), attention_mask=mask,
      num_attention_heads=2, size_per_head=3, query_act=tf.tanh, value_act=m.gelu,
      do_return_2d_tensor=True, batch_size=B, from_seq_length=F, to_seq_length=T)
  assert context.shape == [B * F, 6]
  return {"mask": mask, "context": tf.reshape(context, [B, F, 6])}


@pytest.mark.parametrize("case", sorted(original_modules.CASES) + ["attention_2d"])
def test_each_function_eagerly_and_in_tf_function_is_the_originals(graph, case):
  _, report, arrays = graph
  build = attention_2d if case == "attention_2d" else original_modules.CASES[case]
  source = "attention" if case == "attention_2d" else case
  x = {k: tf.constant(v) for k, v in original_modules.case_inputs().items()}
  eager, traced, names = run_eagerly(build, x, arrays_of(arrays, f"values/{source}/"))
  assert names == report[f"case/{source}/names"][0]
  theirs = arrays_of(arrays, f"theirs/case/{source}/")
  assert_close({k: v.numpy() for k, v in eager.items()}, theirs, f"{case} eagerly")
  assert_close({k: v.numpy() for k, v in traced.items()}, theirs, f"{case} in tf.function")


def encoder_outputs(model):
  outputs = {f"layer_{i}": t for i, t in enumerate(model.get_all_encoder_layers())}
  outputs.update(pooled_output=model.get_pooled_output(),
                 sequence_output=model.get_sequence_output(),
                 embedding_output=model.get_embedding_output(),
                 word_embedding_output=model.get_word_embedding_output(),
                 embedding_table=tf.convert_to_tensor(model.get_embedding_table()))
  return outputs


def test_bert_model_is_our_keras_encoder_in_a_session_eagerly_and_in_tf_function(graph):
  """modeling.BertModel and bert_tf.model.modeling.BertModel on the original's checkpoint: the
  graph-mode values, and ours eagerly (loaded through get_assignment_map_from_checkpoint) and
  traced, within 1e-5 of the Keras encoder's."""
  work_dir, _, arrays = graph
  ckpt = str(work_dir / "bert_model.ckpt")
  f = {k: tf.constant(v) for k, v in inputs().items()}
  keras = keras_modeling.BertModel(OurBertConfig.from_dict(CONFIG))
  keras(f)
  checkpoints.init_from_checkpoint(keras, ckpt)
  outputs = keras(f)
  expected = {f"layer_{i}": t.numpy() for i, t in enumerate(outputs["encoder_outputs"])}
  expected.update((k, outputs[k].numpy())
                  for k in ("pooled_output", "sequence_output", "embedding_output"))
  graph_mode = arrays_of(arrays, "ours/bert_model/inference/")
  assert_close({k: graph_mode[k] for k in expected}, expected, "BertModel in a Session vs Keras")

  config = modeling.BertConfig.from_json_file(str(work_dir / "bert_config.json"))
  layer = Tf1Style(lambda m, x: encoder_outputs(m.BertModel(
      config, False, x["input_ids"], x["input_mask"], x["segment_ids"], scope="bert")))
  layer(f)
  assignment_map, _ = modeling.get_assignment_map_from_checkpoint(layer.variables, ckpt)
  assert len(assignment_map) == len(layer.variables) == len(keras.variables)
  reader = tf.train.load_checkpoint(ckpt)
  for variable in layer.variables:
    variable.assign(reader.get_tensor(assignment_map[tf1_variables.variable_name(variable.name)]))
  # The two getters Keras has no output for, against the graph mode's (the original's) values.
  expected.update((k, graph_mode[k]) for k in ("word_embedding_output", "embedding_table"))
  for how, values in (("eagerly", layer(f)), ("in tf.function", tf.function(layer)(f))):
    assert_close({k: v.numpy() for k, v in values.items()}, expected, f"BertModel {how}")


def test_adam_weight_decay_eagerly_and_in_tf_function_is_our_keras_adamw():
  """The same steps as bert_tf.training.optimization.AdamWeightDecay (the original's algorithm,
  tested against it by test_original_training_oracle.py), the decay skipped by name."""
  start = {"layer/kernel": [[0.5, -0.3], [0.2, 0.1]], "layer/LayerNorm/beta": [0.3, -0.4]}
  grads = np.random.RandomState(4).normal(size=(3, 6)).astype(np.float32)
  ours = {n: tf.Variable(v, name=n, dtype=tf.float32) for n, v in start.items()}
  keras = {n: tf.Variable(v, name=n, dtype=tf.float32) for n, v in start.items()}
  optimizer = optimization.AdamWeightDecayOptimizer(0.01, weight_decay_rate=0.1,
                                                    exclude_from_weight_decay=["LayerNorm"])
  keras_optimizer = keras_optimization.AdamWeightDecay(
      0.01, weight_decay_rate=0.1, exclude_from_weight_decay=["LayerNorm"], global_clipnorm=None)

  def pairs(variables, step):
    return [(tf.constant(grads[step, :4].reshape(2, 2)), variables["layer/kernel"]),
            (tf.constant(grads[step, 4:]), variables["layer/LayerNorm/beta"])]

  @tf.function
  def traced(step):
    optimizer.apply_gradients(pairs(ours, step))

  for step in range(3):
    if step < 2:
      traced(step)  # a trace a step; the first makes the slots
    else:
      optimizer.apply_gradients(pairs(ours, step))
    keras_optimizer.apply_gradients(pairs(keras, step))
  for name in start:
    assert max_diff(ours[name], keras[name]) < 1e-6, name


def test_eagerly_the_shapes_the_errors_dropout_and_the_graph_only_name():
  assert modeling.get_shape_list(tf.zeros([2, 3]), expected_rank=2) == [2, 3]
  with pytest.raises(ValueError, match="the actual rank `2`"):
    modeling.assert_rank(tf.zeros([2, 3]), 3)
  dropped = modeling.dropout(tf.ones([20000]), 0.3).numpy()
  assert abs(np.mean(dropped == 0) - 0.3) < 0.02 and dropped.max() == pytest.approx(1 / 0.7)
  assert modeling.create_initializer(0.3).get_config()["stddev"] == 0.3
  with pytest.raises(RuntimeError, match="create_optimizer builds a graph"):
    optimization.create_optimizer(tf.constant(1.0), 1e-3, 10, 1, False)


def test_the_originals_config_converts_to_ours(graph):
  work_dir, _, _ = graph
  path = str(work_dir / "bert_config.json")
  config = modeling.BertConfig.from_json_file(path)
  assert OurBertConfig.from_dict(config.to_dict()) == OurBertConfig.from_json_file(path)


def test_bert_tf_itself_never_imports_the_originals_modules():
  """bert_tf.modeling and bert_tf.optimization are for code written against the original;
  bert_tf's own code imports bert_tf.model.modeling and bert_tf.training.optimization."""
  pattern = re.compile(r"^\s*(from bert_tf import [^\n]*\b(modeling|optimization)\b|"
                       r"(import|from) bert_tf\.(modeling|optimization)\b)", re.MULTILINE)
  sources = [path for where in ("bert_tf/**/*.py", "bench/**/*.py", "*.py")
             for path in glob.glob(os.path.join(REPO, where), recursive=True)]
  assert len(sources) > 50
  offenders = [os.path.relpath(path, REPO) for path in sources
               if pattern.search(open(path, encoding="utf-8").read())]
  assert not offenders
