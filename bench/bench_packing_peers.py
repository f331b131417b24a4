"""Ours unpacked and packed against the fair peers, side by side in one run, on the same records:
Model Garden's BertPretrainerV2 and transformers' BertForPreTraining fed only the masked positions.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_packing_peers.py [--quick]

Records: bench_packing.py's (create_pretraining_data.py defaults on the shared Gutenberg books,
seq 128, 20 predictions, made once into --cache_dir). Model: --model (small: L=4, H=256, A=4,
I=1024; base: BERT-Base), vocab 30,522, dropout 0.1, the same rows per step for every peer
(bench_packing.ROWS: 32 for small). One process per peer, in turn (interleaved with --repeats):
  ours unpacked, ours packed   run_pretraining.py --do_train (--pack_sequences), as bench_packing
                               times it: the rate of its last progress line (second half of steps)
  garden                       official.nlp.modeling BertPretrainerV2 over a BertEncoder of the
                               same size (its MaskedLM layer gathers the masked positions before
                               the output layer; NSP by a ClassificationHead on [CLS], as Model
                               Garden's MaskedLMTask builds it), its loss (weighted MLM + NSP),
                               tf_keras AdamW (decay 0.01 but LayerNorm/bias, clip 1.0) in one
                               tf.function step, fed by tf.data (bert_tf.drivers.pretraining.input_fn,
                               the batches ours unpacked reads)
  torch                        transformers BertForPreTraining, 2 threads: model.bert, then
                               model.cls.predictions on the sequence output gathered at
                               masked_lm_positions only, model.cls.seq_relationship on the pooled
                               output; weighted MLM + NSP loss, torch AdamW, clip 1.0; fed the
                               same batches, parsed here and handed over as numpy arrays
Peers' rates: the median over --steps timed steps after as many warm-up steps. Real (non-padding)
tokens per second of unpacked rows: instances/s times the records' mean real tokens per instance
(packed, run_pretraining.py logs them). --steps: default 10, 5 with --quick. The last line:
`ours packed / best peer real tokens per second: X.XXx`.
"""
import json
import os
import shutil
import sys
import tempfile
import time

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from absl import flags
import numpy as np
import tensorflow as tf

from lib import bench_configs
import bench_packing  # (its flags: --quick --dtype --steps --repeats --cache_dir ...)
from bench_packing import FLAGS
from bert_tf.drivers import pretraining
from bert_tf.training import optimization
from lib import harness

flags.DEFINE_enum("model", "small", ["small", "base"], "The config every peer trains.",
                  flag_values=FLAGS)
flags.DEFINE_list("peers", "ours,garden,torch", "ours (unpacked and packed), garden (Model Garden "
                  "BertPretrainerV2), torch (transformers BertForPreTraining).", flag_values=FLAGS)
flags.DEFINE_string("child", None, "Internal: `garden:SPEC` or `torch:SPEC` times that peer in "
                    "this process (SPEC: a JSON file written by the parent).", flag_values=FLAGS)

SEQ, PREDICTIONS, VOCAB, SEED = 128, 20, 30522, 1
LABELS = {"ours unpacked": ("ours", "unpacked"), "ours packed": ("ours", "packed"),
          "garden": ("Model Garden BertPretrainerV2", "unpacked, MLM on masked positions"),
          "torch": ("transformers BertForPreTraining", "unpacked, MLM on masked positions")}


def batches(spec):
  """The training batches ours unpacked reads (same files, shuffle seed and batch size)."""
  return pretraining.input_fn([spec["records"]], SEQ, PREDICTIONS, spec["rows"], True,
                              seed=SEED)()


def median_rate(step, spec):
  """Instances per second: rows / the median time of `steps` steps after as many warm-up ones."""
  times = harness.interleave({"step": step}, spec["steps"], warmup=spec["steps"])["step"]
  return spec["rows"] / float(np.median(times))


def garden_model(config):
  from official.modeling import tf_utils  # pylint: disable=g-import-not-at-top
  from official.nlp.modeling import layers, models, networks  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  encoder = networks.BertEncoder(
      vocab_size=VOCAB, hidden_size=config["hidden_size"], num_layers=config["num_hidden_layers"],
      num_attention_heads=config["num_attention_heads"], inner_dim=config["intermediate_size"],
      max_sequence_length=512, type_vocab_size=2, dict_outputs=True)
  return models.BertPretrainerV2(
      encoder_network=encoder, mlm_activation=tf_utils.get_activation("gelu"),
      mlm_initializer=tf_keras.initializers.TruncatedNormal(stddev=0.02),
      classification_heads=[layers.ClassificationHead(
          inner_dim=config["hidden_size"], num_classes=2, dropout_rate=0.1,
          name="next_sentence")])


