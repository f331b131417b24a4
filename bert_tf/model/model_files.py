"""The one door to a model's files, as keras-hub's from_preset: open_model reads a model's
config, weights, vocabulary and casing (Google's release directory, one of our output_dirs, a
Hugging Face directory, and every format bert_tf.model.formats.registry lists), checks them
against each other and against the flags once, and every job and the export use what it returns.

  files = model_files.open_model(options, max_seq_length=options.max_seq_length)
  files.config, files.vocab_file, files.do_lower_case, files.tokenizer, files.init_checkpoint

The model's own files fill what the flags leave out (--bert_config_file, --vocab_file,
--do_lower_case may be left out where --init_checkpoint holds them). Where the model describes
itself (a Hugging Face or TF Hub model, a keras-hub preset), a flag the user gave may only agree
with it: one line says which flag and file disagree. The files beside a TF checkpoint are
defaults a flag replaces. Nothing here runs a TensorFlow op: a job opens its model before its
strategy starts (MultiWorkerMirroredStrategy must come before the first op).
"""
import dataclasses
import os
from typing import Optional

from absl import logging
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.model.config import BertConfig
from bert_tf.model.config import check_max_seq_length
from bert_tf.model.formats import registry
from bert_tf.model.formats.base import Described
from bert_tf.model.formats.tf_checkpoint import CONFIG_FILE
from bert_tf.model.formats.tf_checkpoint import VOCAB_FILE
from bert_tf.text import tokenization

# What two configs must share to be one model (dropout and initializer_range are training's).
ARCHITECTURE = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "hidden_act", "max_position_embeddings", "type_vocab_size")


@dataclasses.dataclass(frozen=True)
class ModelFiles:
  """A model's files as open_model read and checked them. init_checkpoint: the weights as the
  user named them (what bert_tf.model.checkpoints reads), or None; described: what the model's
  own files said (None without --init_checkpoint); tokenizer: a FullTokenizer of vocab_file and
  do_lower_case (None without a vocabulary)."""
  config: BertConfig
  init_checkpoint: Optional[str]
  vocab_file: Optional[str]
  do_lower_case: bool
  bert_config_file: Optional[str] = None
  described: Optional[Described] = None
  tokenizer: Optional[tokenization.FullTokenizer] = dataclasses.field(
      default=None, compare=False, repr=False)

  def resolved(self, options):
    """`options` (a dataclass with model flags' fields) with the values read here."""
    values = {"bert_config_file": self.bert_config_file, "vocab_file": self.vocab_file,
              "do_lower_case": self.do_lower_case}
    fields = {field.name for field in dataclasses.fields(options)}
    return dataclasses.replace(options, **{k: v for k, v in values.items() if k in fields})


def describe(path):
  """What the files of the model at `path` say (a Described), or None when no format reads it
  (a path that is not there: loading it says so)."""
  return registry.describe(path) if path else None


def open_model(options, max_seq_length=None, need_vocab=True, need_config=True,
               checkpoint_flag="--init_checkpoint"):
  """The ModelFiles of `options`' model flags (a ModelOptions, or an options dataclass with their
  fields; one without vocab_file, do_lower_case or given has no such flag). Checks
  max_seq_length (if given) against the config; with need_vocab, a vocabulary is required, read
  into the tokenizer and checked against the config's vocab_size. A BertTfError names the flag (checkpoint_flag: the script's name for
  --init_checkpoint)."""
  given = getattr(options, "given", None)
  init_checkpoint = getattr(options, "init_checkpoint", None)
  described = describe(init_checkpoint)
  config, config_file = _config(options.bert_config_file, described, need_config,
                                checkpoint_flag)
  if config is not None and max_seq_length is not None:
    check_max_seq_length(max_seq_length, config.max_position_embeddings)
  vocab_file = _vocab(getattr(options, "vocab_file", None), described, init_checkpoint,
                      need_vocab, checkpoint_flag)
  do_lower_case = _casing(options, given, described, init_checkpoint)
  tokenizer = None
  if vocab_file and need_vocab:  # else the job reads the vocabulary itself, if at all
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    if config is not None:
      config.check_vocab_size(tokenization.vocab_size(tokenizer.vocab), vocab_file)
  return ModelFiles(config=config, init_checkpoint=init_checkpoint, vocab_file=vocab_file,
                    do_lower_case=do_lower_case, bert_config_file=config_file,
                    described=described, tokenizer=tokenizer)


