"""What several test modules share, under public names, so that no test module imports another or
conftest (tests/conftest.py holds only the pytest fixtures built from these):

  paths.py             the repository, ../shared/data and shared_data() (skips when it is absent)
  script_runner.py     run_script: the top-level scripts run as `python script.py` would, forked
                       from a server that imported TensorFlow once (also a command: $PY in the
                       README test)
  tiny.py              the tiny fine-tuning set-up: vocabulary, bert_config.json, script flags,
                       eval_results.txt read back and compared
  task_data.py         synthetic task data: SST-2, CoNLL (and the module-scoped NER set-up), SWAG,
                       a SQuAD file's own vocabulary, a toy pretraining corpus
  pretraining_runs.py  the tiny pretrainer: its config, pretraining records, run_pretraining.py
                       commands and their eval results
  models.py            in-memory models: the original's variable shapes, random weights, the
                       heads' tiny config and inputs
  exports.py           SavedModel checks: the export config and vocabularies, model inputs
  faults.py            the tiny world that the fault tests run scripts against
  oracle.py            the original release's harness (bert-tensorflow 1.0.4 on TF 2.20)
  original_modules.py  bert_tf.modeling / optimization against the original's, in graph mode
  readme.py            the README and docs/: pages in the order their commands run, fenced
                       blocks, logical lines, links and anchors, the scripts' flags a command uses
  flag_reference.py    docs/flags.md made from the scripts' --help (run it to regenerate)
  terminal.py          a script's output as a person reads it: chatter that must not show, the
                       closing summary's figures
"""
