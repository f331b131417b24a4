"""Fine-tuning speed: training sequences/s of a sequence classifier, ours against PyTorch.

MiniLM (L=6, H=384) and BERT-Base (L=12, H=768) sizes, random weights and inputs, seq 128,
float32 and bf16. Ours: heads.BertClassifier with the original AdamWeightDecay
(optimization.create_optimizer) and global-norm clipping in one tf.function step, bf16 through
the mixed_bfloat16 policy. Peer: transformers' BertForSequenceClassification with torch AdamW and
clip_grad_norm_, bf16 through torch.autocast(cpu); 2 threads. Each timing is the median step after
--warmup untimed steps. Each side runs in its own process, so neither library slows the other.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_finetune_speed.py

--packing instead measures --pack_sequences: training examples/s of our fine-tuning, packed
against unpacked, on real data (SST-2 and CoLA from ../shared/data/glue, CoNLL-2003 sentences),
with a small config (L=4, H=256; random weights, the uncased vocabulary). Both sides go through
what run_classifier.py / run_ner.py run: the task's own records, model (each batch at its longest
sequence), loss and input_fn (packing_finetune.Layout.train_input_fn packed); the rate is the
examples of the timed steps over their time, after --warmup steps. --batch_size counts rows.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_finetune_speed.py --packing \
    --batch_size=32 --steps=20
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import types

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from lib.bench_env import DATA, REPO
from absl import flags
import numpy as np

from lib import bench_configs
from lib import harness

# --sizes names -> bench_configs.CONFIGS.
SIZES = {"MiniLM": "minilm", "BERT-Base": "base"}
PACKING_TASKS = {"SST-2": ("glue", "SST-2"), "CoLA": ("glue", "CoLA"),
                 "CoNLL-2003": ("conll2003", None)}


def inputs(batch, seq):
  rng = np.random.RandomState(0)
  return (rng.randint(1000, 30000, size=[batch, seq]).astype(np.int32),
          np.ones([batch, seq], np.int32), np.zeros([batch, seq], np.int32),
          rng.randint(0, 2, size=[batch]).astype(np.int32))


def time_ours(size, dtype, batch, seq, steps, warmup):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from bert_tf.model import heads  # pylint: disable=g-import-not-at-top
  from bert_tf.training import optimization  # pylint: disable=g-import-not-at-top
  tf_keras.mixed_precision.set_global_policy("mixed_bfloat16" if dtype == "bf16" else "float32")
  config = bench_configs.bert_config(SIZES[size])
  model = heads.BertClassifier(config, num_labels=2)
  optimizer = optimization.create_optimizer(5e-5, 1000, 100)
  ids, mask, segments, labels = inputs(batch, seq)
  features = {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
              "segment_ids": tf.constant(segments)}
  labels = tf.constant(labels)

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      logits = model(features, training=True)["logits"]
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    # Dense gradients, as bert_tf.training.loop's loop applies them (the embedding's are sparse).
    grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, model.trainable_variables)]
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  return _median_time(lambda: float(step()), steps, warmup)


def time_torch(size, dtype, batch, seq, steps, warmup):
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(2)
  torch.manual_seed(0)
  config = bench_configs.transformers_config(SIZES[size], num_labels=2)
  model = transformers.BertForSequenceClassification(config).train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, eps=1e-6, weight_decay=0.01)
  ids, mask, segments, labels = (torch.from_numpy(a).long() for a in inputs(batch, seq))

  def step():
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
      loss = model(input_ids=ids, attention_mask=mask, token_type_ids=segments,
                   labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
    return float(loss)

  return _median_time(step, steps, warmup)


def _task(name, seq, output_dir, packed):
  """The fine-tuning task run_classifier.py / run_ner.py would build, and its training records."""
  from bert_tf.cli import flags as bert_flags  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks import conll, glue  # pylint: disable=g-import-not-at-top
  from bert_tf.text import tokenization  # pylint: disable=g-import-not-at-top
  folder, glue_name = PACKING_TASKS[name]
  values = types.SimpleNamespace(
      task_name=glue_name, data_dir=os.path.join(DATA, folder, glue_name or ""),
      max_seq_length=seq, output_dir=output_dir, do_train=True, do_lower_case=True,
      feature_based=False, feature_layers=None, export_dir=None, bilstm_head=False,
      bilstm_hidden_size=None, pack_sequences=packed, max_instances_per_row=None)
  tokenizer = tokenization.FullTokenizer(os.path.join(DATA, "vocab", "bert-base-uncased-vocab.txt"),
                                         do_lower_case=True)
  task_class = glue.GlueTask if glue_name else conll.NerTask
  options = bert_flags.finetune_options(task_class, values)
  task = task_class(options, tokenizer)
  path = os.path.join(output_dir, "train.tf_record")
  _, num_records, _ = task.write_train_records(path)
  return options, task, path, num_records


def time_packing(name, packed, batch, seq, steps, warmup):
  """(examples/s, examples per row, real tokens per row) of training steps on task `name`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.data import packing_finetune  # pylint: disable=g-import-not-at-top
  from bert_tf.data import records  # pylint: disable=g-import-not-at-top
  from bert_tf.training import optimization  # pylint: disable=g-import-not-at-top
  tf.keras.utils.set_random_seed(0)
  with tempfile.TemporaryDirectory() as output_dir:
    values, task, path, num_records = _task(name, seq, output_dir, packed)
    layout = packing_finetune.task_layout(values, task, is_training=True)
    buffer = min(num_records, 100_000)
    if layout:
      weights = task.packed_loss_weights
      input_fn = layout.train_input_fn(path, batch, 0, shuffle_buffer_size=buffer,
                                       loss_weights=weights)
    else:
      input_fn = records.records_input_fn([path], task.schema(True), batch, is_training=True,
                                          shuffle_buffer_size=buffer)
    batches = iter(input_fn(tf.distribute.InputContext()))
    model = task.model_fn(bench_configs.bert_config("small"), trim_padding=True)()
    optimizer = optimization.create_optimizer(5e-5, 1000, 100)

    @tf.function
    def step(features):
      with tf.GradientTape() as tape:
        loss = task.loss_fn(features, model(features, training=True))
      grads = [tf.convert_to_tensor(g) if g is not None else tf.zeros_like(v)
               for g, v in zip(tape.gradient(loss, model.trainable_variables),
                               model.trainable_variables)]
      optimizer.apply_gradients(zip(grads, model.trainable_variables))
      return loss

    examples = tokens = rows = 0
    seconds = 0.0
    for i in range(warmup + steps):
      features = next(batches)
      start = time.perf_counter()
      float(step(features))
      if i >= warmup:
        seconds += time.perf_counter() - start
        weights = features.get(packing_finetune.EXAMPLE_WEIGHTS)
        examples += int(tf.reduce_sum(weights)) if weights is not None else batch
        tokens += int(tf.reduce_sum(features["input_mask"]))
        rows += batch
  return examples / seconds, examples / rows, tokens / rows


