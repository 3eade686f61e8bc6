"""NoLoCo, DiLoCo, data parallel and no synchronisation on a small GPT (everything that needs torch).

``config`` (validated settings; the outer step is :class:`noloco.theory.config.OuterConfig`, the
methods are :mod:`noloco.theory.methods`'), ``data``, ``model``, ``train`` (one process or one
replica per torchrun rank), ``exchange`` (how replicas talk), ``validate`` (predicted vs
measured spread), ``bench`` (tokens per second), ``comm_measure`` (gloo timings).
"""
