"""What a script shows on the terminal (bert_tf.io.terminal, bert_tf.io.native_log,
bert_tf.cli.flag_errors): TensorFlow's chatter filtered and every line back with -v, our lines as
`HH:MM:SS message`, a flag mistake as one `error:` line, and nothing written before the inputs
are checked."""
import concurrent.futures
import logging
import os
import subprocess
import sys
import time

import pytest

from bert_tf.io import native_log
from bert_tf.io import terminal
from support.paths import REPO
from support.script_runner import run_script
from support import terminal as seen
from support.pretraining_runs import write_config
from support.pretraining_runs import write_pretraining_records
from support.tiny import WORDS
from support.tiny import write_config as write_tiny_config

XLA = b"I0000 00:00:1795804343.684277   12974 device_compiler.h:196] Compiled cluster using XLA!"
CUINIT = (b"E1127 16:39:01.324616  139843 cuda_executor.cc:1228] failed call to cuInit: UNKNOWN "
          b"ERROR (303)")
ONEDNN = (b"E0000 00:00:1764262741.324616    1234 mkl_util.h:1020] oneDNN supports DT_INT64 only "
          b"on platforms with AVX-512. Falling back to the default Eigen-based implementation")
TSL = (b"2026-11-27 18:33:20.870524: I external/local_xla/xla/tsl/cuda/cudart_stub.cc:31] Could "
       b"not find cuda drivers on your machine, GPU will not be used.")
FIRST = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
FATAL = b"F1127 16:39:01.324616  139843 tensor.cc:12] Check failed: dims() == 2"
OURS_ABSL = b"I1127 18:32:03.677189 139962110266240 conll.py:466] a child's Python log line"


@pytest.mark.parametrize("line,is_chatter", [
    (XLA, True), (CUINIT, True), (ONEDNN, True), (TSL, True), (FIRST, True),
    (b"To enable the following instructions: AVX2 FMA, in other operations, rebuild", True),
    (FATAL, False),  # what precedes a crash stays
    (OURS_ABSL, False),  # a .py file's record: Python's, not TensorFlow's C++
    (b"Traceback (most recent call last):", False),
    (b"error: --data_dir: /x/train.tsv: file not found", False),
    (b"Fatal Python error: Segmentation fault", False),
    (b"18:32:04 Saved checkpoint out/model.ckpt-20", False),
])
def test_chatter_is_tensorflows_native_log_but_fatal(line, is_chatter):
  assert native_log.is_chatter(line) == is_chatter


@pytest.mark.parametrize("argv,verbose", [
    (["s.py", "-v"], True), (["s.py", "--v"], True), (["s.py", "--verbosity=1"], True),
    (["s.py", "--verbosity", "2"], True), (["s.py", "-v=1"], True), (["s.py", "-v", "1"], True),
    (["s.py", "--verbosity=0"], False), (["s.py", "-v", "0"], False), (["s.py"], False),
    (["s.py", "--vocab_file=v.txt"], False), (["s.py", "--", "-v"], False),
])
def test_verbose_is_asked_by_v_or_verbosity(argv, verbose):
  assert native_log.verbose_requested(argv) == verbose
  assert "--verbosity=1" in terminal.normalized_argv(["s.py", "-v"])


