"""Packed against unpacked pretraining at equal wall time: held-out masked-LM accuracy after the
same minutes of run_pretraining.py, with and without --pack_sequences, and the curves, plotted.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_packing_walltime.py [--minutes=30]

The two runs go side by side, at the same time, each pinned to its own core (taskset), so that
they share whatever else the machine is doing. Both train the small config (L=4, H=256, A=4) at
seq 128, the same rows per step (32), learning rate and schedule, with --dynamic_masking over
create_pretraining_data.py --unmasked records of the shared Gutenberg books but one (fresh masks
each epoch, so neither run overfits one masking); each run gets SIGTERM after --minutes and keeps
the checkpoints it saved every --save_every_steps. Every checkpoint is then evaluated, unpacked,
on masked records of the held-out book (Frankenstein), --eval_steps batches of 32. The curve's x
is the checkpoint's wall time since its run started.
Last line: `equal wall time (N min): held-out masked-LM accuracy packed=X unpacked=Y`.
Flags --data_dir, --cache_dir and --dtype are bench_packing.py's.
"""
import json
import os
import signal
import subprocess
import sys
import time

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from absl import flags
import bench_packing
from bench_packing import FLAGS, REPO, run
from lib import harness

flags.DEFINE_float("minutes", 30, "Wall time of each run (both run at once, one core each).",
                   flag_values=FLAGS)
flags.DEFINE_integer("save_every_steps", 50, "Checkpoint (and curve point) every N steps.",
                     flag_values=FLAGS)
flags.DEFINE_float("learning_rate", 2e-4, "Peak learning rate of both runs (bench_pretraining's: "
                   "at 5e-4 neither run left the unigram plateau, 0.055, in 30 minutes).",
                   flag_values=FLAGS)
flags.DEFINE_integer("eval_steps", 60, "Held-out evaluation batches (of 32 instances).",
                     flag_values=FLAGS)
flags.DEFINE_string("work_dir", "/tmp/bert_tf_bench_walltime", "Runs and results (kept).",
                    flag_values=FLAGS)
flags.DEFINE_string("png", os.path.join(REPO, "bench", "packing_walltime.png"), "The plot.",
                    flag_values=FLAGS)

HELD_OUT_BOOK = "pg84-frankenstein.txt"
ROWS = 32


def make_records():
  """(unmasked training records of all books but one, masked held-out records), made once."""
  books = sorted(f for f in os.listdir(os.path.join(FLAGS.data_dir, "corpus", "gutenberg"))
                 if f.endswith(".txt"))
  vocab = os.path.join(FLAGS.data_dir, "vocab", "bert-base-uncased-vocab.txt")
  paths = []
  for name, inputs, extra in (("train_unmasked", [b for b in books if b != HELD_OUT_BOOK],
                               ["--unmasked"]), ("heldout", [HELD_OUT_BOOK], [])):
    path = os.path.join(FLAGS.cache_dir, f"walltime_{name}.tfrecord")
    if not os.path.exists(path):
      files = [os.path.join(FLAGS.data_dir, "corpus", "gutenberg", b) for b in inputs]
      run([sys.executable, "create_pretraining_data.py", f"--input_file={','.join(files)}",
           f"--output_file={path}", f"--vocab_file={vocab}", "--do_lower_case",
           "--max_seq_length=128", "--max_predictions_per_seq=20", "--dupe_factor=1",
           "--num_workers=2", "--random_seed=12345"] + extra)
    paths.append(path)
  return paths


def train_both(config_file, train_records):
  """Starts the unpacked and the packed run at once, one core each; SIGTERM after --minutes."""
  procs, starts = {}, {}
  for core, mode in enumerate(("unpacked", "packed")):
    output_dir = os.path.join(FLAGS.work_dir, mode)
    if os.path.exists(os.path.join(output_dir, "done.json")):
      continue
    cmd = ["taskset", "-c", str(core % os.cpu_count()), sys.executable, "run_pretraining.py",
           f"--bert_config_file={config_file}", f"--input_file={train_records}",
           f"--output_dir={output_dir}", "--do_train", "--dynamic_masking",
           f"--vocab_file={os.path.join(FLAGS.data_dir, 'vocab', 'bert-base-uncased-vocab.txt')}",
           "--max_seq_length=128", "--max_predictions_per_seq=20",
           f"--train_batch_size={ROWS}", "--num_train_steps=1000000", "--num_warmup_steps=50",
           f"--learning_rate={FLAGS.learning_rate}", f"--save_checkpoints_steps="
           f"{FLAGS.save_every_steps}", "--keep_checkpoint_max=0", "--log_steps=100",
           f"--iterations_per_loop={FLAGS.save_every_steps}",
           f"--dtype={bench_packing.resolved_dtype()}", "--seed=1"]
    cmd += ["--pack_sequences"] if mode == "packed" else []
    log = open(os.path.join(FLAGS.work_dir, f"{mode}.log"), "w")
    starts[mode] = time.time()
    procs[mode] = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
  deadline = time.time() + FLAGS.minutes * 60
  while procs and time.time() < deadline:
    if any(p.poll() is not None for p in procs.values()):
      raise SystemExit(f"a run ended early: see {FLAGS.work_dir}/*.log")
    time.sleep(5)
  for mode, proc in procs.items():
    proc.send_signal(signal.SIGTERM)
  for mode, proc in procs.items():
    proc.wait(timeout=300)
    with open(os.path.join(FLAGS.work_dir, mode, "done.json"), "w") as f:
      json.dump({"start": starts[mode], "minutes": FLAGS.minutes}, f)


