"""The lab source format (``format``), the builder of ``labs/`` from ``solutions/`` (``build``), and ``load``."""
