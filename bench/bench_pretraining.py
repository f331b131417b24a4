"""Pretraining speed: our training loop vs transformers' PyTorch BertForPreTraining, one run.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_pretraining.py

Sequences/s of full training steps (forward, backward, clipping, optimizer update) at seq 128 with
20 masked predictions, for BERT-Base (L=12, H=768) and a small BERT (L=4, H=256), in float32 and
bfloat16 (ours: the mixed_bfloat16 policy; PyTorch: bf16 autocast), XLA on and off for the small
config only. Ours is bert_tf.training.loop.train itself (records, tf.data, the loop, AdamWeightDecay,
checkpoint at the end), timed by its own progress line over the second half of the steps.
TFLOP/s count the model's useful FLOPs (3 x forward; MLM head on the 20 masked positions only)
against a measured bf16 matmul peak. Prints a table and appends it to benchmarks/<date>.md.
"""
import collections
import os
import subprocess
import sys
import tempfile
import time

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from lib.bench_env import REPO
from absl import flags
import numpy as np
import tensorflow as tf

from bert_tf.data import records
from bert_tf.drivers import pretraining
from bert_tf.model import modeling
from bert_tf.training import loop
from bert_tf.training import runtime
from bert_tf.training.options import RuntimeOptions
from bert_tf.training.options import Schedule
from bert_tf.training.options import TrainLoopOptions
from lib import bench_configs
from lib import harness

FLAGS = flags.FlagValues()
flags.DEFINE_list("models", "small,base", "Configs to time: small (L=4, H=256), base (L=12).",
                  flag_values=FLAGS)
flags.DEFINE_list("peers", "ours,torch", "Implementations to time.", flag_values=FLAGS)
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.", flag_values=FLAGS)
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per sequence.",
                     flag_values=FLAGS)
flags.DEFINE_integer("base_batch_size", 8, "Sequences per step for BERT-Base.", flag_values=FLAGS)
flags.DEFINE_integer("small_batch_size", 32, "Sequences per step for the small config.",
                     flag_values=FLAGS)
flags.DEFINE_integer("steps", 4, "Timed steps (after as many untimed ones).", flag_values=FLAGS)
flags.DEFINE_boolean("append", True, "Append the results to benchmarks/<date>.md.",
                     flag_values=FLAGS)
flags.DEFINE_enum("mode", "throughput", ["throughput", "pretrain", "plot"], "throughput: the "
                  "speed table; pretrain: a real small-BERT pretraining run on the shared corpus "
                  "(records made by create_pretraining_data.py), then held-out eval; plot: "
                  "bench/pretraining_curve.png from the pretrain run in --work_dir.",
                  flag_values=FLAGS)
flags.DEFINE_integer("pretrain_steps", 4000, "pretrain mode: training steps (batch 32).",
                     flag_values=FLAGS)
flags.DEFINE_float("pretrain_learning_rate", 2e-4, "pretrain mode: peak learning rate (1e-3 "
                   "diverged to the unigram level after warm-up).", flag_values=FLAGS)
flags.DEFINE_string("work_dir", "/tmp/bench_pretraining", "pretrain mode: records and checkpoints.",
                    flag_values=FLAGS)
flags.DEFINE_list("train_books", None, "pretrain mode: Gutenberg file names to train on (default: "
                  "all but the held-out one).", flag_values=FLAGS)
flags.DEFINE_string("torch_child", None, "Internal: time PyTorch for `model,batch,dtype` in this "
                    "process (the parent runs it apart from TensorFlow's thread pools).",
                    flag_values=FLAGS)

CONFIGS = bench_configs.CONFIGS
VOCAB = bench_configs.VOCAB_SIZE


def config_for(name):
  return bench_configs.bert_config(name)


def train_flops_per_sequence(config, seq, preds):
  """3 x the forward matmul FLOPs of one sequence (backward ~ 2 x forward)."""
  h, i, t = config.hidden_size, config.intermediate_size, seq
  per_layer = 2 * t * (4 * h * h + 2 * h * i) + 2 * 2 * t * t * h
  forward = config.num_hidden_layers * per_layer + 2 * h * h + 2 * preds * (h * h + h * VOCAB)
  return 3 * forward


