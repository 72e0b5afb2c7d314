"""GPUPlane SDK for training scripts.

    import gpuplane
    run = gpuplane.init()                      # inside a GPUPlane job: its run
    run = gpuplane.init(project="vision", name="resnet-baseline")   # anywhere else
    run.log({"train/loss": loss, "train/lr": lr}, step=step)
    run.finish()

    h = gpuplane.history(run_id, "train/loss")  # read it back: h.steps, h.values, h.to_arrow()

    start = (gpuplane.resume_step() or -1) + 1  # an attempt after a preemption: its checkpoint
    if gpuplane.resume_path(): model.load_state_dict(torch.load(gpuplane.resume_path()))

Inside a job, ``init`` is always the job's run, whatever it is passed (a
``project`` other than the job's raises; ``name`` renames the run).

``log`` never blocks training: points are batched and sent by a background
thread. Only when the server cannot be reached (or no token is set) do
batches go to the spool (``$GPUCTL_SPOOL_DIR``, else ``~/.gpuctl/spool``),
replayed in order before new data once the server answers; every batch
carries a batch id, so a replayed batch is never stored twice. What the
server refuses (a 4xx) is never dropped and never spooled: it is kept in
the spool's ``quarantine/`` with the server's reason, a warning says so
once, and ``gpuctl sync --quarantined`` sends it after the cause is fixed.
NaN and infinities are kept.
"""

from ._client import Refused
from ._history import History, history
from ._resume import resume_path, resume_step
from ._run import Run, init, write_eval_result
from ._spool import spool_dir, sync

__all__ = ["History", "history", "Refused", "Run", "init", "write_eval_result", "spool_dir", "sync",
           "resume_path", "resume_step"]
__version__ = "0.1.0"
