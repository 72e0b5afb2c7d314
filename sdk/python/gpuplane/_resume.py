"""Where a job's attempt should pick up: the checkpoint the platform
recorded last for the job's run, handed to every attempt after the first
(a preemption, a lost host, a retry) as ``GPUCTL_RESUME_FROM`` and
``GPUCTL_RESUME_STEP``."""

import os


def resume_path():
    """The latest checkpoint recorded for this job's run (``GPUCTL_RESUME_FROM``),
    or ``None`` on a first attempt, outside a job, or when none was recorded.

    Checkpoints are recorded from the job's ``watch_dirs`` and from
    ``$GPUCTL_JOB_DIR``, the folder kept across a job's attempts on a host.
    """
    return os.environ.get("GPUCTL_RESUME_FROM") or None


def resume_step():
    """The step of that checkpoint (``GPUCTL_RESUME_STEP``), or ``None`` when
    there is no checkpoint or its step is not known (a step is read from the
    file's name: ``step_1200.pt``, ``checkpoint-500/``, ``epoch=3.ckpt``).
    The script logs on from the step after it."""
    value = os.environ.get("GPUCTL_RESUME_STEP")
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"gpuplane: GPUCTL_RESUME_STEP is {value!r}, not a step number") from None
