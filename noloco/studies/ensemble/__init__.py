"""Heterogeneous domain-expert ensembles (HDEE: Ersoy, Kolehmainen & Passamani Andrade 2025, arXiv
2502.19385) next to ddp, diloco and noloco: the zero-communication end of the axis.

``noloco llm ensemble --out DIR`` trains, for every seed, at one budget of training FLOPs:

* ``homogeneous``: one expert per training domain (:mod:`noloco.llm_check.domains`), every expert the
  base model trained for the same number of steps;
* ``heterogeneous``: the same experts sized and trained by the rule :data:`WIDTH_FACTOR` /
  :data:`COMPUTE_FACTOR`: the training domains are ranked by difficulty (the zlib bits per byte of
  their training text, measured before training) and cut into thirds, easy, medium and hard; an
  expert of group g has ``WIDTH_FACTOR[g]`` times the base width and ``COMPUTE_FACTOR[g]`` times the
  homogeneous expert's FLOPs (the factors average to 1 over the groups, so the ensemble's budget is the
  homogeneous one's), its steps whatever that buys at its size;
* ``ddp``, ``diloco``, ``noloco``: ``replicas`` replicas of the base model on the mixture of the same
  training domains, the existing trainer with the steps the same budget buys.

An expert is a one-replica run of :class:`noloco.llm_check.trainer.Trainer` on its domain's text
(``TrainConfig.domain``), with method ``ddp`` at N = 1: plain training, no outer step, nothing sent
to anyone. Experts of one size start from the same initialisation (the seed's); there is no seed
phase (branch-train-merge's first step), since nothing here is trained before the experts.

The budget is counted exactly in matmul FLOPs (:meth:`noloco.llm_check.architecture.GPTConfig.train_step_flops`,
forward and backward, attention included; elementwise work excluded): B = K x ``expert_steps`` x F(base),
K the number of training domains. Every configuration spends at most B and less than one more step
(of its cheapest unit) below it: experts' steps come in units of :data:`EXPERT_UNIT`, filled greedily;
the baselines' in outer steps of ``inner_steps``.

Evaluation (as HDEE and branch-train-merge do it): for every domain, training and held out, ``eval_windows``
windows of ``ctx`` bytes from its validation text, taken as segments of ``segment`` consecutive windows.
Each model predicts each window from that window's bytes alone (its context); the ensemble mixes its
experts with the domain posterior ``w_k(t) ∝ prior_k · Π_{s<t} p_k(x_s)`` over the bytes of the segment
before t (the experts' own likelihoods; the prior from the training domains' sizes), and, as the
baseline, uniformly. The baselines are evaluated as their replica-mean model (and, for the record, each
replica on its own). Loss in nats per byte; perplexity its exp.

Communication: bytes each replica sends during training (it receives as many), float32 values; see
:func:`communication`.
"""
