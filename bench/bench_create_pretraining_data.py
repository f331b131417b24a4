"""create_pretraining_data.py vs the original (bert-tensorflow 1.0.4): wall time, MB/s, peak RSS, same records.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_create_pretraining_data.py

Side by side in one run on the whole shared corpus (every file under corpus/*/, 11.8 MB), seq 128,
max_predictions 20, dupe_factor 5, uncased vocab: the original, ours with 1 and 2 workers
(--repeats rounds of the three; medians reported); the records are compared. Each side's fixed
start-up is measured on a one-line input. Then statistics of
the records against the flags (masked fraction, 80/10/10, IsNext / NotNext, lengths), and how much work two
busy processes get done on this machine against one (a loop alone, then two at once). Appends a
section to benchmarks/<date>.md.
"""
import collections
import glob
import itertools
import os
import random
import re
import subprocess
import sys
import tempfile
import time

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from lib.bench_env import REPO
from absl import flags
import numpy as np
import tensorflow as tf

from bert_tf.data.pretraining_data import algorithm
from bert_tf.data.pretraining_data import corpus as corpus_reader
from bert_tf.text import tokenization
from lib import harness

CORPUS = os.path.join(bench_env.DATA, "corpus")
VOCAB = bench_env.VOCAB

FLAGS = flags.FlagValues()
flags.DEFINE_string("work_dir", None, "Where records go (default: a temporary directory).",
                    flag_values=FLAGS)
flags.DEFINE_string("benchmarks_md", None, "File to append the section to (default: "
                    "benchmarks/<UTC date>.md).", flag_values=FLAGS)
flags.DEFINE_boolean("skip_original", False, "Do not run the original (for a quick look at ours).",
                     flag_values=FLAGS)
flags.DEFINE_integer("repeats", 3, "Rounds of the original, ours with 1 worker and ours with 2; "
                     "the table gives each one's median (the machine's timings drift between "
                     "runs).", flag_values=FLAGS)

COMMON = ["--max_seq_length=128", "--max_predictions_per_seq=20", "--dupe_factor=5", "--random_seed=12345",
          f"--vocab_file={VOCAB}"]


def run_timed(args):
  """Runs a command under /usr/bin/time: (wall seconds, peak RSS MB, phase seconds from our log or None)."""
  result = subprocess.run(["/usr/bin/time", "-f", "%e %M", *args], capture_output=True, text=True, cwd=REPO)
  if result.returncode != 0:
    sys.exit(f"failed: {' '.join(args)}\n{result.stderr[-3000:]}")
  wall, rss_kb = result.stderr.strip().splitlines()[-1].split()
  # Our closing log line: "Read ... in R s; made N instances in M s; wrote them in W s: ..."
  phases = re.search(r"\) in ([0-9.]+) s; made \d+ instances in ([0-9.]+) s; wrote them in ([0-9.]+) s",
                     result.stderr)
  return float(wall), int(rss_kb) / 1024, phases and tuple(float(v) for v in phases.groups())


# A pure-Python loop of a few seconds: one copy alone, then two at once, gives how much work two busy
# processes get done on this machine compared with one (cores that share a physical core, or a host
# that slows a busy neighbour, give less than 2x).
SPIN = [sys.executable, "-c", "x = 0\nfor i in range(40_000_000): x += i & 7"]


def two_process_ceiling():
  """(seconds of one copy alone, seconds of two copies started together)."""
  start = time.time()
  subprocess.run(SPIN, check=True)
  alone = time.time() - start
  start = time.time()
  for process in [subprocess.Popen(SPIN) for _ in range(2)]:
    process.wait()
  return alone, time.time() - start


def same_records(path_a, path_b):
  """Whether two files hold the same records in order, compared parsed (the original's bytes vary)."""
  def parsed(path):
    for raw in tf.data.TFRecordDataset(path):
      example = tf.train.Example.FromString(raw.numpy())
      yield {name: list(f.int64_list.value) or list(f.float_list.value)
             for name, f in example.features.feature.items()}
  return all(a == b for a, b in itertools.zip_longest(parsed(path_a), parsed(path_b), fillvalue=None))


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


