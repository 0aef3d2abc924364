"""The dataset mode of ``run`` (``npu-sim run --data``): ``run`` plans the shards, runs them as engine tasks and
keeps the manifest; ``task`` is what a worker runs (see docs/DATASETS.md)."""
