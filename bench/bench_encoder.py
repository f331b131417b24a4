"""Encoder speed, inference and training: ours vs transformers' PyTorch BertModel (and Model
Garden), one run.

BERT-Base-sized random weights (L=12, H=768, A=12, I=3072, V=30522), batch 32, seq 128, in
float32 and bfloat16, every peer computing the same GELU (the original's tanh form: PyTorch's
"gelu_pytorch_tanh"); inference is a forward pass, training a forward and backward pass with
dropout (gradients of every weight, no optimizer). Then where our bfloat16 inference time goes,
op group by op group, next to the same groups in PyTorch. --before_repo adds the encoder of
another checkout (its bert_tf/model/modeling.py, e.g. before a change) to the same interleaved rounds.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_encoder.py

prints a table and appends it to benchmarks/<date>.md (--noappend: only prints).
"""
import importlib.util
import math
import os
import sys

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from absl import flags
import numpy as np
import tensorflow as tf
import tf_keras

from bert_tf.model import activations
from bert_tf.model import modeling
from lib import bench_configs
from lib import harness

FLAGS = flags.FlagValues()
flags.DEFINE_integer("batch_size", 32, "Sequences per batch.", flag_values=FLAGS)
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.", flag_values=FLAGS)
flags.DEFINE_integer("warmup", 1, "Untimed batches of each peer first.", flag_values=FLAGS)
flags.DEFINE_integer("iterations", 10, "Timed rounds (one batch of each peer per round).",
                     flag_values=FLAGS)
flags.DEFINE_list("peers", "ours,torch,garden", "Which encoders to time.", flag_values=FLAGS)
flags.DEFINE_list("modes", "inference,training", "inference (forward) and/or training (forward + "
                  "backward with dropout).", flag_values=FLAGS)
flags.DEFINE_integer("train_batch_size", 16, "Sequences per training batch.", flag_values=FLAGS)
flags.DEFINE_string("before_repo", None, "Another checkout whose bert_tf/model/modeling.py is "
                    'timed beside ours as "before" (e.g. a worktree of the previous commit).',
                    flag_values=FLAGS)
flags.DEFINE_list("precisions", "float32,mixed_bfloat16", "Our Keras policies to time (PyTorch's "
                  "bfloat16 peers run with mixed_bfloat16).", flag_values=FLAGS)
flags.DEFINE_boolean("profile", True, "Also time our op groups against PyTorch's.",
                     flag_values=FLAGS)
flags.DEFINE_boolean("append", True, "Append the results to benchmarks/<date>.md.",
                     flag_values=FLAGS)

BASE = bench_configs.bert_config("base")


def interleaved_seconds(fns):
  """{name: (median, best) seconds}: round-robin over the peers, so that load from other
  processes on the machine falls on all of them alike."""
  times = harness.interleave(fns, FLAGS.iterations, warmup=FLAGS.warmup)
  return {name: (float(np.median(t)), float(np.min(t))) for name, t in times.items()}


def random_inputs(batch_size, seed=0, seq_length=None, vocab_size=BASE.vocab_size):
  rng = np.random.RandomState(seed)
  shape = (batch_size, seq_length or FLAGS.seq_length)
  return {"input_ids": rng.randint(0, vocab_size, shape).astype(np.int32),
          "input_mask": np.ones(shape, np.int32), "segment_ids": np.zeros(shape, np.int32)}


