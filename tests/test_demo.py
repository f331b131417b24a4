"""The demo's data and its client, without the demo's training: the vocabulary covers everyday
English (a user's sentence is mostly whole words, nothing [UNK]), bert_config.json matches it, and
demo/ask.py names the labels and counts the words in pieces and [UNK]."""
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
             "My friends thought the music was beautiful but the story was boring."]


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


def test_ask_names_labels_and_counts_unknown_words(tmp_path):
  spec = importlib.util.spec_from_file_location("ask", os.path.join(REPO, "demo", "ask.py"))
  ask = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(ask)
  assert ask.label_name("1", ["negative", "positive"]) == "positive (1)"
  assert ask.label_name("1", None) == "1"
  assert ask.label_name("entailment", ["a", "b"]) == "entailment"
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "movie", "was", "good",
                              "song", "##s", "."]) + "\n")
  [(words, whole, split, unknown)] = ask.word_coverage(str(vocab), ["The songs was gr8 ."])
  assert (words, whole, split, unknown) == (5, 3, ["song ##s"], ["[UNK]"])
