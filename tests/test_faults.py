"""Bad input and faults thrown at every script: for each, the exit status, the one `error:` line,
no traceback, and what is on disk (and in the process table) afterwards.

One tiny world is made once (a vocabulary, configs, MRPC-format data, a corpus, pretraining
records, a fine-tuned classifier and a pre-trained model); the cases then run as subprocesses, two
at a time. Kills (SIGTERM, SIGKILL) of create_pretraining_data's workers and of a training run
are separate tests.
"""
import concurrent.futures
import functools
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from support.paths import REPO
from support.script_runner import run_script
from support.started_scripts import start_script
from support import faults
from support.faults import alive
from support.faults import write_json

WORDS = ["the", "dog", "is", "hairy", "cat", "sat", "on", "a", "mat", "it", "not", "jack", "##son",
         "##ville", "big", "red", "ran", "far", "away", "home", "and", "then", "slept", "all",
         "day", "long", "with", "his", "friend", "who", "was", "small"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?"] + WORDS
CONFIG = {"vocab_size": len(VOCAB), "hidden_size": 16, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
          "max_position_embeddings": 64, "type_vocab_size": 2, "initializer_range": 0.02}
ENV = dict(os.environ)


def run(script, *args, timeout=300):
  return run_script(script, *args, timeout=timeout)


# MRPC-format data of this world's words (16 rows; a case's own with dev_label).
mrpc = functools.partial(faults.mrpc, words=WORDS, rows=16)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  root = tmp_path_factory.mktemp("faults")
  w = faults.make_world(root, VOCAB, CONFIG, WORDS, mrpc_rows=16)
  w["config4"] = write_json(root / "bert_config4.json", dict(CONFIG, num_hidden_layers=4))
  rng = np.random.RandomState(1)
  (root / "corpus.txt").write_text("\n\n".join(
      "\n".join(faults.sentence(rng, 3 + i % 6, WORDS) for i in range(8)) for _ in range(30))
      + "\n")
  w["records"], w["pre"], w["cls"] = (str(root / name)
                                      for name in ("pre.tfrecord", "pre_out", "cls_out"))
  pretrain = [  # in turn: the pretraining run reads the records
      ("create_pretraining_data.py", [
          f"--input_file={root / 'corpus.txt'}", f"--output_file={w['records']}",
          f"--vocab_file={w['vocab']}", "--max_seq_length=32", "--max_predictions_per_seq=5",
          "--dupe_factor=2"]),
      ("run_pretraining.py", [
          f"--input_file={w['records']}", f"--output_dir={w['pre']}",
          f"--bert_config_file={w['config']}", "--do_train", "--max_seq_length=32",
          "--max_predictions_per_seq=5", "--train_batch_size=4", "--num_train_steps=2",
          "--num_warmup_steps=1", "--save_checkpoints_steps=1", "--export_tf1_checkpoint"])]
  finetune = [("run_classifier.py", [*classifier_flags(w), "--do_train", f"--output_dir={w['cls']}",
                                     "--save_checkpoints_steps=2"])]
  with concurrent.futures.ThreadPoolExecutor(2) as pool:  # the classifier beside the two
    list(pool.map(lambda runs: faults.run_all(runs, parallel=1), (pretrain, finetune)))
  return w


def classifier_flags(w, data_dir=None, config=None):
  return ["--task_name=MRPC", f"--data_dir={data_dir or w['mrpc']}", f"--vocab_file={w['vocab']}",
          f"--bert_config_file={config or w['config']}", "--max_seq_length=32",
          "--train_batch_size=4", "--num_train_epochs=1"]


def pretraining_flags(w, input_file, output_dir):
  return [f"--input_file={input_file}", f"--output_dir={output_dir}",
          f"--bert_config_file={w['config']}", "--max_seq_length=32",
          "--max_predictions_per_seq=5", "--train_batch_size=4", "--num_train_steps=2",
          "--num_warmup_steps=1"]


def cpd_flags(w, output_file, input_file=None):
  return [f"--input_file={input_file or w['root'] / 'corpus.txt'}", f"--output_file={output_file}",
          f"--vocab_file={w['vocab']}", "--max_seq_length=32", "--max_predictions_per_seq=5",
          "--dupe_factor=1"]


def squad_file(path, ids):
  qas = [{"id": i, "question": "is the dog hairy ?", "answers": [], "is_impossible": False}
         for i in ids]
  return write_json(path, {"data": [{"paragraphs": [{"context": "the dog is hairy .",
                                                      "qas": qas}]}]})


def files_under(path):
  return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path)
                for f in fs)