def evaluate(config_file, heldout, mode):
  """[(minutes since the run started, step, held-out masked-LM accuracy)] of each checkpoint."""
  output_dir = os.path.join(FLAGS.work_dir, mode)
  with open(os.path.join(output_dir, "done.json")) as f:
    start = json.load(f)["start"]
  cache = os.path.join(FLAGS.work_dir, f"{mode}_curve.json")
  curve = json.load(open(cache)) if os.path.exists(cache) else []
  done = {point[1] for point in curve}
  steps = sorted(int(f[len("model.ckpt-"):-len(".index")]) for f in os.listdir(output_dir)
                 if f.startswith("model.ckpt-") and f.endswith(".index"))
  for step in steps:
    if step in done:
      continue
    ckpt = os.path.join(output_dir, f"model.ckpt-{step}")
    eval_dir = os.path.join(FLAGS.work_dir, "eval", f"{mode}-{step}")
    run([sys.executable, "run_pretraining.py", f"--bert_config_file={config_file}",
         f"--input_file={heldout}", f"--output_dir={eval_dir}", "--do_eval",
         f"--init_checkpoint={ckpt}", "--max_seq_length=128", "--max_predictions_per_seq=20",
         f"--eval_batch_size={ROWS}", f"--max_eval_steps={FLAGS.eval_steps}"])
    with open(os.path.join(eval_dir, "eval_results.txt")) as f:
      result = dict(line.split(" = ") for line in f.read().splitlines() if " = " in line)
    minutes = (os.path.getmtime(ckpt + ".index") - start) / 60
    curve.append((minutes, step, float(result["masked_lm_accuracy"])))
    print(f"{mode} step {step} ({minutes:.1f} min): held-out masked-LM accuracy "
          f"{curve[-1][2]:.4f}", flush=True)
    with open(cache, "w") as f:
      json.dump(sorted(curve), f)
  if not curve:
    raise SystemExit(f"{output_dir}: no checkpoint was saved in {FLAGS.minutes:g} minutes "
                     f"(give a smaller --save_every_steps)")
  return sorted(curve)


def instances_per_row(mode):
  """Instances per row of a run: 1 unpacked; packed, from its last progress line."""
  if mode == "unpacked":
    return 1.0
  with open(os.path.join(FLAGS.work_dir, f"{mode}.log")) as f:
    log = f.read()
  return (bench_packing.last_rate(log, "instances_per_second")
          / bench_packing.last_rate(log, "examples_per_second"))


def plot(curves):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  figure, axis = pyplot.subplots(figsize=(6, 4))
  for mode, curve in curves.items():
    axis.plot([p[0] for p in curve], [p[2] for p in curve], marker="o", label=mode)
  axis.set(xlabel="wall time (minutes, one core each)", ylabel="held-out masked-LM accuracy",
           title="run_pretraining.py --pack_sequences at equal wall time")
  axis.grid(alpha=0.3)
  axis.legend()
  figure.tight_layout()
  figure.savefig(FLAGS.png, dpi=80)
  print("wrote", FLAGS.png)


def main(_):
  os.makedirs(FLAGS.cache_dir, exist_ok=True)
  os.makedirs(FLAGS.work_dir, exist_ok=True)
  config_file = os.path.join(FLAGS.work_dir, "small.json")
  bench_packing.write_config("small", config_file)
  train_records, heldout = make_records()
  train_both(config_file, train_records)
  curves = {mode: evaluate(config_file, heldout, mode) for mode in ("unpacked", "packed")}
  print(f"\nsmall config, seq 128, {ROWS} rows/step, --dynamic_masking, one core each, "
        f"{FLAGS.minutes:g} min each at the same time")
  print("| mode | steps | instances per row | instances trained | held-out masked-LM accuracy |")
  print("|---|---|---|---|---|")
  for mode, curve in curves.items():
    per_row = instances_per_row(mode)
    print(f"| {mode} | {curve[-1][1]} | {per_row:.2f} | {curve[-1][1] * ROWS * per_row:.0f} | "
          f"{curve[-1][2]:.4f} |")
  plot(curves)
  print(f"equal wall time ({FLAGS.minutes:g} min): held-out masked-LM accuracy "
        f"packed={curves['packed'][-1][2]:.4f} unpacked={curves['unpacked'][-1][2]:.4f}")


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
