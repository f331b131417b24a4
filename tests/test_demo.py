"""The demo's data and its client, without the demo's training: the vocabulary covers everyday
English (a user's sentence is mostly whole words, nothing [UNK]), bert_config.json matches it, and
demo/ask.py names the labels and counts the words in pieces and [UNK]."""
import functools
import importlib.util
import json
import os
import subprocess
import sys

from support.paths import REPO

from bert_tf.text import tokenization

SENTENCES = ["I really enjoyed this movie, the actors were amazing!",
             "What a waste of time; I hated every minute of it.",
             "It was too long and the ending made no sense.",
             "My friends thought the music was beautiful but the story was boring.",
             "The food was cold and the waiter was rude.",
             "My new phone is fast and the battery is great."]


def test_demo_vocabulary_covers_everyday_english(tmp_path):
  # It imports no TensorFlow: a plain process starts in about a second.
  done = subprocess.run([sys.executable, os.path.join(REPO, "demo", "make_demo_data.py"),
                         f"--output_dir={tmp_path}", "--num_documents=50",
                         "--num_heldout_documents=5", "--num_labelled=60"],
                        capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, done.stderr
  vocab = tmp_path / "vocab.txt"
  tokens = vocab.read_text().splitlines()
  assert json.loads((tmp_path / "bert_config.json").read_text())["vocab_size"] == len(tokens)
  assert len(tokens) > 700  # was 194: most of a user's words were spelled letter by letter
  tokenizer = tokenization.FullTokenizer(str(vocab), do_lower_case=True)
  words = [w for s in SENTENCES for w in tokenizer.basic_tokenizer.tokenize(s)]
  pieces = [tokenizer.wordpiece_tokenizer.tokenize(w) for w in words]
  assert not [w for w, p in zip(words, pieces) if "[UNK]" in p]
  whole = [w for w, p in zip(words, pieces) if p == [w]]
  assert len(whole) == len(words), [w for w, p in zip(words, pieces) if p != [w]]
  assert tokenizer.tokenize("songs") == ["song", "##s"]  # an unseen form: word and ending
  train = (tmp_path / "sst-2" / "train.tsv").read_text().splitlines()
  assert train[0] == "sentence\tlabel" and {line[-1] for line in train[1:]} == {"0", "1"}
  # Everyday opinions, not film reviews alone: every kind of thing REVIEWED is in the labelled set.
  # In a process of its own: its --seed would clash with bert_tf's if another test imported that.
  code = "import json, make_demo_data; print(json.dumps(make_demo_data.REVIEWED))"
  reviewed = json.loads(subprocess.run([sys.executable, "-c", code], cwd=os.path.join(REPO, "demo"),
                                       capture_output=True, text=True, check=True,
                                       timeout=60).stdout)
  words = {word for line in train[1:] for word in line.split("\t")[0].split()}
  for kind, (things, _, praise, blame) in reviewed.items():
    assert words & set(things) and words & set(praise + blame), kind


@functools.lru_cache(maxsize=None)  # once: ask.py defines absl flags
def _demo_module(name):
  spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "demo", f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_ask_names_labels_and_counts_unknown_words(tmp_path):
  ask = _demo_module("ask")
  assert ask.label_name("1", ["negative", "positive"]) == "positive (1)"
  assert ask.label_name("1", None) == "1"
  assert ask.label_name("entailment", ["a", "b"]) == "entailment"
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "movie", "was", "good",
                              "song", "##s", "."]) + "\n")
  [(words, whole, split, unknown)] = ask.word_coverage(str(vocab), ["The songs was gr8 ."])
  assert (words, whole, split, unknown) == (5, 3, ["song ##s"], ["[UNK]"])


def test_the_demo_ends_with_its_table_what_it_made_and_what_to_try(tmp_path):
  """demo/summary.py on the files the stages write: summary.md (the README's table) from them,
  then what was made, where, and the next commands."""
  ask = _demo_module("ask")
  (tmp_path / "data").mkdir()
  (tmp_path / "data" / "bert_config.json").write_text(json.dumps(
      {"num_hidden_layers": 2, "hidden_size": 128, "vocab_size": 1088}))
  (tmp_path / "corpus.log").write_text(
      "12:00:00 ***** Finished in 0:00:09 *****\n12:00:00   records:  demo_out/corpus.tfrecord\n"
      "12:00:00   instances written = 12,641\n12:00:00   documents = 1,200\n")
  for stage, text in (("pretrain", "masked_lm_accuracy = 0.5312\nnext_sentence_accuracy = 0.775\n"),
                      ("classifier", "eval_accuracy = 0.9925\nglobal_step = 125\n")):
    (tmp_path / stage).mkdir()
    (tmp_path / stage / "eval_results.txt").write_text(text)
  (tmp_path / "ask.txt").write_text("\n".join([
      ask.answer_line("the food was cold .", "negative (0)", [0.91, 0.09]),
      ask.answer_line("it's great", "positive (1)", [0.2, 0.8]),
      "  its 5 words and marks: 5 in the vocabulary, 0 spelled in pieces, 0 [UNK]",
      "(12.0 ms for 2 sentence(s))"]) + "\n")
  done = subprocess.run([sys.executable, os.path.join(REPO, "demo", "summary.py"),
                         f"--out_dir={tmp_path}", "--seconds=312", "--pretrain_steps=1500",
                         "--epochs=2"], capture_output=True, text=True, timeout=60)
  assert done.returncode == 0, done.stderr
  table = (tmp_path / "summary.md").read_text()
  assert table.splitlines() == [
      "| stage | figures |", "|---|---|",
      "| create_pretraining_data.py | 1,200 documents -> 12,641 instances (seq 64) |",
      "| run_pretraining.py, L=2 H=128, 1,088-piece vocabulary, 1,500 steps of 64 | held-out "
      "masked-LM accuracy 0.531, next-sentence accuracy 0.775 |",
      "| run_classifier.py (SST-2 layout), 2 epochs | dev accuracy 0.993 |",
      '| export_savedmodel.py + `demo/ask.py "the food was cold ."` | negative (0), p=0.91 |',
      '| export_savedmodel.py + `demo/ask.py "it\'s great"` | positive (1), p=0.80 |']
  lines = done.stdout.splitlines()
  assert table.strip() in done.stdout
  assert f"The demo is done (5 min 12 s). It made, in {tmp_path}/:" in lines
  assert any(line.startswith("  export/ ") for line in lines)
  assert lines[-3:] == ["Try next:", '  bash demo.sh "the food was cold and the waiter was rude ."',
                        f'  .venv/bin/python demo/ask.py --export_dir={tmp_path}/export '
                        '"a sentence" "another one"']
