"""The paper's ablations (Table 5, Table 8, Figure 5) end to end at small scale, through the repo's
scripts: create_pretraining_data.py, run_pretraining.py, then run_classifier.py, run_squad.py and
run_ner.py fine-tuning from each pretrained model.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_ablations.py [--quick]
      [--work_dir=/tmp/bert_tf_ablations]

1. Pretraining, the small config (L=4, H=256, A=4, seq 128, bert-base-uncased vocab), the same
   --pretrain_steps each, packed rows (--pack_sequences): the rows of Table 5 (BERT: MLM + NSP; No
   NSP; LTR & No NSP) and of Table 8 (the MASK/SAME/RND mixes of --mixes; 80/10/10 is the BERT
   row). The masked-LM rows draw their masks at input time (--dynamic_masking) from unmasked
   records of the shared corpus's Gutenberg books; the left-to-right row reads masked records
   (it rebuilds the text). Held-out book: Frankenstein, static 80/10/10 masked records; the
   LTR row's figure there is next-token accuracy.
2. Fine-tuning each Table 5 row on MRPC, SST-2 (a fixed train slice), CoNLL-2003 (fixed train
   and dev slices) and the synthetic SQuAD 2.0 set of make_synthetic_squad.py; "+ BiLSTM" is the
   LTR row fine-tuned with --bilstm_head (on --bilstm_tasks).
3. Table 8: each mix fine-tuned on --table8_task and run_ner.py --feature_based.
4. Figure 5: --figure5_task dev accuracy fine-tuned from the BERT row's checkpoints at increasing
   pretraining steps (0: random init), plotted to --figure.
Every job caches its result in --work_dir (rerunning continues a killed run; a finished job is
not rerun); --quick proves every path with tiny budgets in a few minutes.
"""
import json
import math
import os
import random
import time
import types

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from lib.bench_env import BENCH, DATA
from absl import flags

import ablations_jobs as jobs
from lib import bench_configs
import bench_glue
import bench_ner
from lib import harness
HELD_OUT_BOOK = "pg84-frankenstein.txt"  # as bench_packing_walltime.py's

# Budgets: full run, then --quick's overrides.
FULL = dict(pretrain_steps=200, pretrain_batch_size=32, heldout_eval_steps=20,
            mrpc_train=0, sst2_train=2000, dev_limit=0, conll_train=2000, conll_dev=1000,
            squad_train=1000, squad_dev=300, epochs=2.0, squad_epochs=2.0, figure5_points=3,
            books=None)
QUICK = dict(pretrain_steps=4, pretrain_batch_size=8, heldout_eval_steps=2, mrpc_train=48,
             sst2_train=48, dev_limit=48, conll_train=48, conll_dev=48, squad_train=40,
             squad_dev=20, epochs=1.0, squad_epochs=1.0, figure5_points=3,
             books=["pg74-tom_sawyer.txt"])


FLAGS = flags.FlagValues()
flags.DEFINE_string("work_dir", "/tmp/bert_tf_ablations", "Jobs and their cached results.",
                    flag_values=FLAGS)
flags.DEFINE_boolean("quick", False, "tiny budgets: every path, minutes", flag_values=FLAGS)
flags.DEFINE_string("data_dir", DATA, "The shared data.", flag_values=FLAGS)
flags.DEFINE_string("mixes", "80/10/10,0/0/100", "Table 8 MASK/SAME/RND mixes (the paper's six: "
                    "80/10/10,100/0/0,80/0/20,80/20/0,0/20/80,0/0/100)", flag_values=FLAGS)
flags.DEFINE_enum("table8_task", "CoNLL", jobs.FINETUNE_TASKS, "Table 8's task.", flag_values=FLAGS)
flags.DEFINE_enum("figure5_task", "SST-2", ["MRPC", "SST-2"], "Figure 5's task.", flag_values=FLAGS)
flags.DEFINE_string("bilstm_tasks", "SQuAD", "tasks of the '+ BiLSTM' row (comma-separated)",
                    flag_values=FLAGS)