def test_the_relay_drops_chatter_keeps_the_rest_in_order_and_passes_a_bar_at_once():
  relay = subprocess.Popen([sys.executable, "-I", "-S", native_log.__file__],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
  kept = [b"Traceback (most recent call last):", b'  File "x.py", line 1', FATAL, OURS_ABSL]
  stream = [FIRST, XLA, kept[0], CUINIT, kept[1], ONEDNN, TSL, kept[2], kept[3]]
  relay.stdin.write(b"\n".join(stream) + b"\n")
  relay.stdin.write(b"\r[####......] training: 2/5 steps")  # a live bar: no newline
  relay.stdin.flush()
  os.set_blocking(relay.stdout.fileno(), False)
  expected = b"\n".join(kept) + b"\n\r[####......] training: 2/5 steps"
  got, deadline = b"", time.time() + 30
  while got != expected and time.time() < deadline:
    got += relay.stdout.read() or b""
    time.sleep(0.05)
  assert got == expected  # the bar came through while the pipe was still open
  relay.stdin.write(b"\nI0000 00:00:1.2 1 half_a_line.cc:1] never")  # chatter, cut short
  relay.stdin.close()
  assert relay.wait(timeout=30) == 0
  os.set_blocking(relay.stdout.fileno(), True)
  assert relay.stdout.read() == b"\n"


def test_a_grpc_records_lines_go_with_it_but_not_after_a_line_of_ours():
  """A lost worker's record goes on with its gRPC error's lines: dropped with it, as chatter; the
  same lines after a line that is not chatter pass."""
  grpc = [b"", b"Additional GRPC error information from remote target /job:worker/replica:0/task:0"
          b" while calling /tensorflow.CoordinationService/RegisterTask:",
          b':UNKNOWN:Error received from peer  {grpc_status:4, grpc_message:"Deadline Exceeded"}']
  ours = b"error: --distribution_strategy=multi_worker_mirrored: worker 0 (...) did not connect"
  stream = [TSL] + grpc + [ours] + grpc[1:]
  done = subprocess.run([sys.executable, "-I", "-S", native_log.__file__],
                        input=b"\n".join(stream) + b"\n", capture_output=True, timeout=30)
  assert done.stdout == b"\n".join([ours] + grpc[1:]) + b"\n"


def test_our_records_read_plainly_and_others_show_from_error_up():
  formatter = terminal.PlainFormatter()
  record = logging.LogRecord("absl", logging.WARNING, terminal.__file__, 1, "a %s", ("warning",),
                             None)
  record.created = time.mktime((2026, 11, 27, 18, 32, 4, 0, 0, -1))
  assert formatter.format(record) == "18:32:04 warning: a warning"
  record.levelno = logging.INFO
  assert formatter.format(record) == "18:32:04 a warning"
  ours = terminal.OursOnly("/somewhere/run_ner.py")
  tf_file = os.path.join(os.path.dirname(logging.__file__), "site-packages", "tensorflow", "x.py")

  def record_of(path, level):
    return logging.LogRecord("tensorflow", level, path, 1, "m", (), None)

  assert ours.filter(record_of(terminal.__file__, logging.INFO))
  assert ours.filter(record_of("/somewhere/run_ner.py", logging.INFO))
  assert not ours.filter(record_of(tf_file, logging.INFO))  # "Sharding callback duration"
  assert not ours.filter(record_of(tf_file, logging.WARNING))  # "Found untraced functions"
  assert ours.filter(record_of(tf_file, logging.ERROR))


# ------------------------------------------------------------------ through the scripts


@pytest.fixture(scope="module")
def pretraining(tmp_path_factory):
  tmp_path = tmp_path_factory.mktemp("terminal")
  records = write_pretraining_records(str(tmp_path / "records.tfrecord"), 16, seq_length=8,
                                      max_predictions=2)
  return [f"--bert_config_file={write_config(tmp_path)}", f"--input_file={records}",
          "--max_seq_length=8", "--max_predictions_per_seq=2", "--train_batch_size=8",
          "--num_train_steps=2", "--num_warmup_steps=1", "--do_train"], tmp_path


def test_a_healthy_run_shows_no_chatter_and_all_of_it_with_v(pretraining):
  flags, tmp_path = pretraining
  with concurrent.futures.ThreadPoolExecutor(1) as pool:  # the two runs side by side
    loud_run = pool.submit(run_script, "run_pretraining.py", "-v", *flags,
                           f"--output_dir={tmp_path / 'loud'}")
    quiet = run_script("run_pretraining.py", *flags, f"--output_dir={tmp_path / 'quiet'}")
    loud = loud_run.result()
  assert quiet.returncode == 0, quiet.stderr[-3000:]
  assert seen.chatter(quiet.stderr) == []
  lines = quiet.stderr.splitlines()
  assert [line for line in lines if not seen.OURS.match(line)] == []
  assert any(line.endswith("Saved checkpoint " + str(tmp_path / "quiet" / "model.ckpt-2"))
             for line in lines)
  # The training step compiles with XLA and a checkpoint is saved: TensorFlow's lines about both
  # are there with -v, absl's prefix on ours.
  assert loud.returncode == 0, loud.stderr[-3000:]
  assert "Compiled cluster using XLA!" in loud.stderr
  assert "Sharding callback duration" in loud.stderr
  assert any(" run_dir.py:" in line or " loop.py:" in line for line in seen.chatter(loud.stderr))


@pytest.mark.parametrize("args,expected", [
    (["--num_train_epoch=1"], "error: --num_train_epoch: not a flag of run_ner.py (did you mean "
                              "--num_train_epochs?); run_ner.py --help lists its flags"),
    (["--data_dir=d"], "error: --output_dir: required; run_ner.py --help lists its flags"),
    (["--num_train_epochs=abc", "--data_dir=d", "--vocab_file=v", "--bert_config_file=c",
      "--output_dir=o"], "error: --num_train_epochs: expected a number, got 'abc'; run_ner.py "
                         "--help lists its flags"),
    (["--dtype=fp8", "--data_dir=d", "--vocab_file=v", "--bert_config_file=c", "--output_dir=o"],
     "error: --dtype: expected one of float32, bfloat16, float16, auto, got 'fp8'; run_ner.py "
     "--help lists its flags"),
    (["--do_train=maybe"], "error: --do_train: expected true or false, got 'maybe'; run_ner.py "
                           "--help lists its flags"),
])
def test_a_flag_mistake_is_one_error_line(args, expected):
  done = run_script("run_ner.py", *args)
  assert done.returncode == 1
  assert done.stderr.strip().splitlines() == [expected] and done.stdout == ""


def test_a_missing_input_file_is_named_before_anything_is_written(tmp_path):
  data_dir = tmp_path / "data"
  data_dir.mkdir()
  (data_dir / "train.tsv").write_text("sentence\tlabel\nthe movie was good\t1\n")
  output_dir = tmp_path / "out"
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(WORDS) + "\n")
  done = run_script("run_classifier.py", "--task_name=sst-2", f"--data_dir={data_dir}",
                    f"--vocab_file={vocab}",
                    f"--bert_config_file={write_tiny_config(tmp_path / 'c.json', len(WORDS))}",
                    f"--output_dir={output_dir}", "--do_train", "--do_eval",
                    "--max_seq_length=16")
  assert done.returncode == 1
  assert done.stderr.strip().splitlines() == [
      f"error: --data_dir: {data_dir / 'dev.tsv'}: file not found"]
  assert not output_dir.exists()


