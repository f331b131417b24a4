"""BERT finetuning runner with TF Hub, as the original's: run_classifier.py's flags and driver,
the model a TF Hub BERT module (--bert_hub_module_handle), its vocabulary and casing its own.

  python run_classifier_with_tfhub.py --task_name=MRPC --do_train --do_eval \
    --data_dir=glue/MRPC --bert_hub_module_handle=bert_en_uncased_L-12_H-768_A-12_4 \
    --output_dir=out/mrpc_hub

The handle is a module's directory: a TF2 SavedModel in TF Hub's BERT signature (tfhub.dev's and
Kaggle's, Model Garden's export_tfhub, convert_checkpoint.py --output_format=tfhub), or one of the
original's TF1 hub.Modules; a tfhub.dev URL is read from tensorflow_hub's cache where it is
there (nothing is downloaded). Its weights are loaded into bert_tf's BERT, which fine-tunes as
run_classifier.py does from --init_checkpoint=DIR.
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()  # Ctrl-C while TensorFlow loads: one line, not a traceback

import dataclasses  # noqa: E402

from absl import flags  # noqa: E402

import run_classifier  # noqa: E402
from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.errors import BertTfError  # noqa: E402
from bert_tf.drivers import finetuning  # noqa: E402
from bert_tf.model.model_options import HubModuleOptions  # noqa: E402
from bert_tf.model.formats import tfhub  # noqa: E402
from bert_tf.tasks import glue  # noqa: E402


def define_flags():
  run_classifier.define_flags()
  bert_flags.define_flags(HubModuleOptions)
  flags.adopt_module_key_flags(bert_flags)  # --helpshort lists run_classifier.py's flags too


def main(_):
  values = bert_flags.values()
  handle = bert_flags.build(HubModuleOptions, values).bert_hub_module_handle
  module = tfhub.module_directory(handle)
  options = bert_flags.finetune_options(glue.GlueTask, values)
  if options.init_checkpoint and options.init_checkpoint != handle:
    raise BertTfError(f"--init_checkpoint: {options.init_checkpoint} and "
                      f"--bert_hub_module_handle {handle} both name the model: leave "
                      f"--init_checkpoint out")
  finetuning.run(glue.GlueTask, dataclasses.replace(options, init_checkpoint=module))


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("data_dir", "task_name", "bert_hub_module_handle", "output_dir")
  app.run(main)
