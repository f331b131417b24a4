"""Packed against unpacked pretraining: real (non-padding) tokens per second of run_pretraining.py,
with and without --pack_sequences, one process per configuration and mode.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_packing.py [--quick] [--dtype=bfloat16]

Records: create_pretraining_data.py with its defaults (but --max_seq_length, and --dupe_factor=1:
the duplicates are other maskings of the same instances, the lengths are the same) on the shared
corpus's Gutenberg books, made once into --cache_dir. Models: the small config (L=4, H=256, A=4)
and BERT-Base, vocab 30,522, at seq 128 and 512, the same rows per step packed or not, in
bfloat16 where it is native (a GPU, AVX-512 BF16 or AMX) and float32 otherwise (--dtype). Each run
is a full run_pretraining.py --do_train process; its rate is its last progress line, over the
second half of the steps (after tracing). Unpacked real tokens per second are its examples per
second times the records' mean real tokens per instance; packed, the process logs them itself
(real_tokens_per_second). --quick: the small config alone, fewer steps (under 5 minutes).
The last line: `packed/unpacked real tokens per second: seq128=X.XXx seq512=Y.YYx`, for the small
config (the one --quick measures; the lines before it give every model's).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from lib.bench_env import REPO
from absl import flags
import numpy as np
import tensorflow as tf

from lib.bench_configs import CONFIGS, write_config  # noqa: F401  (for bench_packing_*)
from lib import harness

# The flags of bench_packing.py, which bench_packing_peers.py and bench_packing_walltime.py share.
FLAGS = flags.FlagValues()
flags.DEFINE_string("data_dir", bench_env.DATA, "The shared data (corpus/gutenberg, vocab).",
                    flag_values=FLAGS)
flags.DEFINE_boolean("quick", False, "The small config alone, fewer steps: under 5 minutes.",
                     flag_values=FLAGS)
flags.DEFINE_list("models", "small,base", "Configs: small (L=4, H=256), base (BERT-Base).",
                  flag_values=FLAGS)
flags.DEFINE_list("seq_lengths", "128,512", "Sequence lengths (records made for each).",
                  flag_values=FLAGS)
flags.DEFINE_enum("dtype", "auto", ["auto", "float32", "bfloat16"], "run_pretraining.py --dtype; "
                  "auto: bfloat16 on a GPU or a CPU with native bfloat16 (AVX-512 BF16, AMX), "
                  "else float32 (emulated bfloat16 would time the emulation).", flag_values=FLAGS)
flags.DEFINE_integer("steps", None, "Timed steps per run (as many untimed before); default 6, 3 "
                     "for BERT-Base and with --quick.", flag_values=FLAGS)
flags.DEFINE_integer("repeats", 1, "Unpacked/packed process pairs per configuration (interleaved; "
                     "the median is kept).", flag_values=FLAGS)
flags.DEFINE_string("cache_dir", os.path.join(tempfile.gettempdir(), "bert_tf_bench_packing"),
                    "Where the records are made once and kept.", flag_values=FLAGS)

ROWS = {("small", 128): 32, ("small", 512): 8, ("base", 128): 8, ("base", 512): 2}


def resolved_dtype():
  if FLAGS.dtype != "auto":
    return FLAGS.dtype
  if tf.config.list_physical_devices("GPU"):
    return "bfloat16"
  try:
    with open("/proc/cpuinfo") as f:
      native = re.search(r"\b(avx512_bf16|amx_bf16)\b", f.read())
  except OSError:
    native = None
  return "bfloat16" if native else "float32"


def make_records(seq):
  """create_pretraining_data.py's records of the Gutenberg books at `seq` (cached)."""
  path = os.path.join(FLAGS.cache_dir, f"gutenberg_{seq}.tfrecord")
  if not os.path.exists(path):
    books = sorted(tf.io.gfile.glob(os.path.join(FLAGS.data_dir, "corpus", "gutenberg", "*.txt")))
    if not books:
      raise SystemExit(f"no corpus at {FLAGS.data_dir}/corpus/gutenberg (give --data_dir)")
    vocab = os.path.join(FLAGS.data_dir, "vocab", "bert-base-uncased-vocab.txt")
    run([sys.executable, "create_pretraining_data.py", f"--input_file={','.join(books)}",
         f"--output_file={path}", f"--vocab_file={vocab}", "--do_lower_case",
         f"--max_seq_length={seq}", "--dupe_factor=1", "--num_workers=2"])
  return path


def real_tokens_per_instance(path):
  """(mean real tokens per instance, instances) of a record file, kept beside it."""
  counted = path + ".tokens.json"
  if not os.path.exists(counted):
    total = count = 0
    for raw in tf.data.TFRecordDataset(path).batch(1024):
      mask = tf.io.parse_example(raw, {"input_mask": tf.io.VarLenFeature(tf.int64)})["input_mask"]
      total, count = total + int(tf.reduce_sum(mask.values)), count + int(tf.size(raw))
    with open(counted, "w") as f:
      json.dump([total / count, count], f)
  with open(counted) as f:
    return tuple(json.load(f))


