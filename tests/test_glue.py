"""GLUE processors on every real GLUE file present, features layout, records, and bad input."""
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import records
from bert_tf import tokenization
from bert_tf.data import glue
from bert_tf.data import swag
from bert_tf.errors import BertTfError
from conftest import shared_data

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "is", "hairy", "a", "cat",
         "sat", "on", "mat", ".", "##s", "no", "it", "not"]

# task -> (folder, {split: (count of examples, first text_a prefix, first label)}).
REAL = {
    "cola": ("CoLA", {"train": (8551, "Our friends", "1"), "dev": (1043, "The sailors", "1"),
                      "test": (1063, "Bill whistled", "0")}),
    "sst-2": ("SST-2", {"train": (67349, "hide new", "0"), "dev": (872, "it 's a", "1"),
                        "test": (1821, "uneasy mishmash", "0")}),
    "mrpc": ("MRPC", {"train": (3668, "Amrozi accused", "1"), "dev": (408, "He said", "1"),
                      "test": (1725, "PCCW 's", "0")}),
    "sts-b": ("STS-B", {"train": (5749, "A plane is", 5.0), "dev": (1500, "A man with", 5.0),
                        "test": (1379, "A girl is", 0.0)}),
    "qnli": ("QNLI", {"dev": (5463, "What came", "entailment"),
                      "test": (5463, "What organization", "entailment")}),
    "rte": ("RTE", {"train": (2490, "No Weapons", "not_entailment"),
                    "dev": (277, "Dana Reeve", "not_entailment"),
                    "test": (3000, "Mangla was", "entailment")}),
    "wnli": ("WNLI", {"train": (635, "I stuck", "1"), "dev": (71, "The drain", "0"),
                      "test": (146, "Maude and", "0")}),
}


@pytest.fixture
def tokenizer(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(WORDS) + "\n")
  return tokenization.FullTokenizer(str(vocab), do_lower_case=True)


@pytest.mark.parametrize("task", sorted(REAL))
def test_processors_on_real_glue(task):
  folder, splits = REAL[task]
  data_dir = shared_data("glue", folder)
  processor = glue.get_processor(task)
  for split, (count, prefix, label) in splits.items():
    examples = getattr(processor, f"get_{split}_examples")(data_dir)
    assert len(examples) == count, split
    assert examples[0].text_a.startswith(prefix)
    assert examples[0].label == label
    pair = task not in ("cola", "sst-2")
    assert all(bool(e.text_b) == pair for e in examples[:50])
    if split != "test" and not processor.regression:
      assert {e.label for e in examples} == set(processor.get_labels())


def test_mrpc_matches_original_reader():
  """The original's MrpcProcessor (guid, texts, labels) on the real files, BOM and quotes included."""
  data_dir = shared_data("glue", "MRPC")
  import csv
  with open(os.path.join(data_dir, "dev.tsv"), encoding="utf-8") as f:
    lines = list(csv.reader(f, delimiter="\t", quotechar=None))
  ours = glue.get_processor("MRPC").get_dev_examples(data_dir)
  for i, (line, example) in enumerate(zip(lines[1:], ours), start=1):
    assert (example.guid, example.text_a, example.text_b, example.label) == (
        f"dev-{i}", line[3], line[4], line[0])


def test_features_layout_and_truncation(tokenizer):
  example = glue.InputExample("x", "the dog is hairy .", "no it is not .", "1")
  feature = glue.convert_single_example(0, example, ["0", "1"], 12, tokenizer)
  tokens = tokenizer.convert_ids_to_tokens(feature.input_ids)
  # 5 + 5 tokens cut to 9: the pop goes to b when both are as long.
  assert tokens == ["[CLS]", "the", "dog", "is", "hairy", ".", "[SEP]", "no", "it", "is", "not",
                    "[SEP]"]
  assert feature.segment_ids == [0] * 7 + [1] * 5
  assert feature.input_mask == [1] * 12
  assert feature.label_id == 1
  single = glue.convert_single_example(
      1, glue.InputExample("y", "a cat sat on the mat .", None, "0"), ["0", "1"], 6, tokenizer)
  assert tokenizer.convert_ids_to_tokens(single.input_ids) == [
      "[CLS]", "a", "cat", "sat", "on", "[SEP]"]
  regression = glue.convert_single_example(
      2, glue.InputExample("z", "the cat", "a dog", 3.2), [None], 8, tokenizer)
  assert regression.label_id == pytest.approx(3.2)
  assert regression.input_mask == [1] * 7 + [0]
  assert regression.segment_ids == [0, 0, 0, 0, 1, 1, 1, 0]