def modeling_of(repo):
  """bert_tf/model/modeling.py of another checkout, as a module of its own (it imports no bert_tf)."""
  path = os.path.join(repo, "bert_tf", "modeling.py")
  spec = importlib.util.spec_from_file_location(f"modeling_of_{abs(hash(repo))}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def forward_function(model, outputs):
  """A tf.function running the model ONCE and returning its outputs named `outputs`.

  (Once per output key would time two forward passes per batch: tests/test_bench_encoder.py
  counts the matmuls of the traced step.)
  """
  def forward(features):
    result = model(features, training=False)
    return [result[k] for k in outputs]
  return tf.function(forward)


def tf_step(model, features, training, outputs):
  """A callable running one batch: the outputs (inference), or the gradients of every weight
  of a loss on the outputs (training). Its `.function` is the tf.function it calls on
  `.features`."""
  if not training:
    forward = forward_function(model, outputs)

    def run():
      return [t.numpy() for t in forward(features)]
    run.function, run.features = forward, features
    return run

  @tf.function
  def step(f):
    with tf.GradientTape() as tape:
      out = model(f, training=True)
      loss = tf.add_n([tf.reduce_mean(tf.cast(out[k], tf.float32) ** 2) for k in outputs])
    grads = tape.gradient(loss, model.trainable_variables)
    return loss, grads

  def train():
    return step(features)[0].numpy()
  train.function, train.features = step, features
  return train


def _batch(training, batch_size):
  if batch_size is not None:
    return batch_size
  return FLAGS.train_batch_size if training else FLAGS.batch_size


def ours(policy, training, module=modeling, config=BASE, batch_size=None, seq_length=None):
  tf_keras.mixed_precision.set_global_policy(policy)
  model = module.BertModel(config)
  tf_keras.mixed_precision.set_global_policy("float32")
  inputs = random_inputs(_batch(training, batch_size), seq_length=seq_length,
                         vocab_size=config.vocab_size)
  features = {k: tf.constant(v) for k, v in inputs.items()}
  return tf_step(model, features, training, ["sequence_output", "pooled_output"])


def garden(policy, training, config=BASE, batch_size=None, seq_length=None):
  from official.nlp.modeling.networks import BertEncoder  # pylint: disable=g-import-not-at-top
  tf_keras.mixed_precision.set_global_policy(policy)
  encoder = BertEncoder(vocab_size=config.vocab_size, hidden_size=config.hidden_size,
                        num_layers=config.num_hidden_layers,
                        num_attention_heads=config.num_attention_heads,
                        intermediate_size=config.intermediate_size,
                        max_sequence_length=config.max_position_embeddings,
                        activation=lambda x: tf.nn.gelu(x, approximate=True),
                        type_vocab_size=config.type_vocab_size, dict_outputs=True)
  tf_keras.mixed_precision.set_global_policy("float32")
  f = random_inputs(_batch(training, batch_size), seq_length=seq_length,
                    vocab_size=config.vocab_size)
  features = {"input_word_ids": tf.constant(f["input_ids"]),
              "input_mask": tf.constant(f["input_mask"]),
              "input_type_ids": tf.constant(f["segment_ids"])}
  return tf_step(encoder, features, training, ["sequence_output", "pooled_output"])


def torch_model(dtype):
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(2)
  torch.manual_seed(0)
  # PyTorch's own kernel of the tanh GELU, the fastest form of our "gelu" there.
  config = transformers.BertConfig(vocab_size=BASE.vocab_size, type_vocab_size=2,
                                   hidden_act="gelu_pytorch_tanh")
  return transformers.BertModel(config).to(dtype)


def torch_peer(mode, training):
  """mode: "float32", "bfloat16" (weights cast) or "autocast" (float32 weights, bf16 autocast)."""
  import torch  # pylint: disable=g-import-not-at-top
  model = torch_model(torch.bfloat16 if mode == "bfloat16" else torch.float32)
  model.train(training)
  batch = FLAGS.train_batch_size if training else FLAGS.batch_size
  f = {k: torch.tensor(v, dtype=torch.long) for k, v in random_inputs(batch).items()}

  def run():
    with torch.autocast("cpu", torch.bfloat16, enabled=mode == "autocast"):
      return model(input_ids=f["input_ids"], attention_mask=f["input_mask"],
                   token_type_ids=f["segment_ids"])

  def forward():
    with torch.inference_mode():
      out = run()
      return out.last_hidden_state.float().numpy(), out.pooler_output.float().numpy()

  def step():
    model.zero_grad(set_to_none=True)
    out = run()
    loss = ((out.last_hidden_state.float() ** 2).mean() + (out.pooler_output.float() ** 2).mean())
    loss.backward()
    return loss.item()

  return step if training else forward


# --- Op groups ------------------------------------------------------------------------------------
# Each group repeats what the 12 layers do, on the shapes of batch 32 x seq 128, bfloat16.

def tf_groups():
  tokens, hidden, inner = FLAGS.batch_size * FLAGS.seq_length, 768, 3072
  heads, head_size, layers = 12, 64, 12
  rng = np.random.RandomState(0)

  def const(*shape, dtype=tf.bfloat16):
    return tf.constant(rng.normal(0, 0.02, shape).astype(np.float32), dtype)

  x = const(tokens, hidden)
  qkv = [(const(hidden, hidden), const(hidden)) for _ in range(3)]
  out_w, out_b = const(hidden, hidden), const(hidden)
  in_w, in_b = const(hidden, inner), const(inner)
  down_w, down_b = const(inner, hidden), const(hidden)
  q = const(FLAGS.batch_size, heads, FLAGS.seq_length, head_size)
  adder = tf.zeros([FLAGS.batch_size, 1, 1, FLAGS.seq_length])
  norm = modeling.LayerNorm(hidden)
  norm.build()

  def dense_with(gelu):
    @tf.function
    def dense():
      y = x
      for _ in range(layers):
        t = sum(tf.nn.bias_add(tf.matmul(y, w), b) for w, b in qkv)
        t = tf.nn.bias_add(tf.matmul(t, out_w), out_b)
        t = gelu(tf.nn.bias_add(tf.matmul(t, in_w), in_b))
        y = tf.nn.bias_add(tf.matmul(t, down_w), down_b)
      return y
    return dense

  @tf.function
  def attention():
    c = q
    for _ in range(layers):
      scores = tf.cast(tf.matmul(c, q, transpose_b=True), tf.float32) * 0.125 + adder
      probs = tf.cast(tf.nn.softmax(scores), tf.bfloat16)
      c = tf.matmul(probs, q)
    return c

  @tf.function
  def attention_bf16_softmax():
    c = q
    for _ in range(layers):
      scores = tf.matmul(c, q, transpose_b=True) * 0.125 + tf.cast(adder, tf.bfloat16)
      c = tf.matmul(tf.nn.softmax(scores), q)
    return c

  @tf.function
  def layer_norms():
    y = x
    for _ in range(2 * layers):
      y = tf.cast(norm(y + x), tf.bfloat16)
    return y

  return {"dense matmuls + bias (6 per layer)": dense_with(lambda t: t),  # no GELU
          "  same + GELU (tanh) on the FFN": dense_with(activations.gelu),
          "  same + exact GELU (erf) on the FFN": dense_with(activations.gelu_exact),
          "attention core (QK^T, f32 softmax, PV)": attention,
          "  same with bf16 softmax": attention_bf16_softmax,
          "residual + LayerNorm in f32 + casts (2 per layer)": layer_norms}


def torch_groups():
  import torch  # pylint: disable=g-import-not-at-top
  import torch.nn.functional as F  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(2)
  tokens, hidden, inner, layers = FLAGS.batch_size * FLAGS.seq_length, 768, 3072, 12
  g = torch.Generator().manual_seed(0)

  def const(*shape):
    return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

  x = const(tokens, hidden)
  qkv = [(const(hidden, hidden), const(hidden)) for _ in range(3)]
  out_w, out_b = const(hidden, hidden), const(hidden)
  in_w, in_b = const(inner, hidden), const(inner)
  down_w, down_b = const(hidden, inner), const(hidden)
  q = const(FLAGS.batch_size, 12, FLAGS.seq_length, 64)
  ln = torch.nn.LayerNorm(hidden, eps=1e-12).to(torch.bfloat16)

  def dense(gelu=None):
    y = x
    for _ in range(layers):
      t = F.linear(sum(F.linear(y, w, b) for w, b in qkv), out_w, out_b)
      t = F.linear(t, in_w, in_b)
      y = F.linear(F.gelu(t, approximate=gelu) if gelu else t, down_w, down_b)
    return y

  def attention():
    c = q
    for _ in range(layers):
      c = F.scaled_dot_product_attention(c, q, q)
    return c

  def layer_norms():
    y = x
    for _ in range(2 * layers):
      y = ln(y + x)
    return y

  def run(fn):
    def call():
      with torch.inference_mode():
        return fn()
    return call

  return {"dense matmuls + bias (6 per layer)": run(dense),
          "  same + GELU (tanh) on the FFN": run(lambda: dense("tanh")),
          "  same + exact GELU (erf) on the FFN": run(lambda: dense("none")),
          "attention core (QK^T, f32 softmax, PV)": run(attention),
          "  same with bf16 softmax": None,
          "residual + LayerNorm in f32 + casts (2 per layer)": run(layer_norms)}


def peers_for(training, before):
  """{row name: callable running one batch} of the peers FLAGS.peers names."""
  peers = {}
  if "ours" in FLAGS.peers:
    for policy in FLAGS.precisions:
      peers[f"ours {policy}"] = ours(policy, training)
      if before is not None:
        peers[f"ours {policy} (before)"] = ours(policy, training, before)
  if "torch" in FLAGS.peers:
    peers["PyTorch BertModel float32"] = torch_peer("float32", training)
    if "mixed_bfloat16" in FLAGS.precisions:
      if not training:  # Pure bfloat16 weights are an inference setting.
        peers["PyTorch BertModel bfloat16 (.to(bfloat16))"] = torch_peer("bfloat16", training)
      peers["PyTorch BertModel autocast bfloat16"] = torch_peer("autocast", training)
  if "garden" in FLAGS.peers:
    for policy in FLAGS.precisions:
      peers[f"Model Garden BertEncoder {policy}"] = garden(policy, training)
  return peers


RATIOS = [("ours float32", "ours float32 (before)"),
          ("ours mixed_bfloat16", "ours mixed_bfloat16 (before)"),
          ("ours float32", "PyTorch BertModel float32"),
          ("ours mixed_bfloat16", "PyTorch BertModel float32"),
          ("ours mixed_bfloat16", "PyTorch BertModel bfloat16 (.to(bfloat16))"),
          ("ours mixed_bfloat16", "PyTorch BertModel autocast bfloat16"),
          ("ours float32 (before)", "PyTorch BertModel float32"),
          ("ours mixed_bfloat16 (before)", "PyTorch BertModel autocast bfloat16"),
          ("ours float32", "Model Garden BertEncoder float32"),
          ("ours mixed_bfloat16", "Model Garden BertEncoder mixed_bfloat16")]


def mode_lines(training, before):
  """Times one mode's peers; returns its Markdown table and ratios."""
  batch = FLAGS.train_batch_size if training else FLAGS.batch_size
  mode = "training (forward + backward)" if training else "inference"
  rows = [(name, median, best) for name, (median, best)
          in interleaved_seconds(peers_for(training, before)).items()]
  for name, median, best in rows:
    print(f"{mode[:9]} {name:45s} {median * 1000:8.0f} ms/batch {batch / median:7.1f} seq/s "
          f"(best {batch / best:.1f})", flush=True)
  lines = [f"\n{mode.capitalize()}, batch {batch}:\n",
           "| encoder | ms / batch (median) | sequences / s (median) | sequences / s (best) |",
           "|---|---:|---:|---:|"]
  lines += [f"| {name} | {median * 1000:.0f} | {batch / median:.1f} | {batch / best:.1f} |"
            for name, median, best in rows]
  median = {name: m for name, m, _ in rows}
  best = {name: b for name, _, b in rows}
  lines.append("")
  lines += [f"- {a} / {b}: **{median[b] / median[a]:.2f}x** (medians; best rounds "
            f"{best[b] / best[a]:.2f}x)" for a, b in RATIOS if a in median and b in median]
  return lines


def group_lines():
  """Our bfloat16 inference op groups against PyTorch's."""
  groups = []
  theirs = torch_groups()
  for name, fn in tf_groups().items():
    fns = {"ours": lambda fn=fn: fn().numpy()}
    if theirs.get(name):
      fns["theirs"] = theirs[name]
    timed = interleaved_seconds(fns)
    theirs_s = timed["theirs"][0] if "theirs" in timed else math.nan
    groups.append((name, timed["ours"][0], theirs_s))
    print(f"{name:50s} ours {timed['ours'][0] * 1000:7.0f} ms  "
          f"PyTorch {theirs_s * 1000:7.0f} ms", flush=True)
  lines = ["", "Op groups, bfloat16, the 12 layers' worth at these shapes (ms, median):", "",
           "| op group | ours (TF) | PyTorch |", "|---|---:|---:|"]
  lines += [f"| {name.strip()} | {a * 1000:.0f} | "
            f"{'-' if math.isnan(b) else f'{b * 1000:.0f}'} |" for name, a, b in groups]
  return lines


def main(argv):
  del argv
  tf.config.threading.set_inter_op_parallelism_threads(2)
  before = modeling_of(FLAGS.before_repo) if FLAGS.before_repo else None
  onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default")
  lines = [f"\n## Encoder speed (bench/bench_encoder.py), {harness.utc_now()}\n",
           "Command: `flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_encoder.py"
           + (" " + " ".join(sys.argv[1:]) if sys.argv[1:] else "") + "`  ",
           f"Machine: {harness.machine()}; TF_ENABLE_ONEDNN_OPTS={onednn}. BERT-Base-sized random "
           f"weights (L=12, H=768, A=12, I=3072), seq {FLAGS.seq_length}, every peer with the "
           "tanh GELU (ours: \"gelu\"; PyTorch: \"gelu_pytorch_tanh\")"
           + (f"; \"before\": bert_tf/model/modeling.py of {FLAGS.before_repo}" if before else "")
           + f". The peers take turns batch by batch ({FLAGS.warmup} warm-up, then "
           f"{FLAGS.iterations} timed rounds); sequence + pooled output (training: the gradients "
           "of a loss on both, with dropout, no optimizer); torch.set_num_threads(2)."]
  for mode in FLAGS.modes:
    lines += mode_lines(mode == "training", before)
  if FLAGS.profile:
    lines += group_lines()
  harness.publish(lines, FLAGS.append)


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