flags.DEFINE_float("learning_rate", 5e-4, "fine-tuning", flag_values=FLAGS)
flags.DEFINE_float("pretrain_learning_rate", 2e-4, "5e-4 stays on the unigram plateau for 1000 "
                   "steps (bench_packing_walltime)", flag_values=FLAGS)
flags.DEFINE_integer("lstm_units", 128, "--bilstm_hidden_size and the feature-based --lstm_units",
                     flag_values=FLAGS)
flags.DEFINE_integer("seed", 12345, "Seed of the data and the runs.", flag_values=FLAGS)
flags.DEFINE_boolean("report_only", False, "print the tables of the jobs finished so far in "
                     "--work_dir (a run may be going on there); run and write nothing",
                     flag_values=FLAGS)
flags.DEFINE_string("figure", os.path.join(BENCH, "ablations_figure5.png"), "Figure 5's PNG.",
                    flag_values=FLAGS)
for _name, _value in FULL.items():
  if _name != "books":
    (flags.DEFINE_integer if isinstance(_value, int) else flags.DEFINE_float)(
        _name, None, f"default {_value} ({QUICK[_name]} with --quick)", flag_values=FLAGS)


def parse_args(argv=None):
  """The flags in argv (default: sys.argv[1:]), with the budget's defaults filled in."""
  return with_budget(harness.parse(FLAGS, argv))


def with_budget(args):
  """args with the budget's defaults (--quick's or the full run's) where a flag was not given,
  --mixes and --bilstm_tasks as lists."""
  budget = QUICK if args.quick else FULL
  for name, value in budget.items():
    if getattr(args, name, None) is None:
      setattr(args, name, value)
  args.mixes = [jobs.parse_mix(m) for m in args.mixes.split(",")]
  if args.quick:
    args.mixes = args.mixes[:2]
  args.bilstm_tasks = [t for t in args.bilstm_tasks.split(",") if t]
  return args


def flag_list(**values):
  return [f"--{k}={v}" for k, v in values.items()]


# ------------------------------------------------------------------------------------ data


def data_jobs(args, work_dir):
  """create_pretraining_data.py's records (unmasked training records, sentence pairs and
  --no_nsp's single segments; masked single segments for the left-to-right row; the held-out book
  masked, both ways) and make_synthetic_squad.py's set, as Jobs."""
  corpus = os.path.join(args.data_dir, "corpus", "gutenberg")
  books = args.books or sorted(b for b in os.listdir(corpus) if b != HELD_OUT_BOOK)
  vocab = os.path.join(args.data_dir, "vocab", "bert-base-uncased-vocab.txt")
  common = flag_list(vocab_file=vocab, max_seq_length=128, max_predictions_per_seq=20,
                     dupe_factor=1, num_workers=2, random_seed=args.seed) + ["--do_lower_case"]

  def records(name, files, extra=()):
    out = os.path.join(work_dir, name, "records.tfrecord")
    cmd = [jobs.python(), "create_pretraining_data.py",
           "--input_file=" + ",".join(os.path.join(corpus, b) for b in files),
           f"--output_file={out}"] + common + list(extra)
    return jobs.Job(name, cmd, parse=lambda folder: {"records": out}, kind="records")

  squad = os.path.join(work_dir, "squad_data")
  return [records("records_unmasked", books, ["--unmasked"]),
          records("records_unmasked_no_nsp", books, ["--unmasked", "--no_nsp"]),
          records("records_masked_no_nsp", books, ["--no_nsp"]),
          records("records_heldout", [HELD_OUT_BOOK]),
          records("records_heldout_no_nsp", [HELD_OUT_BOOK], ["--no_nsp"]),
          jobs.Job("squad_data", [jobs.python(), os.path.join(BENCH, "make_synthetic_squad.py"),
                                  f"--output_dir={squad}/output", f"--seed={args.seed}"] +
                   flag_list(num_train=args.squad_train, num_dev=args.squad_dev),
                   parse=lambda folder: {"dir": os.path.join(folder, "output")}, kind="data")]


def cut_lines(path, keep, seed=None, header=True):
  """Keeps `keep` data lines of a tsv (a seeded sample, or the first ones without a seed)."""
  with open(path, encoding="utf-8") as f:
    lines = f.readlines()
  head, rows = (lines[:1], lines[1:]) if header else ([], lines)
  if keep and keep < len(rows):
    rows = random.Random(seed).sample(rows, keep) if seed is not None else rows[:keep]
  with open(path, "w", encoding="utf-8") as f:
    f.writelines(head + rows)