def measure(work, full, mb):
  """Start-ups, then --repeats rounds of the original, ours with 1 worker and with 2, each round
  after the two-process ceiling: (runs [(corpus, who, seconds, rss, output)], {who: [phases]},
  {who: start-up seconds}, [(one loop alone s, two at once s)])."""
  python = sys.executable
  ours = [python, os.path.join(REPO, "create_pretraining_data.py"), "--progress_seconds=60"]
  runs = []  # (corpus, who, seconds, rss, output)
  phase_seconds = collections.defaultdict(list)  # who -> [(reading, making, writing)]

  def run(corpus, who, args, output):
    seconds, rss, phases = run_timed([*args, *COMMON, f"--input_file={','.join(full)}", f"--output_file={output}"])
    runs.append((corpus, who, seconds, rss, output))
    if phases:
      phase_seconds[who].append(phases)
    print(f"{who:22s} {seconds:8.1f} s {mb[corpus] / seconds:7.3f} MB/s {rss:8.0f} MB", flush=True)

  tiny = os.path.join(work, "one_line.txt")
  with open(tiny, "w") as f:
    f.write("One line of text.\n")
  startup = {}
  for who, args in [("original", [python, "-m", "bert.create_pretraining_data"]), ("ours", ours)]:
    if who == "original" and FLAGS.skip_original:
      continue
    startup[who], _, _ = run_timed([*args, *COMMON, f"--input_file={tiny}", f"--output_file={tiny}.tfrecord"])
    print(f"start-up {who}: {startup[who]:.1f} s", flush=True)

  ceilings = []
  for _ in range(FLAGS.repeats):
    ceilings.append(two_process_ceiling())
    print(f"one busy loop alone {ceilings[-1][0]:.1f} s, two at once {ceilings[-1][1]:.1f} s", flush=True)
    if not FLAGS.skip_original:
      run("full", "original (1 process)", [python, "-m", "bert.create_pretraining_data"],
          os.path.join(work, "original.tfrecord"))
    run("full", "ours, 1 worker", [*ours, "--num_workers=1"], os.path.join(work, "full1.tfrecord"))
    run("full", "ours, 2 workers", [*ours, "--num_workers=2"], os.path.join(work, "full2.tfrecord"))
  return runs, phase_seconds, startup, ceilings


def compared(runs):
  """(ours with 1 and 2 workers byte-identical, ours the same records as the original or None)."""
  def content(path):
    with open(path, "rb") as f:
      return f.read()

  same_workers = content(runs[-2][4]) == content(runs[-1][4])
  if not FLAGS.skip_original:
    same_as_original = same_records(runs[-3][4], runs[-2][4])
  else:
    same_as_original = None
  return same_workers, same_as_original


def statistics_rows(full, record_file):
  """(records, [(statistic, value)]) of the whole-corpus records, and of the draws behind them."""
  tokenizer = tokenization.FullTokenizer(VOCAB)
  lengths, masked, expected, kinds, labels = record_statistics(record_file, tokenizer.vocab["[MASK]"])
  corpus = corpus_reader.read_corpus(full, tokenizer, num_workers=2, progress_seconds=None)
  maker = algorithm.InstanceMaker(corpus, algorithm.Vocab(tokenizer.vocab), algorithm.Options(dupe_factor=5),
                                    random.Random(12345))
  maker.create_training_instances(progress_seconds=None)
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
  return len(lengths), stats_rows


def main(_):
  work = FLAGS.work_dir or tempfile.mkdtemp(prefix="bench_cpd_")
  os.makedirs(work, exist_ok=True)
  full = sorted(glob.glob(os.path.join(CORPUS, "*", "*")))
  mb = {"full": sum(os.path.getsize(p) for p in full) / 1e6}
  runs, phase_seconds, startup, ceilings = measure(work, full, mb)
  same_workers, same_as_original = compared(runs)
  num_records, stats_rows = statistics_rows(full, runs[-1][4])
  text = report(full, mb, runs, phase_seconds, startup, ceilings, same_workers, same_as_original,
                num_records, stats_rows)
  print(text)
  harness.append_history(text, FLAGS.benchmarks_md)