@pytest.mark.parametrize("ending,expected", [
    ("raise RuntimeError('a bug')", ["Traceback (most recent call last):", "RuntimeError: a bug"]),
    ("raise BertTfError('--data_dir: /x: not found')", ["error: --data_dir: /x: not found"]),
    ("os.abort()", []),  # the process dies at once: the relay still copies what came before
])
def test_nothing_real_is_lost(tmp_path, ending, expected):
  """Whatever else reaches descriptor 2 (a C++ FATAL line, a line in no log format), the
  script's `error:` line and a bug's traceback are all there, in order; only the chatter is
  gone."""
  script = tmp_path / "script.py"
  script.write_text(f"""import os
from absl import logging
from bert_tf.cli import app
from bert_tf.errors import BertTfError

def main(_):
  logging.info("ours")
  os.write(2, {CUINIT!r} + b"\\n" + {FATAL!r} + b"\\n" + b"a plain native line\\n")
  {ending}

app.run(main)
""")
  if expected:
    done = run_script(str(script))
  else:  # a process of its own: its stderr ends when the relay, which outlives it, closes it
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, PYTHONPATH=REPO))
    assert done.returncode == -6  # SIGABRT
  lines = done.stderr.splitlines()
  assert seen.chatter(done.stderr) == [FATAL.decode()]  # F: what precedes a crash stays
  kept = [line for line in lines if line in (FATAL.decode(), "a plain native line")]
  assert kept == [FATAL.decode(), "a plain native line"]
  assert seen.OURS.match(lines[0]) and lines[0].endswith(" ours")
  for line in expected:
    assert line in lines
  if expected:
    assert lines[-1] == expected[-1]
