"""GPUPlane SDK for training scripts.

    import gpuplane
    run = gpuplane.init()                      # inside a GPUPlane job: its run
    run = gpuplane.init(project="vision", name="resnet-baseline")   # anywhere else
    run.log({"train/loss": loss, "train/lr": lr}, step=step)
    run.finish()

    h = gpuplane.history(run_id, "train/loss")  # read it back: h.steps, h.values, h.to_arrow()

``log`` never blocks training: points are batched and sent by a background
thread. When the server cannot be reached, or no token is set, batches are
appended to ``~/.gpuctl/spool/sdk-*.jsonl``; once the server answers, the
spool is replayed, in order, before new data. Every batch carries a batch
id, so a replayed batch is never stored twice. NaN and infinities are kept.
"""

from ._history import History, history
from ._run import Run, init, write_eval_result
from ._spool import spool_dir, sync

__all__ = ["History", "history", "Run", "init", "write_eval_result", "spool_dir", "sync"]
__version__ = "0.1.0"
