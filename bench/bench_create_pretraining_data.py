"""create_pretraining_data.py vs the original (bert-tensorflow 1.0.4): wall time, MB/s, peak RSS, same records.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_create_pretraining_data.py

Side by side in one run, seq 128, max_predictions 20, dupe_factor 5, uncased vocab:
  * a fixed ~1.8 MB subset of ../shared/data/corpus (the original at ~17 KB/s would take ~15+ minutes
    on the whole 12 MB): the original, ours with 1 and 2 workers; the records are compared.
  * the whole corpus (every file under corpus/*/): ours with 1 and 2 workers.
Then statistics of the whole-corpus records against the flags (masked fraction, 80/10/10, IsNext /
NotNext, lengths). Appends a section to BENCHMARKS.md.
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import datetime  # noqa: E402
import glob  # noqa: E402
import random  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from bert_tf import tokenization  # noqa: E402
from bert_tf.data import pretraining  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(os.path.dirname(REPO), "shared", "data", "corpus")
VOCAB = os.path.join(os.path.dirname(REPO), "shared", "data", "vocab", "bert-base-uncased-vocab.txt")
SUBSET = ["bert-sample/sample_text.txt", "gutenberg/pg11-alice_in_wonderland.txt",
          "gutenberg/pg1342-pride_and_prejudice.txt", "gutenberg/pg84-frankenstein.txt",
          "gutenberg/pg74-tom_sawyer.txt"]

flags.DEFINE_string("work_dir", None, "Where records go (default: a temporary directory).")
flags.DEFINE_string("benchmarks_md", os.path.join(REPO, "BENCHMARKS.md"), "File to append the section to.")
flags.DEFINE_bool("skip_original", False, "Do not run the original (for a quick look at ours).")
FLAGS = flags.FLAGS

COMMON = ["--max_seq_length=128", "--max_predictions_per_seq=20", "--dupe_factor=5", "--random_seed=12345",
          f"--vocab_file={VOCAB}"]


def timed(args):
  """Runs a command under /usr/bin/time: (wall seconds, peak RSS MB)."""
  result = subprocess.run(["/usr/bin/time", "-f", "%e %M", *args], capture_output=True, text=True, cwd=REPO)
  if result.returncode != 0:
    sys.exit(f"failed: {' '.join(args)}\n{result.stderr[-3000:]}")
  wall, rss_kb = result.stderr.strip().splitlines()[-1].split()
  return float(wall), int(rss_kb) / 1024


def read_records(path):
  out = []
  for raw in tf.data.TFRecordDataset(path):
    example = tf.train.Example.FromString(raw.numpy())
    out.append({name: list(f.int64_list.value) or list(f.float_list.value)
                for name, f in example.features.feature.items()})
  return out


def record_statistics(path, mask_id):
  """Masked fraction, replacement split, NSP labels and lengths, from the records alone."""
  lengths, masked, expected, kinds, labels = [], 0, 0, np.zeros(3, np.int64), []
  for raw in tf.data.TFRecordDataset(path):
    f = tf.train.Example.FromString(raw.numpy()).features.feature
    ids = np.array(f["input_ids"].int64_list.value)
    length = int(sum(f["input_mask"].int64_list.value))
    n = int(sum(f["masked_lm_weights"].float_list.value))
    positions = np.array(f["masked_lm_positions"].int64_list.value[:n])
    targets = np.array(f["masked_lm_ids"].int64_list.value[:n])
    shown = ids[positions]
    kinds += [np.sum(shown == mask_id), np.sum((shown != mask_id) & (shown == targets)),
              np.sum((shown != mask_id) & (shown != targets))]
    lengths.append(length)
    masked += n
    expected += min(20, max(1, int(round(length * 0.15))))
    labels.append(f["next_sentence_labels"].int64_list.value[0])
  return np.array(lengths), masked, expected, kinds, np.array(labels)


def main(_):
  work = FLAGS.work_dir or tempfile.mkdtemp(prefix="bench_cpd_")
  os.makedirs(work, exist_ok=True)
  subset = [os.path.join(CORPUS, path) for path in SUBSET]
  full = sorted(glob.glob(os.path.join(CORPUS, "*", "*")))
  mb = {name: sum(os.path.getsize(p) for p in files) / 1e6 for name, files in
        [("subset", subset), ("full", full)]}
  python = sys.executable
  ours = [python, os.path.join(REPO, "create_pretraining_data.py"), "--progress_seconds=60"]
  runs = []  # (corpus, who, seconds, rss, output)

  def run(corpus, who, args, output):
    files = subset if corpus == "subset" else full
    seconds, rss = timed([*args, *COMMON, f"--input_file={','.join(files)}", f"--output_file={output}"])
    runs.append((corpus, who, seconds, rss, output))
    print(f"{corpus:7s} {who:22s} {seconds:8.1f} s {mb[corpus] / seconds:7.3f} MB/s {rss:8.0f} MB", flush=True)

  if not FLAGS.skip_original:
    run("subset", "original (1 process)", [python, "-m", "bert.create_pretraining_data"],
        os.path.join(work, "original.tfrecord"))
  run("subset", "ours, 1 worker", [*ours, "--num_workers=1"], os.path.join(work, "ours1.tfrecord"))
  run("subset", "ours, 2 workers", [*ours, "--num_workers=2"], os.path.join(work, "ours2.tfrecord"))
  run("full", "ours, 1 worker", [*ours, "--num_workers=1"], os.path.join(work, "full1.tfrecord"))
  run("full", "ours, 2 workers", [*ours, "--num_workers=2"], os.path.join(work, "full2.tfrecord"))

  def content(path):
    with open(path, "rb") as f:
      return f.read()

  same_workers_subset = content(runs[-4][4]) == content(runs[-3][4])
  same_workers_full = content(runs[-2][4]) == content(runs[-1][4])
  if not FLAGS.skip_original:
    original, ours1 = read_records(runs[0][4]), read_records(runs[1][4])
    same_as_original = len(original) == len(ours1) and all(a == b for a, b in zip(original, ours1))
    num_subset_records = len(original)
  else:
    same_as_original, num_subset_records = None, None

  # Statistics of the whole-corpus records, and the draws behind them.
  tokenizer = tokenization.FullTokenizer(VOCAB)
  lengths, masked, expected, kinds, labels = record_statistics(runs[-1][4], tokenizer.vocab["[MASK]"])
  corpus = pretraining.read_corpus(full, tokenizer, num_workers=2, progress_seconds=None)
  maker = pretraining.InstanceMaker(corpus, pretraining.Vocab(tokenizer.vocab), pretraining.Options(dupe_factor=5),
                                    random.Random(12345))
  maker.make(progress_seconds=None)
  draws = maker.stats

  def within(observed, n, p):
    sigma = (p * (1 - p) / n) ** 0.5
    return f"{observed / n:.4f} (expected {p:.4f}, {abs(observed / n - p) / sigma:.1f} sigma)"

  drawn = draws["random_next_drawn"] + draws["actual_next"]
  total_masked = int(kinds.sum())
  stats_rows = [
      ("records", f"{len(lengths)}"),
      ("masked tokens / candidate tokens", f"{masked / (lengths - 3).sum():.4f} (masked_lm_prob 0.15; "
       f"num_to_predict = min(20, max(1, round(0.15 * length))) rounds per record)"),
      ("masked tokens / their exact expected count", f"{masked} / {expected}"),
      ("shown as [MASK]", within(kinds[0], total_masked, 0.8)),
      ("shown as the original token", within(kinds[1], total_masked, 0.1 + 0.1 / len(tokenizer.vocab))),
      ("shown as another random token", within(kinds[2], total_masked, 0.1 - 0.1 / len(tokenizer.vocab))),
      ("NotNext (label 1) among all records", f"{labels.mean():.4f} (above 0.5: a chunk of one sentence "
       f"always takes a random next; {draws['random_next_forced']} such)"),
      ("NotNext where a coin was flipped", within(draws["random_next_drawn"], drawn, 0.5)),
      ("documents with a short target (short_seq_prob 0.1)",
       within(draws["short_targets"], draws["documents"], 0.1)),
      ("record length: mean / median / at 128", f"{lengths.mean():.1f} / {np.median(lengths):.0f} / "
       f"{np.mean(lengths == 128):.3f} (Gutenberg paragraphs are documents, so many are short)"),
      ("record length deciles", " ".join(str(int(v)) for v in np.percentile(lengths, range(10, 100, 10)))),
  ]

  machine = subprocess.run("lscpu | grep 'Model name' | cut -d: -f2", shell=True, capture_output=True,
                           text=True).stdout.strip()
  date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
  lines = ["", "## create_pretraining_data.py vs the original (bench/bench_create_pretraining_data.py)", "",
           "Command: `flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_create_pretraining_data.py`  ",
           f"Machine: {machine}, 2 cores (shared with other engineers' jobs). Date: {date}.  ",
           "Flags: --max_seq_length=128 --max_predictions_per_seq=20 --dupe_factor=5 --random_seed=12345, "
           "uncased vocab. Wall time and peak RSS of the whole process (start-up included) from "
           "/usr/bin/time. Original: `python -m bert.create_pretraining_data` (bert-tensorflow 1.0.4).  ",
           f"subset = {', '.join(SUBSET)} ({mb['subset']:.2f} MB); full = every file under "
           f"corpus/*/ ({mb['full']:.2f} MB). The original is not run on the full corpus (at its subset "
           "speed it would take well over 10 minutes).", "",
           "| corpus | run | wall s | MB/s | speed-up vs original | peak RSS MB |", "|---|---|---:|---:|---:|---:|"]
  original_rate = None
  for corpus_name, who, seconds, rss, _ in runs:
    rate = mb[corpus_name] / seconds
    if who.startswith("original"):
      original_rate = rate
    ratio = f"{rate / original_rate:.1f}x" if original_rate else "-"
    lines.append(f"| {corpus_name} | {who} | {seconds:.1f} | {rate:.3f} | {ratio} | {rss:.0f} |")
  lines += ["", f"Same records as the original on the subset ({num_subset_records} records, parsed and "
            f"compared in order): {same_as_original}. Ours, 1 vs 2 workers, byte-identical: subset "
            f"{same_workers_subset}, full {same_workers_full}.", "",
            "Statistics of the full-corpus records (and of the draws behind them, counted while making):", "",
            "| statistic | value |", "|---|---|"]
  lines += [f"| {name} | {value} |" for name, value in stats_rows]
  text = "\n".join(lines) + "\n"
  print(text)
  with open(FLAGS.benchmarks_md, "a") as f:
    f.write(text)


if __name__ == "__main__":
  app.run(main)
