"""Multi-run studies on the harness (each trains many runs and compares them): the predicted vs measured
spread sweep (``validate``), the advice's held-out evaluations (``advice``, ``tune``), the paper's GPT
experiments in miniature (``paper``), fixed vs random routing (``routing``) and the domain-expert
ensemble against ddp, DiLoCo and NoLoCo at equal FLOPs (``ensemble``)."""