def test_records_round_trip(tokenizer, tmp_path):
  examples = [glue.InputExample(str(i), "the dog", "a cat" if i % 2 else None, str(i % 2))
              for i in range(5)]
  path = str(tmp_path / "train.tf_record")
  glue.file_based_convert_examples_to_features(examples, ["0", "1"], 8, tokenizer, path)
  schema = records.classifier_features(8)
  records.check_record_shapes(path, schema)
  parsed = list(tf.data.TFRecordDataset(path).map(records.parse_fn(schema)))
  assert [int(p["label_ids"]) for p in parsed] == [0, 1, 0, 1, 0]
  np.testing.assert_array_equal(parsed[0]["input_ids"][:4],
                                tokenizer.convert_tokens_to_ids(["[CLS]", "the", "dog", "[SEP]"]))
  first = open(path, "rb").read()
  glue.file_based_convert_examples_to_features(examples, ["0", "1"], 8, tokenizer, path)
  assert open(path, "rb").read() == first  # deterministic bytes
  assert sorted(os.listdir(tmp_path)) == ["train.tf_record", "vocab.txt"]  # no temporary left


def _write(path, lines):
  path.write_text("".join(line + "\n" for line in lines))
  return str(path.parent)


def test_bad_input(tmp_path):
  with pytest.raises(BertTfError, match="unknown task 'glue'.*mrpc"):
    glue.get_processor("glue")
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
  data_dir = _write(tmp_path / "train.tsv", [header, "1\t1\t2\ta\tb", "0\t1\t2\ta"])
  with pytest.raises(BertTfError, match=r"train.tsv: line 3 has 4 tab-separated columns, expected 5"):
    glue.get_processor("mrpc").get_train_examples(data_dir)
  _write(tmp_path / "train.tsv", [header, "1\t1\t2\ta\tb", "yes\t1\t2\ta\tb"])
  with pytest.raises(BertTfError, match=r"line 3: label 'yes' is not one of \['0', '1'\]"):
    glue.get_processor("mrpc").get_train_examples(data_dir)
  _write(tmp_path / "train.tsv", [header])
  with pytest.raises(BertTfError, match="train.tsv: no training examples"):
    glue.get_processor("mrpc").get_train_examples(data_dir)
  with pytest.raises(BertTfError, match="dev.tsv: file not found"):
    glue.get_processor("mrpc").get_dev_examples(data_dir)
  stsb_header = "\t".join(["c%d" % i for i in range(10)])
  _write(tmp_path / "train.tsv", [stsb_header, "\t".join(["0"] * 9 + ["high"])])
  with pytest.raises(BertTfError, match="label 'high' is not a number"):
    glue.get_processor("STS-B").get_train_examples(data_dir)


def test_swag_real_sample_and_features(tokenizer):
  path = os.path.join(shared_data("swag"), "allennlp-swag-regular-sample.csv")
  examples = swag.read_swag_examples(path)
  assert len(examples) == 11
  assert examples[0].context == "Students lower their eyes nervously."
  assert examples[0].start_ending == "She" and examples[0].label == 2
  assert examples[0].endings[0] == "pats her shoulder, then saunters toward someone."
  features = swag.convert_example(0, examples[0], 16, tokenizer)
  assert len(features["input_ids"]) == 4 * 16 and features["label_ids"] == [2]