def write_records(path, num_examples, seq, preds, seed=0):
  rng = np.random.RandomState(seed)
  with tf.io.TFRecordWriter(path) as writer:
    for _ in range(num_examples):
      ids = rng.randint(1000, VOCAB, seq).tolist()
      positions = sorted(rng.choice(np.arange(1, seq), preds, replace=False).tolist())
      writer.write(records.serialize(collections.OrderedDict(
          input_ids=ids, input_mask=[1] * seq, segment_ids=[0] * (seq // 2) + [1] * (seq // 2),
          masked_lm_positions=positions, masked_lm_ids=[ids[p] for p in positions],
          masked_lm_weights=[1.0] * preds, next_sentence_labels=[int(rng.randint(2))])))


def time_ours(config, batch_size, dtype, use_xla, record_file, work_dir):
  runtime.set_precision(dtype)
  runtime.set_seed(1)
  strategy = runtime.get_strategy("one_device")
  input_fn = pretraining.input_fn([record_file], FLAGS.seq_length, FLAGS.max_predictions_per_seq,
                                  batch_size, True, seed=1)
  steps = FLAGS.steps
  # The first `steps` steps (tracing included) are logged, then the timed `steps` are.
  model = loop.train(strategy, lambda: modeling.BertPretrainer(config), pretraining.loss_fn(),
                     input_fn, Schedule(2 * steps, 1e-4, 1, batch_size),
                     tempfile.mkdtemp(dir=work_dir),
                     TrainLoopOptions(save_checkpoints_steps=2 * steps, iterations_per_loop=steps,
                                      log_steps=steps), RuntimeOptions(use_xla=use_xla))
  runtime.set_precision("float32")
  return model.train_summary["steps_per_second"] * batch_size


def time_torch(name, batch_size, dtype):
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(2)
  torch.manual_seed(1)
  hf_config = bench_configs.transformers_config(name, type_vocab_size=2)
  model = transformers.BertForPreTraining(hf_config)
  model.train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)
  rng = np.random.RandomState(0)
  seq, preds = FLAGS.seq_length, FLAGS.max_predictions_per_seq
  input_ids = torch.tensor(rng.randint(1000, VOCAB, (batch_size, seq)))
  labels = torch.full((batch_size, seq), -100)
  for b in range(batch_size):
    positions = rng.choice(np.arange(1, seq), preds, replace=False)
    labels[b, positions] = input_ids[b, positions]
  batch = dict(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
               token_type_ids=torch.zeros_like(input_ids), labels=labels,
               next_sentence_label=torch.tensor(rng.randint(0, 2, batch_size)))

  def step():
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
      loss = model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()

  for _ in range(FLAGS.steps):
    step()
  start = time.perf_counter()
  for _ in range(FLAGS.steps):
    step()
  return FLAGS.steps * batch_size / (time.perf_counter() - start)


def torch_in_child(name, batch_size, dtype):
  out = subprocess.run([sys.executable, os.path.abspath(__file__), f"--steps={FLAGS.steps}",
                        f"--seq_length={FLAGS.seq_length}",
                        f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
                        f"--torch_child={name},{batch_size},{dtype}"],
                       text=True, capture_output=True, check=True).stdout
  return float(out.split("SEQS")[1])


def matmul_peak_tflops(dtype, n=4096, repeats=5):
  a = tf.random.normal([n, n], dtype=tf.float32)
  a = tf.cast(a, dtype)
  matmul = tf.function(lambda x: tf.matmul(x, x))
  matmul(a).numpy()
  start = time.perf_counter()
  for _ in range(repeats):
    result = matmul(a)
  result.numpy()
  return 2 * n ** 3 * repeats / (time.perf_counter() - start) / 1e12


HELD_OUT_BOOK = "pg84-frankenstein.txt"


