"""GPUPlane SDK for training scripts.

The metric API (``gpuplane.init()``, ``run.log()``, offline spooling) arrives
with the metrics work; this package only fixes the name and version so far.
"""

__version__ = "0.1.0"