def child(args, one):
  """The JSON last line of this script run with --one=`one` in a process of its own (so that
  neither library slows the other); exits with the child's error output if it fails."""
  out = subprocess.run(
      [sys.executable, __file__, f"--one={one}", f"--batch_size={args.batch_size}",
       f"--seq_length={args.seq_length}", f"--steps={args.steps}", f"--warmup={args.warmup}"],
      capture_output=True, text=True, cwd=REPO)
  if out.returncode:
    sys.exit(out.stderr[-3000:])
  return json.loads(out.stdout.strip().splitlines()[-1])


def packing_main(args):
  """--packing: the table of examples/s unpacked and packed, and a last line of the ratios."""
  rows, ratios = [], []
  print(f"{'task':11} {'unpacked ex/s':>13} {'packed ex/s':>11} {'ratio':>6} "
        f"{'ex/row':>6} {'tokens/row':>10}")
  for name in args.tasks.split(","):
    figures = {}
    for mode in ("unpacked", "packed"):
      figures[mode] = child(args, f"packing,{name},{mode}")
    unpacked, _, unpacked_tokens = figures["unpacked"]
    packed, per_row, tokens = figures["packed"]
    ratios.append(f"{name} {packed / unpacked:.2f}x")
    print(f"{name:11} {unpacked:13.1f} {packed:11.1f} {packed / unpacked:6.2f} {per_row:6.2f} "
          f"{tokens:10.1f}", flush=True)
    rows.append(f"| {name} | {unpacked:.1f} | {packed:.1f} | {packed / unpacked:.2f} | "
                f"{per_row:.2f} | {unpacked_tokens:.1f} / {tokens:.1f} |\n")
  print("packed / unpacked examples/s: " + ", ".join(ratios))
  harness.append_history(
      f"\n## Fine-tuning with --pack_sequences (bench/bench_finetune_speed.py --packing)"
      f"\n\nCommand: `flock /tmp/bert_tf_heavy.lock .venv/bin/python "
      f"bench/bench_finetune_speed.py {' '.join(sys.argv[1:])}`  \nMachine: {harness.machine()}. "
      f"Date: {harness.utc_now()}.  \n"
      f"Small config (L=4, H=256), float32, {args.batch_size} rows of seq "
      f"{args.seq_length}, training examples/s over {args.steps} steps after "
      f"{args.warmup}.\n\n| task | unpacked ex/s | packed ex/s | packed / unpacked | "
      "examples per packed row | real tokens per row, unpacked / packed |\n"
      "|---|---|---|---|---|---|\n" + "".join(rows),
      args.benchmarks_md)


