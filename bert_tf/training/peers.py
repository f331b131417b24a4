"""Multi-worker runs whose workers may never start, or die: the run ends within a bound, with one
line naming the worker that was lost and what to do.

MultiWorkerMirroredStrategy runs TensorFlow's coordination service (its leader is worker 0, or
the chief). Set up here before the strategy is made (it must be: TensorFlow reads the settings
once), it ends the run

  * at start-up, when not every worker has connected within --worker_timeout_seconds (by
    default the service would wait for them forever, a blocked process deaf to SIGTERM);
  * while training, when a worker stops sending heartbeats (killed, its machine gone or hung)
    for HEARTBEAT_SECONDS, or --worker_timeout_seconds when that is shorter: every collective
    op of the others is aborted, and they raise.

lost_peer(error) turns what TensorFlow raises then (tens of lines) into a BertTfError naming the
worker, as the cluster (TF_CONFIG) names it; bert_tf.cli.app prints it as the run's one line. A
rerun of every worker resumes from the latest checkpoint, as after any stop.

Tested under MultiWorkerMirroredStrategy with workers on one CPU machine; the TPU strategy has no
such peers (one host; a TPU pod's hosts are TensorFlow's, untested here).
"""
import json
import os
import re
import signal
import threading

import tensorflow as tf

from bert_tf.errors import BertTfError

DEFAULT_TIMEOUT_SECONDS = 300
# How long a worker may send no heartbeat before the others stop: TensorFlow's own default. A
# live worker's heartbeats come from a thread of their own, whatever its training step is doing
# (a long checkpoint save, an evaluation).
HEARTBEAT_SECONDS = 10
_JOBS = ("chief", "worker")
_TASK = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")
# The phrases of TensorFlow's errors when a peer is lost, and what they say of it.
_HEARTBEATS = "stopped sending heartbeats"
_REGISTER_BARRIER = "Wait_for_all_tasks_to_register"
_REGISTER_CALL = "CoordinationService/RegisterTask"
_TIMED_OUT = "timed out task names:"
_ABORTED = "Collective ops is aborted by"
_REMOTE = "from remote target"
_timeout_seconds = DEFAULT_TIMEOUT_SECONDS


def _cluster():
  """{job: [address, ...]} and (job, index) of this task, from TF_CONFIG ({} and None without)."""
  try:
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
  except ValueError:
    return {}, None
  cluster = config.get("cluster") or {}
  task = config.get("task") or {}
  return ({job: list(cluster[job]) for job in _JOBS if isinstance(cluster.get(job), list)},
          (task.get("type"), task.get("index")))


def multi_worker_strategy(timeout_seconds=DEFAULT_TIMEOUT_SECONDS):
  """tf.distribute.MultiWorkerMirroredStrategy, its coordination service bounded as the module
  docstring says. Call before any other TensorFlow op. SIGTERM is Python's again afterwards
  (TensorFlow's preemption notifier takes it over when the service starts: a SIGTERM would
  otherwise be swallowed), so that a training run saves at the notice (bert_tf.training.loop)."""
  global _timeout_seconds
  _timeout_seconds = timeout_seconds
  cluster, _ = _cluster()
  if cluster:
    _configure_coordination_service(cluster, timeout_seconds)
  handler = signal.getsignal(signal.SIGTERM)
  try:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
  except tf.errors.OpError as e:
    lost = lost_peer(e)
    if lost is None:
      raise
    raise lost from None
  if threading.current_thread() is threading.main_thread() and handler is not None:
    signal.signal(signal.SIGTERM, handler)
  return strategy


def _configure_coordination_service(cluster, timeout_seconds):
  # pylint: disable=g-import-not-at-top  (TensorFlow's own, as MultiWorkerMirroredStrategy's)
  from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
  from tensorflow.python.distribute import multi_worker_util
  from tensorflow.python.eager import context
  spec = tf.train.ClusterSpec(cluster)
  timeout_ms = int(timeout_seconds * 1000)
  context.context().configure_coordination_service(
      service_type="standalone", service_leader=multi_worker_util.coordination_leader(spec),
      coordinated_jobs=[coordination_config_pb2.CoordinatedJob(name=job, num_tasks=len(tasks))
                        for job, tasks in cluster.items()],
      cluster_register_timeout_in_ms=timeout_ms,
      heartbeat_timeout_in_ms=min(timeout_ms, HEARTBEAT_SECONDS * 1000),
      shutdown_barrier_timeout_in_ms=timeout_ms)
  # Start-up waits for every worker at a barrier, which times out (not for ever).
  context.context().coordination_service.cluster_register_with_barrier = True


def _name(cluster, job, index):
  addresses = cluster.get(job) or []
  where = f" ({addresses[index]})" if 0 <= index < len(addresses) else ""
  return f"{job} {index}{where}"


def lost_peer(error):
  """The BertTfError of a TensorFlow error (an OpError) that says a worker of this run was lost
  (or never came), naming it as TF_CONFIG does; None for any other error."""
  message = getattr(error, "message", None) or str(error)
  if not isinstance(error, tf.errors.OpError):
    return None
  cluster, me = _cluster()
  flag = "--distribution_strategy=multi_worker_mirrored"
  again = ("start every worker again with the same command (training resumes from the latest "
           "checkpoint)")
  if _HEARTBEATS in message:
    tail = message.split(_HEARTBEATS, 1)[1]
    lost = sorted({(job, int(index)) for job, index in _TASK.findall(tail.split("\n\n")[0])})
    names = ", ".join(_name(cluster, job, index) for job, index in lost) or "a worker"
    return BertTfError(f"{flag}: {names} stopped sending heartbeats for "
                       f"{min(_timeout_seconds, HEARTBEAT_SECONDS)} s (killed, or its machine "
                       f"lost): training stopped; {again}")
  if _ABORTED in message and _REMOTE in message:  # a collective's peer went away: its connection
    job, index = (_TASK.findall(message.split(_REMOTE, 1)[1]) or [("worker", -1)])[0]
    name = _name(cluster, job, int(index)) if int(index) >= 0 else "a worker"
    return BertTfError(f"{flag}: {name} went away in the middle of a step (its connection "
                       f"closed: killed, or its machine lost): training stopped; {again}")
  if _REGISTER_BARRIER in message or _REGISTER_CALL in message:
    named = message.split(_TIMED_OUT, 1)[1].split("\n\n")[0] if _TIMED_OUT in message else ""
    before_call = message.split(_REGISTER_CALL)[0] if _REGISTER_CALL in message else ""
    if _TASK.search(named):  # the leader's barrier says who did not come
      missing = [(job, int(index)) for job, index in _TASK.findall(named)]
    elif _TASK.search(before_call):  # a worker's call to the leader timed out: the leader
      job, index = _TASK.findall(before_call)[-1]
      missing = [(job, int(index))]
    else:
      missing = [(job, i) for job, tasks in cluster.items() for i in range(len(tasks))
                 if (job, i) != me]
    names = " or ".join(_name(cluster, job, index) for job, index in missing) or "a worker"
    return BertTfError(f"{flag}: {names} did not connect within --worker_timeout_seconds="
                       f"{_timeout_seconds:g}: start it with its own TF_CONFIG task index (or "
                       f"check its address, or allow more seconds), then {again}")
  return None