def run_logged(cmd):
  print("+", " ".join(cmd), flush=True)
  result = subprocess.run(cmd, cwd=REPO, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
  if result.returncode:
    raise SystemExit(result.stdout[-5000:])
  return result.stdout


def scalar_curve(event_dir, tag):
  """[(step, value)] of a scalar written by bert_tf.training.loop's summaries."""
  curve = []
  for path in sorted(tf.io.gfile.glob(os.path.join(event_dir, "events.*"))):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.tag == tag:
          curve.append((event.step, float(tf.make_ndarray(value.tensor))))
  return sorted(curve)


def unigram_baselines(record_file, train_file):
  """MLM accuracy of always predicting the train set's most frequent masked token, on held-out."""
  features = records.pretraining_features(128, 20)
  counts = collections.Counter()
  for raw in tf.data.TFRecordDataset(train_file).take(20000):
    example = tf.io.parse_single_example(raw, features)
    weights = example["masked_lm_weights"].numpy()
    counts.update(example["masked_lm_ids"].numpy()[weights > 0].tolist())
  most_common = counts.most_common(1)[0][0]
  hits = total = nsp_zero = n = 0
  for raw in tf.data.TFRecordDataset(record_file):
    example = tf.io.parse_single_example(raw, features)
    weights = example["masked_lm_weights"].numpy()
    ids = example["masked_lm_ids"].numpy()[weights > 0]
    hits += int((ids == most_common).sum())
    total += len(ids)
    nsp_zero += int(example["next_sentence_labels"].numpy()[0] == 0)
    n += 1
  return hits / total, max(nsp_zero, n - nsp_zero) / n, n


def plot_curve(work_dir, png=os.path.join(REPO, "bench", "pretraining_curve.png")):
  """Train masked-LM accuracy and loss of the pretrain run in work_dir, against steps, as a PNG."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  event_dir = os.path.join(work_dir, "model", "train")
  accuracy = scalar_curve(event_dir, "masked_lm_accuracy")
  loss = scalar_curve(event_dir, "loss")
  figure, (left, right) = pyplot.subplots(1, 2, figsize=(10, 4))
  left.plot(*zip(*accuracy), marker="o")
  left.set(xlabel="step (batch 32)", ylabel="train masked-LM accuracy", title="Masked LM accuracy")
  right.plot(*zip(*loss), marker="o", color="tab:red")
  right.set(xlabel="step (batch 32)", ylabel="train loss (MLM + NSP)", title="Loss")
  for axis in (left, right):
    axis.grid(alpha=0.3)
  figure.suptitle("run_pretraining.py, L=4 H=256 A=4, seq 128, bf16, shared Gutenberg corpus, 2-core CPU")
  figure.tight_layout()
  figure.savefig(png, dpi=80)
  print("wrote", png)


def pretrain_run():
  corpus = os.path.join(os.path.dirname(REPO), "shared", "data", "corpus", "gutenberg")
  vocab = os.path.join(os.path.dirname(REPO), "shared", "data", "vocab",
                       "bert-base-uncased-vocab.txt")
  work = FLAGS.work_dir
  tf.io.gfile.makedirs(work)
  books = sorted(tf.io.gfile.glob(os.path.join(corpus, "*.txt")))
  train_books = [b for b in books if not b.endswith(HELD_OUT_BOOK) and (
      not FLAGS.train_books or os.path.basename(b) in FLAGS.train_books)]
  held_out = [b for b in books if b.endswith(HELD_OUT_BOOK)]
  train_records = os.path.join(work, "train.tfrecord")
  eval_records = os.path.join(work, "heldout.tfrecord")
  start = time.time()
  for inputs, output, dupe in ((train_books, train_records, 1), (held_out, eval_records, 1)):
    if not os.path.exists(output):
      run_logged([sys.executable, "create_pretraining_data.py", f"--input_file={','.join(inputs)}",
                  f"--output_file={output}", f"--vocab_file={vocab}", "--do_lower_case",
                  "--max_seq_length=128", "--max_predictions_per_seq=20",
                  f"--dupe_factor={dupe}", "--num_workers=2", "--random_seed=12345"])
  records_seconds = time.time() - start
  num_train = sum(1 for _ in tf.data.TFRecordDataset(train_records))
  config_file = os.path.join(work, "bert_config.json")
  bench_configs.write_config("small", config_file)
  output_dir = os.path.join(work, "model")
  common = [f"--bert_config_file={config_file}", "--max_seq_length=128",
            "--max_predictions_per_seq=20", "--dtype=bfloat16", "--seed=1"]
  start = time.time()
  run_logged([sys.executable, "run_pretraining.py", *common, f"--input_file={train_records}",
              f"--output_dir={output_dir}", "--do_train", "--train_batch_size=32",
              f"--num_train_steps={FLAGS.pretrain_steps}",
              f"--num_warmup_steps={FLAGS.pretrain_steps // 10}", f"--learning_rate={FLAGS.pretrain_learning_rate:g}",
              "--save_checkpoints_steps=1000", "--log_steps=250"])
  train_seconds = time.time() - start
  mlm_baseline, nsp_baseline, num_eval = unigram_baselines(eval_records, train_records)
  eval_dir = os.path.join(work, "heldout_eval")
  run_logged([sys.executable, "run_pretraining.py", *common, f"--input_file={eval_records}",
              f"--output_dir={eval_dir}", f"--init_checkpoint={output_dir}", "--do_eval",
              "--eval_batch_size=64", f"--max_eval_steps={num_eval // 64}"])
  with open(os.path.join(eval_dir, "eval_results.txt")) as f:
    held = dict(line.strip().split(" = ") for line in f)
  mlm_curve = scalar_curve(os.path.join(output_dir, "train"), "masked_lm_accuracy")
  loss_curve = dict(scalar_curve(os.path.join(output_dir, "train"), "loss"))
  speed = scalar_curve(os.path.join(output_dir, "train"), "examples_per_second")
  lines = ["| step | train loss | train masked-LM accuracy (last 250 steps) |", "|---|---|---|"]
  lines += [f"| {step} | {loss_curve.get(step, float('nan')):.3f} | {acc:.3f} |"
            for step, acc in mlm_curve]
  table = "\n".join(lines)
  summary = (f"Held-out ({HELD_OUT_BOOK}, {num_eval} instances, "
             f"{(num_eval // 64) * 64} evaluated): masked_lm_accuracy "
             f"{float(held['masked_lm_accuracy']):.4f} (unigram baseline, the train set's most "
             f"frequent masked token: {mlm_baseline:.4f}), next_sentence_accuracy "
             f"{float(held['next_sentence_accuracy']):.4f} (majority baseline "
             f"{nsp_baseline:.4f}), masked_lm_loss {float(held['masked_lm_loss']):.3f}, "
             f"next_sentence_loss {float(held['next_sentence_loss']):.3f}.")
  print(table)
  print(summary)
  if FLAGS.append:
    harness.append_history(
        f"\n## A real pretraining run on the CPU (bench/bench_pretraining.py --mode=pretrain)"
        f"\n\nCommand: `flock /tmp/bert_tf_heavy.lock .venv/bin/python "
        f"bench/bench_pretraining.py {' '.join(sys.argv[1:])}`  \nMachine: {harness.machine()}. "
        f"Date: {harness.utc_now()}.  \n"
        f"Data: create_pretraining_data.py on {len(train_books)} other Gutenberg books of "
        f"../shared/data/corpus (uncased vocab, seq 128, 20 predictions, dupe_factor 1: "
        f"{num_train} train instances; {records_seconds:.0f} s), held out: "
        f"{HELD_OUT_BOOK}. Model: L=4, H=256, A=4, I=1024, V={VOCAB}, bf16 "
        f"(mixed_bfloat16), batch 32, lr {FLAGS.pretrain_learning_rate:g}, {FLAGS.pretrain_steps // 10} warmup steps, "
        f"{FLAGS.pretrain_steps} steps in {train_seconds / 60:.1f} min (whole "
        f"run_pretraining.py process; last logged {speed[-1][1] if speed else 0:.0f} "
        f"examples/s).\n\n{table}\n\n{summary}\n")


def main(_):
  if FLAGS.mode == "pretrain":
    pretrain_run()
    plot_curve(FLAGS.work_dir)
    return
  if FLAGS.mode == "plot":
    plot_curve(FLAGS.work_dir)
    return
  if FLAGS.torch_child:
    name, batch_size, dtype = FLAGS.torch_child.split(",")
    print("SEQS", time_torch(name, int(batch_size), dtype))
    return
  work_dir = tempfile.mkdtemp(prefix="bench_pretraining_")
  record_file = os.path.join(work_dir, "records.tfrecord")
  write_records(record_file, 256, FLAGS.seq_length, FLAGS.max_predictions_per_seq)
  peak = {"bfloat16": matmul_peak_tflops(tf.bfloat16), "float32": matmul_peak_tflops(tf.float32)}
  print(f"matmul peak 4096^3: bf16 {peak['bfloat16']:.2f} TFLOP/s, "
        f"fp32 {peak['float32']:.2f} TFLOP/s", flush=True)
  rows = []
  for name in FLAGS.models:
    config = config_for(name)
    batch_size = FLAGS.base_batch_size if name == "base" else FLAGS.small_batch_size
    flops = train_flops_per_sequence(config, FLAGS.seq_length, FLAGS.max_predictions_per_seq)
    runs = []
    if "ours" in FLAGS.peers:
      for dtype in ("float32", "bfloat16"):
        for use_xla in ((False, True) if name == "small" else (False,)):
          runs.append((f"ours {dtype}" + (" XLA" if use_xla else ""), dtype,
                       lambda d=dtype, x=use_xla: time_ours(config, batch_size, d, x,
                                                            record_file, work_dir)))
    if "torch" in FLAGS.peers:
      for dtype in ("float32", "bfloat16"):
        runs.append((f"PyTorch {dtype}" + (" autocast" if dtype == "bfloat16" else ""), dtype,
                     lambda d=dtype: torch_in_child(name, batch_size, d)))
    for label, dtype, fn in runs:
      seqs = fn()
      tflops = seqs * flops / 1e12
      rows.append((name, batch_size, label, seqs, tflops, tflops / peak["bfloat16"]))
      print(f"{name} batch {batch_size} {label}: {seqs:.2f} seq/s, {tflops:.3f} TFLOP/s",
            flush=True)

  lines = ["| model | batch | implementation | sequences/s | TFLOP/s | % of bf16 matmul peak |",
           "|---|---|---|---|---|---|"]
  for name, batch_size, label, seqs, tflops, frac in rows:
    lines.append(f"| {name} | {batch_size} | {label} | {seqs:.2f} | {tflops:.3f} | "
                 f"{100 * frac:.1f}% |")
  ratios = []
  for name in FLAGS.models:
    by_label = {r[2]: r[3] for r in rows if r[0] == name}
    if "ours float32" in by_label and "ours bfloat16" in by_label:
      ratios.append(f"{name}: ours bf16 / ours fp32 = "
                    f"{by_label['ours bfloat16'] / by_label['ours float32']:.2f}x")
    torch_best = max([v for k, v in by_label.items() if k.startswith("PyTorch")], default=None)
    ours_best = max([v for k, v in by_label.items() if k.startswith("ours")], default=None)
    if torch_best and ours_best:
      ratios.append(f"{name}: ours best / PyTorch best = {ours_best / torch_best:.2f}x")
  table = "\n".join(lines)
  print(table)
  print("\n".join(ratios))
  if FLAGS.append:
    command = "flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_pretraining.py " + " ".join(
        sys.argv[1:])
    harness.append_history(
        f"\n## Pretraining throughput: run_pretraining's loop vs PyTorch "
        f"BertForPreTraining (bench/bench_pretraining.py)\n\n"
        f"Command: `{command.strip()}`  \nMachine: {harness.machine()}. "
        f"Date: {harness.utc_now()}.  \n"
        f"Seq {FLAGS.seq_length}, {FLAGS.max_predictions_per_seq} masked positions, vocab "
        f"{VOCAB}, dropout 0.1, full training steps (ours: bert_tf.training.loop.train with "
        f"AdamWeightDecay, clip 1.0, tf.data from records, op determinism on; PyTorch: "
        f"AdamW, clip 1.0, 2 threads, MLM logits over all 128 positions as HF computes "
        f"them). {FLAGS.steps} timed steps after {FLAGS.steps} untimed. Measured matmul "
        f"peak (4096^3): bf16 {peak['bfloat16']:.2f} TFLOP/s, fp32 "
        f"{peak['float32']:.2f} TFLOP/s.\n\n{table}\n\n" +
        "".join(f"- {r}\n" for r in ratios))


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
