"""create_vocab.py and bert_tf.text.vocab_learning: the layout of special tokens, words counted exactly
as BasicTokenizer splits them (streamed, in bounded memory), determinism, held-out text tokenized
with few [UNK], --min_count, --reserved_tokens, errors, and text -> create_vocab ->
create_pretraining_data -> run_pretraining."""
import collections
import glob
import json
import os
import re

import pytest

from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.text import tokenization
from bert_tf.text import vocab_learning
from support.script_runner import run_script

TEXT = """The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away!
Café society: naïve résumés, déjà vu. 北京欢迎你 — unicode\u200b zero-width and\tTABS.

Second document: foxes, dogs and cats. Running, jumping, sleeping dogs lie.
"""


def values(tmp_path, **overrides):
  defaults = dict(input_file=str(tmp_path / "a.txt"), output_file=str(tmp_path / "vocab.txt"),
                  overwrite=False, vocab_size=200, do_lower_case=True, min_count=1,
                  reserved_tokens=[], num_unused=99, max_unique_chars=1000,
                  max_words_in_memory=5_000_000, learner="bpe", progress_seconds=None)
  return vocab_learning.VocabOptions(**dict(defaults, **overrides))


def write_text(tmp_path, text=TEXT, name="a.txt"):
  path = tmp_path / name
  path.write_text(text, encoding="utf-8")
  return str(path)


def read_vocab(path):
  with open(path, encoding="utf-8") as f:
    return f.read().split("\n")[:-1]


def test_layout_is_the_originals(shared):
  with open(shared("vocab", "bert-base-uncased-vocab.txt"), encoding="utf-8") as f:
    original = f.read().split("\n")
  assert vocab_learning.special_tokens(994) == original[:999]
  assert vocab_learning.special_tokens(99) == original[:104]
  layout = vocab_learning.special_tokens(3, ["<e1>", "<e2>"])
  assert layout == ["[PAD]", "[unused0]", "[unused1]", "[unused2]", "[UNK]", "[CLS]", "[SEP]",
                    "[MASK]", "<e1>", "<e2>"]
  assert vocab_learning.special_tokens(0)[:2] == ["[PAD]", "[UNK]"]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_words_are_basic_tokenizers_across_blocks(monkeypatch, tmp_path, do_lower_case):
  path = write_text(tmp_path, TEXT * 3 + "a\u0000b\x85c \u2028 end")
  monkeypatch.setattr(fileio, "CHUNK_BYTES", 16)  # many blocks: words cut at block ends
  counter = vocab_learning.count_words([path], do_lower_case, 5_000_000, None)
  with open(path, encoding="utf-8") as f:
    expected = collections.Counter(
        tokenization.BasicTokenizer(do_lower_case=do_lower_case).tokenize(f.read()))
  assert counter.counts == expected
  assert counter.total == sum(expected.values())


def test_word_counts_stay_bounded_and_frequent_words_exact():
  counter = vocab_learning.WordCounter(do_lower_case=True, max_words=50)
  for i in range(40):
    counter.add_text(" ".join(["common"] * 3 + [f"rare{i}x{j}" for j in range(10)]))
    assert len(counter.counts) <= 50
  assert counter.counts["common"] == 120
  assert counter.prunings > 0 and counter.undercount >= 1


def test_learned_vocabulary_is_deterministic_and_exact_in_size(tmp_path):
  write_text(tmp_path, TEXT * 5)
  vocab_learning.run(values(tmp_path))
  first = read_vocab(tmp_path / "vocab.txt")
  vocab_learning.run(values(tmp_path, overwrite=True))
  assert read_vocab(tmp_path / "vocab.txt") == first
  assert len(first) == 200 and len(set(first)) == 200
  assert first[:104] == vocab_learning.special_tokens(99)
  learned = first[104:]
  assert "the" in learned and "##e" in learned and "!" in learned
  assert "The" not in learned and "é" not in "".join(learned)  # lower-cased, accents stripped