# Each case: script, flags (a function of the world and the case's own directory), the pattern
# of the one error line, and optionally a check of the disk afterwards (a function of the world,
# the case directory). Exit status 1 unless the case says otherwise.
CASES = {
    # --- create_pretraining_data.py ------------------------------------------------------------
    "cpd_output_is_a_directory": ("create_pretraining_data.py",
                                  lambda w, d: (d.mkdir(), cpd_flags(w, d))[-1],
                                  r"--output_file: .* is a directory",
                                  lambda w, d: files_under(d) == []),
    "cpd_input_matches_nothing": ("create_pretraining_data.py",
                                  lambda w, d: cpd_flags(w, d / "o.tfrecord", d / "nope*.txt"),
                                  r"--input_file: .*nope\*\.txt' matches no file", None),
    "cpd_vocab_missing": ("create_pretraining_data.py",
                          lambda w, d: cpd_flags(w, d / "o.tfrecord") + [f"--vocab_file={d}/v"],
                          r"error: .*/v", None),
    "cpd_max_seq_length_too_small": ("create_pretraining_data.py",
                                     lambda w, d: cpd_flags(w, d / "o") + ["--max_seq_length=2"],
                                     r"--max_seq_length: expected an integer of at least 5 "
                                     r"\(\[CLS\] A \[SEP\] B \[SEP\]\), got 2", None),
    "cpd_dupe_factor_zero": ("create_pretraining_data.py",
                             lambda w, d: cpd_flags(w, d / "o") + ["--dupe_factor=0"],
                             r"--dupe_factor: expected an integer of at least 1, got 0", None),
    "cpd_masked_lm_prob_above_one": ("create_pretraining_data.py",
                                     lambda w, d: cpd_flags(w, d / "o") + ["--masked_lm_prob=2"],
                                     r"--masked_lm_prob: expected a fraction between 0 and 1, got 2", None),
    "cpd_mask_probs_do_not_sum_to_one": (
        "create_pretraining_data.py", lambda w, d: cpd_flags(w, d / "o") + ["--mask_prob_mask=0.5"],
        r"--mask_prob_mask/--mask_prob_keep/--mask_prob_random: expected fractions between 0 and "
        r"1 that sum to 1, got 0.5 \+ 0.1 \+ 0.1 = 0.7",
        None),
    "cpd_blank_input": ("create_pretraining_data.py",
                        lambda w, d: (d.mkdir(), (d / "b.txt").write_text("\n \n\t\n"),
                                      cpd_flags(w, d / "o", d / "b.txt"))[-1],
                        r"--input_file: no text in", lambda w, d: files_under(d) == ["b.txt"]),
    # --- run_classifier.py: impossible flag values ---------------------------------------------
    "cls_train_batch_size_zero": ("run_classifier.py", lambda w, d: classifier_flags(w) + [
        "--do_train", f"--output_dir={d}", "--train_batch_size=0"],
        r"--train_batch_size: expected an integer of at least 1, got 0",
        lambda w, d: not os.path.exists(d)),
    "cls_negative_learning_rate": ("run_classifier.py", lambda w, d: classifier_flags(w) + [
        "--do_train", f"--output_dir={d}", "--learning_rate=-2e-5"],
        r"--learning_rate: expected a number above 0, got -2e-05", None),
    "cls_zero_epochs": ("run_classifier.py", lambda w, d: classifier_flags(w) + [
        "--do_train", f"--output_dir={d}", "--num_train_epochs=0"],
        r"--num_train_epochs: expected a number above 0", None),
    "cls_warmup_above_one": ("run_classifier.py", lambda w, d: classifier_flags(w) + [
        "--do_train", f"--output_dir={d}", "--warmup_proportion=1.5"],
        r"--warmup_proportion: expected a fraction between 0 and 1", None),
    "cls_seq_longer_than_positions": ("run_classifier.py", lambda w, d: classifier_flags(w) + [
        "--do_train", f"--output_dir={d}", "--max_seq_length=100"],
        r"--max_seq_length: cannot use sequence length 100 .* up to sequence length 64", None),
    "cls_no_phase": ("run_classifier.py", lambda w, d: classifier_flags(w) + [f"--output_dir={d}"],
                     r"--do_train/--do_eval/--do_predict: at least one must be True", None),
    "cls_unknown_task": ("run_classifier.py", lambda w, d: classifier_flags(w)[1:] + [
        "--task_name=nope", "--do_train", f"--output_dir={d}"], r"--task_name: .*nope", None),
    # --- run_classifier.py: bad files -----------------------------------------------------------
    "cls_train_file_missing": ("run_classifier.py", lambda w, d: classifier_flags(
        w, data_dir=d) + ["--do_train", f"--output_dir={d}/out"], r"train\.tsv: file not found",
        None),
    "cls_row_with_missing_column": ("run_classifier.py", lambda w, d: (
        shutil.copytree(w["mrpc"], d),
        (d / "train.tsv").write_text((d / "train.tsv").read_text() + "1\t2\t3\tonly a\n"),
        classifier_flags(w, data_dir=d) + ["--do_train", f"--output_dir={d}/out"])[-1],
        r"train\.tsv: line 18 has 4 tab-separated columns, expected 5", None),
    "cls_dev_label_outside_labels_before_training": (
        "run_classifier.py", lambda w, d: classifier_flags(w, data_dir=mrpc(d, dev_label=7)) + [
            "--do_train", "--do_eval", f"--output_dir={d}/out"],
        r"dev\.tsv: line 5: label '7' is not one of \['0', '1'\]",
        lambda w, d: not [f for f in files_under(d / "out") if "ckpt" in f]),
    "cls_config_not_json": ("run_classifier.py", lambda w, d: (
        d.mkdir(), (d / "c.json").write_text("{nope"),
        classifier_flags(w, config=d / "c.json") + ["--do_train", f"--output_dir={d}/o"])[-1],
        r"c\.json", None),
    "cls_config_missing_field": ("run_classifier.py", lambda w, d: (
        d.mkdir(), classifier_flags(w, config=write_json(
            d / "c.json", {k: v for k, v in CONFIG.items() if k != "hidden_size"})) + [
            "--do_train", f"--output_dir={d}/o"])[-1], r"c\.json.*hidden_size", None),
    "cls_config_unknown_activation": ("run_classifier.py", lambda w, d: (
        d.mkdir(), classifier_flags(w, config=write_json(d / "c.json", dict(
            CONFIG, hidden_act="gelu_fast"))) + ["--do_train", f"--output_dir={d}/o"])[-1],
        r"hidden_act 'gelu_fast' is not one of", None),
    "cls_vocab_larger_than_model": ("run_classifier.py", lambda w, d: (
        d.mkdir(), classifier_flags(w, config=write_json(d / "c.json", dict(
            CONFIG, vocab_size=10))) + ["--do_train", f"--output_dir={d}/o"])[-1],
        r"--vocab_file: .* has 40 tokens but the model's vocab_size is 10", None),
    "cls_output_dir_is_a_file": ("run_classifier.py", lambda w, d: (
        d.mkdir(), (d / "f").write_text("mine"),
        classifier_flags(w) + ["--do_train", f"--output_dir={d}/f"])[-1], r"error: .*/f",
        lambda w, d: (d / "f").read_text() == "mine"),
    "cls_eval_with_nothing_to_evaluate": ("run_classifier.py", lambda w, d: classifier_flags(w) + [
        "--do_eval", f"--output_dir={d}"],
        r"--output_dir: .* holds no checkpoint and no --init_checkpoint was given", None),
    "cls_init_checkpoint_missing": ("run_classifier.py", lambda w, d: classifier_flags(w) + [
        "--do_train", f"--output_dir={d}", f"--init_checkpoint={d}/nothing"],
        r"--init_checkpoint|nothing", None),
    "cls_init_checkpoint_of_fewer_layers": ("run_classifier.py", lambda w, d: classifier_flags(
        w, config=w["config4"]) + ["--do_train", f"--output_dir={d}",
                                   f"--init_checkpoint={w['pre']}/bert_model.ckpt"],
        r"lacks 32 of the encoder's variables \(e\.g\. bert/encoder/layer_2/", None),
    "cls_predict_from_pretrained_only": ("run_classifier.py", lambda w, d: classifier_flags(w) + [
        "--do_predict", f"--output_dir={d}", f"--init_checkpoint={w['pre']}/bert_model.ckpt"],
        r"lacks 2 of the variables this model predicts with \(e\.g\. output_weights",
        lambda w, d: not os.path.exists(d / "test_results.tsv")),
    "cls_head_for_other_label_count": ("run_classifier.py", lambda w, d: (
        d.mkdir(), (d / "test.tsv").write_text("".join(
            f"{i}\tg\tf\ty\ts\ts\ts\tthe dog {i}\tthe cat\n" for i in range(5))),
        classifier_flags(w, data_dir=d)[1:] + [
            "--task_name=sts-b", "--do_predict", f"--output_dir={d}/o",
            f"--init_checkpoint={w['cls']}"])[-1],
        r"output_weights has shape \[2, 16\] in the checkpoint but \[1, 16\] .* another task or "
        r"number of labels", lambda w, d: not os.path.exists(d / "o" / "test_results.tsv")),
    "cls_resume_with_other_config": ("run_classifier.py", lambda w, d: (
        shutil.copytree(w["cls"], d),
        classifier_flags(w, config=write_json(d / "c.json", dict(CONFIG, intermediate_size=24))) +
        ["--do_train", f"--output_dir={d}", "--num_train_epochs=3"])[-1],
        r"--bert_config_file: .* holds checkpoints of a model with another config \(differs in "
        r"intermediate_size\)", None),
    # A newest checkpoint cut short is set aside with a warning, the one before resumed.
    "cls_resume_from_truncated_checkpoint": ("run_classifier.py", lambda w, d: (
        shutil.copytree(w["cls"], d), [_truncate(p) for p in (d).glob("model.ckpt-4.data-*")],
        classifier_flags(w) + ["--do_train", f"--output_dir={d}", "--num_train_epochs=3"])[-1],
        r"model\.ckpt-4 is damaged \(\.data-00000-of-00001 is cut short \([\d,]+ of [\d,]+ "
        r"bytes\)\): skipped, going on from .*/model\.ckpt-2", 0),
    "cls_data_dir_is_a_file": ("run_classifier.py", lambda w, d: (
        d.mkdir(), (d / "train.tsv").write_text("mine"),
        classifier_flags(w, data_dir=d / "train.tsv") + ["--do_train", f"--output_dir={d}/o"])[-1],
        r"--data_dir: .*/train\.tsv is a file, not a directory \(expected the directory",
        lambda w, d: files_under(d) == ["train.tsv"]),
    # --- every split checked before training: empty or header-only files ---------------------
    "cls_dev_header_only_named_before_training": ("run_classifier.py", lambda w, d: (
        shutil.copytree(w["mrpc"], d / "data"),
        (d / "data" / "dev.tsv").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"),
        classifier_flags(w, data_dir=d / "data") + ["--do_train", "--do_eval",
                                                    f"--output_dir={d}/out"])[-1],
        r"dev\.tsv: no example in the dev split \(the file is only its header\)",
        lambda w, d: not os.path.exists(d / "out")),
    "cls_empty_test_file": ("run_classifier.py", lambda w, d: (
        shutil.copytree(w["mrpc"], d / "data"), (d / "data" / "test.tsv").write_text(""),
        classifier_flags(w, data_dir=d / "data") + [
            "--do_predict", f"--output_dir={d}/out", f"--init_checkpoint={w['cls']}"])[-1],
        r"test\.tsv: no example in the test split \(the file is empty\)",
        lambda w, d: not os.path.exists(d / "out")),
    "cls_train_header_only": ("run_classifier.py", lambda w, d: (
        shutil.copytree(w["mrpc"], d / "data"),
        (d / "data" / "train.tsv").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"),
        classifier_flags(w, data_dir=d / "data") + ["--do_train", f"--output_dir={d}/out"])[-1],
        r"train\.tsv: no example in the train split \(the file is only its header\)",
        lambda w, d: not os.path.exists(d / "out")),
    "ner_empty_dev_file": ("run_ner.py", lambda w, d: (
        d.mkdir(), (d / "train.txt").write_text("the O\ndog B-X\n\nit O\nsat O\n"),
        (d / "valid.txt").write_text("\n"),
        [f"--data_dir={d}", f"--vocab_file={w['vocab']}", f"--bert_config_file={w['config']}",
         "--do_train", "--do_eval", f"--output_dir={d}/o", "--max_seq_length=32",
         "--train_batch_size=2"])[-1],
        r"valid\.txt: no sentences found", lambda w, d: not os.path.exists(d / "o")),
    "swag_dev_header_only": ("run_swag.py", lambda w, d: (
        d.mkdir(), (d / "train.csv").write_text(_swag_csv(4)), (d / "val.csv").write_text(
            _swag_csv(0)),
        [f"--data_dir={d}", f"--vocab_file={w['vocab']}", f"--bert_config_file={w['config']}",
         "--do_train", "--do_eval", f"--output_dir={d}/o", "--max_seq_length=32",
         "--train_batch_size=2"])[-1],
        r"val\.csv: no example \(the file holds only its header\)",
        lambda w, d: not os.path.exists(d / "o")),
    "squad_predict_file_without_questions": ("run_squad.py", lambda w, d: (
        d.mkdir(), write_json(d / "p.json", {"data": []}),
        [f"--predict_file={d / 'p.json'}", f"--vocab_file={w['vocab']}",
         f"--bert_config_file={w['config']}", "--do_predict", f"--output_dir={d}/o",
         "--max_seq_length=32", "--max_query_length=8", "--doc_stride=8",
         f"--init_checkpoint={w['pre']}/bert_model.ckpt"])[-1],
        r"--predict_file: .*p\.json has no question", lambda w, d: not os.path.exists(d / "o")),
    # --- one vocabulary rule: [UNK], [CLS], [SEP] required, whichever script reads it ---------
    "cls_vocab_without_unk": ("run_classifier.py", lambda w, d: (
        d.mkdir(), (d / "v.txt").write_text("\n".join(t for t in VOCAB if t != "[UNK]") + "\n"),
        classifier_flags(w)[:2] + [f"--vocab_file={d / 'v.txt'}"] + classifier_flags(w)[3:] + [
            "--do_train", f"--output_dir={d}/o"])[-1],
        r"v\.txt: not a BERT vocabulary: it has no \[UNK\]",
        lambda w, d: not os.path.exists(d / "o")),
    "cpd_vocab_without_unk": ("create_pretraining_data.py", lambda w, d: (
        d.mkdir(), (d / "v.txt").write_text("\n".join(t for t in VOCAB if t != "[UNK]") + "\n"),
        cpd_flags(w, d / "o.tfrecord") + [f"--vocab_file={d / 'v.txt'}"])[-1],
        r"v\.txt: not a BERT vocabulary: it has no \[UNK\]",
        lambda w, d: files_under(d) == ["v.txt"]),
    "cls_export_dir_is_a_file": ("run_classifier.py", lambda w, d: (
        d.mkdir(), (d / "f").write_text("mine"),
        classifier_flags(w) + ["--do_eval", f"--output_dir={w['cls']}", f"--export_dir={d}/f"])[-1],
        r"--export_dir: .*/f is a file, not a directory",
        lambda w, d: (d / "f").read_text() == "mine"),
    # --- run_pretraining.py ----------------------------------------------------------------------
    "pre_empty_record_file": ("run_pretraining.py", lambda w, d: (
        d.mkdir(), (d / "empty.tfrecord").write_bytes(b""),
        pretraining_flags(w, d / "empty.tfrecord", d / "o") + ["--do_train"])[-1],
        r"--input_file: .*empty\.tfrecord: no record in the file", None),
    "pre_eval_only_on_empty_records": ("run_pretraining.py", lambda w, d: (
        d.mkdir(), (d / "empty.tfrecord").write_bytes(b""),
        pretraining_flags(w, d / "empty.tfrecord", w["pre"]) + ["--do_eval"])[-1],
        r"no record in the file", lambda w, d: "eval_results.txt" not in os.listdir(w["pre"])),
    "pre_garbage_records": ("run_pretraining.py", lambda w, d: (
        d.mkdir(), (d / "junk.tfrecord").write_bytes(os.urandom(3000)),
        pretraining_flags(w, d / "junk.tfrecord", d / "o") + ["--do_train"])[-1],
        r"junk\.tfrecord: not a TFRecord file, or truncated or corrupt", None),
    "pre_truncated_records": ("run_pretraining.py", lambda w, d: (
        d.mkdir(), (d / "cut.tfrecord").write_bytes(open(w["records"], "rb").read()[:-50]),
        pretraining_flags(w, d / "cut.tfrecord", d / "o") + ["--do_train",
                                                            "--num_train_steps=200"])[-1],
        r"error: .*cut\.tfrecord: record \d+ is corrupt or truncated", None),
    "pre_flipped_byte_in_the_second_record_file": ("run_pretraining.py", lambda w, d: (
        d.mkdir(), shutil.copy(w["records"], d / "a.tfrecord"),
        _flip_middle_byte(shutil.copy(w["records"], d / "b.tfrecord")),
        pretraining_flags(w, f"{d / 'a.tfrecord'},{d / 'b.tfrecord'}", d / "o") + [
            "--do_train", "--num_train_steps=200"])[-1],
        r"error: .*/b\.tfrecord: record \d+ is corrupt or truncated at byte \d+: the file is "
        r"damaged; expected whole TFRecord files", lambda w, d: not os.path.exists(d / "o")),
    "pre_predictions_mismatch": ("run_pretraining.py", lambda w, d: pretraining_flags(
        w, w["records"], d) + ["--do_train", "--max_predictions_per_seq=7"],
        r"feature 'masked_lm_positions' has length 5 but the flags expect 7", None),
    "pre_classifier_records": ("run_pretraining.py", lambda w, d: pretraining_flags(
        w, os.path.join(w["cls"], "train.tf_record"), d) + ["--do_train"],
        r"train\.tf_record: records have no feature 'masked_lm_", None),
    "pre_input_matches_nothing": ("run_pretraining.py", lambda w, d: pretraining_flags(
        w, d / "none*", d) + ["--do_train"], r"--input_file: .* matches no file", None),
    "pre_finished_run_says_so": ("run_pretraining.py", lambda w, d: (
        shutil.copytree(w["pre"], d), pretraining_flags(w, w["records"], d) + ["--do_train"])[-1],
        r"already holds a checkpoint at step 2, and --num_train_steps is 2: nothing to train", 0),
    # --- run_squad.py, run_ner.py, extract_features.py, export_savedmodel.py -------------------
    "squad_duplicate_question_ids": ("run_squad.py", lambda w, d: (
        d.mkdir(), [f"--predict_file={squad_file(d / 'p.json', ['a', 'b', 'a'])}",
                    f"--vocab_file={w['vocab']}", f"--bert_config_file={w['config']}",
                    "--do_predict", f"--output_dir={d}/o", "--max_seq_length=32",
                    "--max_query_length=8", "--doc_stride=8",
                    f"--init_checkpoint={w['pre']}/bert_model.ckpt"])[-1],
        r"p\.json: question id 'a' appears more than once", None),
    "squad_not_json": ("run_squad.py", lambda w, d: (
        d.mkdir(), (d / "p.json").write_text("nope"),
        [f"--predict_file={d / 'p.json'}", f"--vocab_file={w['vocab']}",
         f"--bert_config_file={w['config']}", "--do_predict", f"--output_dir={d}/o",
         "--max_seq_length=32", "--max_query_length=8", "--doc_stride=8"])[-1], r"p\.json",
        None),
    "ner_bad_tag": ("run_ner.py", lambda w, d: (
        d.mkdir(), (d / "train.txt").write_text("the O\ndog ANIMAL\n"),
        [f"--data_dir={d}", f"--vocab_file={w['vocab']}", f"--bert_config_file={w['config']}",
         "--do_train", f"--output_dir={d}/o", "--max_seq_length=32"])[-1],
        r"train\.txt:2: tag 'ANIMAL' \(last column\) is not O or B-/I-/E-/S-<type>", None),
    "ner_train_file_missing": ("run_ner.py", lambda w, d: [
        f"--data_dir={d}", f"--vocab_file={w['vocab']}", f"--bert_config_file={w['config']}",
        "--do_train", f"--output_dir={d}/o", "--max_seq_length=32"], r"--data_dir: .* not found",
        None),
    "features_layer_out_of_range": ("extract_features.py", lambda w, d: (
        d.mkdir(), (d / "in.txt").write_text("the dog\n"),
        [f"--input_file={d / 'in.txt'}", f"--output_file={d / 'o.jsonl'}", "--layers=-5",
         f"--vocab_file={w['vocab']}", f"--bert_config_file={w['config']}",
         f"--init_checkpoint={w['pre']}/bert_model.ckpt", "--max_seq_length=16"])[-1],
        r"--layers", lambda w, d: files_under(d) == ["in.txt"]),
    "features_empty_input": ("extract_features.py", lambda w, d: (
        d.mkdir(), (d / "in.txt").write_text(""),
        [f"--input_file={d / 'in.txt'}", f"--output_file={d / 'o.jsonl'}", "--layers=-1",
         f"--vocab_file={w['vocab']}", f"--bert_config_file={w['config']}",
         f"--init_checkpoint={w['pre']}/bert_model.ckpt", "--max_seq_length=16"])[-1],
        r"--input_file is empty", lambda w, d: files_under(d) == ["in.txt"]),
    "export_from_pretrained_only": ("export_savedmodel.py", lambda w, d: [
        "--task=classifier", "--task_name=MRPC", f"--vocab_file={w['vocab']}",
        f"--bert_config_file={w['config']}", f"--init_checkpoint={w['pre']}",
        f"--export_dir={d}", "--max_seq_length=32"],
        r"has no glue head \(missing output_weights, output_bias\)",
        lambda w, d: not os.path.exists(d)),
}