def run(cmd):
  result = subprocess.run(cmd, cwd=REPO, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
  if result.returncode:
    raise SystemExit(" ".join(cmd) + "\n" + result.stdout[-5000:])
  return result.stdout


def last_rate(log, name):
  values = re.findall(rf"\b{name} ([0-9.e+-]+)", log)
  if not values:
    raise SystemExit(f"no {name} in the log:\n{log[-3000:]}")
  return float(values[-1])


def time_run(model, seq, packed, records, steps, work_dir):
  """{rows, instances, real tokens} per second of one run_pretraining.py process."""
  config_file = os.path.join(work_dir, f"{model}.json")
  write_config(model, config_file)
  output_dir = tempfile.mkdtemp(dir=work_dir)
  cmd = [sys.executable, "run_pretraining.py", f"--bert_config_file={config_file}",
         f"--input_file={records}", f"--output_dir={output_dir}", "--do_train",
         f"--max_seq_length={seq}", "--max_predictions_per_seq=20",
         f"--train_batch_size={ROWS[model, seq]}", f"--num_train_steps={2 * steps}",
         "--num_warmup_steps=1", f"--log_steps={steps}", f"--iterations_per_loop={steps}",
         f"--save_checkpoints_steps={2 * steps}", f"--dtype={resolved_dtype()}", "--seed=1"]
  start = time.time()
  log = run(cmd + (["--pack_sequences"] if packed else []))
  shutil.rmtree(output_dir, ignore_errors=True)
  rows = last_rate(log, "examples_per_second")
  result = {"rows": rows, "seconds": time.time() - start}
  if packed:
    result["instances"] = last_rate(log, "instances_per_second")
    result["tokens"] = last_rate(log, "real_tokens_per_second")
  return result


def main(_):
  models = ["small"] if FLAGS.quick else FLAGS.models
  seqs = [int(s) for s in FLAGS.seq_lengths]
  os.makedirs(FLAGS.cache_dir, exist_ok=True)
  work_dir = tempfile.mkdtemp(prefix="bench_packing_")
  start = time.time()
  data = {}
  for seq in seqs:
    path = make_records(seq)
    data[seq] = (path, *real_tokens_per_instance(path))
    print(f"seq {seq}: {data[seq][2]} instances, {data[seq][1]:.1f} real tokens per instance "
          f"({100 * data[seq][1] / seq:.0f}% of the rows unpacked), {time.time() - start:.0f} s",
          flush=True)
  results = {}
  for model in models:
    steps = FLAGS.steps or (3 if FLAGS.quick or model == "base" else 6)
    for seq in seqs:
      path, tokens, _ = data[seq]
      runs = {False: [], True: []}
      for _ in range(FLAGS.repeats):
        for packed in (False, True):
          r = time_run(model, seq, packed, path, steps, work_dir)
          if not packed:
            r["instances"], r["tokens"] = r["rows"], r["rows"] * tokens
          runs[packed].append(r)
          print(f"{model} seq {seq} {'packed' if packed else 'unpacked'}: {r['rows']:.2f} rows/s, "
                f"{r['tokens']:.0f} real tokens/s ({r['seconds']:.0f} s)", flush=True)
      results[model, seq] = {packed: {k: float(np.median([r[k] for r in rs])) for k in rs[0]}
                             for packed, rs in runs.items()}
  shutil.rmtree(work_dir, ignore_errors=True)
  print_table(models, seqs, results)
  print(f"total {time.time() - start:.0f} s")
  for model in models:
    print(f"{model}: " + ratio_line(model, seqs, results))
  print(ratio_line("small" if "small" in models else models[0], seqs, results))


def ratio_line(model, seqs, results):
  return "packed/unpacked real tokens per second: " + " ".join(
      f"seq{seq}={results[model, seq][True]['tokens'] / results[model, seq][False]['tokens']:.2f}x"
      for seq in seqs)


def print_table(models, seqs, results):
  print(f"\nrun_pretraining.py --dtype={resolved_dtype()}, {os.cpu_count()} cores, records: "
        "create_pretraining_data.py defaults on the shared Gutenberg books")
  print("| model | seq | rows/step | mode | rows/s | instances/s | real tokens/s | real tokens "
        "per row | packed/unpacked |")
  print("|---|---|---|---|---|---|---|---|---|")
  for model in models:
    for seq in seqs:
      by_mode = results[model, seq]
      for packed in (False, True):
        r = by_mode[packed]
        ratio = r["tokens"] / by_mode[False]["tokens"]
        print(f"| {model} | {seq} | {ROWS[model, seq]} | {'packed' if packed else 'unpacked'} | "
              f"{r['rows']:.2f} | {r['instances']:.2f} | {r['tokens']:.0f} | "
              f"{r['tokens'] / r['rows']:.1f} | {ratio:.2f}x |")


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