def test_cased_keeps_case_and_accents(tmp_path):
  write_text(tmp_path, TEXT * 5)
  vocab_learning.run(values(tmp_path, do_lower_case=False, vocab_size=400))
  learned = read_vocab(tmp_path / "vocab.txt")[104:]
  assert "The" in learned and "é" in learned


def test_held_out_book_has_few_unknowns(tmp_path, shared):
  books = sorted(glob.glob(os.path.join(shared("corpus", "gutenberg"), "*.txt")))
  train = [b for b in books if "alice" in b or "tom_sawyer" in b]
  held_out = next(b for b in books if "frankenstein" in b)
  vocab_learning.run(values(tmp_path, input_file=",".join(train), vocab_size=3000))
  tokenizer = tokenization.FullTokenizer(str(tmp_path / "vocab.txt"), do_lower_case=True)
  with open(held_out, encoding="utf-8") as f:
    text = f.read()[:200_000]
  words = tokenizer.basic_tokenizer.tokenize(text)
  pieces = tokenizer.tokenize(text)
  assert pieces.count("[UNK]") / len(words) < 0.001
  assert len(pieces) / len(words) < 1.5
  # The pieces are used as learned: frequent words are whole.
  assert tokenizer.tokenize("The house was there") == ["the", "house", "was", "there"]


def test_tensorflow_text_learner(tmp_path):
  write_text(tmp_path, TEXT * 5)
  vocab_learning.run(values(tmp_path, learner="tensorflow_text", vocab_size=180))
  vocab = read_vocab(tmp_path / "vocab.txt")
  assert len(vocab) == 180 and vocab[:104] == vocab_learning.special_tokens(99)
  tokenizer = tokenization.FullTokenizer(str(tmp_path / "vocab.txt"))
  assert "[UNK]" not in tokenizer.tokenize(TEXT)


def test_min_count_drops_rare_words(tmp_path):
  write_text(tmp_path, "common words here " * 5 + "жуk")
  vocab_learning.run(values(tmp_path, min_count=1, vocab_size=150))
  assert "ж" in read_vocab(tmp_path / "vocab.txt")
  vocab_learning.run(values(tmp_path, min_count=2, vocab_size=150, overwrite=True))
  vocab = read_vocab(tmp_path / "vocab.txt")
  assert "ж" not in vocab and "common" in vocab


def test_reserved_tokens_follow_the_unused_slots_once(tmp_path):
  write_text(tmp_path, TEXT * 5)
  reserved = ["<e1>", "the", "[E2]"]
  vocab_learning.run(values(tmp_path, reserved_tokens=reserved, num_unused=5, vocab_size=150))
  vocab = read_vocab(tmp_path / "vocab.txt")
  assert vocab[:13] == vocab_learning.special_tokens(5) + reserved
  assert vocab.count("the") == 1 and len(vocab) == len(set(vocab)) == 150


def test_corpus_smaller_than_the_size_gives_what_it_has(tmp_path):
  write_text(tmp_path, "abc abd")
  vocab_learning.run(values(tmp_path, vocab_size=1000))
  vocab = read_vocab(tmp_path / "vocab.txt")
  assert 104 < len(vocab) < 1000 and {"a", "##b", "##c", "##d"} <= set(vocab)


@pytest.mark.parametrize("overrides, message", [
    (dict(vocab_size=104), "--vocab_size: 104 leaves no room"),
    (dict(vocab_size=110), "--vocab_size: too small for the corpus's"),
    (dict(reserved_tokens=["a b"]), "--reserved_tokens: 'a b' is empty or holds whitespace"),
    (dict(reserved_tokens=["[CLS]"]), "--reserved_tokens: '[CLS]' is already"),
    (dict(reserved_tokens=["x", "x"]), "--reserved_tokens: 'x' is already"),
    (dict(min_count=0), "--min_count: expected an integer of at least 1"),
    (dict(min_count=100), "--input_file: no word is seen at least --min_count=100 times"),
    (dict(input_file="/nonexistent/*.txt"), "--input_file: '/nonexistent/*.txt' matches no file"),
])
def test_bad_input_is_an_error_and_writes_nothing(tmp_path, overrides, message):
  write_text(tmp_path)
  with pytest.raises(BertTfError, match=re.escape(message)):
    vocab_learning.run(values(tmp_path, **overrides))
  assert sorted(os.listdir(tmp_path)) == ["a.txt"]


