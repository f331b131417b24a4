"""bert_tf.modeling and bert_tf.optimization against the original's modules (bert-tensorflow
1.0.4) in TF1-style graph mode: one subprocess (v2 behaviour off is process-wide) runs the oracle
harness's "pretraining" command (the original writes bert_model.ckpt), then every check below on
both sides, writing graph.json and graph.npz for test_original_modules.py. The cases are
functions of (module, inputs) that the test runs eagerly on ours too, with the same weights."""
import copy
import inspect
import json
import os

import numpy as np
import tensorflow as tf

from support.oracle import ORACLE, inputs

tf1 = tf.compat.v1
# The oracle's own harness, then this module's checks in the same process.
SCRIPT = ORACLE + r'''
sys.path.insert(0, "tests")
tf1.disable_v2_behavior()
from support import original_modules
original_modules.run_in_graph(sys.argv[2])
'''

# --- The cases: each builds the same fetches from either module -------------------------------
B, F, T = 2, 5, 4  # batch, from and to lengths


def case_inputs():
  rng = np.random.RandomState(11)
  to_mask = np.ones((B, T), np.int32)
  to_mask[1, 2:] = 0
  from_mask = np.ones((B, F), np.int32)
  from_mask[0, 3:] = 0
  return {"ids": rng.randint(0, 13, (B, F)).astype(np.int32),
          "ids3": rng.randint(0, 13, (B, F, 2)).astype(np.int32),
          "types": rng.randint(0, 3, (B, F)).astype(np.int32),
          "from": rng.normal(size=(B, F, 6)).astype(np.float32),
          "to": rng.normal(size=(B, T, 8)).astype(np.float32),
          "to_mask": to_mask, "from_mask": from_mask,
          "heads": rng.normal(size=(B, F, 2, 3)).astype(np.float32),
          "x": np.linspace(-5.0, 5.0, 41, dtype=np.float32)}


def embeddings(m, x):
  lookup, table = m.embedding_lookup(x["ids"], 13, embedding_size=6)
  with tf1.variable_scope("one_hot"):
    one_hot, _ = m.embedding_lookup(x["ids"], 13, 6, use_one_hot_embeddings=True)
  with tf1.variable_scope("two_ids"):
    two_ids, _ = m.embedding_lookup(x["ids3"], 13, 3)
  post = m.embedding_postprocessor(lookup, use_token_type=True, token_type_ids=x["types"],
                                   token_type_vocab_size=3, max_position_embeddings=9,
                                   dropout_prob=0.0)
  return {"lookup": lookup, "table": tf.convert_to_tensor(table), "one_hot": one_hot,
          "two_ids": two_ids, "post": post}


def layer_norms(m, x):
  return {"default": m.layer_norm(x["from"]), "named": m.layer_norm(x["from"], name="other"),
          "again": m.layer_norm(x["from"]),  # LayerNorm_1
          "and_dropout": m.layer_norm_and_dropout(x["from"], 0.0)}


def attention(m, x):
  mask = m.create_attention_mask_from_input_mask(x["from"], x["to_mask"])  # [B, F, T]
  context = m.attention_layer(x["from"], x["to"], attention_mask=mask, num_attention_heads=2,
                              size_per_head=3, query_act=tf.tanh, value_act=m.gelu)
  # bert-tensorflow 1.0.4 returns [B, F, N, H], the google-research/bert commit [B, F, N * H].
  return {"mask": mask, "context": tf.reshape(context, [B, F, 6])}


def transformer(m, x):
  mask = m.create_attention_mask_from_input_mask(x["from"], x["from_mask"])
  layers = m.transformer_model(x["from"], mask, hidden_size=6, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=10,
                               intermediate_act_fn=m.gelu, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0, do_return_all_layers=True)
  with tf1.variable_scope("relu"):
    last = m.transformer_model(x["from"], None, hidden_size=6, num_hidden_layers=1,
                               num_attention_heads=3, intermediate_size=4,
                               intermediate_act_fn=tf.nn.relu, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)
  return {"layer_0": layers[0], "layer_1": layers[1], "unmasked_relu": last}


