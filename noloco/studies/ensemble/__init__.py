"""Heterogeneous domain-expert ensembles (HDEE: Ersoy, Kolehmainen & Passamani Andrade 2025, arXiv
2502.19385) next to ddp, diloco and noloco: the zero-communication end of the axis.

``noloco llm ensemble --out DIR`` trains, for every seed, at one budget of training FLOPs, the structure HDEE
publishes (branch-train-merge, Li et al. 2022):

* **seed models**: one per expert size, each trained alone on the mixture of the training domains;
* **chains**: the training domains are ranked by difficulty (the zlib bits per byte of their training text,
  measured before training) and cut into ``experts`` tiers, easiest first; chain k starts from the seed
  model of its size and, in each of ``rounds`` rounds, continues on the next domain of tier k from the
  expert of the round before (its weights; a fresh optimiser); the final ensemble is each chain's last
  expert.

The ensembles differ only in the chains' sizes and steps (:func:`plan.allocation`):

* ``homogeneous``: every expert the base model, ``expert_steps`` per round;
* ``size-heterogeneous`` (HDEE's first form): equal steps, the MLP's hidden units by tier, 3C / 4C / 5C
  (:data:`plan.SIZE_SPREAD`), width and depth unchanged;
* ``step-heterogeneous`` (HDEE's second form): equal size, steps by tier, 0.75 / 1 / 1.25 x
  ``expert_steps`` (:data:`plan.STEP_SPREAD`): harder domains get more;
* ``combined``: the project's extension, not one of HDEE's forms: the MLP by tier and every expert the
  medium expert's FLOPs, so the small experts of the easy domains train longer and the large ones of the
  hard domains shorter.

The medium chain is the same in all four (one set of runs, trained once). ``ddp``, ``diloco``,
``noloco``: ``replicas`` replicas of the base model on the training mixture, the existing trainer. An
expert or a seed model is a one-replica run of :class:`noloco.llm_check.trainer.Trainer` (method ``ddp``
at N = 1: plain training, nothing sent to anyone).

The budget is counted exactly in matmul FLOPs (:meth:`noloco.llm_check.architecture.GPTConfig.train_step_flops`,
forward and backward, attention included; elementwise work excluded): B = experts x (``seed_steps`` +
``rounds`` x ``expert_steps``) x F(base), each chain charged the seed model it starts from (as if each
party trained its own; the homogeneous chains start from one seed model, counted once per chain). The
homogeneous ensemble and HDEE's two forms spend exactly B (their offsets cancel), the baselines whole outer
steps within B, the extension at most B.

Evaluation: for every domain, training and held out, ``eval_windows`` windows of ``ctx`` bytes from its
validation text, taken as segments of ``segment`` consecutive windows. Each model predicts each window from
that window's bytes; an ensemble mixes its experts with the domain posterior ``w_k(t) ∝ prior_k · Π_{s<t}
p_k(x_s)`` over the bytes of the segment before t, with the prior cached from the domain's first
``prior_segments`` segments (:func:`evaluation.cached_log_prior`, HDEE's rule) or fixed at the experts'
domains' training-byte shares, and by the uniform average. Loss in nats per byte; perplexity its exp.

Communication: bytes each replica sends during training (it receives as many), float32 values; see
:func:`communication.communication`.
"""
