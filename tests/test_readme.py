"""The commands of the README and of docs/, run as written (in the order of
tests/support/readme.py's PAGES, each block in a shell that has the variables the blocks before it
set, as a user who follows the README's set-up and then the pages pastes them), on the shared
data: only the sizes shrink (fewer steps, slices of the data), through the substitutions below,
each of which must still find its text, so that the pages cannot drift from what runs. What each
block prints has the shape of what its page shows it printed (its output block: the same closing
summaries, the same names in them, in the same order; readme.shape_difference), so that an output
block cannot go stale either; tests/test_docs.py checks that every block has one.

Blocks not run: the opening `make demo` / `make test` (the suite is `make test`; the demo is
measured by hand, its time in the README), blocks marked `<!-- flags only -->`, and blocks that
need what a test machine lacks (Google Cloud, several GPUs or workers, a TPU: their commands hold
`gs://` or `...`). tests/test_docs.py checks the flags of every block, run or not.
"""
import glob
import os
import re
import subprocess
import sys

import numpy as np

from support import readme
from support import script_runner
from support.paths import REPO, shared_data
from support.readme import logical_lines

# (a text in the command's logical line, [(as written, as run)]): smaller runs of the same commands.
SMALLER = [
    # A 2-layer H=32 BERT with MiniLM's (bert-base-uncased's) vocabulary, in MiniLM's Hugging Face
    # layout, in place of the 6-layer H=384 MiniLM: every command below it runs as written, faster
    # (each run's tracing grows with the layers; the student and the features take fewer below).
    ("convert_checkpoint.py", [("--input=$MINILM", "--input=tiny_hf")]),
    ("create_vocab.py", [("gutenberg/*.txt", "gutenberg/pg11-*.txt")]),
    ("create_pretraining_data.py", [("--dupe_factor=5", "--dupe_factor=1")]),
    ("run_pretraining.py", [("--train_batch_size=16", "--train_batch_size=4"),
                            # One eval batch: a second, partial one would trace the step again.
                            ("--num_train_steps=40", "--num_train_steps=2 --max_eval_steps=1"),
                            ("--num_warmup_steps=4", "--num_warmup_steps=1")]),
    ("--dynamic_masking", [("--train_batch_size=8", "--train_batch_size=4"),
                           ("--num_train_steps=20", "--num_train_steps=2"),
                           ("--num_warmup_steps=2", "--num_warmup_steps=1")]),
    ("run_classifier.py", [("--data_dir=../shared/data/glue/MRPC", "--data_dir=small/MRPC"),
                           ("--max_seq_length=128", "--max_seq_length=64"),
                           ("--train_batch_size=16", "--train_batch_size=8"),
                           ("--num_train_epochs=3", "--num_train_epochs=1")]),
    ("--keep_best_metric", [("--eval_every_n_steps=50", "--eval_every_n_steps=1")]),
    ("--student_layers=3", [("--student_layers=3", "--student_layers=1")]),
    ("run_squad.py", [("--max_seq_length=384 --doc_stride=128",
                       "--max_seq_length=160 --doc_stride=64"),
                      ("--num_train_epochs=2", "--num_train_epochs=1")]),
    ("> out/conll/train.txt", [("../shared/data/conll2003/train.txt",
                                "small/conll2003/train.txt")]),
    ("cp ../shared/data/conll2003/valid.txt", [("../shared/data/conll2003/", "small/conll2003/")]),
    ("run_ner.py", [("--max_seq_length=128", "--max_seq_length=64"),
                    ("--num_train_epochs=3", "--num_train_epochs=1 --train_batch_size=4")]),
    ("> out/sentences.txt", [("grep -m 200", "grep -m 6")]),
    ("extract_features.py", [("--max_seq_length=128", "--max_seq_length=64"),
                             ("--layers=-1,-2,-3,-4", "--layers=-1,-2")]),
]


def smaller(code, used):
  lines = []
  for line in logical_lines(code):
    for marker, substitutions in SMALLER:
      if marker in line:
        for written, run in substitutions:
          if written in line:
            line = line.replace(written, run)
            used.add((marker, written))
    lines.append(line)
  return "\n".join(lines)


def small_data(root):
  """Slices of the shared MRPC and CoNLL-2003 files, as the substitutions name them."""
  mrpc = shared_data("glue", "MRPC")
  conll = shared_data("conll2003")
  os.makedirs(root / "small" / "MRPC")
  os.makedirs(root / "small" / "conll2003")
  for split in ("train", "dev", "test"):
    with open(os.path.join(mrpc, f"{split}.tsv"), encoding="utf-8") as f:
      lines = f.readlines()[:9]  # the header and 8 examples: one training step of 8
    (root / "small" / "MRPC" / f"{split}.tsv").write_text("".join(lines), encoding="utf-8")
  for split in ("train", "valid", "test"):
    with open(os.path.join(conll, f"{split}.txt"), encoding="utf-8") as f:
      text = f.read()
    sentences = text.split("\n\n")[:13]  # -DOCSTART- and 12 sentences
    (root / "small" / "conll2003" / f"{split}.txt").write_text("\n\n".join(sentences) + "\n\n",
                                                               encoding="utf-8")