def _config(bert_config_file, described, needed, checkpoint_flag):
  """(BertConfig or None, the file it was read from or None)."""
  own = described.read_config() if described else None
  if bert_config_file:
    if not fileio.exists(bert_config_file):
      raise BertTfError(f"--bert_config_file: {bert_config_file} not found")
    config = BertConfig.from_json_file(bert_config_file)
    if own is not None and described.authoritative:
      changed = [k for k in ARCHITECTURE if getattr(config, k) != getattr(own, k)]
      if changed:
        raise BertTfError(f"--bert_config_file: {bert_config_file} describes another model than "
                          f"{described.config_file or described.weights} (differs in "
                          f"{', '.join(changed)}): leave --bert_config_file out to use the "
                          f"model's own")
    return config, bert_config_file
  if own is None and needed:
    raise BertTfError(f"--bert_config_file: required: the model's bert_config.json (or a "
                      f"{checkpoint_flag} that holds its config: a checkpoint with "
                      f"bert_config.json beside it, a Hugging Face or TF Hub model)")
  return own, described.config_file if described else None


def _vocab(vocab_file, described, init_checkpoint, needed, checkpoint_flag):
  own = described.vocab_file if described else None
  if vocab_file:
    if not fileio.exists(vocab_file):
      raise BertTfError(f"--vocab_file: {vocab_file} not found")
    if own and described.authoritative and not same_vocabulary(vocab_file, own):
      raise BertTfError(f"--vocab_file: {vocab_file} is not {own}, the vocabulary of "
                        f"{checkpoint_flag} {init_checkpoint}: leave --vocab_file out to use "
                        f"the model's own")
    return vocab_file
  if own is None and needed:
    raise BertTfError(f"--vocab_file: required: the model's vocab.txt (or a {checkpoint_flag} "
                      f"that holds it: a checkpoint with vocab.txt beside it, a Hugging Face or "
                      f"TF Hub model)")
  return own


def same_vocabulary(a, b):
  """Whether two vocabulary files hold the same tokens with the same ids (line ends and a
  trailing newline aside)."""
  return a == b or tokenization.load_vocab(a) == tokenization.load_vocab(b)


def _casing(options, given, described, init_checkpoint):
  """--do_lower_case, or the model's own casing where the flag was not given."""
  flag = getattr(options, "do_lower_case", True)
  own = described.do_lower_case if described else None
  was_given = given is None or "do_lower_case" in given
  if own is not None and (not was_given or described.authoritative):
    if was_given and bool(flag) != own:
      raise BertTfError(f"--do_lower_case: {init_checkpoint} is a{'n un' if own else ' '}cased "
                        f"model: leave --do_lower_case out, or pass --do_lower_case={own}")
    flag = own
  tokenization.validate_case_matches_checkpoint(flag, init_checkpoint)
  return bool(flag)


def _read_bytes(path):
  with tf.io.gfile.GFile(path, "rb") as f:
    return f.read()


def _write_bytes(path, contents):
  with fileio.atomic_output(path) as tmp:
    with tf.io.gfile.GFile(tmp, "wb") as f:
      f.write(contents)


def _config_or_none(path):
  try:
    return BertConfig.from_json_file(path)
  except BertTfError:
    return None


def write_model_files(output_dir, config, vocab_file=None):
  """Writes bert_config.json (unless config is None) (and a copy of vocab_file as vocab.txt) into output_dir, so that
  --bert_config_file, --vocab_file and --init_checkpoint can all point into it.

  A file of that name already there that says something else is the user's: it is left as it is,
  with a warning (nothing the user wrote is replaced).
  """
  tf.io.gfile.makedirs(output_dir)
  config_path = os.path.join(output_dir, CONFIG_FILE)
  if config is None:
    pass
  elif not tf.io.gfile.exists(config_path):
    config.to_json_file(config_path)
  elif _config_or_none(config_path) != config:
    logging.warning("%s already exists and describes another model: left as it is", config_path)
  if not vocab_file:
    return
  vocab_path = os.path.join(output_dir, VOCAB_FILE)
  vocab = _read_bytes(vocab_file)
  if not tf.io.gfile.exists(vocab_path):
    _write_bytes(vocab_path, vocab)
  elif _read_bytes(vocab_path) != vocab:
    logging.warning("%s already exists and differs from --vocab_file %s: left as it is",
                    vocab_path, vocab_file)