def prepare_task_data(args, work_dir):
  """{task: data dir} of the GLUE tasks (bench_glue.prepare_data; SST-2 and, if asked, MRPC cut
  to seeded train slices, dev cut to its first --dev_limit) and of CoNLL (bench_ner's seeded
  train slice, dev: the first --conll_dev sentences of valid.txt)."""
  dirs = {}
  for task, train in (("MRPC", args.mrpc_train), ("SST-2", args.sst2_train)):
    data_dir = bench_glue.prepare_data(task, os.path.join(args.data_dir, "glue"), work_dir,
                                       args.seed, args.sst2_train)
    if task == "MRPC" and train:
      cut_lines(os.path.join(data_dir, "train.tsv"), train, args.seed)
    cut_lines(os.path.join(data_dir, "dev.tsv"), args.dev_limit)
    dirs[task] = data_dir
  conll = os.path.join(work_dir, "data", "conll")
  os.makedirs(conll, exist_ok=True)
  dev = bench_ner.sentence_blocks(os.path.join(args.data_dir, "conll2003", "valid.txt"))
  with open(os.path.join(conll, "valid.txt"), "w") as f:
    f.write("\n\n".join(dev[:args.conll_dev] if args.conll_dev else dev) + "\n\n")
  bench_ner.CONLL = os.path.join(args.data_dir, "conll2003")
  dirs["CoNLL"], _ = bench_ner.prepare_data(
      types.SimpleNamespace(work_dir=work_dir, seed=args.seed), args.conll_train, "data/conll")
  return dirs


def trivial_baselines(work_dir):
  """{task: dev score of a constant answer}: the majority class (MRPC, SST-2), "no answer"
  (SQuAD 2.0 F1: the unanswerable share) and all O (CoNLL F1: 0), from the data in work_dir."""
  scores = {"CoNLL": 0.0}
  for task in ("MRPC", "SST-2"):
    path = os.path.join(work_dir, "data", bench_glue.TASKS[task][0], "dev.tsv")
    if os.path.exists(path):
      labels = [row[bench_glue.TASKS[task][3]] for row in bench_glue.read_rows(path, True)]
      scores[task] = 100 * max(labels.count(label) for label in set(labels)) / len(labels)
  path = os.path.join(work_dir, "squad_data", "output", "dev.json")
  if os.path.exists(path):
    with open(path) as f:
      questions = [qa for article in json.load(f)["data"] for paragraph in article["paragraphs"]
                   for qa in paragraph["qas"]]
    scores["SQuAD"] = 100 * sum(qa["is_impossible"] for qa in questions) / len(questions)
  return scores


# ------------------------------------------------------------------------------------ jobs


def checkpoint_interval(args):
  """Steps between the pretraining checkpoints: every Figure 5 step is one."""
  steps = [s for s in jobs.figure5_steps(args.pretrain_steps, args.figure5_points) if s]
  return math.gcd(*steps)


