# coding=utf-8
"""The tokenizers' character tables, built over all code points at once, against the plain
per-code-point loops they replace (each loop takes a few seconds)."""
import itertools
import sys
import unicodedata

import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.text import fast_tokenization
from bert_tf.text import tokenization


def reference_char_classes():
  classes = {"removed": [], "whitespace": [], "other_space": [], "punctuation": [], "mark": []}
  (skip_a, end_a), (skip_b, _) = tokenization.CLASSLESS_RANGES
  for cp in itertools.chain(range(skip_a), range(end_a + 1, skip_b)):
    char = chr(cp)
    category = unicodedata.category(char)
    if cp == 0 or cp == 0xFFFD or (category in ("Cc", "Cf") and char not in "\t\n\r"):
      classes["removed"].append(cp)
    elif char in " \t\n\r" or category == "Zs":
      classes["whitespace"].append(cp)
    elif char.isspace():
      classes["other_space"].append(cp)
    if tokenization._is_punctuation(char):  # pylint: disable=protected-access
      classes["punctuation"].append(cp)
    if category == "Mn":
      classes["mark"].append(cp)
  return {name: tuple(cps) for name, cps in classes.items()}


def reference_fallback_characters():
  codepoints = [cp for cp in range(1, sys.maxunicode + 1) if not 0xD800 <= cp <= 0xDFFF]
  chars = [chr(cp) for cp in codepoints]
  lowered = tf.strings.lower(chars, encoding="utf-8").numpy()
  decomposed = tf_text.normalize_utf8(chars, "NFD").numpy()
  return tuple(
      cp for cp, char, tf_lower, tf_nfd in zip(codepoints, chars, lowered, decomposed)
      if (char.lower() != tf_lower.decode("utf-8") or
          unicodedata.normalize("NFD", char) != tf_nfd.decode("utf-8")))


def reference_sigma_classes():
  """The class of every code point, as _sigma_context_runs's runs give it: the per-character
  definition (_sigma_class) applied one code point at a time."""
  sigma_class = fast_tokenization._sigma_class  # pylint: disable=protected-access
  return [0 if 0xD800 <= cp <= 0xDFFF else sigma_class(chr(cp))
          for cp in range(sys.maxunicode + 1)]


def test_char_classes_match_a_loop_over_every_code_point():
  assert tokenization.char_classes() == reference_char_classes()


def test_fallback_characters_match_a_loop_over_every_code_point():
  unsafe = fast_tokenization._fallback_characters()  # pylint: disable=protected-access
  assert unsafe == reference_fallback_characters()
  assert 0x10570 in unsafe  # a Vithkuqi capital (Unicode 14) that TensorFlow does not lower-case


def test_sigma_context_runs_match_a_loop_over_every_code_point():
  starts, classes = fast_tokenization._sigma_context_runs()  # pylint: disable=protected-access
  assert starts[0] == 0 and list(starts) == sorted(set(starts))
  assert all(a != b for a, b in zip(classes, classes[1:]))  # runs, not repeated classes
  ends = list(starts[1:]) + [sys.maxunicode + 1]
  expanded = [cls for start, end, cls in zip(starts, ends, classes) for _ in range(end - start)]
  assert expanded == reference_sigma_classes()


def test_parts_differ_compares_each_part_whole():
  # pylint: disable=protected-access
  ours = fast_tokenization._parts("a\nbc\nd\nxyz\n", 4)
  theirs = fast_tokenization._parts("a\nbd\nde\nxyz\n", 4)
  assert fast_tokenization._parts_differ(ours, theirs).tolist() == [False, True, True, False]
