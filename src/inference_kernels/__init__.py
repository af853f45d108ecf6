"""inference-kernels: a judge for GPU inference kernels and the dataset it judges on."""

__version__ = "0.1.0"