def dense_layers(m, x):
  """bert-tensorflow 1.0.4's three dense layers."""
  init = m.create_initializer(0.5)
  return {"3d": m.dense_layer_3d(x["from"], 2, 3, init, tf.tanh, "query"),
          "3d_proj": m.dense_layer_3d_proj(x["heads"], 6, 2, 3, init, None, "proj"),
          "2d": m.dense_layer_2d(x["from"], 4, init, m.gelu, "dense")}


def activations(m, x):
  out = {"gelu": m.gelu(x["x"]), "function": m.get_activation(tf.sigmoid)(x["x"]),
         "dropout_0": m.dropout(x["x"], 0.0), "dropout_none": m.dropout(x["x"], None)}
  for name in ("linear", "relu", "gelu", "tanh", "", "ReLU"):
    function = m.get_activation(name)
    out["act_" + name] = x["x"] if function is None else function(x["x"])
  return out


def shapes(m, x):
  matrix = m.reshape_to_matrix(x["heads"])  # [B * F * 2, 3]
  return {"matrix": matrix, "back": m.reshape_from_matrix(matrix, m.get_shape_list(x["heads"])),
          "two_d": m.reshape_to_matrix(x["from"][0])}


CASES = {"embeddings": embeddings, "layer_norms": layer_norms, "attention": attention,
         "transformer": transformer, "dense_layers": dense_layers, "activations": activations,
         "shapes": shapes}


def random_values(variables, seed):
  """name -> a random value for each variable (LayerNorm's 1 and 0 moved away too)."""
  rng = np.random.RandomState(seed)
  return {name: rng.normal(0.0, 0.5, v.shape.as_list()).astype(np.float32)
          for name, v in sorted(variables.items())}


def run_case(build, module, values=None):
  """(fetched values, {variable name: value}) of build(module, inputs) in a Session of its own
  graph; the variables take `values` (the other side's) where they have its names, or random
  ones."""
  with tf.Graph().as_default():
    x = {k: tf.constant(v) for k, v in case_inputs().items()}
    fetches = build(module, x)
    variables = {v.op.name: v for v in tf1.global_variables()}
    own = random_values(variables, 5)
    values = own if values is None else {name: values.get(name, own[name]) for name in own}
    with tf1.Session() as session:
      session.run([tf1.assign(v, values[name]) for name, v in variables.items()])
      return session.run(fetches), values


# --- The API -----------------------------------------------------------------------------------

def signature(function):
  """[[parameter, default]] of a function; a default function by its name."""
  out = []
  for parameter in inspect.signature(function).parameters.values():
    default = parameter.default
    if default is inspect.Parameter.empty:
      default = "<required>"
    else:
      default = getattr(default, "__name__", None) if callable(default) else repr(default)
    out.append([parameter.name, default])
  return out


def public_api(module):
  """{name: signature} of a module's own public functions and classes ("Class" its
  constructor's), and "Class.method" for their public methods."""
  api = {}
  for name, value in vars(module).items():
    if name.startswith("_") or getattr(value, "__module__", None) != module.__name__:
      continue
    if inspect.isclass(value):
      api[name] = signature(value.__init__)
      for attribute in vars(value):
        if not attribute.startswith("_") and callable(getattr(value, attribute)):
          api[f"{name}.{attribute}"] = signature(getattr(value, attribute))
    elif inspect.isfunction(value):
      api[name] = signature(value)
  return api


# --- The graph-mode run (in the subprocess) ----------------------------------------------------

def _sides():
  from bert import modeling as theirs
  from bert import optimization as their_optimization
  from bert_tf import modeling as ours
  from bert_tf import optimization as our_optimization
  return {"theirs": (theirs, their_optimization), "ours": (ours, our_optimization)}


def original_unit_tests():
  """bert-tensorflow 1.0.4's modeling_test.py and optimization_test.py run on our modules."""
  import sys
  import unittest
  import bert
  sides = _sides()
  saved = {name: sys.modules[f"bert.{name}"] for name in ("modeling", "optimization")}
  for name, module in zip(("modeling", "optimization"), sides["ours"]):
    sys.modules[f"bert.{name}"] = module
    setattr(bert, name, module)
  try:
    from bert import modeling_test, optimization_test
    suite = unittest.TestSuite()
    for test_module in (modeling_test, optimization_test):
      suite.addTests(unittest.defaultTestLoader.loadTestsFromModule(test_module))
    result = unittest.TextTestRunner(verbosity=0).run(suite)
  finally:
    for name, module in saved.items():
      sys.modules[f"bert.{name}"] = module
      setattr(bert, name, module)
  return {"run": result.testsRun - len(result.skipped),
          "failed": [str(test) + ": " + text for test, text in result.failures + result.errors]}


