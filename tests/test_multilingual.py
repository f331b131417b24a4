# coding=utf-8
"""Multilingual and Chinese text (docs/multilingual.md): both our tokenizers against the original's
(bert-tensorflow 1.0.4) on a small multilingual vocabulary, cased and uncased, and the casing check
of Google's multilingual and Chinese model names."""
import pytest

from bert_tf.errors import BertTfError
from bert_tf.text import fast_tokenization
from bert_tf.text import tokenization

# Pieces of several scripts, cased and not, with and without their accents, so that lower-casing,
# accent stripping, the CJK split and WordPiece all decide what comes out.
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "The", "cafe", "café", "Café",
         "straße", "über", "uber", "Über", "##s", "##en", "##e", "na", "##ive", "naïve", "москва",
         "Москва", "αθήνα", "αθηνα", "Αθήνα", "中", "文", "国", "日", "本", "語", "の", "テ", "##キ",
         "##ス", "##ト", "한", "##국", "ᄒ", "##ᅡ", "##ᆫ", "##ᄀ", "##ᅮ", "##ᆨ", "ไทย", "مرحبا",
         "नमस्ते", "नमस", "##्", "##त", "##े", ",", ".", "。", "!", "?", "-", "'"]
TEXTS = [
    "The café in Straße über naïve, MOSKVA Москва.",
    "Αθήνα αθήνα ΑΘΉΝΑ; Über uber ÜBER!",
    "中文和日本語のテキスト。한국 한국어",
    "ไทย مرحبا नमस्ते — l'été, Ⅻ ﬁ Ｆｕｌｌ",
    "\u00e9\u0301 e\u0301 cafe\u0301 \u200b\u00ad zero-width\u2028line",
    "Straßen cafés naïvete 中国 国中",
]


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("multilingual") / "vocab.txt"
  path.write_text("".join(token + "\n" for token in VOCAB), encoding="utf-8")
  return str(path)


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_both_tokenizers_are_the_originals_on_multilingual_text(vocab_file, do_lower_case):
  from absl import flags
  import bert.tokenization as original  # bert-tensorflow==1.0.4, the test oracle
  flags.FLAGS.mark_as_parsed()
  oracle = original.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  expected = [oracle.tokenize(text) for text in TEXTS]
  full = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  assert [full.tokenize(text) for text in TEXTS] == expected
  fast = fast_tokenization.FastTokenizer(vocab_file, do_lower_case=do_lower_case)
  assert fast.tokenize(TEXTS) == expected
  assert fast.tokenize_to_ids(TEXTS) == [oracle.convert_tokens_to_ids(t) for t in expected]
  # The rules docs/multilingual.md states, as the original applies them: a token per CJK
  # ideograph (和 is not in the vocabulary), kana kept in words (のテキスト: one, [UNK]).
  chinese = expected[2]
  assert chinese[:8] == ["中", "文", "[UNK]", "日", "本", "語", "[UNK]", "。"]
  if do_lower_case:  # lower-cased, combining marks dropped: accents, Hindi's virama, Hangul's NFD
    assert expected[0][:2] == ["the", "cafe"] and expected[3][2:4] == ["नमस", "##त"]
    assert chinese[8:14] == ["ᄒ", "##ᅡ", "##ᆫ", "##ᄀ", "##ᅮ", "##ᆨ"]
  else:  # case and marks kept
    assert expected[0][:2] == ["The", "café"] and expected[3][2] == "नमस्ते"
    assert chinese[8:10] == ["한", "##국"]


@pytest.mark.parametrize("model,do_lower_case", [
    ("multi_cased_L-12_H-768_A-12", True), ("multilingual_L-12_H-768_A-12", False),
    ("chinese_L-12_H-768_A-12", False)])
def test_the_casing_of_googles_multilingual_and_chinese_models_is_checked(model, do_lower_case):
  with pytest.raises(BertTfError, match=f"--do_lower_case={not do_lower_case}"):
    tokenization.validate_case_matches_checkpoint(do_lower_case, f"/m/{model}/bert_model.ckpt")
  tokenization.validate_case_matches_checkpoint(not do_lower_case, f"/m/{model}/bert_model.ckpt")