def _median_time(step, steps, warmup):
  return float(np.median(harness.interleave({"step": step}, steps, warmup=warmup)["step"]))


FLAGS = flags.FlagValues()
flags.DEFINE_string("sizes", ",".join(SIZES), "Model sizes: MiniLM, BERT-Base.", flag_values=FLAGS)
flags.DEFINE_string("dtypes", "fp32,bf16", "fp32 and/or bf16.", flag_values=FLAGS)
flags.DEFINE_integer("batch_size", 8, "Sequences (rows) per step.", flag_values=FLAGS)
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.", flag_values=FLAGS)
flags.DEFINE_integer("steps", 3, "Timed steps.", flag_values=FLAGS)
flags.DEFINE_integer("warmup", 2, "Untimed steps first.", flag_values=FLAGS)
flags.DEFINE_string("benchmarks_md", None, "default: benchmarks/<UTC date>.md", flag_values=FLAGS)
flags.DEFINE_boolean("packing", False, "packed against unpacked fine-tuning (see the module "
                     "docstring)", flag_values=FLAGS)
flags.DEFINE_string("tasks", ",".join(PACKING_TASKS), "with --packing", flag_values=FLAGS)
flags.DEFINE_string("one", None, "Internal: side,size,dtype (a child)", flag_values=FLAGS)


def main(_):
  args = harness.values(FLAGS)
  if args.one and args.one.startswith("packing,"):
    _, name, mode = args.one.split(",")
    print(json.dumps(time_packing(name, mode == "packed", args.batch_size, args.seq_length,
                                  args.steps, args.warmup)))
    return
  if args.packing:
    packing_main(args)
    return
  if args.one:
    side, size, dtype = args.one.split(",")
    timer = time_ours if side == "ours" else time_torch
    print(json.dumps(timer(size, dtype, args.batch_size, args.seq_length, args.steps,
                           args.warmup)))
    return
  rows = []
  print(f"{'size':10} {'dtype':5} {'ours seq/s':>10} {'torch seq/s':>11} {'ratio':>6}")
  for size in args.sizes.split(","):
    for dtype in args.dtypes.split(","):
      seconds = {}
      for side in ("ours", "torch"):
        seconds[side] = child(args, f"{side},{size},{dtype}")
      ours, torch_ = (args.batch_size / seconds[s] for s in ("ours", "torch"))
      print(f"{size:10} {dtype:5} {ours:10.1f} {torch_:11.1f} {ours / torch_:6.2f}", flush=True)
      rows.append(f"| {size} | {dtype} | {ours:.1f} | {torch_:.1f} | {ours / torch_:.2f} |\n")
  harness.append_history(
      f"\n## Fine-tuning speed: sequence classifier train step (bench/bench_finetune_speed.py)"
      f"\n\nCommand: `flock /tmp/bert_tf_heavy.lock .venv/bin/python "
      f"bench/bench_finetune_speed.py {' '.join(sys.argv[1:])}`  \nMachine: {harness.machine()}. "
      f"Date: {harness.utc_now()}.  \n"
      f"Batch {args.batch_size}, seq {args.seq_length}, random weights and inputs; median "
      f"of {args.steps} steps after {args.warmup} warm-up steps. Ours: BertClassifier + "
      "AdamWeightDecay in one tf.function; PyTorch: BertForSequenceClassification + "
      "AdamW, autocast for bf16, 2 threads.\n\n"
      "| size | dtype | ours seq/s | PyTorch seq/s | ours / PyTorch |\n|---|---|---|---|---|\n"
      + "".join(rows),
      args.benchmarks_md)


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