def report(full, mb, runs, phase_seconds, startup, ceilings, same_workers, same_as_original,
           num_records, stats_rows):
  """The section, Markdown."""
  machine, date = harness.cpu_model(), harness.utc_now()
  lines = ["", "## create_pretraining_data.py vs the original (bench/bench_create_pretraining_data.py)", "",
           "Command: `flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_create_pretraining_data.py"
           + "".join(f" {arg}" for arg in sys.argv[1:] if not arg.startswith("--work_dir")) + "`  ",
           f"Machine: {machine}, 2 cores (shared with other engineers' jobs). Date: {date}.  ",
           "Flags: --max_seq_length=128 --max_predictions_per_seq=20 --dupe_factor=5 --random_seed=12345, "
           "uncased vocab. Corpus: every file under ../shared/data/corpus/*/ "
           f"({mb['full']:.2f} MB, {len(full)} files). Wall time and peak RSS of the whole process from "
           "/usr/bin/time. Original: `python -m bert.create_pretraining_data` (bert-tensorflow 1.0.4). "
           "Start-up = the same command on a one-line input (imports, vocab, tokenizer tables); "
           "\"work MB/s\" = MB / (wall - start-up). "
           f"{FLAGS.repeats} rounds of the three runs, one after the other: the median wall time and the "
           "largest peak RSS of each are in the table.", "",
           "| run | wall s | start-up s | MB/s | work MB/s | work speed-up vs original | peak RSS MB |",
           "|---|---:|---:|---:|---:|---:|---:|"]
  original_rate = None
  walls = collections.defaultdict(list)
  for _, who, seconds, rss, _ in runs:
    walls[who].append((seconds, rss))
  medians = {}
  for who, measured in walls.items():
    seconds, rss = float(np.median([m[0] for m in measured])), max(m[1] for m in measured)
    medians[who] = seconds
    fixed = startup["original" if who.startswith("original") else "ours"]
    rate, work_rate = mb["full"] / seconds, mb["full"] / max(seconds - fixed, 1e-9)
    if who.startswith("original"):
      original_rate = work_rate
    ratio = f"{work_rate / original_rate:.1f}x" if original_rate else "-"
    lines.append(f"| {who} | {seconds:.1f} | {fixed:.1f} | {rate:.3f} | {work_rate:.3f} | {ratio} | {rss:.0f} |")
  lines += ["", "Wall times of every run: " + "; ".join(
      f"{who} {', '.join(f'{m[0]:.1f}' for m in measured)} s" for who, measured in walls.items()) + ". "
      f"Ours with 2 workers / 1 worker (medians): "
      f"{medians['ours, 1 worker'] / medians['ours, 2 workers']:.2f}x. The machine itself, in the same rounds: "
      f"a pure-Python loop took {', '.join(f'{a:.1f}' for a, _ in ceilings)} s alone and "
      f"{', '.join(f'{b:.1f}' for _, b in ceilings)} s as two copies at once, so two busy processes do "
      f"{float(np.median([2 * a / b for a, b in ceilings])):.2f}x the work of one (median): the ceiling of any "
      f"2-worker speed-up here."]
  lines += ["", "Our phases, from each run's closing log line (medians; making is one seeded random stream in one "
            "process whatever the number of workers): " + "; ".join(
                f"{who}: reading {np.median([p[0] for p in measured]):.1f} s, making "
                f"{np.median([p[1] for p in measured]):.1f} s, writing {np.median([p[2] for p in measured]):.1f} s"
                for who, measured in phase_seconds.items()) + "."]
  lines += ["", f"Same records as the original ({num_records} records, parsed and compared in order): "
            f"{same_as_original}. Ours with 1 and 2 workers: byte-identical files: {same_workers}.", "",
            "Statistics of the records (and of the draws behind them, counted while making):", "",
            "| statistic | value |", "|---|---|"]
  lines += [f"| {name} | {value} |" for name, value in stats_rows]
  return "\n".join(lines) + "\n"


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
