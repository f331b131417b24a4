"""The model flags, which every script that opens a model has (its options class extends
ModelOptions): --bert_config_file, --init_checkpoint, --vocab_file, --do_lower_case. TensorFlow-free,
as every options class; bert_tf.model.model_files opens what they name."""
import dataclasses
from typing import Optional

from bert_tf.options import MODEL
from bert_tf.options import OUTPUT
from bert_tf.options import option


@dataclasses.dataclass(frozen=True)
class ModelOptions:
  """The model flags (the options classes of the scripts that open a model extend it; a caller
  without one, as convert_checkpoint or a notebook, builds it directly). given: the flags the
  user gave (None: every one that has a value)."""
  bert_config_file: Optional[str] = option(
      None, "The config json file corresponding to the pre-trained BERT model. This specifies "
      "the model architecture. Default: the model's own, where --init_checkpoint holds it "
      "(bert_config.json beside the checkpoint, a Hugging Face model's config.json).", MODEL)
  init_checkpoint: Optional[str] = option(
      None, "Initial checkpoint (usually from a pre-trained BERT model): an original TF1 "
      "checkpoint, one of ours (a prefix or an output_dir) or a Hugging Face directory. Training "
      "resumes a checkpoint of --output_dir instead when there is one. For evaluation or "
      "prediction without training, and for export, the fine-tuned model.", MODEL)
  vocab_file: Optional[str] = option(
      None, "The vocabulary file that the BERT model was trained on. Default: the model's own, "
      "where --init_checkpoint holds it (vocab.txt beside the checkpoint or in the model's "
      "directory).", MODEL)
  do_lower_case: bool = option(
      True, "Whether to lower case the input text. Should be True for uncased models and False "
      "for cased models. Left out, the casing a model records (a fine-tuning run's "
      "task_config.json, a Hugging Face tokenizer_config.json) is used.", MODEL)
  given: Optional[frozenset] = None


# What convert_checkpoint.py reads and writes (bert_tf.model.checkpoints).
FORMATS = ("tf1", "tf2", "hf")


@dataclasses.dataclass(frozen=True)
class ConvertOptions(ModelOptions):
  """convert_checkpoint.py's flags: --input is its model (in place of --init_checkpoint)."""
  LACKS = ("init_checkpoint", "do_lower_case")
  HELP = {"vocab_file": "The vocabulary to write beside --output as vocab.txt (a complete model "
                        "directory); default: the vocab.txt beside --input, if there is one."}

  input: Optional[str] = option(None, "Checkpoint to read: a TF checkpoint prefix or directory, "
                                "or a Hugging Face directory / model.safetensors.")
  output: Optional[str] = option(None, "Where to write: a checkpoint prefix (tf1, tf2) or a "
                                 "directory / .safetensors file (hf).", OUTPUT)
  input_format: Optional[str] = option(
      None, "Format of --input (detected when not given). --bert_config_file is optional for a "
      "Hugging Face input that has its config.json.", choices=FORMATS)
  output_format: Optional[str] = option(None, "Format of --output.", OUTPUT, choices=FORMATS)
  student_layers: Optional[int] = option(
      None, "Write a student of this many layers instead: every k-th layer of --input's encoder "
      "(k = its layers // this; 6 -> 3 takes 0, 2, 4), its embeddings, pooler and heads as they "
      "are, as a TF1 checkpoint with bert_config.json (num_hidden_layers set) and vocab.txt "
      "beside it. --bert_config_file defaults to the bert_config.json beside --input (a run's "
      "output_dir).")
  teacher_layers: Optional[str] = option(None, "As --student_layers, naming the layers of --input "
                                         "to keep, in the student's order, e.g. 0,2,4.")