def tiny_hf_model(directory):
  """model.safetensors, config.json and vocab.txt of a small random BERT, as MiniLM's directory."""
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.model import modeling  # pylint: disable=g-import-not-at-top
  vocab = shared_data("vocab", "bert-base-uncased-vocab.txt")
  config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=512)
  checkpoints.save_hf_safetensors(modeling.BertPretrainer(config), str(directory))
  os.symlink(vocab, directory / "vocab.txt")


def sandbox(tmp_path):
  """A directory laid out as the repository beside ../shared, where out/ starts empty."""
  root = tmp_path / "repo"
  root.mkdir()
  for name in os.listdir(REPO):
    if name not in ("out", "demo_out", ".git", ".pytest_cache"):
      os.symlink(os.path.join(REPO, name), root / name)
  os.symlink(os.path.dirname(shared_data()), tmp_path / "shared")
  small_data(root)
  tiny_hf_model(root / "tiny_hf")
  return root


def run_shell(block, variables, root, env):
  """Runs a bash block after the variables the blocks before it set ("declare -p" lines); returns
  (what it printed, stdout and stderr as one, and the variables after it)."""
  names = sorted(set(re.findall(r"(?:^|&& )(\w+)=", block, flags=re.M)))
  declared = root / "declared.sh"
  script = (f"set -euo pipefail\n{variables}{block}\n" +
            (f"declare -p {' '.join(names)} >> {declared}\n" if names else ""))
  declared.write_text("", encoding="utf-8")
  done = subprocess.run(["bash", "-c", script], cwd=root, env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, timeout=1200)
  assert done.returncode == 0, f"{script}\n{done.stdout[-4000:]}"
  return done.stdout, variables + declared.read_text(encoding="utf-8")


def test_readme_commands_run_as_written_and_print_what_the_pages_show(tmp_path):
  shared_data("squad", "dev-v2.0.subset.json")
  root = sandbox(tmp_path)
  used, stale = set(), []
  # The README's $PY: Python, with the scripts run through the tests' script runner (one
  # TensorFlow import for all of them; see tests/support/script_runner.py).
  python = f"{sys.executable} {os.path.join(REPO, 'tests', 'support', 'script_runner.py')}"
  variables = f"PY='{python}'\n"
  env = dict(os.environ, **script_runner.server_environment())
  for number, (page, language, code, shown, _) in enumerate(readme.runs()):
    code = smaller(code, used)
    if language == "bash":
      # PY=.venv/bin/python as the README sets it is this interpreter here (CI's .venv).
      printed, variables = run_shell(code.replace("PY=.venv/bin/python", f"PY='{python}'"),
                                     variables, root, env)
    else:
      if "out/mrpc_export/<number>" in code:
        versions = sorted(glob.glob(str(root / "out" / "mrpc_export" / "[0-9]*")))
        code = code.replace("out/mrpc_export/<number>", os.path.relpath(versions[-1], root))
      # As a file run through the script runner: the block's imports of bert_tf and TensorFlow
      # are the server's, already done.
      block = root / f"block_{number}.py"
      block.write_text(code, encoding="utf-8")
      ran = script_runner.run_script(str(block), cwd=root, env=env, timeout=300)
      assert ran.returncode == 0, f"{code}\n{ran.stderr[-4000:]}"
      printed = ran.stdout
    difference = shown is not None and readme.shape_difference(language, shown, printed)
    if difference:
      stale.append(f"{page}, the block starting {code.strip().splitlines()[0][:60]!r}:\n"
                   f"{difference}")
  assert not stale, "output blocks that no longer show what their command prints:\n" + \
      "\n\n".join(stale)
  unused = {(m, w) for m, subs in SMALLER for w, _ in subs} - used
  assert not unused, f"the pages no longer have these texts the test shrinks: {sorted(unused)}"
  out = root / "out"
  mrpc = dict(line.strip().split(" = ") for line in open(out / "mrpc" / "eval_results.txt"))
  assert set(mrpc) == {"eval_accuracy", "eval_f1", "eval_loss", "global_step"}
  # The slice's 8 examples packed into rows of 64 (one a row: no two of them fit in one), 8 rows a
  # step, 1 epoch: one step.
  assert mrpc["global_step"] == "1"
  probabilities = np.loadtxt(out / "mrpc" / "test_results.tsv", delimiter="\t")
  assert probabilities.shape == (8, 2)
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)
  submission = (out / "mrpc" / "MRPC.tsv").read_text().splitlines()
  assert submission[0] == "index\tprediction" and len(submission) == 9
  # SWAG: 8 rows to train on, 3 held out (and each file's header).
  assert len((out / "swag_data" / "train.csv").read_text().splitlines()) == 9
  val = (out / "swag_data" / "val.csv").read_text().splitlines()
  with open(shared_data("swag", "allennlp-swag-regular-sample.csv"), encoding="utf-8") as f:
    assert len(val) == 4 and val[1:] == f.read().splitlines()[-3:]
  for path in ("minilm/vocab.txt", "minilm_hf/model.safetensors", "pretrain/eval_results.txt",
               "pretrain_dynamic/checkpoint", "own/vocab.txt", "own/pretrain/eval_results.txt",
               "mrpc_best/best/best.json", "mrpc/eval_results.txt", "mrpc/test_results.tsv",
               "swag/eval_results.txt", "squad/predictions.json", "ner/eval_results.txt",
               "features.jsonl"):
    assert (out / path).exists(), path
  assert glob.glob(str(out / "mrpc_export" / "[0-9]*" / "assets.extra" / "model.tflite"))