def test_swag_full_format_and_bad_input(tmp_path, tokenizer):
  full = tmp_path / "full.csv"
  full.write_text(",video-id,fold-ind,startphrase,gold-ending,distractor-0,distractor-1,"
                  "distractor-2,distractor-3,gold-source,gold-type,sent1,sent2\n"
                  + "".join(f"{i},v,1,x,gold,d0,d1,d2,d3,gold,g,the dog,a\n" for i in range(20)))
  examples = swag.read_swag_examples(str(full), seed=3)
  assert all(e.endings[e.label] == "gold" and len(e.endings) == 4 for e in examples)
  assert len({e.label for e in examples}) > 1  # the gold position varies with the seed
  assert [e.label for e in swag.read_swag_examples(str(full), seed=3)] == [
      e.label for e in examples]
  bad = tmp_path / "bad.csv"
  bad.write_text("a,b\n1,2\n")
  with pytest.raises(BertTfError, match="not a SWAG csv"):
    swag.read_swag_examples(str(bad))
  bad.write_text("sent1,sent2,ending0,ending1,ending2,ending3,label\nx,y,a,b,c,d,7\n")
  with pytest.raises(BertTfError, match="line 2: label '7'"):
    swag.read_swag_examples(str(bad))
  bad.write_text("sent1,sent2,ending0,ending1,ending2,ending3,label\nx,y,a,b,c\n")
  with pytest.raises(BertTfError, match="line 2 has 5 columns where the header has 7"):
    swag.read_swag_examples(str(bad))


def test_layouts_without_real_files(tmp_path):
  """MNLI (matched and mismatched), QQP and XNLI in their standard layouts, built here."""
  mnli_header = "\t".join(["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                           "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
                           "sentence1", "sentence2"])
  _write(tmp_path / "train.tsv", [mnli_header + "\tlabel1\tgold_label",
                                  "7\tp\tq\tg\tb\tb\tp\tp\tA cat .\tA dog .\tneutral\tneutral"])
  dev = [mnli_header + "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label",
         "3\tp\tq\tg\tb\tb\tp\tp\tHe ran .\tHe moved .\te\te\te\te\te\tentailment"]
  _write(tmp_path / "dev_matched.tsv", dev)
  _write(tmp_path / "dev_mismatched.tsv", dev[:1] + [dev[1].replace("He", "She")])
  _write(tmp_path / "test_matched.tsv", [mnli_header, "0\tp\tq\tg\tb\tb\tp\tp\tX .\tY ."])
  mnli = glue.get_processor("MNLI")
  train = mnli.get_train_examples(str(tmp_path))[0]
  assert (train.guid, train.text_a, train.text_b, train.label) == (
      "train-7", "A cat .", "A dog .", "neutral")
  assert mnli.get_dev_examples(str(tmp_path))[0].label == "entailment"
  assert glue.get_processor("mnli-mm").get_dev_examples(str(tmp_path))[0].text_a == "She ran ."
  assert mnli.get_test_examples(str(tmp_path))[0].label == "contradiction"

  qqp = tmp_path / "qqp"
  qqp.mkdir()
  _write(qqp / "train.tsv", ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
                             "5\t1\t2\tWhy?\tHow?\t1"])
  _write(qqp / "test.tsv", ["id\tquestion1\tquestion2", "0\tWhat?\tWho?"])
  example = glue.get_processor("qqp").get_train_examples(str(qqp))[0]
  assert (example.text_a, example.text_b, example.label) == ("Why?", "How?", "1")
  assert glue.get_processor("qqp").get_test_examples(str(qqp))[0].text_b == "Who?"

  xnli = tmp_path / "xnli"
  (xnli / "multinli").mkdir(parents=True)
  _write(xnli / "multinli" / "multinli.train.zh.tsv", ["premise\thypo\tlabel",
                                                      "\u4f60\u597d\t\u518d\u89c1\tcontradictory"])
  _write(xnli / "xnli.dev.tsv", ["language\tgold_label\ta\tb\tc\td\tsentence1\tsentence2",
                                 "en\tneutral\t\t\t\t\tHi\tBye",
                                 "zh\tentailment\t\t\t\t\t\u4f60\t\u6211"])
  processor = glue.get_processor("xnli")
  assert processor.get_train_examples(str(xnli))[0].label == "contradiction"
  dev_examples = processor.get_dev_examples(str(xnli))
  assert [(e.guid, e.text_a, e.label) for e in dev_examples] == [("dev-2", "\u4f60", "entailment")]