def garden_loss(features, outputs):
  """Model Garden MaskedLMTask.build_losses: weighted mean MLM loss + mean NSP loss."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  losses = tf_keras.losses.sparse_categorical_crossentropy(
      features["masked_lm_ids"], tf.cast(outputs["mlm_logits"], tf.float32), from_logits=True)
  weights = features["masked_lm_weights"]
  mlm = tf.math.divide_no_nan(tf.reduce_sum(losses * weights), tf.reduce_sum(weights))
  nsp = tf.reduce_mean(tf_keras.losses.sparse_categorical_crossentropy(
      features["next_sentence_labels"], tf.cast(outputs["next_sentence"], tf.float32),
      from_logits=True))
  return mlm + nsp


def time_garden(spec):
  import tf_keras  # pylint: disable=g-import-not-at-top
  if spec["dtype"] == "bfloat16":
    tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
  tf_keras.utils.set_random_seed(SEED)
  model = garden_model(bench_packing.CONFIGS[spec["model"]])
  optimizer = tf_keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.01, epsilon=1e-6,
                                        global_clipnorm=1.0)
  optimizer.exclude_from_weight_decay(var_names=list(optimization.EXCLUDE_FROM_WEIGHT_DECAY))
  iterator = iter(batches(spec))

  @tf.function
  def train_step(iterator):
    features = next(iterator)
    inputs = dict(input_word_ids=features["input_ids"], input_mask=features["input_mask"],
                  input_type_ids=features["segment_ids"],
                  masked_lm_positions=features["masked_lm_positions"])
    with tf.GradientTape() as tape:
      loss = garden_loss(features, model(inputs, training=True))
    variables = model.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss

  return median_rate(lambda: train_step(iterator).numpy(), spec)


def torch_model(config):
  import transformers  # pylint: disable=g-import-not-at-top
  return transformers.BertForPreTraining(
      bench_configs.transformers_config(config, vocab_size=VOCAB, type_vocab_size=2))


def time_torch(spec):
  import torch  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(2)
  torch.manual_seed(SEED)
  model = torch_model(bench_packing.CONFIGS[spec["model"]])
  model.train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)
  with np.load(spec["arrays"]) as arrays:
    data = [{k: torch.from_numpy(arrays[k][i]) for k in arrays.files}
            for i in range(len(arrays["input_ids"]))]
  cross_entropy = torch.nn.functional.cross_entropy
  position = iter(range(10 ** 9))

  def step():
    b = data[next(position) % len(data)]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=spec["dtype"] == "bfloat16"):
      sequence, pooled = model.bert(input_ids=b["input_ids"], attention_mask=b["input_mask"],
                                    token_type_ids=b["segment_ids"], return_dict=False)[:2]
      gathered = torch.gather(sequence, 1, b["masked_lm_positions"][..., None].expand(
          -1, -1, sequence.shape[-1]))
      logits = model.cls.predictions(gathered).float()
      nsp_logits = model.cls.seq_relationship(pooled).float()
    weights = b["masked_lm_weights"]
    losses = cross_entropy(logits.flatten(0, 1), b["masked_lm_ids"].flatten(), reduction="none")
    loss = (losses * weights.flatten()).sum() / weights.sum().clamp(min=1e-5)
    loss = loss + cross_entropy(nsp_logits, b["next_sentence_labels"][:, 0])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()

  return median_rate(step, spec)


def write_arrays(spec, path):
  """The first 2 x steps batches of `batches(spec)` as stacked numpy arrays (torch's input)."""
  stacked = {}
  for features in batches(spec).take(2 * spec["steps"]):
    for key, value in features.items():
      stacked.setdefault(key, []).append(value.numpy().astype(
          np.float32 if value.dtype.is_floating else np.int64))
  np.savez(path, **{k: np.stack(v) for k, v in stacked.items()})


def run_child(peer, spec, work_dir):
  """{rows, instances} per second of `peer` timed in a fresh process of this script."""
  spec_file = os.path.join(work_dir, f"{peer}.json")
  with open(spec_file, "w") as f:
    json.dump(spec, f)
  out = bench_packing.run([sys.executable, os.path.abspath(__file__),
                           f"--child={peer}:{spec_file}"])
  rate = json.loads(out.split("RESULT ")[-1].splitlines()[0])
  return {"rows": rate, "instances": rate}


def torch_missing():
  try:
    import torch  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    import transformers  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    return str(e)
  return None


def time_once(name, spec, path, work_dir):
  start = time.time()
  if name.startswith("ours"):
    r = bench_packing.time_run(spec["model"], SEQ, name == "ours packed", path, spec["steps"],
                               work_dir)
  else:
    r = run_child(name, spec, work_dir)
  if "tokens" not in r:
    r["instances"], r["tokens"] = r["rows"], r["rows"] * spec["tokens_per_instance"]
  r["seconds"] = time.time() - start
  print(f"{name}: {r['rows']:.2f} rows/s, {r['instances']:.2f} instances/s, "
        f"{r['tokens']:.0f} real tokens/s ({r['seconds']:.0f} s)", flush=True)
  return r


def peer_names():
  names = []
  if "ours" in FLAGS.peers:
    names += ["ours unpacked", "ours packed"]
  if "garden" in FLAGS.peers:
    names.append("garden")
  if "torch" in FLAGS.peers:
    missing = torch_missing()
    if missing:
      print(f"torch peer skipped: torch/transformers not importable in this venv ({missing})")
    else:
      names.append("torch")
  return names


def main(_):
  if FLAGS.child:
    peer, spec_file = FLAGS.child.split(":", 1)
    with open(spec_file) as f:
      spec = json.load(f)
    print("RESULT", json.dumps((time_garden if peer == "garden" else time_torch)(spec)))
    return
  os.makedirs(FLAGS.cache_dir, exist_ok=True)
  work_dir = tempfile.mkdtemp(prefix="bench_packing_peers_")
  start = time.time()
  path = bench_packing.make_records(SEQ)
  tokens, count = bench_packing.real_tokens_per_instance(path)
  spec = dict(model=FLAGS.model, rows=bench_packing.ROWS[FLAGS.model, SEQ], records=path,
              steps=FLAGS.steps or (5 if FLAGS.quick else 10),
              dtype=bench_packing.resolved_dtype(), tokens_per_instance=tokens,
              arrays=os.path.join(work_dir, "batches.npz"))
  print(f"{path}: {count} instances, {tokens:.1f} real tokens per instance", flush=True)
  names = peer_names()
  if "torch" in names:
    write_arrays(spec, spec["arrays"])
  runs = {name: [] for name in names}
  for _ in range(FLAGS.repeats):
    for name in names:
      runs[name].append(time_once(name, spec, path, work_dir))
  results = {name: {k: float(np.median([r[k] for r in rs])) for k in ("rows", "instances",
                                                                      "tokens")}
             for name, rs in runs.items()}
  shutil.rmtree(work_dir, ignore_errors=True)
  print_table(spec, results)
  print(f"total {time.time() - start:.0f} s")
  peers = [results[n]["tokens"] for n in ("garden", "torch") if n in results]
  if "ours packed" in results and peers:
    print(f"ours packed / best peer real tokens per second: "
          f"{results['ours packed']['tokens'] / max(peers):.2f}x")


def print_table(spec, results):
  print(f"\n{spec['model']} config, seq {SEQ}, {spec['rows']} rows per step, {spec['dtype']}, "
        f"{os.cpu_count()} cores, {spec['steps']} timed steps after {spec['steps']} warm-up, "
        f"{FLAGS.repeats} repeat(s)")
  print("| peer | mode | rows/s | instances/s | real tokens/s | real tokens/s vs ours unpacked | "
        "vs ours packed |")
  print("|---|---|---|---|---|---|---|")
  for name, r in results.items():
    ratios = [f"{r['tokens'] / results[base]['tokens']:.2f}x" if base in results else "-"
              for base in ("ours unpacked", "ours packed")]
    print(f"| {LABELS[name][0]} | {LABELS[name][1]} | {r['rows']:.2f} | {r['instances']:.2f} | "
          f"{r['tokens']:.0f} | {ratios[0]} | {ratios[1]} |")


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