def _truncate(path):
  data = path.read_bytes()
  path.write_bytes(data[:len(data) // 2])


def _flip_middle_byte(path):
  """One flipped bit in the middle of a file (a record's payload: its CRC no longer matches)."""
  data = bytearray(open(path, "rb").read())
  data[len(data) // 2] ^= 0x01
  with open(path, "wb") as f:
    f.write(bytes(data))


def _swag_csv(rows):
  header = ("video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,"
            "ending3,label\n")
  return header + "".join(f"v{i},{i},the dog sat,the dog,sat,gold,on a mat,far away,it ran,home,"
                          f"{i % 4}\n" for i in range(rows))


@pytest.fixture(scope="module")
def outcomes(world):
  """Runs every case, two at a time: name -> (CompletedProcess, case directory)."""
  def one(name):
    script, make_flags, _, _, *_ = CASES[name]
    case_dir = world["root"] / "cases" / name
    args = [str(a) for a in make_flags(world, case_dir)]
    return name, (run(script, *args), case_dir)

  return faults.run_cases(world, CASES, one)


@pytest.mark.parametrize("name", list(CASES))
def test_fault(outcomes, world, name):
  _, _, pattern, check = CASES[name][:4]
  expected_status = 1
  if isinstance(check, int) and not isinstance(check, bool):
    expected_status, check = check, None
  result, case_dir = outcomes[name]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  assert result.returncode == expected_status, result.stderr[-3000:]
  if expected_status:
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), last
    assert re.search(pattern, last), last
  else:
    assert re.search(pattern, result.stderr), result.stderr[-3000:]
  if check is not None:
    assert check(world, case_dir)
  leftovers = [f for f in files_under(world["root"]) if ".tmp-" in f or "_temp" in f]
  assert not leftovers


def test_there_are_at_least_40_cases():
  assert len(CASES) >= 40


# --- Kills ----------------------------------------------------------------------------------------

def _children_of(pid):
  children = []
  for entry in os.listdir("/proc"):
    if entry.isdigit():
      try:
        with open(f"/proc/{entry}/stat") as f:
          fields = f.read().rsplit(")", 1)[1].split()
      except OSError:
        continue
      if int(fields[1]) == pid:
        children.append(int(entry))
  return children


def _big_corpus(path, megabytes):
  rng = np.random.RandomState(2)
  words = np.array([w for w in WORDS if not w.startswith("##")])
  lines = [" ".join(words[rng.randint(0, len(words), 12)]) + " ." for _ in range(20000)]
  block = "\n".join(lines) + "\n\n"
  with open(path, "w") as f:
    for _ in range(max(1, int(megabytes * 1e6 / len(block)))):
      f.write(block)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_create_pretraining_data_leaves_no_worker_and_a_rerun_no_debris(world, tmp_path,
                                                                               sig):
  corpus = tmp_path / "big.txt"
  _big_corpus(corpus, 8)
  output = tmp_path / "out.tfrecord"
  args = [sys.executable, os.path.join(REPO, "create_pretraining_data.py"),
          *cpd_flags(world, output, corpus), "--num_workers=2", "--dupe_factor=3",
          "--progress_seconds=1"]
  process = subprocess.Popen(args, cwd=REPO, env=ENV, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
  # Kill it while the workers spool records beside the output.
  deadline = time.time() + 240
  while time.time() < deadline and process.poll() is None:
    if any(p.name.startswith(".out.tfrecord.spool-") and any(p.iterdir())
           for p in tmp_path.iterdir()):
      break
    time.sleep(0.2)
  assert process.poll() is None, "finished before it could be killed: use a larger corpus"
  workers = _children_of(process.pid)
  assert workers
  process.send_signal(sig)
  process.wait(timeout=60)
  time.sleep(1.0)
  assert not [pid for pid in workers if alive(pid)]
  debris = sorted(p.name for p in tmp_path.iterdir() if p.name not in ("big.txt",))
  if sig == signal.SIGTERM:
    assert process.returncode == 128 + signal.SIGTERM
    assert debris == []
  else:
    assert "out.tfrecord" not in debris
  # A rerun of the same output clears what a killed run left and writes the whole output.
  done = run("create_pretraining_data.py", *cpd_flags(world, output, world["root"] / "corpus.txt"),
             "--num_workers=2")
  assert done.returncode == 0, done.stderr[-3000:]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["big.txt", "out.tfrecord"]


def test_sigterm_during_training_keeps_checkpoints_and_resumes(world, tmp_path):
  output_dir = tmp_path / "out"
  process = start_script("run_pretraining.py",
                         *pretraining_flags(world, world["records"], output_dir), "--do_train",
                         "--num_train_steps=100000", "--save_checkpoints_steps=5",
                         "--iterations_per_loop=5", env=ENV)
  deadline = time.time() + 240
  while time.time() < deadline and not list(output_dir.glob("model.ckpt-10.index")):
    assert alive(process.pid), process.stderr.read()[-3000:]
    time.sleep(0.2)
  os.kill(process.pid, signal.SIGTERM)
  assert process.wait(timeout=120) == 128 + signal.SIGTERM
  stopped = [line for line in process.stderr.read().splitlines()
             if line.startswith("terminated")]
  assert len(stopped) == 1 and re.fullmatch(
      rf"terminated: the latest checkpoint, {output_dir}/model\.ckpt-\d+, is kept \(a rerun "
      r"resumes from it\); nothing half-written is left", stopped[0]), stopped
  assert not [pid for pid in _children_of(process.pid) if alive(pid)]
  names = os.listdir(output_dir)
  assert not [n for n in names if ".tmp-" in n or n.endswith("_temp")]
  index = re.compile(r"model\.ckpt-(\d+)\.index")
  steps = sorted(int(m.group(1)) for m in map(index.match, names) if m)
  assert steps and steps[-1] >= 10
  done = run("run_pretraining.py", *pretraining_flags(world, world["records"], output_dir),
             "--do_train", f"--num_train_steps={steps[-1] + 2}", "--save_checkpoints_steps=5")
  assert done.returncode == 0, done.stderr[-3000:]
  assert f"Resuming from {output_dir}/model.ckpt-{steps[-1]}" in done.stderr


# --- Exports: a damaged version, and what a killed export left -----------------------------------

def _dead_pid():
  """The pid of a process that has ended (and been reaped)."""
  probe = subprocess.Popen(["true"])
  probe.wait()
  return probe.pid


def test_a_damaged_export_version_is_skipped_or_named_and_killed_exports_are_cleared(world,
                                                                                     tmp_path,
                                                                                     caplog):
  """A rerun of export_savedmodel.py removes the .tmp-<version>-<pid> folder an export killed
  earlier left (its pid no longer runs), not one of a running export. The predictor serves the
  newest whole version, naming a newer damaged one in a warning (as TF Serving skips a version
  that fails to load); with no whole version, or given a damaged version itself, one BertTfError
  names it."""
  from bert_tf.errors import BertTfError  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import predictor  # pylint: disable=g-import-not-at-top
  export_dir = tmp_path / "export"
  stale, running = export_dir / f".tmp-17-{_dead_pid()}", export_dir / f".tmp-18-{os.getpid()}"
  for folder in (stale, running):
    folder.mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"half")
  flags = ["--task=classifier", "--task_name=MRPC", f"--vocab_file={world['vocab']}",
           f"--bert_config_file={world['config']}", f"--init_checkpoint={world['cls']}",
           f"--export_dir={export_dir}", "--max_seq_length=32"]
  done = run("export_savedmodel.py", *flags)
  assert done.returncode == 0, done.stderr[-3000:]
  assert not stale.exists() and running.exists()
  # A newer version, as a second export would add it (test_export checks that one does).
  first = next(p for p in export_dir.iterdir() if p.name.isdigit())
  shutil.copytree(first, export_dir / str(int(first.name) + 1))
  versions = sorted(p for p in export_dir.iterdir() if p.name.isdigit())
  assert len(versions) == 2
  shutil.rmtree(versions[1] / "variables")
  with caplog.at_level(logging.WARNING):
    served = predictor.load(str(export_dir))
  seen = [r.getMessage() for r in caplog.records]
  assert served([("the dog is hairy .", "the cat sat .")])[0]["label"] in ("0", "1")
  assert [m for m in seen if f"{versions[1]}: a damaged export version (no variables/ "
          f"directory): skipped; serving {versions[0]}, the newest whole one" in m], seen
  with pytest.raises(BertTfError, match=rf"^{versions[1]}: a damaged export \(no variables/"):
    predictor.load(str(versions[1]))
  (versions[0] / "variables" / "variables.index").unlink()
  with pytest.raises(BertTfError, match=rf"^{versions[1]}: a damaged export version \(no "
                                        rf"variables/ directory\), and no whole version before it"):
    predictor.load(str(export_dir))