def pretrain_jobs(args, work_dir, config, files, row):
  """(pretraining, held-out evaluation) Jobs of one row. The held-out records are masked
  80/10/10 whatever the row's mix, single segments for the No NSP rows."""
  row_flags, kind = jobs.pretrain_row_flags(row)
  interval = checkpoint_interval(args)
  folder = os.path.join(work_dir, f"pretrain_{row}")
  common = flag_list(bert_config_file=config, max_seq_length=128, max_predictions_per_seq=20,
                     seed=args.seed, dtype="float32")
  train = [jobs.python(), "run_pretraining.py", f"--input_file={files[kind]}",
           f"--output_dir={folder}/output", "--do_train", "--pack_sequences"] + common + flag_list(
               vocab_file=os.path.join(args.data_dir, "vocab", "bert-base-uncased-vocab.txt"),
               train_batch_size=args.pretrain_batch_size, num_train_steps=args.pretrain_steps,
               num_warmup_steps=max(1, args.pretrain_steps // 10),
               learning_rate=args.pretrain_learning_rate, save_checkpoints_steps=interval,
               iterations_per_loop=interval, log_steps=interval,
               keep_checkpoint_max=args.pretrain_steps // interval + 1 if row == "bert" else 1)
  heldout = files["heldout_no_nsp" if kind.endswith("no_nsp") else "heldout"]
  evaluate = [jobs.python(), "run_pretraining.py", f"--input_file={heldout}",
              f"--output_dir={work_dir}/heldout_{row}/output", "--do_eval",
              f"--init_checkpoint={folder}/output"] + common + flag_list(
                  eval_batch_size=32, max_eval_steps=args.heldout_eval_steps)
  evaluate += [f for f in row_flags if f in ("--no_nsp", "--left_to_right")]
  return (jobs.Job(f"pretrain_{row}", train + row_flags, kind="pretrain"),
          jobs.Job(f"heldout_{row}", evaluate, parse=jobs.heldout_metrics, kind="heldout"))


def finetune_job(args, work_dir, config, data, row, task, variant):
  """The fine-tuning Job of (row, task, variant) (see ablations_jobs.finetune_plan)."""
  name = "_".join(p for p in ("finetune", row, task, variant) if p)
  folder = os.path.join(work_dir, name)
  pretrained = os.path.join(work_dir, f"pretrain_{row}", "output")
  if variant.startswith("step"):
    step = int(variant[4:])
    pretrained = os.path.join(pretrained, f"model.ckpt-{step}") if step else None
  cmd = [f"--output_dir={folder}/output", "--do_train", "--do_lower_case"] + flag_list(
      vocab_file=os.path.join(args.data_dir, "vocab", "bert-base-uncased-vocab.txt"),
      bert_config_file=config, train_batch_size=32, learning_rate=args.learning_rate,
      num_train_epochs=args.squad_epochs if task == "SQuAD" else args.epochs, seed=args.seed,
      dtype="float32", save_checkpoints_steps=100000, log_steps=20)
  cmd += [f"--init_checkpoint={pretrained}"] if pretrained else []
  if row == "ltr":  # the paper keeps the left-only constraint at fine-tuning
    cmd += ["--left_to_right"]
  if variant == "bilstm":
    cmd += ["--bilstm_head", f"--bilstm_hidden_size={args.lstm_units}"]
  if task in ("MRPC", "SST-2"):
    cmd = ["run_classifier.py", f"--task_name={task}", f"--data_dir={data[task]}", "--do_eval",
           f"--max_seq_length={128 if task == 'MRPC' else 64}", "--eval_batch_size=64"] + cmd
    parse = jobs.eval_metric("eval_accuracy")
  elif task == "CoNLL":
    cmd = ["run_ner.py", f"--data_dir={data[task]}", "--do_eval", "--max_seq_length=64",
           "--eval_batch_size=64"] + cmd
    parse = jobs.eval_metric("eval_f1")
    if variant == "feature":
      cmd = [c for c in cmd if not c.startswith("--learning_rate")] + [
          "--feature_based", "--feature_layers=concat_last_four",
          f"--lstm_units={args.lstm_units}", "--learning_rate=1e-3"]
  else:
    squad = data["SQuAD"]
    cmd = ["run_squad.py", f"--train_file={squad}/train.json", f"--predict_file={squad}/dev.json",
           "--do_predict", "--version_2_with_negative", "--max_seq_length=128", "--doc_stride=64",
           "--max_query_length=32", "--predict_batch_size=64"] + cmd
    parse = jobs.eval_metric("f1", scale=1.0, file_name="eval_results.json")
  return jobs.Job(name, [jobs.python()] + cmd, parse=parse, kind="finetune")


# ------------------------------------------------------------------------------------ main


def run_all(args, work_dir, log):
  """Runs (or takes from the cache) every job; returns the results the tables read. With
  --report_only, runs nothing and writes nothing: the finished jobs' results alone."""
  results = {"heldout": {}, "finetune": {}, "seconds": {}}

  def run(job):
    if args.report_only:
      result = jobs.cached_result(job, work_dir, check_command=False)
    else:
      result = jobs.run_job(job, work_dir, log)
    if result is not None:
      results["seconds"][job.name] = result["seconds"]
    return result or {}

  files = {}
  for job in data_jobs(args, work_dir):
    result = run(job)
    files[job.name.replace("records_", "")] = result.get("records", result.get("dir"))
  # The data dirs are only named in commands, which --report_only does not run.
  data = dict.fromkeys(jobs.FINETUNE_TASKS, "") if args.report_only else prepare_task_data(
      args, work_dir)
  data["SQuAD"] = files.pop("squad_data")
  config = os.path.join(work_dir, "bert_config.json")
  if not args.report_only:
    bench_configs.write_config("small", config)

  def finetune(row, task, variant=""):
    job = finetune_job(args, work_dir, config, data, row, task, variant)
    results["finetune"][row, task, variant] = run(job).get("score")

  rows = jobs.plan_rows(args.mixes)
  plan = jobs.finetune_plan(args.mixes, args.table8_task, args.figure5_task, args.bilstm_tasks)
  for row in rows:
    pretrain, heldout = pretrain_jobs(args, work_dir, config, files, row)
    run(pretrain)
    results["heldout"][row] = run(heldout)
    for row_, task, variant in plan:
      if row_ == row:
        finetune(row, task, variant)
    if row == "bert":
      for step in jobs.figure5_steps(args.pretrain_steps, args.figure5_points)[:-1]:
        finetune("bert", args.figure5_task, f"step{step}")
  return results


def figure5_points(args, results):
  steps = jobs.figure5_steps(args.pretrain_steps, args.figure5_points)
  return [(s, results["finetune"].get(("bert", args.figure5_task, f"step{s}" if s <
                                       args.pretrain_steps else ""))) for s in steps]


def plot_figure5(points, task, path, log):
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  except ImportError:
    log("matplotlib is not installed: Figure 5 not plotted")
    return
  points = [(s, v) for s, v in points if v is not None]
  figure, axes = pyplot.subplots(figsize=(5, 3.5))
  axes.plot([s for s, _ in points], [v for _, v in points], marker="o")
  axes.set_xlabel("pretraining steps (BERT row, small config)")
  axes.set_ylabel(f"{task} dev accuracy (%)")
  axes.set_title("Figure 5 at small scale (bench_ablations.py)")
  axes.grid(alpha=0.3)
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  log(f"Figure 5 plotted to {path}")


def report(args, results, seconds):
  print(f"\nTable 5 (small config, {args.pretrain_steps} pretraining steps of "
        f"{args.pretrain_batch_size} packed rows of 128; dev sets):")
  print(jobs.table5(results))
  print(f"\nTable 8 (masking mixes; fine-tune: {args.table8_task} dev; feature-based: run_ner.py "
        f"--feature_based concat_last_four, BiLSTM {args.lstm_units}):")
  print(jobs.table8(results, args.mixes, args.table8_task))
  points = figure5_points(args, results)
  print(f"\nFigure 5 ({args.figure5_task} dev accuracy by pretraining steps of the BERT row):")
  print(jobs.figure5_table(points, args.figure5_task))
  print("\nThe paper's orderings at this scale:")
  for claim, holds in jobs.orderings(results, args.mixes, args.table8_task):
    print(f"  {claim}: {holds or '-'}")
  print(f"\nwall time {seconds:.0f} s ({seconds / 60:.1f} min; the cached jobs' own times add "
        f"to {sum(results['seconds'].values()) / 60:.1f} min)")
  return points


def main(_):
  args = with_budget(harness.values(FLAGS))
  work_dir = os.path.abspath(args.work_dir + ("_quick" if args.quick else ""))
  if not args.report_only:
    os.makedirs(work_dir, exist_ok=True)
  start = time.time()

  def log(message):
    print(f"[{time.time() - start:6.0f} s] {message}", flush=True)

  log(f"work dir {work_dir}; mixes {args.mixes}")
  results = run_all(args, work_dir, log)
  results["baseline"] = trivial_baselines(work_dir)
  points = report(args, results, time.time() - start)
  if not args.report_only:
    figure = os.path.join(work_dir, "figure5.png") if args.quick else args.figure
    plot_figure5(points, args.figure5_task, figure, log)


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