def bert_models(m, config, ckpt, f, is_training, one_hot):
  """The getters' values, the variables' names and the assignment map of m.BertModel on f,
  initialised from ckpt through m.get_assignment_map_from_checkpoint."""
  with tf.Graph().as_default():
    model = m.BertModel(config, is_training, tf.constant(f["input_ids"]),
                        tf.constant(f["input_mask"]), tf.constant(f["segment_ids"]),
                        use_one_hot_embeddings=one_hot)
    tf1.get_variable("output_weights", [2, config.hidden_size])  # not in the checkpoint
    tvars = tf1.trainable_variables()
    assignment_map, initialized = m.get_assignment_map_from_checkpoint(tvars, ckpt)
    tf1.train.init_from_checkpoint(ckpt, assignment_map)
    fetches = {f"layer_{i}": t for i, t in enumerate(model.get_all_encoder_layers())}
    fetches.update(pooled_output=model.get_pooled_output(),
                   sequence_output=model.get_sequence_output(),
                   embedding_output=model.get_embedding_output(),
                   word_embedding_output=model.get_word_embedding_output(),
                   embedding_table=model.get_embedding_table())
    with tf1.Session() as session:
      session.run(tf1.global_variables_initializer())
      values = session.run(fetches)
    shapes = {k: v.shape.as_list() for k, v in fetches.items()}
    return values, {"names": sorted(v.op.name for v in tvars), "shapes": shapes,
                    "assignment_map": list(assignment_map.items()),
                    "initialized": sorted(initialized)}


def original_heads_on_ours(work_dir, ckpt, f):
  """The original's run_pretraining.py heads (their `modeling` made ours) on our BertModel from
  the original's checkpoint: the values the oracle's "pretraining" command saved of its own,
  gradients of the loss by tf.gradients included."""
  import bert.run_pretraining as run_pretraining
  from bert_tf import modeling as ours
  theirs, run_pretraining.modeling = run_pretraining.modeling, ours
  try:
    config = ours.BertConfig.from_json_file(os.path.join(work_dir, "bert_config.json"))
    with tf.Graph().as_default():
      x = {k: tf.constant(v) for k, v in f.items()}
      model = ours.BertModel(config, True, x["input_ids"], x["input_mask"], x["segment_ids"])
      mlm_loss, _, mlm_log_probs = run_pretraining.get_masked_lm_output(
          config, model.get_sequence_output(), model.get_embedding_table(),
          x["masked_lm_positions"], x["masked_lm_ids"], x["masked_lm_weights"])
      nsp_loss, _, nsp_log_probs = run_pretraining.get_next_sentence_output(
          config, model.get_pooled_output(), x["next_sentence_labels"])
      tvars = tf1.trainable_variables()
      tf1.train.init_from_checkpoint(ckpt, ours.get_assignment_map_from_checkpoint(tvars, ckpt)[0])
      fetches = {"layer_%d" % i: t for i, t in enumerate(model.get_all_encoder_layers())}
      fetches.update(embedding_output=model.get_embedding_output(),
                     pooled_output=model.get_pooled_output(), loss=mlm_loss + nsp_loss,
                     mlm_logits=mlm_log_probs.op.inputs[0], nsp_logits=nsp_log_probs.op.inputs[0])
      gradients = tf1.gradients(mlm_loss + nsp_loss, tvars)  # the embeddings': IndexedSlices
      fetches.update(("grad/" + v.op.name, tf.convert_to_tensor(g))
                     for v, g in zip(tvars, gradients))
      with tf1.Session() as session:
        session.run(tf1.global_variables_initializer())
        return session.run(fetches)
  finally:
    run_pretraining.modeling = theirs


