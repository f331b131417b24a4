"""create_pretraining_data as an Apache Beam pipeline, for corpora that outgrow one machine.

Each element is a shard index; a worker makes that shard with pipeline.run_shards, so the files
are byte for byte those of a local `--num_shards=N` run (with one shard, the original's records),
and with N > 1 a rerun skips the shards whose outputs already exist. apache-beam is an optional
dependency: only create_pretraining_data.py --beam_runner imports this module.

On a remote runner the workers import bert_tf, so it has to be staged with the job, e.g. for Dataflow
(`pip install 'apache-beam[gcp]' build`: Beam builds an sdist of the repository with `python -m build`):
  --beam_pipeline_options="--project=P --region=R --temp_location=gs://B/tmp --setup_file=./pyproject.toml"
Input, output and vocab paths must then be ones the workers can read and write (gs://...).
"""
import shlex

from bert_tf.data.pretraining_data import algorithm
from bert_tf.data.pretraining_data import pipeline
from bert_tf.errors import BertTfError
from bert_tf.io.progress import summary
from bert_tf.text import tokenization

try:
  import apache_beam as beam
  from apache_beam.metrics.metric import MetricsFilter
  from apache_beam.options.pipeline_options import PipelineOptions
except ImportError:
  raise BertTfError("--beam_runner: needs apache-beam (pip install apache-beam)") from None

# Which shards were written comes back to the driver as one counter per shard: the runner, not this
# process, runs the DoFn, and user counters are how runners report results to the driver.
_METRICS_NAMESPACE = "create_pretraining_data"
_WRITTEN_PREFIX = "shard_written_"


class MakeShard(beam.DoFn):
  """Makes the shard each element names; yields its index, or nothing if its outputs already exist."""

  def __init__(self, input_files, output_files, vocab_file, do_lower_case, options, num_shards,
               progress_seconds=30):
    self.input_files = input_files
    self.output_files = output_files
    self.vocab_file = vocab_file
    self.do_lower_case = do_lower_case
    self.options = options
    self.num_shards = num_shards
    self.progress_seconds = progress_seconds
    self.tokenizer = None

  def setup(self):
    # Once per worker, not per element, and never pickled: the worker reads the vocab itself.
    self.tokenizer = tokenization.FullTokenizer(vocab_file=self.vocab_file, do_lower_case=self.do_lower_case)

  def process(self, shard_index):
    # One process per shard: the runner's workers, not --num_workers, give the parallelism.
    for shard in pipeline.run_shards(self.input_files, self.output_files, self.tokenizer, self.options,
                                        self.num_shards, shard_index, num_workers=1,
                                        progress_seconds=self.progress_seconds):
      beam.metrics.Metrics.counter(_METRICS_NAMESPACE, f"{_WRITTEN_PREFIX}{shard}").inc()
      yield shard


def run(input_files, output_files, vocab_file, do_lower_case, options, num_shards, runner, pipeline_args=(),
        progress_seconds=30):
  """Runs every shard on `runner` and waits; returns the sorted shard indices written (not skipped).

  The indices come from the runner's counters: a runner that reports none gives [] (the files are there).
  """
  # Bad flags fail here in one line, not as a traceback from every worker (and every retry).
  pipeline.check_shards(input_files, output_files, options, num_shards)
  algorithm.Vocab(tokenization.load_vocab(vocab_file))
  make_shard = MakeShard(input_files, output_files, vocab_file, do_lower_case, options, num_shards,
                         progress_seconds)
  beam_pipeline = beam.Pipeline(options=PipelineOptions(list(pipeline_args), runner=runner))
  _ = (beam_pipeline
       | "ShardIndices" >> beam.Create(range(num_shards))
       # Breaks fusion with Create, so that the runner spreads the shards over its workers.
       | "Spread" >> beam.Reshuffle()
       | "MakeShard" >> beam.ParDo(make_shard))
  result = beam_pipeline.run()
  result.wait_until_finish()
  counters = result.metrics().query(MetricsFilter().with_namespace(_METRICS_NAMESPACE))["counters"]
  return sorted({int(c.key.metric.name[len(_WRITTEN_PREFIX):]) for c in counters
                if c.key.metric.name.startswith(_WRITTEN_PREFIX) and (c.committed or c.attempted)})


def main(options):
  """create_pretraining_data.py --beam_runner: the --num_shards shards as an Apache Beam pipeline;
  the runner runs every shard, on as many workers as it has. options: a pipeline.DataOptions."""
  input_files, output_files = pipeline.parsed(options)
  if options.shard_index is not None:
    raise BertTfError("--shard_index: not used with --beam_runner, which makes every shard of "
                      "--num_shards")
  if options.num_workers != 1:
    raise BertTfError("--num_workers: must be 1 with --beam_runner; the runner's workers run "
                      "shards in parallel")
  written = run(input_files, output_files, options.vocab_file, options.do_lower_case,
                options.instances, options.num_shards, options.beam_runner,
                shlex.split(options.beam_pipeline_options),
                progress_seconds=options.progress_seconds)
  summary("Finished", [("records", f"{options.output_file} (shards -NNNNN-of-"
                                   f"{options.num_shards:05d})")],
          {"shards written": len(written)})