def test_readme_trains_in_float32_and_its_data_claims_hold():
  """No command that runs asks for bfloat16 (emulated and slower on the AVX2 CPUs the pages'
  times are for); the counts the pages give for the shared files are those files' counts."""
  commands = "\n".join(code for _, _, code in readme.run_blocks())
  assert "--dtype=bfloat16" not in commands
  text = "\n".join(readme.text_of(page) for page in readme.PAGES)
  sample = shared_data("corpus", "bert-sample", "sample_text.txt")
  with open(sample, encoding="utf-8") as f:
    lines = [line for line in f if line.strip()]
  assert f"the sample corpus's {len(lines)} non-blank lines" in text
  head = int(re.search(r"head -n (\d+) \.\./shared/data/conll2003/train.txt", text)[1])
  with open(shared_data("conll2003", "train.txt"), encoding="utf-8") as f:
    cut = "".join(f.readlines()[:head])
  sentences = [s for s in cut.split("\n\n") if s.strip() and not s.startswith("-DOCSTART-")]
  assert len(sentences) == 2000 and "The first 2,000 sentences of CoNLL-2003" in text
  with open(shared_data("swag", "allennlp-swag-regular-sample.csv"), encoding="utf-8") as f:
    assert len(f.read().splitlines()) == 12  # a header and 11 rows: 8 + 3 held out
  assert "the shared sample has 11 rows: 8 to train" in text


def test_a_stale_output_block_is_found():
  """shape_difference, on what a page shows and what a smaller run printed: other numbers, time
  stamps, paths' digits and column widths are the same shape; a name renamed, moved or dropped, a
  summary the run no longer prints, or a line it no longer prints is not."""
  printed = ("12:00:01 ***** Running training *****\n12:00:01   Batch size = 4\n"
             "12:00:09 eval at step 1 (0:00:02): eval_f1 0.5; new best eval_f1\n"
             "12:00:10 ***** Eval results (8 examples) *****\n12:00:10   eval_f1 = 0.5\n"
             "12:00:10   global_step = 1\n12:00:11 ***** Finished in 0:00:11 *****\n"
             "12:00:11   checkpoint:   out/x/model.ckpt-1\n12:00:11   eval_f1 = 0.5\n"
             "     LOC: precision:   0.00%; FB1:   0.00  19\n")
  shown = ("eval at step 50 (0:00:22): eval_f1 0.8223; new best eval_f1\n"
           "***** Eval results (408 examples) *****\n  eval_f1 = 0.84\n  global_step = 200\n"
           "***** Finished in 0:15:26 *****\n  checkpoint:   out/x/model.ckpt-295\n"
           "  eval_f1 = 0.8439\n    LOC: precision:  36.64%; FB1:  49.62  3854\n")
  assert readme.shape_difference("bash", shown, printed) is None
  for stale in (shown.replace("global_step", "step"), shown.replace("  eval_f1 = 0.8439\n", ""),
                shown.replace("Eval results", "Results"), shown.replace("new best", "best"),
                shown + "***** Finished *****\n  checkpoint: out/y\n"):
    assert readme.shape_difference("bash", stale, printed), stale
  assert readme.shape_difference("python", "[{'label': '1', 'score': 0.93}]\n(1, 9, 384) (1, 384)",
                                 "[{'label': '0', 'score': 0.5}]\n(1, 9, 32) (1, 32)\n") is None
  assert readme.shape_difference("python", "[{'label': '1', 'p': 0.93}]",
                                 "[{'label': '0', 'score': 0.5}]")