def variable_names(m, config):
  """Names in one graph of: two default-scope models, one in a scope, one reusing "bert"
  (one layer each)."""
  config = copy.deepcopy(config)
  config.num_hidden_layers = 1
  with tf.Graph().as_default():
    ids = tf.constant(inputs()["input_ids"])
    m.BertModel(config, False, ids)
    m.BertModel(config, False, ids)  # bert_1
    m.BertModel(config, False, ids, scope="teacher")
    with tf1.variable_scope(tf1.get_variable_scope(), reuse=True):
      m.BertModel(config, True, ids, scope="bert")
    return [v.op.name for v in tf1.global_variables()]


# Adam's first steps without bias correction move every weight by about 3 x the learning rate
# whatever its gradient's size, so a small gradient's rounding (the two sides' gradients are 1e-7
# apart) is amplified, and the oracle's large weights amplify the losses' differences again: at
# 2e-4 the weights and losses stay within 1e-5 (at 2e-3, 3e-5 and 1e-4).
LEARNING_RATE = 2e-4


def train_head(m, optimization, config, ckpt, steps=4):
  """A classifier head on get_pooled_output of a 2-layer model from the original's 4-layer
  checkpoint, trained `steps` steps by optimization.create_optimizer: per-step losses, every
  weight before and after, the global step and the names of every variable."""
  config = copy.deepcopy(config)
  config.num_hidden_layers = 2
  batches = [inputs(seed=seed) for seed in range(1, steps + 1)]
  with tf.Graph().as_default():
    feeds = {k: tf1.placeholder(tf.int32, batches[0][k].shape)
             for k in ("input_ids", "input_mask", "segment_ids", "next_sentence_labels")}
    model = m.BertModel(config, True, feeds["input_ids"], feeds["input_mask"],
                        feeds["segment_ids"])
    weights = tf1.get_variable("output_weights", [2, config.hidden_size],
                               initializer=tf1.truncated_normal_initializer(stddev=0.02))
    bias = tf1.get_variable("output_bias", [2], initializer=tf1.zeros_initializer())
    logits = tf.nn.bias_add(tf.matmul(model.get_pooled_output(), weights, transpose_b=True), bias)
    labels = tf.one_hot(feeds["next_sentence_labels"][:, 0], 2)
    loss = tf.reduce_mean(-tf.reduce_sum(labels * tf.nn.log_softmax(logits), axis=-1))
    tvars = tf1.trainable_variables()
    assignment_map, _ = m.get_assignment_map_from_checkpoint(tvars, ckpt)
    tf1.train.init_from_checkpoint(ckpt, assignment_map)
    train_op = optimization.create_optimizer(loss, LEARNING_RATE, 6, 2, False)
    with tf1.Session() as session:
      session.run(tf1.global_variables_initializer())
      weights.load(np.random.RandomState(2).normal(0, 0.3, [2, config.hidden_size]), session)
      start = session.run({v.op.name: v for v in tvars})
      losses = [float(session.run([loss, train_op], {feeds[k]: batch[k] for k in feeds})[0])
                for batch in batches]
      end = session.run({v.op.name: v for v in tvars})
      step = int(session.run(tf1.train.get_global_step()))
    names = sorted(v.op.name for v in tf1.global_variables())  # the slots and the step too
  return losses, start, end, {"step": step, "names": names}


def tpu_ops(optimization):
  """The op types of create_optimizer(..., use_tpu=True) on one variable (CrossReplicaSum runs
  on TPU only: the graph is what can be checked here)."""
  with tf.Graph().as_default():
    weights = tf1.get_variable("w", [3], initializer=tf1.ones_initializer())
    optimization.create_optimizer(tf.reduce_sum(tf.square(weights)), 0.1, 10, 1, True)
    return sorted({op.type for op in tf1.get_default_graph().get_operations()})