def test_existing_output_is_kept_without_overwrite(tmp_path):
  write_text(tmp_path)
  (tmp_path / "vocab.txt").write_text("mine\n")
  with pytest.raises(BertTfError, match="exists; choose another path or pass --overwrite"):
    vocab_learning.run(values(tmp_path))
  assert (tmp_path / "vocab.txt").read_text() == "mine\n"
  vocab_learning.run(values(tmp_path, overwrite=True, vocab_size=250))
  assert len(read_vocab(tmp_path / "vocab.txt")) == 250


def test_text_to_vocab_to_records_to_pretraining(tmp_path, shared):
  """The end-to-end path of the README, tiny: create_vocab -> create_pretraining_data ->
  run_pretraining, and a one-line error from the script."""
  text = tmp_path / "text.txt"
  with open(shared("corpus", "gutenberg", "pg11-alice_in_wonderland.txt"), encoding="utf-8") as f:
    text.write_text("\n".join(f.read().split("\n")[:1500]), encoding="utf-8")
  vocab = str(tmp_path / "vocab.txt")
  result = run_script("create_vocab.py", f"--input_file={text}", f"--output_file={vocab}",
                      "--vocab_size=1000", "--num_unused=10",
                      env=dict(os.environ, PYTHONHASHSEED="0"), timeout=240)
  assert result.returncode == 0, result.stderr
  assert "learned pieces = 985" in result.stdout + result.stderr
  result = run_script("create_vocab.py", f"--input_file={text}", f"--output_file={vocab}")
  assert result.returncode == 1 and result.stderr.strip().splitlines()[-1] == (
      f"error: --output_file: {vocab} exists; choose another path or pass --overwrite")
  again = str(tmp_path / "again.txt")  # the same file whatever Python's string hashing
  result = run_script("create_vocab.py", f"--input_file={text}", f"--output_file={again}",
                      "--vocab_size=1000", "--num_unused=10",
                      env=dict(os.environ, PYTHONHASHSEED="12345"), timeout=240)
  assert result.returncode == 0, result.stderr
  assert read_vocab(again) == read_vocab(vocab)

  records = str(tmp_path / "records.tfrecord")
  result = run_script("create_pretraining_data.py", f"--input_file={text}",
                      f"--output_file={records}", f"--vocab_file={vocab}", "--max_seq_length=32",
                      "--max_predictions_per_seq=5", "--dupe_factor=1")
  assert result.returncode == 0, result.stderr
  config = tmp_path / "bert_config.json"
  config.write_text(json.dumps({"vocab_size": 1000, "hidden_size": 32, "num_hidden_layers": 1,
                                "num_attention_heads": 2, "intermediate_size": 37,
                                "max_position_embeddings": 32}))
  output_dir = str(tmp_path / "pretraining")
  result = run_script("run_pretraining.py", f"--input_file={records}",
                      f"--bert_config_file={config}", f"--output_dir={output_dir}",
                      f"--vocab_file={vocab}", "--do_train", "--max_seq_length=32",
                      "--max_predictions_per_seq=5", "--train_batch_size=8",
                      "--num_train_steps=3", "--num_warmup_steps=1", "--log_steps=1")
  assert result.returncode == 0, result.stderr
  assert os.path.exists(os.path.join(output_dir, "vocab.txt"))
  assert glob.glob(os.path.join(output_dir, "model.ckpt-3*"))
