"""Writes a BERT as TF Hub writes it (convert_checkpoint.py --output_format=tfhub): Model Garden's
own export_tfhub_lib makes both SavedModels, so that they are what tfhub.dev and Kaggle serve:

  DIR/encoder/     input_word_ids, input_mask, input_type_ids -> pooled_output, sequence_output,
                   encoder_outputs, default; assets/vocab.txt; do_lower_case; and `.mlm`
                   (+ masked_lm_positions -> mlm_logits) where the weights hold the masked-LM head
  DIR/preprocess/  strings -> the encoder's inputs (its `tokenize` and `bert_pack_inputs` too),
                   the same ids as FullTokenizer

Our weights go into Model Garden's BertEncoder under its names (tfhub_layout.tf1_name, the inverse of a
reshape), are written as its checkpoint, and export_model restores that as it restores any.
The next-sentence head has no place in TF Hub's encoder and is left out.
"""
import os

from absl import logging
import numpy as np
import tensorflow as tf
import tf_keras
from official.legacy.bert import configs as model_garden_configs
from official.nlp.modeling import models as model_garden_models
from official.nlp.tools import export_tfhub_lib

from bert_tf.errors import BertTfError
from bert_tf.model.formats import output_directory
from bert_tf.model.formats import tfhub_layout

# bert_config's hidden_act -> what Model Garden's get_activation makes the same function of.
_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu", "gelu_exact": tf_keras.activations.gelu,
                "relu": "relu", "tanh": "tanh", "linear": "linear", "": "linear",
                "swish": "swish", "silu": "swish"}
# The preprocessing model's sequence length when called on strings alone (its bert_pack_inputs
# takes any), as TF Hub's BERT preprocessors.
DEFAULT_SEQ_LENGTH = 128


def model_garden_config(config):
  """Model Garden's legacy BertConfig of ours (hidden_act as a function it computes the same)."""
  act = config.hidden_act.lower()
  if act not in _ACTIVATIONS:
    raise BertTfError(f"--output_format=tfhub: hidden_act {config.hidden_act!r} has no Model "
                      f"Garden counterpart")
  values = dict(config.to_dict(), hidden_act=_ACTIVATIONS[act])
  return model_garden_configs.BertConfig(**values)


def _model_garden_model(config, with_mlm):
  """(Model Garden's BertEncoder, and the object whose checkpoint export_model restores), every
  variable built."""
  encoder = export_tfhub_lib.get_bert_encoder(config)
  if not with_mlm:
    return encoder, tf.train.Checkpoint(encoder=encoder)
  from official.modeling import tf_utils  # pylint: disable=import-outside-toplevel
  pretrainer = model_garden_models.BertPretrainerV2(
      encoder_network=encoder, mlm_activation=tf_utils.get_activation(config.hidden_act))
  ids = tf.zeros([1, 2], tf.int32)
  pretrainer({"input_word_ids": ids, "input_mask": ids, "input_type_ids": ids,
              "masked_lm_positions": ids})  # builds the masked-LM head's variables
  return pretrainer, tf.train.Checkpoint(**pretrainer.checkpoint_items)


def _assign(model, tensors):
  """Each Model Garden variable its tensor of `tensors` (TF1 names), reshaped; a variable with
  none is an error (a TF Hub encoder is whole)."""
  missing = []
  for variable in model.variables:
    name = tfhub_layout.tf1_name(variable.name.split(":")[0])
    if name is None or name not in tensors:
      missing.append(name or variable.name)
      continue
    variable.assign(np.reshape(tensors[name], variable.shape).astype(np.float32))
  if missing:
    raise BertTfError(f"--output_format=tfhub: the input lacks {len(missing)} of the encoder's "
                      f"weights (e.g. {missing[0]}): a TF Hub encoder is whole, its pooler "
                      f"included")


def write(output, tensors, config, vocab_file, do_lower_case):
  """Writes DIR/encoder and DIR/preprocess (see the module's docstring) from `tensors` (TF1 name
  -> array) of a model of `config`, vocab_file their asset; returns DIR."""
  output_directory.check_new(output)
  with_mlm = all(name in tensors for name in tfhub_layout.MLM_NAMES)
  if not with_mlm:
    logging.info("%s: no masked-LM head in the input: the encoder has no `mlm` output", output)
  garden_config = model_garden_config(config)
  model, checkpoint = _model_garden_model(garden_config, with_mlm)
  _assign(model, tensors)
  with output_directory.new_directory(output) as tmp:
    weights = checkpoint.save(os.path.join(tmp, "weights", "ckpt"))  # save_counter too
    export_tfhub_lib.export_model(
        os.path.join(tmp, tfhub_layout.ENCODER_DIR), bert_config=garden_config,
        model_checkpoint_path=weights, with_mlm=with_mlm, vocab_file=vocab_file,
        do_lower_case=bool(do_lower_case))
    export_tfhub_lib.export_preprocessing(
        os.path.join(tmp, tfhub_layout.PREPROCESS_DIR), vocab_file=vocab_file,
        do_lower_case=bool(do_lower_case), tokenize_with_offsets=False,
        default_seq_length=min(DEFAULT_SEQ_LENGTH, config.max_position_embeddings))
    tf.io.gfile.rmtree(os.path.join(tmp, "weights"))
  return output