def errors_and_facts(m):
  """What does not fit a case: errors raised, dynamic shapes, initializers, configs."""
  facts = {}
  with tf.Graph().as_default():
    dynamic = tf1.placeholder(tf.float32, [None, 7, 6], name="dynamic")
    x2d = tf.zeros([4, 6])
    calls = {
        "assert_rank": lambda: m.assert_rank(dynamic, 2),
        "assert_ranks": lambda: m.assert_rank(dynamic, [1, 2]),
        "get_shape_list": lambda: m.get_shape_list(dynamic, expected_rank=[2]),
        "reshape_to_matrix": lambda: m.reshape_to_matrix(tf.zeros([3])),
        "get_activation": lambda: m.get_activation("swishy"),
        "heads": lambda: m.transformer_model(dynamic, hidden_size=6, num_attention_heads=4),
        "width": lambda: m.transformer_model(dynamic, hidden_size=8, num_attention_heads=2),
        "attention_ranks": lambda: m.attention_layer(dynamic, x2d),
        "attention_2d_sizes": lambda: m.attention_layer(x2d, x2d),
        "token_types": lambda: m.embedding_postprocessor(dynamic, use_token_type=True),
    }
    for what, call in calls.items():
      try:
        call()
        facts[what] = None
      except ValueError:
        facts[what] = "ValueError"
    shape = m.get_shape_list(dynamic, expected_rank=3)
    facts["shape_kinds"] = [d if isinstance(d, int) else type(d).__name__ for d in shape]
    dropped = m.dropout(tf.ones([20000]), 0.3)
    with tf1.Session() as session:
      facts["dynamic_batch"] = int(session.run(shape[0], {dynamic: np.zeros([3, 7, 6])}))
      dropped = session.run(dropped)
    facts["dropout"] = [float(np.mean(dropped == 0)), float(dropped.max())]
    initializer = m.create_initializer(0.3)
    facts["initializer"] = [type(initializer).__name__, initializer.get_config()]
  config = m.BertConfig.from_dict({"vocab_size": 9, "hidden_size": 12, "extra": [1, 2]})
  facts["config"] = [config.to_dict(), config.to_json_string(),
                     m.BertConfig(vocab_size=99, hidden_size=37).to_json_string()]
  return facts


def run_in_graph(work_dir):
  """Every graph-mode check on both sides: graph.json and graph.npz in work_dir."""
  ckpt = os.path.join(work_dir, "bert_model.ckpt")
  f = dict(np.load(os.path.join(work_dir, "inputs.npz")))
  sides = _sides()
  report = {"api": {name: public_api(module) for name, module in
                    zip(("modeling", "optimization"), sides["theirs"])},
            "unit_tests": original_unit_tests()}
  arrays = {"pretraining_heads/" + k: v
            for k, v in original_heads_on_ours(work_dir, ckpt, f).items()}
  for side, (m, optimization) in sides.items():
    config = m.BertConfig.from_json_file(os.path.join(work_dir, "bert_config.json"))
    for variant, (is_training, one_hot) in {"inference": (False, False),
                                            "one_hot_training": (True, True)}.items():
      values, report[f"{side}/bert_model/{variant}"] = bert_models(
          m, config, ckpt, f, is_training, one_hot)
      arrays.update((f"{side}/bert_model/{variant}/{k}", v) for k, v in values.items())
    report[f"{side}/variable_names"] = variable_names(m, config)
    report[f"{side}/facts"] = errors_and_facts(m)
    losses, start, end, report[f"{side}/training"] = train_head(m, optimization, config, ckpt)
    report[f"{side}/training"]["losses"] = losses
    arrays.update((f"{side}/training/start/{k}", v) for k, v in start.items())
    arrays.update((f"{side}/training/end/{k}", v) for k, v in end.items())
    report[f"{side}/tpu_ops"] = tpu_ops(optimization)
  for case, build in CASES.items():
    theirs, values = run_case(build, sides["theirs"][0])
    ours, our_values = run_case(build, sides["ours"][0], values)
    report[f"case/{case}/names"] = [sorted(values), sorted(our_values)]
    for side, fetched in (("theirs", theirs), ("ours", ours)):
      arrays.update((f"{side}/case/{case}/{k}", v) for k, v in fetched.items())
    arrays.update((f"values/{case}/{k}", v) for k, v in values.items())
  with open(os.path.join(work_dir, "graph.json"), "w") as out:
    json.dump(report, out)
  np.savez(os.path.join(work_dir, "graph.npz"), **arrays)
